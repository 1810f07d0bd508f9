//! The heap's policy over any [`SegmentStorage`]: pools of segments, best-fit blocks,
//! pending frees, garbage collection above the low watermark and the out-of-memory ladder.
//! `wgalloc-core`'s `Heap` runs it over wgpu buffers; tests and trace simulations over host memory.
//!
//! Segments cannot grow (a WebGPU buffer has a fixed size), so the heap replaces them:
//! - on a miss, the arena's idle segments are released before the new segment is sized
//!   (`pool::segment_size`), so their bytes come back as part of one larger segment (for a
//!   large request, up to the growth budget of the arena's largest live set so far);
//! - when an arena's last block is freed while it holds several segments, its next malloc
//!   first merges them into one (between the requests of a serving loop, so the next request
//!   finds one contiguous range instead of scattered holes), if there are at least three of
//!   at least 16 MiB together; the merged segment is their total, capped by the growth budget
//!   of the arena's largest live set so far (`pool::merged_size`).
//!
//! Blocks go to the newest segment of their size class (`size_bins`), so older segments
//! drain and become replaceable.
//!
//! When a large device request (above 1 MiB; smaller ones grow small segments) finds enough
//! free bytes but no range large enough, the heap first *compacts*: it moves live blocks, with
//! one queued copy, until a range fits (across segments, else sliding within one; see
//! `compaction`). A large request that creates a segment above the growth budget first empties
//! the emptiest segments into fuller ones, so their bytes go into the new segment; if that
//! segment would still take the arena past the budget, it *tops up* instead: a segment of
//! what the budget leaves takes the blocks in the way (the small ones around a large block,
//! which then slides), where a plan for that exists. Only blocks
//! nothing can be using at their old place move: not pinned (an operation between looking up
//! the block's place and submitting its work, or a cached bind group), not held, no pending
//! free, and no stream with recorded, unsubmitted work on them.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, MutexGuard};

use super::block_slab::{self, BlockSlab};
use super::compaction::{self, Resident, SegmentView};
use super::free_list::{self, FreeList};
use super::pool::{self, ArenaFigures, PoolKind, Usage};
use super::profile::{self, HeapProfile};
use super::scopes::ScopeCharge;
use super::stats::{HeapStats, PoolStats};
use super::storage::{BlockMove, SegmentStorage};
use super::{config::debug, BlockInfo, BlockState, HeapEvent, HeapEventKind, IdMap, SegmentSnapshot, Watermarks};
use crate::completion::{Completion, HostCompletion};
use crate::error::{align_up, Error, LimitOom, OomSource, Result};
use crate::stream::{StreamMarks, StreamUse};

mod lifetime;
pub use lifetime::{BlockFacts, HANDLE};

/// Stream marks a block keeps before it drops those of retired streams.
const STREAM_MARKS_PRUNE_AT: usize = 8;

/// An idle arena's segments are merged when there are at least this many, of at least
/// this many bytes together (fewer or smaller ones cost a driver call for little gain).
const MERGE_MIN_SEGMENTS: usize = 3;
const MERGE_MIN_BYTES: u64 = 16 << 20;

/// Blocking waits for pending frees in the out-of-memory ladder give up after this.
const PENDING_WAIT: Duration = Duration::from_secs(5);

/// The device figures the policy depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeapLimits {
    /// Storage offset alignment every block offset is a multiple of.
    pub alignment: u64,
    /// Alignment of scalar (uniform-bindable) blocks.
    pub scalar_alignment: u64,
    pub max_buffer_size: u64,
    /// Max storage binding size: larger blocks get a segment of their own.
    pub max_binding: u64,
    /// Memory budget the watermark ratios apply to.
    pub budget: u64,
}

struct Segment<G> {
    handle: G,
    pool: PoolKind,
    size: u64,
    dedicated: bool,
    /// Active plus pending blocks; 0 means the segment is entirely free.
    live_blocks: u32,
    /// Garbage-collection passes survived while idle (MPS gc_count aging).
    gc_age: u32,
}

struct BlockRec {
    segment: u32,
    /// The block's range in its pool's free list (given back on release).
    range: free_list::RangeId,
    offset: u64,
    size: u64,
    requested: u64,
    pool: PoolKind,
    /// Highest submission known to use the block (wgalloc's own operations).
    last_use: u64,
    /// Streams recorded with `record_stream`.
    streams: Vec<Arc<StreamMarks>>,
    /// Set once freed while GPU work may still use it.
    pending: Option<Box<[StreamUse]>>,
    /// Operations in flight that will still submit work on the block (a download's later
    /// pieces): a free defers until the last one ended, whatever has completed.
    holds: u32,
    /// Users of the block's current place (see [`HeapCore::pin`]): it does not move meanwhile.
    pins: u32,
    /// Who gives the block back: [`lifetime::HANDLE`] or an owner's tag (Note [Block lifetime]).
    owner: u32,
    /// Leases, with `FREE_DEFERRED` once freed while leased (Note [Block lifetime]).
    leases: u32,
    /// The scope charge returned when the block goes back to the heap (Note [Block lifetime]).
    charge: Option<Box<ScopeCharge>>,
    shape: Option<Box<[u64]>>,
}

/// Where a block's bytes are: all that returning them to their pool needs.
#[derive(Clone, Copy)]
struct BlockPlace {
    segment: u32,
    range: free_list::RangeId,
    size: u64,
    pool: PoolKind,
}

// Past 128 bytes, each malloc copies the record into the slab with a `memcpy` call: what most
// blocks lack (a shape, a charge) is boxed, and so is what a pending free keeps.
const _: () = assert!(std::mem::size_of::<BlockRec>() <= 128);

impl BlockRec {
    fn place(&self) -> BlockPlace {
        BlockPlace { segment: self.segment, range: self.range, size: self.size, pool: self.pool }
    }
}

/// Free lists: device, shared and scalar arenas (see [`PoolKind::arena`]).
const ARENAS: usize = 3;
/// The arena compaction works in: shared blocks may be mapped by the host, scalar ones are small.
const DEVICE_ARENA: usize = 0;

struct State<S: SegmentStorage> {
    storage: S,
    segments: IdMap<u32, Segment<S::Segment>>,
    free: [FreeList; ARENAS],
    /// Segments per arena.
    arena_segments: [u32; ARENAS],
    /// Arenas (bits) whose segments are merged at their next malloc: they went idle holding several.
    merge_pending: u8,
    /// Most bytes allocated at once so far in each arena (unlike the stats' peak, callers cannot
    /// reset it): the bytes an arena keeps on a miss or a merge follow its own peak, not another's.
    live_peak: [u64; ARENAS],
    /// Most bytes allocated at once in each arena by this heap's own blocks, or by the run a warm
    /// start's profile was taken from where that is more (Note [Profiles accumulate]), and the
    /// bytes of each pool at that moment: what [`HeapCore::profile`] reports.
    run_peak: [u64; ARENAS],
    /// Arenas (bits) a warm start reserved segments for (Note [Growth past a warm start]).
    warm: u8,
    peak_pools: [u64; PoolKind::ALL.len()],
    blocks: BlockSlab<BlockRec>,
    pending: Vec<u64>,
    stats: HeapStats,
    watermarks: Watermarks,
    next_segment: u32,
    /// The tag the next [`HeapCore::new_owner`] hands out.
    next_owner: u32,
    /// Events and log lines kept for the caller to take, when someone listens.
    record_events: bool,
    events: Vec<HeapEvent>,
    log_to_queue: bool,
    logs: Vec<String>,
}

