//! `Heap` and `DeviceBlock`: the device caching allocator in JS.

use std::sync::Arc;

use napi::bindgen_prelude::*;
use napi_derive::napi;
use wgalloc_core::heap::{self as core_heap, PoolKind, Usage};

use crate::error::{coded, to_u64, IntoNapi};
use crate::stream::{GpuEvent, Stream};

/// Options of `heap.malloc()`.
#[napi(object)]
pub struct MallocOptions {
    /// `'device'` (default) or `'shared'` (mappable and bindable where the adapter allows).
    pub usage: Option<String>,
    /// Optional shape metadata kept with the block.
    pub shape: Option<Vec<f64>>,
}

/// Current, peak and cumulative figures of one quantity.
#[napi(object)]
pub struct Stat {
    pub current: f64,
    pub peak: f64,
    pub allocated: f64,
    pub freed: f64,
}

impl From<core_heap::Stat> for Stat {
    fn from(s: core_heap::Stat) -> Self {
        Stat { current: s.current as f64, peak: s.peak as f64, allocated: s.allocated as f64, freed: s.freed as f64 }
    }
}

#[napi(object)]
pub struct PoolStats {
    pub pool: String,
    pub allocated_bytes: Stat,
    pub reserved_bytes: Stat,
    pub active_blocks: Stat,
    pub segments: Stat,
}

/// Allocator statistics; all numbers.
#[napi(object)]
pub struct HeapStats {
    /// Bytes of active blocks (allocated sizes).
    pub allocated_bytes: Stat,
    /// Bytes of segments held from the driver.
    pub reserved_bytes: Stat,
    pub active_blocks: Stat,
    pub segments: Stat,
    /// Bytes callers asked for; `allocatedBytes - requestedBytes` is alignment padding.
    pub requested_bytes: Stat,
    /// Reserved but not allocated (free ranges plus pending frees).
    pub cached_bytes: f64,
    pub pending_free_bytes: f64,
    pub pending_free_blocks: f64,
    pub cache_hits: f64,
    pub cache_misses: f64,
    pub driver_allocations: f64,
    pub driver_frees: f64,
    pub retries: f64,
    pub ooms: f64,
    pub gc_runs: f64,
    pub pools: Vec<PoolStats>,
}

/// What the heap knows about a live block.
#[napi(object)]
pub struct BlockInfo {
    pub id: f64,
    pub requested_size: f64,
    pub size: f64,
    pub segment_id: u32,
    pub offset: f64,
    pub pool: String,
    pub is_shared: bool,
    /// Alone in its segment (large request, or above the binding limit).
    pub dedicated: bool,
    /// Larger than the device's max storage binding size: cannot be bound whole.
    pub exceeds_binding_limit: bool,
    pub shape: Option<Vec<f64>>,
    /// `active` or `pending-free`.
    pub state: String,
}

impl From<core_heap::BlockInfo> for BlockInfo {
    fn from(i: core_heap::BlockInfo) -> Self {
        BlockInfo {
            id: i.id as f64,
            requested_size: i.requested_size as f64,
            size: i.size as f64,
            segment_id: i.segment_id,
            offset: i.offset as f64,
            pool: i.pool.as_str().into(),
            is_shared: i.shared,
            dedicated: i.dedicated,
            exceeds_binding_limit: i.exceeds_binding_limit,
            shape: i.shape.map(|s| s.into_iter().map(|d| d as f64).collect()),
            state: i.state.as_str().into(),
        }
    }
}

/// One range of a segment in a snapshot (`blockId` 0 for free ranges).
#[napi(object)]
pub struct SnapshotBlock {
    pub block_id: f64,
    pub offset: f64,
    pub size: f64,
    /// `active`, `pending-free` or `free`.
    pub state: String,
}

#[napi(object)]
pub struct SnapshotSegment {
    pub id: u32,
    pub pool: String,
    pub size: f64,
    pub dedicated: bool,
    pub blocks: Vec<SnapshotBlock>,
}

/// An allocator event (see `heap.on()`).
#[napi(object)]
pub struct HeapEvent {
    /// `ALLOCATED`, `RECYCLED`, `FREED`, `RELEASED` or `ALLOCATION_FAILED`.
    pub kind: String,
    pub block_id: Option<f64>,
    pub segment_id: Option<u32>,
    pub size: f64,
    pub pool: String,
}

/// Events and debug log lines recorded since the last `takeEvents()`.
#[napi(object)]
pub struct HeapEventBatch {
    pub events: Vec<HeapEvent>,
    pub logs: Vec<String>,
}

fn shape_from_js(shape: Vec<f64>) -> Result<Vec<u64>> {
    shape.into_iter().map(|d| to_u64(d, "shape dimension")).collect()
}

/// The device's caching allocator (`gpu.heap`).
#[napi]
pub struct Heap {
    pub(crate) inner: core_heap::Heap,
}

