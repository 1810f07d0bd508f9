//! Pools and size classes, after MPSAllocator (usage class x size class, plus a scalar
//! pool), and the size of the segment a request that finds no room gets.
//!
//! Every sizing rule serves the target of `wgalloc_core::replay::target`, bytes first: peak
//! reserved <= 1.15 x peak live + 8 MiB and <= PyTorch's caching policy on every trace of
//! `bench/data`; driver allocations count as a total over a trace set (and at most 2 x
//! PyTorch's + 2 per trace), so a rule kept for driver calls stays within the bytes. `crates/wgalloc-core/tests/replay.rs`
//! (`recorded_traces_meet_the_target_but_their_known_misses` and its generated twin) holds the
//! rules together to it; each note below names the unit test that holds the rule alone.

// Note [Arenas]
// The small and large pools of one usage share one free list (an arena), so a small block can
// take a hole between large ones: small tensors never need segments of their own while large
// segments have room. Held by `small_and_large_blocks_share_segments` (allocator_tests).

// Note [Small-arena growth]
// Invariant: a workload of small tensors reserves no more than PyTorch's 2 MiB small segments
// would hold its bytes in (bytes first), and no segment of more than 2 MiB: a small request that
// finds no room brings the arena to the next multiple of 2 MiB above what it holds with the
// request, so the first segment is PyTorch's small segment. Driver calls then grow with the
// small bytes, as PyTorch's do; a first segment of less than 2 MiB splits a small model's few
// MiB across more segments than PyTorch's and fragments them. Held by
// `small_requests_bring_the_arena_to_a_multiple_of_2_mib`.

// Note [Large-request budget]
// Invariant: after a large request, the arena holds at most 1.05 x the bytes live with it plus a
// slack of min(8 MiB, 4 x those bytes), the target's headroom; the slack lets the first segments
// of a large model grow in few driver calls. No floor beyond it: PyTorch's 20 MiB large segment
// (or any multiple of the first request) takes a model of a few MiB past 1.15 x live + 8 MiB,
// and the pairs below hold the driver calls it would save. Held by
// `large_requests_grow_the_arena_to_the_budget`.

// Note [Dominant requests get no slack]
// Invariant: in an arena that still holds segments, a large request at least as large as every
// other byte live with it (`DOMINANT_SHARE` of the live bytes) brings the arena to 1.05 x live at
// most (and takes back idle bytes to that), without the slack. Such a request is one of the
// model's largest tensors (an output, attention scores): the slack beside it is a third of a
// small model's bytes (PyTorch's rounding reserves 1.10-1.17 x there) and stays idle, as the
// smaller requests around it find room in the segments the arena holds. The slack stays for
// an arena's first segment and for the climbing steps of smaller requests. Held by
// `a_dominant_request_in_a_held_arena_gets_no_slack`.

// Note [Pairs below 10 MiB]
// Invariant: a large request under 10 MiB (PyTorch's `kMinLargeAlloc`) that the arena's free bytes
// could not hold gets a segment with room for a second one like it, within the target: models ask
// for such tensors in pairs, and a segment holding the pair later holds a tensor twice the size.
// A miss the free bytes could hold (fragmentation, which compaction left within its budget) gets
// no pair: the second finds room in them. Held by
// `a_large_request_under_10_mib_gets_room_for_two_within_the_target`.

// Note [Geometric growth]
// Invariant: a live set that climbs in steps larger than the slack makes a logarithmic number of
// driver calls: a large request grows the arena by at least an eighth of its segments, within
// 1.10 x live + 8 MiB (below the target, as PyTorch's rounding reserves 1.10-1.17 x on such
// models). Held by `a_large_request_grows_the_arena_by_an_eighth_up_to_1_10_x_live` and
// `repeated_training_steps_stop_calling_the_driver_after_the_second`
// (crates/wgalloc-core/tests/replay.rs).

// Note [Idle segments are replaced]
// A WebGPU buffer cannot grow, so before sizing a segment the allocator releases the arena's idle
// ones and the new segment takes their bytes back with the request's, up to the growth budget
// of the most bytes ever live at once in the arena. Invariant: a workload that frees and then
// needs again the same bytes (a training step's backward and next forward pass) does not regrow
// the heap every step. Held by `a_miss_takes_back_the_idle_bytes_it_released_up_to_the_budget_of_the_peak`
// and `a_miss_replaces_idle_segments_by_one_that_covers_the_request` (allocator_tests).

