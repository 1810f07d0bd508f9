//! Occupancy index for greedy placement: which bytes are taken at any point of a
//! time window by the records placed so far.
//!
//! Time is cut into buckets of `width` points. A record covering a whole bucket goes
//! into that bucket's `full` union (merged, so a tight packing stays a few ranges);
//! one touching part of a bucket goes into its `partial` list with its lifetime, to
//! be filtered exactly. A perfect tree over buckets keeps, per node, the union of the
//! records touching any of its buckets. A query `[l, r]` takes the two edge buckets'
//! `full` and filtered `partial` lists plus the O(log) tree unions of the buckets in
//! between, and merges those sorted runs pairwise: no sort, and a short query (the
//! common case in DNN traces) reads just two or four lists. The last merge is lazy and
//! does not coalesce: the caller's gap scan only needs ranges by start (overlaps are
//! fine), so a query within one bucket filters its partial list and reads it together
//! with its full list in one pass, copying nothing else.
//!
//! Every list of ranges lives in one shared pool (no allocation per node).

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

/// A record touching a bucket without covering it: its bytes and lifetime.
#[derive(Clone, Copy)]
struct Partial {
    s: u64,
    e: u64,
    first: u32,
    last: u32,
}

pub(crate) struct Occupancy {
    points: usize,
    /// Time points per bucket.
    width: usize,
    /// Leaves of the (perfect) bucket tree: the bucket count rounded up to a power of two.
    leaves: usize,
    /// Per tree node: union of the records touching any of its buckets.
    sub: Vec<List>,
    /// Per bucket: union of the records covering all of it.
    full: Vec<List>,
    /// Per bucket: records touching part of it, by start offset.
    partial: Vec<Vec<Partial>>,
    pool: Vec<(u64, u64)>,
    /// Ranges gathered by a query: `scratch[..used]`, sorted runs ending at the
    /// offsets in `runs`. Gathering overwrites `scratch` in place (no clearing per query).
    scratch: Vec<(u64, u64)>,
    used: usize,
    runs: Vec<usize>,
    spare: Vec<(u64, u64)>,
}

/// Writes the union of two start-ordered lists to `out` (room for both), coalesced;
/// returns its length.
fn merge_union(a: &[(u64, u64)], b: &[(u64, u64)], out: &mut [(u64, u64)]) -> usize {
    let (mut i, mut j) = (0, 0);
    let mut next = || {
        let take_a = j == b.len() || (i < a.len() && a[i].0 <= b[j].0);
        let x = if take_a { a.get(i) } else { b.get(j) };
        (i, j) = if take_a { (i + 1, j) } else { (i, j + 1) };
        x.copied()
    };
    let Some((mut cs, mut ce)) = next() else { return 0 };
    let mut w = 0;
    while let Some((s, e)) = next() {
        if s <= ce {
            ce = ce.max(e);
        } else {
            out[w] = (cs, ce);
            w += 1;
            (cs, ce) = (s, e);
        }
    }
    out[w] = (cs, ce);
    w + 1
}

/// Merges the sorted runs of `buf` (ending at the offsets in `runs`) pairwise, each
/// pair into its coalesced union, until at most two runs remain. Returns where the
/// last run ends. Both buffers keep their length (no clearing per query).
fn union_runs(buf: &mut Vec<(u64, u64)>, runs: &mut Vec<usize>, spare: &mut Vec<(u64, u64)>) -> usize {
    while runs.len() > 2 {
        let total = runs[runs.len() - 1];
        if spare.len() < total {
            spare.resize(total, (0, 0));
        }
        let (mut start, mut w) = (0, 0);
        for k in (0..runs.len()).step_by(2) {
            let mid = runs[k];
            let end = runs.get(k + 1).copied().unwrap_or(mid);
            w += merge_union(&buf[start..mid], &buf[mid..end], &mut spare[w..]);
            runs[k / 2] = w;
            start = end;
        }
        runs.truncate(runs.len().div_ceil(2));
        std::mem::swap(buf, spare);
    }
    runs.last().copied().unwrap_or(0)
}

