//! Anytime exact search in the spirit of MiniMalloc (Moffitt, ASPLOS 2023); our own
//! code from the paper's ideas:
//!
//! * Canonical solutions: every buffer sits at the lowest aligned offset above the
//!   buffers placed before it, and buffers are placed in non-decreasing
//!   (offset, rank) order. Any packing can be pushed down into such a form, so
//!   searching only these is complete.
//! * Sections: the live sets at distinct end points. Per-section inference: the
//!   unplaced buffers of a section stack above the lowest offset any of them can
//!   still take (and above the current offset, by the canonical order); if that
//!   floor plus their total size exceeds the capacity, the node is dead. Floors are
//!   recomputed per node by painting sections in offset order (union-find).
//! * Dominance: nothing is placed at or above the lowest top any unplaced buffer
//!   could reach (it would leave a gap that buffer fits in). Symmetry:
//!   interchangeable buffers (same size, sections, alignment) go in index order.
//!   When a placement that raises no unplaced buffer's lowest offset fails, its node
//!   fails (MiniMalloc's hatless pruning, widened from "no unplaced neighbour").
//! * Dynamic ordering: candidates are tried lowest offset first, ties by a static
//!   pre-order; restarts cycle through several pre-orders with growing node limits
//!   (only nodes that pass inference count). Where the machine has more than one core
//!   the pre-orders run side by side, with the verdict running them in turn would give.
//! * Decomposition: statically at time points no buffer crosses, and dynamically
//!   during the search: once the placed buffers cover every buffer crossing a
//!   section boundary, the two sides are solved independently (each from a fresh
//!   canonical order), so their search trees add instead of multiplying.
//! * Capacity: each round first asks the decision problem at the lower bound (where
//!   pruning is strongest), then probes capacities below the best height while they
//!   succeed, stepping down by at most half the gap, halving the step whenever a
//!   probe runs out of nodes and growing it by half whenever one succeeds.

use super::portfolio::Candidate;
use crate::bound::{granularity, load_profile};
use crate::error::PlanError;
use crate::options::{Budget, Stop};
use crate::record::Problem;
use std::sync::atomic::{AtomicBool, Ordering};

/// Components larger than this are left to the heuristics (search cost and depth).
pub(crate) const MAX_SEARCH_BUFFERS: usize = 3000;
/// Parts with fewer buffers search their pre-orders in turn (threads cost more than they save).
const PARALLEL_MIN_BUFFERS: usize = 24;
/// First node limit per attempt; doubled every round.
const FIRST_NODE_LIMIT: u64 = 4_000;

pub(crate) struct Outcome {
    pub best: Candidate,
    /// The best lower bound known at the end (>= the one passed in; = height when optimal).
    pub lower_bound: u64,
}

/// One independent part of the problem (records whose lifetimes chain together).
struct Part {
    ids: Vec<usize>,
    lb: u64,
    height: u64,
    searchable: bool,
}

enum Verdict {
    Found(Vec<u64>),
    Infeasible,
    Unknown,
}

