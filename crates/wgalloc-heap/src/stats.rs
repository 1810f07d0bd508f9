//! Allocator statistics, after PyTorch's `Stat`: current, peak, and cumulative
//! amounts allocated and freed, for bytes, blocks and segments, overall and per pool.
//! The allocator moves the paired figures (overall and per pool) only through one helper
//! per event (`block_allocated`, `segment_released`, ...), as PyTorch's `StatTypes` does,
//! so they move together.

use super::pool::PoolKind;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stat {
    pub current: u64,
    pub peak: u64,
    pub allocated: u64,
    pub freed: u64,
}

impl Stat {
    pub fn add(&mut self, n: u64) {
        self.current += n;
        self.allocated += n;
        self.peak = self.peak.max(self.current);
    }

    pub fn sub(&mut self, n: u64) {
        debug_assert!(self.current >= n, "stat underflow");
        self.current -= n;
        self.freed += n;
    }

    pub fn reset_peak(&mut self) {
        self.peak = self.current;
    }

    pub fn reset_accumulated(&mut self) {
        self.allocated = 0;
        self.freed = 0;
    }
}

/// Figures of one pool.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Bytes of active blocks (allocated sizes).
    pub allocated_bytes: Stat,
    /// Bytes of segments (driver buffers) held by the pool.
    pub reserved_bytes: Stat,
    pub active_blocks: Stat,
    pub segments: Stat,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeapStats {
    pub allocated_bytes: Stat,
    pub reserved_bytes: Stat,
    pub active_blocks: Stat,
    pub segments: Stat,
    /// Bytes the callers asked for, of active blocks (allocated minus this = padding).
    pub requested_bytes: Stat,
    /// Bytes of freed blocks whose GPU work has not completed yet.
    pub pending_free_bytes: u64,
    pub pending_free_blocks: u64,
    /// Blocks served from the cache without a driver call.
    pub cache_hits: u64,
    pub cache_misses: u64,
    pub driver_allocations: u64,
    pub driver_frees: u64,
    /// Allocation retries after garbage collection or waiting for pending frees.
    pub retries: u64,
    pub ooms: u64,
    /// Garbage collections triggered by the low watermark.
    pub gc_runs: u64,
    /// Live blocks moved to make room (compaction: to another segment or within their own), and
    /// their bytes.
    pub blocks_moved: u64,
    pub bytes_moved: u64,
    pub pools: [PoolStats; 5],
}

impl HeapStats {
    pub fn pool(&self, kind: PoolKind) -> &PoolStats {
        &self.pools[kind.index()]
    }

    /// A block of `size` bytes (`requested` asked for) was handed out from `pool`; `from_driver`
    /// when its segment was created for it. Every figure a malloc moves, overall and per pool.
    #[inline]
    pub(crate) fn block_allocated(&mut self, pool: PoolKind, size: u64, requested: u64, from_driver: bool) {
        if from_driver {
            self.cache_misses += 1;
        } else {
            self.cache_hits += 1;
        }
        self.allocated_bytes.add(size);
        self.requested_bytes.add(requested);
        self.active_blocks.add(1);
        let p = &mut self.pools[pool.index()];
        p.allocated_bytes.add(size);
        p.active_blocks.add(1);
    }

    /// The block went back (to its pool, or to the pending list until its GPU work completed).
    #[inline]
    pub(crate) fn block_freed(&mut self, pool: PoolKind, size: u64, requested: u64) {
        self.allocated_bytes.sub(size);
        self.requested_bytes.sub(requested);
        self.active_blocks.sub(1);
        let p = &mut self.pools[pool.index()];
        p.allocated_bytes.sub(size);
        p.active_blocks.sub(1);
    }

    /// A freed block of `size` bytes waits for its GPU work (`pending_done` when it is reusable).
    pub(crate) fn pending_added(&mut self, size: u64) {
        self.pending_free_bytes += size;
        self.pending_free_blocks += 1;
    }

    pub(crate) fn pending_done(&mut self, size: u64) {
        self.pending_free_bytes -= size;
        self.pending_free_blocks -= 1;
    }

    /// A segment of `size` bytes came from the driver for `pool`.
    pub(crate) fn segment_created(&mut self, pool: PoolKind, size: u64) {
        self.reserved_bytes.add(size);
        self.segments.add(1);
        self.driver_allocations += 1;
        let p = &mut self.pools[pool.index()];
        p.reserved_bytes.add(size);
        p.segments.add(1);
    }

    /// A segment of `size` bytes went back to the driver.
    pub(crate) fn segment_released(&mut self, pool: PoolKind, size: u64) {
        self.reserved_bytes.sub(size);
        self.segments.sub(1);
        self.driver_frees += 1;
        let p = &mut self.pools[pool.index()];
        p.reserved_bytes.sub(size);
        p.segments.sub(1);
    }

    /// Bytes held in segments but not allocated (free ranges and pending frees).
    pub fn cached_bytes(&self) -> u64 {
        self.reserved_bytes.current - self.allocated_bytes.current
    }

    pub fn reset_peak(&mut self) {
        for s in self.stats_mut() {
            s.reset_peak();
        }
    }

    pub fn reset_accumulated(&mut self) {
        for s in self.stats_mut() {
            s.reset_accumulated();
        }
        self.cache_hits = 0;
        self.cache_misses = 0;
        self.driver_allocations = 0;
        self.driver_frees = 0;
        self.retries = 0;
        self.ooms = 0;
        self.gc_runs = 0;
        self.blocks_moved = 0;
        self.bytes_moved = 0;
    }

    fn stats_mut(&mut self) -> impl Iterator<Item = &mut Stat> {
        let top = [
            &mut self.allocated_bytes,
            &mut self.reserved_bytes,
            &mut self.active_blocks,
            &mut self.segments,
            &mut self.requested_bytes,
        ];
        top.into_iter().chain(
            self.pools
                .iter_mut()
                .flat_map(|p| [&mut p.allocated_bytes, &mut p.reserved_bytes, &mut p.active_blocks, &mut p.segments]),
        )
    }
}
