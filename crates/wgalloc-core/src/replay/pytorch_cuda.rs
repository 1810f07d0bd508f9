//! PyTorch's CUDA caching allocator policy (`c10/cuda/CUDACachingAllocator.cpp`, default
//! settings: one stream, no `max_split_size`, no expandable segments, no GC threshold),
//! simulated on byte counts as the baseline wgalloc's heap is measured against.
//!
//! - Requests round up to 512 bytes; up to 1 MiB they use the small pool, else the large one.
//! - A miss allocates a segment: 2 MiB for small requests, 20 MiB for requests under 10 MiB,
//!   else the request rounded up to 2 MiB.
//! - Best fit (smallest block, then lowest address) in the request's pool. A block is split
//!   when the remainder is >= 512 bytes (small pool) or > 1 MiB (large pool); a freed block
//!   merges with free neighbours of its segment.
//! - When the device refuses a segment (here: past `capacity`), every cached segment that is
//!   entirely free is released and the allocation retried once.

use std::collections::BTreeSet;

const MIN_BLOCK: u64 = 512;
const SMALL_SIZE: u64 = 1 << 20;
const SMALL_BUFFER: u64 = 2 << 20;
const LARGE_BUFFER: u64 = 20 << 20;
const MIN_LARGE_ALLOC: u64 = 10 << 20;
const ROUND_LARGE: u64 = 2 << 20;

const NIL: usize = usize::MAX;

pub fn round_size(size: u64) -> u64 {
    size.max(1).div_ceil(MIN_BLOCK) * MIN_BLOCK
}

pub fn allocation_size(size: u64) -> u64 {
    if size <= SMALL_SIZE {
        SMALL_BUFFER
    } else if size < MIN_LARGE_ALLOC {
        LARGE_BUFFER
    } else {
        size.div_ceil(ROUND_LARGE) * ROUND_LARGE
    }
}

#[derive(Debug, Clone, Copy)]
struct Block {
    /// Address (segments get disjoint address ranges, as from cudaMalloc).
    addr: u64,
    size: u64,
    small: bool,
    allocated: bool,
    /// Neighbours within the segment (NIL at its ends).
    prev: usize,
    next: usize,
}

/// The allocator's state; block handles are indices.
#[derive(Debug, Default)]
pub struct CudaCachingAllocator {
    blocks: Vec<Block>,
    spare: Vec<usize>,
    /// Free blocks of the small and large pools by (size, address).
    pools: [BTreeSet<(u64, u64, usize)>; 2],
    capacity: Option<u64>,
    next_addr: u64,
    pub reserved: u64,
    pub peak_reserved: u64,
    pub driver_allocations: u64,
    pub driver_frees: u64,
    pub retries: u64,
}

impl CudaCachingAllocator {
    /// `capacity`: device memory the segments may take (`None`: unlimited).
    pub fn new(capacity: Option<u64>) -> Self {
        CudaCachingAllocator { capacity, ..Default::default() }
    }

    /// Allocates `size` bytes; `None` when the device is out of memory even after the retry.
    pub fn malloc(&mut self, size: u64) -> Option<usize> {
        let size = round_size(size);
        let small = size <= SMALL_SIZE;
        let found = match self.pools[small as usize].range((size, 0, 0)..).next().copied() {
            Some(key) => {
                self.pools[small as usize].remove(&key);
                key.2
            }
            None => {
                let alloc = allocation_size(size);
                match self.alloc_segment(alloc, small) {
                    Some(b) => b,
                    None => {
                        self.release_cached_segments();
                        self.retries += 1;
                        self.alloc_segment(alloc, small)?
                    }
                }
            }
        };
        let remaining = self.blocks[found].size - size;
        let split = if small { remaining >= MIN_BLOCK } else { remaining > SMALL_SIZE };
        if split {
            // The found block keeps the front; the remainder is a new free block after it.
            let b = self.blocks[found];
            let rest = self.new_block(Block {
                addr: b.addr + size,
                size: remaining,
                small,
                allocated: false,
                prev: found,
                next: b.next,
            });
            if b.next != NIL {
                self.blocks[b.next].prev = rest;
            }
            self.blocks[found].next = rest;
            self.blocks[found].size = size;
            self.insert_free(rest);
        }
        self.blocks[found].allocated = true;
        Some(found)
    }

    pub fn free(&mut self, block: usize) {
        self.blocks[block].allocated = false;
        let mut b = block;
        let prev = self.blocks[b].prev;
        if prev != NIL && !self.blocks[prev].allocated {
            self.remove_free(prev);
            self.absorb_next(prev);
            b = prev;
        }
        let next = self.blocks[b].next;
        if next != NIL && !self.blocks[next].allocated {
            self.remove_free(next);
            self.absorb_next(b);
        }
        self.insert_free(b);
    }

    fn alloc_segment(&mut self, size: u64, small: bool) -> Option<usize> {
        if self.capacity.is_some_and(|c| self.reserved + size > c) {
            return None;
        }
        self.reserved += size;
        self.peak_reserved = self.peak_reserved.max(self.reserved);
        self.driver_allocations += 1;
        let addr = self.next_addr;
        self.next_addr += size;
        Some(self.new_block(Block { addr, size, small, allocated: false, prev: NIL, next: NIL }))
    }