/// What [`HeapCore::warm_start`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WarmStart {
    /// Segments reserved.
    pub segments: u32,
    /// Their bytes.
    pub bytes: u64,
    /// Bytes of idle segments released first.
    pub released: u64,
}

/// A block handed out: where it lives (until compaction moves it) and what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allocation {
    pub id: u64,
    /// The segment's id (as in snapshots and events); [`HeapCore::pin`] gives its storage.
    pub segment: u32,
    pub offset: u64,
    /// Allocated bytes (the request rounded up to the pool's alignment).
    pub size: u64,
    pub requested: u64,
    pub pool: PoolKind,
}

enum Placement {
    Block(Allocation),
    NeedsSegment {
        size: u64,
        dedicated: bool,
    },
    /// Blocks moved to open a range: placing again finds it.
    Opened,
}

/// A heap over storage `S`, shared by every handle to it; `C` says which submissions completed.
pub struct HeapCore<S: SegmentStorage, C: Completion = HostCompletion> {
    state: Mutex<State<S>>,
    /// Completion of the GPU work that pending frees wait for.
    tracker: Arc<C>,
    limits: HeapLimits,
    debug: u32,
}

impl<S: SegmentStorage, C: Completion> HeapCore<S, C> {
    pub fn new(storage: S, tracker: Arc<C>, limits: HeapLimits, watermarks: Watermarks, debug: u32) -> Self {
        HeapCore {
            state: Mutex::new(State {
                storage,
                segments: IdMap::default(),
                free: Default::default(),
                arena_segments: [0; ARENAS],
                merge_pending: 0,
                live_peak: [0; ARENAS],
                run_peak: [0; ARENAS],
                warm: 0,
                peak_pools: [0; PoolKind::ALL.len()],
                blocks: BlockSlab::default(),
                pending: Vec::new(),
                stats: HeapStats::default(),
                watermarks,
                next_segment: 1,
                next_owner: HANDLE + 1,
                record_events: false,
                events: Vec::new(),
                log_to_queue: false,
                logs: Vec::new(),
            }),
            tracker,
            limits,
            debug,
        }
    }