#[napi]
impl Heap {
    /// Allocates a block of at least `size` bytes.
    #[napi]
    pub fn malloc(&self, size: f64, options: Option<MallocOptions>) -> Result<DeviceBlock> {
        let size = to_u64(size, "size")?;
        let (usage, shape) = match options {
            Some(o) => (o.usage, o.shape),
            None => (None, None),
        };
        let usage = match usage.as_deref() {
            None => Usage::Device,
            Some(name) => Usage::parse(name)
                .ok_or_else(|| coded("INVALID_ARGUMENT", &format!("unknown usage '{name}'; use 'device' or 'shared'")))?,
        };
        let shape = shape.map(shape_from_js).transpose()?;
        let block = self.inner.malloc(size, usage).napi()?;
        if shape.is_some() {
            block.set_shape(shape).napi()?;
        }
        Ok(DeviceBlock { inner: Arc::new(block) })
    }

    /// A block from the scalar pool already holding `value` (1 byte to 64 KiB; uniform-bindable).
    #[napi]
    pub fn alloc_scalar(&self, value: Uint8Array) -> Result<DeviceBlock> {
        Ok(DeviceBlock { inner: Arc::new(self.inner.alloc_scalar(&value).napi()?) })
    }

    /// Frees `block` (same as `block.free()`), checking that it belongs to this heap.
    #[napi]
    pub fn free(&self, block: &DeviceBlock) -> Result<()> {
        if !block.inner.heap().same_heap(&self.inner) {
            return Err(coded("INVALID_ARGUMENT", "the block belongs to another device's heap"));
        }
        block.inner.free().napi()
    }

    /// Releases idle cached segments to the driver; returns the bytes released.
    #[napi]
    pub fn empty_cache(&self) -> f64 {
        self.inner.empty_cache() as f64
    }

    /// Returns freed blocks whose GPU work completed to their pools.
    #[napi]
    pub fn free_inactive_buffers(&self) {
        self.inner.free_inactive_buffers()
    }

    #[napi]
    pub fn stats(&self) -> HeapStats {
        let s = self.inner.stats();
        HeapStats {
            allocated_bytes: s.allocated_bytes.into(),
            reserved_bytes: s.reserved_bytes.into(),
            active_blocks: s.active_blocks.into(),
            segments: s.segments.into(),
            requested_bytes: s.requested_bytes.into(),
            cached_bytes: s.cached_bytes() as f64,
            pending_free_bytes: s.pending_free_bytes as f64,
            pending_free_blocks: s.pending_free_blocks as f64,
            cache_hits: s.cache_hits as f64,
            cache_misses: s.cache_misses as f64,
            driver_allocations: s.driver_allocations as f64,
            driver_frees: s.driver_frees as f64,
            retries: s.retries as f64,
            ooms: s.ooms as f64,
            gc_runs: s.gc_runs as f64,
            pools: PoolKind::ALL
                .iter()
                .map(|&k| {
                    let p = s.pool(k);
                    PoolStats {
                        pool: k.as_str().into(),
                        allocated_bytes: p.allocated_bytes.into(),
                        reserved_bytes: p.reserved_bytes.into(),
                        active_blocks: p.active_blocks.into(),
                        segments: p.segments.into(),
                    }
                })
                .collect(),
        }
    }

    #[napi]
    pub fn reset_peak_stats(&self) {
        self.inner.reset_peak_stats()
    }

    #[napi]
    pub fn reset_accumulated_stats(&self) {
        self.inner.reset_accumulated_stats()
    }

    /// Every segment with its blocks and free ranges.
    #[napi]
    pub fn snapshot(&self) -> Vec<SnapshotSegment> {
        self.inner
            .snapshot()
            .into_iter()
            .map(|s| SnapshotSegment {
                id: s.id,
                pool: s.pool.as_str().into(),
                size: s.size as f64,
                dedicated: s.dedicated,
                blocks: s
                    .blocks
                    .into_iter()
                    .map(|(id, offset, size, state)| SnapshotBlock {
                        block_id: id as f64,
                        offset: offset as f64,
                        size: size as f64,
                        state: state.as_str().into(),
                    })
                    .collect(),
            })
            .collect()
    }

    /// Information on a live block by id, or null.
    #[napi]
    pub fn get_block_info(&self, id: f64) -> Result<Option<BlockInfo>> {
        Ok(self.inner.block_info(to_u64(id, "id")?).map(Into::into))
    }

    /// Hard limit as a fraction of the memory budget (0 disables; at most 2).
    #[napi(getter)]
    pub fn high_watermark_ratio(&self) -> f64 {
        self.inner.watermarks().high
    }

    /// Soft limit (garbage collection of idle segments) as a fraction of the budget; 0 disables.
    #[napi(getter)]
    pub fn low_watermark_ratio(&self) -> f64 {
        self.inner.watermarks().low
    }

    #[napi]
    pub fn set_high_watermark_ratio(&self, ratio: f64) -> Result<()> {
        self.inner.set_high_watermark_ratio(ratio).napi()
    }