/// Searches below the seed's height. `bound` is a lower bound already known (the
/// aligned one); the search raises it when it proves a capacity infeasible.
pub(crate) fn search(p: &Problem, seed: Candidate, bound: u64, budget: &mut Budget) -> Result<Outcome, PlanError> {
    let mut best = seed;
    let load = load_profile(p);
    let mut parts = split(p, &load, &best.offsets);
    let global_lb = parts.iter().map(|c| c.lb).max().unwrap_or(0);
    let g = granularity(p);
    let mut lo = round_up(global_lb, g).max(bound);
    let mut hi = best.height;
    budget.report(hi, lo.min(hi));
    let mut limit = FIRST_NODE_LIMIT;
    let mut improved = false;
    // Step below the best height for the improving probes; halved when a probe
    // runs out of nodes, grown by half when one succeeds (a step that shrank early
    // would otherwise creep down a few granules per probe), capped at half the gap.
    let mut step = u64::MAX;
    while lo < hi && !budget.expired() {
        if !parts.iter().any(|c| c.searchable && c.height > lo) {
            break; // nothing left that the search may improve
        }
        // Each round: the decision problem at the bound (often solvable, and pruning
        // is strongest there), then probes below the best height while they succeed
        // (cheap at looser capacities), all with the round's node limit.
        let mut cap = lo;
        loop {
            if cap < lo || cap >= hi || budget.expired() {
                break;
            }
            let v = attempt(p, &mut parts, cap, limit, budget, &mut best.offsets);
            let (old_hi, old_lo) = (hi, lo);
            let new_hi = parts.iter().map(|c| c.height).max().unwrap_or(0);
            if new_hi < hi {
                hi = new_hi;
                improved = true;
            }
            let probe = cap > lo;
            match v {
                Verdict::Found(_) if probe => step = round_down(step.saturating_mul(3) / 2, g),
                Verdict::Found(_) => {}
                Verdict::Infeasible => lo = round_up(cap + 1, g),
                Verdict::Unknown if probe => {
                    step = round_down(step / 2, g).max(g);
                    break;
                }
                Verdict::Unknown => {}
            }
            if hi < old_hi || lo > old_lo {
                budget.report(hi, lo.min(hi));
            }
            if lo >= hi {
                break;
            }
            step = step.min(round_down((hi - lo) / 2, g));
            if step == 0 {
                break;
            }
            cap = hi - step;
        }
        limit = limit.saturating_mul(2);
    }
    if improved {
        best.height = hi;
        best.method = format!("exact(from {})", best.method);
    }
    Ok(Outcome { lower_bound: lo.min(hi), best })
}

/// Tries to fit every part into `cap`; updates parts and offsets on success.
fn attempt(p: &Problem, parts: &mut [Part], cap: u64, limit: u64, budget: &Budget, offsets: &mut [u64]) -> Verdict {
    // Parts solved here keep their new offsets even if another part stays unknown.
    let mut unknown = false;
    for part in parts.iter_mut() {
        if part.height <= cap {
            continue;
        }
        if part.lb > cap {
            return Verdict::Infeasible;
        }
        if !part.searchable || budget.expired() {
            unknown = true;
            continue;
        }
        let sub = Sub::new(p, &part.ids);
        let parallel = part.ids.len() >= PARALLEL_MIN_BUFFERS && parallelism() > 1;
        match sub.solve_orders(cap, limit, budget, parallel) {
            Verdict::Infeasible => return Verdict::Infeasible,
            Verdict::Found(o) => {
                for (j, &i) in part.ids.iter().enumerate() {
                    offsets[i] = o[j];
                }
                part.height = part.ids.iter().map(|&i| offsets[i] + p.size[i]).max().unwrap_or(0);
            }
            Verdict::Unknown => unknown = true,
        }
    }
    if unknown {
        Verdict::Unknown
    } else {
        Verdict::Found(Vec::new())
    }
}

/// Splits at time points no (non-empty) buffer crosses.
fn split(p: &Problem, load: &[u64], offsets: &[u64]) -> Vec<Part> {
    let mut order: Vec<usize> = (0..p.len()).filter(|&i| p.size[i] > 0).collect();
    order.sort_by_key(|&i| p.first[i]);
    let mut parts: Vec<Part> = Vec::new();
    let mut reach = 0usize;
    for i in order {
        if parts.is_empty() || p.first[i] > reach {
            parts.push(Part { ids: Vec::new(), lb: 0, height: 0, searchable: true });
        }
        reach = if parts.last().is_some_and(|c| c.ids.is_empty()) { p.last[i] } else { reach.max(p.last[i]) };
        if let Some(c) = parts.last_mut() {
            c.ids.push(i);
        }
    }
    for c in &mut parts {
        let (t0, t1) =
            (c.ids.iter().map(|&i| p.first[i]).min().unwrap_or(0), c.ids.iter().map(|&i| p.last[i]).max().unwrap_or(0));
        c.lb = load[t0..=t1].iter().copied().max().unwrap_or(0);
        c.height = c.ids.iter().map(|&i| offsets[i] + p.size[i]).max().unwrap_or(0);
        // Fixed and preferred offsets stay where the seed put them.
        c.searchable = c.ids.len() <= MAX_SEARCH_BUFFERS && !c.ids.iter().any(|&i| p.pinned(i));
    }
    parts
}

/// Cores the process may use (read once).
fn parallelism() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

