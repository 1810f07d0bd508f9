//! Greedy placement in a given order: each record goes into a gap of the bytes
//! occupied by already placed, time-overlapping records, else on top of them.
//! With `Fit::Best` and size order this is Pisarchyk & Lee's greedy by size.

use crate::error::{add, align_up, PlanError};
use crate::index::Occupancy;
use crate::record::Problem;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fit {
    /// Smallest gap that fits (lowest on ties), else on top (Pisarchyk & Lee).
    Best,
    /// Lowest gap that fits, else on top.
    First,
}

impl Fit {
    pub fn as_str(self) -> &'static str {
        match self {
            Fit::Best => "bestFit",
            Fit::First => "firstFit",
        }
    }
}

/// Places records in `order` (a permutation of `0..p.len()`); returns offsets.
pub(crate) fn place(p: &Problem, order: &[usize], fit: Fit) -> Result<Vec<u64>, PlanError> {
    let mut occ = Occupancy::new(p.points);
    let mut offsets = vec![0u64; p.len()];
    for &i in order {
        let (size, a) = (p.size[i], p.align[i]);
        if size == 0 {
            continue; // needs no bytes; offset 0 is aligned and overlaps nothing
        }
        let mut prev = 0u64;
        let mut best: Option<(u64, u64)> = None; // (gap length, offset)
        for &(s, e) in occ.occupied(p.first[i], p.last[i]) {
            let cand = align_up(prev, a)?;
            if cand < s && s - cand >= size {
                let gap = s - prev;
                match fit {
                    Fit::First => {
                        best = Some((gap, cand));
                        break;
                    }
                    Fit::Best => {
                        if best.is_none_or(|(g, _)| gap < g) {
                            best = Some((gap, cand));
                        }
                    }
                }
            }
            prev = prev.max(e);
        }
        let o = match best {
            Some((_, o)) => o,
            None => align_up(prev, a)?,
        };
        let end = add(o, size, "greedy offset")?;
        occ.insert(p.first[i], p.last[i], o, end);
        offsets[i] = o;
    }
    Ok(offsets)
}
