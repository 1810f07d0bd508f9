//! `HostBlock`: the handle to one cached staging buffer. Dropping it without
//! `free()` frees it (the GC safety net for JS handles).
//!
//! Mapped memory is reachable through `lend()` only while the block is mapped; every
//! call that unmaps it (`copy_*`, `unmap`, `free`) invalidates the pointer, so the JS
//! layer detaches its ArrayBuffer before making those calls. The lease `lend()` gives
//! keeps a destroyed device from freeing the memory while a view still points at it.

use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard};

use super::config::Direction;
use super::pool::{MapState, Pending, Staging};
use super::Host;
use crate::error::{checked_add, Error, Result};
use crate::heap::DeviceBlock;
use crate::mapping::MappingLease;
use crate::profile::{CopyInfo, CopyKind};
use crate::signal::lock;
use crate::stream::{Stream, StreamMarks, StreamUse};
use crate::transfer::{aligned_range, check_copy_source};

struct BlockState {
    /// `None` once freed.
    staging: Option<Staging>,
    streams: Vec<Arc<StreamMarks>>,
}

/// A block's mapped bytes and the lease that keeps them in place (see [`HostBlock::lend`]).
#[derive(Debug)]
pub struct LentBytes {
    pub ptr: NonNull<u8>,
    pub len: usize,
    pub lease: MappingLease,
}

pub struct HostBlock {
    host: Host,
    id: u64,
    requested: u64,
    size: u64,
    dir: Direction,
    pool: u64,
    state: Mutex<BlockState>,
}

impl HostBlock {
    pub(crate) fn new(host: Host, id: u64, requested: u64, staging: Staging) -> Self {
        let (size, dir, pool) = (staging.size, staging.dir, staging.pool);
        HostBlock {
            host,
            id,
            requested,
            size,
            dir,
            pool,
            state: Mutex::new(BlockState { staging: Some(staging), streams: Vec::new() }),
        }
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    /// Bytes asked for: the length of the block's view.
    pub fn requested_size(&self) -> u64 {
        self.requested
    }

    /// Bytes of the staging buffer (the size class).
    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn direction(&self) -> Direction {
        self.dir
    }

    /// 0 for the default pool, else the private pool the block came from.
    pub fn pool_id(&self) -> u64 {
        self.pool
    }

    pub fn host(&self) -> &Host {
        &self.host
    }

    pub fn is_freed(&self) -> bool {
        lock(&self.state).staging.is_none()
    }

    pub fn is_mapped(&self) -> bool {
        matches!(lock(&self.state).staging.as_ref().map(|s| &s.map), Some(MapState::Mapped(_)))
    }

    fn live(&self) -> Result<MutexGuard<'_, BlockState>> {
        let st = lock(&self.state);
        if st.staging.is_none() {
            return Err(Error::UseAfterFree(format!("host block {} was freed; allocate a new one", self.id)));
        }
        Ok(st)
    }

    fn not_mapped_error(&self, map: &MapState) -> Error {
        match (self.dir, map) {
            (_, MapState::Mapping(_)) => Error::invalid("block", "a mapped host block", "a block being mapped").with_hint(format!(
                "host block {} is being mapped; await block.map() before using its bytes",
                self.id
            )),
            (Direction::Upload, _) => Error::invalid("block", "a mapped upload block", "an unmapped upload block").with_hint(format!(
                "upload block {} is not mapped (it was copied or unmapped); await block.map() to write it again, or allocate a new block",
                self.id
            )),
            (Direction::Download, _) => Error::invalid("block", "a mapped download block", "an unmapped download block").with_hint(format!(
                "download block {} is not mapped; copy into it, submit the stream, then await block.map()",
                self.id
            )),
        }
    }

    /// The mapped bytes: a pointer to `requested_size()` bytes, valid until the block
    /// is next unmapped (a copy, `unmap`, `free`) or dropped, and while the lease lives
    /// (a destroyed device frees its memory once the last lease ends). Fails once the
    /// device is lost.
    pub fn lend(&self) -> Result<LentBytes> {
        let st = self.live()?;
        let staging = st.staging.as_ref().expect("live");
        match staging.map {
            MapState::Mapped(p) => {
                Ok(LentBytes { ptr: p.0, len: self.requested as usize, lease: self.host.gpu.lease_mapping()? })
            }
            ref other => Err(self.not_mapped_error(other)),
        }
    }

