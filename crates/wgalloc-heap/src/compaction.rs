//! Where compaction moves live blocks (VMA-style defragmentation), planned on a view of one
//! arena. Pure: the allocator builds the view from its books, copies the bytes and rebooks
//! the ranges, so every plan is unit-tested without a device.
//!
//! The plans, measured on the eager traces (`heap_replay`):
//! - [`open_range`] on a large miss that finds enough free bytes but no range, whichever moves
//!   fewer bytes of: the blocks of the emptiest segments to the tightest free ranges of fuller
//!   ones (*across*), or the blocks in the cheapest window of the request's size to free
//!   ranges of any other segment (*window*: a segment may hold one block in the way while an
//!   emptier one has room for it). Else the blocks of one segment slide towards one end
//!   (*slide*: the segment and direction that move the fewest bytes), until a range of the
//!   request's size exists. Else the smallest blocks of one segment go elsewhere until the
//!   rest of it slides (*clear, then slide*: a large block in the middle of a segment, with
//!   small ones on both sides);
//! - [`open_range_into`]: the same with a segment not created yet beside the arena's, for a
//!   large miss that *tops up* the arena (see the allocator) instead of growing it past its
//!   growth budget;
//! - [`evacuate`] on a large miss that creates a segment above the growth budget: the
//!   emptiest segments' blocks go to the others (fuller ones first), so the emptied segments'
//!   bytes go into the new segment instead of staying beside it.

/// Most pieces a move within one segment is copied in. WebGPU cannot copy a buffer into
/// itself, so such moves are copied by a kernel; one that overlaps its old place (a shift
/// smaller than the block) goes in pieces no longer than the shift, in order.
pub const MAX_SLIDE_PIECES: u64 = 8;

/// Pieces shortened to fit a binding are whole multiples of this (the largest storage offset
/// alignment WebGPU allows), so every piece's binding offset stays aligned.
const PIECE_UNIT: u64 = 256;

/// The length of the pieces a move of `size` bytes by `shift` within one segment is copied in:
/// at most the shift (no piece overlaps itself), and short enough that a piece's old and new
/// place fit one binding of `max_span` bytes. `None` when not even one unit fits.
pub fn slide_piece(shift: u64, size: u64, max_span: u64) -> Option<u64> {
    let step = shift.min(size);
    if shift == 0 || shift.saturating_add(step) <= max_span {
        return (step > 0).then_some(step);
    }
    let room = max_span.checked_sub(shift)? / PIECE_UNIT * PIECE_UNIT;
    (room > 0).then_some(room)
}

/// A live block as the planner sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resident {
    pub id: u64,
    pub offset: u64,
    pub size: u64,
    /// Nothing can be using it at its place (see the allocator's `movable`).
    pub movable: bool,
}

/// One segment of the arena: its free ranges and its blocks, each sorted by offset.
#[derive(Debug, Clone, Default)]
pub struct SegmentView {
    pub id: u32,
    pub size: u64,
    pub free: Vec<(u64, u64)>,
    pub blocks: Vec<Resident>,
}

impl SegmentView {
    fn live(&self) -> u64 {
        self.blocks.iter().map(|b| b.size).sum()
    }
}

/// Block `block` goes to offset `at` of segment `to`. Moves run in order: a move may write
/// over the old place of an earlier one (a slide).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Move {
    pub block: u64,
    pub to: u32,
    pub at: u64,
}

/// The most one plan may copy: compaction saves a segment's worth of bytes, and copying many
/// times that (thousands of small blocks out of a fragmented arena) costs more than it saves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    pub bytes: u64,
    pub moves: usize,
}

impl Limit {
    /// Four times the request's bytes, at most 1024 blocks: never reached on the eager traces
    /// (twice the request already costs ratio on some), a bound on a pathological arena.
    pub fn for_request(need: u64) -> Limit {
        Limit { bytes: need.saturating_mul(4), moves: 1024 }
    }

    /// What is left of the limit once `spent` is copied.
    fn less(self, spent: Spent) -> Limit {
        Limit { bytes: self.bytes.saturating_sub(spent.bytes), moves: self.moves.saturating_sub(spent.moves) }
    }

    /// Whether a plan of `moves` blocks and `bytes` bytes stays within the limit.
    fn admits(self, bytes: u64, moves: usize) -> bool {
        bytes <= self.bytes && moves <= self.moves
    }
}

