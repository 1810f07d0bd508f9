//! The device context: instance, adapter, device and queue, the limits and features
//! wgalloc depends on, the memory budget, and the handlers that keep wgpu from
//! panicking (a panic would take the whole Node process down).

use std::sync::{Arc, Mutex};

use crate::completion::{Poller, Tracker};
use crate::driver_turn::DriverTurn;
use crate::error::{Error, Result};
use crate::mapping::{MappingLease, MappingLeases};
use crate::services::Services;
use crate::signal::lock;

/// Features wgalloc asks for whenever the adapter offers them.
const WANTED_FEATURES: wgpu::Features = wgpu::Features::TIMESTAMP_QUERY
    .union(wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS)
    .union(wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES)
    .union(wgpu::Features::MAPPABLE_PRIMARY_BUFFERS);

/// Largest integer a JS `number` holds exactly; budgets and sizes above it are rejected.
pub use wgalloc_heap::MAX_SAFE_INTEGER;

/// How to pick and open a device. Every field is optional.
#[derive(Debug, Clone, Default)]
pub struct GpuOptions {
    /// Backend names: `vulkan`, `metal`, `dx12`, `primary`, `all`. `WGPU_BACKEND` overrides.
    pub backends: Option<Vec<String>>,
    /// `low-power`, `high-performance` or `none`.
    pub power_preference: Option<String>,
    /// Case-insensitive substring of the adapter name. `WGPU_ADAPTER_NAME` overrides.
    pub adapter_name: Option<String>,
    /// Only accept a software (CPU) adapter.
    pub force_fallback_adapter: bool,
    /// Features the device must have (wgpu names, e.g. `TIMESTAMP_QUERY`).
    pub required_features: Vec<String>,
    /// Features to enable if the adapter has them.
    pub optional_features: Vec<String>,
    /// Memory budget in bytes; derived from the backend when absent.
    pub memory_budget: Option<u64>,
    /// Position in `Gpu::enumerate`'s list. `WGALLOC_ADAPTER` overrides.
    pub adapter_index: Option<usize>,
    /// An id from `Gpu::enumerate`. `WGALLOC_ADAPTER` overrides.
    pub adapter_id: Option<String>,
}

/// Where the memory budget came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetSource {
    /// Set by the caller.
    User,
    /// The largest device-local Vulkan memory heap.
    VulkanDeviceLocalHeap,
    /// The backend exposes no heap size; a conservative default is used.
    Default,
}

impl BudgetSource {
    pub const ALL: [BudgetSource; 3] = [BudgetSource::User, BudgetSource::VulkanDeviceLocalHeap, BudgetSource::Default];

