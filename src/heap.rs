//! `Heap` and `DeviceBlock`: the device caching allocator in JS.

use std::sync::Arc;

use napi::bindgen_prelude::*;
use napi_derive::napi;
use wgalloc_core::heap::{self as core_heap, PoolKind};

use crate::block_ids::Slot;
use crate::error::{to_u64, to_u64_in, IntoNapi};
use crate::stream::{GpuEvent, Stream};

/// Current, peak and cumulative figures of one quantity.
#[napi(object)]
pub struct Stat {
    /// Value now.
    pub current: f64,
    /// Highest value since creation or `resetPeakStats()`.
    pub peak: f64,
    /// Total ever added (since `resetAccumulatedStats()`).
    pub allocated: f64,
    /// Total ever subtracted (since `resetAccumulatedStats()`).
    pub freed: f64,
}

impl From<core_heap::Stat> for Stat {
    fn from(s: core_heap::Stat) -> Self {
        Stat { current: s.current as f64, peak: s.peak as f64, allocated: s.allocated as f64, freed: s.freed as f64 }
    }
}

/// Figures of one heap pool.
#[napi(object)]
pub struct PoolStats {
    /// `device-small`, `device-large`, `shared-small`, `shared-large` or `scalar`.
    #[napi(ts_type = "'device-small' | 'device-large' | 'shared-small' | 'shared-large' | 'scalar'")]
    pub pool: String,
    /// Bytes of active blocks (allocated sizes).
    pub allocated_bytes: Stat,
    /// Bytes of the pool's segments.
    pub reserved_bytes: Stat,
    /// Blocks handed out and not yet freed.
    pub active_blocks: Stat,
    /// Segments (driver buffers) held.
    pub segments: Stat,
}

/// Allocator statistics; all numbers.
#[napi(object)]
pub struct HeapStats {
    /// Bytes of active blocks (allocated sizes).
    pub allocated_bytes: Stat,
    /// Bytes of segments held from the driver.
    pub reserved_bytes: Stat,
    /// Blocks handed out and not yet freed.
    pub active_blocks: Stat,
    /// Segments (driver buffers) held.
    pub segments: Stat,
    /// Bytes callers asked for; `allocatedBytes - requestedBytes` is alignment padding.
    pub requested_bytes: Stat,
    /// Reserved but not allocated (free ranges plus pending frees).
    pub cached_bytes: f64,
    /// Bytes of freed blocks still waiting for their GPU work.
    pub pending_free_bytes: f64,
    /// Freed blocks still waiting for their GPU work.
    pub pending_free_blocks: f64,
    /// Allocations served from a cached segment (no driver call).
    pub cache_hits: f64,
    /// Allocations that needed a new segment.
    pub cache_misses: f64,
    /// Segments created (driver buffer allocations).
    pub driver_allocations: f64,
    /// Segments released to the driver.
    pub driver_frees: f64,
    /// Allocations retried after releasing cached segments or waiting for pending frees.
    pub retries: f64,
    /// Allocations that failed with `OUT_OF_MEMORY`.
    pub ooms: f64,
    /// Garbage collections of idle segments above the low watermark.
    pub gc_runs: f64,
    /// Live blocks moved to make room (compaction: to another segment or within their own).
    pub blocks_moved: f64,
    /// Bytes of those blocks.
    pub bytes_moved: f64,
    /// The same figures per pool.
    pub pools: Vec<PoolStats>,
}

