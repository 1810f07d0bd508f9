//! Range bookkeeping for the segments of one pool: best-fit lookup ordered by
//! (size, segment, offset), block split on allocation and coalescing of free
//! neighbours on release. Pure logic (no wgpu) so it is unit-tested and
//! benchmarked on its own; the allocator owns the GPU buffers.
//!
//! As in PyTorch's CUDA caching allocator, every range of a segment, free or
//! taken, is a node in an address-ordered list, so freeing finds its neighbours
//! through two links instead of a search. Best fit comes from [`SizeBins`]. A cached
//! malloc + free walks no tree and hashes nothing.

use std::collections::HashMap;

use super::size_bins::SizeBins;

/// A free range: `size` bytes at `offset` inside segment `segment`, held by `node`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FreeRange {
    pub size: u64,
    pub segment: u32,
    pub offset: u64,
    pub node: u32,
}

// Ordered by (size, segment, offset): no two free ranges share a place, so `node` never decides
// (comparing three fields instead of four is measurable on the malloc + free path).
impl Ord for FreeRange {
    #[inline]
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.size, self.segment, self.offset).cmp(&(other.size, other.segment, other.offset))
    }
}

impl PartialOrd for FreeRange {
    #[inline]
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Handle to a taken range, returned by [`FreeList::take`] and given back to
/// [`FreeList::give_back`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RangeId(u32);

const NIL: u32 = u32::MAX;

#[derive(Debug, Clone, Copy)]
struct Node {
    segment: u32,
    offset: u64,
    size: u64,
    /// Neighbours by address within the segment (NIL at the ends).
    prev: u32,
    next: u32,
    free: bool,
}

/// Ranges of every segment of a pool.
#[derive(Debug, Default)]
pub struct FreeList {
    nodes: Vec<Node>,
    /// Slots of `nodes` to reuse.
    spare: Vec<u32>,
    /// Best-fit index of the free nodes: smallest size first, then lowest segment and address.
    by_size: SizeBins,
    /// First node (offset 0) of each segment; it is never merged away.
    heads: HashMap<u32, u32>,
    free_bytes: u64,
}

impl FreeList {
    /// Adds a whole new segment as one free range.
    pub fn add_segment(&mut self, segment: u32, size: u64) {
        let n = self.new_node(Node { segment, offset: 0, size, prev: NIL, next: NIL, free: true });
        self.heads.insert(segment, n);
        self.by_size.insert(self.range(n));
        self.free_bytes += size;
    }

    /// Removes a segment that is entirely free. Returns false if any of it is in use.
    pub fn remove_segment(&mut self, segment: u32, size: u64) -> bool {
        if !self.is_segment_free(segment, size) {
            return false;
        }
        let n = self.heads.remove(&segment).expect("free segment has a head");
        self.by_size.remove(&self.range(n));
        self.free_bytes -= size;
        self.spare.push(n);
        if self.heads.is_empty() {
            // No segment left, so no range either: give back what a burst of blocks grew.
            *self = FreeList::default();
        }
        true
    }

    /// Best fit: the smallest free range of at least `size` bytes, split so the
    /// front is returned and the tail stays free. `size` must be a multiple of the
    /// pool's alignment, which keeps every offset aligned.
    pub fn take(&mut self, size: u64) -> Option<(u32, u64, RangeId)> {
        let found = self.by_size.best_fit(size)?;
        let n = found.node;
        self.split(n, self.nodes[n as usize], size, Some(&found));
        self.free_bytes -= size;
        Some((found.segment, found.offset, RangeId(n)))
    }

    /// Marks the first `size` bytes of free node `n` taken; a new node after it holds the free
    /// tail, which takes the place of `found` (node `n`'s entry) in the size index, or enters it
    /// when `n` has none.
    #[inline(always)]
    fn split(&mut self, n: u32, node: Node, size: u64, found: Option<&FreeRange>) {
        if node.size > size {
            let tail = self.new_node(Node {
                segment: node.segment,
                offset: node.offset + size,
                size: node.size - size,
                prev: n,
                next: node.next,
                free: true,
            });
            if node.next != NIL {
                self.nodes[node.next as usize].prev = tail;
            }
            let front = &mut self.nodes[n as usize];
            front.next = tail;
            front.size = size;
            match found {
                Some(found) => self.by_size.replace(found, self.range(tail)),
                None => self.by_size.insert(self.range(tail)),
            }
        } else if let Some(found) = found {
            self.by_size.remove(found);
        }
        self.nodes[n as usize].free = false;
    }

