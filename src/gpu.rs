//! `Gpu`: the JS view of an open device.

use std::sync::Arc;

use napi::bindgen_prelude::*;
use napi_derive::napi;

use crate::buffer::GpuBuffer;
use wgalloc_core::host::UploadItem;

use crate::error::{invalid, invalid_hint, to_u64, IntoNapi};
use crate::heap::{DeviceBlock, Heap};
use crate::host::Host;
use crate::stream::GpuEvent;
use crate::stream::Stream;

/// Options for `Gpu.request()`. Every field is optional.
#[napi(object)]
#[derive(Default)]
pub struct GpuRequestOptions {
    /// Backends to consider: `vulkan`, `metal`, `dx12`, `primary`. `WGPU_BACKEND` overrides.
    pub backends: Option<Vec<String>>,
    /// `low-power`, `high-performance` or `none`.
    pub power_preference: Option<String>,
    /// Case-insensitive substring of the adapter name. `WGPU_ADAPTER_NAME` overrides.
    pub adapter_name: Option<String>,
    /// Accept only a software adapter (e.g. lavapipe).
    pub force_fallback_adapter: Option<bool>,
    /// Features the device must have, by wgpu name (e.g. `TIMESTAMP_QUERY`).
    pub required_features: Option<Vec<String>>,
    /// Features enabled when the adapter has them.
    pub optional_features: Option<Vec<String>>,
    /// Memory budget in bytes (integer, at most 2^53-1). Derived from the driver when absent.
    pub memory_budget: Option<f64>,
    /// Position in `Gpu.enumerate()`'s list. `WGALLOC_ADAPTER` (an index or an id) overrides.
    pub adapter_index: Option<f64>,
    /// An `id` from `Gpu.enumerate()`. `WGALLOC_ADAPTER` overrides.
    pub adapter_id: Option<String>,
}

/// Options of `Gpu.enumerate()`.
#[napi(object)]
pub struct EnumerateOptions {
    /// Backends to list (as in `request`); default: every backend of the platform.
    pub backends: Option<Vec<String>>,
}

/// One adapter as `Gpu.enumerate()` lists it.
#[napi(object)]
pub struct AdapterDescription {
    /// Position in the list: `Gpu.request({ adapterIndex })` picks it.
    pub index: u32,
    /// `backend:vendor:device:name`: `Gpu.request({ adapterId })` picks it.
    pub id: String,
    /// Adapter name as the driver reports it.
    pub name: String,
    /// PCI vendor id (0 where the backend has none).
    pub vendor_id: u32,
    /// PCI device id (0 where the backend has none).
    pub device_id: u32,
    /// `vulkan`, `metal`, `dx12`, ...
    #[napi(ts_type = "'noop' | 'vulkan' | 'metal' | 'dx12' | 'gl' | 'webgpu'")]
    pub backend: String,
    /// `DiscreteGpu`, `IntegratedGpu`, `Cpu`, ...
    #[napi(ts_type = "'Other' | 'IntegratedGpu' | 'DiscreteGpu' | 'VirtualGpu' | 'Cpu'")]
    pub device_type: String,
    /// Driver name (may be empty).
    pub driver: String,
    /// Driver version details (may be empty).
    pub driver_info: String,
    /// What a device on it would budget, and where that figure comes from.
    pub memory_budget: MemoryBudget,
}

