//! Small, fast planner benches: greedyBySize on 10,000 random records and the
//! portfolio on ResNet-50 (idealloc's somas dump, in `bench/data`).
use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use std::path::PathBuf;
use wgalloc_plan::{plan, PlanOptions, Strategy, UsageRecord};

/// Deterministic records shaped like a DNN trace: 10k ops, mostly short lifetimes.
pub fn random_records(n: usize, seed: u64) -> Vec<UsageRecord> {
    let mut s = seed;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    (0..n)
        .map(|i| {
            let first = (i as u64 * 10_000) / n as u64;
            let len = if next() % 20 == 0 { next() % 2_000 } else { next() % 40 };
            UsageRecord::new(format!("t{i}"), 256 * (1 + next() % 4096), first, first + len)
        })
        .collect()
}

fn benches(c: &mut Criterion) {
    let recs = random_records(10_000, 0x9E37_79B9_7F4A_7C15);
    c.bench_function("greedyBySize/random10k", |b| {
        b.iter(|| plan(black_box(&recs), PlanOptions::with_strategy(Strategy::GreedyBySize)).map(|p| p.slab_size()))
    });
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../bench/data/idealloc/somas_tensors/resnet50.csv");
    // The data ships with the repository: a missing file is an error, not a skipped bench.
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let r = wgalloc_plan::csv::parse(&text).expect("resnet50 csv");
    c.bench_function("portfolio/resnet50", |b| {
        b.iter(|| plan(black_box(&r), PlanOptions::with_strategy(Strategy::Portfolio)).map(|p| p.slab_size()))
    });
}

criterion_group! {
    name = planner;
    config = Criterion::default().sample_size(20);
    targets = benches
}
criterion_main!(planner);
