//! The caching heap policy of wgalloc, after PyTorch's MPSHeapAllocatorImpl: which segment
//! and offset each block gets, when a freed block may be reused, when cached segments are
//! released, how large a new segment is, which live blocks move to open a range (compaction),
//! and what a warm-start profile reserves.
//!
//! What it is: pure bookkeeping over a [`SegmentStorage`] (a source of segments) and a
//! [`Completion`] (which submissions finished). Production runs it over wgpu buffers and the
//! device's submission tracker (`wgalloc-core`'s `heap` module); unit tests and trace
//! simulations run the same code over [`CpuStorage`] and [`HostCompletion`], on the CPU.
//!
//! What it is not: it touches no GPU and links no wgpu. It creates no buffers, submits no
//! copies and waits on no device: the storage does those. Stream bookkeeping here
//! ([`StreamMarks`]) is the part a free needs (what a stream recorded and submitted); the
//! streams themselves live in `wgalloc-core`.
//!
//! ```
//! use std::sync::Arc;
//! use wgalloc_heap::{CpuStorage, HeapCore, HeapLimits, HostCompletion, Usage, Watermarks};
//!
//! let limits = HeapLimits { alignment: 256, scalar_alignment: 256, max_buffer_size: 1 << 30, max_binding: 1 << 27, budget: 1 << 30 };
//! let completion = Arc::new(HostCompletion::default());
//! let heap = HeapCore::new(CpuStorage::default(), completion, limits, Watermarks::defaults(false), 0);
//! let a = heap.malloc(1000, Usage::Device).unwrap();
//! assert_eq!(a.size, 1024); // rounded up to the alignment
//! heap.free(a.id).unwrap();
//! let b = heap.malloc(1000, Usage::Device).unwrap();
//! assert_eq!((b.segment, b.offset), (a.segment, a.offset)); // served from the cache
//! assert_eq!(heap.stats().driver_allocations, 1);
//! ```
//!
//! Errors are [`HeapError`], whose `code()` strings are those `wgalloc-core` exposes to JS.

// Lint policy: the workspace's (`cargo clippy --workspace --all-targets -- -D warnings`), and
// no unsafe code: the policy is bookkeeping, the storage owns everything that touches memory.
#![forbid(unsafe_code)]

mod allocator;
#[cfg(test)]
mod allocator_tests;
mod block_slab;
pub mod compaction;
mod completion;
pub mod config;
mod error;
mod events;
mod free_list;
mod id_hash;
pub mod pool;
pub mod profile;
pub mod scopes;
mod size_bins;
mod stats;
mod storage;
mod stream;
#[cfg(test)]
mod test_rng;

pub use allocator::{Allocation, BlockFacts, HeapCore, HeapLimits, WarmStart, HANDLE};
pub use completion::{Completion, HostCompletion};
pub use config::{debug, Watermarks};
pub use error::{
    align_up, quoted, HeapError, HeapOom, InvalidArgument, LimitOom, OomSource, QuotaExceeded, Result, StoreError,
};
pub use events::{BlockInfo, BlockState, HeapEvent, HeapEventKind, IdMap, SegmentSnapshot};
pub use free_list::FreeList;
pub use id_hash::IdHasher;
pub use pool::{PoolKind, Usage};
pub use profile::{HeapProfile, PoolProfile};
pub use scopes::{Scope, ScopeCharge, ScopeId, ScopeStats, ScopeTree};
pub use stats::{HeapStats, PoolStats, Stat};
pub use storage::{BlockMove, CpuSegment, CpuStorage, SegmentStorage};
pub use stream::{StreamMarks, StreamUse};

/// The largest integer a JS number holds exactly (2^53 - 1): the bound on sizes the heap accepts.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;