    /// The heap's lock is parking_lot's: no poison flag to check on every lock and unlock of the
    /// malloc/free path (std's poison was ignored here anyway).
    fn state(&self) -> MutexGuard<'_, State<S>> {
        self.state.lock()
    }

    /// `DEVICE_LOST` once the device is (one atomic load while it is not).
    fn check_alive(&self) -> Result<()> {
        if !self.tracker.is_lost() {
            return Ok(());
        }
        match self.tracker.lost_reason() {
            Some(reason) => Err(Error::DeviceLost(reason)),
            None => Ok(()),
        }
    }

    pub fn limits(&self) -> &HeapLimits {
        &self.limits
    }

    /// Runs `f` on the storage (under the heap's lock).
    pub fn with_storage<T>(&self, f: impl FnOnce(&S) -> T) -> T {
        f(&self.state().storage)
    }

    /// Allocates a block of at least `size` bytes.
    #[inline]
    pub fn malloc(&self, size: u64, usage: Usage) -> Result<Allocation> {
        self.malloc_as(size, usage)
    }

    /// [`HeapCore::malloc`] with the error in the caller's type `E`, converted inside the
    /// out-of-line calls: the caller's success path is the same as if the policy raised `E`.
    /// (A conversion in the caller grows it past what the optimizer inlines, and its block
    /// is then built once and copied, which stalls the cached malloc + free by a tenth.)
    #[inline]
    pub fn malloc_as<E: From<Error>>(&self, size: u64, usage: Usage) -> Result<Allocation, E> {
        self.malloc_for_as(size, usage, HANDLE)
    }

    /// [`HeapCore::malloc_as`] for a block that `owner` holds by id (see [`HeapCore::new_owner`];
    /// [`HANDLE`]: the caller's handle gives it back).
    pub fn malloc_for_as<E: From<Error>>(&self, size: u64, usage: Usage, owner: u32) -> Result<Allocation, E> {
        let aligned = self.checked_request_as::<E>(size, self.limits.alignment)?;
        self.allocate(size, aligned, PoolKind::for_request(usage, aligned), owner)
    }

    #[inline(never)]
    fn checked_request_as<E: From<Error>>(&self, size: u64, alignment: u64) -> Result<u64, E> {
        self.checked_request(size, alignment).map_err(E::from)
    }

    /// A block of the scalar pool (uniform-bindable) for a value of `size` bytes.
    pub fn malloc_scalar(&self, size: u64) -> Result<Allocation> {
        if size == 0 || size > pool::MAX_SCALAR {
            return Err(Error::invalid("value", format!("1 to {} bytes", pool::MAX_SCALAR), format!("{size} bytes"))
                .in_call("allocScalar")
                .with_hint("a larger value goes in a block of its own: heap.malloc()"));
        }
        let aligned = self.checked_request(size, self.limits.scalar_alignment)?;
        self.allocate(size, aligned, PoolKind::Scalar, HANDLE)
    }

    /// `INVALID_ARGUMENT` for a malloc of `size` bytes no memory could serve (0, past 2^53 or the
    /// device's largest buffer): what a scope checks before it charges.
    pub fn check_request(&self, size: u64) -> Result<()> {
        self.checked_request(size, self.limits.alignment).map(drop)
    }

    fn checked_request(&self, size: u64, alignment: u64) -> Result<u64> {
        self.check_alive()?;
        if size == 0 || size > crate::MAX_SAFE_INTEGER {
            return Err(Error::invalid("size", "an integer from 1 to 2^53-1 bytes", size.to_string()));
        }
        let aligned = align_up(size, alignment)?;
        if aligned > self.limits.max_buffer_size {
            // Like `createBuffer`: no amount of freeing makes it fit.
            let got = if aligned > size { format!("{size} ({aligned} once aligned)") } else { size.to_string() };
            return Err(Error::invalid(
                "size",
                format!("at most {} bytes (maxBufferSize)", self.limits.max_buffer_size),
                got,
            )
            .in_call("malloc")
            .with_hint("split the tensor"));
        }
        Ok(aligned)
    }

    /// Its error is the caller's type (see [`HeapCore::malloc_as`]).
    fn allocate<E: From<Error>>(
        &self,
        requested: u64,
        aligned: u64,
        pool: PoolKind,
        owner: u32,
    ) -> Result<Allocation, E> {
        let mut st = self.state();
        if st.blocks.is_full() {
            let live = block_slab::MAX_LIVE as u64;
            let oom = LimitOom::new(OomSource::LiveBlocks, "malloc", "free blocks or allocate larger ones");
            return Err(Error::from(oom.limit(live).in_use(live)).into());
        }
        if st.merge_pending & (1 << pool.arena()) != 0 {
            self.merge_idle_segments(&mut st, pool);
        }
        let mut waited = false;
        let mut moved_past_budget = false;
        let mut fresh = None;
        loop {
            self.sweep_pending(&mut st);
            let (size, dedicated) = match self.place(&mut st, requested, aligned, pool, fresh, owner) {
                Placement::Block(b) => return Ok(b),
                Placement::NeedsSegment { size, dedicated } => (size, dedicated),
                Placement::Opened => continue,
            };
            self.collect_garbage(&mut st, size);
            // The growth policy's segment would cross the high watermark while one just big
            // enough for this request would not: take the smaller one rather than fail.
            let size = if !self.fits_high_watermark(&st, size) && self.fits_high_watermark(&st, aligned) {
                aligned
            } else {
                size
            };
            if self.fits_high_watermark(&st, size) {
                match self.create_segment(&mut st, pool, size, dedicated) {
                    Ok(id) => {
                        fresh = Some(id);
                        continue;
                    }
                    Err(Error::OutOfMemory(_)) if !waited => {
                        // The driver's own OOM: release what we cache and retry once.
                        st.stats.retries += 1;
                        self.release_idle_segments(&mut st, u64::MAX);
                        waited = true;
                        continue;
                    }
                    Err(e) => return Err(self.fail(&mut st, requested, aligned, pool, Some(e)).into()),
                }
            }
            // The OOM ladder: release cached segments, then wait for pending frees, then retry.
            if self.release_idle_segments(&mut st, u64::MAX) > 0 {
                st.stats.retries += 1;
                continue;
            }
            if !waited && !st.pending.is_empty() {
                waited = true;
                st.stats.retries += 1;
                drop(st);
                self.wait_pending();
                st = self.state();
                continue;
            }
            // The last rung: the request's bytes are free but not contiguous, and no segment can
            // be had, so the move budget (Note [Moves within a tenth], which governs the choice
            // between moving and growing) gives way; only the per-request limit holds.
            if !moved_past_budget && pool == PoolKind::DeviceLarge && st.free[DEVICE_ARENA].free_bytes() >= aligned {
                moved_past_budget = true;
                if self.open_range(&mut st, aligned, compaction::Limit::for_request(aligned)) {
                    st.stats.retries += 1;
                    continue;
                }
            }
            return Err(self.fail(&mut st, requested, aligned, pool, None).into());
        }
    }

    /// Best fit in the pool's cached ranges; reports the segment needed otherwise.
    /// `fresh` is a segment just created for this request (the block is then ALLOCATED, not RECYCLED).
    fn place(
        &self,
        st: &mut State<S>,
        requested: u64,
        aligned: u64,
        pool: PoolKind,
        fresh: Option<u32>,
        owner: u32,
    ) -> Placement {
        let mut taken = st.free[pool.arena()].take(aligned);
        if taken.is_none() && pool == PoolKind::DeviceLarge && st.free[DEVICE_ARENA].free_bytes() >= aligned {
            taken = self.compact(st, aligned).then(|| st.free[DEVICE_ARENA].take(aligned)).flatten();
        }
        let Some((segment, offset, range)) = taken else {
            return self.miss(st, aligned, pool);
        };
        let seg = st.segments.get_mut(&segment).expect("free range of a known segment");
        seg.live_blocks += 1;
        seg.gc_age = 0;
        let id = st
            .blocks
            .insert(BlockRec {
                segment,
                range,
                offset,
                size: aligned,
                requested,
                pool,
                last_use: 0,
                holds: 0,
                pins: 0,
                streams: Vec::new(),
                pending: None,
                owner,
                leases: 0,
                charge: None,
                shape: None,
            })
            .expect("allocate checks for a free slot first");
        let from_driver = fresh == Some(segment);
        st.stats.block_allocated(pool, aligned, requested, from_driver);
        let arena = pool.arena();
        let live = arena_live(&st.stats, arena);
        if live > st.run_peak[arena] {
            st.run_peak[arena] = live;
            for (kind, figures) in arena_pools(&st.stats, arena) {
                st.peak_pools[kind.index()] = figures.allocated_bytes.current;
            }
        }
        st.live_peak[arena] = st.live_peak[arena].max(live);
        let kind = if from_driver { HeapEventKind::Allocated } else { HeapEventKind::Recycled };
        self.emit(st, || HeapEvent {
            kind,
            block_id: Some(id),
            segment_id: Some(segment),
            offset: Some(offset),
            size: aligned,
            pool,
        });
        Placement::Block(Allocation { id, segment, offset, size: aligned, requested, pool })
    }

    /// A request that found no free range: the segment it needs, or `Opened` when a top-up
    /// (see [`HeapCore::top_up`]) made room for it.
    fn miss(&self, st: &mut State<S>, aligned: u64, pool: PoolKind) -> Placement {
        if pool == PoolKind::DeviceLarge && self.top_up_into_idle(st, aligned) {
            return Placement::Opened;
        }
        // Idle segments of the arena were no use: their bytes go into the new one.
        let released = self.release_arena_idle(st, pool.arena());
        if pool == PoolKind::DeviceLarge {
            self.evacuate(st, aligned);
        }
        let arena = miss_figures(st, pool.arena(), released);
        let (size, dedicated) = self.segment_size(pool, aligned, arena);
        if pool == PoolKind::DeviceLarge && !dedicated && self.top_up(st, aligned, arena, size) {
            return Placement::Opened;
        }
        Placement::NeedsSegment { size, dedicated }
    }

    /// A large miss in a cold arena that would top it up (see [`HeapCore::top_up`]) once its
    /// idle segments were released: when those segments are no larger than the top-up's, the
    /// blocks move into them instead. Returns whether a range of `aligned` bytes is free now.
    ///
    /// Note [Top-ups reuse idle segments]: invariant: a top-up never replaces idle segments
    /// that could take its blocks by a segment as large or larger. A top-up's blocks are often
    /// freed soon after (a decoder's KV cache, one token longer every step): the next miss
    /// released the emptied segment and created another of the same size, two driver calls a
    /// step for nothing. Held by `a_decoders_top_ups_reuse_their_emptied_segments`.
    fn top_up_into_idle(&self, st: &mut State<S>, aligned: u64) -> bool {
        // The segments `miss` would release; a dedicated one takes no moved blocks.
        let (idle, any_dedicated) = idle_segments(st, DEVICE_ARENA)
            .fold((0, false), |(bytes, any), (_, s)| (bytes + s.size, any || s.dedicated));
        if idle == 0 || any_dedicated {
            return false;
        }
        // The figures `miss` sizes the segment by, once the idle segments are released.
        let mut arena = miss_figures(st, DEVICE_ARENA, idle);
        arena.reserved -= idle;
        arena.free -= idle;
        if arena.warm {
            return false;
        }
        let (size, dedicated) = self.segment_size(PoolKind::DeviceLarge, aligned, arena);
        if dedicated || pool::top_up_room(arena, aligned, size).is_none_or(|room| idle > room) {
            return false;
        }
        self.open_range(st, aligned, compaction::Limit::for_request(aligned))
            && st.free[DEVICE_ARENA].largest() >= aligned
    }

    /// The segment a request of `aligned` bytes in `pool` gets with the arena at `arena`, within
    /// the device's limits (`pool::segment_size`).
    fn segment_size(&self, pool: PoolKind, aligned: u64, arena: ArenaFigures) -> (u64, bool) {
        pool::segment_size(pool, aligned, arena, self.limits.max_buffer_size, self.limits.max_binding)
    }

    /// Moves live device blocks until a free range of `need` bytes exists (see `compaction`).
    /// Returns whether they moved.
    fn compact(&self, st: &mut State<S>, need: u64) -> bool {
        let limit = self.move_limit(st, need);
        self.open_range(st, need, limit)
    }

    /// Moves live device blocks, within `limit`, so that a free range of `need` bytes exists
    /// (`compaction::open_range`). Returns whether they moved.
    fn open_range(&self, st: &mut State<S>, need: u64, limit: compaction::Limit) -> bool {
        compaction::open_range(&arena_view(st), need, self.limits.max_binding, limit)
            .is_some_and(|plan| self.apply_moves(st, &plan))
    }

    /// What a plan for a request of `need` bytes may copy. Note [Moves within a tenth]: where the
    /// segment a miss would get keeps the arena within the target, what the tenth of the bytes
    /// requested (this request included) leaves; past it, bytes come first.
    fn move_limit(&self, st: &State<S>, need: u64) -> compaction::Limit {
        let limit = compaction::Limit::for_request(need);
        let arena = ArenaFigures {
            live_peak: st.live_peak[DEVICE_ARENA],
            free: st.free[DEVICE_ARENA].free_bytes(),
            ..arena_figures(&st.stats, DEVICE_ARENA)
        };
        let (size, _) = self.segment_size(PoolKind::DeviceLarge, need, arena);
        if arena.reserved + size > pool::target(arena.live + need) {
            return limit;
        }
        let left = pool::move_budget(st.stats.requested_bytes.allocated.saturating_add(need), st.stats.bytes_moved);
        compaction::Limit { bytes: limit.bytes.min(left), ..limit }
    }

    /// A large miss whose new segment would take the arena past its growth budget, when a
    /// smaller segment within the budget opens a range once blocks move into it (or within their
    /// segments): creates that segment and moves them. Returns whether a range of `aligned`
    /// bytes is free now. A model whose next request is larger than any before finds its
    /// merged segment too fragmented for the new large tensor; a segment of the tensor's size
    /// beside it would leave the merged segment's holes idle. In a warm arena (Note [Growth
    /// past a warm start]) any plan whose segment is smaller than the miss's `size` will do,
    /// and the segment holds just the blocks it takes.
    fn top_up(&self, st: &mut State<S>, aligned: u64, arena: ArenaFigures, size: u64) -> bool {
        let room = if arena.warm {
            pool::granules_within(pool::target(arena.live + aligned).saturating_sub(arena.reserved))
                .min(size.saturating_sub(pool::SEGMENT_GRANULE))
        } else {
            let Some(room) = pool::top_up_room(arena, aligned, size) else { return false };
            room
        };
        if room == 0 || st.free[DEVICE_ARENA].free_bytes() + room < aligned {
            return false;
        }
        let planned = st.next_segment;
        let fresh = SegmentView { id: planned, size: room, free: vec![(0, room)], blocks: Vec::new() };
        let limit = compaction::Limit::for_request(aligned);
        let Some(mut plan) =
            compaction::open_range_into(&arena_view(st), fresh, aligned, self.limits.max_binding, limit)
        else {
            return false;
        };
        let room = if arena.warm {
            // The plan fills the fresh segment from its start.
            let used = plan
                .iter()
                .filter(|m| m.to == planned)
                .map(|m| m.at + st.blocks.get(m.block).expect("planned block").size)
                .max()
                .unwrap_or(0);
            profile::round_to_granule(used).min(room)
        } else {
            room
        };
        // A plan that moves nothing into the segment is compaction, which the move budget governs.
        if room == 0 {
            return false;
        }
        self.collect_garbage(st, room);
        if !self.fits_high_watermark(st, room) {
            return false;
        }
        let Ok(id) = self.create_segment(st, PoolKind::DeviceLarge, room, false) else { return false };
        // The plan names the segment by the id it was to get; the store decides the real one.
        for m in plan.iter_mut().filter(|m| m.to == planned) {
            m.to = id;
        }
        self.apply_moves(st, &plan) && st.free[DEVICE_ARENA].largest() >= aligned
    }

    /// Before a large miss creates a segment above the growth budget (idle segments already
    /// released), empties the emptiest segments into fuller ones and releases them, so that
    /// their bytes go into the new segment instead of staying beside it.
    fn evacuate(&self, st: &mut State<S>, aligned: u64) {
        let figures = arena_figures(&st.stats, DEVICE_ARENA);
        let over = (figures.reserved + aligned).saturating_sub(pool::growth_budget(figures.live + aligned));
        if over == 0 {
            return;
        }
        let (plan, _) = compaction::evacuate(&arena_view(st), over, compaction::Limit::for_request(aligned));
        if !plan.is_empty() && self.apply_moves(st, &plan) {
            self.release_arena_idle(st, DEVICE_ARENA);
        }
    }

    /// Copies the planned moves' bytes in one queued submission and rebooks each block at its
    /// new place. Nothing changes when the copy fails.
    fn apply_moves(&self, st: &mut State<S>, plan: &[compaction::Move]) -> bool {
        let arena = DEVICE_ARENA;
        let moves: Vec<BlockMove<S::Segment>> = plan
            .iter()
            .map(|m| {
                let b = st.blocks.get(m.block).expect("planned block");
                BlockMove {
                    from: st.segments[&b.segment].handle.clone(),
                    from_offset: b.offset,
                    to: st.segments[&m.to].handle.clone(),
                    to_offset: m.at,
                    size: b.size,
                }
            })
            .collect();
        if st.storage.copy(&moves).is_err() {
            // Nothing moved: the request gets a segment of its own as before.
            return false;
        }
        for &compaction::Move { block: id, to, at } in plan {
            let rec = st.blocks.get(id).expect("planned block");
            let (from, old, size, pool) = (rec.segment, rec.range, rec.size, rec.pool);
            // The old range first: a block sliding within its segment may land on part of it.
            st.free[arena].give_back(old);
            let range = st.free[arena].take_at(to, at, size).expect("planned range is free");
            st.segments.get_mut(&from).expect("block's segment").live_blocks -= 1;
            st.segments.get_mut(&to).expect("target segment").live_blocks += 1;
            let rec = st.blocks.get_mut(id).expect("planned block");
            rec.segment = to;
            rec.offset = at;
            rec.range = range;
            st.stats.blocks_moved += 1;
            st.stats.bytes_moved += size;
            self.emit(st, || HeapEvent {
                kind: HeapEventKind::Moved,
                block_id: Some(id),
                segment_id: Some(to),
                offset: Some(at),
                size,
                pool,
            });
        }
        true
    }

    /// The segment and offset of live block `id`, which stays there until [`HeapCore::unpin`]
    /// (compaction passes it by). Every operation that records work on a block looks its place
    /// up this way and unpins once the work is submitted or recorded on a stream.
    pub fn pin(&self, id: u64) -> Result<(S::Segment, u64)> {
        let mut st = self.state();
        let st = &mut *st;
        let rec = st.blocks.get_mut(id).filter(|r| r.pending.is_none()).ok_or_else(|| freed(id))?;
        rec.pins += 1;
        Ok((st.segments[&rec.segment].handle.clone(), rec.offset))
    }

    /// Where live block `id` is now.
    pub fn offset(&self, id: u64) -> Result<u64> {
        let st = self.state();
        st.blocks.get(id).filter(|r| r.pending.is_none()).map(|r| r.offset).ok_or_else(|| freed(id))
    }

    pub fn unpin(&self, id: u64) {
        if let Some(rec) = self.state().blocks.get_mut(id) {
            rec.pins = rec.pins.saturating_sub(1);
        }
    }

    /// Releases the arena's idle segments. Returns the bytes released.
    fn release_arena_idle(&self, st: &mut State<S>, arena: usize) -> u64 {
        let idle: Vec<u32> = idle_segments(st, arena).map(|(&id, _)| id).collect();
        idle.into_iter().map(|id| self.release_segment(st, id)).sum()
    }

    /// Replaces the idle segments of `pool`'s arena by one segment of their total size (at
    /// most the growth budget of the largest live set so far, see `pool::merged_size`), when
    /// they are several and large enough for the driver call to pay off. Past the device's
    /// largest buffer the bytes go into as few equal segments as hold them, and only when those
    /// are fewer than the idle ones: capped at one buffer, a merge would drop the bytes a
    /// training step regrows each time, and merging again at every step would churn.
    fn merge_idle_segments(&self, st: &mut State<S>, pool: PoolKind) {
        let arena = pool.arena();
        st.merge_pending &= !(1 << arena);
        let idle = st.segments.values().filter(|s| s.live_blocks == 0 && s.pool.arena() == arena);
        let (count, bytes) = idle.fold((0, 0u64), |(n, b), s| (n + 1, b + s.size));
        let size = pool::merged_size(bytes, st.live_peak[arena]);
        let pieces = size.div_ceil(self.limits.max_buffer_size.max(1));
        if count < MERGE_MIN_SEGMENTS || bytes < MERGE_MIN_BYTES || pieces as usize >= count {
            return;
        }
        self.release_arena_idle(st, arena);
        let each = size.div_ceil(pieces).div_ceil(pool::SEGMENT_GRANULE).saturating_mul(pool::SEGMENT_GRANULE);
        let each = each.min(self.limits.max_buffer_size);
        // Best effort: if the driver refuses, the next malloc sizes a segment as usual.
        for _ in 0..pieces {
            if each == 0 || !self.fits_high_watermark(st, each) || self.create_segment(st, pool, each, false).is_err() {
                break;
            }
        }
    }

    fn fits_high_watermark(&self, st: &State<S>, extra: u64) -> bool {
        let limit = Watermarks::limit(st.watermarks.high, self.limits.budget);
        st.stats.reserved_bytes.current.saturating_add(extra) <= limit
    }

    /// Above the low watermark, release idle segments oldest first (MPS gc_count aging).
    fn collect_garbage(&self, st: &mut State<S>, extra: u64) {
        let limit = Watermarks::limit(st.watermarks.low, self.limits.budget);
        let needed = st.stats.reserved_bytes.current.saturating_add(extra);
        if needed <= limit {
            return;
        }
        st.stats.gc_runs += 1;
        for seg in st.segments.values_mut().filter(|s| s.live_blocks == 0) {
            seg.gc_age += 1;
        }
        self.release_idle_segments(st, needed - limit);
    }

    /// Releases entirely free segments, oldest (highest gc age) first, until
    /// `target` bytes are released. Returns the bytes released.
    fn release_idle_segments(&self, st: &mut State<S>, target: u64) -> u64 {
        let mut idle: Vec<(u32, u32)> =
            st.segments.iter().filter(|(_, s)| s.live_blocks == 0).map(|(&id, s)| (s.gc_age, id)).collect();
        idle.sort_unstable_by(|a, b| b.cmp(a));
        let mut released = 0;
        for (_, id) in idle {
            if released >= target {
                break;
            }
            released += self.release_segment(st, id);
        }
        released
    }

    fn release_segment(&self, st: &mut State<S>, id: u32) -> u64 {
        let Some(seg) = st.segments.get(&id) else { return 0 };
        let (pool, size) = (seg.pool, seg.size);
        if !st.free[pool.arena()].remove_segment(id, size) {
            return 0;
        }
        let seg = st.segments.remove(&id).expect("checked above");
        st.arena_segments[pool.arena()] -= 1;
        st.storage.release(seg.handle);
        st.stats.segment_released(pool, size);
        self.emit(st, || HeapEvent {
            kind: HeapEventKind::Released,
            block_id: None,
            segment_id: Some(id),
            offset: None,
            size,
            pool,
        });
        size
    }

    fn create_segment(&self, st: &mut State<S>, pool: PoolKind, size: u64, dedicated: bool) -> Result<u32> {
        let handle = st.storage.allocate(pool, size)?;
        let id = st.next_segment;
        st.next_segment += 1;
        st.segments.insert(id, Segment { handle, pool, size, dedicated, live_blocks: 0, gc_age: 0 });
        st.free[pool.arena()].add_segment(id, size);
        st.arena_segments[pool.arena()] += 1;
        st.stats.segment_created(pool, size);
        Ok(id)
    }

    fn fail(&self, st: &mut State<S>, requested: u64, aligned: u64, pool: PoolKind, driver: Option<Error>) -> Error {
        st.stats.ooms += 1;
        self.emit(st, || HeapEvent {
            kind: HeapEventKind::AllocationFailed,
            block_id: None,
            segment_id: None,
            offset: None,
            size: requested,
            pool,
        });
        let s = &st.stats;
        let largest = st.free.iter().map(FreeList::largest).max().unwrap_or(0);
        let high = st.watermarks.high;
        let budget = self.limits.budget;
        let cause = match driver {
            Some(e) => format!("the driver refused the allocation ({e})"),
            None => "the high watermark would be exceeded".to_string(),
        };
        Error::HeapOutOfMemory(Box::new(crate::error::HeapOom {
            cause,
            requested,
            aligned,
            pool: pool.as_str(),
            allocated: s.allocated_bytes.current,
            cached: s.cached_bytes() - s.pending_free_bytes,
            pending_free: s.pending_free_bytes,
            reserved: s.reserved_bytes.current,
            high_watermark: (high != 0.0).then(|| Watermarks::limit(high, budget)),
            high_watermark_ratio: high,
            budget,
            largest_free_block: largest,
        }))
    }

    /// Moves pending blocks whose GPU work completed back into their pools.
    fn sweep_pending(&self, st: &mut State<S>) {
        if st.pending.is_empty() {
            return;
        }
        let completed = self.tracker.completed();
        let lost = self.tracker.is_lost();
        let mut i = 0;
        while i < st.pending.len() {
            let id = st.pending[i];
            let rec = st.blocks.get(id).expect("pending block is recorded");
            let done = lost || rec.pending.as_deref().is_some_and(|uses| reusable(rec, uses, completed));
            if done {
                let place = rec.place();
                st.pending.swap_remove(i);
                st.stats.pending_done(place.size);
                self.return_to_pool(st, id, place);
            } else {
                i += 1;
            }
        }
    }

    /// Blocks until the submissions of pending frees completed (bounded wait).
    fn wait_pending(&self) {
        let target = {
            let st = self.state();
            st.pending
                .iter()
                .filter_map(|id| {
                    let rec = st.blocks.get(*id).expect("pending block is recorded");
                    // A held block waits for its holder, not for a submission.
                    if rec.holds > 0 {
                        return None;
                    }
                    let uses = rec.pending.as_ref()?;
                    let streams: Option<Vec<u64>> = uses.iter().map(StreamUse::resolved_seq).collect();
                    Some(streams?.into_iter().max().unwrap_or(0).max(rec.last_use))
                })
                .max()
        };
        if let Some(seq) = target {
            self.tracker.wait(seq, PENDING_WAIT);
        }
    }

    /// Gives block `id`'s range (at `place`, which the caller looked up) back to its pool; the id
    /// names nothing any more.
    fn return_to_pool(&self, st: &mut State<S>, id: u64, place: BlockPlace) {
        let BlockPlace { segment, range, size, pool } = place;
        st.blocks.remove(id);
        let arena = pool.arena();
        st.free[arena].give_back(range);
        if let Some(seg) = st.segments.get_mut(&segment) {
            seg.live_blocks -= 1;
        }
        if st.arena_segments[arena] > 1 && st.pending.is_empty() && arena_live(&st.stats, arena) == 0 {
            st.merge_pending |= 1 << arena;
        }
        self.emit(st, || HeapEvent {
            kind: HeapEventKind::Freed,
            block_id: Some(id),
            segment_id: Some(segment),
            offset: None,
            size,
            pool,
        });
    }

    /// Keeps block `id` from reuse until [`HeapCore::release_hold`], even if it is freed meanwhile.
    pub fn hold(&self, id: u64) -> Result<()> {
        let mut st = self.state();
        let rec = st.blocks.get_mut(id).filter(|r| r.pending.is_none()).ok_or_else(|| freed(id))?;
        rec.holds += 1;
        Ok(())
    }

    pub fn release_hold(&self, id: u64) {
        let mut st = self.state();
        let Some(rec) = st.blocks.get_mut(id) else { return };
        rec.holds -= 1;
        if rec.holds == 0 && rec.pending.is_some() {
            self.sweep_pending(&mut st);
        }
    }

    /// Records that submission `seq` uses block `id` (wgalloc's own operations).
    pub fn record_use(&self, id: u64, seq: u64) {
        if let Some(rec) = self.state().blocks.get_mut(id) {
            rec.last_use = rec.last_use.max(seq);
        }
    }

    pub fn record_stream(&self, id: u64, marks: &Arc<StreamMarks>) -> Result<()> {
        let mut st = self.state();
        let rec = st.blocks.get_mut(id).filter(|r| r.pending.is_none()).ok_or_else(|| freed(id))?;
        if !rec.streams.iter().any(|m| Arc::ptr_eq(m, marks)) {
            // A long-lived block used by many short-lived streams (one per upload) would
            // otherwise collect their marks without bound, and this scan with them.
            if rec.streams.len() >= STREAM_MARKS_PRUNE_AT {
                let completed = self.tracker.completed();
                rec.streams.retain(|m| !m.retired(completed));
            }
            rec.streams.push(marks.clone());
        }
        Ok(())
    }

    pub fn set_shape(&self, id: u64, shape: Option<Vec<u64>>) -> Result<()> {
        let mut st = self.state();
        let rec = st.blocks.get_mut(id).filter(|r| r.pending.is_none()).ok_or_else(|| freed(id))?;
        rec.shape = shape.map(Vec::into_boxed_slice);
        Ok(())
    }

    /// Information on a live (active or pending-free) block.
    pub fn block_info(&self, id: u64) -> Option<BlockInfo> {
        let st = self.state();
        let rec = st.blocks.get(id)?;
        let seg = &st.segments[&rec.segment];
        Some(BlockInfo {
            id,
            requested_size: rec.requested,
            size: rec.size,
            segment_id: rec.segment,
            offset: rec.offset,
            pool: rec.pool,
            shared: rec.pool.is_shared(),
            dedicated: seg.dedicated,
            exceeds_binding_limit: rec.size > self.limits.max_binding,
            shape: rec.shape.as_deref().map(<[u64]>::to_vec),
            state: if rec.pending.is_some() { BlockState::PendingFree } else { BlockState::Active },
            recorded_streams: rec.streams.len(),
        })
    }

    /// Sweeps pending frees whose GPU work completed (MPS freeInactiveBuffers).
    pub fn free_inactive_buffers(&self) {
        let mut st = self.state();
        self.sweep_pending(&mut st);
    }

    /// Releases every idle cached segment to the driver. Returns the bytes released.
    pub fn empty_cache(&self) -> u64 {
        let mut st = self.state();
        self.sweep_pending(&mut st);
        self.release_idle_segments(&mut st, u64::MAX)
    }

    /// What this heap learned about its workload (see Note [Warm-start profiles]): per pool, the
    /// bytes allocated when its arena's live bytes peaked, and the segments a warm start reserves.
    pub fn profile(&self) -> HeapProfile {
        let st = self.state();
        let mut pools = Vec::new();
        for arena in 0..ARENAS {
            let peaks: Vec<(PoolKind, u64)> =
                PoolKind::ALL.iter().filter(|p| p.arena() == arena).map(|&p| (p, st.peak_pools[p.index()])).collect();
            pools.extend(HeapProfile::plan_arena(&peaks, self.limits.max_buffer_size));
        }
        HeapProfile { pools }
    }

    /// Reserves the segments `profile` lists (each rounded up to the segment granule), after
    /// releasing the idle segments of the arenas it names, so that a workload like the one it
    /// was taken from finds them and the policy grows only past them. All or nothing: a profile
    /// above the high watermark is `OUT_OF_MEMORY` naming the figures, and a segment the driver
    /// refuses releases those made before it. A segment above the device's largest buffer is
    /// `INVALID_ARGUMENT` naming it. The arenas' live peaks (which the growth and merge budgets
    /// follow) rise to the profile's.
    pub fn warm_start(&self, profile: &HeapProfile) -> Result<WarmStart> {
        self.check_alive()?;
        let mut sizes: Vec<(PoolKind, u64)> = Vec::new();
        for (i, p) in profile.pools.iter().enumerate() {
            for (j, &s) in p.segments.iter().enumerate() {
                let size = profile::round_to_granule(s).max(s);
                if size > self.limits.max_buffer_size {
                    // Named as the profile's own checks name its fields (`HeapProfile::from_value`).
                    return Err(Error::invalid(
                        format!("heap profile.pools[{i}].segments[{j}]"),
                        format!("at most {} bytes (maxBufferSize)", self.limits.max_buffer_size),
                        s.to_string(),
                    ));
                }
                sizes.push((p.pool, size));
            }
        }
        let mut st = self.state();
        self.sweep_pending(&mut st);
        let mut released = 0;
        for arena in 0..ARENAS {
            if profile.pools.iter().any(|p| p.pool.arena() == arena && !p.segments.is_empty()) {
                released += self.release_arena_idle(&mut st, arena);
            }
        }
        let bytes = sizes.iter().fold(0u64, |a, s| a.saturating_add(s.1));
        if !self.fits_high_watermark(&st, bytes) {
            let high = st.watermarks.high;
            let oom = LimitOom::new(
                OomSource::HighWatermark,
                format!("warmStart: reserving the profile's {} segments", sizes.len()),
                format!(
                    "nothing was reserved; lower the profile's segments or raise the high watermark ratio ({high} x \
                     budget {})",
                    self.limits.budget
                ),
            );
            return Err(oom
                .requested(bytes)
                .limit(Watermarks::limit(high, self.limits.budget))
                .in_use(st.stats.reserved_bytes.current)
                .into());
        }
        let mut made = Vec::with_capacity(sizes.len());
        for &(pool, size) in &sizes {
            match self.create_segment(&mut st, pool, size, false) {
                Ok(id) => made.push(id),
                Err(e) => {
                    for id in made {
                        self.release_segment(&mut st, id);
                    }
                    return Err(e);
                }
            }
        }
        for arena in 0..ARENAS {
            let peak: u64 = profile.pools.iter().filter(|p| p.pool.arena() == arena).map(|p| p.peak_live).sum();
            st.live_peak[arena] = st.live_peak[arena].max(peak);
            // Note [Profiles accumulate]
            if peak > st.run_peak[arena] {
                st.run_peak[arena] = peak;
                for kind in PoolKind::ALL.into_iter().filter(|k| k.arena() == arena) {
                    st.peak_pools[kind.index()] =
                        profile.pools.iter().filter(|p| p.pool == kind).map(|p| p.peak_live).sum();
                }
            }
            if sizes.iter().any(|s| s.0.arena() == arena) {
                st.warm |= 1 << arena;
            }
        }
        Ok(WarmStart { segments: made.len() as u32, bytes, released })
    }

    pub fn stats(&self) -> HeapStats {
        let mut st = self.state();
        self.sweep_pending(&mut st);
        st.stats.clone()
    }

    pub fn reset_peak_stats(&self) {
        self.state().stats.reset_peak();
    }

    pub fn reset_accumulated_stats(&self) {
        self.state().stats.reset_accumulated();
    }

    pub fn watermarks(&self) -> Watermarks {
        self.state().watermarks
    }

    pub fn set_high_watermark_ratio(&self, ratio: f64) -> Result<()> {
        let mut st = self.state();
        let w = Watermarks { high: ratio, low: st.watermarks.low.min(if ratio == 0.0 { f64::MAX } else { ratio }) };
        w.validate()?;
        st.watermarks = w;
        Ok(())
    }

    pub fn set_low_watermark_ratio(&self, ratio: f64) -> Result<()> {
        let mut st = self.state();
        let w = Watermarks { high: st.watermarks.high, low: ratio };
        w.validate()?;
        st.watermarks = w;
        Ok(())
    }

    /// Bytes of the budget the heap may still reserve before it must garbage-collect
    /// (`None` while the low watermark is disabled).
    pub fn low_watermark_headroom(&self) -> Option<u64> {
        let st = self.state();
        (st.watermarks.low != 0.0).then(|| {
            Watermarks::limit(st.watermarks.low, self.limits.budget).saturating_sub(st.stats.reserved_bytes.current)
        })
    }

    /// Every segment with its blocks and free ranges, for tools and viewers.
    pub fn snapshot(&self) -> Vec<SegmentSnapshot> {
        let st = self.state();
        let mut by_segment: HashMap<u32, Vec<(u64, u64, u64, BlockState)>> = HashMap::new();
        for (id, rec) in st.blocks.iter() {
            let state = if rec.pending.is_some() { BlockState::PendingFree } else { BlockState::Active };
            by_segment.entry(rec.segment).or_default().push((id, rec.offset, rec.size, state));
        }
        let mut out: Vec<SegmentSnapshot> = st
            .segments
            .iter()
            .map(|(&id, seg)| {
                let mut blocks = by_segment.remove(&id).unwrap_or_default();
                blocks.extend(st.free[seg.pool.arena()].segment_ranges(id).map(|(o, s)| (0, o, s, BlockState::Free)));
                blocks.sort_unstable_by_key(|b| b.1);
                SegmentSnapshot { id, pool: seg.pool, size: seg.size, dedicated: seg.dedicated, blocks }
            })
            .collect();
        out.sort_unstable_by_key(|s| s.id);
        out
    }

    /// Keep events (and, with `logs`, debug lines) for [`HeapCore::take_events`] instead of dropping them.
    pub fn set_event_recording(&self, events: bool, logs: bool) {
        let mut st = self.state();
        st.record_events = events;
        st.log_to_queue = logs;
        if !events {
            st.events.clear();
        }
    }

    /// Events and log lines since the last call.
    pub fn take_events(&self) -> (Vec<HeapEvent>, Vec<String>) {
        let mut st = self.state();
        (std::mem::take(&mut st.events), std::mem::take(&mut st.logs))
    }

    /// Hands the oldest recorded events, at most `max`, to `each` and forgets them; returns how
    /// many. The queue keeps its capacity, so steady recording does not reallocate.
    pub fn drain_events(&self, max: usize, each: impl FnMut(&HeapEvent)) -> usize {
        let mut st = self.state();
        let n = max.min(st.events.len());
        st.events.drain(..n).as_slice().iter().for_each(each);
        n
    }

    pub fn debug_mask(&self) -> u32 {
        self.debug
    }

    /// Records an event for listeners and the debug log; inline, and the event built only when
    /// someone listens or a debug mask is set, so the common case costs two tests on the
    /// malloc/free path.
    #[inline]
    fn emit(&self, st: &mut State<S>, event: impl FnOnce() -> HeapEvent) {
        if st.record_events || self.debug != 0 {
            self.emit_slow(st, event());
        }
    }

    #[cold]
    fn emit_slow(&self, st: &mut State<S>, event: HeapEvent) {
        let HeapEvent { kind, block_id, segment_id, size, pool, .. } = event;
        if st.record_events {
            st.events.push(event);
        }
        let mask = self.debug;
        if mask == 0 {
            return;
        }
        let wanted = match kind {
            HeapEventKind::Allocated | HeapEventKind::AllocationFailed => mask & debug::ALLOCATIONS != 0,
            HeapEventKind::Recycled => mask & (debug::RECYCLES | debug::ALLOCATIONS) != 0,
            HeapEventKind::Freed | HeapEventKind::Released | HeapEventKind::Moved => mask & debug::RELEASES != 0,
        };
        let large = matches!(pool, PoolKind::DeviceLarge | PoolKind::SharedLarge);
        if !wanted || (mask & debug::LARGE_ONLY != 0 && !large) {
            return;
        }
        let what = match (block_id, segment_id) {
            (Some(b), Some(s)) => format!("block {b} in segment {s}"),
            (None, Some(s)) => format!("segment {s}"),
            _ => "request".to_string(),
        };
        let line = format!(
            "wgalloc heap: {} {what}, {size} bytes, pool {} (allocated {}, reserved {})",
            kind.as_str(),
            pool.as_str(),
            st.stats.allocated_bytes.current,
            st.stats.reserved_bytes.current
        );
        if st.log_to_queue {
            st.logs.push(line);
        } else {
            eprintln!("{line}");
        }
    }
}

