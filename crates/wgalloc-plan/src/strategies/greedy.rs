//! Greedy placement in a given order: each record goes into a gap of the bytes
//! occupied by already placed, time-overlapping records, else on top of them.
//! With `Fit::Best` and size order this is Pisarchyk & Lee's greedy by size.

use super::{Stop, STOP_POLL};
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

/// Time points per occupancy bucket: about 256 lifetime endpoints per bucket (points
/// hold 1 to 2n endpoints), so an edge bucket's unmerged list stays short to scan while
/// long lifetimes still span few buckets. 128 to 512 measured within noise of each
/// other on the bench instances; 32 or 1024 were up to 1.5x slower.
fn bucket_width(p: &Problem) -> usize {
    (256 * p.points / (2 * p.len()).max(1)).max(1)
}

/// Places records in `order` (a permutation of `0..p.len()`); returns offsets.
/// `stop` is polled every [`STOP_POLL`] records: once it says so, placement gives up with
/// [`PlanError::Stopped`] (a million records take seconds; abort must not).
pub(crate) fn place(p: &Problem, order: &[usize], fit: Fit, stop: Stop) -> Result<Vec<u64>, PlanError> {
    place_with(p, order, fit, bucket_width(p), stop)
}

fn place_with(p: &Problem, order: &[usize], fit: Fit, width: usize, stop: Stop) -> Result<Vec<u64>, PlanError> {
    let mut occ = Occupancy::new(p.points, width);
    let mut offsets = vec![0u64; p.len()];
    let mut placed = vec![false; p.len()];
    pin(p, &mut occ, &mut offsets, &mut placed)?;
    for chunk in order.chunks(STOP_POLL) {
        if stop() {
            return Err(PlanError::Stopped);
        }
        place_into(p, &mut occ, chunk, fit, &mut offsets, &mut placed)?;
    }
    Ok(offsets)
}

/// Places fixed records at their offsets, then preferred ones where their bytes are
/// still free over their lifetime (in index order), marking them placed.
pub(crate) fn pin(p: &Problem, occ: &mut Occupancy, offsets: &mut [u64], placed: &mut [bool]) -> Result<(), PlanError> {
    for i in 0..p.len() {
        if let Some(o) = p.fixed[i] {
            put(p, occ, i, o, offsets, placed)?;
        }
    }
    for i in 0..p.len() {
        let Some(o) = p.preferred[i] else { continue };
        if placed[i] || !o.is_multiple_of(p.align[i]) {
            continue;
        }
        let Some(end) = o.checked_add(p.size[i]) else { continue };
        let mut free = true;
        occ.scan(p.first[i], p.last[i], |s, e| {
            if s >= end {
                return false; // ranges come by start: none further can overlap
            }
            free &= e <= o;
            free
        });
        if free {
            put(p, occ, i, o, offsets, placed)?;
        }
    }
    Ok(())
}

fn put(
    p: &Problem,
    occ: &mut Occupancy,
    i: usize,
    o: u64,
    offsets: &mut [u64],
    placed: &mut [bool],
) -> Result<(), PlanError> {
    if p.size[i] > 0 {
        occ.insert(p.first[i], p.last[i], o, add(o, p.size[i], "pinned offset")?);
    }
    offsets[i] = o;
    placed[i] = true;
    Ok(())
}

/// Places the records of `order` not yet `placed` around those already in `occ`.
pub(crate) fn place_into(
    p: &Problem,
    occ: &mut Occupancy,
    order: &[usize],
    fit: Fit,
    offsets: &mut [u64],
    placed: &mut [bool],
) -> Result<(), PlanError> {
    for &i in order {
        let (size, a) = (p.size[i], p.align[i]);
        if placed[i] {
            continue;
        }
        placed[i] = true;
        if size == 0 {
            offsets[i] = 0; // needs no bytes; offset 0 is aligned and overlaps nothing
            continue;
        }
        let mut prev = 0u64; // highest end so far
        let mut best: Option<(u64, u64)> = None; // (gap length, offset)
        let mut failed = None;
        // Ranges come by start but may overlap, so a free gap `[prev, s)` opens only
        // where `s > prev`: exactly the gaps of their coalesced union.
        occ.scan(p.first[i], p.last[i], |s, e| {
            if s > prev {
                let cand = match align_up(prev, a) {
                    Ok(c) => c,
                    Err(err) => {
                        failed = Some(err);
                        return false;
                    }
                };
                if cand < s && s - cand >= size {
                    let gap = s - prev;
                    match fit {
                        Fit::First => {
                            best = Some((gap, cand));
                            return false;
                        }
                        Fit::Best => {
                            if best.is_none_or(|(g, _)| gap < g) {
                                best = Some((gap, cand));
                            }
                        }
                    }
                }
            }
            prev = prev.max(e);
            true
        });
        if let Some(err) = failed {
            return Err(err);
        }
        let o = match best {
            Some((_, o)) => o,
            None => align_up(prev, a)?,
        };
        let end = add(o, size, "greedy offset")?;
        occ.insert(p.first[i], p.last[i], o, end);
        offsets[i] = o;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::UsageRecord;
    use crate::strategies::orders::Order;

    /// The seeds' O(n^2) greedy: scan every placed, time-overlapping record by offset.
    fn reference(p: &Problem, order: &[usize], fit: Fit) -> Vec<u64> {
        let mut offsets = vec![0u64; p.len()];
        let mut placed: Vec<usize> = Vec::new();
        for &i in order {
            if p.size[i] == 0 {
                continue;
            }
            let mut live: Vec<(u64, u64)> = placed
                .iter()
                .filter(|&&j| p.first[j] <= p.last[i] && p.first[i] <= p.last[j])
                .map(|&j| (offsets[j], offsets[j] + p.size[j]))
                .collect();
            live.sort_unstable();
            let (mut prev, mut best) = (0u64, None::<(u64, u64)>);
            for (s, e) in live {
                let cand = prev.div_ceil(p.align[i]) * p.align[i];
                if cand < s && s - cand >= p.size[i] && best.is_none_or(|(g, _)| fit == Fit::Best && s - prev < g) {
                    best = Some((s - prev, cand));
                }
                prev = prev.max(e);
            }
            offsets[i] = best.map_or(prev.div_ceil(p.align[i]) * p.align[i], |b| b.1);
            placed.push(i);
        }
        offsets
    }

    #[test]
    fn matches_reference_greedy_at_every_bucket_width() {
        let mut next = crate::test_rng::below(0x9E37_79B9_7F4A_7C15u64);
        for round in 0..40 {
            let n = 1 + next(300) as usize;
            let horizon = 1 + next(400);
            let recs: Vec<UsageRecord> = (0..n)
                .map(|i| {
                    let first = next(horizon);
                    let len = if next(8) == 0 { next(horizon) } else { next(12) };
                    let mut r = UsageRecord::new(format!("r{i}"), next(5000), first, first + len);
                    r.alignment = Some(1 + next(24));
                    r
                })
                .collect();
            let p = Problem::new(&recs, 1).unwrap();
            for fit in [Fit::Best, Fit::First] {
                for order in [Order::Size, Order::Breadth] {
                    let ord = order.compute(&p);
                    let want = reference(&p, &ord, fit);
                    for width in [1, 2, 7, 64, bucket_width(&p), usize::MAX] {
                        assert_eq!(
                            place_with(&p, &ord, fit, width, &|| false).unwrap(),
                            want,
                            "round {round} width {width} {fit:?}"
                        );
                    }
                }
            }
        }
    }
}
