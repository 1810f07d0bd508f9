//! `Host` and `HostBlock`: the staging cache in JS. A block's `bytes` is a
//! Uint8Array over the mapped staging memory (an external ArrayBuffer); it is
//! detached here, on the JS thread, before every call that unmaps the block,
//! so JS can never reach memory that is no longer mapped.

use std::cell::{Cell, RefCell};
use std::ffi::c_void;
use std::ptr;
use std::rc::{Rc, Weak};
use std::sync::Arc;

use napi::bindgen_prelude::*;
use napi::sys;
use napi_derive::napi;
use wgalloc_core::host::{self as core_host, Direction};
use wgalloc_core::MappingLease;

use crate::error::{coded, invalid, invalid_hint, to_u64, IntoNapi};
use crate::heap::{DeviceBlock, Stat};
use crate::stream::Stream;

/// Options of `host.alloc()`.
#[napi(object)]
pub struct HostAllocOptions {
    /// `'upload'` (default: host writes, GPU copies out) or `'download'` (GPU copies in, host reads).
    #[napi(ts_type = "'upload' | 'download'")]
    pub direction: Option<String>,
}

/// Settings of `host.configure()`; omitted fields keep their value.
#[napi(object)]
pub struct HostConfig {
    /// Idle cached bytes kept; freed blocks beyond it go back to the driver. `Infinity` keeps all.
    pub max_cached_bytes: Option<f64>,
    /// Requests above this many bytes round to a multiple of 2 MiB instead of a power of two.
    pub round_threshold: Option<f64>,
    /// Process freed blocks on a background thread (also `WGALLOC_HOST_BACKGROUND_THREAD=1`).
    pub background_thread: Option<bool>,
    /// `false` makes `bytes` a copy instead of a view of mapped memory (the fallback path).
    pub zero_copy: Option<bool>,
    /// `upload`/`uploadBatch` stage and submit at most this many bytes at a time (default
    /// 4 MiB), so the device copies one piece while the host writes the next. A multiple of 4.
    pub pipeline_bytes: Option<f64>,
}

/// Count, total and longest duration of a driver operation, in nanoseconds.
#[napi(object)]
pub struct DurationStat {
    /// Operations timed.
    pub count: f64,
    /// Their total duration, ns.
    pub total_ns: f64,
    /// The longest one, ns.
    pub max_ns: f64,
}

/// Figures of one size class (`size` bytes is its power of two).
#[napi(object)]
pub struct HostBucketStats {
    /// Size class: blocks of this class are `2 ** index` bytes.
    pub index: u32,
    /// Bytes of one block of this class.
    pub size: f64,
    /// Staging buffers of this class held from the driver.
    pub allocations: Stat,
    /// Their bytes.
    pub allocated_bytes: Stat,
    /// Blocks of this class handed out (or pending).
    pub active_requests: Stat,
    /// Their bytes.
    pub active_bytes: Stat,
}

/// Host-cache statistics (PyTorch HostStats).
#[napi(object)]
pub struct HostStats {
    /// Staging buffers held from the driver, cached or active.
    pub allocations: Stat,
    /// Bytes of those staging buffers.
    pub allocated_bytes: Stat,
    /// Blocks handed out, or freed but still waiting for their GPU work.
    pub active_requests: Stat,
    /// Bytes of those blocks.
    pub active_bytes: Stat,
    /// Bytes callers asked for, of blocks not yet freed.
    pub requested_bytes: Stat,
    /// Idle bytes in the free lists.
    pub cached_bytes: f64,
    /// Size classes ever used.
    pub buckets: Vec<HostBucketStats>,
    /// Staging buffers created (driver calls).
    pub num_host_alloc: f64,
    /// Staging buffers released to the driver.
    pub num_host_free: f64,
    /// Time spent creating (and first mapping) staging buffers.
    pub host_alloc_time: DurationStat,
    /// Time spent releasing them.
    pub host_free_time: DurationStat,
    /// Allocations served from a free list (no driver call).
    pub cache_hits: f64,
    /// Allocations that created a staging buffer.
    pub cache_misses: f64,
    /// Freed blocks waiting for their GPU work (and, for uploads, the re-map).
    pub pending_blocks: f64,
    /// Their bytes.
    pub pending_bytes: f64,
    /// `bytes` views that are a copy because the runtime refused external ArrayBuffers (or `zeroCopy: false`).
    pub copy_fallbacks: f64,
    /// `bytes` views that map the staging memory directly.
    pub zero_copy_views: f64,
}

