//! Plan execution over wgpu buffers: a graph of WGSL kernels, planned into slabs
//! ([`Executor`]) or run eagerly from the heap ([`Gpu::run_eager`]), with a memory
//! observer and an on-device check of the plan.

mod bind;
pub mod checksum;
mod eager;
mod executor;
pub mod graph;
mod observer;
pub mod pipelines;

pub use eager::EagerOptions;
pub use executor::{CompileOptions, Executor, ExecutorStats, RunOptions, RunOutput};
pub use graph::{ExecGraph, Kernel, Op, Tensor, TensorKind};
pub use observer::{Observation, ObservedEvent, ObservedKind};
