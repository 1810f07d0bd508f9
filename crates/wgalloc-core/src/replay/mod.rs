//! Eager alloc/free traces replayed without a device: wgalloc's own heap policy (the same
//! code as on a GPU, over host storage) and, on the same events, the policies it is judged
//! against: PyTorch's CUDA caching allocator, power-of-two buckets and an exact-size cache.

pub mod keyed;
pub mod pytorch_cuda;
pub mod target;
pub mod trace;

use std::sync::Arc;

pub use target::{SetTotals, TargetBounds, TargetMisses, WarmMisses, WarmTotals};
pub use trace::{Trace, TraceEvent};

use wgalloc_heap::{CpuStorage, HeapCore, HeapLimits, HeapProfile, HostCompletion, Usage, WarmStart, Watermarks};

use crate::error::{Error, Result};

const MIB: u64 = 1 << 20;

/// What one policy reserved on a trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyFigures {
    pub policy: &'static str,
    /// Most bytes held from the driver at one time.
    pub peak_reserved: u64,
    /// Most requested bytes live at one time (the trace's, the same for every policy).
    pub peak_live: u64,
    /// Bytes the trace's allocations request in all (the trace's, the same for every policy).
    pub bytes_allocated: u64,
    /// Buffers requested from the driver.
    pub driver_allocations: u64,
    /// Buffers given back to the driver.
    pub driver_frees: u64,
    /// Most bytes of blocks handed out at one time (wgalloc: requests plus alignment padding).
    pub peak_allocated: Option<u64>,
    /// Allocations refused for lack of memory (only with a capacity).
    pub failed_allocations: u64,
    /// Bytes of live blocks moved to make room (wgalloc's compaction; 0 for the others).
    pub bytes_moved: u64,
}

impl PolicyFigures {
    pub(crate) fn baseline(
        policy: &'static str,
        peak_reserved: u64,
        peak_live: u64,
        bytes_allocated: u64,
        driver: u64,
        driver_frees: u64,
        failed: u64,
    ) -> Self {
        PolicyFigures {
            policy,
            peak_reserved,
            peak_live,
            bytes_allocated,
            driver_allocations: driver,
            driver_frees,
            peak_allocated: None,
            failed_allocations: failed,
            bytes_moved: 0,
        }
    }

    /// Peak reserved over peak live (1 when nothing was live).
    pub fn ratio(&self) -> f64 {
        if self.peak_live == 0 {
            1.0
        } else {
            self.peak_reserved as f64 / self.peak_live as f64
        }
    }
}

/// The device a simulation stands for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimulationOptions {
    pub limits: HeapLimits,
    /// Unified memory (integrated GPUs) raises the default low watermark, as on a device.
    pub unified_memory: bool,
    /// Device memory the segments may take; `None`: unlimited.
    pub capacity: Option<u64>,
}

impl Default for SimulationOptions {
    /// WebGPU's default offset alignment, a typical native adapter's buffer limits, 8 GiB.
    fn default() -> Self {
        SimulationOptions {
            limits: HeapLimits {
                alignment: 256,
                scalar_alignment: 256,
                max_buffer_size: 1 << 31,
                max_binding: 128 * MIB,
                budget: 8 << 30,
            },
            unified_memory: false,
            capacity: None,
        }
    }
}

/// Every policy on one trace.
#[derive(Debug, Clone)]
pub struct Simulation {
    pub wgalloc: PolicyFigures,
    /// pytorch-cuda, power-of-two, exact-size.
    pub baselines: Vec<PolicyFigures>,
}

impl Simulation {
    /// Which parts of the restated target the heap misses on this trace.
    pub fn target(&self) -> TargetMisses {
        target::check(&self.wgalloc, &self.baselines[0])
    }
}

pub fn simulate(trace: &Trace, options: &SimulationOptions) -> Result<Simulation> {
    Ok(Simulation { wgalloc: simulate_heap(trace, options)?, baselines: baselines(trace, options.capacity) })
}