fn round_up(x: u64, g: u64) -> u64 {
    x.div_ceil(g).saturating_mul(g)
}
fn round_down(x: u64, g: u64) -> u64 {
    x / g * g
}

/// A part re-indexed densely over its own sections. A section is the set of buffers
/// live at one distinct end point; two buffers overlap in time iff they share a
/// section, and every point's live set is contained in some section's.
struct Sub {
    size: Vec<u64>,
    align: Vec<u64>,
    /// First and last section of each buffer.
    s_lo: Vec<usize>,
    s_hi: Vec<usize>,
    /// Lifetime length in original op indices (pre-order key).
    width: Vec<u64>,
    sections: usize,
    /// Time-overlapping buffers of each buffer.
    adj: Vec<Vec<usize>>,
    /// Interchangeability class (same size, alignment and sections) of each buffer.
    class: Vec<usize>,
    /// Members of each class, ascending: they are placed in this order only.
    members: Vec<Vec<usize>>,
    /// Buffers covering each section.
    covering: Vec<Vec<usize>>,
}

impl Sub {
    fn new(p: &Problem, ids: &[usize]) -> Sub {
        let mut ends: Vec<usize> = ids.iter().map(|&i| p.last[i]).collect();
        ends.sort_unstable();
        ends.dedup();
        let s_lo: Vec<usize> = ids.iter().map(|&i| ends.partition_point(|&e| e < p.first[i])).collect();
        let s_hi: Vec<usize> = ids.iter().map(|&i| ends.partition_point(|&e| e < p.last[i])).collect();
        let width: Vec<u64> = ids.iter().map(|&i| p.times[p.last[i]] - p.times[p.first[i]] + 1).collect();
        let m = ids.len();
        let sections = ends.len();
        let mut adj = vec![Vec::new(); m];
        for a in 0..m {
            for b in a + 1..m {
                if s_lo[a] <= s_hi[b] && s_lo[b] <= s_hi[a] {
                    adj[a].push(b);
                    adj[b].push(a);
                }
            }
        }
        let size: Vec<u64> = ids.iter().map(|&i| p.size[i]).collect();
        let align: Vec<u64> = ids.iter().map(|&i| p.align[i]).collect();
        let mut keys: Vec<(u64, usize, usize, u64, usize)> =
            (0..m).map(|b| (size[b], s_lo[b], s_hi[b], align[b], b)).collect();
        keys.sort_unstable();
        let mut class = vec![0; m];
        for w in 1..m {
            let (x, y) = (keys[w], keys[w - 1]);
            let same = x.0 == y.0 && x.1 == y.1 && x.2 == y.2 && x.3 == y.3;
            class[x.4] = if same { class[y.4] } else { w };
        }
        let mut members = vec![Vec::new(); m];
        for b in 0..m {
            members[class[b]].push(b);
        }
        let mut covering = vec![Vec::new(); sections];
        for b in 0..m {
            for c in &mut covering[s_lo[b]..=s_hi[b]] {
                c.push(b);
            }
        }
        Sub { size, align, s_lo, s_hi, width, sections, adj, class, members, covering }
    }