/// What a plan copies so far.
#[derive(Debug, Clone, Copy, Default)]
struct Spent {
    bytes: u64,
    moves: usize,
}

impl Spent {
    /// Counts one more move of `size` bytes; false (and nothing counted) past `limit`.
    fn add(&mut self, size: u64, limit: Limit) -> bool {
        if !limit.admits(self.bytes.saturating_add(size), self.moves + 1) {
            return false;
        }
        self.bytes += size;
        self.moves += 1;
        true
    }
}

/// Moves after which a free range of `need` bytes exists; `None` when no plan reaches it.
/// A move within one segment is copied in pieces whose old and new place fit `max_span` bytes
/// (one binding of the copy kernel, see [`slide_piece`]); a plan copies no more than `limit`.
pub fn open_range(view: &[SegmentView], need: u64, max_span: u64, limit: Limit) -> Option<Vec<Move>> {
    match (across(view, need, limit), clear_window(view, need, limit)) {
        (Some(a), Some(w)) => Some(if w.0 < a.0 { w.1 } else { a.1 }),
        (a, w) => a.or(w).map(|(_, plan)| plan),
    }
    .or_else(|| slide(view, need, max_span, limit).map(|(_, plan)| plan))
    .or_else(|| clear_then_slide(view, need, max_span, limit))
}

/// [`open_range`] with `fresh`, a segment not created yet, beside the arena's.
pub fn open_range_into(
    view: &[SegmentView],
    fresh: SegmentView,
    need: u64,
    max_span: u64,
    limit: Limit,
) -> Option<Vec<Move>> {
    let mut with: Vec<SegmentView> = view.to_vec();
    with.push(fresh);
    open_range(&with, need, max_span, limit)
}

/// Most blocks [`clear_then_slide`] moves out of one segment.
const CLEAR_MAX_BLOCKS: usize = 32;

/// The smallest blocks of one segment to the tightest free ranges of the others, one at a
/// time, until the rest of it slides (or no longer needs to) to open a range of `need` bytes:
/// a large block sits in the middle of a segment whose small ones keep it from sliding.
/// The plan that moves the fewest bytes.
fn clear_then_slide(view: &[SegmentView], need: u64, max_span: u64, limit: Limit) -> Option<Vec<Move>> {
    let mut best: Option<(u64, Vec<Move>)> = None;
    for (rank, seg) in view.iter().enumerate().filter(|(_, s)| s.size >= need) {
        let mut free = FreeRanges::new(
            view.iter().enumerate().map(|(r, s)| if r == rank { Vec::new() } else { s.free.clone() }).collect(),
        );
        let mut small: Vec<&Resident> = seg.blocks.iter().filter(|b| b.movable).collect();
        small.sort_unstable_by_key(|b| (b.size, b.offset));
        let mut rest = seg.clone();
        let (mut plan, mut spent) = (Vec::new(), Spent::default());
        for b in small.into_iter().take(CLEAR_MAX_BLOCKS) {
            let Some((to, at)) = free.take_tightest(b.size, view.len()) else { break };
            if !spent.add(b.size, limit) {
                break;
            }
            plan.push(Move { block: b.id, to: view[to].id, at });
            rest.blocks.retain(|x| x.id != b.id);
            rest.free = gaps(&rest);
            let tail = if rest.free.iter().any(|r| r.1 >= need) {
                Some((0, Vec::new()))
            } else {
                slide(std::slice::from_ref(&rest), need, max_span, limit.less(spent))
            };
            if let Some((moved, tail)) = tail {
                let total = spent.bytes + moved;
                if best.as_ref().is_none_or(|(least, _)| total < *least) {
                    plan.extend(tail);
                    best = Some((total, plan));
                }
                break;
            }
        }
    }
    best.map(|(_, plan)| plan)
}

/// The free ranges between a segment's blocks.
fn gaps(seg: &SegmentView) -> Vec<(u64, u64)> {
    let mut free = Vec::new();
    let mut at = 0;
    for b in &seg.blocks {
        if b.offset > at {
            free.push((at, b.offset - at));
        }
        at = b.offset + b.size;
    }
    if seg.size > at {
        free.push((at, seg.size - at));
    }
    free
}

/// Most windows [`clear_window`] tries to clear, cheapest first.
const WINDOW_TRIES: usize = 8;