// Note [Moves within a tenth]
// Invariant: where a miss's new segment keeps the arena within the target (1.15 x live + 8 MiB),
// compaction copies no more than `MAX_MOVED_SHARE` of the bytes requested since the accumulated
// stats were reset, less what it moved before: the segment costs no more bytes than the target
// allows, and the moves are a part of the target too. Past the target bytes come first and a plan
// keeps only its per-request limit. The segment is the one the miss would get, a fragmentation
// miss's without a pair (Note [Pairs below 10 MiB]). The budget chooses between moving and
// growing: a request that would otherwise fail (no segment fits under the high watermark) moves
// past it, as the OOM ladder's last rung. Held by
// `moves_stay_within_a_tenth_of_the_bytes_allocated`,
// `a_request_that_would_fail_moves_blocks_past_the_tenth`,
// `a_miss_within_the_target_grows_rather_than_move_past_a_tenth`,
// `a_detectors_fragmented_miss_grows_rather_than_move_past_a_tenth` (allocator_tests)
// and the moved-bytes part of the target (tests/replay.rs, with its known misses).

// Note [Growth past a warm start]
// Invariant: in an arena a warm start reserved segments for, a large miss brings the arena to at
// most the warm plan (`profile::warm_bytes`) of the larger of its live peak (the profile's, or
// the run's since) and the bytes live with the request, or gets a segment of the request's size
// where that is more; and where a segment smaller than that opens a range once the blocks in the
// way move into it, it gets that segment, of just those blocks' bytes (a top-up). The cold rules
// (floor, pairs, slack, an eighth) size segments for a workload the heap has not seen; a warm
// arena knows its scale, and a draw that peaks past its profile does so by a fraction of it.
// Held by `a_warm_heap_grows_past_its_profile_by_what_the_draw_needs` (allocator_tests) and
// `warm_starts_of_the_committed_mixes_meet_their_target_but_their_known_misses`
// (crates/wgalloc-core/tests/replay.rs).

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

/// Requests up to this size go to a small pool.
pub const MAX_SMALL_ALLOC: u64 = MIB;
/// Small segments bring the arena to a multiple of this (PyTorch's small segment).
pub const SMALL_STEP: u64 = 2 * MIB;
/// Large requests: the arena grows to `LIVE_FACTOR` x (live + request) plus a slack of
/// `SLACK_PER_LIVE` x (live + request), at most `MAX_SLACK`.
pub const LIVE_FACTOR: f64 = 1.05;
pub const SLACK_PER_LIVE: u64 = 4;
pub const MAX_SLACK: u64 = 8 * MIB;
/// A large request at least this share of the bytes live with it gets no slack where the arena
/// holds segments.
pub const DOMINANT_SHARE: f64 = 0.5;
/// A large request grows an arena by at least 1 / `ARENA_GROWTH_DIVISOR` of its segments, up to
/// `GEOMETRIC_FACTOR` x live + `TARGET_HEADROOM`.
pub const ARENA_GROWTH_DIVISOR: u64 = 8;
pub const GEOMETRIC_FACTOR: f64 = 1.10;
/// A large request below this gets a segment with room for two like it, up to the target.
pub const PAIR_BELOW: u64 = 10 * MIB;
/// The target the sizing keeps to: peak reserved <= `TARGET_FACTOR` x peak live + `TARGET_HEADROOM`.
pub const TARGET_FACTOR: f64 = 1.15;
pub const TARGET_HEADROOM: u64 = 8 * MIB;
/// Compaction moves at most this share of the bytes requested.
pub const MAX_MOVED_SHARE: f64 = 0.10;
/// Segment sizes are multiples of this (drivers hand out pages anyway).
pub const SEGMENT_GRANULE: u64 = 64 * KIB;
/// Scalar values (uniforms, small constants) live in small segments of their own.
pub const MAX_SCALAR: u64 = 64 * KIB;
pub const SCALAR_HEAP: u64 = 256 * KIB;

/// What a block is for: decides its pool (and, on a device, its segments' buffer usages).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Usage {
    /// Device-local: STORAGE | COPY_SRC | COPY_DST.
    Device,
    /// Mappable and bindable where the adapter has MAPPABLE_PRIMARY_BUFFERS.
    Shared,
}

