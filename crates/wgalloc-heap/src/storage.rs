//! Where a heap's segments come from, after CubeCL's `ComputeStorage`: driver buffers in
//! production (`wgalloc-core`'s `WgpuStorage`), plain byte accounting in unit tests and trace
//! simulations ([`CpuStorage`]). The heap is generic over it (one monomorphic copy per storage),
//! so the segment policy, garbage collection and out-of-memory ladder run the same code either way.

use crate::error::{LimitOom, OomSource, Result};
use crate::pool::PoolKind;

/// A source of segments (large allocations the heap carves blocks out of).
pub trait SegmentStorage: Send + 'static {
    /// What the heap and its blocks hold on to while the segment lives.
    type Segment: Clone + Send + Sync + 'static;

    /// A new segment of `size` bytes for `pool`; `OUT_OF_MEMORY` when the store refuses.
    fn allocate(&mut self, pool: PoolKind, size: u64) -> Result<Self::Segment>;

    /// Gives a segment back. Blocks may still hold clones of it; they no longer use it.
    fn release(&mut self, segment: Self::Segment);

    /// Copies each move's bytes to its new place, ordered after all work submitted so far and
    /// before any submitted later. Moves run in order: one may write over the old place of an
    /// earlier one, and one within a segment may overlap its own old place (a slide). Nothing
    /// is copied when it fails.
    fn copy(&mut self, moves: &[BlockMove<Self::Segment>]) -> Result<()>;
}

/// A live block's bytes going to a new place (compaction), in another segment or its own.
#[derive(Debug, Clone)]
pub struct BlockMove<G> {
    pub from: G,
    pub from_offset: u64,
    pub to: G,
    pub to_offset: u64,
    pub size: u64,
}

/// A segment of [`CpuStorage`]: its number and size (no bytes are kept: the policy needs none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuSegment {
    pub serial: u64,
    pub size: u64,
}

/// Segments counted in host memory, with an optional capacity that stands for the driver's
/// own out-of-memory: the heap's policy without a device, in milliseconds.
#[derive(Debug, Default)]
pub struct CpuStorage {
    capacity: Option<u64>,
    in_use: u64,
    allocations: u64,
    releases: u64,
    moved: u64,
}

impl CpuStorage {
    /// A store that refuses a segment once `capacity` bytes are in use (`None`: never).
    pub fn with_capacity(capacity: Option<u64>) -> Self {
        CpuStorage { capacity, ..Default::default() }
    }

    /// Bytes of live segments.
    pub fn in_use(&self) -> u64 {
        self.in_use
    }

    /// Bytes copied by moves so far.
    pub fn moved(&self) -> u64 {
        self.moved
    }

    /// Segments handed out and given back so far.
    pub fn counts(&self) -> (u64, u64) {
        (self.allocations, self.releases)
    }
}

impl SegmentStorage for CpuStorage {
    type Segment = CpuSegment;

    fn allocate(&mut self, _pool: PoolKind, size: u64) -> Result<CpuSegment> {
        if self.capacity.is_some_and(|c| self.in_use.saturating_add(size) > c) {
            let oom = LimitOom::new(OomSource::StoreCapacity, "allocating a heap segment", "");
            return Err(oom.requested(size).limit(self.capacity.unwrap_or(u64::MAX)).in_use(self.in_use).into());
        }
        self.in_use += size;
        self.allocations += 1;
        Ok(CpuSegment { serial: self.allocations, size })
    }

    fn release(&mut self, segment: CpuSegment) {
        self.in_use -= segment.size;
        self.releases += 1;
    }

    fn copy(&mut self, moves: &[BlockMove<CpuSegment>]) -> Result<()> {
        self.moved += moves.iter().map(|m| m.size).sum::<u64>();
        Ok(())
    }
}
