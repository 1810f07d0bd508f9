//! `ComputeKernel`: a WGSL kernel dispatched directly on heap blocks (`stream.dispatch`).

use napi::bindgen_prelude::*;
use napi_derive::napi;

use crate::error::{invalid, IntoNapi};
use crate::gpu::Gpu;
use crate::heap::DeviceBlock;
use crate::stream::Stream;

/// Options of `gpu.createKernel()`.
#[napi(object)]
pub struct KernelOptions {
    /// WGSL source.
    pub source: String,
    /// Entry point (default `main`).
    pub entry_point: Option<String>,
    /// Number of `var<storage, read_write>` bindings, at `@binding(0..n)`.
    pub bindings: u32,
    /// Whether a `var<uniform>` follows at `@binding(n)`.
    pub uniform: Option<bool>,
    /// Name in errors and profiles (default: the entry point).
    pub name: Option<String>,
}

/// A compiled compute kernel with a fixed binding signature.
#[napi]
pub struct ComputeKernel {
    pub(crate) inner: wgalloc_core::ComputeKernel,
}

#[napi]
impl ComputeKernel {
    /// Name in errors and profiles.
    #[napi(catch_unwind, getter)]
    pub fn name(&self) -> String {
        self.inner.name().to_string()
    }

    /// Storage bindings the kernel takes (blocks per dispatch).
    #[napi(catch_unwind, getter)]
    pub fn bindings(&self) -> u32 {
        self.inner.bindings()
    }

    /// Whether dispatches pass uniform bytes.
    #[napi(catch_unwind, getter)]
    pub fn uniform(&self) -> bool {
        self.inner.has_uniform()
    }
}

#[napi]
impl Gpu {
    /// Compiles a kernel for `stream.dispatch` (once per device and signature).
    #[napi(catch_unwind)]
    pub fn create_kernel(&self, options: KernelOptions) -> Result<ComputeKernel> {
        let entry = options.entry_point.unwrap_or_else(|| "main".into());
        let name = options.name.unwrap_or_else(|| entry.clone());
        let inner = self
            .inner
            .compute_kernel(&name, &options.source, &entry, options.bindings, options.uniform.unwrap_or(false))
            .napi()?;
        Ok(ComputeKernel { inner })
    }
}

#[napi]
impl Stream {
    /// Records one dispatch of `kernel` over `blocks` (binding i = blocks[i]) with
    /// `workgroups` ([x, y?, z?]) and, if the kernel takes one, `uniform` bytes. Every
    /// block is recorded as used by this stream, so freeing it waits for the dispatch.
    #[napi(catch_unwind)]
    pub fn dispatch(
        &self,
        kernel: &ComputeKernel,
        blocks: Vec<ClassInstance<'_, DeviceBlock>>,
        workgroups: Vec<u32>,
        uniform: Option<Uint8Array>,
    ) -> Result<()> {
        if workgroups.is_empty() || workgroups.len() > 3 {
            return Err(invalid("workgroups", "[x], [x, y] or [x, y, z]", format!("{} sizes", workgroups.len())));
        }
        let wg = [workgroups[0], *workgroups.get(1).unwrap_or(&1), *workgroups.get(2).unwrap_or(&1)];
        let refs: Vec<&wgalloc_core::DeviceBlock> = blocks.iter().map(|b| &*b.inner).collect();
        self.with(|s| s.dispatch(&kernel.inner, &refs, uniform.as_deref(), wg))
    }
}