/// The baselines alone (a device replay reports them beside the real heap).
pub fn baselines(trace: &Trace, capacity: Option<u64>) -> Vec<PolicyFigures> {
    vec![
        simulate_pytorch_cuda(trace, capacity),
        keyed::simulate(trace, keyed::Keying::PowerOfTwo),
        keyed::simulate(trace, keyed::Keying::ExactSize),
    ]
}

/// wgalloc's heap (device-only blocks, as an eager runtime allocates activations).
pub fn simulate_heap(trace: &Trace, options: &SimulationOptions) -> Result<PolicyFigures> {
    simulate_heap_from(trace, options, None).map(|run| run.figures)
}

/// A simulated heap run: its figures, what a warm start reserved, and the profile it ended with.
#[derive(Debug, Clone)]
pub struct HeapRun {
    /// With a warm start, `driver_allocations` counts those after it; `peak_reserved` includes
    /// the warm segments.
    pub figures: PolicyFigures,
    pub warm_start: Option<WarmStart>,
    pub profile: HeapProfile,
}

/// [`simulate_heap`], from a warm start with `profile` when given.
pub fn simulate_heap_from(
    trace: &Trace,
    options: &SimulationOptions,
    profile: Option<&HeapProfile>,
) -> Result<HeapRun> {
    let tracker = Arc::new(HostCompletion::default());
    let heap = HeapCore::new(
        CpuStorage::with_capacity(options.capacity),
        tracker,
        options.limits,
        Watermarks::defaults(options.unified_memory),
        0,
    );
    let warm_start = profile.map(|p| heap.warm_start(p)).transpose()?;
    heap.reset_accumulated_stats();
    let mut blocks: Vec<Option<u64>> = vec![None; trace.slots];
    let mut failed = 0;
    for (i, e) in trace.events.iter().enumerate() {
        match *e {
            TraceEvent::Alloc { slot, size } => match heap.malloc(size.max(1), Usage::Device) {
                Ok(a) => blocks[slot as usize] = Some(a.id),
                Err(e) if e.is_out_of_memory() => failed += 1,
                Err(e) => {
                    return Err(Error::invalid(
                        format!("trace event {i}"),
                        "an allocation the heap accepts",
                        e.to_string(),
                    ))
                }
            },
            TraceEvent::Free { slot } => {
                if let Some(id) = blocks[slot as usize].take() {
                    heap.free(id)?;
                }
            }
        }
    }
    let s = heap.stats();
    let figures = PolicyFigures {
        policy: "wgalloc",
        peak_reserved: s.reserved_bytes.peak,
        peak_live: trace.peak_live,
        bytes_allocated: trace.bytes_allocated(),
        driver_allocations: s.driver_allocations,
        driver_frees: s.driver_frees,
        peak_allocated: Some(s.allocated_bytes.peak),
        failed_allocations: failed,
        bytes_moved: s.bytes_moved,
    };
    Ok(HeapRun { figures, warm_start, profile: heap.profile() })
}

pub fn simulate_pytorch_cuda(trace: &Trace, capacity: Option<u64>) -> PolicyFigures {
    let mut a = pytorch_cuda::CudaCachingAllocator::new(capacity);
    let mut blocks: Vec<Option<usize>> = vec![None; trace.slots];
    let mut failed = 0;
    for e in &trace.events {
        match *e {
            TraceEvent::Alloc { slot, size } => match a.malloc(size) {
                Some(b) => blocks[slot as usize] = Some(b),
                None => failed += 1,
            },
            TraceEvent::Free { slot } => {
                if let Some(b) = blocks[slot as usize].take() {
                    a.free(b);
                }
            }
        }
    }
    PolicyFigures::baseline(
        "pytorch-cuda",
        a.peak_reserved,
        trace.peak_live,
        trace.bytes_allocated(),
        a.driver_allocations,
        a.driver_frees,
        failed,
    )
}
