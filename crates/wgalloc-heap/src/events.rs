//! What the heap reports: events for listeners, block descriptions and segment snapshots.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use crate::id_hash::IdHasher;
use crate::pool::PoolKind;

/// What happened to a block or segment; delivered to listeners after the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeapEventKind {
    /// A block was placed in a segment newly allocated from the driver for it.
    Allocated,
    /// A block was served from cached memory.
    Recycled,
    /// A block returned to its pool (after its GPU work completed).
    Freed,
    /// A segment was released to the driver.
    Released,
    /// An allocation failed (the caller may free memory and retry).
    AllocationFailed,
    /// A live block was moved to make room, to another segment or within its own (`segment_id`
    /// and `offset` say where it is now).
    Moved,
}

impl HeapEventKind {
    /// Every kind, in the order the binding numbers them.
    pub const ALL: [HeapEventKind; 6] = [
        HeapEventKind::Allocated,
        HeapEventKind::Recycled,
        HeapEventKind::Freed,
        HeapEventKind::Released,
        HeapEventKind::AllocationFailed,
        HeapEventKind::Moved,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            HeapEventKind::Allocated => "ALLOCATED",
            HeapEventKind::Recycled => "RECYCLED",
            HeapEventKind::Freed => "FREED",
            HeapEventKind::Released => "RELEASED",
            HeapEventKind::AllocationFailed => "ALLOCATION_FAILED",
            HeapEventKind::Moved => "MOVED",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeapEvent {
    pub kind: HeapEventKind,
    pub block_id: Option<u64>,
    pub segment_id: Option<u32>,
    /// Where the block starts in its segment (allocations only).
    pub offset: Option<u64>,
    pub size: u64,
    pub pool: PoolKind,
}

/// Lifecycle of a block in the snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockState {
    Active,
    PendingFree,
    Free,
}

impl BlockState {
    pub const ALL: [BlockState; 3] = [BlockState::Active, BlockState::PendingFree, BlockState::Free];

    pub fn as_str(self) -> &'static str {
        match self {
            BlockState::Active => "active",
            BlockState::PendingFree => "pending-free",
            BlockState::Free => "free",
        }
    }
}

/// Public description of a live block.
#[derive(Debug, Clone, PartialEq)]
pub struct BlockInfo {
    pub id: u64,
    pub requested_size: u64,
    pub size: u64,
    pub segment_id: u32,
    pub offset: u64,
    pub pool: PoolKind,
    pub shared: bool,
    /// Alone in its segment (too big for a shared heap, or above the binding limit).
    pub dedicated: bool,
    /// Bigger than the device's max storage binding size: cannot be bound whole.
    pub exceeds_binding_limit: bool,
    pub shape: Option<Vec<u64>>,
    pub state: BlockState,
    /// Streams whose work a free of this block would wait for (retired ones are dropped).
    pub recorded_streams: usize,
}

#[derive(Debug, Clone)]
pub struct SegmentSnapshot {
    pub id: u32,
    pub pool: PoolKind,
    pub size: u64,
    pub dedicated: bool,
    /// Active and pending blocks, then free ranges (id 0), sorted by offset.
    pub blocks: Vec<(u64, u64, u64, BlockState)>,
}

/// A map keyed by allocator-issued ids (cheap hashing; the keys never come from an adversary).
pub type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;