impl Usage {
    pub fn parse(name: &str) -> Option<Usage> {
        match name {
            "device" | "private" => Some(Usage::Device),
            "shared" => Some(Usage::Shared),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PoolKind {
    DeviceSmall,
    DeviceLarge,
    SharedSmall,
    SharedLarge,
    Scalar,
}

impl PoolKind {
    pub const ALL: [PoolKind; 5] =
        [PoolKind::DeviceSmall, PoolKind::DeviceLarge, PoolKind::SharedSmall, PoolKind::SharedLarge, PoolKind::Scalar];

    pub fn index(self) -> usize {
        self as usize
    }

    pub fn as_str(self) -> &'static str {
        match self {
            PoolKind::DeviceSmall => "device-small",
            PoolKind::DeviceLarge => "device-large",
            PoolKind::SharedSmall => "shared-small",
            PoolKind::SharedLarge => "shared-large",
            PoolKind::Scalar => "scalar",
        }
    }

    pub fn for_request(usage: Usage, aligned_size: u64) -> PoolKind {
        let small = aligned_size <= MAX_SMALL_ALLOC;
        match (usage, small) {
            (Usage::Device, true) => PoolKind::DeviceSmall,
            (Usage::Device, false) => PoolKind::DeviceLarge,
            (Usage::Shared, true) => PoolKind::SharedSmall,
            (Usage::Shared, false) => PoolKind::SharedLarge,
        }
    }

    /// The free list (arena) the pool's segments are in: small and large pools of one usage
    /// share one, so a small block can take a hole between large ones.
    pub fn arena(self) -> usize {
        match self {
            PoolKind::DeviceSmall | PoolKind::DeviceLarge => 0,
            PoolKind::SharedSmall | PoolKind::SharedLarge => 1,
            PoolKind::Scalar => 2,
        }
    }

    pub fn is_small(self) -> bool {
        matches!(self, PoolKind::DeviceSmall | PoolKind::SharedSmall)
    }

    pub fn is_shared(self) -> bool {
        matches!(self, PoolKind::SharedSmall | PoolKind::SharedLarge)
    }
}

/// What the sizing of a new segment looks at: the arena's figures once its idle segments
/// were released.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ArenaFigures {
    /// Bytes of blocks live in the arena (active and pending).
    pub live: u64,
    /// Bytes of the arena's remaining segments.
    pub reserved: u64,
    /// Bytes of the idle segments just released for this request.
    pub released: u64,
    /// The most bytes ever live at once in the arena.
    pub live_peak: u64,
    /// A warm start reserved segments for the arena (Note [Growth past a warm start]).
    pub warm: bool,
    /// Free bytes of the arena's segments: a miss they could hold is fragmentation (Note
    /// [Pairs below 10 MiB]).
    pub free: u64,
}

/// The size of a new segment for a block of `aligned_size` bytes in `pool`, and whether the
/// block must be alone in it (above the binding limit). Never smaller than the request nor
/// larger than the device's max buffer size.
pub fn segment_size(
    pool: PoolKind,
    aligned_size: u64,
    arena: ArenaFigures,
    max_buffer_size: u64,
    max_binding: u64,
) -> (u64, bool) {
    if aligned_size > max_binding {
        return (aligned_size, true);
    }
    let size = match pool {
        PoolKind::Scalar => SCALAR_HEAP,
        // Note [Small-arena growth]
        _ if aligned_size <= MAX_SMALL_ALLOC => {
            (arena.reserved + aligned_size).next_multiple_of(SMALL_STEP) - arena.reserved
        }
        _ if arena.warm => {
            // Note [Growth past a warm start]
            let want = crate::profile::warm_bytes((arena.live + aligned_size).max(arena.live_peak));
            aligned_size.max(granules_within(want.saturating_sub(arena.reserved)))
        }
        _ => {
            let live = arena.live + aligned_size;
            // Note [Dominant requests get no slack]
            let dominant = arena.reserved > 0 && aligned_size as f64 >= DOMINANT_SHARE * live as f64;
            let allowed = |live: u64| if dominant { (LIVE_FACTOR * live as f64) as u64 } else { growth_budget(live) };
            // Note [Large-request budget], [Geometric growth], [Idle segments are replaced]
            let budget = allowed(live).saturating_sub(arena.reserved);
            let ceiling = headroom_over(GEOMETRIC_FACTOR, live);
            let geometric =
                (arena.reserved / ARENA_GROWTH_DIVISOR).min(granules_within(ceiling.saturating_sub(arena.reserved)));
            let kept =
                (arena.released + aligned_size).min(allowed(arena.live_peak.max(live)).saturating_sub(arena.reserved));
            let grown = budget.max(geometric).max(kept);
            // Note [Pairs below 10 MiB]
            if aligned_size < PAIR_BELOW && arena.free < aligned_size {
                grown.max((2 * aligned_size).min(granules_within(target(live).saturating_sub(arena.reserved))))
            } else {
                grown
            }
        }
    };
    let size = size.max(aligned_size).div_ceil(SEGMENT_GRANULE).saturating_mul(SEGMENT_GRANULE);
    (size.min(max_buffer_size).max(aligned_size), false)
}

/// The segment a large miss in a cold arena tops the arena up with (see the allocator's
/// `top_up`): the room left within the growth budget, where the miss's own segment of `size`
/// would take the arena past the budget and the room cannot hold the request by itself.
pub fn top_up_room(arena: ArenaFigures, aligned_size: u64, size: u64) -> Option<u64> {
    let budget = growth_budget(arena.live + aligned_size);
    let room = granules_within(budget.saturating_sub(arena.reserved));
    (arena.reserved + size > budget && room < aligned_size).then_some(room)
}

/// The whole granules within `bytes`: a segment of that size, rounded up, stays within them.
pub(super) fn granules_within(bytes: u64) -> u64 {
    bytes / SEGMENT_GRANULE * SEGMENT_GRANULE
}

/// What an arena may hold for `live` bytes: `LIVE_FACTOR` x live plus the slack.
pub(super) fn growth_budget(live: u64) -> u64 {
    (LIVE_FACTOR * live as f64) as u64 + MAX_SLACK.min(SLACK_PER_LIVE * live)
}

/// The most a heap may reserve for `live` bytes: `TARGET_FACTOR` x live + `TARGET_HEADROOM`.
pub fn target(live: u64) -> u64 {
    headroom_over(TARGET_FACTOR, live)
}

/// What growth by an eighth stays within for `live` bytes: `GEOMETRIC_FACTOR` x live + `TARGET_HEADROOM`.
pub fn growth_ceiling(live: u64) -> u64 {
    headroom_over(GEOMETRIC_FACTOR, live)
}

/// `factor` x `live` + `TARGET_HEADROOM`: the target, or the ceiling of growth by an eighth.
fn headroom_over(factor: f64, live: u64) -> u64 {
    (factor * live as f64) as u64 + TARGET_HEADROOM
}

/// What compaction may still move once `allocated` bytes were requested and `moved` moved.
pub fn move_budget(allocated: u64, moved: u64) -> u64 {
    ((MAX_MOVED_SHARE * allocated as f64) as u64).saturating_sub(moved)
}

/// The segment an idle arena's `idle` bytes of segments merge into: their total, but no more
/// than the growth budget of the most bytes ever live at once in the arena (`live_peak`). Idle
/// segments carry the last request's fragmentation; one contiguous segment needs less, and
/// compaction fixes a later fragmented miss.
pub fn merged_size(idle: u64, live_peak: u64) -> u64 {
    idle.min(growth_budget(live_peak).div_ceil(SEGMENT_GRANULE).saturating_mul(SEGMENT_GRANULE))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn size(pool: PoolKind, request: u64, live: u64, reserved: u64) -> u64 {
        let (s, dedicated) =
            segment_size(pool, request, ArenaFigures { live, reserved, ..Default::default() }, 2 << 30, 128 * MIB);
        assert!(!dedicated && s >= request && s % SEGMENT_GRANULE == 0);
        s
    }

    #[test]
    fn small_requests_bring_the_arena_to_a_multiple_of_2_mib() {
        assert_eq!(size(PoolKind::DeviceSmall, 256, 0, 0), 2 * MIB, "PyTorch's small segment first");
        assert_eq!(size(PoolKind::DeviceSmall, MIB, 0, 0), 2 * MIB, "for the largest small request too");
        assert_eq!(size(PoolKind::DeviceSmall, 256, 2 * MIB, 2 * MIB), 2 * MIB, "then 2 MiB at a time");
        assert_eq!(size(PoolKind::DeviceSmall, 900 * KIB, MIB, 1856 * KIB), 2240 * KIB, "to 4 MiB past 2 MiB");
        assert_eq!(size(PoolKind::SharedSmall, 256, 4 * MIB, 4 * MIB), 2 * MIB);
        // Beside large segments: to the next multiple of 2 MiB of the arena's bytes.
        assert_eq!(size(PoolKind::DeviceSmall, 256, 40 * MIB, 64 * MIB + 320 * KIB), 1728 * KIB);
        assert_eq!(size(PoolKind::Scalar, 16, 0, 0), SCALAR_HEAP);
    }

    fn granules_up(bytes: u64) -> u64 {
        bytes.div_ceil(SEGMENT_GRANULE) * SEGMENT_GRANULE
    }

    #[test]
    fn large_requests_grow_the_arena_to_the_budget() {
        // First segment: 1.05 x 2 MiB plus 4 x 2 MiB of slack, capped at 8 MiB (above 5 x 2 MiB).
        assert_eq!(size(PoolKind::DeviceLarge, 2 * MIB, 0, 0), 10368 * KIB);
        // Slack is 4 x the need while that is under 8 MiB: 1.05 x 1.5 + 6 MiB.
        assert_eq!(size(PoolKind::DeviceLarge, MIB + MIB / 2, 0, 0), 7808 * KIB);
        // Later: 1.05 x (60 + 20) MiB + 8 MiB, less the 70 MiB reserved.
        assert_eq!(size(PoolKind::DeviceLarge, 20 * MIB, 60 * MIB, 70 * MIB), 22 * MIB);
        // Fragmentation: the budget is spent, the request still gets a segment of its size.
        assert_eq!(size(PoolKind::DeviceLarge, 20 * MIB, 60 * MIB, 200 * MIB), 20 * MIB);
    }

    #[test]
    fn a_first_large_request_gets_the_budget_and_no_floor() {
        // 1.05 x 3 MiB + 8 MiB in granules, below the 12 MiB of 4 x the request: a model of a
        // few MiB whose first tensor is 3 MiB stays within its target.
        assert_eq!(size(PoolKind::DeviceLarge, 3 * MIB, 0, 0), granules_up((1.05 * (3 * MIB) as f64) as u64 + 8 * MIB));
        // Beside 4 MiB of small segments: room for two 8 MiB requests stops at the target,
        // 1.15 x 10 + 8 MiB less the 4 MiB held (15.5 MiB, in granules), not at 20 MiB of large
        // segments.
        assert_eq!(size(PoolKind::DeviceLarge, 8 * MIB, 2 * MIB, 4 * MIB), 15872 * KIB);
    }

    #[test]
    fn a_dominant_request_in_a_held_arena_gets_no_slack() {
        // 17 MiB live in a 17.25 MiB segment, 11.5 MiB of idle segments released, a second
        // 17 MiB output: 1.05 x 34 MiB less the 17.25 held, not the budget's 8 MiB more.
        let held = ArenaFigures {
            live: 17 * MIB,
            reserved: 17 * MIB + 256 * KIB,
            released: 11 * MIB + 512 * KIB,
            live_peak: 17 * MIB,
            ..Default::default()
        };
        let (s, _) = segment_size(PoolKind::DeviceLarge, 17 * MIB, held, 2 << 30, 128 * MIB);
        assert_eq!(s, granules_up((1.05 * (34 * MIB) as f64) as u64 - (17 * MIB + 256 * KIB)));
        // Just under half the live bytes: the budget's slack.
        let (s, _) = segment_size(PoolKind::DeviceLarge, 16 * MIB, held, 2 << 30, 128 * MIB);
        assert_eq!(s, granules_up(growth_budget(33 * MIB) - (17 * MIB + 256 * KIB)));
        // An empty arena's first segment keeps the slack, however large the request.
        assert_eq!(size(PoolKind::DeviceLarge, 17 * MIB, 0, 0), granules_up(growth_budget(17 * MIB)));
    }

    #[test]
    fn a_large_request_under_10_mib_gets_room_for_two_within_the_target() {
        // Two 4 MiB requests (8 MiB) rather than the budget's 1.05 x 18 + 8 - 20 = 6.9 MiB: the
        // arena's 28 MiB stay under the target of 1.15 x 18 + 8 = 28.7 MiB.
        assert_eq!(size(PoolKind::DeviceLarge, 4 * MIB, 14 * MIB, 20 * MIB), 8 * MIB);
        // Room for two 6 MiB requests would cross the target, 1.15 x 16 + 8 = 26.4 MiB: the
        // segment stops at it, in whole granules (6528 KiB), above the budget's 4.8 MiB.
        assert_eq!(size(PoolKind::DeviceLarge, 6 * MIB, 10 * MIB, 20 * MIB), 6528 * KIB);
        // A 10 MiB request gets no pair: the budget, or the request itself.
        assert_eq!(size(PoolKind::DeviceLarge, 10 * MIB, 10 * MIB, 20 * MIB), 10 * MIB);
        // Fragmentation (6 MiB free for a 4 MiB request): the budget alone, 1.05 x 18 + 8 - 20.
        let fragmented = ArenaFigures { live: 14 * MIB, reserved: 20 * MIB, free: 6 * MIB, ..Default::default() };
        let (s, _) = segment_size(PoolKind::DeviceLarge, 4 * MIB, fragmented, 2 << 30, 128 * MIB);
        assert_eq!(s, granules_up(((1.05 * (18 * MIB) as f64) as u64 + 8 * MIB) - 20 * MIB));
    }

    #[test]
    fn a_large_request_grows_the_arena_by_an_eighth_up_to_1_10_x_live() {
        // 400 MiB of segments, 420 MiB live with the request: the budget (1.05 x 420 + 8 MiB)
        // asks for 49 MiB, an eighth of the arena is 50 MiB, within 1.10 x 420 + 8 = 470 MiB.
        assert_eq!(size(PoolKind::DeviceLarge, 40 * MIB, 380 * MIB, 400 * MIB), 50 * MIB);
        // 372 MiB live: 1.10 x 372 + 8 = 417.2 MiB leaves 17.2 MiB, in granules.
        assert_eq!(size(PoolKind::DeviceLarge, 12 * MIB, 360 * MIB, 400 * MIB), 17600 * KIB);
    }

    #[test]
    fn a_miss_takes_back_the_idle_bytes_it_released_up_to_the_budget_of_the_peak() {
        let grown = |released, live_peak| {
            let arena = ArenaFigures { live: 50 * MIB, reserved: 60 * MIB, released, live_peak, ..Default::default() };
            segment_size(PoolKind::DeviceLarge, 20 * MIB, arena, 2 << 30, 128 * MIB).0
        };
        assert_eq!(grown(100 * MIB, 200 * MIB), 120 * MIB, "the released bytes and the request");
        // 1.05 x 100 MiB + 8 MiB = 113 MiB in all, less the 60 MiB still reserved.
        assert_eq!(grown(100 * MIB, 100 * MIB), 53 * MIB, "capped by the budget of the peak");
        // Nothing released: the budget for 70 MiB live (1.05 x 70 + 8 MiB, less 60 MiB).
        assert_eq!(grown(0, 200 * MIB), 22016 * KIB);
    }

    #[test]
    fn moves_stay_within_a_tenth_of_the_bytes_allocated() {
        assert_eq!(move_budget(100 * MIB, 0), 10 * MIB);
        assert_eq!(move_budget(100 * MIB, 4 * MIB), 6 * MIB);
        assert_eq!(move_budget(100 * MIB, 12 * MIB), 0, "spent: nothing moves");
    }

    #[test]
    fn a_merge_takes_at_most_the_budget_of_the_live_peak() {
        assert_eq!(merged_size(30 * MIB, 40 * MIB), 30 * MIB, "the idle total when smaller");
        assert_eq!(merged_size(134 * MIB, 100 * MIB), 113 * MIB, "1.05 x 100 MiB + 8 MiB");
    }

    #[test]
    fn device_limits_bound_the_segment() {
        let (s, dedicated) =
            segment_size(PoolKind::DeviceLarge, 200 * MIB, ArenaFigures::default(), 2 << 30, 128 * MIB);
        assert_eq!((s, dedicated), (200 * MIB, true), "above the binding limit: alone, exact");
        let (s, _) = segment_size(PoolKind::DeviceLarge, 100 * MIB, ArenaFigures::default(), 101 * MIB, 128 * MIB);
        assert_eq!(s, 101 * MIB, "capped by the max buffer size");
        assert_eq!(PoolKind::for_request(Usage::Device, MIB), PoolKind::DeviceSmall);
        assert_eq!(PoolKind::for_request(Usage::Shared, MIB + 256), PoolKind::SharedLarge);
    }
}
