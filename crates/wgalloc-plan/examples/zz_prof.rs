// TEMPORARY profiling harness (to delete).
use std::time::Instant;
use wgalloc_plan::{plan, PlanOptions, Strategy, UsageRecord};
pub fn random_records(n: usize, seed: u64) -> Vec<UsageRecord> {
    let mut s = seed;
    let mut next = move || { s ^= s << 13; s ^= s >> 7; s ^= s << 17; s };
    (0..n).map(|i| {
        let first = (i as u64 * 10_000) / n as u64;
        let len = if next() % 20 == 0 { next() % 2_000 } else { next() % 40 };
        UsageRecord::new(format!("t{i}"), 256 * (1 + next() % 4096), first, first + len)
    }).collect()
}
fn cpu_ns() -> u64 { std::fs::read_to_string("/proc/thread-self/schedstat").unwrap().split_whitespace().next().unwrap().parse().unwrap() }
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let what = args.first().cloned().unwrap_or("random".into());
    let iters: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(50);
    let strat: Strategy = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(Strategy::GreedyBySize);
    if what == "suite" {
        let root = "/work/shared/bench";
        let mut files = vec![];
        for d in ["pisarchyk_fig6", "minimalloc/examples", "minimalloc/challenging", "idealloc/somas_tensors", "idealloc/iopddl"] {
            for e in std::fs::read_dir(format!("{root}/{d}")).unwrap() { let p = e.unwrap().path(); if p.extension().is_some_and(|x| x == "csv") { files.push(p); } }
        }
        files.sort();
        let mut rr = vec![("random".to_string(), random_records(10_000, 0x9E37_79B9_7F4A_7C15))];
        for f in files { rr.push((f.display().to_string(), wgalloc_plan::csv::parse(&std::fs::read_to_string(&f).unwrap()).unwrap())); }
        for (name, recs) in rr {
            for s in [Strategy::GreedyBySize, Strategy::GreedyByBreadth, Strategy::Portfolio] {
                let t = Instant::now();
                let p = plan(&recs, PlanOptions::with_strategy(s)).unwrap();
                let ms = t.elapsed().as_secs_f64() * 1e3;
                let mut h = 0u64;
                for (i, &o) in p.offsets().iter().enumerate() { h = h.wrapping_mul(1_000_003).wrapping_add(o ^ i as u64); }
                println!("{name} {s:?} slab {} method {} hash {h:x} ({ms:.1} ms)", p.slab_size(), p.method());
            }
        }
        return;
    }
    let recs = if what == "random" { random_records(10_000, 0x9E37_79B9_7F4A_7C15) } else {
        let t = std::fs::read_to_string(&what).unwrap(); wgalloc_plan::csv::parse(&t).unwrap() };
    let mut best = f64::MAX; let mut h = 0u64; let mut bcpu = f64::MAX; let mut cpus = vec![];
    for _ in 0..iters {
        let t = Instant::now();
        let c0 = cpu_ns();
        let p = plan(&recs, PlanOptions::with_strategy(strat)).unwrap();
        let c = (cpu_ns() - c0) as f64 / 1e6; bcpu = bcpu.min(c); cpus.push(c);
        best = best.min(t.elapsed().as_secs_f64() * 1e3);
        for (i, &o) in p.offsets().iter().enumerate() { h = h.wrapping_mul(1_000_003).wrapping_add(o ^ i as u64); }
        h = h.wrapping_add(p.slab_size());
    }
    cpus.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!("{what} {strat:?} best {best:.2} ms cpu min {bcpu:.2} med {:.2} hash {h:x}", cpus[cpus.len() / 2]);
}
