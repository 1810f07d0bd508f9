//! Choosing among GPUs: every adapter wgpu can open, listed with a stable index and id,
//! and the rules that pick one for `Gpu::request`.

use crate::context::{backend_budget, MemoryBudget};
use crate::error::{Error, Result};

/// One adapter as `Gpu::enumerate` lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct AdapterSummary {
    /// Position in the list: `adapterIndex` picks it (stable while the machine's drivers are).
    pub index: usize,
    /// `backend:vendor:device:name`: `adapterId` picks it, across reboots and driver reorders.
    pub id: String,
    pub name: String,
    pub vendor_id: u32,
    pub device_id: u32,
    pub backend: String,
    pub device_type: String,
    pub driver: String,
    pub driver_info: String,
    /// What the heap would budget on it (read from the driver where the backend says).
    pub memory_budget: MemoryBudget,
}

/// Every `backend` an adapter may report, as wgpu names them.
pub fn backend_names() -> Vec<&'static str> {
    wgpu::Backend::ALL.iter().map(|b| b.to_str()).collect()
}

/// Every `deviceType` an adapter may report.
pub const DEVICE_TYPES: [wgpu::DeviceType; 5] = [
    wgpu::DeviceType::Other,
    wgpu::DeviceType::IntegratedGpu,
    wgpu::DeviceType::DiscreteGpu,
    wgpu::DeviceType::VirtualGpu,
    wgpu::DeviceType::Cpu,
];

/// The name of a device type (wgpu's variant name); the match keeps [`DEVICE_TYPES`] whole.
pub fn device_type_name(t: wgpu::DeviceType) -> &'static str {
    match t {
        wgpu::DeviceType::Other => "Other",
        wgpu::DeviceType::IntegratedGpu => "IntegratedGpu",
        wgpu::DeviceType::DiscreteGpu => "DiscreteGpu",
        wgpu::DeviceType::VirtualGpu => "VirtualGpu",
        wgpu::DeviceType::Cpu => "Cpu",
    }
}

/// How `Gpu::request` picks an adapter, strongest first.
#[derive(Debug, Clone, Default)]
pub(crate) struct Choice {
    /// `WGALLOC_ADAPTER` (an index or an id), else `adapterIndex` / `adapterId`.
    pub index: Option<usize>,
    pub id: Option<String>,
    /// Case-insensitive substring of the name (`WGPU_ADAPTER_NAME`, else `adapterName`).
    pub name: Option<String>,
    pub power_preference: wgpu::PowerPreference,
    pub force_fallback: bool,
}

impl Choice {
    /// Applies `WGALLOC_ADAPTER`: a number is an index, anything else an id.
    pub fn with_env(mut self) -> Self {
        if let Some(v) = std::env::var("WGALLOC_ADAPTER").ok().map(|v| v.trim().to_string()).filter(|v| !v.is_empty()) {
            match v.parse::<usize>() {
                Ok(i) => (self.index, self.id) = (Some(i), None),
                Err(_) => (self.index, self.id) = (None, Some(v)),
            }
        }
        if let Some(name) = std::env::var("WGPU_ADAPTER_NAME").ok().filter(|s| !s.is_empty()) {
            self.name = Some(name);
        }
        self
    }
}

fn summary(index: usize, adapter: &wgpu::Adapter) -> AdapterSummary {
    let a = adapter.get_info();
    let backend = a.backend.to_str().to_string();
    AdapterSummary {
        index,
        id: format!("{backend}:{:04x}:{:04x}:{}", a.vendor, a.device, a.name),
        name: a.name,
        vendor_id: a.vendor,
        device_id: a.device,
        backend,
        device_type: device_type_name(a.device_type).to_string(),
        driver: a.driver,
        driver_info: a.driver_info,
        memory_budget: backend_budget(adapter),
    }
}

/// Every adapter of `backends`, in wgpu's order (the order `adapterIndex` counts in).
pub(crate) async fn list(instance: &wgpu::Instance, backends: wgpu::Backends) -> Vec<wgpu::Adapter> {
    instance.enumerate_adapters(backends).await
}

pub(crate) async fn summaries(instance: &wgpu::Instance, backends: wgpu::Backends) -> Vec<AdapterSummary> {
    list(instance, backends).await.iter().enumerate().map(|(i, a)| summary(i, a)).collect()
}

fn listing(adapters: &[wgpu::Adapter]) -> String {
    let items: Vec<String> = adapters.iter().enumerate().map(|(i, a)| format!("{i}: {}", summary(i, a).id)).collect();
    if items.is_empty() {
        "none".into()
    } else {
        items.join(", ")
    }
}

/// The adapter `choice` asks for among `backends`.
pub(crate) async fn pick(
    instance: &wgpu::Instance,
    backends: wgpu::Backends,
    choice: &Choice,
) -> Result<wgpu::Adapter> {
    if choice.index.is_none() && choice.id.is_none() && choice.name.is_none() {
        return instance
            .request_adapter(&wgpu::RequestAdapterOptions {
                power_preference: choice.power_preference,
                force_fallback_adapter: choice.force_fallback,
                ..Default::default()
            })
            .await
            .map_err(|e| {
                Error::AdapterNotFound(format!(
                    "no GPU adapter found for backends {backends:?} ({e}); install a Vulkan, Metal or DX12 driver \
                     (on Linux without a GPU: the mesa-vulkan-drivers package provides lavapipe)"
                ))
            });
    }
    let adapters = list(instance, backends).await;
    let available = listing(&adapters);
    let found = if let Some(i) = choice.index {
        adapters.into_iter().nth(i).ok_or_else(|| {
            Error::AdapterNotFound(format!("adapterIndex {i} is out of range; the adapters are [{available}]"))
        })?
    } else if let Some(id) = &choice.id {
        let at = adapters.iter().enumerate().position(|(i, a)| summary(i, a).id == *id);
        at.and_then(|i| adapters.into_iter().nth(i)).ok_or_else(|| {
            Error::AdapterNotFound(format!("no adapter has id '{id}'; the adapters are [{available}]"))
        })?
    } else {
        let needle = choice.name.as_deref().unwrap_or_default().to_lowercase();
        let fits = |a: &wgpu::Adapter| {
            let info = a.get_info();
            info.name.to_lowercase().contains(&needle)
                && (!choice.force_fallback || info.device_type == wgpu::DeviceType::Cpu)
        };
        adapters.into_iter().find(fits).ok_or_else(|| {
            Error::AdapterNotFound(format!(
                "no adapter name contains '{}'; the adapters are [{available}]",
                choice.name.as_deref().unwrap_or_default()
            ))
        })?
    };
    if choice.force_fallback && found.get_info().device_type != wgpu::DeviceType::Cpu {
        return Err(Error::AdapterNotFound(format!(
            "the chosen adapter '{}' is not a software adapter, and forceFallbackAdapter asks for one",
            found.get_info().name
        )));
    }
    Ok(found)
}
