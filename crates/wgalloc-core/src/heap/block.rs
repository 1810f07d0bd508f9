//! `DeviceBlock`: a handle to one heap block. An owned handle gives its block back on `free()`,
//! or on drop without one; a borrowed handle ([`crate::heap::BlockOwner::block`]) names a
//! block an owner holds by id and gives nothing back.
//!
//! A block does not keep its buffer and offset: the heap may move it to make room (see
//! `allocator`), so every operation asks for its place with [`DeviceBlock::binding`], which
//! pins it there until the operation's work is submitted or recorded on a stream.
//!
//! When a block goes back to the heap, and what holds it meanwhile (a handle, an owner by id,
//! leases, its scope charge), is the core's, in its slab record: Note [Block lifetime] in
//! `wgalloc-heap` (`allocator/lifetime.rs`). A handle keeps only what names the block and
//! whether it freed it (so dropping a freed handle takes no lock).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use super::{BlockFacts, BlockInfo, Heap, PoolKind};
use crate::error::{checked_add, Error, Result};
use crate::stream::Stream;
use crate::transfer::{aligned_range, check_copy_source};

pub struct DeviceBlock {
    heap: Heap,
    id: u64,
    size: u64,
    requested: u64,
    pool: PoolKind,
    /// [`FREED`] and [`BORROWED`]. Read anywhere; changed only under the heap's lock (the
    /// transitions of `HeapCore::free_if` and `HeapCore::adopt_if`) or with `&mut self`, so a
    /// load and a store make each change.
    state: AtomicU32,
}

/// `free()` ran on this handle: the block went back to the heap, or goes when its last lease
/// ends.
const FREED: u32 = 1;
/// The handle does not give its block back: an owner holds it by id.
const BORROWED: u32 = 2;

/// Keeps a block usable by an operation that was started before a `free()` and runs later (an
/// executor run is taken when the call is made, then runs on another thread): a `free()`
/// meanwhile takes effect when the lease ends, after the operation recorded its GPU work.
pub struct BlockLease {
    heap: Heap,
    id: u64,
}

impl std::fmt::Debug for BlockLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockLease").field("block", &self.id).finish()
    }
}

impl Drop for BlockLease {
    fn drop(&mut self) {
        self.heap.core.end_lease(self.id);
    }
}

impl std::fmt::Debug for DeviceBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceBlock")
            .field("id", &self.id)
            .field("size", &self.requested)
            .field("pool", &self.pool)
            .field("freed", &self.is_freed())
            .finish()
    }
}

impl DeviceBlock {
    /// A handle that gives block `id` back. Whether the block is dedicated or above the binding
    /// limit is in [`DeviceBlock::info`].
    pub(crate) fn new(heap: Heap, id: u64, size: u64, requested: u64, pool: PoolKind) -> Self {
        DeviceBlock { heap, id, size, requested, pool, state: AtomicU32::new(0) }
    }

    /// A handle of block `id`, which an owner holds by id (see [`crate::heap::BlockOwner::block`]).
    pub(crate) fn borrowed(heap: Heap, id: u64, facts: BlockFacts) -> Self {
        let BlockFacts { size, requested, pool } = facts;
        DeviceBlock { heap, id, size, requested, pool, state: AtomicU32::new(BORROWED) }
    }

    /// Passes the block to `owner` (under the heap's lock): this handle no longer gives it back.
    /// `USE_AFTER_FREE` once freed, `INVALID_ARGUMENT` for a borrowed handle.
    pub(crate) fn give_to(&self, owner: u32) -> Result<()> {
        self.heap.core.adopt_if(self.id, owner, || {
            let state = self.state.load(Ordering::Relaxed);
            if state != 0 {
                return Err(self.refused(state, "adopt"));
            }
            self.state.store(BORROWED, Ordering::Release);
            Ok(())
        })
    }

