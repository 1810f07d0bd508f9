//! Compute pipelines shared by every executor and eager run of a device, keyed by
//! kernel source, entry point and binding signature, so a kernel compiles once.
//! Layouts are explicit and follow the binding convention: the op's inputs, then
//! its outputs, then its workspace, all `var<storage, read_write>` (every tensor
//! lives in one slab buffer, and wgpu forbids read-only and writable use of one
//! buffer in the same dispatch), then an optional `var<uniform>`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

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
}

/// Pipelines a device keeps for reuse: a server that builds kernels with constants in their
/// source would otherwise grow the cache (about 65 KB a pipeline) for as long as it runs.
/// Executors hold their own pipelines, so an evicted one stays alive while in use.
const MAX_CACHED_PIPELINES: usize = 512;

#[derive(Default)]
pub struct PipelineCache {
    map: Mutex<Lru<Key, Arc<Pipeline>>>,
    created: AtomicU64,
}

/// A map that drops its least recently used entry past `capacity`.
struct Lru<K, V> {
    map: HashMap<K, (V, u64)>,
    tick: u64,
    capacity: usize,
}

impl<K, V> Default for Lru<K, V> {
    fn default() -> Self {
        Lru { map: HashMap::new(), tick: 0, capacity: MAX_CACHED_PIPELINES }
    }
}

impl<K: std::hash::Hash + Eq + Clone, V: Clone> Lru<K, V> {
    fn get(&mut self, key: &K) -> Option<V> {
        self.tick += 1;
        let tick = self.tick;
        self.map.get_mut(key).map(|(v, used)| {
            *used = tick;
            v.clone()
        })
    }

    fn insert(&mut self, key: K, value: V) {
        self.tick += 1;
        self.map.insert(key, (value, self.tick));
        if self.map.len() > self.capacity {
            // A scan, only when a new pipeline was compiled (far costlier than the scan).
            if let Some(oldest) = self.map.iter().min_by_key(|(_, (_, used))| *used).map(|(k, _)| k.clone()) {
                self.map.remove(&oldest);
            }
        }
    }
}

impl PipelineCache {
    /// Pipelines compiled so far on this device.
    pub fn created(&self) -> u64 {
        self.created.load(Ordering::Relaxed)
    }
}

impl Gpu {
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
        let cache = &self.shared.pipelines;
        if let Some(p) = lock(&cache.map).get(&key) {
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
            entries.push(wgpu::BindGroupLayoutEntry {
                binding: storage_bindings,
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: wgpu::BindingType::Buffer {
                    ty: wgpu::BufferBindingType::Uniform,
                    has_dynamic_offset: false,
                    min_binding_size: None,
                },
                count: None,
            });
        }
        let prepared = super::shader::prepare(label, source, entry_point, storage_bindings, uniform)?;
        let uniform_size = prepared.uniform_size;
        let what = format!("compiling kernel '{label}'");
        let pipeline = guarded(device, &what, || {
            let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(label),
                source: wgpu::ShaderSource::Naga(std::borrow::Cow::Owned(prepared.module)),
            });
            let layout = device
                .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor { label: Some(label), entries: &entries });
            let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                label: Some(label),
                bind_group_layouts: &[Some(&layout)],
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
            Pipeline { label: label.to_string(), pipeline, layout, uniform_size: None }
        })?;
        let pipeline = Pipeline { uniform_size, ..pipeline };
        cache.created.fetch_add(1, Ordering::Relaxed);
        let p = Arc::new(pipeline);
        lock(&cache.map).insert(key, p.clone());
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    use super::Lru;

    #[test]
    fn the_least_recently_used_entry_goes_past_the_capacity() {
        let mut lru: Lru<u32, u32> = Lru { capacity: 2, ..Lru::default() };
        lru.insert(1, 10);
        lru.insert(2, 20);
        assert_eq!(lru.get(&1), Some(10), "1 is now the most recent");
        lru.insert(3, 30);
        assert_eq!((lru.get(&2), lru.get(&1), lru.get(&3), lru.map.len()), (None, Some(10), Some(30), 2));
    }
}