    /// Where the mapped bytes start, to compare with other memory; not for access (see `lend`).
    pub fn mapped_address(&self) -> Option<usize> {
        match lock(&self.state).staging.as_ref()?.map {
            MapState::Mapped(p) => Some(p.0.as_ptr() as usize),
            _ => None,
        }
    }

    /// Copies `data` into the mapped block at `offset`.
    pub fn write(&self, data: &[u8], offset: u64) -> Result<()> {
        let st = self.live()?;
        if self.dir != Direction::Upload {
            return Err(Error::invalid("block", "an upload block", "a download block")
                .with_hint(format!("host block {} is a download block; write into upload blocks", self.id)));
        }
        let end = checked_add(offset, data.len() as u64, "host block write")?;
        if end > self.requested {
            return Err(Error::invalid(
                "offset",
                format!("a range inside the block's {} bytes", self.requested),
                format!("{offset}..{end}"),
            )
            .with_hint(format!(
                "host block write: range {offset}..{end} is outside the block's {} bytes",
                self.requested
            )));
        }
        let _lease = self.host.gpu.lease_mapping()?;
        match st.staging.as_ref().expect("live").map {
            // SAFETY: the buffer is mapped (state lock held, lease out) and the range lies
            // inside it. `copy`, not `copy_nonoverlapping`: `data` may be a view of this mapping.
            MapState::Mapped(p) => unsafe {
                std::ptr::copy(data.as_ptr(), p.0.as_ptr().add(offset as usize), data.len());
            },
            ref other => return Err(self.not_mapped_error(other)),
        }
        Ok(())
    }

    /// Copies `len` bytes at `offset` out of a mapped download block.
    pub fn read(&self, offset: u64, len: u64) -> Result<Vec<u8>> {
        self.read_with(offset, len, <[u8]>::to_vec)
    }

    /// Lends `len` mapped bytes at `offset` of a download block to `f` (under the block's lock,
    /// so they stay mapped while `f` runs).
    pub(crate) fn read_with<R>(&self, offset: u64, len: u64, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        let st = self.live()?;
        let end = checked_add(offset, len, "host block read")?;
        if end > self.requested {
            return Err(Error::invalid(
                "offset",
                format!("a range inside the block's {} bytes", self.requested),
                format!("{offset}..{end}"),
            )
            .with_hint(format!(
                "host block read: range {offset}..{end} is outside the block's {} bytes",
                self.requested
            )));
        }
        let _lease = self.host.gpu.lease_mapping()?;
        match st.staging.as_ref().expect("live").map {
            MapState::Mapped(p) if self.dir == Direction::Download => {
                // SAFETY: the buffer is mapped (state lock held, lease out) and the range lies
                // inside it.
                Ok(f(unsafe { std::slice::from_raw_parts(p.0.as_ptr().add(offset as usize), len as usize) }))
            }
            MapState::Mapped(_) => {
                Err(Error::invalid("block", "a download block", "an upload block").with_hint(format!(
                "host block {} is an upload block; read download blocks (mapped upload memory may be write-combined)",
                self.id
            )))
            }
            ref other => Err(self.not_mapped_error(other)),
        }
    }

    fn check_device(&self, block: &DeviceBlock, what: &str) -> Result<()> {
        if Arc::ptr_eq(&self.host.gpu.shared, &block.heap().gpu().shared) {
            Ok(())
        } else {
            Err(Error::invalid("block", "a device block of this device", "a block of another device").in_call(what))
        }
    }

    /// Unmaps for GPU use. Refuses while a map is in flight (it would be cancelled).
    fn unmap_for_copy(&self, staging: &mut Staging) -> Result<()> {
        match staging.map {
            MapState::Mapping(_) => Err(self.not_mapped_error(&staging.map)),
            _ => {
                staging.unmap();
                Ok(())
            }
        }
    }

