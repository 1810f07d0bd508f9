//! Minimal data movement on plain device buffers: create, write, copy, read back.
//! The heap and host-cache allocators build the real paths on top of these rules.
//!
//! Alignment rule (wgpu copies move whole 4-byte words): offsets must be multiples
//! of 4, and a length that is not a multiple of 4 is only accepted where the range
//! ends at the end of the destination buffer, whose padding bytes are private.
//! Reads accept any range. Nothing outside the requested range is ever modified.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::context::Gpu;
use crate::error::{align_up, checked_add, Error, Result};
use crate::profile::{CopyInfo, CopyKind};
use crate::scope::guarded_alloc;
use crate::signal::{lock, Slot};
use crate::stream::{DeferredDestroy, Stream, StreamMarks};

pub(crate) const WORD: u64 = wgpu::COPY_BUFFER_ALIGNMENT;

/// A device-local buffer (storage, copy source and destination) of a fixed size.
pub struct GpuBuffer {
    gpu: Gpu,
    buffer: wgpu::Buffer,
    size: u64,
    destroyed: AtomicBool,
    /// Streams that recorded work on the buffer: `destroy` waits for those with work unsubmitted.
    streams: Mutex<Vec<Weak<StreamMarks>>>,
}

impl GpuBuffer {
    /// Bytes requested; the allocation is padded up to a multiple of 4.
    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn padded_size(&self) -> u64 {
        self.buffer.size()
    }

    pub fn raw(&self) -> Result<&wgpu::Buffer> {
        if self.destroyed.load(Ordering::Acquire) {
            return Err(Error::UseAfterFree("this buffer was destroyed; create a new one".into()));
        }
        Ok(&self.buffer)
    }

    /// Releases the GPU memory now, or, while a stream holds unsubmitted work on the buffer,
    /// once every such stream submitted (or dropped) it: wgpu would refuse that work whole.
    /// Work already submitted still completes. Returns false if it was already destroyed.
    pub fn destroy(&self) -> bool {
        if self.destroyed.swap(true, Ordering::AcqRel) {
            return false;
        }
        let waiting: Vec<Arc<StreamMarks>> =
            lock(&self.streams).drain(..).filter_map(|w| w.upgrade()).filter(|m| m.has_unsubmitted()).collect();
        if waiting.is_empty() {
            self.gpu.destroy_buffer(self.buffer.clone());
        } else {
            let d = Arc::new(DeferredDestroy {
                gpu: self.gpu.clone(),
                buffer: self.buffer.clone(),
                waiting: AtomicU64::new(waiting.len() as u64),
            });
            for m in waiting {
                let d = d.clone();
                m.defer(move || d.stream_done());
            }
        }
        true
    }

    /// `stream` records work on the buffer.
    fn used_on(&self, stream: &Stream) {
        let mut streams = lock(&self.streams);
        streams.retain(|w| w.strong_count() > 0);
        if !streams.iter().any(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(stream.marks()))) {
            streams.push(Arc::downgrade(stream.marks()));
        }
    }

    pub fn is_destroyed(&self) -> bool {
        self.destroyed.load(Ordering::Acquire)
    }

    fn check_same_device(&self, gpu: &Gpu) -> Result<()> {
        if std::sync::Arc::ptr_eq(&self.gpu.shared, &gpu.shared) {
            Ok(())
        } else {
            Err(Error::invalid("buffer", "a buffer of this Gpu", "a buffer of another Gpu")
                .with_hint("the buffer belongs to another Gpu"))
        }
    }
}

// Dropping without `destroy()` on purpose: `destroy` takes wgpu's device-wide resource lock
// exclusively, which the poller holds while it waits for GPU work, so a finalizer (or process
// exit) would stall until the GPU finished. A plain drop frees the memory once wgpu's own
// references (submissions in flight) end.

/// Validates `[offset, offset+len)` inside a buffer of `size` bytes under the
/// alignment rule above; returns the padded length to encode.
pub(crate) fn aligned_range(offset: u64, len: u64, size: u64, what: &str) -> Result<u64> {
    if len == 0 {
        return Err(Error::invalid("length", "at least 1 byte", "0").in_call(what));
    }
    if !offset.is_multiple_of(WORD) {
        return Err(Error::invalid("offset", "a multiple of 4", offset.to_string()).in_call(what));
    }
    let end = checked_add(offset, len, what)?;
    if end > size {
        return Err(Error::invalid(
            "offset",
            format!("a range inside the buffer of {size} bytes"),
            format!("{offset}..{end}"),
        )
        .in_call(what));
    }
    if !len.is_multiple_of(WORD) && end != size {
        return Err(Error::invalid(
            "length",
            format!("a multiple of 4 unless the range ends at the end of the buffer ({size})"),
            len.to_string(),
        )
        .in_call(what));
    }
    align_up(len, WORD)
}

