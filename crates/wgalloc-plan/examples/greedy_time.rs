//! Times greedyBySize on the two random 10k sets (criterion's and the JS bench's)
//! plus an adversarial set of long crossing lifetimes, and on the large idealloc
//! instances; prints the best of REPS runs of `plan()` (validation included).
//! Usage: `cargo run --release -p wgalloc-plan --example greedy_time -- [REPS] [FILTER]`.
use std::path::PathBuf;
use std::time::Instant;
use wgalloc_plan::{plan, PlanOptions, Strategy, UsageRecord};

fn xorshift(seed: u64) -> impl FnMut() -> u64 {
    let mut s = seed;
    move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    }
}

fn criterion_set() -> Vec<UsageRecord> {
    let mut next = xorshift(0x9E37_79B9_7F4A_7C15);
    (0..10_000u64)
        .map(|i| {
            let first = i;
            let len = if next().is_multiple_of(20) { next() % 2_000 } else { next() % 40 };
            UsageRecord::new(format!("t{i}"), 256 * (1 + next() % 4096), first, first + len)
        })
        .collect()
}

/// The `planner-greedy-10k` set of `npm run bench` (same LCG as the JS suite).
fn js_set() -> Vec<UsageRecord> {
    let mut seed: u32 = 12345;
    let mut rnd = move || {
        seed = seed.wrapping_mul(1103515245).wrapping_add(12345);
        seed as f64 / 4294967296.0
    };
    (0..10_000)
        .map(|i| {
            let first = (rnd() * 5000.0).floor() as u64;
            let size = 1 + (rnd() * 1e6).floor() as u64;
            let last = first + (rnd() * 200.0).floor() as u64;
            UsageRecord::new(format!("r{i}"), size, first, last)
        })
        .collect()
}

/// Adversarial for bucketed indexes: 20k long, crossing lifetimes (all live mid-way).
fn long_set() -> Vec<UsageRecord> {
    let mut next = xorshift(0x2545_F491_4F6C_DD1D);
    (0..20_000u64)
        .map(|i| {
            let first = next() % 20_000;
            let last = 20_000 + next() % 20_000;
            UsageRecord::new(format!("l{i}"), 64 * (1 + next() % 1024), first, last)
        })
        .collect()
}

fn main() {
    let reps: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(5);
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../bench/data/idealloc");
    let only = std::env::args().nth(2).unwrap_or_default();
    let mut sets = vec![
        ("random10k".to_string(), criterion_set()),
        ("js10k".to_string(), js_set()),
        ("long20k".to_string(), long_set()),
    ];
    for f in ["somas_tensors/pangu_2.6B.csv", "iopddl/S_1.csv", "iopddl/Y_1.csv"] {
        if let Ok(t) = std::fs::read_to_string(root.join(f)) {
            sets.push((f.to_string(), wgalloc_plan::csv::parse(&t).expect("csv")));
        }
    }
    for (name, recs) in sets.iter().filter(|(n, _)| n.contains(&only)) {
        let mut best = f64::MAX;
        let mut slab = 0;
        for _ in 0..reps {
            let t = Instant::now();
            let strat = std::env::var("STRAT").ok().and_then(|s| s.parse().ok()).unwrap_or(Strategy::GreedyBySize);
            let p = plan(recs, PlanOptions::with_strategy(strat)).expect("plan");
            best = best.min(t.elapsed().as_secs_f64() * 1e3);
            slab = p.slab_size();
        }
        println!("{name:<32} slab {slab:>14} best {best:>9.2} ms");
    }
}