impl<S: SegmentStorage, C: Completion> Drop for HeapCore<S, C> {
    fn drop(&mut self) {
        if self.debug & debug::PROFILING != 0 {
            let st = self.state.lock();
            let s = &st.stats;
            eprintln!(
                "wgalloc heap stats: peak allocated {}, peak reserved {}, driver allocations {}, frees {}, cache hits {}, misses {}, retries {}, OOMs {}",
                s.allocated_bytes.peak, s.reserved_bytes.peak, s.driver_allocations, s.driver_frees, s.cache_hits, s.cache_misses, s.retries, s.ooms
            );
        }
    }
}

/// Whether a freed block's memory may serve the next malloc, given the submissions completed.
///
/// WebGPU has one queue per device, and wgpu orders a later submission's use of a buffer after
/// an earlier one's (with the barriers that takes), as PyTorch relies on when it reuses a block
/// freed on the same stream at once. So a device-only block whose uses were all *submitted* is
/// reusable now: whatever the next owner does with it is submitted later. The wait for
/// completion stays for blocks the host may map (shared pools: a map is not queue-ordered), and
/// every block waits for work recorded but not yet submitted on any stream, and for operations
/// that still hold it. (A block's uses are all on its own device's queue: streams of another
/// device are refused by `record_stream`.)
/// Whether nothing can be using block `rec` at its current place (see [`HeapCore::compact`]).
fn movable(rec: &BlockRec) -> bool {
    rec.pins == 0
        && rec.holds == 0
        && rec.pending.is_none()
        && !rec.pool.is_shared()
        && rec.streams.iter().all(|m| !m.has_unsubmitted())
}

