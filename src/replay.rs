//! `simulateTrace`: an eager alloc/free trace through the heap's policy on host storage and
//! through the baseline policies (wgalloc-core's `replay`), for `wgalloc replay`.

use std::panic::{catch_unwind, AssertUnwindSafe};

use napi::bindgen_prelude::*;
use napi_derive::napi;
use wgalloc_core::heap::HeapProfile;
use wgalloc_core::replay::{self, SimulationOptions, Trace};

use crate::error::{coded, invalid, to_u64, IntoNapi};

/// The device a simulation stands for; unset fields keep the defaults (256-byte offset
/// alignment, 2 GiB buffers, 128 MiB bindings, an 8 GiB budget, discrete memory, no capacity).
#[napi(object)]
pub struct SimulateTraceOptions {
    /// Storage buffer offset alignment (a power of two).
    pub alignment: Option<f64>,
    /// Largest buffer the device creates.
    pub max_buffer_size: Option<f64>,
    /// Largest storage binding (larger blocks get a segment of their own).
    pub max_storage_buffer_binding_size: Option<f64>,
    /// Memory budget the watermark ratios apply to.
    pub budget: Option<f64>,
    /// Unified memory (integrated GPU): the higher default low watermark.
    pub unified_memory: Option<bool>,
    /// Device memory the segments may take; unset: unlimited.
    pub capacity: Option<f64>,
    /// Only the baselines (when the heap itself runs on a device).
    pub baselines_only: Option<bool>,
    /// A heap profile as JSON text: the simulated heap starts warm from it.
    pub profile: Option<String>,
}

/// What one policy reserved on the trace.
#[napi(object)]
pub struct SimulatedPolicy {
    /// `wgalloc`, `pytorch-cuda`, `power-of-two` or `exact-size`.
    pub policy: String,
    /// Most bytes held from the driver at one time.
    pub peak_reserved_bytes: f64,
    /// Most requested bytes live at one time.
    pub peak_live_bytes: f64,
    /// Bytes the trace's allocations request in all (the same for every policy).
    pub bytes_allocated: f64,
    /// Buffers requested from the driver.
    pub driver_allocations: f64,
    /// Buffers given back to the driver.
    pub driver_frees: f64,
    /// Most bytes of blocks handed out at one time (wgalloc only).
    pub peak_allocated_bytes: Option<f64>,
    /// Allocations refused for lack of memory (only with a capacity).
    pub failed_allocations: f64,
    /// Bytes of live blocks moved to make room (wgalloc's compaction; 0 for the others).
    pub bytes_moved: f64,
}

impl From<replay::PolicyFigures> for SimulatedPolicy {
    fn from(p: replay::PolicyFigures) -> Self {
        SimulatedPolicy {
            policy: p.policy.to_string(),
            peak_reserved_bytes: p.peak_reserved as f64,
            peak_live_bytes: p.peak_live as f64,
            bytes_allocated: p.bytes_allocated as f64,
            driver_allocations: p.driver_allocations as f64,
            driver_frees: p.driver_frees as f64,
            peak_allocated_bytes: p.peak_allocated.map(|b| b as f64),
            failed_allocations: p.failed_allocations as f64,
            bytes_moved: p.bytes_moved as f64,
        }
    }
}

/// The heap's per-trace target on this trace (wgalloc-core `replay::target`): the most each
/// figure may be. Driver allocations are also held as a total over a set of traces.
#[napi(object)]
pub struct ReplayTargetBounds {
    /// Peak reserved bytes: 1.15 x peak live + 8 MiB.
    pub reserved_over_live_bytes: f64,
    /// Peak reserved bytes: pytorch-cuda's.
    pub reserved_pytorch_cuda_bytes: f64,
    /// Driver allocations: 2 x pytorch-cuda's + 2.
    pub driver_allocations: f64,
    /// Bytes moved: 10% of the bytes the trace allocates.
    pub bytes_moved: f64,
    /// A warm start's peak reserved bytes: 1.05 x peak live + 2 MiB.
    pub warm_reserved_bytes: f64,
}

