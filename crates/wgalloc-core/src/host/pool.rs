//! Staging buffers and the pools that cache them: per direction, one free list
//! per size class behind its own lock (a cache hit takes one uncontended lock),
//! plus the list of freed blocks still waiting for their GPU work.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::config::{Direction, NUM_CLASSES};
use crate::completion::Completion;
use crate::error::{Error, Result};
use crate::signal::{lock, Slot};
use crate::stream::StreamUse;

/// Start of a mapped range. Only dereferenced while the buffer stays mapped,
/// which the owning block's state lock (or exclusive ownership) guarantees.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MappedPtr(pub NonNull<u8>);

// SAFETY: the pointer is plain host memory owned by the wgpu mapping; every access
// happens under the block's state lock while the state says `Mapped`.
unsafe impl Send for MappedPtr {}
unsafe impl Sync for MappedPtr {}

pub(crate) enum MapState {
    Mapped(MappedPtr),
    Unmapped,
    /// `map_async` issued; the slot completes when the callback ran.
    Mapping(Arc<Slot<Completion>>),
}

/// One staging buffer from the driver.
pub(crate) struct Staging {
    pub buffer: wgpu::Buffer,
    pub size: u64,
    pub dir: Direction,
    /// Owning pool: 0 for the default pool, else a private pool id.
    pub pool: u64,
    pub map: MapState,
}

impl Staging {
    /// Points at the whole mapped buffer. Fails if the buffer is not mapped.
    pub fn mapped_ptr(&self) -> Result<MappedPtr> {
        let fail = |e: wgpu::MapRangeError| Error::Internal(format!("staging buffer is not mapped: {e}"));
        let ptr = match self.dir {
            Direction::Upload => {
                let mut view = self.buffer.get_mapped_range_mut(..).map_err(fail)?;
                view.slice(..).as_raw_element_ptr()
            }
            Direction::Download => {
                let view = self.buffer.get_mapped_range(..).map_err(fail)?;
                NonNull::new(view.as_ptr().cast_mut()).ok_or_else(|| Error::Internal("mapped range is null".into()))?
            }
        };
        // The views are dropped here: the mapping, and so the pointer, lives until `unmap`.
        Ok(MappedPtr(ptr))
    }

    /// Unmaps if mapped (no-op otherwise, so wgpu never sees an invalid unmap).
    pub fn unmap(&mut self) {
        if let MapState::Mapping(_) | MapState::Mapped(_) = self.map {
            if self.mapped_ptr().is_ok() {
                self.buffer.unmap();
            }
        }
        self.map = MapState::Unmapped;
    }

    /// Issues `map_async` for the block's direction. wgpu runs it after every
    /// submission that uses the buffer, so the callback doubles as the completion event.
    pub fn start_map(&mut self, gpu: &crate::Gpu) -> Arc<Slot<Completion>> {
        let slot = Slot::new();
        let done = slot.clone();
        let mode = match self.dir {
            Direction::Upload => wgpu::MapMode::Write,
            Direction::Download => wgpu::MapMode::Read,
        };
        gpu.shared.tracker.track_map(&slot);
        // Through the submission lane: ordered after the submissions that use the buffer.
        gpu.map_buffer(self.buffer.clone(), mode, 0..self.buffer.size(), move |r| {
            done.complete(r.map_err(|e| Error::Internal(format!("staging buffer mapping failed: {e}"))));
        });
        self.map = MapState::Mapping(slot.clone());
        slot
    }
}

/// A freed block that GPU work may still use.
pub(crate) struct Pending {
    pub staging: Staging,
    pub uses: Vec<StreamUse>,
    /// Bytes the caller asked for (leaves `requested_bytes` at free time).
    pub requested: u64,
}

impl Pending {
    /// The submission that covers every use, once all of them were submitted.
    pub fn target(&self) -> Option<u64> {
        self.uses.iter().try_fold(0, |acc, u| u.resolved_seq().map(|s| acc.max(s)))
    }
}

pub(crate) struct BlockPool {
    pub id: u64,
    free: [Vec<Mutex<Vec<Staging>>>; 2],
    pending: Mutex<Vec<Pending>>,
    /// `pending.len()`, written under its lock: every alloc checks for pending blocks,
    /// and most find none, so they skip the lock.
    pending_len: AtomicUsize,
    /// Staging buffers this pool owns, in any state.
    pub live: AtomicU64,
}

impl BlockPool {
    pub fn new(id: u64) -> Self {
        let lists = || (0..NUM_CLASSES).map(|_| Mutex::new(Vec::new())).collect();
        BlockPool {
            id,
            free: [lists(), lists()],
            pending: Mutex::new(Vec::new()),
            pending_len: AtomicUsize::new(0),
            live: AtomicU64::new(0),
        }
    }

    /// A cached block of class `index` holding at least `size` bytes: the most
    /// recently freed one of exactly `size` (warm in cache), else the smallest that fits.
    pub fn take(&self, dir: Direction, index: usize, size: u64) -> Option<Staging> {
        let mut list = lock(&self.free[dir.index()][index]);
        let at = match list.last() {
            Some(s) if s.size == size => list.len() - 1,
            _ => list.iter().enumerate().filter(|(_, s)| s.size >= size).min_by_key(|(_, s)| s.size)?.0,
        };
        Some(list.swap_remove(at))
    }

    pub fn put(&self, index: usize, staging: Staging) {
        lock(&self.free[staging.dir.index()][index]).push(staging);
    }

    /// Freed blocks waiting for their GPU work (a moment's reading).
    pub fn pending_len(&self) -> usize {
        self.pending_len.load(Ordering::Acquire)
    }

    pub fn push_pending(&self, p: Pending) {
        let mut list = lock(&self.pending);
        list.push(p);
        self.pending_len.store(list.len(), Ordering::Release);
    }

    /// Takes the pending list to process it (without locking when it looked empty).
    pub fn take_pending(&self) -> Vec<Pending> {
        if self.pending_len() == 0 {
            return Vec::new();
        }
        let mut list = lock(&self.pending);
        self.pending_len.store(0, Ordering::Release);
        std::mem::take(&mut *list)
    }

    /// Puts back what `take_pending` took and is still waiting.
    pub fn restore_pending(&self, waiting: Vec<Pending>) {
        if waiting.is_empty() {
            return;
        }
        let mut list = lock(&self.pending);
        list.extend(waiting);
        self.pending_len.store(list.len(), Ordering::Release);
    }

    /// Empties every free list.
    pub fn drain_free(&self) -> Vec<Staging> {
        self.free.iter().flatten().flat_map(|l| std::mem::take(&mut *lock(l))).collect()
    }
}
