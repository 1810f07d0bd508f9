//! Anytime improvement for instances the exact search cannot take whole: large-
//! neighbourhood search. Each step picks a record at the slab's top and a point of
//! its lifetime, frees the highest records live in a time window around that point
//! (a random number of them, at most [`MAX_FREED`]), and re-places them greedily
//! (under a random order and fit rule) around everything else, which stays fixed. A step is kept when the freed records' highest top does
//! not rise (equal moves let the search drift off plateaus); the slab shrinks once
//! no record reaches the old top. Runs until the budget ends or the bound is met,
//! reporting each new height, honouring cancellation.

use super::portfolio::{height, Candidate};
use crate::error::PlanError;
use crate::options::Budget;
use crate::record::Problem;
use std::cmp::Reverse;

/// Most records freed in one step (the window shrinks when it frees more).
const MAX_FREED: usize = 48;
/// Most slots an ejection weighs.
const MAX_SLOTS: usize = 64;

/// Deterministic xorshift, so runs are repeatable for a given budget.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
}

pub(crate) fn improve(
    p: &Problem,
    mut best: Candidate,
    bound: u64,
    budget: &mut Budget,
) -> Result<Candidate, PlanError> {
    let n = p.len();
    if n == 0 || best.height <= bound || budget.expired() {
        return Ok(best);
    }
    let mut off = best.offsets.clone();
    let mut h = best.height;
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    // Records by first point, to find those overlapping a window without a full pass.
    let mut by_first: Vec<usize> = (0..n).filter(|&i| p.size[i] > 0).collect();
    by_first.sort_by_key(|&i| p.first[i]);
    let max_span = by_first.iter().map(|&i| p.span(i)).max().unwrap_or(1);
    let mut freed: Vec<usize> = Vec::new();
    let mut keep: Vec<usize> = Vec::new();
    let mut old: Vec<(usize, u64)> = Vec::new();
    let mut is_freed = vec![false; n];
    let mut occ: Vec<Obstacle> = Vec::new();
    let mut steps = 0u64;
    let mut improved = false;
    // Window radius in points: grows when steps keep failing, shrinks when they succeed.
    let mut radius = 4usize.max(p.points / 2000);
    while !budget.expired() {
        steps += 1;
        // A record at the top (ties broken at random through the scan's start).
        let tops: Vec<usize> = (0..n).filter(|&i| p.size[i] > 0 && off[i] + p.size[i] == h).collect();
        let Some(&peak) = tops.get(rng.below(tops.len() as u64) as usize) else { break };
        let r = radius.max(1);
        // A point of the peak record's lifetime, and a window around it.
        let t = p.first[peak] + rng.below(p.span(peak) as u64) as usize;
        let a = t.saturating_sub(rng.below(r as u64 + 1) as usize);
        let b = (t + rng.below(r as u64 + 1) as usize).min(p.points - 1);
        freed.clear();
        keep.clear();
        // Ejection (every other step): move the peak record into a gap below it at a
        // point of its lifetime, and re-place the records in its way.
        let mut pre: Option<(usize, u64)> = None;
        // Not for a record living over much of the run: every record it meets would be a rival.
        if !p.pinned(peak) && p.span(peak) <= (p.points / 16).max(64) && rng.below(2) == 0 {
            // Records live with the peak record, and the slots it could take: the ends
            // of the gaps below the top at a few points of its lifetime.
            let (pf, pl, size, al) = (p.first[peak], p.last[peak], p.size[peak], p.align[peak]);
            let from = by_first.partition_point(|&i| p.first[i] + max_span <= pf);
            let rivals: Vec<usize> = by_first[from..]
                .iter()
                .copied()
                .take_while(|&i| p.first[i] <= pl)
                .filter(|&i| i != peak && p.last[i] >= pf)
                .collect();
            let mut slots: Vec<u64> = Vec::new();
            for _ in 0..4 {
                let t = pf + rng.below((pl - pf + 1) as u64) as usize;
                let mut live: Vec<(u64, u64)> = rivals
                    .iter()
                    .filter(|&&i| p.first[i] <= t && t <= p.last[i])
                    .map(|&i| (off[i], off[i] + p.size[i]))
                    .collect();
                live.sort_unstable();
                let mut prev = 0u64;
                for &(s0, e0) in live.iter().chain(std::iter::once(&(h, h))) {
                    if s0 > prev {
                        slots.push(prev.div_ceil(al).saturating_mul(al));
                        if let Some(x) = s0.checked_sub(size) {
                            slots.push(x / al * al);
                        }
                    }
                    prev = prev.max(e0);
                }
            }
            // Blockers living far longer than the peak record stay where they are (see `long`
            // below), as pinned ones do.
            let long = 16 * (pl - pf + 1).max(16);
            // The slot whose blockers weigh least (pinned blockers rule a slot out), among at
            // most MAX_SLOTS of them: each costs a pass over the rivals.
            slots.sort_unstable();
            slots.dedup();
            for k in 0..slots.len().min(MAX_SLOTS) {
                let pick = k + rng.below((slots.len() - k) as u64) as usize;
                slots.swap(k, pick);
            }
            slots.truncate(MAX_SLOTS);
            let mut choice: Option<(u64, u64, u64)> = None; // (blocked bytes, tie-break, slot)
            for &o in &slots {
                let end = o.saturating_add(size);
                if end >= h {
                    continue;
                }
                let mut cost = 0u64;
                for &i in &rivals {
                    if off[i] < end && o < off[i] + p.size[i] {
                        let stays = p.pinned(i) || p.span(i) > long;
                        cost = if stays { u64::MAX } else { cost.saturating_add(p.size[i]) };
                    }
                }
                let key = (cost, rng.next(), o);
                if cost < u64::MAX && choice.is_none_or(|c| (key.0, key.1) < (c.0, c.1)) {
                    choice = Some(key);
                }
            }
            let Some((_, _, o)) = choice else { continue };
            let end = o + size;
            freed.extend(rivals.iter().copied().filter(|&i| off[i] < end && o < off[i] + p.size[i]));
            if freed.len() > 4 * MAX_FREED {
                continue;
            }
            freed.push(peak);
            pre = Some((peak, o));
        } else {
            // Free records of [a, b]: every one living inside it (one step in three), else
            // the highest live there (a random number of them); pinned ones stay.
            let inside = rng.below(3) == 0;
            // Records living far longer than the window stay: freeing one would stretch the
            // window (and the obstacles to place around) over its whole life.
            let long = 16 * (b - a + 1).max(16);
            let from = by_first.partition_point(|&i| p.first[i] + max_span <= a);
            for &i in &by_first[from..] {
                if p.first[i] > b {
                    break;
                }
                let live = p.last[i] >= a && (!inside || (p.first[i] >= a && p.last[i] <= b));
                if live && !p.pinned(i) && p.span(i) <= long {
                    freed.push(i);
                }
            }
            let want = if inside { 8 * MAX_FREED } else { 2 + rng.below(MAX_FREED as u64 - 1) as usize };
            if freed.len() > want {
                freed.select_nth_unstable_by_key(want - 1, |&i| Reverse(off[i] + p.size[i]));
                freed.truncate(want);
            }
            if freed.len() < 2 {
                radius = radius.saturating_mul(2).min(p.points);
                continue;
            }
        }
        for &i in &freed {
            is_freed[i] = true;
        }
        // Everything else live while a freed record lives is an obstacle.
        let (ua, ub) =
            (freed.iter().map(|&i| p.first[i]).min().unwrap_or(a), freed.iter().map(|&i| p.last[i]).max().unwrap_or(b));
        let (a, b) = (ua, ub);
        let from = by_first.partition_point(|&i| p.first[i] + max_span <= a);
        for &i in &by_first[from..] {
            if p.first[i] > b {
                break;
            }
            if p.last[i] >= a && !is_freed[i] {
                keep.push(i);
            }
        }
        let old_top = freed.iter().map(|&i| off[i] + p.size[i]).max().unwrap_or(0);
        let old_at_top = freed.iter().filter(|&&i| off[i] + p.size[i] == h).count();
        let old_sum: u128 = freed.iter().map(|&i| (off[i] + p.size[i]) as u128).sum();
        old.clear();
        old.extend(freed.iter().map(|&i| (i, off[i])));
        // What the freed records are placed around, in points relative to `a`.
        occ.clear();
        for &i in &keep {
            occ.push(Obstacle {
                start: off[i],
                end: off[i] + p.size[i],
                first: p.first[i].max(a) - a,
                last: p.last[i].min(b) - a,
            });
        }
        occ.sort_unstable_by_key(|o| o.start);
        match rng.below(5) {
            4 => breadth(p, &mut freed, a, b),
            0 => freed.sort_by_key(|&i| (Reverse(p.size[i]), i)),
            1 => freed.sort_by_key(|&i| (Reverse(p.size[i] as u128 * p.span(i) as u128), i)),
            2 => freed.sort_by_key(|&i| (Reverse(p.span(i)), Reverse(p.size[i]), i)),
            _ => {
                // Size order with random swaps of neighbours.
                freed.sort_by_key(|&i| (Reverse(p.size[i]), i));
                for k in 1..freed.len() {
                    if rng.below(3) == 0 {
                        freed.swap(k - 1, k);
                    }
                }
            }
        }
        let first_fit = rng.below(2) == 0;
        let mut new_top = 0u64;
        let mut new_sum = 0u128;
        if let Some((i, o)) = pre {
            let end = o + p.size[i];
            insert(&mut occ, Obstacle { start: o, end, first: p.first[i] - a, last: p.last[i] - a });
            off[i] = o;
            new_top = end;
            new_sum = end as u128;
        }
        for &i in &freed {
            if pre.is_some_and(|(j, _)| j == i) {
                continue;
            }
            let (l, rr) = (p.first[i] - a, p.last[i] - a);
            let o = gap_for(&occ, l, rr, p.size[i], p.align[i], first_fit);
            let end = o.saturating_add(p.size[i]);
            insert(&mut occ, Obstacle { start: o, end, first: l, last: rr });
            off[i] = o;
            new_top = new_top.max(end);
            new_sum += end as u128;
        }
        for &i in &freed {
            is_freed[i] = false;
        }
        // Sideways: window moves that lower the freed records' tops in total; ejections
        // that leave no more records at the top than before (the top record changes,
        // so chains of ejections can form over steps).
        let sideways = new_top == old_top
            && match pre {
                None => new_sum <= old_sum,
                Some(_) => freed.iter().filter(|&&i| off[i] + p.size[i] == h).count() <= old_at_top,
            };
        if new_top < old_top || sideways {
            if new_top < old_top {
                radius = (radius * 3 / 4).max(2);
            }
            let nh = height(p, &off);
            if nh < h {
                h = nh;
                improved = true;
                best.offsets.copy_from_slice(&off);
                best.height = h;
                budget.report(h, bound.min(h));
                if h <= bound {
                    break;
                }
            }
        } else {
            for &(i, o) in &old {
                off[i] = o;
            }
            if steps.is_multiple_of(8) {
                radius = radius.saturating_add(1).min(p.points);
            }
        }
    }
    if improved {
        best.method = format!("lns({} steps, from {})", steps, best.method);
    }
    Ok(best)
}

