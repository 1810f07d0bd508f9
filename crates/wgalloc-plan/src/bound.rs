//! Lower bounds. LOAD is the largest total size of records live at one op index.
//! With alignment the planners report a stronger bound that every plan also meets:
//! at each op index the highest live record sits at an aligned offset above all the
//! others live there, and every height is a multiple of the sizes' and alignments'
//! common divisor (see [`aligned_lower_bound`]).

use crate::error::PlanError;
use crate::record::{gcd, Problem, UsageRecord};

/// LOAD of `records`: max over op indices of the sum of sizes live there (alignment
/// padding, sharing and spaces not counted). Errors only if that sum overflows u64
/// (or the records are invalid).
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

/// GCD of sizes, alignments and fixed offsets: some optimal plan has every offset
/// and its height a multiple of it (push every free record down to the lowest
/// aligned offset above the records below it).
pub(crate) fn granularity(p: &Problem) -> u64 {
    let g = (0..p.len()).filter(|&i| p.size[i] > 0).fold(0, |g, i| {
        let g = gcd(gcd(g, p.size[i]), p.align[i]);
        p.fixed[i].map_or(g, |o| gcd(g, o))
    });
    g.max(1)
}

/// Points at which the aligned bound is evaluated (by load, highest first): each
/// costs a pass over the records.
const ALIGNED_POINTS: usize = 64;

/// The bound every plan meets, with the compressed point that gives it:
/// * at a point with live set S, the highest record i of S sits at an offset that is
///   a multiple of its alignment and at least the sum of the others' sizes, so the
///   height is at least `min_i align_up(size(S) - size_i, a_i) + size_i` (>= LOAD);
/// * the end of every fixed record;
/// * rounded up to the [`granularity`].
pub(crate) fn aligned_lower_bound(p: &Problem) -> (u64, usize) {
    let load = load_profile(p);
    // The earliest point of the highest load.
    let (mut best, mut at) =
        load.iter().enumerate().map(|(t, &l)| (l, std::cmp::Reverse(t))).max().map_or((0, 0), |(l, t)| (l, t.0));
    let max_align = p.align.iter().copied().max().unwrap_or(1);
    if max_align > 1 {
        let mut pts: Vec<usize> = (0..p.points).collect();
        pts.sort_by_key(|&t| std::cmp::Reverse(load[t]));
        for &t in pts.iter().take(ALIGNED_POINTS) {
            if load[t].saturating_add(max_align - 1) <= best {
                break; // no later point can beat it
            }
            let total = load[t];
            let top = (0..p.len())
                .filter(|&i| p.size[i] > 0 && p.first[i] <= t && t <= p.last[i])
                .map(|i| {
                    let below = total - p.size[i];
                    below.div_ceil(p.align[i]).saturating_mul(p.align[i]).saturating_add(p.size[i])
                })
                .min()
                .unwrap_or(0);
            if top > best {
                (best, at) = (top, t);
            }
        }
    }
    for i in 0..p.len() {
        if let Some(o) = p.fixed[i] {
            let end = o.saturating_add(p.size[i]);
            if end > best {
                (best, at) = (end, p.first[i]);
            }
        }
    }
    let g = granularity(p);
    (best.div_ceil(g).saturating_mul(g), at)
}