    /// Tries the pre-orders in turn, or side by side where the machine has cores for it. The
    /// verdict is the sequential one either way: the first pre-order's that is not unknown
    /// (a proof of infeasibility holds for all). Running side by side, a verdict cancels the
    /// pre-orders after it (they could not win), while those before it run to their end.
    fn solve_orders(&self, cap: u64, limit: u64, budget: &Budget, parallel: bool) -> Verdict {
        const ORDERS: [Pre; 3] = [Pre::Wat, Pre::Taw, Pre::Twa];
        let stop = budget.stop();
        let cancel: [AtomicBool; 3] = Default::default();
        if !parallel {
            for pre in ORDERS {
                match self.solve(pre, cap, limit, &stop, &cancel[0]) {
                    Verdict::Unknown if !stop.expired() => {}
                    v => return v,
                }
            }
            return Verdict::Unknown;
        }
        let mut verdicts: Vec<Verdict> = std::thread::scope(|scope| {
            let runs: Vec<_> = ORDERS
                .iter()
                .enumerate()
                .map(|(k, &pre)| {
                    let (stop, cancel) = (&stop, &cancel);
                    scope.spawn(move || {
                        let v = self.solve(pre, cap, limit, stop, &cancel[k]);
                        if !matches!(v, Verdict::Unknown) {
                            cancel[k + 1..].iter().for_each(|c| c.store(true, Ordering::Relaxed));
                        }
                        v
                    })
                })
                .collect();
            // A panic in a search thread is a bug; it goes on as the caller's panic.
            runs.into_iter().map(|r| r.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
        });
        match verdicts.iter().position(|v| !matches!(v, Verdict::Unknown)) {
            Some(k) => verdicts.swap_remove(k),
            None => Verdict::Unknown,
        }
    }

    fn solve(&self, pre: Pre, cap: u64, limit: u64, stop: &Stop, cancel: &AtomicBool) -> Verdict {
        let m = self.size.len();
        let mut total = vec![0u64; self.sections];
        let mut cuts = vec![0u32; self.sections];
        for b in 0..m {
            for t in &mut total[self.s_lo[b]..=self.s_hi[b]] {
                *t += self.size[b];
            }
            for c in &mut cuts[self.s_lo[b]..self.s_hi[b]] {
                *c += 1;
            }
        }
        // A buffer taller than the capacity fits nowhere.
        if self.size.iter().any(|&z| z > cap) {
            return Verdict::Infeasible;
        }
        let latest = (0..m).map(|b| round_down(cap - self.size[b], self.align[b])).collect();
        let mut s = Search {
            sub: self,
            latest,
            cap,
            pre,
            placed: vec![false; m],
            sol: vec![0; m],
            minoff: vec![0; m],
            total,
            cuts,
            class_placed: vec![0; m],
            next: vec![0; self.sections + 1],
            nodes: 0,
            limit,
            stop,
            cancel,
            spare_lists: Vec::new(),
            moved: Vec::new(),
            minoff_log: Vec::new(),
            hot: [usize::MAX; HOT],
        };
        let all: Vec<usize> = (0..m).collect();
        let r = s.solve_part(&all, 0, self.sections.saturating_sub(1));
        match r {
            St::Ok => Verdict::Found(s.sol),
            St::NotFound => Verdict::Infeasible,
            St::Abort => Verdict::Unknown,
        }
    }
}

/// Static pre-orders (MiniMalloc's letters): T = heaviest section total the buffer
/// crosses (of what is unplaced when the part starts), W = lifetime width, A = area
/// (size x width); all non-increasing, ties by index.
#[derive(Clone, Copy)]
enum Pre {
    Wat,
    Taw,
    Twa,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum St {
    Ok,
    NotFound,
    Abort,
}

struct Search<'a> {
    sub: &'a Sub,
    cap: u64,
    pre: Pre,
    /// Highest aligned offset at which each buffer still fits under the capacity.
    latest: Vec<u64>,
    placed: Vec<bool>,
    /// Offsets of the last complete assignment found (per part).
    sol: Vec<u64>,
    /// Lowest aligned offset each unplaced buffer can still take (above every
    /// placed buffer it overlaps).
    minoff: Vec<u64>,
    /// Per section: total size of its unplaced buffers.
    total: Vec<u64>,
    /// Per section boundary s|s+1: unplaced buffers crossing it.
    cuts: Vec<u32>,
    class_placed: Vec<usize>,
    /// Union-find "next unpainted section" links for computing floors.
    next: Vec<usize>,
    nodes: u64,
    limit: u64,
    stop: &'a Stop,
    /// Set when another pre-order's verdict made this search moot.
    cancel: &'a AtomicBool,
    /// Scratch: candidate lists of finished nodes, and the raised buffers of the current one.
    spare_lists: Vec<Vec<(u64, usize)>>,
    moved: Vec<(u64, usize)>,
    minoff_log: Vec<(usize, u64)>,
    /// The sections the last failed inferences stopped at, latest first (usize::MAX: none
    /// yet). Most nodes fail at one of them again, so they are checked first, before the
    /// node's full work (on MiniMalloc D, nine failing nodes in ten stop there).
    hot: [usize; HOT],
}

/// Sections remembered as hot.
const HOT: usize = 2;

fn find(next: &mut [usize], mut s: usize) -> usize {
    let mut r = s;
    while next[r] != r {
        r = next[r];
    }
    while next[s] != r {
        let n = next[s];
        next[s] = r;
        s = n;
    }
    r
}

fn align_to(x: u64, a: u64) -> u64 {
    // Heights stay <= cap (a u64), so only pathological inputs saturate; those prune.
    crate::error::align_up(x, a).unwrap_or(u64::MAX)
}

impl Search<'_> {
    /// Solves the unplaced buffers `bufs` living in sections `[lo, hi]`, independent
    /// of everything else unplaced, with a fresh canonical order.
    fn solve_part(&mut self, bufs: &[usize], lo: usize, hi: usize) -> St {
        let sub = self.sub;
        let key = |b: usize| {
            let t = self.total[sub.s_lo[b]..=sub.s_hi[b]].iter().copied().max().unwrap_or(0) as u128;
            let w = sub.width[b] as u128;
            let a = sub.size[b] as u128 * w;
            match self.pre {
                Pre::Wat => (w, a, t),
                Pre::Taw => (t, a, w),
                Pre::Twa => (t, w, a),
            }
        };
        let mut keyed: Vec<((u128, u128, u128), usize)> = bufs.iter().map(|&b| (key(b), b)).collect();
        keyed.sort_unstable_by(|x, y| y.0.cmp(&x.0).then(x.1.cmp(&y.1)));
        let items: Vec<usize> = keyed.into_iter().map(|x| x.1).collect();
        self.dfs(&items, lo, hi, 0, 0, None)
    }