    /// Takes the `size` bytes at `offset` in `segment` (where a moved block goes). None unless
    /// they lie inside one free range.
    pub fn take_at(&mut self, segment: u32, offset: u64, size: u64) -> Option<RangeId> {
        let mut n = self.heads.get(&segment).copied().unwrap_or(NIL);
        while n != NIL && self.nodes[n as usize].offset + self.nodes[n as usize].size <= offset {
            n = self.nodes[n as usize].next;
        }
        let node = *self.nodes.get(n as usize)?;
        if !node.free || node.offset > offset || node.offset + node.size < offset + size {
            return None;
        }
        let taken = if node.offset < offset {
            // The free head before `offset` stays free in `n` (its entry in the size index
            // shrinks); the rest becomes its own node, taken at once, so it never enters the index.
            let head = offset - node.offset;
            let found = self.range(n);
            let rest = self.new_node(Node { offset, size: node.size - head, prev: n, ..node });
            if node.next != NIL {
                self.nodes[node.next as usize].prev = rest;
            }
            let front = &mut self.nodes[n as usize];
            front.next = rest;
            front.size = head;
            self.by_size.replace(&found, self.range(n));
            self.split(rest, self.nodes[rest as usize], size, None);
            rest
        } else {
            let found = self.range(n);
            self.split(n, node, size, Some(&found));
            n
        };
        self.free_bytes -= size;
        Some(RangeId(taken))
    }

    pub fn give_back(&mut self, id: RangeId) {
        let mut n = id.0;
        let node = &mut self.nodes[n as usize];
        debug_assert!(!node.free, "range given back twice");
        node.free = true;
        self.free_bytes += node.size;
        let (prev, next) = (node.prev, node.next);
        // The free neighbours leave the size index; the merged range takes the place of one.
        let mut absorbed = [None; 2];
        if next != NIL && self.nodes[next as usize].free {
            absorbed[0] = Some(self.range(next));
            self.absorb_next(n);
        }
        if prev != NIL && self.nodes[prev as usize].free {
            absorbed[1] = Some(self.range(prev));
            self.absorb_next(prev);
            n = prev;
        }
        let merged = self.range(n);
        match absorbed {
            [None, None] => self.by_size.insert(merged),
            [Some(old), None] | [None, Some(old)] => self.by_size.replace(&old, merged),
            [Some(a), Some(b)] => {
                self.by_size.remove(&a);
                self.by_size.replace(&b, merged);
            }
        }
    }

    pub fn is_segment_free(&self, segment: u32, size: u64) -> bool {
        self.heads.get(&segment).is_some_and(|&n| {
            let node = &self.nodes[n as usize];
            node.free && node.size == size
        })
    }

    pub fn free_bytes(&self) -> u64 {
        self.free_bytes
    }

    /// The largest free range (the fragmentation figure in out-of-memory messages).
    pub fn largest(&self) -> u64 {
        self.by_size.largest().map_or(0, |r| r.size)
    }

    /// Free ranges of one segment, by offset.
    pub fn segment_ranges(&self, segment: u32) -> impl Iterator<Item = (u64, u64)> + '_ {
        let mut n = self.heads.get(&segment).copied().unwrap_or(NIL);
        std::iter::from_fn(move || {
            while n != NIL {
                let node = &self.nodes[n as usize];
                n = node.next;
                if node.free {
                    return Some((node.offset, node.size));
                }
            }
            None
        })
    }

    fn range(&self, n: u32) -> FreeRange {
        let node = &self.nodes[n as usize];
        FreeRange { size: node.size, segment: node.segment, offset: node.offset, node: n }
    }

    fn new_node(&mut self, node: Node) -> u32 {
        match self.spare.pop() {
            Some(n) => {
                self.nodes[n as usize] = node;
                n
            }
            None => {
                self.nodes.push(node);
                u32::try_from(self.nodes.len() - 1).expect("fewer than 2^32 heap ranges")
            }
        }
    }