/// Calls `f` on the ranges of two start-ordered lists in start order, not coalesced,
/// until it returns false. One call site, so `f` inlines; and inlined itself (with
/// `scan`) into the caller, whose loop state then stays in registers, not behind the
/// closure's references (measured: 4% faster on random10k).
#[inline(always)]
fn merge_each(a: &[(u64, u64)], b: &[(u64, u64)], mut f: impl FnMut(u64, u64) -> bool) {
    let (mut i, mut j) = (0, 0);
    loop {
        let (s, e) = match (a.get(i), b.get(j)) {
            (Some(&x), Some(&y)) if y.0 < x.0 => {
                j += 1;
                y
            }
            (Some(&x), _) => {
                i += 1;
                x
            }
            (None, Some(&y)) => {
                j += 1;
                y
            }
            (None, None) => return,
        };
        if !f(s, e) {
            return;
        }
    }
}

impl Occupancy {
    pub fn new(points: usize, width: usize) -> Self {
        let points = points.max(1);
        let width = width.clamp(1, points);
        let buckets = points.div_ceil(width);
        let leaves = buckets.next_power_of_two();
        Occupancy {
            points,
            width,
            leaves,
            sub: vec![List::default(); 2 * leaves],
            full: vec![List::default(); buckets],
            partial: vec![Vec::new(); buckets],
            pool: Vec::new(),
            scratch: Vec::new(),
            used: 0,
            runs: Vec::new(),
            spare: Vec::new(),
        }
    }

    /// Points `[start, end]` of bucket `b`.
    fn span(&self, b: usize) -> (usize, usize) {
        (b * self.width, ((b + 1) * self.width).min(self.points) - 1)
    }

