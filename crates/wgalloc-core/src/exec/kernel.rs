//! Kernels dispatched directly on heap blocks, outside any graph: what a training
//! loop needs when its weights, activations and gradients are blocks it owns.
//! Same binding convention as graph ops: `bindings` read-write storage buffers at
//! `@binding(0..n)` in block order, then an optional `var<uniform>` at `@binding(n)`.

use std::sync::Arc;

use super::bind::{bind_group, binding_size, check_uniform_len, check_workgroups, encode, uniform_block, Range, Step};
use super::pipelines::Pipeline;
use crate::context::Gpu;
use crate::error::{Error, Result};
use crate::heap::DeviceBlock;
use crate::stream::Stream;

/// A compiled compute kernel with a fixed binding signature.
#[derive(Clone)]
pub struct ComputeKernel {
    gpu: Gpu,
    name: String,
    pipeline: Arc<Pipeline>,
    bindings: u32,
    uniform: bool,
}

impl Gpu {
    /// Compiles `source` (entry point `entry_point`) for `bindings` storage buffers and,
    /// if `uniform`, a uniform after them. Compiles once per device and signature.
    pub fn compute_kernel(
        &self,
        name: &str,
        source: &str,
        entry_point: &str,
        bindings: u32,
        uniform: bool,
    ) -> Result<ComputeKernel> {
        let max = self.limits().max_storage_buffers_per_shader_stage;
        if bindings == 0 || bindings > max {
            return Err(Error::invalid(
                "bindings",
                format!("1 to {max} (the device's maxStorageBuffersPerShaderStage)"),
                bindings.to_string(),
            )
            .with_hint(format!("kernel '{name}': split it, or bind one buffer for several arrays")));
        }
        let pipeline = self.pipeline(name, source, entry_point, bindings, uniform)?;
        if pipeline.dims_size.is_some() {
            return Err(Error::Shader(format!(
                "kernel '{name}' declares @group(1) @binding(0), the dims uniform of graphs compiled with \
                 compileShapes; a single kernel binds @group(0) only"
            )));
        }
        Ok(ComputeKernel { gpu: self.clone(), name: name.to_string(), pipeline, bindings, uniform })
    }
}

impl ComputeKernel {
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn bindings(&self) -> u32 {
        self.bindings
    }

    pub fn has_uniform(&self) -> bool {
        self.uniform
    }
}

impl Stream {
    /// Records one dispatch of `kernel` over `blocks` (binding `i` = `blocks[i]`, the
    /// block's requested size rounded up to 4 bytes) with `uniform` bytes if the kernel
    /// takes one. Every block is recorded as used by this stream, so freeing it waits
    /// until the dispatch ran. Everything is checked before anything is recorded.
    pub fn dispatch(
        &mut self,
        kernel: &ComputeKernel,
        blocks: &[&DeviceBlock],
        uniform: Option<&[u8]>,
        workgroups: [u32; 3],
    ) -> Result<()> {
        let gpu = self.gpu().clone();
        if !Arc::ptr_eq(&gpu.shared, &kernel.gpu.shared) {
            return Err(Error::invalid(
                "kernel",
                "a kernel compiled on this stream's device",
                crate::error::quoted(&kernel.name),
            )
            .in_call("dispatch"));
        }
        if blocks.len() != kernel.bindings as usize {
            return Err(Error::invalid(
                "blocks",
                format!("{} blocks (kernel '{}' takes them)", kernel.bindings, kernel.name),
                format!("{} blocks", blocks.len()),
            )
            .in_call("dispatch"));
        }
        match (kernel.uniform, uniform) {
            (true, None) => {
                return Err(Error::invalid(
                    "uniform",
                    format!("bytes (kernel '{}' takes a uniform)", kernel.name),
                    "undefined",
                )
                .in_call("dispatch"))
            }
            (false, Some(_)) => {
                return Err(Error::invalid(
                    "uniform",
                    format!("none (kernel '{}' takes no uniform)", kernel.name),
                    "bytes",
                )
                .in_call("dispatch"))
            }
            (true, Some([])) => {
                return Err(Error::invalid("uniform", "at least one byte", "0 bytes").in_call("dispatch"))
            }
            (true, Some(u)) => check_uniform_len(&kernel.pipeline, u.len(), &format!("dispatch of '{}'", kernel.name))?,
            _ => {}
        }
        check_workgroups(&gpu, &workgroups, &format!("dispatch of '{}'", kernel.name))?;
        let limits = gpu.limits();
        // The blocks stay where they are until they are recorded on the stream (below).
        let mut bound = Vec::with_capacity(blocks.len());
        for (i, b) in blocks.iter().enumerate() {
            if !Arc::ptr_eq(&gpu.shared, &b.heap().gpu().shared) {
                return Err(Error::invalid(
                    format!("blocks[{i}]"),
                    "a block of this stream's device",
                    "a block of another device",
                )
                .in_call("dispatch"));
            }
            let size = binding_size(b.requested_size())?;
            if size > limits.max_storage_buffer_binding_size {
                return Err(Error::invalid(
                    format!("blocks[{i}]"),
                    format!(
                        "at most {} bytes (the device's maxStorageBufferBindingSize)",
                        limits.max_storage_buffer_binding_size
                    ),
                    format!("{size} bytes"),
                )
                .in_call("dispatch"));
            }
            bound.push((b.binding()?, size));
        }
        let ranges: Vec<Range> = bound.iter().map(|(at, size)| Range::at(at, 0, *size)).collect();
        // The uniform's scalar block is freed with this stream recorded, so it is reused
        // only after the dispatch ran.
        let uniform = uniform.map(|u| uniform_block(&gpu, u)).transpose()?;
        let step = Step {
            bind_group: bind_group(&gpu, &kernel.name, &kernel.pipeline, &ranges, uniform.as_ref())?,
            pipeline: kernel.pipeline.clone(),
            dispatch: workgroups,
            name: kernel.name.clone(),
            dims: None,
        };
        encode(self, &[&step])?;
        for b in blocks.iter().copied().chain(uniform.as_ref()) {
            b.record_stream(self)?;
        }
        drop(bound);
        if let Some(u) = uniform {
            u.free()?;
        }
        Ok(())
    }
}