/// The adapter and the limits wgalloc depends on.
#[napi(object)]
pub struct GpuInfo {
    /// Adapter name as the driver reports it (e.g. `llvmpipe (LLVM 15.0.6, 256 bits)`).
    pub adapter_name: String,
    /// `vulkan`, `metal`, `dx12`, ...
    #[napi(ts_type = "'noop' | 'vulkan' | 'metal' | 'dx12' | 'gl' | 'webgpu'")]
    pub backend: String,
    /// `DiscreteGpu`, `IntegratedGpu`, `Cpu`, ...
    #[napi(ts_type = "'Other' | 'IntegratedGpu' | 'DiscreteGpu' | 'VirtualGpu' | 'Cpu'")]
    pub device_type: String,
    /// Driver name (may be empty).
    pub driver: String,
    /// Driver version details (may be empty).
    pub driver_info: String,
    /// PCI vendor id (0 where the backend has none).
    pub vendor_id: u32,
    /// PCI device id (0 where the backend has none).
    pub device_id: u32,
    /// Enabled device features, by wgpu name.
    pub features: Vec<String>,
    /// Largest buffer the device creates, in bytes (planned slabs are split to fit).
    pub max_buffer_size: f64,
    /// Largest storage binding, in bytes: a larger block or tensor cannot be bound whole.
    pub max_storage_buffer_binding_size: f64,
    /// Largest uniform binding, in bytes.
    pub max_uniform_buffer_binding_size: f64,
    /// Alignment of storage binding offsets, in bytes: every heap block offset is a multiple.
    pub min_storage_buffer_offset_alignment: u32,
    /// Alignment of uniform binding offsets, in bytes.
    pub min_uniform_buffer_offset_alignment: u32,
    /// Most workgroups one dispatch may have in each dimension.
    pub max_compute_workgroups_per_dimension: u32,
    /// Nanoseconds per timestamp tick (0 without timestamp queries).
    pub timestamp_period_ns: f64,
}

/// The memory budget and where it came from.
#[napi(object)]
pub struct MemoryBudget {
    /// Bytes the device may use; the heap's watermarks are fractions of it.
    pub bytes: f64,
    /// `user`, `vulkan-device-local-heap` or `default`.
    #[napi(ts_type = "'user' | 'vulkan-device-local-heap' | 'default'")]
    pub source: String,
}

/// An open GPU device (adapter, device, queue, poller thread).
#[napi]
pub struct Gpu {
    pub(crate) inner: Arc<wgalloc_core::Gpu>,
}

#[napi]
impl Gpu {
    /// Every adapter wgpu can open (`backends` as in `request`), in the order `adapterIndex`
    /// counts, with the memory budget a device on it would get.
    #[napi(writable = true, configurable = true)]
    pub async fn enumerate(options: Option<EnumerateOptions>) -> Result<Vec<AdapterDescription>> {
        let backends = options.and_then(|o| o.backends);
        let list = wgalloc_core::Gpu::enumerate(backends.as_deref()).await.napi()?;
        Ok(list
            .into_iter()
            .map(|a| AdapterDescription {
                index: a.index as u32,
                id: a.id,
                name: a.name,
                vendor_id: a.vendor_id,
                device_id: a.device_id,
                backend: a.backend,
                device_type: a.device_type,
                driver: a.driver,
                driver_info: a.driver_info,
                memory_budget: MemoryBudget {
                    bytes: a.memory_budget.bytes as f64,
                    source: a.memory_budget.source.as_str().into(),
                },
            })
            .collect())
    }

    /// Opens an adapter and a device.
    /// Fails with `ADAPTER_NOT_FOUND` when no adapter matches the options, `DEVICE_REQUEST_FAILED`
    /// when the driver refuses the device (e.g. a missing required feature), `INVALID_ARGUMENT`
    /// for unknown backends or features, `ABORTED` when `options.signal` fires first.
    /// @example
    /// ```js
    /// const gpu = await Gpu.request({ powerPreference: 'high-performance', signal: AbortSignal.timeout(5000) })
    /// console.log(gpu.info.adapterName, gpu.memoryBudget.bytes)
    /// gpu.destroy() // or `using gpu = ...`
    /// ```
    // Writable so the facade can wrap it with `{ signal }`.
    #[napi(writable = true, configurable = true)]
    pub async fn request(options: Option<GpuRequestOptions>) -> Result<Gpu> {
        let o = options.unwrap_or_default();
        let memory_budget = o.memory_budget.map(|b| to_u64(b, "memoryBudget")).transpose()?;
        let options = wgalloc_core::GpuOptions {
            backends: o.backends,
            power_preference: o.power_preference,
            adapter_name: o.adapter_name,
            force_fallback_adapter: o.force_fallback_adapter.unwrap_or(false),
            required_features: o.required_features.unwrap_or_default(),
            optional_features: o.optional_features.unwrap_or_default(),
            memory_budget,
            adapter_index: o
                .adapter_index
                .map(|i| {
                    to_u64(i, "adapterIndex").and_then(|i| {
                        usize::try_from(i)
                            .map_err(|_| invalid("adapterIndex", "an index that fits in memory", i.to_string()))
                    })
                })
                .transpose()?,
            adapter_id: o.adapter_id,
        };
        let gpu = wgalloc_core::Gpu::request(options).await.napi()?;
        Ok(Gpu { inner: Arc::new(gpu) })
    }

