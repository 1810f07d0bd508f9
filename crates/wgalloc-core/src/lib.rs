//! wgalloc-core: the wgpu-bound runtime of wgalloc.
//!
//! - [`context`]: open a device ([`Gpu::request`]), its info, limits and memory budget.
//! - [`stream`]: [`Stream`]s of encoded work and the [`Event`]s their submissions complete.
//! - [`transfer`]: minimal buffer create / write / copy / read-back.
//! - [`heap`]: the caching device allocator ([`Gpu::heap`]): `wgalloc_heap`'s policy over wgpu buffers.
//! - [`exec`]: planned and eager execution of WGSL graphs, the memory observer.
//! - [`host`]: the staging (pinned-host) cache ([`Gpu::host`]).
//! - [`kv`]: a paged KV cache on the heap, with its kernels ([`Heap::kv_cache`]).
//! - [`profile`]: GPU/CPU timing of ops and copies, stats, traces ([`Gpu::profiler`]).
//!
//!
//! Note [Layers of the core]
//! The modules form layers; each imports only from its own layer or the ones below it, so
//! nothing in the core is an import circle except inside the device core:
//! 1. the device core: [`context`] (the device, queue, lane, tracker, limits, budget, leases),
//!    `services` (where subsystems attach, by type), `lane`, `mapping`, [`adapter`],
//!    [`completion`], `driver_turn`, `scope` (error scopes), [`signal`], [`error`] and [`output_file`];
//! 2. [`profile`], which streams, transfers and the allocators record into;
//! 3. [`stream`], then [`transfer`];
//! 4. [`heap`], then [`host`] (staging blocks copy to and from heap blocks);
//! 5. [`exec`], then [`kv`] (its kernels run as executors do);
//! 6. [`replay`], and `open` ([`Gpu::request`]: the core, then the settings its services read).
//!
//! `tests/layers.rs` reads the sources and holds every module to its layer.
//!
//! ```no_run
//! # pollster::block_on(async {
//! use wgalloc_core::{Gpu, GpuOptions};
//! let gpu = Gpu::request(GpuOptions::default()).await?;
//! let buf = gpu.create_buffer(16)?;
//! gpu.write_buffer(&buf, 0, &[1u8; 16])?;
//! assert_eq!(gpu.read_buffer(&buf, 0, 16).await?, vec![1u8; 16]);
//! # Ok::<(), wgalloc_core::Error>(()) });
//! ```

pub mod adapter;
pub mod completion;
pub mod context;
mod driver_turn;
pub mod error;
pub mod exec;
pub mod heap;
pub mod host;
pub mod kv;
mod lane;
mod mapping;
mod open;
pub mod output_file;
pub mod profile;
pub mod replay;
mod scope;
mod services;
pub mod signal;
pub mod stream;
pub mod transfer;

pub use adapter::AdapterSummary;
pub use context::{BudgetSource, Gpu, GpuInfo, GpuOptions, MemoryBudget, MAX_SAFE_INTEGER};
pub use error::{Error, InvalidArgument, QuotaExceeded, Result};
pub use exec::ComputeKernel;
pub use heap::{BlockLease, BlockOwner, DeviceBlock, Heap, HeapStats, PoolKind, Usage};
pub use host::{Direction, Host, HostBlock, HostConfig, HostStats};
pub use mapping::MappingLease;
pub use profile::{ProfileStats, Profiler};
pub use stream::{Event, Stream};
pub use transfer::GpuBuffer;
pub use wgpu;
