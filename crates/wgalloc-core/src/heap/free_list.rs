//! Free-range bookkeeping for the segments of one pool: best-fit lookup ordered by
//! (size, segment, offset), block split on allocation and coalescing of free
//! neighbours on release. Pure logic (no wgpu) so it is unit-tested and
//! benchmarked on its own; the allocator owns the GPU buffers.

use std::collections::{BTreeMap, BTreeSet};

/// A free range: `size` bytes at `offset` inside segment `segment`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct FreeRange {
    pub size: u64,
    pub segment: u32,
    pub offset: u64,
}

/// Free ranges of every segment of a pool.
#[derive(Debug, Default)]
pub struct FreeList {
    /// Best-fit index: smallest size first, then lowest segment and address.
    by_size: BTreeSet<FreeRange>,
    /// Free ranges by (segment, offset), for coalescing neighbours. One flat map:
    /// a nested map per segment doubled the tree walks on the alloc/free fast path.
    by_offset: BTreeMap<(u32, u64), u64>,
    free_bytes: u64,
}

impl FreeList {
    /// Adds a whole new segment as one free range.
    pub fn add_segment(&mut self, segment: u32, size: u64) {
        self.insert(FreeRange { size, segment, offset: 0 });
    }

    /// Removes a segment that is entirely free. Returns false if any of it is in use.
    pub fn remove_segment(&mut self, segment: u32, size: u64) -> bool {
        let whole = self.is_segment_free(segment, size);
        if whole {
            self.remove(FreeRange { size, segment, offset: 0 });
        }
        whole
    }

    /// Best fit: the smallest free range of at least `size` bytes, split so the
    /// front is returned and the tail stays free. `size` must be a multiple of the
    /// pool's alignment, which keeps every offset aligned.
    pub fn take(&mut self, size: u64) -> Option<(u32, u64)> {
        let found = *self.by_size.range(FreeRange { size, segment: 0, offset: 0 }..).next()?;
        self.remove(found);
        if found.size > size {
            self.insert(FreeRange { size: found.size - size, segment: found.segment, offset: found.offset + size });
        }
        Some((found.segment, found.offset))
    }

    /// Returns `[offset, offset+size)` of `segment`, merged with free neighbours.
    pub fn give_back(&mut self, segment: u32, offset: u64, size: u64) {
        let mut start = offset;
        let mut len = size;
        let prev = self.by_offset.range((segment, 0)..(segment, offset)).next_back().map(|(&(_, o), &s)| (o, s));
        let next = self.by_offset.get(&(segment, offset + size)).copied();
        // Merged neighbours are removed in place (no allocation on the free fast path).
        if let Some((po, ps)) = prev {
            if po + ps == offset {
                self.remove(FreeRange { size: ps, segment, offset: po });
                start = po;
                len += ps;
            }
        }
        if let Some(ns) = next {
            self.remove(FreeRange { size: ns, segment, offset: offset + size });
            len += ns;
        }
        self.insert(FreeRange { size: len, segment, offset: start });
    }

    /// True if the segment is one free range of `size` bytes (nothing allocated in it).
    pub fn is_segment_free(&self, segment: u32, size: u64) -> bool {
        // A free range starting at 0 spanning the whole segment can only be the only one.
        self.by_offset.get(&(segment, 0)) == Some(&size)
    }

    pub fn free_bytes(&self) -> u64 {
        self.free_bytes
    }

    /// The largest free range (the fragmentation figure in out-of-memory messages).
    pub fn largest(&self) -> u64 {
        self.by_size.iter().next_back().map_or(0, |r| r.size)
    }

    /// Free ranges of one segment, by offset.
    pub fn segment_ranges(&self, segment: u32) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.by_offset.range((segment, 0)..=(segment, u64::MAX)).map(|(&(_, o), &s)| (o, s))
    }

    fn insert(&mut self, r: FreeRange) {
        self.by_size.insert(r);
        self.by_offset.insert((r.segment, r.offset), r.size);
        self.free_bytes += r.size;
    }

    fn remove(&mut self, r: FreeRange) {
        self.by_size.remove(&r);
        self.by_offset.remove(&(r.segment, r.offset));
        self.free_bytes -= r.size;
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
        assert_eq!(f.take(256), Some((1, 0)));
        assert_eq!(f.take(128), Some((0, 0)));
        assert_eq!(f.take(128), Some((0, 128)));
        assert_eq!(f.take(2048), None);
        assert_eq!(f.free_bytes(), 1024 - 256);
        assert!(!f.is_segment_free(0, 1024));
        f.give_back(0, 0, 128);
        assert_eq!(f.largest(), 768);
        f.give_back(0, 128, 128); // merges with both neighbours
        assert!(f.is_segment_free(0, 1024));
        assert!(f.remove_segment(0, 1024));
        assert!(!f.remove_segment(1, 256), "segment 1 is still in use");
        f.give_back(1, 0, 256);
        assert!(f.remove_segment(1, 256));
        assert_eq!(f.free_bytes(), 0);
    }

    #[test]
    fn best_fit_prefers_the_tightest_hole() {
        let mut f = FreeList::default();
        f.add_segment(0, 1000);
        let a = f.take(100).unwrap();
        let _b = f.take(100).unwrap();
        let c = f.take(300).unwrap();
        let _d = f.take(100).unwrap();
        f.give_back(0, a.1, 100); // hole of 100 at 0
        f.give_back(0, c.1, 300); // hole of 300 at 200
        assert_eq!(f.take(90), Some((0, 0)), "tightest hole first");
        assert_eq!(f.take(250), Some((0, 200)));
    }

    /// Random alloc/free sequences never hand out overlapping ranges and conserve bytes.
    #[test]
    fn random_sequences_never_overlap() {
        let mut seed = 0x9e3779b97f4a7c15u64;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut f = FreeList::default();
        f.add_segment(0, 1 << 16);
        f.add_segment(1, 1 << 14);
        let mut live: Vec<(u32, u64, u64)> = Vec::new();
        for _ in 0..5000 {
            if rnd() % 3 != 0 || live.is_empty() {
                let size = 16 * (1 + rnd() % 64);
                if let Some((s, o)) = f.take(size) {
                    for &(ls, lo, lz) in &live {
                        assert!(ls != s || o + size <= lo || lo + lz <= o, "overlap");
                    }
                    live.push((s, o, size));
                }
            } else {
                let i = (rnd() as usize) % live.len();
                let (s, o, z) = live.swap_remove(i);
                f.give_back(s, o, z);
            }
            let used: u64 = live.iter().map(|l| l.2).sum();
            assert_eq!(used + f.free_bytes(), (1 << 16) + (1 << 14));
        }
    }
}
