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

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Pairwise check: offsets aligned to the record's and the plan's alignment (both),
/// inside the slab, fixed offsets kept; records sharing a range (`shares_with`,
/// followed to its root) at one offset with lifetimes that at most hand over at one
/// op index, each group taken as one range of its largest size over the union of its
/// lifetimes; and every pair of time-overlapping ranges of one space disjoint.
pub fn naive_check(records: &[UsageRecord], offsets: &[u64], slab: u64, align: u64) -> Result<(), String> {
    if records.len() != offsets.len() {
        return Err("length mismatch".into());
    }
    let n = records.len();
    let root = |mut i: usize| -> Result<usize, String> {
        for _ in 0..=n {
            match &records[i].shares_with {
                None => return Ok(i),
                Some(b) => i = records.iter().position(|q| &q.id == b).ok_or(format!("unknown {b}"))?,
            }
        }
        Err("sharing cycle".into())
    };
    let roots: Vec<usize> = (0..n).map(root).collect::<Result<_, _>>()?;
    // Per group: (size, first, last) merged.
    let mut unit: Vec<(u128, u64, u64)> = records.iter().map(|r| (r.size as u128, r.first, r.last)).collect();
    for (i, r) in records.iter().enumerate() {
        let own = r.alignment.unwrap_or(1);
        let a = own / gcd(own, align) * align;
        if !offsets[i].is_multiple_of(a) {
            return Err(format!("{} misaligned", r.id));
        }
        if offsets[i] as u128 + r.size as u128 > slab as u128 {
            return Err(format!("{} out of slab", r.id));
        }
        if r.offset.is_some_and(|f| f != offsets[i]) {
            return Err(format!("{} moved from its fixed offset", r.id));
        }
        let g = roots[i];
        if g != i {
            if offsets[g] != offsets[i] || records[g].space != r.space {
                return Err(format!("{} not at the offset of {}", r.id, records[g].id));
            }
            let u = &mut unit[g];
            *u = (u.0.max(r.size as u128), u.1.min(r.first), u.2.max(r.last));
        }
    }
    for i in 0..n {
        for j in i + 1..n {
            let (r, q) = (&records[i], &records[j]);
            if roots[i] == roots[j] {
                let (x, y) = if (r.first, r.last) <= (q.first, q.last) { (r, q) } else { (q, r) };
                if y.first < x.last {
                    return Err(format!("{} and {} share a range while both live", x.id, y.id));
                }
                continue;
            }
            if roots[i] != i || roots[j] != j || r.space != q.space {
                continue;
            }
            let (ur, uq) = (unit[i], unit[j]);
            let time = ur.1 <= uq.2 && uq.1 <= ur.2;
            let (a0, a1) = (offsets[i] as u128, offsets[i] as u128 + ur.0);
            let (b0, b1) = (offsets[j] as u128, offsets[j] as u128 + uq.0);
            let mem = a0 < b1 && b0 < a1 && ur.0 > 0 && uq.0 > 0;
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
