//! Node bindings for wgalloc: thin `#[napi]` wrappers over `wgalloc-core` and
//! `wgalloc-plan`. No logic lives here beyond argument conversion, error mapping and
//! the raw functions that let JS hold heap blocks as numbers (`block_ids`).
//!
//! A panic that crosses the N-API boundary aborts Node, so every synchronous `#[napi]` function
//! is `#[napi(catch_unwind)]` (the facade reports the panic as `INTERNAL`); napi-rs catches
//! those in async functions itself, and the raw heap functions catch their own.

// Unit-test builds do not register the N-API exports, so those look unused there.
#![cfg_attr(test, allow(dead_code))]

mod block_ids;
mod buffer;
mod error;
mod exec;
mod gpu;
mod heap;
mod host;
mod kernel;
mod kv;
mod mirrors;
mod output_file;
mod plan;
mod profiler;
mod replay;
mod shapes;
mod stream;
mod tables;
mod weights;

pub use buffer::GpuBuffer;
pub use exec::Executor;
pub use gpu::{Gpu, GpuInfo, GpuRequestOptions, MemoryBudget};
pub use heap::{DeviceBlock, Heap};
pub use host::{Host, HostBlock};
pub use kernel::ComputeKernel;
pub use kv::KvCache;
pub use plan::{start_plan, MemoryPlan, PlanJob};
pub use profiler::Profiler;
pub use replay::simulate_trace;
pub use stream::{CopyOptions, GpuEvent, Stream};