    pub fn as_str(self) -> &'static str {
        match self {
            BudgetSource::User => "user",
            BudgetSource::VulkanDeviceLocalHeap => "vulkan-device-local-heap",
            BudgetSource::Default => "default",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryBudget {
    pub bytes: u64,
    pub source: BudgetSource,
}

/// Budget used when the backend does not say: 4 GiB, a size most discrete and
/// integrated GPUs of the last decade can serve.
const DEFAULT_BUDGET: u64 = 4 << 30;

/// What the opened device is and the limits wgalloc plans with.
#[derive(Debug, Clone)]
pub struct GpuInfo {
    pub adapter_name: String,
    pub backend: String,
    pub device_type: String,
    pub driver: String,
    pub driver_info: String,
    pub vendor_id: u32,
    pub device_id: u32,
    pub features: Vec<String>,
    pub max_buffer_size: u64,
    pub max_storage_buffer_binding_size: u64,
    pub max_uniform_buffer_binding_size: u64,
    pub min_storage_buffer_offset_alignment: u32,
    pub min_uniform_buffer_offset_alignment: u32,
    pub max_compute_workgroups_per_dimension: u32,
    pub timestamp_period_ns: f32,
}

impl GpuInfo {
    /// Integrated and software adapters share memory with the host (MPS's unified memory).
    pub fn unified_memory(&self) -> bool {
        matches!(self.device_type.as_str(), "IntegratedGpu" | "Cpu")
    }
}

/// Driver errors that reached no error scope; kept so they can be reported, never panicked on.
#[derive(Debug, Default)]
pub struct UncapturedErrors {
    pub count: u64,
    pub last: Option<String>,
}

/// What every subsystem shares and that lives as long as the device: the device, its queue and
/// submission lane, the completion tracker, limits, budget and mapping leases. It names no
/// subsystem; those attach to `services` (Note [Services attach to the device]).
pub(crate) struct DeviceCore {
    /// First, so it is dropped (and joined) before the device: the last device handle
    /// is then released on the dropping thread.
    poller: Poller,
    /// Makes every queue-ordered call: see Note [One submission thread] in `lane.rs`.
    pub(crate) lane: crate::lane::Lane,
    pub device: wgpu::Device,
    /// Dropped by `DeviceCore::drop` with a bounded wait (wgpu's own drop waits for idle forever).
    pub queue: std::mem::ManuallyDrop<wgpu::Queue>,
    pub tracker: Arc<Tracker>,
    /// Who reads or writes mapped memory now; `Gpu::destroy` waits for them.
    pub(crate) leases: MappingLeases,
    /// Serialises reserving a sequence number and enqueueing the submission on the lane, so
    /// numbers follow the lane's order.
    pub submit_lock: Mutex<()>,
    pub uncaptured: Arc<Mutex<UncapturedErrors>>,
    pub features: wgpu::Features,
    pub limits: wgpu::Limits,
    /// The heap, host cache, profiler, pipeline cache and their settings, attached on first use.
    pub(crate) services: Services,
    info: GpuInfo,
    budget: MemoryBudget,
    /// Taken when an idle device closes and, as the last field, returned once every other field
    /// (and with them the driver's device) is dropped: see [`DriverTurn`].
    closing: Option<DriverTurn>,
}

// Note [Threads stop before the process exits]
// A process usually exits with its devices still open: nothing finalizes JS objects at exit.
// Their poller and submission threads would then still be inside the driver when the C
// library's exit handlers run, and Mesa's tear the driver down under them (a crash at exit, now
// and then, under load). So the first device open registers an `atexit` handler (after the
// driver was loaded, so it runs before the driver's own handlers, which run in reverse order of
// registration) that stops every live device's threads, each within its bounded wait. It runs
// after every JS `exit` listener, so exit reports still read the devices.
static LIVE_DEVICES: Mutex<Vec<std::sync::Weak<DeviceCore>>> = Mutex::new(Vec::new());
static EXIT_HOOK: std::sync::Once = std::sync::Once::new();

extern "C" {
    fn atexit(callback: extern "C" fn()) -> std::ffi::c_int;
}

extern "C" fn stop_threads_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        let live: Vec<Arc<DeviceCore>> = lock(&LIVE_DEVICES).drain(..).filter_map(|w| w.upgrade()).collect();
        for shared in &live {
            shared.lane.close(true);
            shared.poller.stop_for_exit();
        }
        // The devices stay allocated: their drop would wait for the driver, which is going.
        std::mem::forget(live);
    });
}

fn track_for_exit(shared: &Arc<DeviceCore>) {
    let mut live = lock(&LIVE_DEVICES);
    live.retain(|w| w.strong_count() > 0);
    live.push(Arc::downgrade(shared));
    drop(live);
    EXIT_HOOK.call_once(|| {
        // SAFETY: registers a plain function with the C runtime; it takes no arguments.
        unsafe {
            atexit(stop_threads_at_exit);
        }
    });
}

/// How long dropping a device waits for its GPU work before leaving the queue (and the
/// poller) to threads of their own: a process with a busy GPU must still exit.
const TEARDOWN_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