    /// The adapter, its backend and the limits wgalloc depends on.
    #[napi(catch_unwind, getter)]
    pub fn info(&self) -> GpuInfo {
        let i = self.inner.info();
        GpuInfo {
            adapter_name: i.adapter_name.clone(),
            backend: i.backend.clone(),
            device_type: i.device_type.clone(),
            driver: i.driver.clone(),
            driver_info: i.driver_info.clone(),
            vendor_id: i.vendor_id,
            device_id: i.device_id,
            features: i.features.clone(),
            max_buffer_size: i.max_buffer_size as f64,
            max_storage_buffer_binding_size: i.max_storage_buffer_binding_size as f64,
            max_uniform_buffer_binding_size: i.max_uniform_buffer_binding_size as f64,
            min_storage_buffer_offset_alignment: i.min_storage_buffer_offset_alignment,
            min_uniform_buffer_offset_alignment: i.min_uniform_buffer_offset_alignment,
            max_compute_workgroups_per_dimension: i.max_compute_workgroups_per_dimension,
            timestamp_period_ns: i.timestamp_period_ns as f64,
        }
    }

    /// The memory budget in bytes and where it came from (`memoryBudget` option, driver, or default).
    #[napi(catch_unwind, getter)]
    pub fn memory_budget(&self) -> MemoryBudget {
        let b = self.inner.memory_budget();
        MemoryBudget { bytes: b.bytes as f64, source: b.source.as_str().to_string() }
    }

    /// True once the device was lost or destroyed.
    #[napi(catch_unwind, getter)]
    pub fn lost(&self) -> bool {
        self.inner.is_lost()
    }

    /// Driver errors that no error scope caught (they are counted, never thrown).
    #[napi(catch_unwind, getter)]
    pub fn uncaptured_error_count(&self) -> f64 {
        self.inner.uncaptured_errors().0 as f64
    }

    /// A new ordered lane of GPU work.
    #[napi(catch_unwind)]
    pub fn create_stream(&self) -> Result<Stream> {
        Ok(Stream::new(self.inner.create_stream().napi()?))
    }

    /// A zero-filled device-local buffer of `size` bytes (padded to a multiple of 4), outside the heap.
    /// `INVALID_ARGUMENT` for a size that is not a non-negative integer or exceeds `info.maxBufferSize`,
    /// `OUT_OF_MEMORY` when the driver refuses it.
    #[napi(catch_unwind)]
    pub fn create_buffer(&self, size: f64) -> Result<GpuBuffer> {
        let buf = self.inner.create_buffer(to_u64(size, "size")?).napi()?;
        Ok(GpuBuffer { inner: Arc::new(buf) })
    }

    /// Writes `data` at `offset` (a multiple of 4); ordered before all later submissions.
    /// A length that is not a multiple of 4 is accepted only where the write ends at the buffer's end;
    /// other misaligned or out-of-range writes fail with `INVALID_ARGUMENT`.
    #[napi(catch_unwind)]
    pub fn write_buffer(&self, buffer: &GpuBuffer, offset: f64, data: Uint8Array) -> Result<()> {
        self.inner.write_buffer(&buffer.inner, to_u64(offset, "offset")?, &data).napi()
    }