    /// Merges node `n`'s successor into `n` and recycles the successor's slot.
    #[inline(always)]
    fn absorb_next(&mut self, n: u32) {
        let next = self.nodes[n as usize].next;
        let gone = self.nodes[next as usize];
        if gone.next != NIL {
            self.nodes[gone.next as usize].prev = n;
        }
        let node = &mut self.nodes[n as usize];
        node.size += gone.size;
        node.next = gone.next;
        self.spare.push(next);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn best_fit_split_and_coalesce() {
        let mut f = FreeList::default();
        f.add_segment(0, 1024);
        f.add_segment(1, 256);
        // Best fit picks the smaller segment for a request that fits it.
        let take = |f: &mut FreeList, size| f.take(size).map(|(s, o, id)| ((s, o), id));
        let (at, x) = take(&mut f, 256).unwrap();
        assert_eq!(at, (1, 0));
        let (at, a) = take(&mut f, 128).unwrap();
        assert_eq!(at, (0, 0));
        let (at, b) = take(&mut f, 128).unwrap();
        assert_eq!(at, (0, 128));
        assert_eq!(f.take(2048), None);
        assert_eq!(f.free_bytes(), 1024 - 256);
        assert!(!f.is_segment_free(0, 1024));
        f.give_back(a);
        assert_eq!(f.largest(), 768);
        assert_eq!(f.segment_ranges(0).collect::<Vec<_>>(), vec![(0, 128), (256, 768)]);
        f.give_back(b); // merges with both neighbours
        assert!(f.is_segment_free(0, 1024));
        assert!(f.remove_segment(0, 1024));
        assert!(!f.remove_segment(1, 256), "segment 1 is still in use");
        f.give_back(x);
        assert!(f.remove_segment(1, 256));
        assert_eq!(f.free_bytes(), 0);
        assert_eq!(f.largest(), 0);
    }

    #[test]
    fn a_free_list_with_no_segment_left_holds_no_memory() {
        let mut f = FreeList::default();
        f.add_segment(0, 1 << 20);
        let taken: Vec<RangeId> = (0..4096).map(|_| f.take(256).unwrap().2).collect();
        assert!(f.nodes.capacity() >= 4096);
        taken.into_iter().for_each(|id| f.give_back(id));
        assert!(f.remove_segment(0, 1 << 20));
        assert_eq!((f.nodes.capacity(), f.spare.capacity(), f.free_bytes()), (0, 0, 0));
        // And it works as new.
        f.add_segment(7, 512);
        assert_eq!(f.take(512).map(|(s, o, _)| (s, o)), Some((7, 0)));
    }

    #[test]
    fn best_fit_prefers_the_tightest_hole() {
        let mut f = FreeList::default();
        f.add_segment(0, 1000);
        let a = f.take(100).unwrap();
        let _b = f.take(100).unwrap();
        let c = f.take(300).unwrap();
        let _d = f.take(100).unwrap();
        f.give_back(a.2); // hole of 100 at 0
        f.give_back(c.2); // hole of 300 at 200
        assert_eq!(f.take(90).map(|t| (t.0, t.1)), Some((0, 0)), "tightest hole first");
        assert_eq!(f.take(250).map(|t| (t.0, t.1)), Some((0, 200)));
    }

    /// Random alloc/free sequences (best fit, and placements inside a free range as compaction
    /// makes them) never hand out overlapping ranges, conserve bytes and keep the size index
    /// in step with the ranges.
    #[test]
    fn random_sequences_never_overlap() {
        let mut next = crate::test_rng::below(0x9e37_79b9_7f4a_7c15);
        let mut f = FreeList::default();
        f.add_segment(0, 1 << 16);
        f.add_segment(1, 1 << 14);
        let mut live: Vec<(u32, u64, u64, RangeId)> = Vec::new();
        for _ in 0..5000 {
            if next(3) != 0 || live.is_empty() {
                let size = 16 * (1 + next(64));
                let taken = if next(4) == 0 {
                    // Inside a random free range, with free bytes left on either side or both.
                    let seg = next(2) as u32;
                    let ranges: Vec<(u64, u64)> = f.segment_ranges(seg).filter(|r| r.1 >= size).collect();
                    ranges.get(next(ranges.len() as u64 + 1) as usize).and_then(|&(at, len)| {
                        let o = at + 16 * next((len - size) / 16 + 1);
                        f.take_at(seg, o, size).map(|id| (seg, o, id))
                    })
                } else {
                    f.take(size)
                };
                if let Some((s, o, id)) = taken {
                    for &(ls, lo, lz, _) in &live {
                        assert!(ls != s || o + size <= lo || lo + lz <= o, "overlap");
                    }
                    live.push((s, o, size, id));
                }
            } else {
                let i = next(live.len() as u64) as usize;
                let (_, _, _, id) = live.swap_remove(i);
                f.give_back(id);
            }
            let used: u64 = live.iter().map(|l| l.2).sum();
            assert_eq!(used + f.free_bytes(), (1 << 16) + (1 << 14));
            // Free ranges never touch (they would have been merged) and tile with the live ones.
            for seg in [0u32, 1] {
                let ranges: Vec<(u64, u64)> = f.segment_ranges(seg).collect();
                assert!(ranges.windows(2).all(|w| w[0].0 + w[0].1 < w[1].0), "unmerged neighbours {ranges:?}");
            }
            let largest = [0u32, 1].iter().flat_map(|&s| f.segment_ranges(s)).map(|r| r.1).max().unwrap_or(0);
            assert_eq!(f.largest(), largest, "the size index lists the free ranges");
        }
    }
}