/// Orders `freed` (records inside points `[a, b]`) as greedy by breadth does: points
/// by the freed records' live bytes, heaviest first; at each, its unordered records by size.
fn breadth(p: &Problem, freed: &mut Vec<usize>, a: usize, b: usize) {
    let mut load = vec![0u128; b - a + 1];
    for &i in freed.iter() {
        for l in &mut load[p.first[i] - a..=p.last[i] - a] {
            *l += p.size[i] as u128;
        }
    }
    let mut pts: Vec<usize> = (0..load.len()).collect();
    pts.sort_by_key(|&t| (Reverse(load[t]), t));
    let mut rest = std::mem::take(freed);
    rest.sort_by_key(|&i| (Reverse(p.size[i]), i));
    for t in pts {
        rest.retain(|&i| {
            let here = p.first[i] - a <= t && t <= p.last[i] - a;
            if here {
                freed.push(i);
            }
            !here
        });
        if rest.is_empty() {
            break;
        }
    }
}

/// Bytes `[start, end)` taken over window points `[first, last]`. A step re-places a few
/// records around some hundreds of these, so a list sorted by offset and scanned per record
/// costs far less than building an interval index at every step.
#[derive(Clone, Copy)]
struct Obstacle {
    start: u64,
    end: u64,
    first: usize,
    last: usize,
}