    /// One node. `parent` is the parent's candidate list (lowest offset, index),
    /// ascending; `None` at the root of a part.
    fn dfs(
        &mut self,
        items: &[usize],
        lo: usize,
        hi: usize,
        min_off: u64,
        min_pidx: usize,
        parent: Option<&[(u64, usize)]>,
    ) -> St {
        // Candidate lists are recycled: a node is a few microseconds, and allocating its
        // list was a tenth of that.
        let mut ord = self.spare_lists.pop().unwrap_or_default();
        ord.clear();
        let st = self.node(&mut ord, items, lo, hi, min_off, min_pidx, parent);
        self.spare_lists.push(ord);
        st
    }

    #[allow(clippy::too_many_arguments)]
    fn node(
        &mut self,
        ord: &mut Vec<(u64, usize)>,
        items: &[usize],
        lo: usize,
        hi: usize,
        min_off: u64,
        min_pidx: usize,
        parent: Option<&[(u64, usize)]>,
    ) -> St {
        let sub = self.sub;
        if self.hot.iter().any(|&h| (lo..=hi).contains(&h) && !self.section_fits(h, min_off)) {
            return St::NotFound;
        }
        match parent {
            None => {
                ord.extend(
                    items.iter().enumerate().filter(|&(_, &b)| !self.placed[b]).map(|(k, &b)| (self.minoff[b], k)),
                );
                ord.sort_unstable();
            }
            Some(parent) => {
                // Only the buffers the last placement raised move: merge them back in.
                let mut moved = std::mem::take(&mut self.moved);
                moved.clear();
                for &(o, k) in parent {
                    let b = items[k];
                    if self.placed[b] {
                        continue;
                    }
                    let m = self.minoff[b];
                    if m == o {
                        ord.push((o, k));
                    } else {
                        moved.push((m, k));
                    }
                }
                if !moved.is_empty() {
                    moved.sort_unstable();
                    // Merge from the back, in place (indices are unique, so no ties).
                    let (mut i, mut j) = (ord.len(), moved.len());
                    ord.resize(i + j, (0, 0));
                    while j > 0 {
                        if i > 0 && ord[i - 1] > moved[j - 1] {
                            ord[i + j - 1] = ord[i - 1];
                            i -= 1;
                        } else {
                            ord[i + j - 1] = moved[j - 1];
                            j -= 1;
                        }
                    }
                }
                self.moved = moved;
            }
        }
        if ord.is_empty() {
            return St::Ok;
        }
        let mut min_height = u64::MAX;
        for &(o, k) in ord.iter() {
            let b = items[k];
            if o.max(min_off) > self.latest[b] {
                return St::NotFound;
            }
            min_height = min_height.min(o + sub.size[b]);
        }
        if !self.infer(items, lo, hi, min_off, ord) {
            return St::NotFound;
        }
        // Only nodes that pass inference count against the limit.
        self.nodes += 1;
        if self.nodes > self.limit
            || (self.nodes.is_multiple_of(256) && (self.cancel.load(Ordering::Relaxed) || self.stop.expired()))
        {
            return St::Abort;
        }
        // Quick inference for every candidate at once. After `infer`, each section's floor plus
        // its unplaced total fits the capacity, so placing a buffer at `off` kills the node
        // exactly when some section's unplaced total, stacked from `off` (a section of the
        // buffer's own: from its top, without it), crosses the capacity: when `off` plus the
        // largest section total does. Candidates come by ascending offset, so the first dead
        // one ends the loop.
        let heaviest = self.total[lo..=hi].iter().copied().max().unwrap_or(0);
        for &(off, k) in ord.iter() {
            // Dominance: a buffer that fits entirely below `off` at its lowest offset
            // could be moved down there, so nothing at or above min_height is tried.
            if off >= min_height || off.saturating_add(heaviest) > self.cap {
                break;
            }
            // Canonical order: (offset, pre-order index) non-decreasing.
            if off < min_off || (off == min_off && k < min_pidx) {
                continue;
            }
            let b = items[k];
            // Symmetry: interchangeable buffers are placed in index order only.
            let cls = sub.class[b];
            if sub.members[cls][self.class_placed[cls]] != b {
                continue;
            }
            let (st, raised) = self.branch(items, lo, hi, b, off, k, ord);
            if st != St::NotFound {
                return st;
            }
            // A placement that raised no unplaced buffer is free: every completion of this
            // node can move `b` down to `off` (nothing unplaced can use the range it frees),
            // so if no completion follows it, none follows any later candidate either.
            if !raised {
                return St::NotFound;
            }
        }
        St::NotFound
    }