    #[napi]
    pub fn set_low_watermark_ratio(&self, ratio: f64) -> Result<()> {
        self.inner.set_low_watermark_ratio(ratio).napi()
    }

    /// Bytes the heap may still reserve before garbage collection starts.
    #[napi(getter)]
    pub fn low_watermark_headroom(&self) -> f64 {
        self.inner.low_watermark_headroom() as f64
    }

    /// Storage offset alignment of every block offset.
    #[napi(getter)]
    pub fn alignment(&self) -> f64 {
        self.inner.alignment() as f64
    }

    /// The `WGALLOC_DEBUG_ALLOCATOR` mask in force.
    #[napi(getter)]
    pub fn debug_mask(&self) -> u32 {
        self.inner.debug_mask()
    }

    /// Keep events (and debug log lines) for `takeEvents()`; used by the facade's `on()`/`setLogger()`.
    #[napi]
    pub fn set_event_recording(&self, events: bool, logs: bool) {
        self.inner.set_event_recording(events, logs)
    }

    #[napi]
    pub fn take_events(&self) -> HeapEventBatch {
        let (events, logs) = self.inner.take_events();
        HeapEventBatch {
            events: events
                .into_iter()
                .map(|e| HeapEvent {
                    kind: e.kind.as_str().into(),
                    block_id: e.block_id.map(|b| b as f64),
                    segment_id: e.segment_id,
                    size: e.size as f64,
                    pool: e.pool.as_str().into(),
                })
                .collect(),
            logs,
        }
    }
}

/// One block of the device heap: `size` bytes at `offset` in a segment buffer.
#[napi]
pub struct DeviceBlock {
    pub(crate) inner: Arc<wgalloc_core::DeviceBlock>,
}

#[napi]
impl DeviceBlock {
    #[napi(getter)]
    pub fn id(&self) -> f64 {
        self.inner.id() as f64
    }

    /// Allocated bytes (the request rounded up to the storage offset alignment).
    #[napi(getter)]
    pub fn size(&self) -> f64 {
        self.inner.size() as f64
    }

    /// Bytes asked for.
    #[napi(getter)]
    pub fn requested_size(&self) -> f64 {
        self.inner.requested_size() as f64
    }

    /// Offset inside the segment buffer (a multiple of the storage offset alignment).
    #[napi(getter)]
    pub fn offset(&self) -> f64 {
        self.inner.offset() as f64
    }

    #[napi(getter)]
    pub fn pool(&self) -> String {
        self.inner.pool().as_str().into()
    }

    #[napi(getter)]
    pub fn is_shared(&self) -> bool {
        self.inner.pool().is_shared()
    }

    #[napi(getter)]
    pub fn freed(&self) -> bool {
        self.inner.is_freed()
    }

    #[napi]
    pub fn info(&self) -> Result<BlockInfo> {
        Ok(self.inner.info().napi()?.into())
    }

    #[napi(getter)]
    pub fn shape(&self) -> Result<Option<Vec<f64>>> {
        Ok(self.info()?.shape)
    }

    /// Sets (or clears, with null) the shape metadata.
    #[napi]
    pub fn set_shape(&self, shape: Option<Vec<f64>>) -> Result<()> {
        self.inner.set_shape(shape.map(shape_from_js).transpose()?).napi()
    }

    /// Writes `data` at `offset` (default 0, a multiple of 4); ordered before later submissions.
    #[napi]
    pub fn write(&self, data: Uint8Array, offset: Option<f64>) -> Result<()> {
        self.inner.write(&data, to_u64(offset.unwrap_or(0.0), "offset")?).napi()
    }

    /// Reads `length` bytes (default: to the end) at `offset` (default 0) once earlier work completed.
    #[napi]
    pub async fn read(&self, offset: Option<f64>, length: Option<f64>) -> Result<Buffer> {
        let block = self.inner.clone();
        let offset = to_u64(offset.unwrap_or(0.0), "offset")?;
        let length = match length {
            Some(l) => to_u64(l, "length")?,
            None => block.requested_size().saturating_sub(offset),
        };
        Ok(block.read(offset, length).await.napi()?.into())
    }

    /// Copies `src` into this block (up to the smaller size) and submits; returns the event.
    #[napi]
    pub fn copy_from(&self, src: &DeviceBlock) -> Result<GpuEvent> {
        Ok(GpuEvent::from(self.inner.copy_from(&src.inner).napi()?))
    }

    /// Marks the block as used by `stream`: a later `free()` waits for that stream's work.
    #[napi]
    pub fn record_stream(&self, stream: &Stream) -> Result<()> {
        stream.with(|s| self.inner.record_stream(s))
    }

    /// Returns the block to the heap; a second call fails with `DOUBLE_FREE`.
    #[napi]
    pub fn free(&self) -> Result<()> {
        self.inner.free().napi()
    }
}