/// A private pool and how many `beginAllocateToPool` calls still hold it.
#[napi(object)]
pub struct PrivatePoolInfo {
    /// The pool id given to `beginAllocateToPool()`.
    pub id: f64,
    /// Holds left: `beginAllocateToPool()` calls not yet matched by `releasePool()`.
    pub use_count: f64,
}

fn convert(s: core_host::Stat) -> Stat {
    s.into()
}

fn duration(d: core_host::DurationStat) -> DurationStat {
    DurationStat { count: d.count as f64, total_ns: d.total_ns as f64, max_ns: d.max_ns as f64 }
}

fn pool_id(id: f64) -> Result<u64> {
    to_u64(id, "poolId")
}

/// The device's host staging cache (`gpu.host`).
#[napi]
pub struct Host {
    pub(crate) inner: core_host::Host,
}

#[napi]
impl Host {
    /// A staging block of at least `size` bytes (a power-of-two size class, or a multiple of 2 MiB
    /// above `roundThreshold`). Upload blocks come mapped: write `block.bytes`. Fails with
    /// `INVALID_ARGUMENT` for a bad size or direction, `OUT_OF_MEMORY` when the driver refuses.
    /// @example
    /// ```js
    /// const up = gpu.host.alloc(data.byteLength, { direction: 'upload' })
    /// up.bytes.set(data)
    /// const s = gpu.createStream()
    /// s.copy(up, deviceBlock) // detaches up.bytes
    /// await s.synchronize()
    /// up.free()
    /// ```
    #[napi(catch_unwind)]
    pub fn alloc(&self, size: f64, options: Option<HostAllocOptions>) -> Result<HostBlock> {
        let size = to_u64(size, "size")?;
        let dir = match options.and_then(|o| o.direction).as_deref() {
            None => Direction::Upload,
            Some(name) => Direction::parse(name).ok_or_else(|| {
                invalid("options.direction", "'upload' or 'download'", wgalloc_core::error::quoted(name))
            })?,
        };
        let block = self.inner.alloc(size, dir).napi()?;
        Ok(HostBlock::new(block))
    }

    /// Frees `block` (same as `block.free()`), checking that it belongs to this device.
    #[napi(catch_unwind)]
    pub fn free(&self, block: &HostBlock) -> Result<()> {
        if !block.inner.host().same_cache(&self.inner) {
            return Err(invalid("block", "a host block of this cache", "a block of another device's cache"));
        }
        block.free()
    }

    /// Returns freed blocks whose GPU work completed to the cache (also done on every alloc).
    #[napi(catch_unwind)]
    pub fn process_events(&self) {
        self.inner.process_events()
    }

    /// Releases idle cached blocks (and those of released private pools); returns the bytes released.
    #[napi(catch_unwind)]
    pub fn empty_cache(&self) -> f64 {
        self.inner.empty_cache() as f64
    }

    /// Allocations until `endAllocateToPool(poolId)` come from private pool `poolId` (an integer >= 1).
    #[napi(catch_unwind)]
    pub fn begin_allocate_to_pool(&self, pool: f64) -> Result<()> {
        self.inner.begin_allocate_to_pool(pool_id(pool)?).napi()
    }

