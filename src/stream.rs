//! `Stream` and `GpuEvent`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use napi::bindgen_prelude::*;
use napi_derive::napi;

use crate::buffer::GpuBuffer;
use crate::error::{coded, to_u64, IntoNapi};
use crate::heap::DeviceBlock;
use crate::host::HostBlock;

/// The completion of one submission.
#[napi]
pub struct GpuEvent {
    inner: wgalloc_core::Event,
}

impl From<wgalloc_core::Event> for GpuEvent {
    fn from(inner: wgalloc_core::Event) -> Self {
        GpuEvent { inner }
    }
}

#[napi]
impl GpuEvent {
    /// Submission sequence number; events of one device are ordered by it.
    #[napi(catch_unwind, getter)]
    pub fn seq(&self) -> f64 {
        self.inner.seq() as f64
    }

    /// Non-blocking: true once the GPU finished this submission.
    #[napi(catch_unwind)]
    pub fn query(&self) -> Result<bool> {
        self.inner.query().napi()
    }

    /// Native form of `wait({ signal })`.
    /// @internal
    #[napi(catch_unwind, ts_return_type = "Promise<void>")]
    pub fn wait<'env>(&self, env: &'env Env) -> Result<PromiseRaw<'env, ()>> {
        let event = self.inner.clone();
        env.spawn_future(async move { event.wait().await.napi() })
    }

    /// Blocks the JS thread up to `timeoutMs`; returns whether the work completed.
    #[napi(catch_unwind)]
    pub fn wait_sync(&self, timeout_ms: f64) -> Result<bool> {
        let ms = to_u64(timeout_ms, "timeoutMs")?;
        self.inner.wait_blocking(Duration::from_millis(ms)).napi()
    }
}

/// Options of `stream.copy()`. Offsets default to 0; `size` to the rest of the source.
#[napi(object)]
pub struct CopyOptions {
    /// Byte offset in the source (a multiple of 4).
    pub src_offset: Option<f64>,
    /// Byte offset in the destination (a multiple of 4).
    pub dst_offset: Option<f64>,
    /// Bytes to copy.
    pub size: Option<f64>,
}

/// An ordered lane of GPU work: commands are recorded, then `submit()`ted together.
#[napi]
pub struct Stream {
    inner: Arc<Mutex<wgalloc_core::Stream>>,
}

impl Stream {
    pub(crate) fn new(stream: wgalloc_core::Stream) -> Self {
        Stream { inner: Arc::new(Mutex::new(stream)) }
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, wgalloc_core::Stream>> {
        self.inner.lock().map_err(|_| coded("INTERNAL", "stream lock poisoned"))
    }

    /// Runs `f` on the core stream, mapping its error.
    pub(crate) fn with<T>(&self, f: impl FnOnce(&mut wgalloc_core::Stream) -> wgalloc_core::Result<T>) -> Result<T> {
        let mut guard = self.lock()?;
        f(&mut guard).napi()
    }
}

#[napi]
impl Stream {
    /// Records a buffer-to-buffer copy; it runs when the stream is submitted.
    #[napi(catch_unwind)]
    pub fn copy(&self, src: &GpuBuffer, dst: &GpuBuffer, options: Option<CopyOptions>) -> Result<()> {
        let o = options.unwrap_or(CopyOptions { src_offset: None, dst_offset: None, size: None });
        let src_offset = to_u64(o.src_offset.unwrap_or(0.0), "srcOffset")?;
        let dst_offset = to_u64(o.dst_offset.unwrap_or(0.0), "dstOffset")?;
        let size = match o.size {
            Some(s) => to_u64(s, "size")?,
            None => src.inner.size().saturating_sub(src_offset),
        };
        self.lock()?.copy_buffer(&src.inner, src_offset, &dst.inner, dst_offset, size).napi()
    }

    /// Records a copy between heap blocks (offsets within the blocks); both blocks are
    /// recorded as used by this stream, so freeing either waits until the copy ran.
    #[napi(catch_unwind)]
    pub fn copy_blocks(&self, src: &DeviceBlock, dst: &DeviceBlock, options: Option<CopyOptions>) -> Result<()> {
        let o = options.unwrap_or(CopyOptions { src_offset: None, dst_offset: None, size: None });
        let src_offset = to_u64(o.src_offset.unwrap_or(0.0), "srcOffset")?;
        let dst_offset = to_u64(o.dst_offset.unwrap_or(0.0), "dstOffset")?;
        let size = match o.size {
            Some(s) => to_u64(s, "size")?,
            None => src
                .inner
                .requested_size()
                .saturating_sub(src_offset)
                .min(dst.inner.requested_size().saturating_sub(dst_offset)),
        };
        self.with(|s| dst.inner.copy_on(s, &src.inner, src_offset, dst_offset, size, "copy"))
    }

    /// Records a copy from an upload block into a device block (offsets within the blocks;
    /// `size` defaults to the smaller remaining length). Detaches and unmaps the upload
    /// block's `bytes`; both blocks are recorded as used by this stream.
    #[napi(catch_unwind)]
    pub fn copy_to_device(&self, src: &HostBlock, dst: &DeviceBlock, options: Option<CopyOptions>) -> Result<()> {
        let (src_offset, dst_offset, size) =
            copy_range(options, src.inner.requested_size(), dst.inner.requested_size())?;
        self.copy_host_to_device(src, dst, src_offset, dst_offset, size)
    }

    /// Records a copy from a device block into a download block; `await block.map()` after
    /// submitting to read it. Both blocks are recorded as used by this stream.
    #[napi(catch_unwind)]
    pub fn copy_to_host(&self, src: &DeviceBlock, dst: &HostBlock, options: Option<CopyOptions>) -> Result<()> {
        let (src_offset, dst_offset, size) =
            copy_range(options, src.inner.requested_size(), dst.inner.requested_size())?;
        self.copy_device_to_host(src, dst, src_offset, dst_offset, size)
    }

    /// Commands recorded since the last submit.
    #[napi(catch_unwind, getter)]
    pub fn pending_commands(&self) -> Result<u32> {
        Ok(self.lock()?.pending_commands())
    }

    /// Submits recorded work; the event completes when the GPU finished it.
    #[napi(catch_unwind)]
    pub fn submit(&self) -> Result<GpuEvent> {
        Ok(GpuEvent { inner: self.lock()?.submit().napi()? })
    }

    /// Native form of `synchronize({ signal })`.
    /// @internal
    #[napi(catch_unwind, ts_return_type = "Promise<void>")]
    pub fn synchronize<'env>(&self, env: &'env Env) -> Result<PromiseRaw<'env, ()>> {
        let event = self.lock()?.submit().napi()?;
        env.spawn_future(async move { event.wait().await.napi() })
    }
}

/// Offsets default to 0; the size to what is left of both source and destination.
fn copy_range(options: Option<CopyOptions>, src_len: u64, dst_len: u64) -> Result<(u64, u64, u64)> {
    let o = options.unwrap_or(CopyOptions { src_offset: None, dst_offset: None, size: None });
    let src_offset = to_u64(o.src_offset.unwrap_or(0.0), "srcOffset")?;
    let dst_offset = to_u64(o.dst_offset.unwrap_or(0.0), "dstOffset")?;
    let size = match o.size {
        Some(s) => to_u64(s, "size")?,
        None => src_len.saturating_sub(src_offset).min(dst_len.saturating_sub(dst_offset)),
    };
    Ok((src_offset, dst_offset, size))
}
