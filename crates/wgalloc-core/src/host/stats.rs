//! Host-cache statistics, after PyTorch's `HostStats`: driver blocks and bytes,
//! active requests and bytes, the same per size class, and the time spent in
//! the driver creating and releasing staging buffers.

use std::time::Duration;

use super::config::NUM_CLASSES;
pub use crate::heap::Stat;

/// Count, total and longest of a timed operation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DurationStat {
    pub count: u64,
    pub total_ns: u64,
    pub max_ns: u64,
}

impl DurationStat {
    pub(crate) fn record(&mut self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.count += 1;
        self.total_ns = self.total_ns.saturating_add(ns);
        self.max_ns = self.max_ns.max(ns);
    }
}

/// Figures of one size class.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BucketStats {
    /// Staging buffers of this class held from the driver.
    pub allocations: Stat,
    pub allocated_bytes: Stat,
    /// Blocks handed out, or freed but not yet reusable (their GPU work or re-map is pending).
    pub active_requests: Stat,
    pub active_bytes: Stat,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostStats {
    /// Staging buffers held from the driver (cached or active).
    pub allocations: Stat,
    pub allocated_bytes: Stat,
    /// Blocks handed out, or freed but not yet reusable.
    pub active_requests: Stat,
    pub active_bytes: Stat,
    /// Bytes callers asked for, of blocks handed out.
    pub requested_bytes: Stat,
    pub buckets: [BucketStats; NUM_CLASSES],
    /// Driver buffer creations and releases.
    pub num_host_alloc: u64,
    pub num_host_free: u64,
    /// Time in buffer creation (including the initial mapping) and in release.
    pub host_alloc_time: DurationStat,
    pub host_free_time: DurationStat,
    /// Allocations served from a free list (no driver call) and those that were not.
    pub cache_hits: u64,
    pub cache_misses: u64,
    /// Freed blocks waiting for their GPU work (and, for uploads, the re-map).
    pub pending_blocks: u64,
    pub pending_bytes: u64,
    /// JS views that had to copy because the runtime refused external ArrayBuffers.
    pub copy_fallbacks: u64,
    /// JS views created over mapped memory without a copy.
    pub zero_copy_views: u64,
}

impl Default for HostStats {
    fn default() -> Self {
        HostStats {
            allocations: Stat::default(),
            allocated_bytes: Stat::default(),
            active_requests: Stat::default(),
            active_bytes: Stat::default(),
            requested_bytes: Stat::default(),
            buckets: [BucketStats::default(); NUM_CLASSES],
            num_host_alloc: 0,
            num_host_free: 0,
            host_alloc_time: DurationStat::default(),
            host_free_time: DurationStat::default(),
            cache_hits: 0,
            cache_misses: 0,
            pending_blocks: 0,
            pending_bytes: 0,
            copy_fallbacks: 0,
            zero_copy_views: 0,
        }
    }
}

impl HostStats {
    /// Bytes held from the driver but not active: what the cache keeps idle.
    pub fn cached_bytes(&self) -> u64 {
        self.allocated_bytes.current - self.active_bytes.current
    }

    pub(crate) fn driver_alloc(&mut self, index: usize, size: u64, took: Duration) {
        self.allocations.add(1);
        self.allocated_bytes.add(size);
        let b = &mut self.buckets[index];
        b.allocations.add(1);
        b.allocated_bytes.add(size);
        self.num_host_alloc += 1;
        self.host_alloc_time.record(took);
    }

    pub(crate) fn driver_free(&mut self, index: usize, size: u64, took: Duration) {
        self.allocations.sub(1);
        self.allocated_bytes.sub(size);
        let b = &mut self.buckets[index];
        b.allocations.sub(1);
        b.allocated_bytes.sub(size);
        self.num_host_free += 1;
        self.host_free_time.record(took);
    }

    pub(crate) fn activate(&mut self, index: usize, size: u64, requested: u64) {
        self.active_requests.add(1);
        self.active_bytes.add(size);
        self.requested_bytes.add(requested);
        let b = &mut self.buckets[index];
        b.active_requests.add(1);
        b.active_bytes.add(size);
    }

    pub(crate) fn deactivate(&mut self, index: usize, size: u64) {
        self.active_requests.sub(1);
        self.active_bytes.sub(size);
        let b = &mut self.buckets[index];
        b.active_requests.sub(1);
        b.active_bytes.sub(size);
    }

    pub fn reset_peak(&mut self) {
        for s in self.stats_mut() {
            s.reset_peak();
        }
        self.host_alloc_time.max_ns = 0;
        self.host_free_time.max_ns = 0;
    }

    pub fn reset_accumulated(&mut self) {
        for s in self.stats_mut() {
            s.reset_accumulated();
        }
        self.num_host_alloc = 0;
        self.num_host_free = 0;
        self.host_alloc_time = DurationStat::default();
        self.host_free_time = DurationStat::default();
        self.cache_hits = 0;
        self.cache_misses = 0;
        self.copy_fallbacks = 0;
        self.zero_copy_views = 0;
    }

    fn stats_mut(&mut self) -> impl Iterator<Item = &mut Stat> {
        let top = [
            &mut self.allocations,
            &mut self.allocated_bytes,
            &mut self.active_requests,
            &mut self.active_bytes,
            &mut self.requested_bytes,
        ];
        top.into_iter().chain(
            self.buckets.iter_mut().flat_map(|b| {
                [&mut b.allocations, &mut b.allocated_bytes, &mut b.active_requests, &mut b.active_bytes]
            }),
        )
    }
}
