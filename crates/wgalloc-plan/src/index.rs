//! Occupancy index for greedy placement: a segment tree over compressed time whose
//! nodes keep *merged* unions of occupied byte ranges. `own` holds records stored at
//! the node (they cover its whole time range), `sub` the union over its subtree.
//! The bytes occupied anywhere during `[l, r]` are then the union of O(log T) lists,
//! and in a tight packing those unions collapse to a few ranges, so a query costs
//! O(log T) small merges instead of a scan over every overlapping record.

#[derive(Default, Clone)]
struct Ranges(Vec<(u64, u64)>); // sorted, disjoint, non-touching [start, end)

impl Ranges {
    fn insert(&mut self, s: u64, e: u64) {
        let v = &mut self.0;
        let i = v.partition_point(|r| r.1 < s);
        let mut j = i;
        let (mut ns, mut ne) = (s, e);
        while j < v.len() && v[j].0 <= e {
            ns = ns.min(v[j].0);
            ne = ne.max(v[j].1);
            j += 1;
        }
        if j > i {
            v[i] = (ns, ne);
            v.drain(i + 1..j);
        } else {
            v.insert(i, (ns, ne));
        }
    }
}

#[derive(Default, Clone)]
struct Node {
    own: Ranges,
    sub: Ranges,
}

pub(crate) struct Occupancy {
    points: usize,
    nodes: Vec<Node>,
    scratch: Vec<(u64, u64)>,
}

impl Occupancy {
    pub fn new(points: usize) -> Self {
        Occupancy { points: points.max(1), nodes: vec![Node::default(); 4 * points.max(1)], scratch: Vec::new() }
    }

    /// Marks bytes `[s, e)` occupied during points `[l, r]`.
    pub fn insert(&mut self, l: usize, r: usize, s: u64, e: u64) {
        self.ins(1, 0, self.points - 1, l, r, s, e);
    }

    #[allow(clippy::too_many_arguments)]
    fn ins(&mut self, n: usize, nl: usize, nr: usize, l: usize, r: usize, s: u64, e: u64) {
        if r < nl || nr < l {
            return;
        }
        self.nodes[n].sub.insert(s, e);
        if l <= nl && nr <= r {
            self.nodes[n].own.insert(s, e);
            return;
        }
        let m = (nl + nr) / 2;
        self.ins(2 * n, nl, m, l, r, s, e);
        self.ins(2 * n + 1, m + 1, nr, l, r, s, e);
    }

    /// Merged byte ranges occupied at any point of `[l, r]`, sorted.
    pub fn occupied(&mut self, l: usize, r: usize) -> &[(u64, u64)] {
        let mut out = std::mem::take(&mut self.scratch);
        out.clear();
        self.collect(1, 0, self.points - 1, l, r, &mut out);
        out.sort_unstable();
        // Merge in place.
        let mut w = 0;
        for k in 0..out.len() {
            if w > 0 && out[k].0 <= out[w - 1].1 {
                out[w - 1].1 = out[w - 1].1.max(out[k].1);
            } else {
                out[w] = out[k];
                w += 1;
            }
        }
        out.truncate(w);
        self.scratch = out;
        &self.scratch
    }

    fn collect(&self, n: usize, nl: usize, nr: usize, l: usize, r: usize, out: &mut Vec<(u64, u64)>) {
        if r < nl || nr < l {
            return;
        }
        let node = &self.nodes[n];
        if l <= nl && nr <= r {
            out.extend_from_slice(&node.sub.0);
            return;
        }
        out.extend_from_slice(&node.own.0);
        if node.sub.0.len() == node.own.0.len() && node.sub.0 == node.own.0 {
            return; // nothing stored below that `own` does not already cover
        }
        let m = (nl + nr) / 2;
        self.collect(2 * n, nl, m, l, r, out);
        self.collect(2 * n + 1, m + 1, nr, l, r, out);
    }
}

/// Stabbing index for greedy-by-breadth: which not-yet-taken records are live at a
/// point. Records sit at their canonical nodes; taken ones are dropped lazily.
pub(crate) struct Stabbing {
    points: usize,
    lists: Vec<Vec<usize>>,
}

impl Stabbing {
    pub fn new(points: usize, first: &[usize], last: &[usize]) -> Self {
        let points = points.max(1);
        let mut s = Stabbing { points, lists: vec![Vec::new(); 4 * points] };
        for i in 0..first.len() {
            s.add(1, 0, points - 1, first[i], last[i], i);
        }
        s
    }

    fn add(&mut self, n: usize, nl: usize, nr: usize, l: usize, r: usize, id: usize) {
        if r < nl || nr < l {
            return;
        }
        if l <= nl && nr <= r {
            self.lists[n].push(id);
            return;
        }
        let m = (nl + nr) / 2;
        self.add(2 * n, nl, m, l, r, id);
        self.add(2 * n + 1, m + 1, nr, l, r, id);
    }

    /// Appends to `out` the records live at `t` for which `taken` is false.
    pub fn live_at(&mut self, t: usize, taken: &[bool], out: &mut Vec<usize>) {
        let (mut n, mut nl, mut nr) = (1, 0, self.points - 1);
        loop {
            self.lists[n].retain(|&i| !taken[i]);
            out.extend_from_slice(&self.lists[n]);
            if nl == nr {
                break;
            }
            let m = (nl + nr) / 2;
            if t <= m {
                n *= 2;
                nr = m;
            } else {
                n = 2 * n + 1;
                nl = m + 1;
            }
        }
    }
}