    /// The inference of [`Search::infer`] for the hot section alone: its floor is the
    /// lowest offset any unplaced buffer covering it can take.
    fn section_fits(&self, s: usize, min_off: u64) -> bool {
        if self.total[s] == 0 {
            return true;
        }
        let floor = self.sub.covering[s]
            .iter()
            .filter(|&&u| !self.placed[u])
            .map(|&u| self.minoff[u])
            .min()
            .unwrap_or(u64::MAX)
            .max(min_off);
        floor.saturating_add(self.total[s]) <= self.cap
    }

    /// Section inference. `ord` lists the unplaced buffers of `items` as
    /// (lowest offset, index) ascending. A section's floor is the lowest offset any
    /// of its unplaced buffers can take; painting sections in ascending offset
    /// order (skipping painted ones with a union-find) meets every section at its floor,
    /// in O(m log m + sections). Every later buffer sits at or above `min_off`
    /// (canonical order), and a section's unplaced buffers stack above its floor, so the
    /// node is dead as soon as one section's stack crosses the capacity. (A section no
    /// unplaced buffer covers has nothing to stack.)
    fn infer(&mut self, items: &[usize], lo: usize, hi: usize, min_off: u64, ord: &[(u64, usize)]) -> bool {
        let sub = self.sub;
        for s in lo..=hi + 1 {
            self.next[s] = s;
        }
        for &(o, k) in ord {
            let b = items[k];
            let floor = o.max(min_off);
            let mut s = find(&mut self.next, sub.s_lo[b]);
            while s <= sub.s_hi[b] {
                if floor.saturating_add(self.total[s]) > self.cap {
                    if !self.hot.contains(&s) {
                        self.hot.rotate_right(1);
                        self.hot[0] = s;
                    }
                    return false;
                }
                self.next[s] = s + 1;
                s = find(&mut self.next, s + 1);
            }
        }
        true
    }