/// A copy may read the source into its own padding, never past its allocation:
/// `[offset, offset+len)` inside the `logical` bytes, `[offset, offset+padded)` inside `allocated`.
pub(crate) fn check_copy_source(
    offset: u64,
    len: u64,
    padded: u64,
    logical: u64,
    allocated: u64,
    what: &str,
) -> Result<()> {
    let end = checked_add(offset, len, what)?;
    let padded_end = checked_add(offset, padded, what)?;
    if !offset.is_multiple_of(WORD) || end > logical || padded_end > allocated {
        return Err(Error::invalid(
            "srcOffset",
            format!("a source range that starts at a multiple of 4 and lies inside the source's {logical} bytes"),
            format!("{offset}..{end}"),
        )
        .in_call(what));
    }
    Ok(())
}

impl Gpu {
    /// Queues `data` at `at` of `buffer`, zero-padded to `padded` bytes (the caller checked
    /// with [`aligned_range`] that the padding is private), and records it when profiling. The
    /// write goes through the submission lane (Note [One submission thread] in `lane.rs`), so it
    /// is ordered before every later submission; wgpu refusing it fails the next one.
    pub(crate) fn write_words(
        &self,
        buffer: &wgpu::Buffer,
        at: u64,
        data: &[u8],
        padded: u64,
        what: &str,
        block: Option<u64>,
    ) -> Result<()> {
        let start = std::time::Instant::now();
        let mut bytes = data.to_vec();
        bytes.resize(padded as usize, 0);
        let (buffer, what) = (buffer.clone(), what.to_string());
        self.enqueue(move |lane| lane.write(&buffer, at, &bytes, &what));
        self.profile_queue_write(start, data.len() as u64, block);
        Ok(())
    }

