//! `GpuBuffer`: a plain device-local buffer, for data movement without the heap.

use std::sync::Arc;

use napi_derive::napi;

/// A plain device-local buffer outside the heap (`gpu.createBuffer()`), for data movement.
#[napi]
pub struct GpuBuffer {
    pub(crate) inner: Arc<wgalloc_core::GpuBuffer>,
}

#[napi]
impl GpuBuffer {
    /// Bytes requested at creation.
    #[napi(catch_unwind, getter)]
    pub fn size(&self) -> f64 {
        self.inner.size() as f64
    }

    /// True once `destroy()` ran.
    #[napi(catch_unwind, getter)]
    pub fn destroyed(&self) -> bool {
        self.inner.is_destroyed()
    }

    /// Releases the GPU memory (work already submitted still completes). Idempotent.
    #[napi(catch_unwind)]
    pub fn destroy(&self) {
        self.inner.destroy();
    }
}