#[inline(always)]
fn reusable(rec: &BlockRec, uses: &[StreamUse], completed: u64) -> bool {
    if rec.holds > 0 {
        return false;
    }
    if rec.pool.is_shared() {
        rec.last_use <= completed && uses.iter().all(|u| u.resolved_seq().is_some_and(|seq| seq <= completed))
    } else {
        uses.iter().all(|u| u.resolved_seq().is_some())
    }
}

/// The device arena as compaction sees it: its shared (not dedicated) segments with their
/// free ranges and blocks.
fn arena_view<S: SegmentStorage>(st: &State<S>) -> Vec<SegmentView> {
    let arena = DEVICE_ARENA;
    let mut view: IdMap<u32, SegmentView> = st
        .segments
        .iter()
        .filter(|(_, s)| s.pool.arena() == arena && !s.dedicated)
        .map(|(&id, s)| {
            let free = st.free[arena].segment_ranges(id).collect();
            (id, SegmentView { id, size: s.size, free, blocks: Vec::new() })
        })
        .collect();
    for (id, b) in st.blocks.iter() {
        if let Some(v) = view.get_mut(&b.segment) {
            v.blocks.push(Resident { id, offset: b.offset, size: b.size, movable: movable(b) });
        }
    }
    let mut view: Vec<SegmentView> = view.into_values().collect();
    for v in &mut view {
        v.blocks.sort_unstable_by_key(|b| b.offset);
    }
    // Plans must not depend on hash order.
    view.sort_unstable_by_key(|v| v.id);
    view
}

