//! What eager and planned runs share: an op's bindings, its pipeline, its
//! uniform, and the dispatch of a step.

use std::num::NonZeroU64;
use std::sync::Arc;

use super::graph::{ExecGraph, Op};
use super::pipelines::Pipeline;
use crate::context::Gpu;
use crate::error::{align_up, Error, Result};
use crate::heap::{BlockBinding, DeviceBlock};
use crate::profile::{What, Writes};
use crate::scope::guarded;
use crate::stream::Stream;

/// A buffer range bound to one binding.
#[derive(Clone, Copy)]
pub(crate) struct Range<'a> {
    pub buffer: &'a wgpu::Buffer,
    pub offset: u64,
    pub size: u64,
}

impl<'a> Range<'a> {
    /// `size` bytes at `offset` into a block's pinned place.
    pub fn at(place: &'a BlockBinding, offset: u64, size: u64) -> Range<'a> {
        Range { buffer: &place.buffer, offset: place.offset + offset, size }
    }
}

/// One op ready to dispatch.
pub(crate) struct Step {
    pub pipeline: Arc<Pipeline>,
    pub bind_group: wgpu::BindGroup,
    pub dispatch: [u32; 3],
    /// The op's name (the profiler's key, with the pipeline's label).
    pub name: String,
    /// `@group(1)`: the dims uniform, for a kernel that declares it.
    pub dims: Option<wgpu::BindGroup>,
}

/// Storage binding size of a tensor: whole 4-byte words (the padding is private to the record).
pub(crate) fn binding_size(size: u64) -> Result<u64> {
    align_up(size, 4)
}

/// The op's pipeline: storage bindings are inputs, outputs, then the workspace; the uniform follows.
pub(crate) fn op_pipeline(gpu: &Gpu, graph: &ExecGraph, op: &Op) -> Result<Option<Arc<Pipeline>>> {
    let Some(kid) = &op.kernel else { return Ok(None) };
    let kernel = &graph.kernels[kid];
    let storage = op.inputs.len() + op.outputs.len() + usize::from(op.workspace > 0);
    let limits = gpu.limits();
    check_workgroups(gpu, &op.dispatch, &format!("op '{}'", op.name))?;
    if storage as u32 > limits.max_storage_buffers_per_shader_stage {
        return Err(Error::invalid(
            format!("op '{}'.inputs and outputs", op.name),
            format!("at most {} storage buffers (the device's limit)", limits.max_storage_buffers_per_shader_stage),
            storage.to_string(),
        )
        .with_hint(format!("op '{}' binds more storage buffers than the device allows", op.name)));
    }
    let pipeline = gpu
        .pipeline(kid, &kernel.source, &kernel.entry_point, storage as u32, op.params.is_some())
        .map_err(|e| match e {
            Error::Shader(m) => Error::Shader(format!("op '{}': {m}", op.name)),
            e => e,
        })?;
    check_binding_sizes(graph, op, &pipeline)?;
    Ok(Some(pipeline))
}

/// Refuses an op whose kernel declares a storage binding larger than what the op binds there:
/// wgpu would refuse every dispatch of it, so the graph is refused once, at compile.
fn check_binding_sizes(graph: &ExecGraph, op: &Op, pipeline: &Pipeline) -> Result<()> {
    let tensors = op.inputs.iter().chain(&op.outputs).map(|id| (id.as_str(), graph.tensors[graph.index[id]].size));
    let workspace = (op.workspace > 0).then_some(("the workspace", op.workspace));
    for (b, ((what, size), (name, need))) in tensors.chain(workspace).zip(&pipeline.storage_min_sizes).enumerate() {
        if binding_size(size)? < *need {
            return Err(Error::Shader(format!(
                "op '{}': binding {b} ('{name}') of kernel '{}' needs at least {need} bytes, but '{what}' has {size}; \
                 size the tensor for the kernel, or declare a runtime-sized array (array<T>)",
                op.name, pipeline.label
            )));
        }
    }
    Ok(())
}

/// Refuses `len` bytes of uniform data for a pipeline whose uniform declares more.
pub(crate) fn check_uniform_len(pipeline: &Pipeline, len: usize, what: &str) -> Result<()> {
    match pipeline.uniform_size {
        Some(need) if (len as u64) < need => Err(Error::invalid(
            format!("{what}.params"),
            format!("at least {need} bytes (the kernel's uniform declares them)"),
            format!("{len} bytes of params"),
        )
        .with_hint("the rest would read as zeros")),
        _ => Ok(()),
    }
}

/// The op's uniform, holding its params (from the heap's scalar pool).
pub(crate) fn op_uniform(gpu: &Gpu, op: &Op, pipeline: &Pipeline) -> Result<Option<DeviceBlock>> {
    match &op.params {
        None => Ok(None),
        Some(p) if p.is_empty() => Err(Error::invalid(format!("op '{}'.params", op.name), "at least one byte", "[]")
            .with_hint("params must not be empty")),
        Some(p) => {
            check_uniform_len(pipeline, p.len(), &format!("op '{}'", op.name))?;
            uniform_block(gpu, p).map(Some)
        }
    }
}

/// Note [The dims uniform]: a kernel of a shape executor may need the run's dimensions, to
/// mask the padding a bucket adds (a row sum over `s` must stop at the asked `s`, not the
/// bucket's). A kernel that declares a uniform at `@group(1) @binding(0)` gets them there: the
/// graph's `dims` in declaration order, one `u32` each, at the dimensions the run ASKED for
/// (not the bucket's; an exact run's are both). Its type is a struct of `u32`s (or a prefix of
/// the dims), at most 4 bytes per dimension; a kernel that does not declare it is bound as
/// before. Each executor holds one small uniform block, written before each run that changes
/// it: runs of an executor take turns, and a run submits its work before the next one starts,
/// so the write (queued, it runs before the next submission) lands after the earlier run's
/// work and before this one's. Plain graphs, eager runs and single kernels have no dims: a
/// kernel that declares the uniform there is refused.
pub(crate) fn check_dims_uniform(pipeline: &Pipeline, dims: &[(String, u64)], what: &str) -> Result<()> {
    let Some(need) = pipeline.dims_size else { return Ok(()) };
    if dims.is_empty() {
        return Err(Error::invalid(
            format!("{what}.kernel"),
            "no dims uniform (@group(1) @binding(0)) outside a graph with \"dims\"",
            "a kernel that declares it",
        )
        .with_hint("only a graph with \"dims\" compiled with compileShapes binds the dims uniform"));
    }
    let have = 4 * dims.len() as u64;
    if need > have {
        let names: Vec<&str> = dims.iter().map(|(d, _)| d.as_str()).collect();
        return Err(Error::invalid(
            format!("{what}.kernel"),
            format!("a dims uniform of at most {have} bytes ({}: one u32 each)", names.join(", ")),
            format!("{need} bytes"),
        )
        .with_hint(format!("the kernel's dims uniform declares more than the graph's {} dimensions", dims.len())));
    }
    Ok(())
}

/// The dims uniform's values: one `u32` per dimension, zero-padded to 16 bytes.
pub(crate) fn dims_bytes(values: &[u64]) -> Result<Vec<u8>> {
    let mut bytes = Vec::with_capacity(16);
    for &v in values {
        let v = u32::try_from(v).map_err(|_| {
            Error::invalid("dims", "values that fit the dims uniform (u32)", v.to_string())
                .with_hint("a dimension value does not fit the dims uniform")
        })?;
        bytes.extend(v.to_le_bytes());
    }
    bytes.resize(align_up(bytes.len().max(1) as u64, 16)? as usize, 0);
    Ok(bytes)
}

/// `@group(1)` of op (or kernel) `name` when its pipeline declares the dims uniform: `block`.
pub(crate) fn dims_group(
    gpu: &Gpu,
    name: &str,
    pipeline: &Pipeline,
    block: Option<&DeviceBlock>,
) -> Result<Option<wgpu::BindGroup>> {
    let (Some(layout), Some(block)) = (&pipeline.dims_layout, block) else { return Ok(None) };
    let at = block.binding()?;
    let device = gpu.device();
    guarded(device, &format!("binding the dims of op '{name}'"), || {
        device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("wgalloc dims"),
            layout,
            entries: &[wgpu::BindGroupEntry {
                binding: 0,
                resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer: &at.buffer,
                    offset: at.offset,
                    size: NonZeroU64::new(at.size),
                }),
            }],
        })
    })
    .map(Some)
}

