//! Anytime exact search in the spirit of MiniMalloc (Moffitt, ASPLOS 2023); our own
//! code from the paper's ideas:
//!
//! * Canonical solutions: every buffer sits at the lowest aligned offset above the
//!   buffers placed before it, and buffers are placed in non-decreasing
//!   (offset, rank) order. Any packing can be pushed down into such a form, so
//!   searching only these is complete.
//! * Per-section inference: at each time point, the unplaced buffers live there
//!   must stack above the lowest offset any of them can still take; if that floor
//!   plus their total size exceeds the capacity, the node is dead.
//! * Dominance/symmetry: interchangeable buffers (same size, lifetime, alignment)
//!   are placed in a fixed order only.
//! * Dynamic ordering: candidates are tried lowest offset first, ties by a static
//!   pre-order; restarts cycle through several pre-orders with growing node limits.
//! * Decomposition at time points no buffer crosses: parts are solved separately.
//! * Bisection on the capacity from the lower bound up to the best height known.

use super::portfolio::Candidate;
use crate::bound::load_profile;
use crate::error::PlanError;
use crate::options::Budget;
use crate::record::Problem;

/// Components larger than this are left to the heuristics (search cost and depth).
const MAX_SEARCH_BUFFERS: usize = 3000;
/// First node limit per attempt; doubled every round.
const FIRST_NODE_LIMIT: u64 = 4_000;

pub(crate) struct Outcome {
    pub best: Candidate,
    pub optimal: bool,
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

pub(crate) fn search(p: &Problem, seed: Candidate, budget: &mut Budget) -> Result<Outcome, PlanError> {
    let mut best = seed;
    let load = load_profile(p);
    let mut parts = split(p, &load, &best.offsets);
    let global_lb = parts.iter().map(|c| c.lb).max().unwrap_or(0);
    let g = granularity(p);
    let mut lo = round_up(global_lb, g);
    let mut hi = best.height;
    budget.report(hi, lo.min(hi));
    let mut limit = FIRST_NODE_LIMIT;
    let mut improved = false;
    while lo < hi && !budget.expired() {
        if !parts.iter().any(|c| c.searchable && c.height > lo) {
            break; // nothing left that the search may improve
        }
        let mid = round_down(lo + (hi - lo) / 2, g).max(lo);
        let mut targets = vec![lo];
        // Capacity at the bound first (often solvable, pruning is strongest there);
        // from the third round on also a bisection midpoint, to improve the best.
        if mid > lo && mid < hi && limit >= 4 * FIRST_NODE_LIMIT {
            targets.push(mid);
        }
        for cap in targets {
            if cap < lo || cap >= hi || budget.expired() {
                continue;
            }
            match attempt(p, &mut parts, cap, limit, budget, &mut best.offsets) {
                Verdict::Found(_) => {
                    hi = parts.iter().map(|c| c.height).max().unwrap_or(0);
                    improved = true;
                }
                Verdict::Infeasible => lo = round_up(cap + 1, g),
                Verdict::Unknown => {}
            }
            budget.report(hi, lo.min(hi));
        }
        limit = limit.saturating_mul(2);
    }
    if improved {
        best.height = hi;
        best.method = format!("exact(from {})", best.method);
    }
    Ok(Outcome { optimal: lo >= hi, best })
}

/// Tries to fit every part into `cap`; updates parts and offsets on success.
fn attempt(
    p: &Problem,
    parts: &mut [Part],
    cap: u64,
    limit: u64,
    budget: &Budget,
    offsets: &mut [u64],
) -> Verdict {
    let mut found = Vec::new();
    for (k, part) in parts.iter().enumerate() {
        if part.height <= cap {
            continue;
        }
        if part.lb > cap {
            return Verdict::Infeasible;
        }
        if !part.searchable {
            return Verdict::Unknown;
        }
        let sub = Sub::new(p, &part.ids);
        let mut solved = None;
        for pre in [Pre::Wat, Pre::Taw, Pre::Twa] {
            match sub.solve(pre, cap, limit, budget) {
                Verdict::Found(o) => {
                    solved = Some(o);
                    break;
                }
                Verdict::Infeasible => return Verdict::Infeasible,
                Verdict::Unknown => {}
            }
            if budget.expired() {
                return Verdict::Unknown;
            }
        }
        match solved {
            Some(o) => found.push((k, o)),
            None => return Verdict::Unknown,
        }
    }
    for (k, o) in found {
        let part = &mut parts[k];
        for (j, &i) in part.ids.iter().enumerate() {
            offsets[i] = o[j];
        }
        part.height = part.ids.iter().map(|&i| offsets[i] + p.size[i]).max().unwrap_or(0);
    }
    Verdict::Found(Vec::new())
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
        let (t0, t1) = (
            c.ids.iter().map(|&i| p.first[i]).min().unwrap_or(0),
            c.ids.iter().map(|&i| p.last[i]).max().unwrap_or(0),
        );
        c.lb = load[t0..=t1].iter().copied().max().unwrap_or(0);
        c.height = c.ids.iter().map(|&i| offsets[i] + p.size[i]).max().unwrap_or(0);
        c.searchable = c.ids.len() <= MAX_SEARCH_BUFFERS;
    }
    parts
}