    /// Ends `beginAllocateToPool(pool)`: later allocations come from the default pool again.
    #[napi(catch_unwind)]
    pub fn end_allocate_to_pool(&self, pool: f64) -> Result<()> {
        self.inner.end_allocate_to_pool(pool_id(pool)?).napi()
    }

    /// Drops one hold on the pool; once none is left, `emptyCache()` frees its idle blocks.
    #[napi(catch_unwind)]
    pub fn release_pool(&self, pool: f64) -> Result<()> {
        self.inner.release_pool(pool_id(pool)?).napi()
    }

    /// Private pools still held.
    #[napi(catch_unwind, getter)]
    pub fn private_pools(&self) -> Vec<PrivatePoolInfo> {
        self.inner
            .private_pools()
            .into_iter()
            .map(|(id, n)| PrivatePoolInfo { id: id as f64, use_count: n as f64 })
            .collect()
    }

    /// Host-cache statistics (PyTorch HostStats): a plain object of numbers.
    #[napi(catch_unwind)]
    pub fn stats(&self) -> HostStats {
        let s = self.inner.stats();
        let buckets = s
            .buckets
            .iter()
            .enumerate()
            .filter(|(_, b)| {
                b.allocations.allocated > 0 || b.allocations.current > 0 || b.active_requests.allocated > 0
            })
            .map(|(i, b)| HostBucketStats {
                index: i as u32,
                size: 2f64.powi(i as i32),
                allocations: convert(b.allocations),
                allocated_bytes: convert(b.allocated_bytes),
                active_requests: convert(b.active_requests),
                active_bytes: convert(b.active_bytes),
            })
            .collect();
        HostStats {
            allocations: convert(s.allocations),
            allocated_bytes: convert(s.allocated_bytes),
            active_requests: convert(s.active_requests),
            active_bytes: convert(s.active_bytes),
            requested_bytes: convert(s.requested_bytes),
            cached_bytes: s.cached_bytes() as f64,
            buckets,
            num_host_alloc: s.num_host_alloc as f64,
            num_host_free: s.num_host_free as f64,
            host_alloc_time: duration(s.host_alloc_time),
            host_free_time: duration(s.host_free_time),
            cache_hits: s.cache_hits as f64,
            cache_misses: s.cache_misses as f64,
            pending_blocks: s.pending_blocks as f64,
            pending_bytes: s.pending_bytes as f64,
            copy_fallbacks: s.copy_fallbacks as f64,
            zero_copy_views: s.zero_copy_views as f64,
        }
    }

    /// Sets every `peak` to its `current` value.
    #[napi(catch_unwind)]
    pub fn reset_peak_stats(&self) {
        self.inner.reset_peak_stats()
    }

    /// Zeroes the cumulative figures and counters.
    #[napi(catch_unwind)]
    pub fn reset_accumulated_stats(&self) {
        self.inner.reset_accumulated_stats()
    }

    /// The settings in force.
    #[napi(catch_unwind, getter)]
    pub fn config(&self) -> HostConfig {
        let c = self.inner.config();
        let bytes = |v: u64| if v == u64::MAX { f64::INFINITY } else { v as f64 };
        HostConfig {
            max_cached_bytes: Some(bytes(c.max_cached_bytes)),
            round_threshold: Some(bytes(c.round_threshold)),
            background_thread: Some(c.background_thread),
            zero_copy: Some(c.zero_copy),
            pipeline_bytes: Some(c.pipeline_bytes as f64),
        }
    }

    /// Changes settings; lowering `maxCachedBytes` releases idle blocks above it.
    #[napi(catch_unwind)]
    pub fn configure(&self, options: HostConfig) -> Result<()> {
        let mut c = self.inner.config();
        let bytes = |v: f64, what: &str| if v == f64::INFINITY { Ok(u64::MAX) } else { to_u64(v, what) };
        if let Some(v) = options.max_cached_bytes {
            c.max_cached_bytes = bytes(v, "maxCachedBytes")?;
        }
        if let Some(v) = options.round_threshold {
            c.round_threshold = bytes(v, "roundThreshold")?;
        }
        if let Some(v) = options.background_thread {
            c.background_thread = v;
        }
        if let Some(v) = options.zero_copy {
            c.zero_copy = v;
        }
        if let Some(v) = options.pipeline_bytes {
            c.pipeline_bytes = to_u64(v, "pipelineBytes")?;
        }
        self.inner.configure(c).napi()
    }
}

