//! Plan execution over wgpu buffers: a graph of WGSL kernels, planned into slabs
//! ([`Executor`]) or run eagerly from the heap ([`Gpu::run_eager`]), with a memory
//! observer and an on-device check of the plan; and single kernels dispatched on
//! heap blocks ([`Stream::dispatch`](crate::Stream::dispatch)).

mod bind;
pub mod checksum;
mod eager;
mod executor;
mod gate;
pub mod graph;
mod kernel;
mod lru;
mod observer;
pub mod pipelines;
mod shader;
pub mod shapes;
mod weights;

pub use eager::EagerOptions;
pub use executor::{CompileOptions, DeviceIo, Executor, ExecutorStats, RunClaim, RunOptions, RunOutput};
pub use graph::{ExecGraph, Kernel, Op, Tensor, TensorKind};
pub use kernel::ComputeKernel;
pub use observer::{Observation, ObservedEvent, ObservedKind};
pub use shapes::{Dims, ShapeCache, ShapeCacheStats, ShapeClaim, ShapePolicy, SymbolicGraph};
pub use weights::Weights;
