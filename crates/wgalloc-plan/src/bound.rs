//! Lower bound: the largest total size of records live at one op index (LOAD).
//! It ignores alignment padding, so with alignment > 1 it may be unreachable.

use crate::error::PlanError;
use crate::record::{Problem, UsageRecord};

/// LOAD of `records`: max over op indices of the sum of sizes live there.
/// Errors only if that sum overflows u64 (or the records are invalid).
pub fn lower_bound(records: &[UsageRecord]) -> Result<u64, PlanError> {
    let p = Problem::new(records, 1)?;
    Ok(load_profile(&p).into_iter().max().unwrap_or(0))
}

/// Live bytes at each compressed point. Sizes were checked to sum within u64.
pub(crate) fn load_profile(p: &Problem) -> Vec<u64> {
    // Difference array over points; totals never exceed the checked sum.
    let mut diff = vec![0i128; p.points + 1];
    for i in 0..p.len() {
        diff[p.first[i]] += p.size[i] as i128;
        diff[p.last[i] + 1] -= p.size[i] as i128;
    }
    let mut out = Vec::with_capacity(p.points);
    let mut acc = 0i128;
    for d in &diff[..p.points] {
        acc += d;
        out.push(acc as u64);
    }
    out
}

pub(crate) fn problem_lower_bound(p: &Problem) -> u64 {
    load_profile(p).into_iter().max().unwrap_or(0)
}
