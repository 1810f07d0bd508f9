//! Fit index over free ranges: size-class bins (8 per power of two, as in TLSF) each kept
//! sorted by (size, segment, offset), plus a bitmap of non-empty bins. A request is served
//! from its own size class when a range there is big enough, else from the next non-empty
//! class (whose every range fits), and within that class from the newest segment (highest
//! id), smallest range first. Preferring the newest segment lets older segments drain and
//! fall idle, so the heap can release or merge them (see `allocator`); within a class sizes
//! differ by at most 1/8, so the fit stays close to best. An insert or remove moves only the
//! entries of one small bin (a B-tree spent most of a cached malloc + free rebalancing).

use super::free_list::FreeRange;

/// Bins per power of two, as a shift.
const SUB: u32 = 3;
/// Bins for sizes below 2^SUB (one each), then 2^SUB per power of two up to 2^63.
const BINS: usize = ((64 - SUB as usize) << SUB) + (1 << SUB);

/// Bins up to this many entries are scanned rather than searched.
const SCAN_UP_TO: usize = 16;

/// The bin of `size`: monotonic, so larger bins hold only larger sizes.
fn bin(size: u64) -> usize {
    if size < 1 << SUB {
        return size as usize;
    }
    let top = 63 - size.leading_zeros(); // >= SUB
    let sub = (size >> (top - SUB)) & ((1 << SUB) - 1);
    (((top - SUB + 1) << SUB) as u64 + sub) as usize
}

#[derive(Debug)]
pub struct SizeBins {
    bins: Vec<Vec<FreeRange>>,
    /// Bit `i` set when bin `i` is non-empty.
    occupied: [u64; BINS.div_ceil(64)],
}

impl Default for SizeBins {
    fn default() -> Self {
        SizeBins { bins: vec![Vec::new(); BINS], occupied: [0; BINS.div_ceil(64)] }
    }
}

impl SizeBins {
    pub fn insert(&mut self, r: FreeRange) {
        self.insert_in(bin(r.size), r)
    }

    /// Removes `r`; returns false if it was not present.
    pub fn remove(&mut self, r: &FreeRange) -> bool {
        self.remove_in(bin(r.size), r)
    }

    /// Replaces `old` by `new` (`old` must be present). A split or a merge usually leaves a
    /// range in its bin, and then this is one search and a write instead of a remove and an
    /// insert that each shift the bin.
    pub fn replace(&mut self, old: &FreeRange, new: FreeRange) {
        let (b, nb) = (bin(old.size), bin(new.size));
        if nb != b {
            let present = self.remove_in(b, old);
            debug_assert!(present, "replaced range is in its bin");
            return self.insert_in(nb, new);
        }
        let v = &mut self.bins[b];
        let mut i = v.partition_point(|x| x < old);
        debug_assert_eq!(v.get(i), Some(old), "replaced range is in its bin");
        v[i] = new;
        // Restore the order: `new` moves past the neighbours it now sorts beyond.
        while i + 1 < v.len() && v[i + 1] < v[i] {
            v.swap(i, i + 1);
            i += 1;
        }
        while i > 0 && v[i - 1] > v[i] {
            v.swap(i - 1, i);
            i -= 1;
        }
    }

    fn insert_in(&mut self, b: usize, r: FreeRange) {
        let v = &mut self.bins[b];
        // Bins hold a few ranges: moving the larger ones up one by one beats a search and a
        // memmove call (a crowded bin moves as many entries either way).
        v.push(r);
        let mut i = v.len() - 1;
        while i > 0 && v[i - 1] > r {
            v[i] = v[i - 1];
            i -= 1;
        }
        v[i] = r;
        self.occupied[b / 64] |= 1 << (b % 64);
    }

    fn remove_in(&mut self, b: usize, r: &FreeRange) -> bool {
        let v = &mut self.bins[b];
        // A scan for the few entries of a usual bin; a search in a crowded one (thousands of
        // equal holes), where a scan per free would make freeing them all quadratic.
        let found = if v.len() <= SCAN_UP_TO {
            // A free range's node names it: one field to compare, not four.
            v.iter().position(|x| x.node == r.node)
        } else {
            let i = v.partition_point(|x| x < r);
            (v.get(i) == Some(r)).then_some(i)
        };
        let Some(i) = found else { return false };
        debug_assert_eq!(&v[i], r, "a node's entry describes its range");
        for j in i + 1..v.len() {
            v[j - 1] = v[j];
        }
        v.pop();
        if v.is_empty() {
            self.occupied[b / 64] &= !(1 << (b % 64));
        }
        true
    }

    /// The range a request of `size` bytes takes: in `size`'s class or the next non-empty one,
    /// the newest segment's smallest range of at least `size` bytes (lowest offset on ties).
    #[inline]
    pub fn best_fit(&self, size: u64) -> Option<FreeRange> {
        let b = bin(size);
        let v = &self.bins[b];
        let first = v.partition_point(|x| x.size < size);
        if let Some(r) = newest(&v[first..]) {
            return Some(r);
        }
        self.next_nonempty(b + 1).and_then(|n| newest(&self.bins[n]))
    }

    /// The largest range.
    pub fn largest(&self) -> Option<FreeRange> {
        let word = self.occupied.iter().rposition(|&w| w != 0)?;
        let b = word * 64 + 63 - self.occupied[word].leading_zeros() as usize;
        self.bins[b].last().copied()
    }

