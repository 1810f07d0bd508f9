//! Anytime semantics of `exact`/`best`: progress reports never get worse, and
//! cancelling returns the best plan reported so far.
mod common;
use common::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wgalloc_plan::{plan, PlanOptions, Progress, Strategy, UsageRecord};

/// Deterministic records with mixed lifetimes, hard enough to keep the search busy.
fn records(n: usize, seed: u64) -> Vec<UsageRecord> {
    let mut s = seed;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    (0..n)
        .map(|i| {
            let first = next() % 60;
            let len = next() % 12;
            UsageRecord::new(format!("r{i}"), 1024 * (1 + next() % 64), first, first + len)
        })
        .collect()
}

/// Instances to run on: MiniMalloc D (never solved at its bound), a synthetic one,
/// and one too large for the exact search (the improvement phase runs there).
fn instances() -> Vec<Vec<UsageRecord>> {
    let mut v = vec![records(220, 0x2545_F491_4F6C_DD1D), records(4000, 0x9E37_79B9_7F4A_7C15)];
    v.push(load_csv(&bench_dir("minimalloc/challenging").join("D.1048576.csv")));
    v
}

type Log = Arc<Mutex<Vec<Progress>>>;

fn logging(log: &Log) -> wgalloc_plan::ProgressFn {
    let log = log.clone();
    Box::new(move |p: Progress| log.lock().unwrap().push(p))
}

fn assert_monotone(log: &[Progress]) {
    assert!(!log.is_empty(), "no progress reported");
    for w in log.windows(2) {
        assert!(w[1].best <= w[0].best, "best went up: {:?} -> {:?}", w[0], w[1]);
        assert!(w[1].lower_bound >= w[0].lower_bound, "bound went down: {:?} -> {:?}", w[0], w[1]);
        assert!(w[1].elapsed >= w[0].elapsed);
    }
    for p in log {
        assert!(p.lower_bound <= p.best, "{p:?}");
    }
}

#[test]
fn progress_best_never_increases() {
    for recs in instances() {
        for strategy in [Strategy::Best, Strategy::Exact] {
            let log: Log = Arc::default();
            let opts = PlanOptions {
                strategy,
                time_limit: Some(Duration::from_millis(400)),
                progress: Some(logging(&log)),
                ..Default::default()
            };
            let p = plan(&recs, opts).unwrap();
            check_plan(&p).unwrap();
            let log = log.lock().unwrap();
            assert_monotone(&log);
            // The plan returned is the last (best) one reported.
            assert_eq!(p.slab_size(), log.last().unwrap().best, "{strategy}");
            // The bound reported last is the plan's own.
            assert_eq!(log.last().unwrap().lower_bound, p.lower_bound(), "{strategy}");
        }
    }
}

#[test]
fn cancel_returns_best_so_far() {
    for recs in instances() {
        // Cancelled from another thread while searching, under a long time limit.
        let cancel = Arc::new(AtomicBool::new(false));
        let log: Log = Arc::default();
        let flag = cancel.clone();
        let stopper = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(150));
            flag.store(true, Ordering::Relaxed);
        });
        let start = Instant::now();
        let opts = PlanOptions {
            strategy: Strategy::Best,
            time_limit: Some(Duration::from_secs(120)),
            cancel: Some(cancel.clone()),
            progress: Some(logging(&log)),
            ..Default::default()
        };
        let p = plan(&recs, opts).unwrap();
        stopper.join().unwrap();
        assert!(start.elapsed() < Duration::from_secs(30), "cancel ignored: {:?}", start.elapsed());
        check_plan(&p).unwrap();
        let log = log.lock().unwrap();
        assert_monotone(&log);
        assert_eq!(p.slab_size(), log.iter().map(|x| x.best).min().unwrap());

        // Cancelled at the first report: the portfolio's plan comes back unchanged.
        let cancel = Arc::new(AtomicBool::new(false));
        let flag = cancel.clone();
        let first: Arc<Mutex<Option<u64>>> = Arc::default();
        let seen = first.clone();
        let opts = PlanOptions {
            strategy: Strategy::Best,
            time_limit: Some(Duration::from_secs(120)),
            cancel: Some(cancel),
            progress: Some(Box::new(move |p: Progress| {
                seen.lock().unwrap().get_or_insert(p.best);
                flag.store(true, Ordering::Relaxed);
            })),
            ..Default::default()
        };
        let p = plan(&recs, opts).unwrap();
        let portfolio = plan(&recs, PlanOptions::with_strategy(Strategy::Portfolio)).unwrap();
        check_plan(&p).unwrap();
        assert_eq!(Some(p.slab_size()), *first.lock().unwrap());
        assert!(p.slab_size() <= portfolio.slab_size());
    }
}