/// GCD of sizes and alignments: every canonical offset and height is a multiple.
fn granularity(p: &Problem) -> u64 {
    let gcd = |mut a: u64, mut b: u64| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    let g = (0..p.len()).filter(|&i| p.size[i] > 0).fold(0, |g, i| gcd(gcd(g, p.size[i]), p.align[i]));
    g.max(1)
}

fn round_up(x: u64, g: u64) -> u64 {
    x.div_ceil(g).saturating_mul(g)
}
fn round_down(x: u64, g: u64) -> u64 {
    x / g * g
}

/// A part re-indexed densely, with its own compressed time points.
struct Sub {
    size: Vec<u64>,
    align: Vec<u64>,
    first: Vec<usize>,
    last: Vec<usize>,
    points: usize,
    /// Time-overlapping buffers of each buffer.
    adj: Vec<Vec<usize>>,
    /// Interchangeability class of each buffer.
    class: Vec<usize>,
}

impl Sub {
    fn new(p: &Problem, ids: &[usize]) -> Sub {
        let mut pts: Vec<usize> = ids.iter().flat_map(|&i| [p.first[i], p.last[i]]).collect();
        pts.sort_unstable();
        pts.dedup();
        let idx = |t: usize| pts.partition_point(|&x| x < t);
        let first: Vec<usize> = ids.iter().map(|&i| idx(p.first[i])).collect();
        let last: Vec<usize> = ids.iter().map(|&i| idx(p.last[i])).collect();
        let m = ids.len();
        let mut adj = vec![Vec::new(); m];
        for a in 0..m {
            for b in 0..m {
                if a != b && first[a] <= last[b] && first[b] <= last[a] {
                    adj[a].push(b);
                }
            }
        }
        let size: Vec<u64> = ids.iter().map(|&i| p.size[i]).collect();
        let align: Vec<u64> = ids.iter().map(|&i| p.align[i]).collect();
        let mut keys: Vec<(u64, usize, usize, u64, usize)> =
            (0..m).map(|b| (size[b], first[b], last[b], align[b], b)).collect();
        keys.sort_unstable();
        let mut class = vec![0; m];
        for w in 1..m {
            let same = keys[w].0 == keys[w - 1].0 && keys[w].1 == keys[w - 1].1 && keys[w].2 == keys[w - 1].2 && keys[w].3 == keys[w - 1].3;
            class[keys[w].4] = if same { class[keys[w - 1].4] } else { w };
        }
        Sub { size, align, first, last, points: pts.len(), adj, class }
    }

    fn solve(&self, order: Pre, cap: u64, limit: u64, budget: &Budget) -> Verdict {
        let m = self.size.len();
        let mut total = vec![0u64; self.points];
        for b in 0..m {
            for t in &mut total[self.first[b]..=self.last[b]] {
                *t += self.size[b];
            }
        }
        let pre = order.compute(self, &total);
        let mut rank = vec![0usize; m];
        for (r, &b) in pre.iter().enumerate() {
            rank[b] = r;
        }
        // Members of each interchangeability class, in rank order.
        let mut members = vec![Vec::new(); m];
        for &b in &pre {
            members[self.class[b]].push(b);
        }
        let mut s = State {
            members,
            class_placed: vec![0; m],
            sub: self,
            cap,
            rank,
            floor: vec![0; self.points],
            total,
            minoff: vec![0; m],
            offset: vec![0; m],
            placed: vec![false; m],
            lo: vec![u64::MAX; self.points],
            nodes: 0,
            limit,
            aborted: false,
            budget,
        };
        if s.dfs(0, 0, None) {
            Verdict::Found(s.offset)
        } else if s.aborted {
            Verdict::Unknown
        } else {
            Verdict::Infeasible
        }
    }
}

/// Static pre-orders (MiniMalloc's letters): T = heaviest section total the buffer
/// crosses, W = width in sections, A = area; all non-increasing, ties by index.
#[derive(Clone, Copy)]
enum Pre {
    Wat,
    Taw,
    Twa,
}