/// A live JS view of a block's mapped bytes: a strong reference to the Uint8Array.
struct View {
    env: sys::napi_env,
    array: sys::napi_ref,
    /// A copy (external ArrayBuffers refused): written back before unmapping.
    copied: bool,
    /// A zero-copy view's lease on the mapping, shared with the ArrayBuffer's finalizer:
    /// whichever comes first, the detach or the finalizer, ends it.
    lease: Option<LeaseSlot>,
}

/// Keeps a destroyed device from freeing the memory a zero-copy view points at.
type LeaseSlot = Rc<Cell<Option<MappingLease>>>;

/// What an external ArrayBuffer's finalizer drops: the block (so its mapping stays) and the
/// view's lease, if the view was never detached.
struct ViewHint {
    _block: Arc<core_host::HostBlock>,
    _lease: LeaseSlot,
}

type ViewCell = Rc<RefCell<Option<View>>>;

/// The view cells of live host blocks by device, so `gpu.destroy()` can detach them before
/// the driver frees the memory. One entry per block (not per view); entries of collected
/// blocks are pruned as the list grows, so it stays proportional to the live blocks.
struct ViewRegistry {
    entries: Vec<(usize, Weak<RefCell<Option<View>>>)>,
    prune_at: usize,
}

impl ViewRegistry {
    const MIN_PRUNE_AT: usize = 64;

    fn register(&mut self, key: usize, cell: &ViewCell) {
        if self.entries.len() >= self.prune_at {
            self.entries.retain(|(_, w)| w.strong_count() > 0);
            self.prune_at = (self.entries.len() * 2).max(Self::MIN_PRUNE_AT);
        }
        self.entries.push((key, Rc::downgrade(cell)));
    }

    fn live_cells(&mut self, key: usize) -> Vec<ViewCell> {
        self.entries.retain(|(_, w)| w.strong_count() > 0);
        self.entries.iter().filter(|(k, _)| *k == key).filter_map(|(_, w)| w.upgrade()).collect()
    }
}

thread_local! {
    static VIEWS: RefCell<ViewRegistry> =
        const { RefCell::new(ViewRegistry { entries: Vec::new(), prune_at: ViewRegistry::MIN_PRUNE_AT }) };
}

/// Registry entries on this thread (live and not yet pruned), for the leak test.
/// @internal
#[napi(catch_unwind)]
pub fn host_view_registry_length() -> u32 {
    VIEWS.with(|v| v.borrow().entries.len() as u32)
}

fn device_key(block: &core_host::HostBlock) -> usize {
    block.host().gpu().identity()
}

/// Detaches every live view of blocks on device `key` (before the device is destroyed).
pub(crate) fn detach_device_views(key: usize) {
    let cells = VIEWS.with(|v| v.borrow_mut().live_cells(key));
    for cell in cells {
        if let Some(view) = cell.borrow_mut().take() {
            // The block is about to lose its memory: drop the view without writing back.
            unsafe { release_view(view, None) };
        }
    }
}

unsafe extern "C" fn drop_view_hint(_env: sys::napi_env, _data: *mut c_void, hint: *mut c_void) {
    // SAFETY: `hint` is the Box made in `make_view`; finalizers run once, on the JS thread
    // that made the view (the only thread that touches its lease slot).
    drop(unsafe { Box::from_raw(hint.cast::<ViewHint>()) });
}

