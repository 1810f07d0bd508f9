//! The device heap: a caching allocator of wgpu buffers after MPSHeapAllocatorImpl.
//!
//! Segments (MPS "heaps") are large `wgpu::Buffer`s; blocks are aligned sub-ranges
//! handed out best-fit and coalesced on free. A freed block that GPU work may still
//! touch waits in a pending list until that work completed. Reserved memory is held
//! under a high watermark (hard limit) and trimmed above a low watermark (garbage
//! collection of idle segments, oldest first). Out-of-memory errors, from the
//! watermark or from the driver, name the figures needed to act on them.
//!
//! The policy is the `wgalloc-heap` crate's (no wgpu there); this module gives it its
//! device: [`WgpuStorage`] for segments, the submission tracker for completions, the block
//! handles ([`DeviceBlock`]) that Rust users hold, and the owners ([`BlockOwner`]) that hold
//! blocks by id (the JS heap objects).

mod block;
mod in_buffer_copy;
pub mod storage;

use std::sync::Arc;

pub use block::{BlockBinding, BlockLease, DeviceBlock};
pub use storage::WgpuStorage;
// The policy is `wgalloc_heap`'s; its users here and in the binding import it from this module.
pub use wgalloc_heap::{
    config, debug, pool, profile, Allocation, BlockFacts, BlockInfo, BlockMove, BlockState, CpuSegment, CpuStorage,
    FreeList, HeapCore, HeapError, HeapEvent, HeapEventKind, HeapLimits, HeapProfile, HeapStats, IdHasher, IdMap,
    PoolKind, PoolProfile, PoolStats, Scope, ScopeCharge, ScopeId, ScopeStats, ScopeTree, SegmentSnapshot,
    SegmentStorage, Stat, Usage, WarmStart, Watermarks,
};

use crate::completion::Tracker;
use crate::context::Gpu;
use crate::error::{align_up, Error, Result};
use crate::stream::StreamMarks;

/// The heap of a device: its policy over wgpu buffers.
pub(crate) type DeviceHeapCore = HeapCore<WgpuStorage, Tracker>;

/// The policy over `gpu`'s buffers, sized to its limits and budget.
fn device_heap_core(gpu: &Gpu) -> Result<DeviceHeapCore> {
    let limits = gpu.limits();
    let alignment = (limits.min_storage_buffer_offset_alignment as u64).max(wgpu::COPY_BUFFER_ALIGNMENT);
    let heap_limits = HeapLimits {
        alignment,
        scalar_alignment: alignment.max(limits.min_uniform_buffer_offset_alignment as u64),
        max_buffer_size: limits.max_buffer_size,
        max_binding: limits.max_storage_buffer_binding_size,
        budget: gpu.memory_budget().bytes,
    };
    let storage = WgpuStorage::new(gpu, gpu.has_feature(wgpu::Features::MAPPABLE_PRIMARY_BUFFERS));
    // `Gpu::request` attached them; a core opened otherwise takes the defaults.
    let settings = gpu.shared.services.get::<HeapSettings>().map_or_else(
        || HeapSettings { watermarks: Watermarks::defaults(gpu.info().unified_memory()), debug_mask: 0 },
        |s| **s,
    );
    Ok(HeapCore::new(storage, gpu.shared.tracker.clone(), heap_limits, settings.watermarks, settings.debug_mask))
}

impl crate::profile::MemorySource for DeviceHeapCore {
    fn sample(&self) -> crate::profile::MemorySample {
        let s = self.stats();
        crate::profile::MemorySample {
            counter: "heap bytes",
            values: vec![("allocated", s.allocated_bytes.current), ("reserved", s.reserved_bytes.current)],
            instants: vec![("heap OOM", s.ooms), ("heap gc", s.gc_runs)],
        }
    }
}

/// The heap's settings from the environment, read when the device opens.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HeapSettings {
    pub watermarks: Watermarks,
    pub debug_mask: u32,
}

impl HeapSettings {
    pub(crate) fn from_env(unified_memory: bool) -> Result<HeapSettings> {
        Ok(HeapSettings {
            watermarks: Watermarks::from_env(unified_memory)?,
            debug_mask: config::debug_mask_from_env()?,
        })
    }
}

/// A device's caching allocator. Cheap to clone; all clones share one heap.
// One `Arc` around both parts: every block holds a clone of its heap, and one reference count
// to bump and drop per malloc + free instead of two is measurable on that path.
#[derive(Clone)]
pub struct Heap(Arc<HeapParts>);