/// Refuses a dispatch size above the device's per-dimension limit.
pub(crate) fn check_workgroups(gpu: &Gpu, dispatch: &[u32], what: &str) -> Result<()> {
    let max = gpu.limits().max_compute_workgroups_per_dimension;
    match dispatch.iter().find(|&&d| d > max) {
        Some(d) => Err(Error::invalid(
            format!("{what}.dispatch"),
            format!("at most {max} (the device's maxComputeWorkgroupsPerDimension)"),
            d.to_string(),
        )
        .with_hint("the dispatch size exceeds the device's limit")),
        None => Ok(()),
    }
}

/// A block of the heap's scalar pool holding `bytes`, zero-padded to a 16-byte multiple
/// (uniform structs are).
pub(crate) fn uniform_block(gpu: &Gpu, bytes: &[u8]) -> Result<DeviceBlock> {
    let max = wgalloc_heap::pool::MAX_SCALAR;
    if bytes.len() as u64 > max {
        // Uniforms come from the scalar pool, whose blocks hold at most this.
        return Err(Error::invalid(
            "params",
            format!("at most {max} bytes (a uniform)"),
            format!("{} bytes", bytes.len()),
        )
        .with_hint("pass larger data as a storage tensor"));
    }
    let mut padded = bytes.to_vec();
    padded.resize(align_up(bytes.len() as u64, 16)? as usize, 0);
    gpu.heap()?.alloc_scalar(&padded)
}