fn check(status: sys::napi_status, what: &str) -> Result<()> {
    if status == sys::Status::napi_ok {
        Ok(())
    } else {
        Err(coded("INTERNAL", &format!("{what} failed (napi status {status})")))
    }
}

/// Detaches a view, then ends its lease; with `write_back`, first copies a copied view's
/// bytes into the mapping.
///
/// # Safety
/// Call on the JS thread of `view.env`; `write_back` must point at `len` mapped bytes.
unsafe fn release_view(view: View, write_back: Option<(*mut u8, usize)>) {
    unsafe {
        let mut array = ptr::null_mut();
        if sys::napi_get_reference_value(view.env, view.array, &mut array) == sys::Status::napi_ok && !array.is_null() {
            let (mut kind, mut len, mut data, mut buffer, mut offset) =
                (0, 0usize, ptr::null_mut(), ptr::null_mut(), 0usize);
            if sys::napi_get_typedarray_info(view.env, array, &mut kind, &mut len, &mut data, &mut buffer, &mut offset)
                == sys::Status::napi_ok
            {
                if let (true, Some((dst, n))) = (view.copied, write_back) {
                    if !data.is_null() {
                        ptr::copy_nonoverlapping(data.cast::<u8>(), dst, n.min(len));
                    }
                }
                sys::napi_detach_arraybuffer(view.env, buffer);
            }
        }
        sys::napi_delete_reference(view.env, view.array);
    }
    if let Some(slot) = view.lease {
        drop(slot.take());
    }
}

/// A staging block of the host cache.
#[napi]
pub struct HostBlock {
    pub(crate) inner: Arc<core_host::HostBlock>,
    view: ViewCell,
    /// Whether `view` is in the registry (once per block, however many views it makes).
    registered: std::cell::Cell<bool>,
}

impl HostBlock {
    fn new(block: core_host::HostBlock) -> Self {
        HostBlock { inner: Arc::new(block), view: Rc::new(RefCell::new(None)), registered: std::cell::Cell::new(false) }
    }

    /// Detaches `bytes` (writing a copied view back into upload memory) before an unmap.
    pub(crate) fn detach(&self) {
        let Some(view) = self.view.borrow_mut().take() else { return };
        // No lease (the device is lost): nothing to write back into.
        let mapping = match self.inner.direction() {
            Direction::Upload if view.copied => self.inner.lend().ok(),
            _ => None,
        };
        // SAFETY: class methods run on the JS thread that created the view; the mapping is
        // still in place (the unmap comes after this call) and leased while it is written.
        unsafe { release_view(view, mapping.as_ref().map(|m| (m.ptr.as_ptr(), m.len))) };
    }

    fn make_view(&self, env: &Env) -> Result<sys::napi_value> {
        let core_host::LentBytes { ptr: p, len, lease } = self.inner.lend().napi()?;
        let raw = env.raw();
        let host = self.inner.host();
        let mut buffer = ptr::null_mut();
        let mut copied = !host.zero_copy();
        let slot: LeaseSlot = Rc::new(Cell::new(Some(lease)));
        // SAFETY: `p` points at `len` mapped bytes that stay mapped until `detach`
        // runs (every unmapping call goes through it); the finalizer hint keeps the
        // block, and so the mapping, alive for as long as the ArrayBuffer exists, and the
        // lease keeps a destroyed device from freeing it until the view is detached.
        unsafe {
            if !copied {
                let hint = Box::into_raw(Box::new(ViewHint { _block: self.inner.clone(), _lease: slot.clone() }));
                let status = sys::napi_create_external_arraybuffer(
                    raw,
                    p.as_ptr().cast(),
                    len,
                    Some(drop_view_hint),
                    hint.cast(),
                    &mut buffer,
                );
                if status == sys::Status::napi_no_external_buffers_allowed {
                    drop(Box::from_raw(hint));
                    copied = true;
                } else if status != sys::Status::napi_ok {
                    drop(Box::from_raw(hint));
                    return Err(coded("INTERNAL", &format!("creating the bytes view failed (napi status {status})")));
                }
            }
            if copied {
                let mut data = ptr::null_mut();
                check(sys::napi_create_arraybuffer(raw, len, &mut data, &mut buffer), "creating the bytes copy")?;
                ptr::copy_nonoverlapping(p.as_ptr(), data.cast::<u8>(), len);
            }
            let mut array = ptr::null_mut();
            check(
                sys::napi_create_typedarray(raw, sys::TypedarrayType::uint8_array, len, buffer, 0, &mut array),
                "creating the bytes view",
            )?;
            let mut reference = ptr::null_mut();
            check(sys::napi_create_reference(raw, array, 1, &mut reference), "referencing the bytes view")?;
            // A copy needs the mapping only while it is made and written back.
            let lease = if copied {
                drop(slot.take());
                None
            } else {
                Some(slot)
            };
            *self.view.borrow_mut() = Some(View { env: raw, array: reference, copied, lease });
            host.note_view(!copied);
            if !self.registered.replace(true) {
                VIEWS.with(|v| v.borrow_mut().register(device_key(&self.inner), &self.view));
            }
            Ok(array)
        }
    }
}