/// What the heap knows about a live block.
#[napi(object)]
pub struct BlockInfo {
    /// Block id.
    pub id: f64,
    /// Bytes asked for.
    pub requested_size: f64,
    /// Bytes allocated (the request rounded up to the storage offset alignment).
    pub size: f64,
    /// Segment (driver buffer) holding the block.
    pub segment_id: u32,
    /// Byte offset in the segment.
    pub offset: f64,
    /// Pool name (see `PoolStats.pool`).
    #[napi(ts_type = "'device-small' | 'device-large' | 'shared-small' | 'shared-large' | 'scalar'")]
    pub pool: String,
    /// From a `shared` pool (mappable where the adapter allows).
    pub is_shared: bool,
    /// Alone in its segment (large request, or above the binding limit).
    pub dedicated: bool,
    /// Larger than the device's max storage binding size: cannot be bound whole.
    pub exceeds_binding_limit: bool,
    /// Shape metadata, if set.
    pub shape: Option<Vec<f64>>,
    /// `active` or `pending-free`.
    #[napi(ts_type = "'active' | 'pending-free'")]
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
    /// Block id, 0 for a free range.
    pub block_id: f64,
    /// Byte offset in the segment.
    pub offset: f64,
    /// Bytes.
    pub size: f64,
    /// `active`, `pending-free` or `free`.
    #[napi(ts_type = "'active' | 'pending-free' | 'free'")]
    pub state: String,
}

/// One segment (driver buffer) of the heap in a snapshot.
#[napi(object)]
pub struct SnapshotSegment {
    /// Segment id.
    pub id: u32,
    /// Pool name (see `PoolStats.pool`).
    #[napi(ts_type = "'device-small' | 'device-large' | 'shared-small' | 'shared-large' | 'scalar'")]
    pub pool: String,
    /// Bytes of the segment.
    pub size: f64,
    /// Holds one large block only.
    pub dedicated: bool,
    /// Its ranges in offset order, active, pending and free.
    pub blocks: Vec<SnapshotBlock>,
}

/// What `heap.warmStart()` reserved.
#[napi(object)]
pub struct WarmStartResult {
    /// Segments reserved (driver buffers created).
    pub segments: u32,
    /// Their bytes.
    pub reserved_bytes: f64,
    /// Bytes of idle segments released first.
    pub released_bytes: f64,
}

impl From<core_heap::WarmStart> for WarmStartResult {
    fn from(w: core_heap::WarmStart) -> Self {
        WarmStartResult { segments: w.segments, reserved_bytes: w.bytes as f64, released_bytes: w.released as f64 }
    }
}

/// An allocator event (see `heap.on()`).
#[napi(object)]
pub struct HeapEvent {
    /// `ALLOCATED`, `RECYCLED`, `FREED`, `RELEASED`, `ALLOCATION_FAILED` or `MOVED`.
    #[napi(ts_type = "'ALLOCATED' | 'RECYCLED' | 'FREED' | 'RELEASED' | 'ALLOCATION_FAILED' | 'MOVED'")]
    pub kind: String,
    /// The block concerned (absent for segment events and failed requests).
    pub block_id: Option<f64>,
    /// The segment concerned (absent for a failed request).
    pub segment_id: Option<u32>,
    /// Where the block starts in its segment (`ALLOCATED` and `RECYCLED`).
    pub offset: Option<f64>,
    /// Bytes: of the block, the segment, or the failed request.
    pub size: f64,
    /// Pool name (see `PoolStats.pool`).
    #[napi(ts_type = "'device-small' | 'device-large' | 'shared-small' | 'shared-large' | 'scalar'")]
    pub pool: String,
}

/// Events and debug log lines recorded since the last `takeEvents()`.
/// @internal
#[napi(object)]
pub struct HeapEventBatch {
    pub events: Vec<HeapEvent>,
    pub logs: Vec<String>,
}

fn shape_from_js(shape: Vec<f64>) -> Result<Vec<u64>> {
    shape.into_iter().map(|d| to_u64(d, "shape dimension")).collect()
}

/// The device's caching allocator (`gpu.heap`).
// `malloc`, `allocScalar` and `free` are the facade's (js/heap.ts, js/device-block.ts): blocks
// are ids its block owner holds in the core heap (see block_ids.rs).
#[napi]
pub struct Heap {
    pub(crate) inner: core_heap::Heap,
    slot: Slot,
}

impl Heap {
    pub(crate) fn new(inner: core_heap::Heap) -> Result<Heap> {
        Ok(Heap { slot: Slot::new(&inner)?, inner })
    }
}

