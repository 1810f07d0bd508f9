//! Occupancy index for greedy placement: a segment tree over compressed time whose
//! nodes keep *merged* unions of occupied byte ranges. `own` holds records stored at
//! the node (they cover its whole time range), `sub` the union over its subtree.
//! The bytes occupied anywhere during `[l, r]` are then the union of O(log T) lists,
//! and in a tight packing those unions collapse to a few ranges, so a query costs
//! O(log T) small merges instead of a scan over every overlapping record.
//!
//! Layout: a perfect tree (leaves rounded up to a power of two), 20-byte nodes, and
//! every list in one shared pool (no allocation per node). Inserts go bottom-up from
//! the canonical nodes and stop at the first ancestor whose union already holds the
//! range; a `below` flag replaces comparing `own` with `sub` at query time.

/// A sorted, disjoint, non-touching list of byte ranges `[start, end)` stored in the
/// shared pool at `at..at + len`. Its capacity is implied by `len` (see [`cap_of`]), so
/// lists live in one allocation and a node stays small.
#[derive(Default, Clone, Copy)]
struct List {
    at: u32,
    len: u32,
}

/// Capacity reserved for a list of `len` ranges: 0 when empty, else the next power
/// of two (at least 2). A list that shrank may own more room than this, never less.
fn cap_of(len: usize) -> usize {
    if len == 0 {
        0
    } else {
        len.next_power_of_two().max(2)
    }
}

fn slice(pool: &[(u64, u64)], l: List) -> &[(u64, u64)] {
    &pool[l.at as usize..(l.at + l.len) as usize]
}

/// Adds `[s, e)` to `list`, merging it with the ranges it overlaps or touches.
/// Returns false if the list already covered it (and is unchanged).
fn add(pool: &mut Vec<(u64, u64)>, list: &mut List, s: u64, e: u64) -> bool {
    let (at, len) = (list.at as usize, list.len as usize);
    let v = &mut pool[at..at + len];
    let i = v.partition_point(|r| r.1 < s);
    if i < len && v[i].0 <= s && e <= v[i].1 {
        return false;
    }
    let mut j = i;
    let (mut ns, mut ne) = (s, e);
    while j < len && v[j].0 <= e {
        ns = ns.min(v[j].0);
        ne = ne.max(v[j].1);
        j += 1;
    }
    if j > i {
        v[i] = (ns, ne);
        v.copy_within(j.., i + 1);
        list.len -= (j - i - 1) as u32;
        return true;
    }
    if len + 1 > cap_of(len) {
        // Move to a fresh block at the end of the pool (the old one is abandoned).
        let new_at = pool.len();
        pool.extend_from_within(at..at + i);
        pool.push((ns, ne));
        pool.extend_from_within(at + i..at + len);
        pool.resize(new_at + cap_of(len + 1), (0, 0));
        list.at = u32::try_from(new_at).expect("occupancy index exceeds 2^32 ranges");
    } else {
        let v = &mut pool[at..at + len + 1];
        v.copy_within(i..len, i + 1);
        v[i] = (ns, ne);
    }
    list.len += 1;
    true
}

#[derive(Default, Clone, Copy)]
struct Node {
    /// Records stored here (they cover the node's whole time range), merged.
    own: List,
    /// Union over the subtree, `own` included.
    sub: List,
    /// Whether `sub` holds bytes that `own` lacks (else nothing below adds anything).
    below: bool,
}

pub(crate) struct Occupancy {
    /// Leaves of the (perfect) tree: `points` rounded up to a power of two.
    leaves: usize,
    nodes: Vec<Node>,
    pool: Vec<(u64, u64)>,
    /// Lists gathered by a query.
    lists: Vec<List>,
    scratch: Vec<(u64, u64)>,
}

impl Occupancy {
    pub fn new(points: usize) -> Self {
        let leaves = points.max(1).next_power_of_two();
        Occupancy {
            leaves,
            nodes: vec![Node::default(); 2 * leaves],
            pool: Vec::new(),
            lists: Vec::new(),
            scratch: Vec::new(),
        }
    }