impl Drop for HostBlock {
    fn drop(&mut self) {
        // Collected without free(): release our reference only. If JS still holds the
        // view, the ArrayBuffer's finalizer keeps the block (and its mapping) alive.
        if let Some(view) = self.view.borrow_mut().take() {
            // SAFETY: finalizers run on the JS thread; deleting a reference is allowed there.
            unsafe { sys::napi_delete_reference(view.env, view.array) };
        }
    }
}

#[napi]
impl HostBlock {
    /// Block id (as in `wgalloc:host` messages).
    #[napi(catch_unwind, getter)]
    pub fn id(&self) -> f64 {
        self.inner.id() as f64
    }

    /// Bytes asked for: the length of `bytes`.
    #[napi(catch_unwind, getter)]
    pub fn requested_size(&self) -> f64 {
        self.inner.requested_size() as f64
    }

    /// Bytes of the staging buffer (the size class).
    #[napi(catch_unwind, getter)]
    pub fn size(&self) -> f64 {
        self.inner.size() as f64
    }

    /// `'upload'` or `'download'`.
    #[napi(catch_unwind, getter, ts_return_type = "'upload' | 'download'")]
    pub fn direction(&self) -> String {
        self.inner.direction().as_str().into()
    }

    /// 0 for the default pool, else the private pool the block came from.
    #[napi(catch_unwind, getter)]
    pub fn pool_id(&self) -> f64 {
        self.inner.pool_id() as f64
    }

    /// True once `free()` ran (reuse still waits for the block's GPU work).
    #[napi(catch_unwind, getter)]
    pub fn freed(&self) -> bool {
        self.inner.is_freed()
    }

    /// True while `bytes` is available.
    #[napi(catch_unwind, getter)]
    pub fn mapped(&self) -> bool {
        self.inner.is_mapped()
    }