    /// Records a copy of `len` bytes from this upload block into `dst` on `stream`.
    /// Unmaps the block (its bytes are final once copied); both blocks are recorded
    /// as used by the stream, so freeing either waits until the copy ran.
    pub fn copy_to_device_on(
        &self,
        stream: &mut Stream,
        dst: &DeviceBlock,
        src_offset: u64,
        dst_offset: u64,
        len: u64,
    ) -> Result<()> {
        let mut st = self.live()?;
        if self.dir != Direction::Upload {
            return Err(Error::invalid("block", "an upload block", "a download block").with_hint(format!(
                "copy: host block {} is a download block; copy from upload blocks to the device",
                self.id
            )));
        }
        self.check_device(dst, "copy")?;
        // Pinned until recorded on the stream (the end of this call).
        let dst_at = dst.binding()?;
        let (dst_buf, dst_base) = (&dst_at.buffer, dst_at.offset);
        let padded = aligned_range(dst_offset, len, dst.requested_size(), "copy (destination)")?;
        check_copy_source(src_offset, len, padded, self.requested, self.size, "copy")?;
        let staging = st.staging.as_mut().expect("live");
        self.unmap_for_copy(staging)?;
        let at = checked_add(dst_base, dst_offset, "copy (destination)")?;
        let info = CopyInfo {
            kind: CopyKind::Upload,
            bytes: padded,
            blocking: false,
            via_host: true,
            src_block: None,
            dst_block: Some(dst.id()),
        };
        stream.encode_copy(&staging.buffer, src_offset, dst_buf, at, padded, info)?;
        if !st.streams.iter().any(|m| Arc::ptr_eq(m, stream.marks())) {
            st.streams.push(stream.marks().clone());
        }
        drop(st);
        dst.record_stream(stream)
    }

    /// Records a copy of `len` bytes from `src` into this download block on `stream`.
    pub fn copy_from_device_on(
        &self,
        stream: &mut Stream,
        src: &DeviceBlock,
        src_offset: u64,
        dst_offset: u64,
        len: u64,
    ) -> Result<()> {
        self.copy_from_device(stream, src, src_offset, dst_offset, len, false)
    }

    /// `blocking`: the caller waits for this copy (the download helper), for the profiler.
    pub(crate) fn copy_from_device(
        &self,
        stream: &mut Stream,
        src: &DeviceBlock,
        src_offset: u64,
        dst_offset: u64,
        len: u64,
        blocking: bool,
    ) -> Result<()> {
        // A freed block is USE_AFTER_FREE whatever else is wrong with the call.
        drop(self.live()?);
        self.check_device(src, "copy")?;
        // Pinned until recorded on the stream (the end of this call).
        let src_at = src.binding()?;
        let (src_buf, src_base, src_size) = (&src_at.buffer, src_at.offset, src_at.size);
        let padded = aligned_range(dst_offset, len, self.requested, "copy (destination)")?;
        check_copy_source(src_offset, len, padded, src.requested_size(), src_size, "copy")?;
        let from = checked_add(src_base, src_offset, "copy (source)")?;
        self.copy_from_range(stream, src_buf, from, dst_offset, padded, blocking, src.id())?;
        src.record_stream(stream)
    }