impl Drop for DeviceCore {
    fn drop(&mut self) {
        // SAFETY: taken once, here; no other code runs on `self` after `drop`.
        let queue = unsafe { std::mem::ManuallyDrop::take(&mut self.queue) };
        let idle = !self.tracker.is_lost() && self.tracker.completed() >= self.tracker.submitted();
        // With GPU work outstanding the lane may sit in a submit behind it: leave it to finish.
        let lane_ended = self.lane.close(idle);
        if idle && lane_ended {
            // Closed in turn with other opens and closes (the fields drop before `closing`).
            self.closing = Some(DriverTurn::take());
            drop(queue);
            return;
        }
        // Busy or lost: the driver's device may live on with the queue on the thread below for
        // as long as its work runs; holding the turn that long would stall every other open.
        // wgpu's `Queue::drop` waits for the queue to go idle without a limit. Drop it on a
        // thread of its own and wait a bounded time; joined when done, so normally the
        // teardown still ends before this returns, else it is left to finish (or to end with
        // the process).
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new().name("wgalloc-teardown".into()).spawn(move || {
            drop(queue);
            let _ = done_tx.send(());
        });
        if let Ok(handle) = spawned {
            if done_rx.recv_timeout(TEARDOWN_WAIT).is_ok() {
                let _ = handle.join();
            } else {
                // Still busy: the poller, dropped next, waits for the same work; one bound is
                // enough.
                self.poller.detach();
            }
        }
    }
}

/// An open GPU device. Cheap to clone; the device closes when the last clone drops.
#[derive(Clone)]
pub struct Gpu {
    pub(crate) shared: Arc<DeviceCore>,
}