    /// Releases every free block that is a whole segment (release_cached_blocks).
    fn release_cached_segments(&mut self) {
        for pool in 0..2 {
            let whole: Vec<(u64, u64, usize)> = self.pools[pool]
                .iter()
                .filter(|k| self.blocks[k.2].prev == NIL && self.blocks[k.2].next == NIL)
                .copied()
                .collect();
            for key in whole {
                self.pools[pool].remove(&key);
                self.reserved -= key.0;
                self.driver_frees += 1;
                self.spare.push(key.2);
            }
        }
    }

    fn insert_free(&mut self, b: usize) {
        let block = &self.blocks[b];
        self.pools[block.small as usize].insert((block.size, block.addr, b));
    }

    fn remove_free(&mut self, b: usize) {
        let block = &self.blocks[b];
        let present = self.pools[block.small as usize].remove(&(block.size, block.addr, b));
        debug_assert!(present, "a free block is in its pool");
    }

    /// Merges block `b`'s successor into `b`.
    fn absorb_next(&mut self, b: usize) {
        let next = self.blocks[b].next;
        let gone = self.blocks[next];
        if gone.next != NIL {
            self.blocks[gone.next].prev = b;
        }
        self.blocks[b].size += gone.size;
        self.blocks[b].next = gone.next;
        self.spare.push(next);
    }

    fn new_block(&mut self, block: Block) -> usize {
        match self.spare.pop() {
            Some(i) => {
                self.blocks[i] = block;
                i
            }
            None => {
                self.blocks.push(block);
                self.blocks.len() - 1
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn sizes_round_and_segments_follow_the_request_class() {
        assert_eq!(round_size(0), 512);
        assert_eq!(round_size(513), 1024);
        assert_eq!(allocation_size(MIB), 2 * MIB);
        assert_eq!(allocation_size(MIB + 512), 20 * MIB);
        assert_eq!(allocation_size(10 * MIB - 512), 20 * MIB);
        assert_eq!(allocation_size(10 * MIB), 10 * MIB);
        assert_eq!(allocation_size(11 * MIB), 12 * MIB);
    }

    #[test]
    fn small_requests_pack_into_2_mib_segments() {
        let mut a = CudaCachingAllocator::new(None);
        let blocks: Vec<usize> = (0..8).map(|_| a.malloc(256 << 10).unwrap()).collect();
        assert_eq!((a.reserved, a.driver_allocations), (2 * MIB, 1));
        let ninth = a.malloc(256 << 10).unwrap();
        assert_eq!((a.reserved, a.driver_allocations), (4 * MIB, 2));
        for b in blocks {
            a.free(b);
        }
        a.free(ninth);
        // Everything merged back: a 2 MiB request (large pool) still needs a segment of its own.
        a.malloc(2 * MIB).unwrap();
        assert_eq!((a.reserved, a.driver_allocations), (24 * MIB, 3));
    }

    #[test]
    fn large_blocks_split_only_above_1_mib_of_remainder() {
        let mut a = CudaCachingAllocator::new(None);
        let x = a.malloc(19 * MIB + 512).unwrap();
        // 20 MiB segment, remainder 512 KiB - 512: not split, the block keeps the whole segment.
        assert_eq!(a.blocks[x].size, 20 * MIB);
        a.free(x);
        let y = a.malloc(3 * MIB).unwrap();
        assert_eq!(a.blocks[y].size, 3 * MIB, "17 MiB remain: split");
        let z = a.malloc(17 * MIB).unwrap();
        assert_eq!(a.driver_allocations, 1, "best fit takes the remainder");
        a.free(y);
        a.free(z);
        let whole = a.malloc(20 * MIB).unwrap();
        assert_eq!((a.blocks[whole].addr, a.driver_allocations), (0, 1), "freed neighbours merged");
    }

    #[test]
    fn best_fit_prefers_the_smallest_block_then_the_lowest_address() {
        let mut a = CudaCachingAllocator::new(None);
        let big = a.malloc(12 * MIB).unwrap();
        let small = a.malloc(10 * MIB).unwrap();
        a.free(big);
        a.free(small);
        let b = a.malloc(10 * MIB).unwrap();
        assert_eq!(a.blocks[b].addr, 12 * MIB, "the 10 MiB segment fits better");
    }

    #[test]
    fn a_refused_segment_releases_unsplit_cached_segments_and_retries() {
        let mut a = CudaCachingAllocator::new(Some(38 * MIB));
        let x = a.malloc(12 * MIB).unwrap();
        let y = a.malloc(12 * MIB).unwrap();
        let z = a.malloc(MIB / 2).unwrap(); // 2 MiB small segment: 26 MiB reserved
        a.free(x);
        let w = a.malloc(14 * MIB).unwrap(); // 26 + 14 > 38: release x's segment, retry
        assert_eq!((a.reserved, a.driver_frees, a.retries), (28 * MIB, 1, 1));
        assert!(a.malloc(14 * MIB).is_none(), "nothing cached is left to release");
        for b in [y, z, w] {
            a.free(b);
        }
        assert!(a.malloc(30 * MIB).is_some());
    }
}