    /// Native form of `readBuffer(buffer, offset, size, { signal })`. The copy is submitted
    /// before this returns: a `destroy()` right after does not affect the read.
    /// @internal
    #[napi(catch_unwind, ts_return_type = "Promise<Buffer>")]
    pub fn read_buffer<'env>(
        &self,
        env: &'env Env,
        buffer: &GpuBuffer,
        offset: f64,
        size: f64,
    ) -> Result<PromiseRaw<'env, Buffer>> {
        let (offset, size) = (to_u64(offset, "offset")?, to_u64(size, "size")?);
        let readback = self.inner.start_read_buffer(&buffer.inner, offset, size).napi()?;
        env.spawn_future(async move { Ok(readback.finish().await.napi()?.into()) })
    }

    /// The device's caching allocator.
    #[napi(catch_unwind, getter)]
    pub fn heap(&self) -> Result<Heap> {
        Heap::new(self.inner.heap().napi()?)
    }

    /// The device's profiler. `INVALID_ARGUMENT` if `WGALLOC_PROFILE` holds an unknown flag.
    #[napi(catch_unwind, getter)]
    pub fn profiler(&self) -> Result<crate::profiler::Profiler> {
        Ok(crate::profiler::Profiler { inner: self.inner.profiler().napi()? })
    }

    /// The device's host staging cache.
    #[napi(catch_unwind, getter)]
    pub fn host(&self) -> Result<Host> {
        Ok(Host { inner: self.inner.host().napi()? })
    }

    /// Copies `data` into `block` at `offset` (default 0) through the host cache and submits;
    /// the facade's `upload()` awaits the returned event.
    #[napi(catch_unwind)]
    pub fn submit_upload(&self, block: &DeviceBlock, data: Uint8Array, offset: Option<f64>) -> Result<GpuEvent> {
        let host = self.inner.host().napi()?;
        let offset = to_u64(offset.unwrap_or(0.0), "offset")?;
        Ok(GpuEvent::from(host.upload(&block.inner, offset, &data).napi()?))
    }

    /// Uploads `data[i]` into `blocks[i]` at `offsets[i]` through the host cache, in staging
    /// blocks of `pipelineBytes` submitted as they are written; returns the last one's event.
    /// Positional form of the facade's `uploadBatch(items)`.
    #[napi(catch_unwind)]
    pub fn submit_upload_batch(
        &self,
        blocks: Vec<ClassInstance<'_, DeviceBlock>>,
        data: Vec<Uint8Array>,
        offsets: Vec<f64>,
    ) -> Result<GpuEvent> {
        if blocks.len() != data.len() || blocks.len() != offsets.len() {
            return Err(invalid_hint(
                "data, offsets",
                format!("{} of each (one per block)", blocks.len()),
                format!("{} and {}", data.len(), offsets.len()),
                "submitUploadBatch: blocks, data and offsets must have the same length",
            ));
        }
        let host = self.inner.host().napi()?;
        let items = blocks
            .iter()
            .zip(&data)
            .zip(&offsets)
            .map(|((b, d), &o)| Ok(UploadItem { dst: &b.inner, offset: to_u64(o, "offset")?, data: d }))
            .collect::<Result<Vec<_>>>()?;
        Ok(GpuEvent::from(host.upload_many(&items).napi()?))
    }

    /// Reads `length` bytes (default: to the end) at `offset` (default 0) of `block` through the
    /// host cache (positional form of the facade's `download(block, { offset, length })`).
    /// The range is checked and the block held before this returns: a `free()` right after
    /// defers until the download ended.
    /// @internal
    #[napi(catch_unwind, ts_return_type = "Promise<Buffer>")]
    pub fn download_range<'env>(
        &self,
        env: &'env Env,
        block: &DeviceBlock,
        offset: Option<f64>,
        length: Option<f64>,
    ) -> Result<PromiseRaw<'env, Buffer>> {
        let host = self.inner.host().napi()?;
        let offset = to_u64(offset.unwrap_or(0.0), "offset")?;
        let length = match length {
            Some(l) => to_u64(l, "length")?,
            None => block.inner.requested_size().saturating_sub(offset),
        };
        let download = host.start_download(&block.inner, offset, length).napi()?;
        env.spawn_future(async move { Ok(download.finish().await.napi()?.into()) })
    }

    /// A process-wide handle: pass it to a worker thread and call `Gpu.attach(handle)` there
    /// to share this device and its heap. The handle does not keep the device open.
    #[napi(catch_unwind)]
    pub fn share_handle(&self) -> f64 {
        self.inner.share_handle() as f64
    }

    /// The device behind a handle from `shareHandle()` (for worker threads).
    #[napi(catch_unwind, writable = true, configurable = true)]
    pub fn attach(handle: f64) -> Result<Gpu> {
        let gpu = wgalloc_core::Gpu::attach(to_u64(handle, "handle")?).napi()?;
        Ok(Gpu { inner: Arc::new(gpu) })
    }

    /// Destroys the device: every later call fails with `DEVICE_LOST`.
    #[napi(catch_unwind)]
    pub fn destroy(&self) {
        // Mapped staging memory goes with the device: detach every JS view of it first.
        crate::host::detach_device_views(self.inner.identity());
        self.inner.destroy();
    }
}