/// Process-wide table of open devices, so worker threads can attach to one.
static REGISTRY: Mutex<Vec<(u64, std::sync::Weak<DeviceCore>)>> = Mutex::new(Vec::new());
static NEXT_HANDLE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Gpu {
    /// Every adapter wgpu can open on `backends` (default: the primary ones, or `WGPU_BACKEND`),
    /// in the order `adapter_index` counts.
    pub async fn enumerate(backends: Option<&[String]>) -> Result<Vec<crate::adapter::AdapterSummary>> {
        let backends = parse_backends(backends)?.with_env();
        let _turn = DriverTurn::take();
        Ok(crate::adapter::summaries(&instance(backends), backends).await)
    }

    /// Opens the adapter and device `options` ask for, with no service attached yet: the
    /// composed open is [`Gpu::request`].
    pub(crate) async fn open_core(options: &GpuOptions) -> Result<Gpu> {
        if let Some(b) = options.memory_budget {
            if b == 0 || b > MAX_SAFE_INTEGER {
                return Err(Error::invalid(
                    "memoryBudget",
                    "a positive integer of at most 2^53-1 bytes",
                    b.to_string(),
                ));
            }
        }
        if let (Some(i), Some(id)) = (options.adapter_index, &options.adapter_id) {
            // Either names one adapter; two could name different ones.
            return Err(Error::invalid("adapterIndex", "no adapterIndex when adapterId is given", i.to_string())
                .with_hint(format!("pass adapterIndex or adapterId, not both (adapterId is '{id}')")));
        }
        let backends = parse_backends(options.backends.as_deref())?.with_env();
        let power_preference = parse_power_preference(options.power_preference.as_deref())?;
        let required = parse_features(&options.required_features)?;
        let optional = parse_features(&options.optional_features)?;
        let choice = crate::adapter::Choice {
            index: options.adapter_index,
            id: options.adapter_id.clone(),
            name: options.adapter_name.clone(),
            power_preference,
            force_fallback: options.force_fallback_adapter,
        }
        .with_env();
        let turn = DriverTurn::take();
        let instance = instance(backends);
        let adapter = crate::adapter::pick(&instance, backends, &choice).await?;

        let available = adapter.features();
        let missing = required - available;
        if !missing.is_empty() {
            return Err(Error::DeviceRequestFailed(format!(
                "the adapter '{}' lacks required features: {}; drop them from requiredFeatures or pick another adapter",
                adapter.get_info().name,
                feature_names(missing).join(", ")
            )));
        }
        let features = required | ((optional | WANTED_FEATURES) & available);
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("wgalloc"),
                required_features: features,
                // Ask for everything the adapter offers: wgalloc sizes heaps from these.
                required_limits: adapter.limits(),
                ..Default::default()
            })
            .await
            .map_err(|e| Error::DeviceRequestFailed(format!("request_device failed: {e}")))?;
        drop(turn);

        let tracker = Arc::new(Tracker::default());
        let uncaptured = Arc::new(Mutex::new(UncapturedErrors::default()));
        install_handlers(&device, &tracker, &uncaptured);

        let budget = match options.memory_budget {
            Some(bytes) => MemoryBudget { bytes, source: BudgetSource::User },
            None => backend_budget(&adapter),
        };
        let info = gpu_info(&adapter, &device, &queue);
        let poller = Poller::spawn(device.clone(), tracker.clone())?;
        let lane = crate::lane::Lane::spawn(device.clone(), queue.clone(), tracker.clone(), uncaptured.clone())?;
        let shared = Arc::new(DeviceCore {
            lane,
            features: device.features(),
            limits: device.limits(),
            device,
            queue: std::mem::ManuallyDrop::new(queue),
            tracker,
            leases: MappingLeases::default(),
            submit_lock: Mutex::new(()),
            uncaptured,
            services: Services::default(),
            info,
            budget,
            closing: None,
            poller,
        });
        track_for_exit(&shared);
        Ok(Gpu { shared })
    }

    pub fn info(&self) -> &GpuInfo {
        &self.shared.info
    }

    pub fn memory_budget(&self) -> MemoryBudget {
        self.shared.budget
    }

    /// A process-wide handle other threads (e.g. Node worker_threads) can `attach` to.
    /// The handle does not keep the device alive.
    pub fn share_handle(&self) -> u64 {
        let mut reg = lock(&REGISTRY);
        reg.retain(|(_, w)| w.strong_count() > 0);
        if let Some((h, _)) = reg.iter().find(|(_, w)| std::ptr::eq(w.as_ptr(), Arc::as_ptr(&self.shared))) {
            return *h;
        }
        let h = NEXT_HANDLE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        reg.push((h, Arc::downgrade(&self.shared)));
        h
    }

    /// The device behind a handle from [`Gpu::share_handle`], if it is still open.
    pub fn attach(handle: u64) -> Result<Gpu> {
        let reg = lock(&REGISTRY);
        reg.iter().find(|(h, _)| *h == handle).and_then(|(_, w)| w.upgrade()).map(|shared| Gpu { shared }).ok_or_else(
            || {
                Error::invalid("handle", "the handle of an open device", handle.to_string())
                    .with_hint("no open device has it; share it with gpu.shareHandle() while it is open")
            },
        )
    }

    /// Identifies the device: equal for all clones of one `Gpu`.
    pub fn identity(&self) -> usize {
        Arc::as_ptr(&self.shared) as usize
    }

    pub fn limits(&self) -> &wgpu::Limits {
        &self.shared.limits
    }

    pub fn has_feature(&self, feature: wgpu::Features) -> bool {
        self.shared.features.contains(feature)
    }

    /// Fails with `DEVICE_LOST` once the device is gone.
    pub fn check_alive(&self) -> Result<()> {
        self.shared.tracker.check_alive()
    }

    pub fn is_lost(&self) -> bool {
        self.shared.tracker.is_lost()
    }

    /// Number of driver errors no error scope caught, and the last message.
    pub fn uncaptured_errors(&self) -> (u64, Option<String>) {
        let u = lock(&self.shared.uncaptured);
        (u.count, u.last.clone())
    }

    /// Destroys the device. Every later call fails with `DEVICE_LOST`. The driver's device,
    /// and with it every buffer, goes once no [`MappingLease`] is out (mapped memory a JS view
    /// or another thread still reads stays valid until then).
    pub fn destroy(&self) {
        // The lost callback runs on a later poll; make the state visible at once.
        self.shared.tracker.mark_lost("destroyed by the caller".into());
        MappingLeases::destroy(&self.shared);
    }

    /// Keeps the device's mapped memory in place until the lease drops: hold one while
    /// reading or writing through a pointer into a mapping. Fails once the device is lost.
    pub fn lease_mapping(&self) -> Result<MappingLease> {
        MappingLeases::take(&self.shared)
    }

    /// Mapping leases out now.
    pub fn mapping_leases(&self) -> usize {
        self.shared.leases.live()
    }

    pub fn device(&self) -> &wgpu::Device {
        &self.shared.device
    }

    pub fn queue(&self) -> &wgpu::Queue {
        &self.shared.queue
    }
}