/// The blocks overlapping the cheapest `need`-byte window of one segment, to the tightest
/// free ranges of the other segments. Unlike [`across`], blocks may go to emptier segments:
/// the window is chosen where the fewest bytes stand in the way.
fn clear_window(view: &[SegmentView], need: u64, limit: Limit) -> Option<(u64, Vec<Move>)> {
    let mut windows: Vec<(u64, usize, u64)> = Vec::new();
    for (rank, seg) in view.iter().enumerate().filter(|(_, s)| s.size >= need) {
        let blocks = &seg.blocks;
        let mut prefix = vec![0u64; blocks.len() + 1];
        for (i, b) in blocks.iter().enumerate() {
            prefix[i + 1] = prefix[i] + b.size;
        }
        let starts = std::iter::once(0).chain(blocks.iter().map(|b| b.offset + b.size)).chain([seg.size - need]);
        for at in starts.filter(|&at| at + need <= seg.size) {
            // Blocks are sorted and disjoint: those overlapping [at, at + need) are a run.
            let first = blocks.partition_point(|b| b.offset + b.size <= at);
            let end = blocks.partition_point(|b| b.offset < at + need);
            let run = &blocks[first..end.max(first)];
            if run.is_empty() || run.iter().any(|b| !b.movable) {
                continue;
            }
            let bytes = prefix[end] - prefix[first];
            if limit.admits(bytes, run.len()) {
                windows.push((bytes, rank, at));
            }
        }
    }
    windows.sort_unstable();
    windows.dedup();
    for &(bytes, rank, at) in windows.iter().take(WINDOW_TRIES) {
        let seg = &view[rank];
        let mut free = FreeRanges::new(
            view.iter().enumerate().map(|(r, s)| if r == rank { Vec::new() } else { s.free.clone() }).collect(),
        );
        let mut run: Vec<&Resident> =
            seg.blocks.iter().filter(|b| b.offset < at + need && b.offset + b.size > at).collect();
        run.sort_unstable_by(|a, b| b.size.cmp(&a.size).then(a.offset.cmp(&b.offset)));
        let plan: Option<Vec<Move>> = run
            .iter()
            .map(|b| {
                let (to, at) = free.take_tightest(b.size, view.len())?;
                Some(Move { block: b.id, to: view[to].id, at })
            })
            .collect();
        if let Some(plan) = plan {
            return Some((bytes, plan));
        }
    }
    None
}

/// Moves that empty the emptiest segments into free ranges of the others (fuller ones first)
/// until `reclaim` bytes of segments are empty (or no further segment can be). Segments
/// without blocks are left out: they are released anyway. A segment whose blocks would take
/// the plan past `limit` stays. Returns the moves and the bytes emptied.
pub fn evacuate(view: &[SegmentView], reclaim: u64, limit: Limit) -> (Vec<Move>, u64) {
    let order: Vec<&SegmentView> = fullest_first(view).into_iter().filter(|s| !s.blocks.is_empty()).collect();
    let mut free = FreeRanges::new(order.iter().map(|s| s.free.clone()).collect());
    // Segments that took blocks stay (emptying them would move those blocks twice); emptied
    // ones take none.
    let mut took = vec![false; order.len()];
    let mut gone = vec![false; order.len()];
    let (mut plan, mut emptied, mut spent) = (Vec::new(), 0, Spent::default());
    for k in (0..order.len()).rev() {
        if emptied >= reclaim {
            break;
        }
        let seg = order[k];
        if took[k] || seg.blocks.iter().any(|b| !b.movable) {
            continue;
        }
        let mut after = spent;
        if !seg.blocks.iter().all(|b| after.add(b.size, limit)) {
            continue;
        }
        let mut blocks = seg.blocks.clone();
        blocks.sort_unstable_by(|a, b| b.size.cmp(&a.size).then(a.offset.cmp(&b.offset)));
        // Into the fullest other segment with room (the emptier ones may be emptied next),
        // tightest range there; an emptier one when no fuller one has room.
        let mut trial = free.clone();
        let moves: Option<Vec<(usize, Move)>> = blocks
            .iter()
            .map(|b| {
                let (to, at) = trial.take_fullest(b.size, |r| r != k && !gone[r])?;
                Some((to, Move { block: b.id, to: order[to].id, at }))
            })
            .collect();
        if let Some(moves) = moves {
            free = trial;
            for (to, m) in moves {
                took[to] = true;
                plan.push(m);
            }
            gone[k] = true;
            emptied += seg.size;
            spent = after;
        }
    }
    (plan, emptied)
}