/// What a [`Heap`] shares among its clones (fields are crate-private).
#[doc(hidden)]
pub struct HeapParts {
    pub(crate) gpu: Gpu,
    pub(crate) core: Arc<DeviceHeapCore>,
    /// The device's scopes: one tree per device heap, as `core` is.
    pub(crate) scopes: Arc<ScopeTree>,
}

impl std::ops::Deref for Heap {
    type Target = HeapParts;
    fn deref(&self) -> &HeapParts {
        &self.0
    }
}

impl Heap {
    pub(crate) fn from_parts(gpu: Gpu, core: Arc<DeviceHeapCore>) -> Heap {
        let budget = core.limits().budget;
        let scopes = gpu.shared.services.get_or_attach(|| ScopeTree::new(budget)).clone();
        Heap(Arc::new(HeapParts { gpu, core, scopes }))
    }
}

impl Gpu {
    /// The device's heap allocator (created on first use).
    pub fn heap(&self) -> Result<Heap> {
        let (core, attached) = self.shared.services.try_get_or_attach(|| device_heap_core(self).map(Arc::new))?;
        if attached {
            crate::profile::MemorySources::add(self, Arc::downgrade(core) as _);
        }
        Ok(Heap::from_parts(self.clone(), core.clone()))
    }
}

impl Heap {
    /// Storage offset alignment every block offset is a multiple of.
    pub fn alignment(&self) -> u64 {
        self.core.limits().alignment
    }

    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    /// True if both handles reach the same device heap.
    pub fn same_heap(&self, other: &Heap) -> bool {
        Arc::ptr_eq(&self.core, &other.core)
    }

    /// Allocates a block of at least `size` bytes.
    pub fn malloc(&self, size: u64, usage: Usage) -> Result<DeviceBlock> {
        self.malloc_placed(size, usage).map(|(block, _)| block)
    }

    /// [`Heap::malloc`], and the block's offset at allocation (it may move later, see
    /// [`DeviceBlock::binding`]).
    pub fn malloc_placed(&self, size: u64, usage: Usage) -> Result<(DeviceBlock, u64)> {
        let a = self.core.malloc_as::<Error>(size, usage)?;
        Ok((DeviceBlock::new(self.clone(), a.id, a.size, a.requested, a.pool), a.offset))
    }

    /// The device's scopes (quotas): every handle of this device heap, on any thread, sees the same.
    pub fn scopes(&self) -> &Arc<ScopeTree> {
        &self.scopes
    }

    /// A new top-level scope of this heap (its limit at most the memory budget).
    pub fn scope(&self, name: &str, limit: u64) -> Result<Scope> {
        Ok(Scope::top(&self.scopes, name, limit)?)
    }

    /// `INVALID_ARGUMENT` unless `scope` is one of this device heap's scopes.
    pub fn check_scope(&self, scope: &Scope, what: &str) -> Result<()> {
        if Arc::ptr_eq(scope.tree(), &self.scopes) {
            Ok(())
        } else {
            Err(Error::invalid("options.scope", "a scope of this device's heap", "a scope of another device")
                .in_call(what))
        }
    }

    /// Charges `bytes` to `scope` into `held`, the charge slot of what holds them (an executor,
    /// a shape cache, weights, a KV cache: `holder`, made by `what`). Once per holder:
    /// INVALID_ARGUMENT for a second scope; QUOTA_EXCEEDED when the bytes do not fit.
    pub fn charge_once(
        &self,
        held: &mut Option<ScopeCharge>,
        scope: &Scope,
        bytes: u64,
        what: &str,
        holder: &str,
    ) -> Result<()> {
        self.check_scope(scope, what)?;
        if held.is_some() {
            return Err(Error::invalid("options.scope", format!("one scope per {holder}"), "a second scope")
                .in_call(what)
                .with_hint(format!("the {holder} is charged to a scope already")));
        }
        *held = Some(scope.charge(bytes)?);
        Ok(())
    }

    /// [`Heap::malloc_placed`] charged to `scope` and its ancestors: `QUOTA_EXCEEDED` when the
    /// block's real (aligned) size would take any of them past its limit, checked before the
    /// heap allocates. The block holds the charge until it is freed, by any path.
    pub fn malloc_in(&self, scope: &Scope, size: u64, usage: Usage) -> Result<(DeviceBlock, u64)> {
        let a = self.malloc_in_for(scope, size, usage, wgalloc_heap::HANDLE)?;
        Ok((DeviceBlock::new(self.clone(), a.id, a.size, a.requested, a.pool), a.offset))
    }

