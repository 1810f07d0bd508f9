//! The physical blocks: reference counts, the free queue, and the prefix map of cached
//! full blocks with their least-recently-used order.

use std::collections::{BTreeMap, HashMap};

/// Index of a physical block in the K/V pools.
pub type BlockId = u32;

/// What a cached block holds, kept to verify a hash hit: a 64-bit chained hash alone
/// would let two different prefixes that collide share KV silently.
struct CachedContent {
    hash: u64,
    parent: u64,
    salt: u64,
    tokens: Box<[u32]>,
}

// Note [Free queue and eviction order]
// An unreferenced block is either plain free (no cached content) or evictable (a full block
// still in the prefix map). Allocation takes plain free blocks first, so cached prefixes
// survive as long as anything else is left, then evicts the evictable block released
// longest ago. A sequence releases its blocks tail first, so its tail, which fewer
// prompts share, is evicted before its head. A block with references is in neither set,
// so nothing ever allocates (and so overwrites) a block that a sequence refers to.

// Note [Blocks held for recorded work]
// Work recorded on a stream but not yet submitted (a write, an attention) names blocks; if one
// of them were freed and taken by another sequence before that submission, the late work would
// write over the new owner's K/V. The GPU layer holds such blocks until the stream submits
// (the queue then orders the work before anything recorded later): a block without references
// but with holds is in neither free set, and joins one when the last hold goes.
pub(crate) struct BlockPool {
    refs: Vec<u32>,
    holds: Vec<u32>,
    content: Vec<Option<CachedContent>>,
    free: Vec<BlockId>,
    evictable: BTreeMap<u64, BlockId>,
    tick_of: Vec<u64>,
    next_tick: u64,
    cached: HashMap<u64, BlockId>,
    pub(crate) evictions: u64,
}

impl BlockPool {
    pub(crate) fn new(blocks: u32) -> Self {
        BlockPool {
            refs: vec![0; blocks as usize],
            holds: vec![0; blocks as usize],
            content: (0..blocks).map(|_| None).collect(),
            // Popped from the end: block 0 first.
            free: (0..blocks).rev().collect(),
            evictable: BTreeMap::new(),
            tick_of: vec![0; blocks as usize],
            next_tick: 0,
            cached: HashMap::new(),
            evictions: 0,
        }
    }

    pub(crate) fn total(&self) -> u32 {
        self.refs.len() as u32
    }

    pub(crate) fn free_count(&self) -> u32 {
        self.free.len() as u32
    }

    pub(crate) fn evictable_count(&self) -> u32 {
        self.evictable.len() as u32
    }

    /// Blocks an allocation can take now.
    pub(crate) fn available(&self) -> u32 {
        self.free_count() + self.evictable_count()
    }

    pub(crate) fn refs(&self, b: BlockId) -> u32 {
        self.refs[b as usize]
    }

    /// Takes a block with one reference; the caller checked `available()`.
    pub(crate) fn allocate(&mut self) -> BlockId {
        let b = match self.free.pop() {
            Some(b) => b,
            None => {
                let (_, b) = self.evictable.pop_first().expect("allocate: the caller checked available()");
                let old = self.content[b as usize].take().expect("evictable blocks are cached");
                self.cached.remove(&old.hash);
                self.evictions += 1;
                b
            }
        };
        debug_assert_eq!(self.refs[b as usize], 0);
        self.refs[b as usize] = 1;
        b
    }

    /// One more reference to `b` (a prefix hit or a fork); an evictable block stops being one.
    pub(crate) fn retain(&mut self, b: BlockId) {
        if self.in_free_sets(b) {
            self.evictable.remove(&self.tick_of[b as usize]);
        }
        self.refs[b as usize] += 1;
    }

    /// Drops one reference; the last one makes the block evictable if cached, free if not
    /// (once no hold is left: Note [Blocks held for recorded work]).
    pub(crate) fn release(&mut self, b: BlockId) {
        debug_assert!(self.refs[b as usize] > 0, "release of an unreferenced block");
        self.refs[b as usize] -= 1;
        self.enter_free_sets_if_unused(b);
    }

    /// One more hold on `b`, a block some sequence refers to: recorded work names only those
    /// (Note [Blocks held for recorded work]).
    pub(crate) fn hold(&mut self, b: BlockId) {
        debug_assert!(self.refs[b as usize] > 0, "hold of a block no sequence refers to");
        self.holds[b as usize] += 1;
    }

    /// Drops one hold; a block left without references or holds joins the free sets.
    pub(crate) fn unhold(&mut self, b: BlockId) {
        debug_assert!(self.holds[b as usize] > 0, "unhold of a block not held");
        self.holds[b as usize] -= 1;
        self.enter_free_sets_if_unused(b);
    }

    fn in_free_sets(&self, b: BlockId) -> bool {
        self.refs[b as usize] == 0 && self.holds[b as usize] == 0
    }

    /// Once nothing refers to or holds `b`: evictable if cached, free if not.
    fn enter_free_sets_if_unused(&mut self, b: BlockId) {
        if !self.in_free_sets(b) {
            return;
        }
        if self.content[b as usize].is_some() {
            self.next_tick += 1;
            self.tick_of[b as usize] = self.next_tick;
            self.evictable.insert(self.next_tick, b);
        } else {
            self.free.push(b);
        }
    }

    /// Whether `b` would count in `available()` once retained: retaining an evictable
    /// block takes it out of the blocks an allocation can take.
    pub(crate) fn is_evictable(&self, b: BlockId) -> bool {
        self.in_free_sets(b)
    }

    /// The cached block holding exactly `tokens` after the prefix whose hash is `parent`.
    pub(crate) fn lookup(&self, hash: u64, parent: u64, salt: u64, tokens: &[u32]) -> Option<BlockId> {
        let &b = self.cached.get(&hash)?;
        let c = self.content[b as usize].as_ref()?;
        (c.parent == parent && c.salt == salt && *c.tokens == *tokens).then_some(b)
    }

    /// Enters the full block `b` in the prefix map, unless a block with that content is
    /// already there (the first one stays; `b` is then an ordinary block).
    pub(crate) fn register(&mut self, b: BlockId, hash: u64, parent: u64, salt: u64, tokens: &[u32]) {
        if self.cached.contains_key(&hash) || self.content[b as usize].is_some() {
            return;
        }
        self.cached.insert(hash, b);
        self.content[b as usize] = Some(CachedContent { hash, parent, salt, tokens: tokens.into() });
    }

    /// Checks the pool's own invariants (tests and fuzzing).
    #[cfg(test)]
    pub(crate) fn check(&self) {
        let mut seen = vec![0u8; self.refs.len()];
        for &b in &self.free {
            assert_eq!(self.refs[b as usize], 0, "free block {b} has references");
            assert!(self.content[b as usize].is_none(), "free block {b} is cached");
            seen[b as usize] += 1;
        }
        for (&t, &b) in &self.evictable {
            assert_eq!(self.refs[b as usize], 0, "evictable block {b} has references");
            assert_eq!(self.tick_of[b as usize], t);
            assert!(self.content[b as usize].is_some(), "evictable block {b} is not cached");
            seen[b as usize] += 1;
        }
        for (b, &r) in self.refs.iter().enumerate() {
            let h = self.holds[b];
            let free = r == 0 && h == 0;
            assert_eq!(
                seen[b] as u32,
                u32::from(free),
                "block {b} (refs {r}, holds {h}) is in the free sets {} times",
                seen[b]
            );
        }
        for (&h, &b) in &self.cached {
            assert_eq!(self.content[b as usize].as_ref().map(|c| c.hash), Some(h));
        }
    }
}