fn install_handlers(device: &wgpu::Device, tracker: &Arc<Tracker>, uncaptured: &Arc<Mutex<UncapturedErrors>>) {
    let sink = uncaptured.clone();
    let t = tracker.clone();
    device.on_uncaptured_error(Arc::new(move |err: wgpu::Error| {
        let msg = err.to_string();
        if matches!(err, wgpu::Error::Internal { .. }) && msg.contains("lost") {
            t.mark_lost(msg.clone());
        }
        let mut u = lock(&sink);
        u.count += 1;
        u.last = Some(msg);
    }));
    let t = tracker.clone();
    device.set_device_lost_callback(move |reason, message| {
        let why = match reason {
            wgpu::DeviceLostReason::Destroyed => "destroyed".to_string(),
            _ => format!("lost: {message}"),
        };
        t.mark_lost(why);
    });
}

// Note [Instances live as long as the process]
// Destroying the last Vulkan instance makes the loader unload the driver (`dlclose`), and Mesa's
// software driver leaves exit handlers behind that then point into unmapped code: a process
// that closed every device crashed in `exit()` now and then (seen in `wgalloc replay` under
// load, with no wgalloc thread left). So one instance per set of backends is made on first use
// and kept for the process: the driver stays loaded until the process ends, and later opens
// skip the instance's creation.
static INSTANCES: Mutex<Vec<(wgpu::Backends, wgpu::Instance)>> = Mutex::new(Vec::new());

fn instance(backends: wgpu::Backends) -> wgpu::Instance {
    let mut kept = lock(&INSTANCES);
    if let Some((_, i)) = kept.iter().find(|(b, _)| *b == backends) {
        return i.clone();
    }
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
    desc.backends = backends;
    let made = wgpu::Instance::new(desc);
    kept.push((backends, made.clone()));
    made
}

fn parse_backends(names: Option<&[String]>) -> Result<wgpu::Backends> {
    let Some(names) = names else { return Ok(wgpu::Backends::PRIMARY) };
    if names.is_empty() {
        return Err(Error::invalid("backends", "at least one backend name", "an empty list"));
    }
    let mut set = wgpu::Backends::empty();
    for name in names {
        set |= match name.trim().to_lowercase().as_str() {
            "vulkan" | "vk" => wgpu::Backends::VULKAN,
            "metal" | "mtl" => wgpu::Backends::METAL,
            "dx12" | "d3d12" => wgpu::Backends::DX12,
            "primary" | "all" => wgpu::Backends::PRIMARY,
            other => {
                return Err(Error::invalid(
                    "backends",
                    "one of vulkan, metal, dx12, primary",
                    crate::error::quoted(other),
                )
                .with_hint("unknown backend"))
            }
        };
    }
    Ok(set)
}

fn parse_power_preference(name: Option<&str>) -> Result<wgpu::PowerPreference> {
    Ok(match name {
        None | Some("none") => wgpu::PowerPreference::None,
        Some("low-power") => wgpu::PowerPreference::LowPower,
        Some("high-performance") => wgpu::PowerPreference::HighPerformance,
        Some(other) => {
            return Err(Error::invalid(
                "powerPreference",
                "low-power, high-performance or none",
                crate::error::quoted(other),
            )
            .with_hint("unknown powerPreference"))
        }
    })
}