    /// Places `b` at `off`, propagates, recurses (decomposing when the placement
    /// splits the part), then undoes. Also says whether the placement raised the lowest
    /// offset of any unplaced buffer.
    #[allow(clippy::too_many_arguments)]
    fn branch(
        &mut self,
        items: &[usize],
        lo: usize,
        hi: usize,
        b: usize,
        off: u64,
        k: usize,
        ord: &[(u64, usize)],
    ) -> (St, bool) {
        let sub = self.sub;
        let top = off + sub.size[b];
        let cls = sub.class[b];
        self.placed[b] = true;
        self.class_placed[cls] += 1;
        self.sol[b] = off;
        let (blo, bhi) = (sub.s_lo[b], sub.s_hi[b]);
        for t in &mut self.total[blo..=bhi] {
            *t -= sub.size[b];
        }
        let ml = self.minoff_log.len();
        for &u in &sub.adj[b] {
            let old = self.minoff[u];
            if !self.placed[u] && old < top {
                self.minoff_log.push((u, old));
                self.minoff[u] = align_to(top, sub.align[u]);
            }
        }
        let raised = self.minoff_log.len() > ml;
        let mut st = St::NotFound;
        // Dynamic decomposition: boundaries no unplaced buffer crosses any more.
        let mut cps: Vec<usize> = Vec::new();
        for s in blo..bhi {
            self.cuts[s] -= 1;
            if self.cuts[s] == 0 {
                cps.push(s + 1);
            }
        }
        if cps.is_empty() {
            st = self.dfs(items, lo, hi, off, k, Some(ord));
        } else {
            // Infer once more with the canonical floor before the parts restart at 0.
            let mut ord: Vec<(u64, usize)> = items
                .iter()
                .enumerate()
                .filter(|&(_, &u)| !self.placed[u])
                .map(|(k, &u)| (self.minoff[u], k))
                .collect();
            ord.sort_unstable();
            if self.infer(items, lo, hi, off, &ord) {
                cps.insert(0, lo);
                cps.push(hi + 1);
                st = St::Ok;
                for w in cps.windows(2) {
                    let (a, c) = (w[0], w[1] - 1);
                    let part: Vec<usize> = items
                        .iter()
                        .copied()
                        .filter(|&u| !self.placed[u] && sub.s_lo[u] <= c && sub.s_hi[u] >= a)
                        .collect();
                    if part.is_empty() {
                        continue;
                    }
                    st = self.solve_part(&part, a, c);
                    if st != St::Ok {
                        break;
                    }
                }
            }
        }
        for s in blo..bhi {
            self.cuts[s] += 1;
        }
        // Undo.
        for s in sub.s_lo[b]..=sub.s_hi[b] {
            self.total[s] += sub.size[b];
        }
        while self.minoff_log.len() > ml {
            let (u, v) = self.minoff_log.pop().unwrap_or_default();
            self.minoff[u] = v;
        }
        self.placed[b] = false;
        self.class_placed[cls] -= 1;
        (st, raised)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::UsageRecord;
    use std::time::{Duration, Instant};

    /// Side by side, the pre-orders give the verdict (and the offsets) of running them in
    /// turn, at capacities where each of found, infeasible and unknown occurs.
    #[test]
    fn side_by_side_orders_give_the_sequential_verdict() {
        let budget = Budget::new(Instant::now(), Duration::from_secs(600), None, None);
        let mut kinds = [0; 3];
        for seed in 1..=12u64 {
            let mut below = crate::test_rng::below(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let records: Vec<UsageRecord> = (0..40)
                .map(|i| {
                    let first = below(30);
                    UsageRecord::new(format!("r{i}"), 1 + below(64), first, first + below(8))
                })
                .collect();
            let p = Problem::new(&records, 1).unwrap();
            let ids: Vec<usize> = (0..p.len()).collect();
            let sub = Sub::new(&p, &ids);
            let lb = *load_profile(&p).iter().max().unwrap();
            for (cap, limit) in [(lb, 50), (lb, 5_000), (lb + lb / 20, 200), (lb + lb / 5, 2_000), (lb - 1, 5_000)] {
                let verdicts = [false, true].map(|parallel| sub.solve_orders(cap, limit, &budget, parallel));
                match verdicts {
                    [Verdict::Found(a), Verdict::Found(b)] => {
                        assert_eq!(a, b, "seed {seed} cap {cap}");
                        kinds[0] += 1;
                    }
                    [Verdict::Infeasible, Verdict::Infeasible] => kinds[1] += 1,
                    [Verdict::Unknown, Verdict::Unknown] => kinds[2] += 1,
                    _ => panic!("seed {seed} cap {cap} limit {limit}: the verdicts differ"),
                }
            }
        }
        assert!(kinds.iter().all(|&k| k > 0), "every verdict occurs: {kinds:?}");
    }
}
