//! Peak-window relaxation, for instances too large for the exact search to take whole.
//!
//! The records live in a window of time around the load peak are planned exactly, with the
//! window's other records ignored. Inside the window, the records that live throughout it are
//! stacked into one block (they occupy their ranges at every point of the window, so without
//! alignment any packing of it can be rearranged to put them at the bottom; with alignment the
//! block is a restriction the search may pay for), so the search sees only the records that start
//! or end inside the window, plus that block. The layout found is then fixed and
//! every other record is placed greedily around it; away from the peak the load leaves room.
//!
//! Two records live in the window that overlap in time also overlap inside the window (intervals
//! meeting a common interval and each other meet inside it), so the fixed part is consistent.
//! Inside the block, records that end last go lowest: after the window those still live keep a
//! contiguous stack, which leaves the holes above them to the greedy.

use std::cmp::Reverse;
use std::time::Instant;

use super::portfolio::{self, Candidate};
use super::{exact, Stop};
use crate::bound::aligned_lower_bound;
use crate::error::{align_up, PlanError};
use crate::options::Budget;
use crate::record::{lcm, Problem};

/// Most records starting or ending inside the window: what the exact search takes in well
/// under a second.
const MAX_WINDOW_RECORDS: usize = 2000;
/// The block's alignment (a common multiple of its records') must stay this small to be useful.
const MAX_BLOCK_ALIGNMENT: u64 = 1 << 20;

/// Plans `p` with an exact window around `peak` (the point of its lower bound, which the caller
/// already has) until `deadline`; returns the plan when it is lower than `best`. `None` when the
/// window holds a record with a fixed or preferred offset, or nothing lower was found.
pub(crate) fn relax_peak(
    p: &Problem,
    peak: usize,
    best: &Candidate,
    budget: &Budget,
    deadline: Instant,
) -> Result<Option<Candidate>, PlanError> {
    let (a, b) = widest_window(p, peak);
    let live = |i: usize| p.size[i] > 0 && p.first[i] <= b && p.last[i] >= a;
    let (mut whole, mut part) = (Vec::new(), Vec::new());
    for i in (0..p.len()).filter(|&i| live(i)) {
        if p.pinned(i) {
            return Ok(None);
        }
        if p.first[i] <= a && p.last[i] >= b {
            whole.push(i);
        } else {
            part.push(i);
        }
    }
    if part.is_empty() {
        return Ok(None); // a stack of records that all span the window: nothing to improve
    }
    // The block: records that live throughout the window, the longest-lived after it lowest.
    whole.sort_by_key(|&i| (Reverse(p.last[i]), p.first[i], i));
    let Some(block_align) = whole.iter().try_fold(1u64, |l, &i| lcm(l, p.align[i])) else { return Ok(None) };
    if block_align > MAX_BLOCK_ALIGNMENT {
        return Ok(None);
    }
    let mut in_block = Vec::with_capacity(whole.len());
    let mut block = 0u64;
    for &i in &whole {
        let o = align_up(block, p.align[i])?;
        in_block.push(o);
        block = o.checked_add(p.size[i]).ok_or_else(|| PlanError::SizeOverflow("window block".into()))?;
    }
    // The window problem: the block (if any) first, then the records starting or ending inside.
    let has_block = !whole.is_empty();
    let mut w = Problem {
        size: Vec::new(),
        align: Vec::new(),
        first: Vec::new(),
        last: Vec::new(),
        points: b - a + 1,
        times: p.times[a..=b].to_vec(),
        fixed: Vec::new(),
        preferred: Vec::new(),
    };
    let mut push = |size: u64, align: u64, first: usize, last: usize| {
        w.size.push(size);
        w.align.push(align);
        w.first.push(first - a);
        w.last.push(last - a);
        w.fixed.push(None);
        w.preferred.push(None);
    };
    if has_block {
        push(block, block_align, a, b);
    }
    for &i in &part {
        push(p.size[i], p.align[i], p.first[i].max(a), p.last[i].min(b));
    }
    let mut sub = budget.sub(deadline);
    let stop = || sub.expired();
    let seed = match portfolio::plan(&w, &stop) {
        Err(PlanError::Stopped) => return Ok(None),
        r => r?,
    };
    let bound = aligned_lower_bound(&w).0;
    let found = exact::search(&w, seed, bound, &mut sub)?.best;
    if found.height >= best.height {
        return Ok(None);
    }
    // Fix the window's layout and place everything else around it.
    let mut q = p.clone();
    let parts_from = usize::from(has_block);
    if has_block {
        let base = found.offsets[0];
        for (k, &i) in whole.iter().enumerate() {
            q.fixed[i] = Some(base + in_block[k]);
        }
    }
    for (k, &i) in part.iter().enumerate() {
        q.fixed[i] = Some(found.offsets[parts_from + k]);
    }
    let stop: Stop = &|| budget.expired();
    let done = match portfolio::plan(&q, stop) {
        Err(PlanError::Stopped) => return Ok(None),
        r => r?,
    };
    if done.height >= best.height {
        return Ok(None);
    }
    let method = format!("window({} records, from {})", whole.len() + part.len(), best.method);
    Ok(Some(Candidate { offsets: done.offsets, height: done.height, method }))
}

/// The widest window `[a, b]` of compressed points around `peak` whose records starting or
/// ending inside it number at most [`MAX_WINDOW_RECORDS`] (the radius doubles while they do).
fn widest_window(p: &Problem, peak: usize) -> (usize, usize) {
    let last_point = p.points.saturating_sub(1);
    let around = |r: usize| (peak.saturating_sub(r), (peak + r).min(last_point));
    let inside = |(a, b): (usize, usize)| {
        (0..p.len())
            .filter(|&i| p.size[i] > 0 && p.first[i] <= b && p.last[i] >= a && (p.first[i] > a || p.last[i] < b))
            .count()
    };
    let mut best = around(0);
    let mut r = 1;
    loop {
        let w = around(r);
        if inside(w) > MAX_WINDOW_RECORDS {
            return best;
        }
        best = w;
        if w == (0, last_point) {
            return best;
        }
        r *= 2;
    }
}