    /// The mapped bytes (`requestedSize` long), without a copy where the runtime allows.
    /// A view taken earlier is detached (length 0) once the block is copied, unmapped or
    /// freed; reading `bytes` then throws `INVALID_ARGUMENT` (map it again) or, once freed,
    /// `USE_AFTER_FREE`. `DEVICE_LOST` once the device is lost.
    #[napi(catch_unwind, getter, ts_return_type = "Uint8Array")]
    pub fn bytes<'env>(&self, env: &'env Env) -> Result<Unknown<'env>> {
        if let Some(view) = self.view.borrow().as_ref() {
            let mut array = ptr::null_mut();
            // SAFETY: same thread and env as the reference.
            let status = unsafe { sys::napi_get_reference_value(view.env, view.array, &mut array) };
            if status == sys::Status::napi_ok && !array.is_null() {
                return Ok(unsafe { Unknown::from_raw_unchecked(env.raw(), array) });
            }
        }
        let array = self.make_view(env)?;
        Ok(unsafe { Unknown::from_raw_unchecked(env.raw(), array) })
    }

    /// Copies `data` into an upload block at `offset` (default 0).
    #[napi(catch_unwind)]
    pub fn write(&self, data: Uint8Array, offset: Option<f64>) -> Result<()> {
        // A copied view would overwrite this on unmap: fold it in first.
        if self.view.borrow().as_ref().is_some_and(|v| v.copied) {
            return Err(invalid_hint(
                "block",
                "a block whose bytes view maps it",
                "a block whose bytes view is a copy",
                "write(): write through block.bytes instead",
            ));
        }
        let offset = to_u64(offset.unwrap_or(0.0), "offset")?;
        // `data` may view this very mapping (`block.bytes.subarray(...)`): write from a copy,
        // so no Rust reference aliases the bytes being written.
        let overlapping = self.inner.mapped_address().is_some_and(|start| {
            let end = start + self.inner.requested_size() as usize;
            let (d, len) = (data.as_ptr() as usize, data.len());
            len > 0 && d < end && start < d + len
        });
        if overlapping {
            #[allow(clippy::unnecessary_to_owned)] // the copy is the point: source and target overlap
            return self.inner.write(&data.to_vec(), offset).napi();
        }
        self.inner.write(&data, offset).napi()
    }

    /// Copies `length` bytes (default: to the end) at `offset` out of a mapped download block.
    #[napi(catch_unwind)]
    pub fn read(&self, offset: Option<f64>, length: Option<f64>) -> Result<Buffer> {
        let offset = to_u64(offset.unwrap_or(0.0), "offset")?;
        let length = match length {
            Some(l) => to_u64(l, "length")?,
            None => self.inner.requested_size().saturating_sub(offset),
        };
        Ok(self.inner.read(offset, length).napi()?.into())
    }

    /// Native form of `map({ signal })`.
    /// @internal
    #[napi(catch_unwind, ts_return_type = "Promise<void>")]
    pub fn map<'env>(&self, env: &'env Env) -> Result<PromiseRaw<'env, ()>> {
        // Not an `async fn`: the view cell must stay on the JS thread.
        let block = self.inner.clone();
        env.spawn_future(async move { block.map().await.napi() })
    }

    /// Unmaps the block (detaching `bytes`).
    #[napi(catch_unwind)]
    pub fn unmap(&self) -> Result<()> {
        self.detach();
        self.inner.unmap().napi()
    }

    /// Marks the block as used by `stream`: a later `free()` of the unmapped block waits for that
    /// stream's work. A block freed while mapped is reused at once: WebGPU lets no GPU work use mapped memory.
    #[napi(catch_unwind)]
    pub fn record_stream(&self, stream: &Stream) -> Result<()> {
        stream.with(|s| self.inner.record_stream(s))
    }

    /// Returns the block to the cache (reused once its GPU work ran); detaches `bytes`.
    /// A second call fails with `DOUBLE_FREE`.
    #[napi(catch_unwind)]
    pub fn free(&self) -> Result<()> {
        self.detach();
        self.inner.free().napi()
    }
}

impl Stream {
    pub(crate) fn copy_host_to_device(
        &self,
        src: &HostBlock,
        dst: &DeviceBlock,
        src_offset: u64,
        dst_offset: u64,
        size: u64,
    ) -> Result<()> {
        src.detach();
        self.with(|s| src.inner.copy_to_device_on(s, &dst.inner, src_offset, dst_offset, size))
    }

    pub(crate) fn copy_device_to_host(
        &self,
        src: &DeviceBlock,
        dst: &HostBlock,
        src_offset: u64,
        dst_offset: u64,
        size: u64,
    ) -> Result<()> {
        dst.detach();
        self.with(|s| dst.inner.copy_from_device_on(s, &src.inner, src_offset, dst_offset, size))
    }
}