/// Blocks of the emptiest segments, highest offset first, to the tightest free ranges of
/// fuller segments, until a range of `need` bytes is free.
fn across(view: &[SegmentView], need: u64, limit: Limit) -> Option<(u64, Vec<Move>)> {
    let order = fullest_first(view);
    if order.len() < 2 {
        return None;
    }
    let mut free = FreeRanges::new(order.iter().map(|s| s.free.clone()).collect());
    let mut candidates: Vec<(usize, u64, u64, u64)> = order
        .iter()
        .enumerate()
        .flat_map(|(rank, s)| s.blocks.iter().filter(|b| b.movable).map(move |b| (rank, b.offset, b.size, b.id)))
        .collect();
    // From the back: the emptiest segment's highest block first.
    candidates.sort_unstable_by(|a, b| b.cmp(a));
    let mut plan = Vec::new();
    let mut spent = Spent::default();
    for (from, offset, size, id) in candidates {
        if free.largest() >= need {
            break;
        }
        let Some((to, at)) = free.take_tightest(size, from) else { continue };
        if !spent.add(size, limit) {
            return None;
        }
        free.give_back(from, offset, size);
        plan.push(Move { block: id, to: order[to].id, at });
    }
    (free.largest() >= need && !plan.is_empty()).then_some((spent.bytes, plan))
}

/// The free ranges of segments by rank (each by offset), indexed by length so a plan of many
/// moves over many ranges stays quick (a fragmented heap can hold tens of thousands).
#[derive(Clone)]
struct FreeRanges {
    per: Vec<Vec<(u64, u64)>>,
    by_len: std::collections::BTreeSet<(u64, usize, u64)>,
}

impl FreeRanges {
    fn new(per: Vec<Vec<(u64, u64)>>) -> Self {
        let by_len = per
            .iter()
            .enumerate()
            .flat_map(|(rank, rs)| rs.iter().filter(|r| r.1 > 0).map(move |&(o, len)| (len, rank, o)))
            .collect();
        FreeRanges { per, by_len }
    }

    fn largest(&self) -> u64 {
        self.by_len.last().map_or(0, |r| r.0)
    }

    /// Takes `size` bytes at the front of the tightest range in a segment ranked below `below`
    /// (the lowest rank, then offset, among equals). Returns (rank, offset).
    fn take_tightest(&mut self, size: u64, below: usize) -> Option<(usize, u64)> {
        let r = *self.by_len.range((size, 0, 0)..).find(|r| r.1 < below)?;
        Some(self.take(r, size))
    }

    /// Takes `size` bytes at the front of the tightest range of the fullest segment (lowest
    /// rank) that `allowed` admits and that has one. Returns (rank, offset).
    fn take_fullest(&mut self, size: u64, allowed: impl Fn(usize) -> bool) -> Option<(usize, u64)> {
        let r = *self.by_len.range((size, 0, 0)..).filter(|r| allowed(r.1)).min_by_key(|r| (r.1, r.0, r.2))?;
        Some(self.take(r, size))
    }

    /// Takes `size` bytes at the front of free range `(len, rank, at)`.
    fn take(&mut self, (len, rank, at): (u64, usize, u64), size: u64) -> (usize, u64) {
        self.by_len.remove(&(len, rank, at));
        let rs = &mut self.per[rank];
        let i = rs.partition_point(|r| r.0 < at);
        if len > size {
            rs[i] = (at + size, len - size);
            self.by_len.insert((len - size, rank, at + size));
        } else {
            rs.remove(i);
        }
        (rank, at)
    }

    /// Frees `size` bytes at `offset` of segment `rank`, merged with free neighbours.
    fn give_back(&mut self, rank: usize, offset: u64, size: u64) {
        let rs = &mut self.per[rank];
        let mut i = rs.partition_point(|r| r.0 < offset);
        let (mut start, mut end) = (offset, offset + size);
        if i < rs.len() && rs[i].0 == end {
            self.by_len.remove(&(rs[i].1, rank, rs[i].0));
            end += rs[i].1;
            rs.remove(i);
        }
        if i > 0 && rs[i - 1].0 + rs[i - 1].1 == start {
            i -= 1;
            self.by_len.remove(&(rs[i].1, rank, rs[i].0));
            start = rs[i].0;
            rs.remove(i);
        }
        rs.insert(i, (start, end - start));
        self.by_len.insert((end - start, rank, start));
    }
}

