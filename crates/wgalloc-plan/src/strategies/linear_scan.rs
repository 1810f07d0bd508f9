//! Linear scan (after Wimmer & Moessenboeck): walk records by start, expire those
//! whose lifetime ended, and give each new record the best-fitting free block,
//! else grow the slab. An online policy: it never looks ahead.

use super::{Stop, STOP_POLL};
use crate::error::{add, align_up, PlanError};
use crate::record::Problem;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

/// With fixed or preferred offsets (which an online scan cannot see coming) it is
/// greedy best-fit placement in the same start order, around the pinned records.
pub(crate) fn plan(p: &Problem, stop: Stop) -> Result<Vec<u64>, PlanError> {
    if (0..p.len()).any(|i| p.pinned(i)) {
        let mut order: Vec<usize> = (0..p.len()).collect();
        order.sort_by_key(|&i| (p.first[i], Reverse(p.last[i]), i));
        return super::greedy::place(p, &order, super::greedy::Fit::Best, stop);
    }
    let mut order: Vec<usize> = (0..p.len()).filter(|&i| p.size[i] > 0).collect();
    order.sort_by_key(|&i| (p.first[i], Reverse(p.last[i]), i));
    let mut offsets = vec![0u64; p.len()];
    let mut active: BinaryHeap<Reverse<(usize, usize)>> = BinaryHeap::new(); // (last, idx)
    let mut free: BTreeMap<u64, u64> = BTreeMap::new(); // start -> end, coalesced
    let mut top = 0u64;
    for (k, i) in order.into_iter().enumerate() {
        if k % STOP_POLL == 0 && stop() {
            return Err(PlanError::Stopped);
        }
        while let Some(&Reverse((last, j))) = active.peek() {
            if last >= p.first[i] {
                break;
            }
            active.pop();
            release(&mut free, offsets[j], offsets[j] + p.size[j]);
        }
        let (size, a) = (p.size[i], p.align[i]);
        // Best fit among free blocks; a block ending at `top` may also be extended.
        let mut best: Option<(u64, u64)> = None; // (block length, offset)
        for (&s, &e) in &free {
            let o = align_up(s, a)?;
            if o < e && e - o >= size && best.is_none_or(|(len, _)| e - s < len) {
                best = Some((e - s, o));
            }
        }
        let o = match best {
            Some((_, o)) => o,
            None => match free.iter().next_back() {
                Some((&s, &e)) if e == top => align_up(s, a)?,
                _ => align_up(top, a)?,
            },
        };
        let end = add(o, size, "linear scan offset")?;
        take(&mut free, o, end);
        top = top.max(end);
        offsets[i] = o;
        active.push(Reverse((p.last[i], i)));
    }
    Ok(offsets)
}

fn release(free: &mut BTreeMap<u64, u64>, mut s: u64, mut e: u64) {
    if let Some((&ps, &pe)) = free.range(..s).next_back() {
        if pe == s {
            free.remove(&ps);
            s = ps;
        }
    }
    if let Some(ne) = free.remove(&e) {
        e = ne;
    }
    free.insert(s, e);
}

/// Removes `[s, e)` from the free map (it lies inside one block or above all blocks).
fn take(free: &mut BTreeMap<u64, u64>, s: u64, e: u64) {
    if let Some((&bs, &be)) = free.range(..=s).next_back() {
        if be > s {
            free.remove(&bs);
            if bs < s {
                free.insert(bs, s);
            }
            if e < be {
                free.insert(e, be);
            }
        }
    }
}