/// The figures of `arena`'s pools.
fn arena_pools(stats: &HeapStats, arena: usize) -> impl Iterator<Item = (PoolKind, &PoolStats)> {
    PoolKind::ALL.iter().filter(move |p| p.arena() == arena).map(|&p| (p, stats.pool(p)))
}

/// Bytes allocated in `arena` (its pools' active and pending blocks).
fn arena_live(stats: &HeapStats, arena: usize) -> u64 {
    arena_pools(stats, arena).map(|(_, p)| p.allocated_bytes.current).sum()
}

/// The segments of `arena` no block lives in.
fn idle_segments<S: SegmentStorage>(st: &State<S>, arena: usize) -> impl Iterator<Item = (&u32, &Segment<S::Segment>)> {
    st.segments.iter().filter(move |(_, s)| s.live_blocks == 0 && s.pool.arena() == arena)
}

/// What a miss in `arena` sizes its segment by, once idle segments of `released` bytes went.
fn miss_figures<S: SegmentStorage>(st: &State<S>, arena: usize, released: u64) -> ArenaFigures {
    ArenaFigures {
        released,
        live_peak: st.live_peak[arena],
        warm: st.warm & (1 << arena) != 0,
        free: st.free[arena].free_bytes(),
        ..arena_figures(&st.stats, arena)
    }
}

/// Live and reserved bytes of an arena's pools.
fn arena_figures(stats: &HeapStats, arena: usize) -> ArenaFigures {
    let mut figures = ArenaFigures::default();
    for (_, pool) in arena_pools(stats, arena) {
        figures.live += pool.allocated_bytes.current;
        figures.reserved += pool.reserved_bytes.current;
    }
    figures
}

pub(super) fn freed(id: u64) -> Error {
    Error::UseAfterFree(format!("block {id} was freed; allocate a new block"))
}