    /// [`Heap::malloc_in`] for a block `owner` holds (a tag of `HeapCore::new_owner`, or
    /// `HANDLE` for a handle's).
    fn malloc_in_for(&self, scope: &Scope, size: u64, usage: Usage, owner: u32) -> Result<Allocation> {
        self.check_scope(scope, "malloc")?;
        // A size no memory could serve is the heap's INVALID_ARGUMENT, not the scope's quota.
        self.core.check_request(size)?;
        // Note [Scope locks]: the scope tree's lock is taken and let go inside the charge, and
        // the heap's inside the malloc and `set_charge`: neither is held across the other, nor
        // across a return to JS (where event listeners may malloc from this scope again).
        let mut charge = scope.charge_block(align_up(size, self.alignment())?)?;
        let a = self.core.malloc_for_as::<Error>(size, usage, owner)?;
        charge.settle(a.size);
        // The block's record holds the charge: it returns when the block goes back to the heap.
        self.core.set_charge(a.id, charge);
        Ok(a)
    }

    /// A new owner of blocks by id (see [`BlockOwner`]).
    pub fn owner(&self) -> Result<BlockOwner> {
        Ok(BlockOwner { tag: self.core.new_owner()?, heap: self.clone() })
    }

    /// A block from the scalar pool already holding `value` (uniform-bindable).
    pub fn alloc_scalar(&self, value: &[u8]) -> Result<DeviceBlock> {
        let a = self.core.malloc_scalar(value.len() as u64)?;
        let block = DeviceBlock::new(self.clone(), a.id, a.size, a.requested, a.pool);
        block.write(value, 0)?;
        Ok(block)
    }

    /// Frees block `id`. Its memory is reused once the GPU work recorded on it completed.
    pub(crate) fn free_id(&self, id: u64) -> Result<()> {
        Ok(self.core.free(id)?)
    }

    /// Keeps block `id` from reuse until the returned hold drops, even if it is freed
    /// meanwhile: for operations that submit work on it later (a download's pieces).
    pub(crate) fn hold(&self, id: u64) -> Result<BlockHold> {
        self.core.hold(id)?;
        Ok(BlockHold { heap: self.clone(), id })
    }

    /// Records that submission `seq` uses block `id` (wgalloc's own operations).
    pub(crate) fn record_use(&self, id: u64, seq: u64) {
        self.core.record_use(id, seq)
    }

    pub(crate) fn record_stream(&self, id: u64, marks: &Arc<StreamMarks>) -> Result<()> {
        Ok(self.core.record_stream(id, marks)?)
    }

    pub(crate) fn set_shape(&self, id: u64, shape: Option<Vec<u64>>) -> Result<()> {
        Ok(self.core.set_shape(id, shape)?)
    }

    /// Information on a live (active or pending-free) block.
    pub fn block_info(&self, id: u64) -> Option<BlockInfo> {
        self.core.block_info(id)
    }

    /// Sweeps pending frees whose GPU work completed (MPS freeInactiveBuffers).
    pub fn free_inactive_buffers(&self) {
        self.core.free_inactive_buffers()
    }

    /// Releases every idle cached segment to the driver. Returns the bytes released.
    pub fn empty_cache(&self) -> u64 {
        self.core.empty_cache()
    }

    /// What the heap learned about its workload (see [`HeapCore::profile`]).
    pub fn profile(&self) -> HeapProfile {
        self.core.profile()
    }

    /// Reserves a profile's segments up front (see [`HeapCore::warm_start`]).
    pub fn warm_start(&self, profile: &HeapProfile) -> Result<WarmStart> {
        Ok(self.core.warm_start(profile)?)
    }

    pub fn stats(&self) -> HeapStats {
        self.core.stats()
    }

    pub fn reset_peak_stats(&self) {
        self.core.reset_peak_stats()
    }

    pub fn reset_accumulated_stats(&self) {
        self.core.reset_accumulated_stats()
    }

    pub fn watermarks(&self) -> Watermarks {
        self.core.watermarks()
    }

    pub fn set_high_watermark_ratio(&self, ratio: f64) -> Result<()> {
        Ok(self.core.set_high_watermark_ratio(ratio)?)
    }

    pub fn set_low_watermark_ratio(&self, ratio: f64) -> Result<()> {
        Ok(self.core.set_low_watermark_ratio(ratio)?)
    }