/// The blocks of one segment slid towards its start or its end, in order, until a gap of
/// `need` bytes opens; a block that must stay (or would take too many pieces or span too
/// much) is stepped over. The plan that moves the fewest bytes.
/// Returns the bytes moved with the plan.
fn slide(view: &[SegmentView], need: u64, max_span: u64, limit: Limit) -> Option<(u64, Vec<Move>)> {
    let mut best: Option<(u64, Vec<Move>)> = None;
    for seg in view.iter().filter(|s| s.size >= need) {
        for towards_start in [true, false] {
            let Some((moved, plan)) = slide_one(seg, need, towards_start, max_span) else { continue };
            if limit.admits(moved, plan.len()) && best.as_ref().is_none_or(|(least, _)| moved < *least) {
                best = Some((moved, plan));
            }
        }
    }
    best
}

fn slide_one(seg: &SegmentView, need: u64, towards_start: bool, max_span: u64) -> Option<(u64, Vec<Move>)> {
    // Positions measured from the end the blocks slide towards.
    let blocks: Vec<Resident> = if towards_start {
        seg.blocks.clone()
    } else {
        seg.blocks.iter().rev().map(|b| Resident { offset: seg.size - b.offset - b.size, ..*b }).collect()
    };
    let (mut cursor, mut moved, mut plan, mut gap) = (0, 0, Vec::new(), None);
    for b in &blocks {
        let shift = b.offset - cursor;
        if shift >= need {
            gap = Some(shift);
            break;
        }
        let pieces = slide_piece(shift, b.size, max_span).map(|piece| b.size.div_ceil(piece));
        if b.movable && shift > 0 && pieces.is_some_and(|n| n <= MAX_SLIDE_PIECES) {
            let at = if towards_start { cursor } else { seg.size - cursor - b.size };
            plan.push(Move { block: b.id, to: seg.id, at });
            moved += b.size;
            cursor += b.size;
        } else {
            cursor = b.offset + b.size;
        }
    }
    let gap = gap.unwrap_or(seg.size - cursor);
    (gap >= need && !plan.is_empty()).then_some((moved, plan))
}