impl From<replay::TargetBounds> for ReplayTargetBounds {
    fn from(b: replay::TargetBounds) -> Self {
        ReplayTargetBounds {
            reserved_over_live_bytes: b.reserved_over_live as f64,
            reserved_pytorch_cuda_bytes: b.reserved_pytorch as f64,
            driver_allocations: b.driver_allocations as f64,
            bytes_moved: b.bytes_moved as f64,
            warm_reserved_bytes: b.warm_reserved as f64,
        }
    }
}

/// Every policy on one trace.
#[napi(object)]
pub struct TraceSimulation {
    /// Requests the trace stands for.
    pub requests: f64,
    /// Events in the trace.
    pub events: f64,
    /// wgalloc's heap policy (absent with `baselinesOnly`).
    pub wgalloc: Option<SimulatedPolicy>,
    /// `pytorch-cuda`, `power-of-two`, `exact-size`.
    pub baselines: Vec<SimulatedPolicy>,
    /// The target's bounds on this trace (from the pytorch-cuda baseline).
    pub target: ReplayTargetBounds,
    /// The profile the simulated heap ended with, as JSON text (absent with `baselinesOnly`).
    pub profile: Option<String>,
    /// What the warm start reserved (with `profile`).
    pub warm_start: Option<crate::heap::WarmStartResult>,
}

/// Parses and checks trace JSON `text` (bad events are `INVALID_ARGUMENT` naming their index)
/// and replays it through the simulated policies.
/// @internal
#[napi]
pub fn simulate_trace(text: String, options: Option<SimulateTraceOptions>) -> Result<TraceSimulation> {
    catch_unwind(AssertUnwindSafe(|| simulate(&text, options)))
        .unwrap_or_else(|_| Err(coded("INTERNAL", "wgalloc panicked while simulating a trace; please report it")))
}

fn simulate(text: &str, options: Option<SimulateTraceOptions>) -> Result<TraceSimulation> {
    let mut o = SimulationOptions::default();
    let mut baselines_only = false;
    let mut profile = None;
    if let Some(opts) = options {
        let limits = &mut o.limits;
        if let Some(a) = opts.alignment {
            let a = to_u64(a, "alignment")?;
            if !a.is_power_of_two() {
                return Err(invalid("alignment", "a power of two", a.to_string()));
            }
            limits.alignment = a;
            limits.scalar_alignment = a;
        }
        for (value, field, what) in [
            (opts.max_buffer_size, &mut limits.max_buffer_size, "maxBufferSize"),
            (opts.max_storage_buffer_binding_size, &mut limits.max_binding, "maxStorageBufferBindingSize"),
            (opts.budget, &mut limits.budget, "budget"),
        ] {
            if let Some(v) = value {
                *field = to_u64(v, what)?;
            }
        }
        o.unified_memory = opts.unified_memory.unwrap_or(false);
        o.capacity = opts.capacity.map(|c| to_u64(c, "capacity")).transpose()?;
        baselines_only = opts.baselines_only.unwrap_or(false);
        profile = opts.profile.map(|text| HeapProfile::parse(&text)).transpose().napi()?;
    }
    let trace = Trace::parse(text).napi()?;
    let run =
        if baselines_only { None } else { Some(replay::simulate_heap_from(&trace, &o, profile.as_ref()).napi()?) };
    let baselines = replay::baselines(&trace, o.capacity);
    Ok(TraceSimulation {
        requests: trace.requests as f64,
        events: trace.events.len() as f64,
        profile: run.as_ref().map(|r| r.profile.to_json().to_string()),
        warm_start: run.as_ref().and_then(|r| r.warm_start).map(Into::into),
        wgalloc: run.map(|r| r.figures.into()),
        target: replay::TargetBounds::of(&baselines[0]).into(),
        baselines: baselines.into_iter().map(Into::into).collect(),
    })
}