    /// Bytes of the budget the heap may still reserve before it must garbage-collect
    /// (`None` while the low watermark is disabled).
    pub fn low_watermark_headroom(&self) -> Option<u64> {
        self.core.low_watermark_headroom()
    }

    pub fn budget(&self) -> u64 {
        self.core.limits().budget
    }

    /// Every segment with its blocks and free ranges, for tools and viewers.
    pub fn snapshot(&self) -> Vec<SegmentSnapshot> {
        self.core.snapshot()
    }

    /// Keep events (and, with `logs`, debug lines) for [`Heap::take_events`] instead of dropping them.
    pub fn set_event_recording(&self, events: bool, logs: bool) {
        self.core.set_event_recording(events, logs)
    }

    /// Events and log lines since the last call.
    pub fn take_events(&self) -> (Vec<HeapEvent>, Vec<String>) {
        self.core.take_events()
    }

    /// Hands the oldest recorded events, at most `max`, to `each` and forgets them; returns how
    /// many. The queue keeps its capacity, so steady recording does not reallocate.
    pub fn drain_events(&self, max: usize, each: impl FnMut(&HeapEvent)) -> usize {
        self.core.drain_events(max, each)
    }

    pub fn debug_mask(&self) -> u32 {
        self.core.debug_mask()
    }
}

/// Holds blocks by id, for a holder that keeps no handle per block (a JS heap object: its
/// blocks cross to JS as numbers). The heap's slab is their only record (Note [Block lifetime]
/// in `wgalloc-heap`): this owner frees them by id, makes borrowed handles of them for
/// operations, and on drop gives back every block it still holds (leased ones when their last
/// lease ends). Another owner's ids, or freed ones, are refused with a typed error.
pub struct BlockOwner {
    heap: Heap,
    tag: u32,
}

impl BlockOwner {
    pub fn heap(&self) -> &Heap {
        &self.heap
    }

    /// A block of at least `size` bytes, held by this owner.
    #[inline]
    pub fn malloc(&self, size: u64, usage: Usage) -> Result<Allocation> {
        self.heap.core.malloc_for_as(size, usage, self.tag)
    }

    /// [`Heap::malloc_in`]: a block charged to `scope`, held by this owner.
    pub fn malloc_in(&self, scope: &Scope, size: u64, usage: Usage) -> Result<Allocation> {
        self.heap.malloc_in_for(scope, size, usage, self.tag)
    }

    /// [`Heap::alloc_scalar`], held by this owner; returns the id.
    pub fn alloc_scalar(&self, value: &[u8]) -> Result<u64> {
        self.adopt(&self.heap.alloc_scalar(value)?)
    }

    /// Takes the block of `block`, an owned handle, from it: the owner holds it from now on and
    /// the handle (and its clones) borrow it. `USE_AFTER_FREE` for a freed one.
    pub fn adopt(&self, block: &DeviceBlock) -> Result<u64> {
        if !self.heap.same_heap(block.heap()) {
            return Err(Error::invalid("block", "a block of this device", "a block of another device"));
        }
        block.give_to(self.tag)?;
        Ok(block.id())
    }

    /// Frees block `id`: `DOUBLE_FREE` unless this owner holds it.
    #[inline]
    pub fn free(&self, id: u64) -> Result<()> {
        self.heap.core.free_owned_as(id, self.tag)
    }

    /// Frees block `id` if this owner still holds it (its JS object was collected without
    /// `free()`); its size, or `None` when it is not held.
    pub fn release(&self, id: u64) -> Option<u64> {
        self.heap.core.release_owned(id, self.tag)
    }

    /// A borrowed handle of block `id` for operations on it (it does not free the block);
    /// `USE_AFTER_FREE` unless this owner holds it.
    pub fn block(&self, id: u64) -> Result<DeviceBlock> {
        let facts = self.heap.core.owned_block(id, self.tag)?;
        Ok(DeviceBlock::borrowed(self.heap.clone(), id, facts))
    }

    /// `(id, size)` of every block this owner holds, in id order (the leak report's input).
    pub fn blocks(&self) -> Vec<(u64, u64)> {
        self.heap.core.owned_blocks(self.tag)
    }
}

impl Drop for BlockOwner {
    fn drop(&mut self) {
        self.heap.core.release_owner(self.tag);
    }
}

/// See [`Heap::hold`]: the block's memory stays out of the pools while this lives.
pub(crate) struct BlockHold {
    heap: Heap,
    id: u64,
}

impl Drop for BlockHold {
    fn drop(&mut self) {
        self.heap.core.release_hold(self.id);
    }
}