    /// Encodes the copy of `padded` bytes at `from` in `src_buf` (checked by the caller, and
    /// kept from reuse by it) into this block at `dst_offset`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn copy_from_range(
        &self,
        stream: &mut Stream,
        src_buf: &wgpu::Buffer,
        from: u64,
        dst_offset: u64,
        padded: u64,
        blocking: bool,
        src_block: u64,
    ) -> Result<()> {
        let mut st = self.live()?;
        if self.dir != Direction::Download {
            return Err(Error::invalid("block", "a download block", "an upload block").with_hint(format!(
                "copy: host block {} is an upload block; copy from the device into download blocks",
                self.id
            )));
        }
        let staging = st.staging.as_mut().expect("live");
        self.unmap_for_copy(staging)?;
        let info = CopyInfo {
            kind: CopyKind::Download,
            bytes: padded,
            blocking,
            via_host: true,
            src_block: Some(src_block),
            dst_block: None,
        };
        stream.encode_copy(src_buf, from, &staging.buffer, dst_offset, padded, info)?;
        if !st.streams.iter().any(|m| Arc::ptr_eq(m, stream.marks())) {
            st.streams.push(stream.marks().clone());
        }
        Ok(())
    }

    /// Marks the block as used by `stream`: a later `free()` waits for that stream's work.
    pub fn record_stream(&self, stream: &Stream) -> Result<()> {
        let mut st = self.live()?;
        if !Arc::ptr_eq(&self.host.gpu.shared, &stream.gpu().shared) {
            // Its submission numbers count another device's work.
            return Err(Error::invalid("stream", "a stream of this block's device", "a stream of another device")
                .in_call("recordStream"));
        }
        if !st.streams.iter().any(|m| Arc::ptr_eq(m, stream.marks())) {
            st.streams.push(stream.marks().clone());
        }
        Ok(())
    }

    /// Maps the block once the work recorded on it ran: a download block to read
    /// what was copied in, an upload block to write it again after a copy.
    /// A no-op if already mapped.
    pub async fn map(&self) -> Result<()> {
        let slot = {
            let mut st = self.live()?;
            let uses: Vec<StreamUse> = st.streams.iter().map(StreamUse::capture).collect();
            if uses.iter().any(|u| u.resolved_seq().is_none()) {
                return Err(Error::invalid("block", "a block whose streams submitted their work", "a stream with unsubmitted work").with_hint(format!(
                    "host block {}: a stream that uses it has unsubmitted work; call stream.submit() before block.map()",
                    self.id
                )));
            }
            self.host.gpu.check_alive()?;
            let staging = st.staging.as_mut().expect("live");
            match &staging.map {
                MapState::Mapped(_) => return Ok(()),
                MapState::Mapping(slot) => slot.clone(),
                MapState::Unmapped => staging.start_map(&self.host.gpu),
            }
        };
        slot.done().await;
        let result = slot.peek();
        let mut st = self.live()?;
        let staging = st.staging.as_mut().expect("live");
        match (&staging.map, result) {
            (MapState::Mapping(s), Some(Ok(()))) if Arc::ptr_eq(s, &slot) => {
                let p = staging.mapped_ptr()?;
                staging.map = MapState::Mapped(p);
                Ok(())
            }
            (MapState::Mapped(_), _) => Ok(()),
            (MapState::Mapping(s), Some(Err(e))) if Arc::ptr_eq(s, &slot) => {
                staging.map = MapState::Unmapped;
                Err(e)
            }
            _ => Err(Error::Internal(format!("host block {}: the mapping was interrupted; call map() again", self.id))),
        }
    }

    /// Unmaps the block (its bytes view must be gone). A no-op if not mapped.
    pub fn unmap(&self) -> Result<()> {
        let mut st = self.live()?;
        let staging = st.staging.as_mut().expect("live");
        self.unmap_for_copy(staging)
    }

    /// Returns the block to the cache; it is reused only once the GPU work recorded
    /// on it completed (and an upload block is mapped again). A second call fails with `DOUBLE_FREE`.
    pub fn free(&self) -> Result<()> {
        let pending = {
            let mut st = lock(&self.state);
            let Some(staging) = st.staging.take() else {
                return Err(Error::DoubleFree(format!("host block {} was already freed", self.id)));
            };
            // Most blocks were used on no stream: skip building an empty list.
            let uses = if st.streams.is_empty() {
                Vec::new()
            } else {
                st.streams.drain(..).map(|m| StreamUse::capture(&m)).collect()
            };
            Pending { staging, uses, requested: self.requested }
        };
        self.host.on_free(pending);
        Ok(())
    }
}

impl std::fmt::Debug for HostBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostBlock")
            .field("id", &self.id)
            .field("direction", &self.dir)
            .field("requested", &self.requested)
            .field("size", &self.size)
            .field("pool", &self.pool)
            .finish()
    }
}

impl Drop for HostBlock {
    fn drop(&mut self) {
        if !self.is_freed() {
            let _ = self.free();
        }
    }
}