impl Pre {
    fn compute(self, sub: &Sub, total: &[u64]) -> Vec<usize> {
        let m = sub.size.len();
        let key = |b: usize| {
            let t = total[sub.first[b]..=sub.last[b]].iter().copied().max().unwrap_or(0) as u128;
            let w = (sub.last[b] - sub.first[b] + 1) as u128;
            let a = sub.size[b] as u128 * w;
            match self {
                Pre::Wat => (w, a, t),
                Pre::Taw => (t, a, w),
                Pre::Twa => (t, w, a),
            }
        };
        let mut v: Vec<usize> = (0..m).collect();
        v.sort_by_key(|&b| std::cmp::Reverse(key(b)));
        v
    }
}

struct State<'a> {
    members: Vec<Vec<usize>>,
    class_placed: Vec<usize>,
    sub: &'a Sub,
    cap: u64,
    rank: Vec<usize>,
    /// Highest top of placed buffers at each point.
    floor: Vec<u64>,
    /// Total size of unplaced buffers at each point.
    total: Vec<u64>,
    /// Max floor over each buffer's lifetime (unaligned).
    minoff: Vec<u64>,
    offset: Vec<u64>,
    placed: Vec<bool>,
    lo: Vec<u64>,
    nodes: u64,
    limit: u64,
    aborted: bool,
    budget: &'a Budget,
}

fn align_to(x: u64, a: u64) -> u64 {
    // Heights stay <= cap (a u64), so only pathological inputs saturate; those prune.
    x.checked_add(a - 1).map_or(u64::MAX, |v| v & !(a - 1))
}

impl State<'_> {
    fn dfs(&mut self, depth: usize, last_off: u64, last_rank: Option<usize>) -> bool {
        let sub = self.sub;
        let m = sub.size.len();
        if depth == m {
            return true;
        }
        self.nodes += 1;
        if self.nodes > self.limit || (self.nodes % 512 == 0 && self.budget.expired()) {
            self.aborted = true;
            return false;
        }
        // Earliest offset each unplaced buffer can still take, and inference per point.
        let mut cands: Vec<(u64, usize, usize)> = Vec::new();
        let mut min_height = u64::MAX;
        self.lo.iter_mut().for_each(|x| *x = u64::MAX);
        for b in 0..m {
            if self.placed[b] {
                continue;
            }
            let raw = align_to(self.minoff[b], sub.align[b]);
            let eff = raw.max(last_off);
            min_height = min_height.min(raw.saturating_add(sub.size[b]));
            if eff.saturating_add(sub.size[b]) > self.cap {
                return false;
            }
            for l in &mut self.lo[sub.first[b]..=sub.last[b]] {
                *l = (*l).min(eff);
            }
            let key_ok = match last_rank {
                None => true,
                Some(lr) => raw > last_off || (raw == last_off && self.rank[b] > lr),
            };
            if key_ok {
                cands.push((raw, self.rank[b], b));
            }
        }
        for t in 0..sub.points {
            if self.total[t] > 0 && self.lo[t].saturating_add(self.total[t]) > self.cap {
                return false;
            }
        }
        cands.sort_unstable();
        for &(o, _, b) in &cands {
            // Dominance: if some unplaced buffer u fits entirely below `o` at its
            // lowest offset, any completion with b at o can move u down there, so
            // only placements below min_height need trying.
            if o >= min_height {
                break;
            }
            // Symmetry: interchangeable buffers are placed in rank order only.
            let cls = sub.class[b];
            if self.members[cls][self.class_placed[cls]] != b {
                continue;
            }
            let top = o + sub.size[b];
            // Place b at o.
            let span = sub.first[b]..=sub.last[b];
            let saved_floor: Vec<u64> = self.floor[span.clone()].to_vec();
            for t in span.clone() {
                self.floor[t] = top;
                self.total[t] -= sub.size[b];
            }
            let mut saved_min: Vec<(usize, u64)> = Vec::new();
            for &u in &sub.adj[b] {
                if !self.placed[u] && self.minoff[u] < top {
                    saved_min.push((u, self.minoff[u]));
                    self.minoff[u] = top;
                }
            }
            self.placed[b] = true;
            self.class_placed[cls] += 1;
            self.offset[b] = o;
            if self.dfs(depth + 1, o, Some(self.rank[b])) {
                return true;
            }
            // Undo.
            self.placed[b] = false;
            self.class_placed[cls] -= 1;
            for (u, v) in saved_min {
                self.minoff[u] = v;
            }
            for (k, t) in span.enumerate() {
                self.floor[t] = saved_floor[k];
                self.total[t] += sub.size[b];
            }
            if self.aborted {
                return false;
            }
        }
        false
    }
}