    /// Creates a zero-initialised device-local buffer of `size` bytes.
    pub fn create_buffer(&self, size: u64) -> Result<GpuBuffer> {
        self.check_alive()?;
        // Buffers are padded to whole words, so the largest size is maxBufferSize rounded down to one.
        let max = self.limits().max_buffer_size / WORD * WORD;
        if size == 0 || size > max {
            return Err(Error::invalid(
                "size",
                format!("1 to {max} (maxBufferSize in whole 4-byte words)"),
                size.to_string(),
            )
            .with_hint(format!("buffer size must be between 1 and the device's maxBufferSize ({max}), got {size}")));
        }
        let padded = align_up(size, WORD)?;
        let buffer = guarded_alloc(self.device(), "creating a buffer", padded, || {
            self.device().create_buffer(&wgpu::BufferDescriptor {
                label: Some("wgalloc buffer"),
                size: padded,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        })?;
        Ok(GpuBuffer { gpu: self.clone(), buffer, size, destroyed: AtomicBool::new(false), streams: Mutex::default() })
    }

    /// Writes `data` at `offset`; visible to all work submitted after this call.
    pub fn write_buffer(&self, buffer: &GpuBuffer, offset: u64, data: &[u8]) -> Result<()> {
        self.check_alive()?;
        buffer.check_same_device(self)?;
        let raw = buffer.raw()?;
        let padded = aligned_range(offset, data.len() as u64, buffer.size, "writeBuffer")?;
        self.write_words(raw, offset, data, padded, "writeBuffer", None)
    }

    /// Reads `len` bytes at `offset` (any alignment) once all prior work completed.
    pub async fn read_buffer(&self, buffer: &GpuBuffer, offset: u64, len: u64) -> Result<Vec<u8>> {
        self.start_read_buffer(buffer, offset, len)?.finish().await
    }

    /// Submits the copy of a `read_buffer` without waiting: once this returned, destroying
    /// the buffer no longer affects the read (wgpu keeps it until the copy ran).
    pub fn start_read_buffer(&self, buffer: &GpuBuffer, offset: u64, len: u64) -> Result<Readback> {
        self.check_alive()?;
        buffer.check_same_device(self)?;
        let end = checked_add(offset, len, "readBuffer")?;
        if len == 0 || end > buffer.size {
            return Err(Error::invalid(
                "offset",
                format!("a non-empty range inside the buffer of {} bytes", buffer.size),
                format!("{offset}..{end}"),
            )
            .with_hint(format!(
                "readBuffer: range {offset}..{end} must be non-empty and inside the buffer of {} bytes",
                buffer.size
            )));
        }
        self.submit_readback(buffer.raw()?, offset, len, None)
    }

    /// Encodes and submits a copy of `[offset, offset+len)` of `raw` (which must
    /// stay inside its allocation once widened to whole words) into a fresh
    /// staging buffer. The caller may record the returned event, then `finish()`.
    /// `src_block` is the heap block id of `raw`'s range, for the profiler.
    pub(crate) fn submit_readback(
        &self,
        raw: &wgpu::Buffer,
        offset: u64,
        len: u64,
        src_block: Option<u64>,
    ) -> Result<Readback> {
        let start = offset - offset % WORD;
        let span = align_up(checked_add(offset, len, "read")?, WORD)? - start;
        let staging = guarded_alloc(self.device(), "creating a read-back buffer", span, || {
            self.device().create_buffer(&wgpu::BufferDescriptor {
                label: Some("wgalloc readback"),
                size: span,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        })?;
        let mut stream = self.create_stream()?;
        let info = CopyInfo {
            kind: CopyKind::Download,
            bytes: span,
            blocking: true,
            via_host: false,
            src_block,
            dst_block: None,
        };
        stream.encode_copy(raw, start, &staging, 0, span, info)?;
        let event = stream.submit()?;
        Ok(Readback { gpu: self.clone(), staging, event, skip: (offset - start) as usize, len: len as usize })
    }

    /// Maps a MAP_READ buffer; resolves once the map completed or the device is lost.
    pub async fn map_read(&self, buffer: &wgpu::Buffer) -> Result<()> {
        let slot = Slot::new();
        let done = slot.clone();
        self.shared.tracker.track_map(&slot);
        self.map_buffer(buffer.clone(), wgpu::MapMode::Read, 0..buffer.size(), move |r| {
            done.complete(r.map_err(|e| Error::Internal(format!("buffer mapping failed: {e}"))));
        });
        slot.wait().await
    }
}

/// A submitted copy into a staging buffer, waiting to be mapped and read. It owns all it
/// needs, so it may outlive the handle it was started from.
pub struct Readback {
    gpu: Gpu,
    staging: wgpu::Buffer,
    pub(crate) event: crate::stream::Event,
    skip: usize,
    len: usize,
}

impl Readback {
    pub async fn finish(self) -> Result<Vec<u8>> {
        self.gpu.map_read(&self.staging).await?;
        // The map can complete before the submission's completion is recorded (both fire
        // in one poll); wait for that too, so once a read resolved, every earlier
        // submission counts as done and blocks freed before it can be reused at once.
        self.event.wait().await?;
        // A device destroyed from now on keeps the mapping until the lease drops.
        let lease = self.gpu.lease_mapping()?;
        let bytes = {
            let view = self
                .staging
                .get_mapped_range(..)
                .map_err(|e| Error::Internal(format!("read-back mapping failed: {e}")))?;
            view[self.skip..self.skip + self.len].to_vec()
        };
        self.staging.unmap();
        drop(lease);
        // Dropped, not destroyed: see `GpuBuffer`'s note on wgpu's resource lock.
        Ok(bytes)
    }
}

impl Stream {
    /// Records a copy of `len` bytes; runs when the stream is submitted.
    pub fn copy_buffer(
        &mut self,
        src: &GpuBuffer,
        src_offset: u64,
        dst: &GpuBuffer,
        dst_offset: u64,
        len: u64,
    ) -> Result<()> {
        self.gpu().check_alive()?;
        src.check_same_device(self.gpu())?;
        dst.check_same_device(self.gpu())?;
        let padded = aligned_range(dst_offset, len, dst.size, "copy (destination)")?;
        check_copy_source(src_offset, len, padded, src.size, src.padded_size(), "copy")?;
        if std::ptr::eq(src, dst) && src_offset < dst_offset + padded && dst_offset < src_offset + padded {
            return Err(Error::invalid(
                "srcOffset",
                "a source range that does not overlap the destination",
                format!("{src_offset}..{}", src_offset + padded),
            )
            .in_call("copy"));
        }
        let (s, d) = (src.raw()?, dst.raw()?);
        src.used_on(self);
        dst.used_on(self);
        let info = CopyInfo {
            kind: CopyKind::DeviceToDevice,
            bytes: padded,
            blocking: false,
            via_host: false,
            src_block: None,
            dst_block: None,
        };
        self.encode_copy(s, src_offset, d, dst_offset, padded, info)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alignment_rule() {
        assert_eq!(aligned_range(0, 8, 8, "t").unwrap(), 8);
        assert_eq!(aligned_range(4, 5, 9, "t").unwrap(), 8, "unaligned tail at the end is padded");
        assert!(aligned_range(4, 5, 12, "t").is_err(), "unaligned tail inside the buffer is refused");
        assert!(aligned_range(2, 4, 12, "t").is_err());
        assert!(aligned_range(0, 0, 12, "t").is_err());
        assert!(aligned_range(8, 8, 12, "t").is_err());
        assert!(aligned_range(u64::MAX - 3, 8, u64::MAX, "t").is_err());
    }
}