#[napi]
impl Heap {
    // The helpers below serve the facade's blocks (js/device-block.ts, typed by
    // `NativeHeapTable` in js/internal/native.ts); they are left out of the generated types.

    /// Where the raw `heapMalloc`/`heapFree` functions find this heap's block owner.
    #[napi(catch_unwind, getter, skip_typescript)]
    pub fn slot(&self) -> u32 {
        self.slot.index
    }

    /// Native form of `allocScalar(value)`: a scalar-pool block holding `value`, held by this
    /// heap's owner; returns its id.
    #[napi(catch_unwind, skip_typescript)]
    pub fn alloc_scalar_id(&self, value: Uint8Array) -> Result<f64> {
        Ok(self.slot.owner.alloc_scalar(&value).napi()? as f64)
    }

    /// A native handle of a live block this heap's owner holds, for operations on it
    /// (`USE_AFTER_FREE` if it does not hold it).
    #[napi(catch_unwind, skip_typescript)]
    pub fn block_handle(&self, id: f64) -> Result<DeviceBlock> {
        let block = self.slot.owner.block(to_u64(id, "id")?).napi()?;
        Ok(DeviceBlock { inner: Arc::new(block) })
    }

    /// True when both heap objects reach one device heap (e.g. `gpu.heap` and the heap of a
    /// `Gpu.attach` of the same device).
    #[napi(catch_unwind, skip_typescript)]
    pub fn same_heap_as(&self, other: &Heap) -> bool {
        self.inner.same_heap(&other.inner)
    }

    /// Frees a block the garbage collector found unreachable without `free()` (no error if it
    /// was freed meanwhile); returns its size, 0 when this heap's owner no longer held it.
    #[napi(catch_unwind, skip_typescript)]
    pub fn release_block(&self, id: f64) -> Result<f64> {
        Ok(self.slot.owner.release(to_u64(id, "id")?).map_or(0.0, |size| size as f64))
    }

    /// The blocks this heap object handed out and nobody freed, as `[id, size]` pairs in id
    /// order (the leak report's input).
    #[napi(catch_unwind, skip_typescript)]
    pub fn table_blocks(&self) -> Float64Array {
        let blocks = self.slot.owner.blocks();
        Float64Array::new(blocks.into_iter().flat_map(|(id, size)| [id as f64, size as f64]).collect())
    }

    /// Releases idle cached segments to the driver; returns the bytes released.
    #[napi(catch_unwind)]
    pub fn empty_cache(&self) -> f64 {
        self.inner.empty_cache() as f64
    }

    /// The heap's profile (`heap.profile()`) as JSON text.
    /// @internal
    #[napi(catch_unwind)]
    pub fn profile_json(&self) -> String {
        self.inner.profile().to_json().to_string()
    }

    /// Reserves the segments of a profile given as JSON text (`heap.warmStart()`); a bad profile
    /// is `INVALID_ARGUMENT` naming the field, one above the high watermark `OUT_OF_MEMORY`.
    /// @internal
    #[napi(catch_unwind)]
    pub fn warm_start_json(&self, text: String) -> Result<WarmStartResult> {
        let profile = core_heap::HeapProfile::parse(&text).napi()?;
        Ok(self.inner.warm_start(&profile).napi()?.into())
    }

    /// Returns freed blocks whose GPU work completed to their pools.
    #[napi(catch_unwind)]
    pub fn free_inactive_buffers(&self) {
        self.inner.free_inactive_buffers()
    }

    /// Allocator statistics: bytes, blocks and segments (current, peak, cumulative), cache and
    /// driver counters, per pool. A plain object of numbers.
    #[napi(catch_unwind)]
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
            blocks_moved: s.blocks_moved as f64,
            bytes_moved: s.bytes_moved as f64,
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

    /// Sets every `peak` to its `current` value.
    #[napi(catch_unwind)]
    pub fn reset_peak_stats(&self) {
        self.inner.reset_peak_stats()
    }

    /// Zeroes the cumulative figures (`allocated`, `freed`) and the counters.
    #[napi(catch_unwind)]
    pub fn reset_accumulated_stats(&self) {
        self.inner.reset_accumulated_stats()
    }

