//! Set of integers in `0..n` with predecessor and successor queries, for the
//! checker's sweep: a 64-ary tree of bit words (a parent bit is set when its child
//! word is non-zero), so every operation is O(log64 n) word operations.

pub(crate) struct RankSet {
    /// `levels[0]` holds one bit per element, each next level one bit per word below.
    levels: Vec<Vec<u64>>,
}

impl RankSet {
    pub fn new(n: usize) -> Self {
        let mut levels = Vec::new();
        let mut len = n.max(1);
        loop {
            let words = len.div_ceil(64);
            levels.push(vec![0u64; words]);
            if words == 1 {
                return RankSet { levels };
            }
            len = words;
        }
    }

    pub fn insert(&mut self, mut x: usize) {
        for level in &mut self.levels {
            let w = &mut level[x / 64];
            let was = *w;
            *w |= 1 << (x % 64);
            if was != 0 {
                return; // ancestors already marked
            }
            x /= 64;
        }
    }

    pub fn remove(&mut self, mut x: usize) {
        for level in &mut self.levels {
            let w = &mut level[x / 64];
            *w &= !(1 << (x % 64));
            if *w != 0 {
                return; // the word still has elements
            }
            x /= 64;
        }
    }

    /// Smallest element above `x`.
    pub fn next(&self, mut x: usize) -> Option<usize> {
        for (k, level) in self.levels.iter().enumerate() {
            let above = level[x / 64] & (!1u64 << (x % 64));
            if above != 0 {
                return Some(self.first_below(k, x / 64 * 64 + above.trailing_zeros() as usize));
            }
            x /= 64;
        }
        None
    }

    /// Largest element below `x`.
    pub fn prev(&self, mut x: usize) -> Option<usize> {
        for (k, level) in self.levels.iter().enumerate() {
            let below = level[x / 64] & ((1u64 << (x % 64)) - 1);
            if below != 0 {
                return Some(self.last_below(k, x / 64 * 64 + 63 - below.leading_zeros() as usize));
            }
            x /= 64;
        }
        None
    }

    /// Smallest element under bit `x` of level `k`.
    fn first_below(&self, k: usize, mut x: usize) -> usize {
        for level in self.levels[..k].iter().rev() {
            x = x * 64 + level[x].trailing_zeros() as usize;
        }
        x
    }

    /// Largest element under bit `x` of level `k`.
    fn last_below(&self, k: usize, mut x: usize) -> usize {
        for level in self.levels[..k].iter().rev() {
            x = x * 64 + 63 - level[x].leading_zeros() as usize;
        }
        x
    }
}

#[cfg(test)]
mod tests {
    use super::RankSet;
    use std::collections::BTreeSet;

    #[test]
    fn matches_btreeset() {
        let mut next = crate::test_rng::below(0x2545_F491_4F6C_DD1Du64);
        for n in [1usize, 2, 63, 64, 65, 200, 4096, 4097, 300_000] {
            let mut set = RankSet::new(n);
            let mut want = BTreeSet::new();
            for _ in 0..3000 {
                let x = next(n as u64) as usize;
                if want.contains(&x) {
                    set.remove(x);
                    want.remove(&x);
                } else {
                    set.insert(x);
                    want.insert(x);
                }
                let y = next(n as u64) as usize;
                assert_eq!(set.next(y), want.range(y + 1..).next().copied(), "n {n} next({y})");
                assert_eq!(set.prev(y), want.range(..y).next_back().copied(), "n {n} prev({y})");
            }
        }
    }
}