    /// First non-empty bin at or after `from`.
    fn next_nonempty(&self, from: usize) -> Option<usize> {
        let mut word = from / 64;
        if word >= self.occupied.len() {
            return None;
        }
        let mut bits = self.occupied[word] & (u64::MAX << (from % 64));
        loop {
            if bits != 0 {
                return Some(word * 64 + bits.trailing_zeros() as usize);
            }
            word += 1;
            bits = *self.occupied.get(word)?;
        }
    }
}

/// The first range of the highest segment in a (size, segment, offset)-sorted slice.
#[inline]
fn newest(v: &[FreeRange]) -> Option<FreeRange> {
    let mut best = *v.first()?;
    for x in &v[1..] {
        if x.segment > best.segment {
            best = *x;
        }
    }
    Some(best)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn bins_are_monotonic_and_in_range() {
        let mut last = 0;
        for size in (0..4096u64).chain((12..64).flat_map(|s| [(1u64 << s) - 1, 1 << s, (1 << s) + (1 << (s - 3))])) {
            let b = bin(size);
            assert!(b < BINS, "size {size}");
            if size < 4096 {
                assert!(b >= last, "bin({size}) = {b} < {last}");
                last = b;
            }
        }
        assert_eq!(bin(u64::MAX), BINS - 1);
    }

    /// The fit agrees with a reference over an ordered set (the set it replaced) on random traffic.
    #[test]
    fn matches_a_reference_over_an_ordered_set() {
        let mut next = crate::test_rng::below(0x2545_F491_4F6C_DD1D);
        // The newest segment's smallest fitting range in the first class that has one.
        let reference = |set: &BTreeSet<FreeRange>, size: u64| {
            let from = FreeRange { size, segment: 0, offset: 0, node: 0 };
            let class = bin(set.range(from..).next()?.size);
            let same: Vec<FreeRange> = set.range(from..).take_while(|r| bin(r.size) == class).copied().collect();
            let newest = same.iter().map(|r| r.segment).max()?;
            same.into_iter().find(|r| r.segment == newest)
        };
        let (mut bins, mut set) = (SizeBins::default(), BTreeSet::new());
        for step in 0..20_000u64 {
            let size = match next(4) {
                0 => 1 + next(64),
                1 => 256 * (1 + next(64)),
                2 => 1 << next(40),
                _ => 1 + next(1 << 30),
            };
            let r = FreeRange { size, segment: next(4) as u32, offset: 16 * step, node: step as u32 };
            let pick = next(4);
            if pick == 0 && !set.is_empty() {
                let victim = *set.iter().nth(next(set.len() as u64) as usize).unwrap();
                assert!(bins.remove(&victim));
                set.remove(&victim);
                assert!(!bins.remove(&victim), "removed twice");
            } else if pick == 1 && !set.is_empty() {
                // A split or merge: the same node, often the same bin, sometimes another.
                let old = *set.iter().nth(next(set.len() as u64) as usize).unwrap();
                let new =
                    FreeRange { size: if next(2) == 0 { old.size + next(old.size / 4 + 1) } else { size }, ..old };
                bins.replace(&old, new);
                set.remove(&old);
                set.insert(new);
            } else {
                bins.insert(r);
                set.insert(r);
            }
            assert_eq!(bins.best_fit(size), reference(&set, size), "step {step}");
            assert_eq!(bins.largest(), set.iter().next_back().copied());
        }
    }

    /// A bin crowded past the scan limit (many equal holes) finds what it removes by search,
    /// and both ways agree on what is present.
    #[test]
    fn crowded_bins_remove_by_search() {
        let r = |offset: u64| FreeRange { size: 256, segment: 1, offset, node: offset as u32 };
        let mut bins = SizeBins::default();
        for i in 0..3 * SCAN_UP_TO as u64 {
            bins.insert(r(512 * i));
        }
        assert!(!bins.remove(&FreeRange { node: 7, ..r(512) }), "same place, another node: not present");
        assert!(!bins.remove(&r(100)), "absent offset");
        for i in (0..3 * SCAN_UP_TO as u64).rev() {
            assert_eq!(bins.best_fit(256), Some(r(0)), "lowest offset of the class");
            assert!(bins.remove(&r(512 * i)), "remove {i}");
            assert!(!bins.remove(&r(512 * i)), "removed twice {i}");
        }
        assert_eq!(bins.best_fit(1), None);
    }

    #[test]
    fn the_newest_segment_serves_first_within_a_size_class() {
        let mut bins = SizeBins::default();
        let r = |size, segment, offset| FreeRange { size, segment, offset, node: offset as u32 };
        // 1030 and 1100 share a class (1024..1152); 4096 is three classes up.
        bins.insert(r(1030, 1, 0));
        bins.insert(r(1100, 2, 0));
        bins.insert(r(4096, 3, 0));
        assert_eq!(bins.best_fit(1024), Some(r(1100, 2, 0)), "same class: the newer segment");
        assert_eq!(bins.best_fit(1000), Some(r(1100, 2, 0)), "next non-empty class: its newest segment");
        assert_eq!(bins.best_fit(1101), Some(r(4096, 3, 0)), "nothing big enough in the class");
        assert_eq!(bins.best_fit(5000), None);
    }
}