    /// Every segment with its blocks and free ranges.
    #[napi(catch_unwind)]
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
    #[napi(catch_unwind)]
    pub fn get_block_info(&self, id: f64) -> Result<Option<BlockInfo>> {
        Ok(self.inner.block_info(to_u64(id, "id")?).map(Into::into))
    }

    /// Hard limit as a fraction of the memory budget (0 disables; at most 2).
    #[napi(catch_unwind, getter)]
    pub fn high_watermark_ratio(&self) -> f64 {
        self.inner.watermarks().high
    }

    /// Soft limit (garbage collection of idle segments) as a fraction of the budget; 0 disables.
    #[napi(catch_unwind, getter)]
    pub fn low_watermark_ratio(&self) -> f64 {
        self.inner.watermarks().low
    }

    /// Sets the hard limit (fraction of the budget, 0 to 2; 0 disables); lowers the low watermark
    /// to it if needed. `INVALID_ARGUMENT` out of range.
    #[napi(catch_unwind)]
    pub fn set_high_watermark_ratio(&self, ratio: f64) -> Result<()> {
        self.inner.set_high_watermark_ratio(ratio).napi()
    }

    /// Sets the soft limit (fraction of the budget, at most the high watermark; 0 disables).
    /// `INVALID_ARGUMENT` out of range.
    #[napi(catch_unwind)]
    pub fn set_low_watermark_ratio(&self, ratio: f64) -> Result<()> {
        self.inner.set_low_watermark_ratio(ratio).napi()
    }

    /// Bytes the heap may still reserve before garbage collection starts (`Infinity` while the
    /// low watermark is disabled).
    #[napi(catch_unwind, getter)]
    pub fn low_watermark_headroom(&self) -> f64 {
        self.inner.low_watermark_headroom().map_or(f64::INFINITY, |bytes| bytes as f64)
    }

    /// Storage offset alignment of every block offset.
    #[napi(catch_unwind, getter)]
    pub fn alignment(&self) -> f64 {
        self.inner.alignment() as f64
    }

    /// The `WGALLOC_DEBUG_ALLOCATOR` mask in force.
    #[napi(catch_unwind, getter)]
    pub fn debug_mask(&self) -> u32 {
        self.inner.debug_mask()
    }

    /// Keep events (and debug log lines) for `takeEvents()`; used by the facade's `on()`/`setLogger()`.
    /// @internal
    #[napi(catch_unwind)]
    pub fn set_event_recording(&self, events: bool, logs: bool) {
        self.inner.set_event_recording(events, logs)
    }

    /// Events and log lines recorded since the last call (the facade delivers them).
    /// @internal
    #[napi(catch_unwind)]
    pub fn take_events(&self) -> HeapEventBatch {
        let (events, logs) = self.inner.take_events();
        HeapEventBatch {
            events: events
                .into_iter()
                .map(|e| HeapEvent {
                    kind: e.kind.as_str().into(),
                    block_id: e.block_id.map(|b| b as f64),
                    segment_id: e.segment_id,
                    offset: e.offset.map(|o| o as f64),
                    size: e.size as f64,
                    pool: e.pool.as_str().into(),
                })
                .collect(),
            logs,
        }
    }
}

/// One block of the device heap: `size` bytes at `offset` in a segment buffer.
// The public `DeviceBlock` is the facade's class (js/device-block.ts), which holds the block's
// id and fields; this native handle gives its operations the buffer.
#[napi]
pub struct DeviceBlock {
    pub(crate) inner: Arc<wgalloc_core::DeviceBlock>,
}

#[napi]
impl DeviceBlock {
    /// Block id (as in heap events, snapshots and `heap.getBlockInfo()`).
    #[napi(catch_unwind, getter)]
    pub fn id(&self) -> f64 {
        self.inner.id() as f64
    }

    /// Allocated bytes (the request rounded up to the storage offset alignment).
    #[napi(catch_unwind, getter)]
    pub fn size(&self) -> f64 {
        self.inner.size() as f64
    }

