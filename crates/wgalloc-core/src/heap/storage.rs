//! The device's segment store: `wgpu::Buffer`s, behind `wgalloc_heap`'s [`SegmentStorage`]
//! (the policy's trait; its `CpuStorage` runs the same policy without a device).

use std::sync::{Arc, Weak};

use wgalloc_heap::{BlockMove, HeapError, PoolKind, SegmentStorage};

use super::in_buffer_copy::InBufferCopy;
use crate::context::{DeviceCore, Gpu};
use crate::error::{Error, Result};
use crate::scope::{guarded, guarded_alloc};

/// Segments as `wgpu::Buffer`s of the device.
pub struct WgpuStorage {
    /// Weak: the device owns its heap, and the heap must not keep the device's queue alive
    /// (its drop waits for the GPU, see `context`).
    gpu: Weak<DeviceCore>,
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

    fn allocate(&mut self, pool: PoolKind, size: u64) -> Result<Arc<wgpu::Buffer>, HeapError> {
        let gpu = self.gpu()?;
        let device = gpu.device();
        let buffer = guarded_alloc(device, "allocating a heap segment", size, || {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(pool.as_str()),
                size,
                usage: buffer_usages(pool, self.mappable_primary),
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
    fn copy(&mut self, moves: &[BlockMove<Arc<wgpu::Buffer>>]) -> Result<(), HeapError> {
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
        gpu.submit(vec![commands])?;
        Ok(())
    }
}

/// wgpu usage flags of a pool's segments.
pub(crate) fn buffer_usages(pool: PoolKind, mappable_primary: bool) -> wgpu::BufferUsages {
    use wgpu::BufferUsages as U;
    let device = U::STORAGE | U::COPY_SRC | U::COPY_DST;
    match pool {
        PoolKind::DeviceSmall | PoolKind::DeviceLarge => device,
        PoolKind::SharedSmall | PoolKind::SharedLarge if mappable_primary => device | U::MAP_READ | U::MAP_WRITE,
        PoolKind::SharedSmall | PoolKind::SharedLarge => device,
        PoolKind::Scalar => device | U::UNIFORM,
    }
}