/// Binds `storage` then `uniform` for op (or kernel) `name`.
pub(crate) fn bind_group(
    gpu: &Gpu,
    name: &str,
    pipeline: &Pipeline,
    storage: &[Range<'_>],
    uniform: Option<&DeviceBlock>,
) -> Result<wgpu::BindGroup> {
    let uniform = uniform.map(|u| u.binding()).transpose()?;
    let mut entries: Vec<wgpu::BindGroupEntry> = storage
        .iter()
        .enumerate()
        .map(|(i, r)| wgpu::BindGroupEntry {
            binding: i as u32,
            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer: r.buffer,
                offset: r.offset,
                size: NonZeroU64::new(r.size),
            }),
        })
        .collect();
    // A uniform block never moves (compaction keeps to the device pools).
    if let Some(at) = &uniform {
        entries.push(wgpu::BindGroupEntry {
            binding: storage.len() as u32,
            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer: &at.buffer,
                offset: at.offset,
                size: NonZeroU64::new(at.size),
            }),
        });
    }
    let device = gpu.device();
    guarded(device, &format!("binding the tensors of op '{name}'"), || {
        device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(name),
            layout: &pipeline.layout,
            entries: &entries,
        })
    })
}

/// Records `steps`, normally in one compute pass (wgpu orders the dispatches and
/// their writes). While profiling, each dispatch is timed: with timestamp writes
/// inside the pass where the device has them (or none, in stats-only mode), else
/// with one pass per op and pass-level writes, which is all `TIMESTAMP_QUERY`
/// guarantees. Every op of a run binds the same slab, so wgpu already places a
/// barrier between consecutive dispatches; splitting the pass adds the pass
/// begin/end, which on some drivers is not free.
pub(crate) fn encode(stream: &mut Stream, steps: &[&Step]) -> Result<()> {
    let dispatch = |pass: &mut wgpu::ComputePass<'_>, s: &Step| {
        pass.set_pipeline(&s.pipeline.pipeline);
        pass.set_bind_group(0, &s.bind_group, &[]);
        if let Some(dims) = &s.dims {
            pass.set_bind_group(1, dims, &[]);
        }
        let [x, y, z] = s.dispatch;
        pass.dispatch_workgroups(x, y, z);
    };
    let what = |s: &Step| What::Op { name: s.name.clone(), pipeline: s.pipeline.label.clone() };
    fn run_pass(encoder: &mut wgpu::CommandEncoder) -> wgpu::ComputePass<'_> {
        encoder.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("wgalloc run"), timestamp_writes: None })
    }
    match stream.parts()? {
        (encoder, None) => {
            let mut pass = run_pass(encoder);
            steps.iter().for_each(|s| dispatch(&mut pass, s));
        }
        (encoder, Some((profiler, batch))) if profiler.times_inside_passes() => {
            let mut pass = run_pass(encoder);
            // One timestamp before the first dispatch and one after each: an op's end is
            // the next op's begin. Without room for the chain, a pair per op.
            let chain = profiler.reserve_chain(batch, steps.len());
            if let Some(first) = chain.as_ref().and_then(|c| c.first()) {
                pass.write_timestamp(batch.query_set(*first), first.begin());
            }
            for (i, s) in steps.iter().enumerate() {
                let start = std::time::Instant::now();
                let pair = match &chain {
                    Some(c) => Some(c[i]),
                    None => profiler.reserve(batch, Writes::InsidePass),
                };
                if let (Some(p), None) = (pair, &chain) {
                    pass.write_timestamp(batch.query_set(p), p.begin());
                }
                dispatch(&mut pass, s);
                if let Some(p) = pair {
                    pass.write_timestamp(batch.query_set(p), p.end());
                }
                batch.record(what(s), pair, start);
            }
        }
        (encoder, Some((profiler, batch))) => {
            for s in steps {
                let start = std::time::Instant::now();
                let pair = profiler.reserve(batch, Writes::Pass);
                {
                    let timestamp_writes = pair.map(|p| wgpu::ComputePassTimestampWrites {
                        query_set: batch.query_set(p),
                        beginning_of_pass_write_index: Some(p.begin()),
                        end_of_pass_write_index: Some(p.end()),
                    });
                    let mut pass = encoder
                        .begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some(&s.name), timestamp_writes });
                    dispatch(&mut pass, s);
                }
                batch.record(what(s), pair, start);
            }
        }
    }
    Ok(())
}