    /// Bytes asked for.
    #[napi(catch_unwind, getter)]
    pub fn requested_size(&self) -> f64 {
        self.inner.requested_size() as f64
    }

    /// Offset inside the segment buffer now (a multiple of the storage offset alignment); the
    /// heap may move a block to make room between operations.
    #[napi(catch_unwind, getter)]
    pub fn offset(&self) -> Result<f64> {
        self.inner.offset().napi().map(|o| o as f64)
    }

    /// Pool name: `device-small`, `device-large`, `shared-small`, `shared-large` or `scalar`.
    #[napi(catch_unwind, getter)]
    pub fn pool(&self) -> String {
        self.inner.pool().as_str().into()
    }

    /// From a `shared` pool (mappable where the adapter has MAPPABLE_PRIMARY_BUFFERS).
    #[napi(catch_unwind, getter)]
    pub fn is_shared(&self) -> bool {
        self.inner.pool().is_shared()
    }

    /// What the heap knows about the block. `USE_AFTER_FREE` once freed.
    #[napi(catch_unwind)]
    pub fn info(&self) -> Result<BlockInfo> {
        Ok(self.inner.info().napi()?.into())
    }

    /// Shape metadata set at `malloc()` or with `setShape()`, or null. `USE_AFTER_FREE` once freed.
    #[napi(catch_unwind, getter)]
    pub fn shape(&self) -> Result<Option<Vec<f64>>> {
        Ok(self.info()?.shape)
    }

    /// Sets (or clears, with null) the shape metadata.
    #[napi(catch_unwind)]
    pub fn set_shape(&self, shape: Option<Vec<f64>>) -> Result<()> {
        self.inner.set_shape(shape.map(shape_from_js).transpose()?).napi()
    }

    /// Writes `data` at `offset` (default 0, a multiple of 4); ordered before later submissions.
    #[napi(catch_unwind)]
    pub fn write(&self, data: Uint8Array, offset: Option<f64>) -> Result<()> {
        self.inner.write(&data, to_u64(offset.unwrap_or(0.0), "offset")?).napi()
    }

    /// Native form of `read(offset, length, { signal })`. The copy is submitted before this
    /// returns, so a `free()` right after defers until it ran and the read gets this block's
    /// bytes; the wait owns everything it needs.
    /// @internal
    #[napi(catch_unwind, ts_return_type = "Promise<Buffer>")]
    pub fn read<'env>(
        &self,
        env: &'env Env,
        offset: Option<f64>,
        length: Option<f64>,
    ) -> Result<PromiseRaw<'env, Buffer>> {
        let offset = to_u64(offset.unwrap_or(0.0), "offset")?;
        let length = match length {
            Some(l) => to_u64(l, "length")?,
            None => self.inner.requested_size().saturating_sub(offset),
        };
        let readback = self.inner.start_read(offset, length).napi()?;
        env.spawn_future(async move { Ok(readback.finish().await.napi()?.into()) })
    }

    /// Copies `src` into this block (up to the smaller size) and submits; returns the event.
    #[napi(catch_unwind)]
    pub fn copy_from(&self, src: &DeviceBlock) -> Result<GpuEvent> {
        Ok(GpuEvent::from(self.inner.copy_from(&src.inner).napi()?))
    }

    /// Marks the block as used by `stream`: a later `free()` waits for that stream's work.
    #[napi(catch_unwind)]
    pub fn record_stream(&self, stream: &Stream) -> Result<()> {
        stream.with(|s| self.inner.record_stream(s))
    }
}

/// What a heap scope holds now and held at most.
/// @internal
#[napi(object)]
pub struct NativeScopeStats {
    /// The limit in bytes.
    pub limit: f64,
    /// Bytes charged now.
    pub allocated_bytes: f64,
    /// The most bytes charged at once.
    pub peak_allocated_bytes: f64,
    /// Blocks live now (this scope's own mallocs).
    pub active_blocks: f64,
    /// Charges refused for this scope's limit.
    pub quota_exceeded: f64,
}