    /// Why `what` (free, adopt) is refused for a handle in `state` other than 0 (it owns its
    /// block and did not free it).
    #[cold]
    #[inline(never)]
    fn refused(&self, state: u32, what: &str) -> Error {
        match state {
            FREED if what == "free" => Error::DoubleFree(format!("block {} was already freed", self.id)),
            FREED => Error::UseAfterFree(format!("block {} was freed; allocate a new block", self.id)),
            _ => Error::invalid(
                "block",
                "a handle that owns its block",
                format!("a handle of block {}, which an owner holds by id", self.id),
            )
            .in_call(what)
            .with_hint("the block's owner frees it"),
        }
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    /// Allocated bytes (the request rounded up to the storage offset alignment).
    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn requested_size(&self) -> u64 {
        self.requested
    }

    /// Offset of the block inside its segment buffer now (compaction may move it later).
    pub fn offset(&self) -> Result<u64> {
        self.live()?;
        Ok(self.heap.core.offset(self.id)?)
    }

    pub fn pool(&self) -> PoolKind {
        self.pool
    }

    /// True once the block went back to the heap (a block freed while leased: when its last
    /// lease ended).
    pub fn is_freed(&self) -> bool {
        // An owned handle that did not free its block: live, no lock needed.
        self.state.load(Ordering::Acquire) != 0 && !self.heap.core.is_active(self.id)
    }

    pub fn heap(&self) -> &Heap {
        &self.heap
    }

    /// `USE_AFTER_FREE` once a handle freed its block and the block went back to the heap.
    /// The block of a borrowed handle is its owner's to free: the heap call every operation
    /// makes by id (its place, its record) refuses a freed one.
    fn live(&self) -> Result<()> {
        if self.state.load(Ordering::Acquire) & FREED != 0 && !self.heap.core.is_active(self.id) {
            return Err(Error::UseAfterFree(format!("block {} was freed; allocate a new block", self.id)));
        }
        Ok(())
    }

    /// The segment buffer and the block's offset in it (`offset..offset + size`), pinned
    /// there until the binding drops: keep it until the work using it is submitted, or
    /// recorded on a stream and the block recorded with [`DeviceBlock::record_stream`].
    pub fn binding(&self) -> Result<BlockBinding> {
        self.live()?;
        let (buffer, offset) = self.heap.core.pin(self.id)?;
        Ok(BlockBinding { heap: self.heap.clone(), id: self.id, buffer, offset, size: self.size })
    }

    pub fn info(&self) -> Result<BlockInfo> {
        self.live()?;
        // A pending free has a record still, but is no longer this handle's block.
        self.heap
            .block_info(self.id)
            .filter(|info| info.state == super::BlockState::Active)
            .ok_or_else(|| Error::UseAfterFree(format!("block {} was freed", self.id)))
    }

    pub fn set_shape(&self, shape: Option<Vec<u64>>) -> Result<()> {
        self.live()?;
        self.heap.set_shape(self.id, shape)
    }

    /// Writes `data` at `offset` within the block, ordered before all later submissions.
    /// Same alignment rule as plain buffers, with the block's requested size as its end.
    pub fn write(&self, data: &[u8], offset: u64) -> Result<()> {
        self.live()?;
        self.heap.gpu.check_alive()?;
        let padded = aligned_range(offset, data.len() as u64, self.requested, "block write")?;
        // Queued writes run before the next submission, a move's copy included.
        let at = self.binding()?;
        self.heap.gpu.write_words(&at.buffer, at.offset + offset, data, padded, "block write", Some(self.id))
    }

    /// Reads `len` bytes at `offset` (any alignment) once all earlier work completed.
    pub async fn read(&self, offset: u64, len: u64) -> Result<Vec<u8>> {
        self.start_read(offset, len)?.finish().await
    }

    /// Submits the copy of a read without waiting for it, so several reads can be in
    /// flight at once (their waits then overlap). The use is recorded before this returns:
    /// a `free()` after it defers until the copy ran, so the read sees this block's bytes.
    pub fn start_read(&self, offset: u64, len: u64) -> Result<crate::transfer::Readback> {
        self.live()?;
        self.heap.gpu.check_alive()?;
        let end = checked_add(offset, len, "block read")?;
        if len == 0 || end > self.requested {
            return Err(Error::invalid(
                "offset, length",
                format!("a non-empty range inside the block's {} bytes", self.requested),
                format!("{offset}..{end}"),
            )
            .with_hint(format!(
                "block read: range {offset}..{end} must be non-empty and inside the block's {} bytes",
                self.requested
            )));
        }
        let at = self.binding()?;
        let readback = self.heap.gpu.submit_readback(&at.buffer, at.offset + offset, len, Some(self.id))?;
        self.heap.record_use(self.id, readback.event.seq());
        Ok(readback)
    }

    /// Records a copy of `len` bytes from `src` into this block on `stream`; both blocks
    /// are recorded as used by the stream, so freeing either defers until it ran.
    pub fn copy_from_on(
        &self,
        stream: &mut Stream,
        src: &DeviceBlock,
        src_offset: u64,
        dst_offset: u64,
        len: u64,
    ) -> Result<()> {
        self.copy_on(stream, src, src_offset, dst_offset, len, "copyFrom")
    }

    /// [`DeviceBlock::copy_from_on`], with `what` naming the caller's API in errors.
    pub fn copy_on(
        &self,
        stream: &mut Stream,
        src: &DeviceBlock,
        src_offset: u64,
        dst_offset: u64,
        len: u64,
        what: &str,
    ) -> Result<()> {
        self.live()?;
        src.live()?;
        if !std::sync::Arc::ptr_eq(&self.heap.core, &src.heap.core) {
            return Err(Error::invalid("source", "a block of this device", "a block of another device")
                .in_call(what)
                .with_hint("the source block belongs to another device"));
        }
        let padded = aligned_range(dst_offset, len, self.requested, &format!("{what} (destination)"))?;
        check_copy_source(src_offset, len, padded, src.requested, src.size, what)?;
        if self.id == src.id && src_offset < dst_offset + padded && dst_offset < src_offset + padded {
            return Err(Error::invalid(
                "srcOffset",
                "a source range that does not overlap the destination",
                format!("{src_offset}..{}", src_offset + padded),
            )
            .in_call(what)
            .with_hint("source and destination ranges overlap"));
        }
        let info = crate::profile::CopyInfo {
            kind: crate::profile::CopyKind::DeviceToDevice,
            bytes: padded,
            blocking: false,
            via_host: false,
            src_block: Some(src.id),
            dst_block: Some(self.id),
        };
        let (from, to) = (src.binding()?, self.binding()?);
        stream.encode_copy(&from.buffer, from.offset + src_offset, &to.buffer, to.offset + dst_offset, padded, info)?;
        self.record_stream(stream)?;
        src.record_stream(stream)
    }

    /// Copies all of `src` (up to this block's size) and submits; returns the submission event.
    pub fn copy_from(&self, src: &DeviceBlock) -> Result<crate::stream::Event> {
        let len = src.requested.min(self.requested);
        let mut stream = self.heap.gpu.create_stream()?;
        self.copy_on(&mut stream, src, 0, 0, len, "copyFrom")?;
        let event = stream.submit()?;
        self.heap.record_use(self.id, event.seq());
        self.heap.record_use(src.id, event.seq());
        Ok(event)
    }

    /// Marks the block as used by `stream`: a later free waits for that stream's work.
    pub fn record_stream(&self, stream: &Stream) -> Result<()> {
        self.live()?;
        if !Arc::ptr_eq(&self.heap.gpu.shared, &stream.gpu().shared) {
            // Its submission numbers count another device's work.
            return Err(Error::invalid("stream", "a stream of this block's device", "a stream of another device")
                .in_call("recordStream"));
        }
        self.heap.record_stream(self.id, stream.marks())
    }

    /// Returns the block to the heap (leased: when the last lease ends). A second call fails
    /// with `DOUBLE_FREE`; a borrowed handle's block is its owner's to free (`INVALID_ARGUMENT`).
    pub fn free(&self) -> Result<()> {
        self.heap.core.free_if(self.id, || {
            let state = self.state.load(Ordering::Relaxed);
            if state != 0 {
                return Err(self.refused(state, "free"));
            }
            self.state.store(FREED, Ordering::Release);
            Ok(())
        })
    }

    /// A lease for an operation that runs after this call returns (see [`BlockLease`]);
    /// `USE_AFTER_FREE` if the block was freed.
    pub fn lease(&self) -> Result<BlockLease> {
        self.heap.core.lease_if(self.id, || {
            if self.state.load(Ordering::Relaxed) & FREED != 0 {
                return Err(Error::UseAfterFree(format!("block {} was freed; allocate a new block", self.id)));
            }
            Ok(())
        })?;
        Ok(BlockLease { heap: self.heap.clone(), id: self.id })
    }
}

/// A block's place, pinned while an operation records work on it (see [`DeviceBlock::binding`]).
pub struct BlockBinding {
    heap: Heap,
    id: u64,
    pub buffer: Arc<wgpu::Buffer>,
    pub offset: u64,
    /// Allocated bytes.
    pub size: u64,
}

impl std::fmt::Debug for BlockBinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockBinding").field("block", &self.id).field("offset", &self.offset).finish()
    }
}

impl Drop for BlockBinding {
    fn drop(&mut self) {
        self.heap.core.unpin(self.id);
    }
}

impl Drop for DeviceBlock {
    fn drop(&mut self) {
        // `&mut self`: no other thread can free it now, so a plain load decides (a locked
        // swap on every drop of a freed block was a measurable part of malloc + free).
        if *self.state.get_mut() == 0 {
            let _ = self.heap.free_id(self.id);
        }
    }
}
