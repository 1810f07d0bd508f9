//! Shared test helpers: bench data location and an independent O(n^2) checker
//! written separately from the crate's `validate`.
#![allow(dead_code)]

use std::path::PathBuf;
use wgalloc_plan::{Plan, UsageRecord};

/// A folder of the repository's `bench/data`. Missing data fails the test: it never skips.
pub fn bench_dir(sub: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../bench/data").join(sub);
    assert!(d.is_dir(), "benchmark data {} is missing from the repository", d.display());
    d
}

pub fn load_csv(path: &std::path::Path) -> Vec<UsageRecord> {
    let text = std::fs::read_to_string(path).expect("read bench csv");
    wgalloc_plan::csv::parse(&text).expect("parse bench csv")
}

/// Pairwise check: every pair of time-overlapping records is disjoint in bytes,
/// each offset aligned and inside the slab.
pub fn naive_check(records: &[UsageRecord], offsets: &[u64], slab: u64, align: u64) -> Result<(), String> {
    if records.len() != offsets.len() {
        return Err("length mismatch".into());
    }
    for (i, r) in records.iter().enumerate() {
        let a = r.alignment.unwrap_or(1).max(align);
        if !offsets[i].is_multiple_of(a) {
            return Err(format!("{} misaligned", r.id));
        }
        let end = offsets[i] as u128 + r.size as u128;
        if end > slab as u128 {
            return Err(format!("{} out of slab", r.id));
        }
        for (j, q) in records.iter().enumerate().skip(i + 1) {
            let time = r.first <= q.last && q.first <= r.last;
            let (a0, a1) = (offsets[i] as u128, end);
            let (b0, b1) = (offsets[j] as u128, offsets[j] as u128 + q.size as u128);
            let mem = a0 < b1 && b0 < a1 && r.size > 0 && q.size > 0;
            if time && mem {
                return Err(format!("{} and {} collide", r.id, q.id));
            }
        }
    }
    Ok(())
}

pub fn check_plan(p: &Plan) -> Result<(), String> {
    naive_check(p.records(), p.offsets(), p.slab_size(), p.alignment())
}
