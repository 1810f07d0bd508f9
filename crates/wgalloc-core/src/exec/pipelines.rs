//! Compute pipelines shared by every executor and eager run of a device, keyed by
//! kernel source, entry point and binding signature, so a kernel compiles once.
//! Layouts are explicit and follow the binding convention: the op's inputs, then
//! its outputs, then its workspace, all `var<storage, read_write>` (every tensor
//! lives in one slab buffer, and wgpu forbids read-only and writable use of one
//! buffer in the same dispatch), then an optional `var<uniform>`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::lru::Lru;
use crate::context::Gpu;
use crate::error::Result;
use crate::scope::guarded;
use crate::signal::lock;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    source: String,
    entry_point: String,
    storage_bindings: u32,
    uniform: bool,
}

pub struct Pipeline {
    /// The kernel's id in its graph (the pipeline's name in profiles).
    pub label: String,
    pub pipeline: wgpu::ComputePipeline,
    pub layout: wgpu::BindGroupLayout,
    /// Bytes the shader's uniform (at the binding after the storage ones) declares, if
    /// it has one: shorter params would leave the kernel reading zeros.
    pub uniform_size: Option<u64>,
    /// The layout of `@group(1)`, when the shader declares the dims uniform there, and the
    /// bytes of its type (see Note [The dims uniform]).
    pub dims_layout: Option<wgpu::BindGroupLayout>,
    pub dims_size: Option<u64>,
    /// Per storage binding, the variable's name and the fewest bytes its type needs.
    pub storage_min_sizes: Vec<(String, u64)>,
}

/// Pipelines a device keeps for reuse: a server that builds kernels with constants in their
/// source would otherwise grow the cache (about 65 KB a pipeline) for as long as it runs.
/// Executors hold their own pipelines, so an evicted one stays alive while in use.
const MAX_CACHED_PIPELINES: usize = 512;

pub struct PipelineCache {
    map: Mutex<Lru<Key, Arc<Pipeline>>>,
    created: AtomicU64,
}

impl Default for PipelineCache {
    fn default() -> Self {
        PipelineCache { map: Mutex::new(Lru::new(MAX_CACHED_PIPELINES)), created: AtomicU64::new(0) }
    }
}

impl PipelineCache {
    /// Pipelines compiled so far on this device.
    pub fn created(&self) -> u64 {
        self.created.load(Ordering::Relaxed)
    }
}

impl Gpu {
    /// The device's compiled kernels, shared by executors and eager runs.
    fn pipeline_cache(&self) -> &Arc<PipelineCache> {
        self.shared.services.get_or_attach(|| Arc::new(PipelineCache::default()))
    }

    /// Pipelines compiled so far on this device.
    pub(crate) fn pipelines_created(&self) -> u64 {
        self.pipeline_cache().created()
    }

    /// The pipeline for `source`/`entry_point` with `storage_bindings` read-write storage
    /// buffers and an optional uniform; compiled on first use. WGSL errors are passed through.
    pub fn pipeline(
        &self,
        label: &str,
        source: &str,
        entry_point: &str,
        storage_bindings: u32,
        uniform: bool,
    ) -> Result<Arc<Pipeline>> {
        self.check_alive()?;
        let key = Key { source: source.to_string(), entry_point: entry_point.to_string(), storage_bindings, uniform };
        let cache = self.pipeline_cache();
        if let Some(p) = lock(&cache.map).get(&key).cloned() {
            return Ok(p);
        }
        let device = self.device();
        let mut entries: Vec<wgpu::BindGroupLayoutEntry> = (0..storage_bindings)
            .map(|binding| wgpu::BindGroupLayoutEntry {
                binding,
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: wgpu::BindingType::Buffer {
                    ty: wgpu::BufferBindingType::Storage { read_only: false },
                    has_dynamic_offset: false,
                    min_binding_size: None,
                },
                count: None,
            })
            .collect();
        if uniform {
            entries.push(uniform_entry(storage_bindings));
        }
        let prepared = super::shader::prepare(label, source, entry_point, storage_bindings, uniform)?;
        let (uniform_size, dims_size) = (prepared.uniform_size, prepared.dims_size);
        let storage_min_sizes = prepared.storage_min_sizes;
        let what = format!("compiling kernel '{label}'");
        let pipeline = guarded(device, &what, || {
            let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(label),
                source: wgpu::ShaderSource::Naga(std::borrow::Cow::Owned(prepared.module)),
            });
            let layout = device
                .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor { label: Some(label), entries: &entries });
            let dims_layout = dims_size.map(|_| {
                device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                    label: Some("wgalloc dims"),
                    entries: &[uniform_entry(0)],
                })
            });
            let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                label: Some(label),
                bind_group_layouts: &[Some(&layout), dims_layout.as_ref()],
                immediate_size: 0,
            });
            let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(label),
                layout: Some(&pipeline_layout),
                module: &module,
                entry_point: Some(entry_point),
                compilation_options: Default::default(),
                cache: None,
            });
            Pipeline {
                label: label.to_string(),
                pipeline,
                layout,
                uniform_size: None,
                dims_layout,
                dims_size: None,
                storage_min_sizes: Vec::new(),
            }
        })?;
        let pipeline = Pipeline { uniform_size, dims_size, storage_min_sizes, ..pipeline };
        cache.created.fetch_add(1, Ordering::Relaxed);
        let p = Arc::new(pipeline);
        lock(&cache.map).insert(key, p.clone());
        Ok(p)
    }
}

/// A compute stage's uniform buffer at `binding`.
fn uniform_entry(binding: u32) -> wgpu::BindGroupLayoutEntry {
    wgpu::BindGroupLayoutEntry {
        binding,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer {
            ty: wgpu::BufferBindingType::Uniform,
            has_dynamic_offset: false,
            min_binding_size: None,
        },
        count: None,
    }
}