/// Segments by live bytes, fullest first (blocks move towards the front).
fn fullest_first(view: &[SegmentView]) -> Vec<&SegmentView> {
    let mut order: Vec<&SegmentView> = view.iter().collect();
    order.sort_by_cached_key(|s| (std::cmp::Reverse(s.live()), std::cmp::Reverse(s.id)));
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    const NO_LIMIT: Limit = Limit { bytes: u64::MAX, moves: usize::MAX };
    const MIB: u64 = 1 << 20;

    fn block(id: u64, offset: u64, size: u64) -> Resident {
        Resident { id, offset, size, movable: true }
    }

    /// A segment with the given blocks; its free ranges are the gaps between them.
    fn segment(id: u32, size: u64, blocks: Vec<Resident>) -> SegmentView {
        let mut seg = SegmentView { id, size, free: Vec::new(), blocks };
        seg.free = gaps(&seg);
        seg
    }

    /// Applies `plan` to `view` as the allocator would; checks that no two blocks overlap and
    /// returns the largest free range.
    fn apply(view: &[SegmentView], plan: &[Move]) -> u64 {
        let mut places: Vec<(u32, u64, u64, u64)> =
            view.iter().flat_map(|s| s.blocks.iter().map(move |b| (s.id, b.offset, b.size, b.id))).collect();
        for m in plan {
            let p = places.iter_mut().find(|p| p.3 == m.block).expect("a planned block exists");
            *p = (m.to, m.at, p.2, p.3);
        }
        let mut largest = 0;
        for s in view {
            let mut mine: Vec<(u64, u64)> = places.iter().filter(|p| p.0 == s.id).map(|p| (p.1, p.2)).collect();
            mine.sort_unstable();
            let mut at = 0;
            for (o, len) in mine {
                assert!(o >= at, "blocks overlap in segment {}", s.id);
                largest = largest.max(o - at);
                at = o + len;
            }
            assert!(at <= s.size, "a block runs past segment {}", s.id);
            largest = largest.max(s.size - at);
        }
        largest
    }

    #[test]
    fn across_moves_the_emptiest_segment_s_blocks() {
        // Segment 1 holds 60 of 100 with a 30-byte hole; segment 2 holds one 10-byte block
        // in the middle of 50. A 45-byte request needs segment 2's block gone.
        let view = [segment(1, 100, vec![block(1, 0, 30), block(2, 60, 30)]), segment(2, 50, vec![block(3, 20, 10)])];
        let plan = open_range(&view, 45, u64::MAX, NO_LIMIT).unwrap();
        assert_eq!(plan, vec![Move { block: 3, to: 1, at: 90 }], "the tightest range");
        assert!(apply(&view, &plan) >= 45);
    }

    #[test]
    fn a_window_s_block_may_go_to_an_emptier_segment() {
        // A 120-byte request needs segment 2's 13-byte block gone. Segment 1 has a 14-byte hole:
        // across and the window both move the block there.
        let view = [
            segment(1, 136, vec![block(1, 0, 122)]),
            segment(2, 128, vec![block(2, 27, 13)]),
            segment(3, 30, vec![block(3, 0, 15)]),
        ];
        let plan = open_range(&view, 120, u64::MAX, NO_LIMIT).unwrap();
        assert_eq!(plan, vec![Move { block: 2, to: 1, at: 122 }], "the tightest range elsewhere");
        assert!(apply(&view, &plan) >= 120);
        // Segment 1 full: only the emptier segment 3 has room. Across moves blocks towards
        // fuller segments only (segment 3's block into segment 2, which opens nothing); the
        // window moves segment 2's block to segment 3.
        let view = [
            segment(1, 136, vec![block(1, 0, 136)]),
            segment(2, 128, vec![block(2, 27, 13)]),
            segment(3, 30, vec![block(3, 0, 1)]),
        ];
        let plan = open_range(&view, 120, u64::MAX, NO_LIMIT).unwrap();
        assert_eq!(plan, vec![Move { block: 2, to: 3, at: 1 }]);
        assert!(apply(&view, &plan) >= 120);
        // A window over a block that must stay is not cleared; the slide finds nothing either.
        let view = [
            segment(1, 136, vec![block(1, 0, 136)]),
            segment(2, 128, vec![Resident { movable: false, ..block(2, 27, 13) }]),
            segment(3, 30, vec![block(3, 0, 1)]),
        ];
        assert_eq!(open_range(&view, 120, u64::MAX, NO_LIMIT), None);
    }

    #[test]
    fn small_blocks_go_to_a_fresh_segment_so_a_large_one_can_slide() {
        // A 96-byte block at 55 of 200, with 10-byte blocks at 10 and 45 before it: 84 bytes
        // free, no 96-byte range, and no room elsewhere.
        let view = [segment(1, 200, vec![block(1, 10, 10), block(2, 45, 10), block(3, 55, 96)])];
        assert_eq!(open_range(&view, 96, u64::MAX, NO_LIMIT), None);
        // With a fresh 20-byte segment: block 1 moves there, but blocks 2 and 3 slid either way
        // leave 94 bytes. With block 2 moved as well, block 3 slides, its 96 bytes either way;
        // towards the start comes first.
        let fresh = segment(2, 20, Vec::new());
        let plan = open_range_into(&view, fresh.clone(), 96, u64::MAX, NO_LIMIT).unwrap();
        assert_eq!(
            plan,
            vec![Move { block: 1, to: 2, at: 0 }, Move { block: 2, to: 2, at: 10 }, Move { block: 3, to: 1, at: 0 }]
        );
        assert!(apply(&[view[0].clone(), fresh.clone()], &plan) >= 96);
        // A block that must stay keeps the others from sliding past it.
        let pinned = Resident { movable: false, ..block(1, 10, 10) };
        let view = [segment(1, 200, vec![pinned, block(2, 45, 10), block(3, 55, 96)])];
        assert_eq!(open_range_into(&view, fresh, 96, u64::MAX, NO_LIMIT), None);
    }

    #[test]
    fn a_lone_segment_slides_its_block_to_the_nearer_end_in_pieces() {
        // 42 bytes in the middle of 88 (gaps 21 and 25): nothing across, so it slides. Either
        // end moves 42 bytes; towards the start comes first.
        let view = [segment(1, 88, vec![block(7, 21, 42)])];
        let plan = open_range(&view, 42, u64::MAX, NO_LIMIT).unwrap();
        assert_eq!(plan, vec![Move { block: 7, to: 1, at: 0 }]);
        assert_eq!(apply(&view, &plan), 46);
        // A shift of 21 for 42 bytes overlaps: 2 pieces. With a shift of 4 it would take 11.
        let view = [segment(1, 88, vec![block(7, 4, 42), block(8, 50, 34)])];
        assert_eq!(open_range(&view, 8, u64::MAX, NO_LIMIT), None, "the only slide takes more than 8 pieces");
    }

    #[test]
    fn a_slide_steps_over_blocks_that_must_stay_and_picks_the_fewest_bytes() {
        let pinned = Resident { movable: false, ..block(2, 40, 10) };
        // [0,10) free, 1 at [10,30), free [30,40), pinned 2 at [40,50), free [50,60), 3 at
        // [60,100). Towards the start: 1 moves to 0 (gap 20 at 20..40 only, pinned blocks the
        // rest): no 25-byte gap. Towards the end: 3 stays (no shift), 2 cannot move, 1 moves
        // up to [20,40): gap [0,20) - no. Nothing opens 25.
        let view = [segment(1, 100, vec![block(1, 10, 20), pinned, block(3, 60, 40)])];
        assert_eq!(open_range(&view, 25, u64::MAX, NO_LIMIT), None);
        // Need 20: towards the start moves 20 bytes (block 1), giving [20,40).
        let plan = open_range(&view, 20, u64::MAX, NO_LIMIT).unwrap();
        assert_eq!(plan, vec![Move { block: 1, to: 1, at: 0 }]);
        assert!(apply(&view, &plan) >= 20);
        // Towards the start moves both blocks (50 bytes), towards the end only the small one.
        let view = [segment(1, 100, vec![block(1, 10, 40), block(2, 60, 10)])];
        let plan = open_range(&view, 40, u64::MAX, NO_LIMIT).unwrap();
        assert_eq!(plan, vec![Move { block: 2, to: 1, at: 90 }]);
        assert_eq!(apply(&view, &plan), 40);
    }

    #[test]
    fn a_move_within_a_segment_goes_in_pieces_that_fit_the_binding_limit() {
        // 42 bytes slide down by 21: two pieces of 21, each spanning 42 bytes.
        let view = [segment(1, 88, vec![block(7, 21, 42)])];
        assert_eq!(open_range(&view, 42, 42, NO_LIMIT), Some(vec![Move { block: 7, to: 1, at: 0 }]));
        // A span of the shift alone leaves no room for a piece.
        assert_eq!(open_range(&view, 42, 21, NO_LIMIT), None);
        // A 122 MiB block 81 MiB from the start of a 292 MiB segment, with a 128 MiB binding
        // limit: pieces of the shift would span 162 MiB; three pieces of 47 MiB fit.
        let view = [segment(1, 292 * MIB, vec![block(1, 81 * MIB, 122 * MIB), block(2, 272 * MIB, 20 * MIB)])];
        let plan = open_range(&view, 150 * MIB, 128 * MIB, NO_LIMIT).unwrap();
        assert_eq!(plan, vec![Move { block: 1, to: 1, at: 0 }]);
        assert!(apply(&view, &plan) >= 150 * MIB);
        assert_eq!(slide_piece(81 * MIB, 122 * MIB, 128 * MIB), Some(47 * MIB));
        assert_eq!(slide_piece(128 * MIB, 122 * MIB, 128 * MIB), None, "the shift alone fills the binding");
    }

    #[test]
    fn evacuation_empties_the_emptiest_segments_it_can() {
        let view = [
            segment(1, 100, vec![block(1, 0, 60)]),
            segment(2, 40, vec![block(2, 0, 10), block(3, 20, 10)]),
            segment(3, 30, vec![block(4, 0, 5)]),
            segment(4, 20, vec![Resident { movable: false, ..block(5, 0, 1) }]),
            segment(5, 10, vec![]),
        ];
        // The pinned block keeps segment 4; segment 3 empties first, then segment 2.
        let (plan, emptied) = evacuate(&view, 50, NO_LIMIT);
        assert_eq!(emptied, 70);
        let moved: Vec<u64> = plan.iter().map(|m| m.block).collect();
        assert_eq!(moved, vec![4, 2, 3]);
        assert!(plan.iter().all(|m| m.to == 1), "only the fullest segment has room");
        apply(&view, &plan);
        // Enough after the first segment: stop there.
        let (plan, emptied) = evacuate(&view, 30, NO_LIMIT);
        assert_eq!((plan.len(), emptied), (1, 30));
        // Two segments with equal live bytes: the one whose block fits the other's hole empties,
        // whichever ranks as fuller.
        let view = [segment(4, 43, vec![block(1, 21, 16)]), segment(8, 31, vec![block(2, 0, 16)])];
        let (plan, emptied) = evacuate(&view, 1, NO_LIMIT);
        assert_eq!((plan, emptied), (vec![Move { block: 2, to: 4, at: 0 }], 31));
        // Segment 2's 20 bytes do not fit once segment 1 is nearly full.
        let view = [segment(1, 100, vec![block(1, 0, 95)]), segment(2, 40, vec![block(2, 0, 20)])];
        assert_eq!(evacuate(&view, 1, NO_LIMIT), (vec![], 0));
    }

    #[test]
    fn a_plan_copies_no_more_than_its_limit() {
        // Opening 45 bytes takes segment 2's two blocks (20 bytes, 2 moves).
        let view = [segment(1, 100, vec![block(1, 0, 60)]), segment(2, 50, vec![block(2, 10, 10), block(3, 30, 10)])];
        assert!(open_range(&view, 45, u64::MAX, Limit { bytes: 20, moves: 2 }).is_some());
        assert_eq!(open_range(&view, 45, u64::MAX, Limit { bytes: 19, moves: 2 }), None);
        assert_eq!(open_range(&view, 45, u64::MAX, Limit { bytes: 20, moves: 1 }), None);
        // A slide moving 42 bytes is refused under a 41-byte limit.
        let view = [segment(1, 88, vec![block(7, 21, 42)])];
        assert_eq!(open_range(&view, 42, u64::MAX, Limit { bytes: 41, moves: 8 }), None);
        // Evacuation keeps a segment whose blocks would pass the limit.
        let view = [segment(1, 100, vec![block(1, 0, 30)]), segment(2, 50, vec![block(2, 0, 10), block(3, 20, 10)])];
        assert_eq!(evacuate(&view, 1, Limit { bytes: 15, moves: 8 }), (vec![], 0));
        assert_eq!(evacuate(&view, 1, Limit { bytes: 20, moves: 2 }).1, 50);
        assert_eq!(Limit::for_request(MIB), Limit { bytes: 4 * MIB, moves: 1024 });
    }

    #[test]
    fn random_views_plan_valid_moves() {
        let mut next = crate::test_rng::below(0x51de_c0de);
        for _ in 0..2000 {
            let mut view = Vec::new();
            let mut id = 0;
            for s in 0..1 + next(4) as u32 {
                let size = 16 * (4 + next(60));
                let mut blocks = Vec::new();
                let mut at = 0;
                while at < size {
                    at += 16 * next(4);
                    let len = 16 * (1 + next(8));
                    if at + len > size {
                        break;
                    }
                    if next(2) == 0 {
                        id += 1;
                        blocks.push(Resident { id, offset: at, size: len, movable: next(5) != 0 });
                    }
                    at += len;
                }
                view.push(segment(s, size, blocks));
            }
            let need = 16 * (1 + next(40));
            if let Some(plan) = open_range(&view, need, 16 * 48, NO_LIMIT) {
                assert!(apply(&view, &plan) >= need);
                for m in &plan {
                    let b = view.iter().flat_map(|s| &s.blocks).find(|b| b.id == m.block).unwrap();
                    assert!(b.movable, "a block that must stay moved");
                }
            }
            let (plan, emptied) = evacuate(&view, next(512), NO_LIMIT);
            apply(&view, &plan);
            let emptied_segments: u64 = view
                .iter()
                .filter(|s| !s.blocks.is_empty() && s.blocks.iter().all(|b| plan.iter().any(|m| m.block == b.id)))
                .map(|s| s.size)
                .sum();
            assert_eq!(emptied, emptied_segments);
        }
    }
}