/// A quota over the device heap (the facade's `HeapScope` wraps it); one tree per device, seen
/// by every heap object of it, attached workers included.
/// @internal
#[napi]
pub struct HeapScope {
    pub(crate) inner: core_heap::Scope,
}

/// Bytes charged to a scope until `release()`, or until the garbage collector drops the handle.
/// @internal
#[napi]
pub struct ScopeCharge {
    inner: std::sync::Mutex<Option<core_heap::ScopeCharge>>,
}

#[napi]
impl ScopeCharge {
    /// Returns the bytes (idempotent).
    #[napi(catch_unwind)]
    pub fn release(&self) {
        let charge = self.inner.lock().unwrap_or_else(|p| p.into_inner()).take();
        drop(charge);
    }
}

fn to_limit(limit: f64) -> Result<u64> {
    to_u64_in(limit, "scope", "options.limit")
}

#[napi]
impl HeapScope {
    /// Index of the scope in its device's tree (stable while the device lives).
    #[napi(catch_unwind, getter)]
    pub fn id(&self) -> u32 {
        self.inner.id().index()
    }

    /// The scope's name.
    #[napi(catch_unwind, getter)]
    pub fn name(&self) -> String {
        self.inner.name()
    }

    /// Names from the outermost scope down, joined with `/`.
    #[napi(catch_unwind, getter)]
    pub fn path(&self) -> String {
        self.inner.path()
    }

    /// True once disposed (or a parent was).
    #[napi(catch_unwind, getter)]
    pub fn disposed(&self) -> bool {
        self.inner.is_disposed()
    }

    /// What the scope holds now and held at most.
    #[napi(catch_unwind)]
    pub fn stats(&self) -> NativeScopeStats {
        let s = self.inner.stats();
        NativeScopeStats {
            limit: s.limit as f64,
            allocated_bytes: s.allocated as f64,
            peak_allocated_bytes: s.peak as f64,
            active_blocks: s.active_blocks as f64,
            quota_exceeded: s.quota_exceeded as f64,
        }
    }

    /// A child scope (`INVALID_ARGUMENT` for a bad name or limit, or a disposed parent).
    #[napi(catch_unwind)]
    pub fn child(&self, name: String, limit: f64) -> Result<HeapScope> {
        Ok(HeapScope { inner: self.inner.child(&name, to_limit(limit)?).napi()? })
    }

    /// Charges `bytes` held elsewhere (`QUOTA_EXCEEDED` when they do not fit).
    #[napi(catch_unwind)]
    pub fn charge(&self, bytes: f64) -> Result<ScopeCharge> {
        let charge = self.inner.charge(to_u64_in(bytes, "scope.charge", "bytes")?).napi()?;
        Ok(ScopeCharge { inner: std::sync::Mutex::new(Some(charge)) })
    }

    /// Ends the scope and its children: later charges fail; live ones still return.
    #[napi(catch_unwind)]
    pub fn dispose(&self) {
        self.inner.dispose()
    }
}

#[napi]
impl Heap {
    /// A new top-level scope (its limit at most the memory budget).
    /// @internal
    #[napi(catch_unwind)]
    pub fn create_scope(&self, name: String, limit: f64) -> Result<HeapScope> {
        Ok(HeapScope { inner: self.inner.scope(&name, to_limit(limit)?).napi()? })
    }

    /// Every live scope of the device, depth first.
    /// @internal
    #[napi(catch_unwind)]
    pub fn list_scopes(&self) -> Vec<HeapScope> {
        let tree = self.inner.scopes();
        tree.list().into_iter().map(|id| HeapScope { inner: core_heap::Scope::of(tree, id) }).collect()
    }

    /// The live scope at `path` (names joined with `/`), or null.
    /// @internal
    #[napi(catch_unwind)]
    pub fn find_scope(&self, path: String) -> Option<HeapScope> {
        let tree = self.inner.scopes();
        tree.find(&path).map(|id| HeapScope { inner: core_heap::Scope::of(tree, id) })
    }
}