fn parse_features(names: &[String]) -> Result<wgpu::Features> {
    names.iter().try_fold(wgpu::Features::empty(), |acc, name| {
        let upper = name.trim().to_uppercase().replace('-', "_");
        wgpu::Features::from_name(&upper).map(|f| acc | f).ok_or_else(|| {
            Error::invalid("features", "wgpu feature names such as TIMESTAMP_QUERY", crate::error::quoted(name))
                .with_hint("unknown feature")
        })
    })
}

pub fn feature_names(features: wgpu::Features) -> Vec<String> {
    features.iter_names().map(|(name, _)| name.to_string()).collect()
}

fn gpu_info(adapter: &wgpu::Adapter, device: &wgpu::Device, queue: &wgpu::Queue) -> GpuInfo {
    let a = adapter.get_info();
    let l = device.limits();
    GpuInfo {
        adapter_name: a.name,
        backend: a.backend.to_str().to_string(),
        device_type: crate::adapter::device_type_name(a.device_type).to_string(),
        driver: a.driver,
        driver_info: a.driver_info,
        vendor_id: a.vendor,
        device_id: a.device,
        features: feature_names(device.features()),
        max_buffer_size: l.max_buffer_size,
        max_storage_buffer_binding_size: l.max_storage_buffer_binding_size,
        max_uniform_buffer_binding_size: l.max_uniform_buffer_binding_size,
        min_storage_buffer_offset_alignment: l.min_storage_buffer_offset_alignment,
        min_uniform_buffer_offset_alignment: l.min_uniform_buffer_offset_alignment,
        max_compute_workgroups_per_dimension: l.max_compute_workgroups_per_dimension,
        timestamp_period_ns: queue.get_timestamp_period(),
    }
}

/// Reads the budget from the driver where the backend exposes it.
pub(crate) fn backend_budget(adapter: &wgpu::Adapter) -> MemoryBudget {
    #[cfg(not(any(target_os = "macos", target_os = "ios")))]
    if let Some(bytes) = vulkan_device_local_heap(adapter) {
        return MemoryBudget { bytes: bytes.min(MAX_SAFE_INTEGER), source: BudgetSource::VulkanDeviceLocalHeap };
    }
    let _ = adapter;
    MemoryBudget { bytes: DEFAULT_BUDGET, source: BudgetSource::Default }
}

#[cfg(not(any(target_os = "macos", target_os = "ios")))]
fn vulkan_device_local_heap(adapter: &wgpu::Adapter) -> Option<u64> {
    // SAFETY: we only read physical-device properties through the raw handles,
    // and the hal adapter guard is dropped before this function returns.
    unsafe {
        let hal = adapter.as_hal::<wgpu::hal::api::Vulkan>()?;
        let instance = hal.shared_instance().raw_instance();
        let props = instance.get_physical_device_memory_properties(hal.raw_physical_device());
        props.memory_heaps[..props.memory_heap_count as usize]
            .iter()
            .filter(|h| h.flags.contains(ash::vk::MemoryHeapFlags::DEVICE_LOCAL))
            .map(|h| h.size)
            .max()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn option_parsers_reject_unknown_names() {
        assert!(parse_backends(Some(&["vulkan".into(), "Metal".into()])).is_ok());
        assert_eq!(parse_backends(Some(&["quantum".into()])).unwrap_err().code(), "INVALID_ARGUMENT");
        assert_eq!(parse_backends(Some(&[])).unwrap_err().code(), "INVALID_ARGUMENT");
        assert_eq!(parse_power_preference(Some("fast")).unwrap_err().code(), "INVALID_ARGUMENT");
        assert!(parse_features(&["timestamp-query".into()]).unwrap().contains(wgpu::Features::TIMESTAMP_QUERY));
        assert!(parse_features(&["NOPE".into()]).is_err());
    }
}
