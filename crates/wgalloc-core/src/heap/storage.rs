//! Where a heap's segments come from, after CubeCL's `ComputeStorage`: driver buffers in
//! production ([`WgpuStorage`]), plain byte accounting in unit tests and trace simulations
//! ([`CpuStorage`]). The heap is generic over it (one monomorphic copy per storage), so the
//! segment policy, garbage collection and out-of-memory ladder run the same code either way.

use std::sync::{Arc, Weak};

use super::in_buffer_copy::InBufferCopy;
use super::PoolKind;
use crate::context::{Gpu, Shared};
use crate::error::{Error, Result};
use crate::scope::guarded;

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

/// Segments as `wgpu::Buffer`s of the device.
pub struct WgpuStorage {
    /// Weak: the device owns its heap, and the heap must not keep the device's queue alive
    /// (its drop waits for the GPU, see `context`).
    gpu: Weak<Shared>,
    mappable_primary: bool,
    /// The kernel for moves within one segment, made on the first.
    in_buffer: Option<InBufferCopy>,
}

impl WgpuStorage {
    pub(crate) fn new(gpu: &Gpu, mappable_primary: bool) -> Self {
        WgpuStorage { gpu: Arc::downgrade(&gpu.shared), mappable_primary, in_buffer: None }
    }

    /// The device. Every call comes through a `Heap`, which holds it, so it is still open.
    fn gpu(&self) -> Result<Gpu> {
        let shared = self.gpu.upgrade().ok_or_else(|| Error::DeviceLost("the device was closed".into()))?;
        Ok(Gpu { shared })
    }
}

impl SegmentStorage for WgpuStorage {
    /// Shared with the segment's blocks: one reference count to bump per block (cloning a
    /// `wgpu::Buffer` bumps two, and atomics dominate the cached fast path).
    type Segment = Arc<wgpu::Buffer>;

    fn allocate(&mut self, pool: PoolKind, size: u64) -> Result<Arc<wgpu::Buffer>> {
        let gpu = self.gpu()?;
        let device = gpu.device();
        let buffer = guarded(device, "allocating a heap segment", || {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(pool.as_str()),
                size,
                usage: pool.buffer_usages(self.mappable_primary),
                mapped_at_creation: false,
            })
        })?;
        Ok(Arc::new(buffer))
    }

    /// Destroyed through the submission lane, after the submissions that use it; once the
    /// device is closing, at once.
    fn release(&mut self, segment: Arc<wgpu::Buffer>) {
        match self.gpu() {
            Ok(gpu) => gpu.destroy_buffer((*segment).clone()),
            Err(_) => segment.destroy(),
        }
    }

    /// One submission: buffer-to-buffer copies between segments, the in-buffer kernel within
    /// one. WebGPU runs submissions in order, so work submitted before reads the old places and
    /// work submitted after reads the new ones.
    fn copy(&mut self, moves: &[BlockMove<Arc<wgpu::Buffer>>]) -> Result<()> {
        let gpu = self.gpu()?;
        let device = gpu.device();
        let in_buffer = &mut self.in_buffer;
        let commands = guarded(device, "moving heap blocks", || {
            let mut encoder = device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("wgalloc heap compaction") });
            // Runs of moves within a segment go to the kernel together, in order.
            for run in moves.chunk_by(|a, b| Arc::ptr_eq(&a.from, &a.to) == Arc::ptr_eq(&b.from, &b.to)) {
                if Arc::ptr_eq(&run[0].from, &run[0].to) {
                    let within: Vec<_> = run.iter().map(|m| (&*m.from, m.from_offset, m.to_offset, m.size)).collect();
                    in_buffer.get_or_insert_with(|| InBufferCopy::new(device)).record(device, &mut encoder, &within);
                } else {
                    for m in run {
                        encoder.copy_buffer_to_buffer(&m.from, m.from_offset, &m.to, m.to_offset, m.size);
                    }
                }
            }
            encoder.finish()
        })?;
        gpu.submit(vec![commands]).map(|_| ())
    }
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
            return Err(Error::OutOfMemory(format!(
                "allocating a heap segment: the store is out of memory ({size} bytes requested, {} of {} in use)",
                self.in_use,
                self.capacity.unwrap_or(u64::MAX)
            )));
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