/// Adds `o` to `occ`, keeping it sorted by start offset.
fn insert(occ: &mut Vec<Obstacle>, o: Obstacle) {
    let at = occ.partition_point(|x| x.start <= o.start);
    occ.insert(at, o);
}

/// Offset for `size` bytes live over points `[l, r]`: best (smallest) or first gap,
/// else on top. Saturates instead of failing: the caller rejects a taller result.
fn gap_for(occ: &[Obstacle], l: usize, r: usize, size: u64, align: u64, first_fit: bool) -> u64 {
    let up = |x: u64| x.div_ceil(align).saturating_mul(align);
    let mut prev = 0u64;
    let mut best: Option<(u64, u64)> = None;
    for o in occ.iter().filter(|o| o.first <= r && l <= o.last) {
        if o.start > prev {
            let cand = up(prev);
            if cand < o.start && o.start - cand >= size {
                let gap = o.start - prev;
                if best.is_none_or(|(g, _)| gap < g) {
                    best = Some((gap, cand));
                }
                if first_fit {
                    break;
                }
            }
        }
        prev = prev.max(o.end);
    }
    best.map_or(up(prev), |b| b.1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::check_offsets;
    use crate::record::UsageRecord;
    use std::time::{Duration, Instant};

    /// Random records too many for the exact search (DNN-like: short lifetimes, a few long).
    fn records(n: usize) -> Vec<UsageRecord> {
        let mut next = crate::test_rng::below(0x2545_F491_4F6C_DD1Du64);
        (0..n)
            .map(|i| {
                let first = next(n as u64 / 4);
                let len = if next(20) == 0 { next(400) } else { next(12) };
                UsageRecord::new(format!("r{i}"), 64 * (1 + next(64)), first, first + len)
            })
            .collect()
    }

    #[test]
    fn improves_a_large_instance_and_stays_valid() {
        let recs = records(4000);
        let p = Problem::new(&recs, 1).unwrap();
        let seed = crate::strategies::portfolio::plan(&p, &|| false).unwrap();
        let (bound, _) = crate::bound::aligned_lower_bound(&p);
        let start_height = seed.height;
        let mut budget = Budget::new(Instant::now(), Duration::from_millis(1500), None, None);
        let out = improve(&p, seed, bound, &mut budget).unwrap();
        println!("seed {start_height} -> {} (bound {bound}), {}", out.height, out.method);
        // Hundreds of steps even in a debug build on a loaded machine; the first gains come early.
        assert!(out.height < start_height && out.height >= bound, "no improvement: {}", out.method);
        assert_eq!(out.height, height(&p, &out.offsets));
        check_offsets(&recs, &out.offsets, out.height, 1).unwrap();
    }
}
