//! `DeviceBlock`: the handle to one heap block. Dropping it without `free()`
//! returns the block to its pool (the GC safety net for JS handles).
//!
//! A block does not keep its buffer and offset: the heap may move it to make room (see
//! `allocator`), so every operation asks for its place with [`DeviceBlock::binding`], which
//! pins it there until the operation's work is submitted or recorded on a stream.
//!
//! Note [Block lifetime]: a block is live from `malloc` until it goes back to the heap, which
//! happens exactly once, by the first of: `free()` with no lease out; the end of the last
//! lease after a `free()` (FREE_DEFERRED); the handle's drop (a JS block collected without
//! `free()`, the binding's table dropped with its heap). Going back retires its id (the slab
//! slot's generation moves on, so the id never names another block) and returns its scope
//! charge. The bytes then wait as a pending free while GPU work recorded on the block is not
//! submitted (device pools) or not complete (shared pools, a download in progress), and only
//! then join the arena's free list. While live, a block may move (compaction) unless something
//! may still name its old place (an operation between looking up its place and submitting, a
//! lease, kept bind groups, an unsubmitted stream, a download; shared and scalar blocks). `docs/heap.md` (Block lifetime) draws the states of each
//! layer: this handle, the binding's id table and the facade's `DeviceBlock`.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use super::{BlockInfo, Heap, PoolKind, ScopeCharge};
use crate::error::{checked_add, Error, Result};
use crate::stream::Stream;
use crate::transfer::{aligned_range, check_copy_source};

pub struct DeviceBlock {
    heap: Heap,
    id: u64,
    size: u64,
    requested: u64,
    pool: PoolKind,
    /// FREED, FREE_DEFERRED and the number of leases (see [`DeviceBlock::lease`]), in one word.
    /// Read anywhere; changed only under the heap's lock (`HeapCore::free_if`) or with
    /// `&mut self`, so a load and a store make each change.
    state: AtomicU32,
    /// The scope charge of a block malloc'd in a scope (`Heap::malloc_in`): returned when the
    /// block goes back to the heap, by `free()`, its last lease, or its drop. Boxed: most blocks
    /// have none, and the unscoped malloc + free path keeps its size.
    charge: Option<Box<BlockCharge>>,
}

/// A block's scope charge, taken once when the block is freed through `&self`.
struct BlockCharge(parking_lot::Mutex<Option<ScopeCharge>>);

impl BlockCharge {
    fn release(&self) {
        let charge = self.0.lock().take();
        drop(charge);
    }
}

/// The block went back to the heap.
const FREED: u32 = 1;
/// `free()` ran while leased: the block goes back to the heap when the last lease ends.
const FREE_DEFERRED: u32 = 2;
/// One lease, counted in the bits above the flags.
const LEASE: u32 = 4;

/// Keeps a block usable by an operation that was started before a `free()` and runs later (an
/// executor run is taken when the call is made, then runs on another thread): a `free()`
/// meanwhile takes effect when the lease ends, after the operation recorded its GPU work.
#[derive(Debug)]
pub struct BlockLease(Arc<DeviceBlock>);

impl Drop for BlockLease {
    fn drop(&mut self) {
        let block = &self.0;
        let _: Result<()> = block.heap.core.free_if(block.id, || {
            let state = block.state.load(Ordering::Relaxed) - LEASE;
            // The last lease of a block freed meanwhile frees it now.
            let free = state == FREE_DEFERRED;
            block.state.store(if free { FREED } else { state }, Ordering::Release);
            Ok(free)
        });
        block.release_charge();
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
    /// Whether the block is dedicated or above the binding limit is in [`DeviceBlock::info`].
    pub(crate) fn new(heap: Heap, id: u64, size: u64, requested: u64, pool: PoolKind) -> Self {
        DeviceBlock { heap, id, size, requested, pool, state: AtomicU32::new(0), charge: None }
    }

    /// The block with its scope charge (see [`DeviceBlock::charge`]).
    pub(crate) fn charged(mut self, charge: ScopeCharge) -> Self {
        self.charge = Some(Box::new(BlockCharge(parking_lot::Mutex::new(Some(charge)))));
        self
    }

    /// Returns the scope charge once the block went back to the heap (after the heap's lock
    /// was let go: Note [Scope locks]).
    fn release_charge(&self) {
        if let Some(charge) = &self.charge {
            if self.is_freed() {
                charge.release();
            }
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
        self.state.load(Ordering::Acquire) & FREED != 0
    }

    pub fn heap(&self) -> &Heap {
        &self.heap
    }

    fn live(&self) -> Result<()> {
        if self.is_freed() {
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
        self.heap.block_info(self.id).ok_or_else(|| Error::UseAfterFree(format!("block {} was freed", self.id)))
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

    /// Returns the block to the heap. A second call fails with `DOUBLE_FREE`.
    pub fn free(&self) -> Result<()> {
        self.heap.core.free_if(self.id, || {
            let state = self.state.load(Ordering::Relaxed);
            if state & (FREED | FREE_DEFERRED) != 0 {
                return Err(Error::DoubleFree(format!("block {} was already freed", self.id)));
            }
            // Leased: the last lease frees it, after the operations that hold it recorded their work.
            let next = if state == 0 { FREED } else { state | FREE_DEFERRED };
            self.state.store(next, Ordering::Release);
            Ok(next == FREED)
        })?;
        self.release_charge();
        Ok(())
    }

    /// A lease for an operation that runs after this call returns (see [`BlockLease`]);
    /// `USE_AFTER_FREE` if the block was freed.
    pub fn lease(self: &Arc<Self>) -> Result<BlockLease> {
        self.heap.core.free_if(self.id, || {
            let state = self.state.load(Ordering::Relaxed);
            if state & (FREED | FREE_DEFERRED) != 0 {
                return Err(Error::UseAfterFree(format!("block {} was freed; allocate a new block", self.id)));
            }
            self.state.store(state + LEASE, Ordering::Release);
            Ok(false)
        })?;
        Ok(BlockLease(self.clone()))
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
        if *self.state.get_mut() & FREED == 0 {
            let _ = self.heap.free_id(self.id);
        }
    }
}