    /// Marks bytes `[s, e)` occupied during points `[l, r]`.
    pub fn insert(&mut self, l: usize, r: usize, s: u64, e: u64) {
        let (bl, br) = (l / self.width, r / self.width);
        for b in bl..=br {
            let (bs, be) = self.span(b);
            if l <= bs && be <= r {
                add(&mut self.pool, &mut self.full[b], s, e);
            } else {
                let v = &mut self.partial[b];
                let i = v.partition_point(|x| x.s < s);
                // Points are below 2^32: `List` offsets into the pool already assume it.
                v.insert(i, Partial { s, e, first: l as u32, last: r as u32 });
            }
        }
        // Canonical nodes of `[bl, br]`, bottom-up.
        let (mut a, mut b) = (bl + self.leaves, br + self.leaves + 1);
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

    /// Adds `[s, e)` to the union at node `c` and its ancestors.
    fn put(&mut self, mut c: usize, s: u64, e: u64) {
        while c >= 1 && add(&mut self.pool, &mut self.sub[c], s, e) {
            c >>= 1; // unions only grow upwards: stop at the first that holds it
        }
    }

    /// Makes room for `n` more gathered ranges at `scratch[used..]`.
    fn room(&mut self, n: usize) {
        if self.scratch.len() < self.used + n {
            self.scratch.resize(self.used + n, (0, 0));
        }
    }

    /// Appends a sorted run to the gathered ranges.
    fn gather(&mut self, run: List) {
        if run.len > 0 {
            let n = run.len as usize;
            self.room(n);
            self.scratch[self.used..self.used + n].copy_from_slice(slice(&self.pool, run));
            self.used += n;
            self.runs.push(self.used);
        }
    }

    fn gather_bucket(&mut self, b: usize, l: usize, r: usize) {
        self.gather(self.full[b]);
        let (l, r) = (l as u32, r as u32);
        // Branch-free filter (`&`, not `&&`): write every entry, keep those overlapping `[l, r]`.
        self.room(self.partial[b].len());
        let out = &mut self.scratch[self.used..];
        let mut w = 0;
        for x in &self.partial[b] {
            out[w] = (x.s, x.e);
            w += usize::from((x.first <= r) & (l <= x.last));
        }
        if w > 0 {
            self.used += w;
            self.runs.push(self.used);
        }
    }

    /// Calls `f(start, end)` on the byte ranges occupied at any point of `[l, r]`, by
    /// start (ties in no fixed order), until it returns false. Ranges may overlap or touch.
    #[inline]
    pub fn scan(&mut self, l: usize, r: usize, f: impl FnMut(u64, u64) -> bool) {
        let (mid, end) = self.gather_query(l, r);
        let (a, b) = self.scratch[..end].split_at(mid);
        merge_each(a, b, f);
    }

    /// Gathers the runs of a query and merges them down to two, `scratch[..mid]` and
    /// `scratch[mid..end]`; returns `(mid, end)`.
    fn gather_query(&mut self, l: usize, r: usize) -> (usize, usize) {
        self.used = 0;
        self.runs.clear();
        let (bl, br) = (l / self.width, r / self.width);
        self.gather_bucket(bl, l, r);
        if br != bl {
            self.gather_bucket(br, l, r);
            // Whole buckets strictly inside. Records stored above their canonical nodes
            // touch bucket `bl` or `br` too, so the edge lists above already hold them.
            let (mut a, mut b) = (bl + 1 + self.leaves, br + self.leaves);
            while a < b {
                if a & 1 == 1 {
                    self.gather(self.sub[a]);
                    a += 1;
                }
                if b & 1 == 1 {
                    b -= 1;
                    self.gather(self.sub[b]);
                }
                a >>= 1;
                b >>= 1;
            }
        }
        let end = union_runs(&mut self.scratch, &mut self.runs, &mut self.spare);
        (self.runs.first().copied().unwrap_or(0), end)
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

    /// Coalesced union of start-ordered ranges.
    fn coalesce(v: impl IntoIterator<Item = (u64, u64)>) -> Vec<(u64, u64)> {
        let mut out: Vec<(u64, u64)> = Vec::new();
        for (s, e) in v {
            match out.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => out.push((s, e)),
            }
        }
        out
    }

    /// Union of the byte ranges of `placed` records overlapping `[l, r]` in time.
    fn brute(placed: &[(usize, usize, u64, u64)], l: usize, r: usize) -> Vec<(u64, u64)> {
        let mut v: Vec<(u64, u64)> = placed.iter().filter(|p| p.0 <= r && l <= p.1).map(|p| (p.2, p.3)).collect();
        v.sort_unstable();
        coalesce(v)
    }

    #[test]
    fn occupancy_matches_brute_force() {
        let mut next = crate::test_rng::below(0x2545_F491_4F6C_DD1Du64);
        for (points, width) in
            [1usize, 2, 3, 7, 8, 33, 100].into_iter().flat_map(|p| [1usize, 2, 3, 5, 16, 200].map(|w| (p, w)))
        {
            let mut occ = Occupancy::new(points, width);
            let mut placed = Vec::new();
            for _ in 0..300 {
                let l = next(points as u64) as usize;
                let r = (l + next(1 + points as u64 / 3) as usize).min(points - 1);
                let mut got = Vec::new();
                occ.scan(l, r, |s, e| {
                    got.push((s, e));
                    true
                });
                let what = format!("points {points} width {width} query [{l}, {r}]");
                assert!(got.windows(2).all(|w| w[0].0 <= w[1].0), "{what}: not by start");
                assert_eq!(coalesce(got), brute(&placed, l, r), "{what}");
                // Overlaps with earlier ranges are allowed here: the index must still merge.
                let s = next(200);
                let e = s + 1 + next(30);
                occ.insert(l, r, s, e);
                placed.push((l, r, s, e));
            }
        }
    }
}
