//! Opening a device: the device core first, then the settings its services read.

use crate::context::{Gpu, GpuOptions};
use crate::error::Result;

impl Gpu {
    /// Opens an adapter and device as `options` ask.
    pub async fn request(options: GpuOptions) -> Result<Gpu> {
        let gpu = Gpu::open_core(&options).await?;
        // Read once, at the open: a bad WGALLOC_* setting fails it, naming the variable, and the
        // heap and the host cache start from these when first used.
        let services = &gpu.shared.services;
        services.attach(crate::heap::HeapSettings::from_env(gpu.info().unified_memory())?);
        services.attach(crate::host::HostConfig::from_env()?);
        if std::env::var_os("WGALLOC_PROFILE").is_some() {
            // Env-driven profiling covers the device from its first submission.
            let _ = gpu.profiler();
        }
        Ok(gpu)
    }
}