    /// Marks bytes `[s, e)` occupied during points `[l, r]`.
    pub fn insert(&mut self, l: usize, r: usize, s: u64, e: u64) {
        // Canonical nodes of `[l, r]`, bottom-up.
        let (mut a, mut b) = (l + self.leaves, r + self.leaves + 1);
        while a < b {
            if a & 1 == 1 {
                self.put(a, s, e);
                a += 1;
            }
            if b & 1 == 1 {
                b -= 1;
                self.put(b, s, e);
            }
            a >>= 1;
            b >>= 1;
        }
    }

    /// Stores `[s, e)` at canonical node `c` and adds it to the subtree unions above.
    fn put(&mut self, c: usize, s: u64, e: u64) {
        let pool = &mut self.pool;
        let node = &mut self.nodes[c];
        let grew = add(pool, &mut node.sub, s, e);
        add(pool, &mut node.own, s, e);
        // Only growing `own` can make the two equal again.
        if node.below && node.own.len == node.sub.len {
            node.below = slice(pool, node.own) != slice(pool, node.sub);
        }
        if !grew {
            return; // every ancestor's union already holds it too
        }
        let mut p = c >> 1;
        while p >= 1 {
            let node = &mut self.nodes[p];
            if !add(pool, &mut node.sub, s, e) {
                break; // unions only grow upwards: the rest hold it already
            }
            node.below = true; // `sub` now holds bytes outside `own` (a subset of the old `sub`)
            p >>= 1;
        }
    }

    /// Merged byte ranges occupied at any point of `[l, r]`, sorted.
    pub fn occupied(&mut self, l: usize, r: usize) -> &[(u64, u64)] {
        let mut lists = std::mem::take(&mut self.lists);
        lists.clear();
        self.collect(1, 0, self.leaves - 1, l, r, &mut lists);
        let out = &mut self.scratch;
        out.clear();
        for &list in &lists {
            out.extend_from_slice(slice(&self.pool, list));
        }
        if lists.len() > 1 {
            // Coalescing needs only start order (ties in any order merge the same way).
            out.sort_unstable_by_key(|x| x.0);
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
        }
        self.lists = lists;
        &self.scratch
    }

    fn collect(&self, n: usize, nl: usize, nr: usize, l: usize, r: usize, out: &mut Vec<List>) {
        if r < nl || nr < l {
            return;
        }
        let node = &self.nodes[n];
        if l <= nl && nr <= r {
            if node.sub.len > 0 {
                out.push(node.sub);
            }
            return;
        }
        if node.own.len > 0 {
            out.push(node.own);
        }
        if !node.below {
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

#[cfg(test)]
mod tests {
    use super::Occupancy;

    /// Union of the byte ranges of `placed` records overlapping `[l, r]` in time.
    fn brute(placed: &[(usize, usize, u64, u64)], l: usize, r: usize) -> Vec<(u64, u64)> {
        let mut v: Vec<(u64, u64)> = placed.iter().filter(|p| p.0 <= r && l <= p.1).map(|p| (p.2, p.3)).collect();
        v.sort_unstable();
        let mut out: Vec<(u64, u64)> = Vec::new();
        for (s, e) in v {
            match out.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => out.push((s, e)),
            }
        }
        out
    }

    #[test]
    fn occupancy_matches_brute_force() {
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        for points in [1usize, 2, 3, 7, 8, 33, 100] {
            let mut occ = Occupancy::new(points);
            let mut placed = Vec::new();
            for _ in 0..300 {
                let l = next(points as u64) as usize;
                let r = (l + next(1 + points as u64 / 3) as usize).min(points - 1);
                assert_eq!(occ.occupied(l, r), brute(&placed, l, r).as_slice(), "points {points} query [{l}, {r}]");
                // Overlaps with earlier ranges are allowed here: the index must still merge.
                let s = next(200);
                let e = s + 1 + next(30);
                occ.insert(l, r, s, e);
                placed.push((l, r, s, e));
            }
        }
    }
}
