//! Live blocks by id in reusable slots: a lookup on the malloc/free path is an index, not a hash.
//!
//! An id carries its slot and the slot's generation (`generation << SLOT_BITS | slot + 1`), so:
//! - it fits a JS number (below 2^53), which is how blocks cross to JS;
//! - it never names a later block: a freed block's slot is reused under the next generation,
//!   and a slot whose generations run out is retired instead of reused (one slot per half a
//!   billion reuses of it);
//! - a stale id misses (`get` is `None`) however often its slot was reused since.
//!
//! After a burst of live blocks the slab gives its memory back: once fewer than a quarter of its
//! slots are live, it drops the empty slots at its end, up to the last one past half its
//! generations (a slot taken again later starts above every generation dropped, so stale ids
//! still miss, and no new slot starts close to retiring).

/// Slot bits of an id: at most `2^24 - 1` blocks are live at once.
const SLOT_BITS: u32 = 24;
const SLOT_MASK: u64 = (1 << SLOT_BITS) - 1;
/// Slots available (the `+ 1` in an id keeps 0 from ever being one).
pub(super) const MAX_LIVE: usize = SLOT_MASK as usize;
/// Highest generation whose ids stay below 2^53.
const MAX_GENERATION: u64 = (1 << (53 - SLOT_BITS)) - 1;
/// Slabs of fewer slots never trim (a few hundred KiB at most).
const TRIM_MIN_SLOTS: usize = 4096;
// The largest id is the largest integer a JS number holds exactly.
const _: () = assert!(MAX_GENERATION << SLOT_BITS | SLOT_MASK == (1 << 53) - 1);

struct Slot<T> {
    generation: u64,
    value: Option<T>,
}

pub(super) struct BlockSlab<T> {
    slots: Vec<Slot<T>>,
    /// Empty slots that may be reused, the most recently emptied last (it is warm in cache).
    vacant: Vec<u32>,
    /// Slots at most, and the highest generation a slot may take before retiring (both
    /// lowered in tests).
    max_live: usize,
    max_generation: u64,
    /// A free that leaves more vacant slots than this tries to trim (the check costs one
    /// comparison; a live count kept on every malloc and free cost more).
    trim_past_vacant: usize,
    /// Generation a slot added at the end starts at: above every generation a trim dropped.
    fresh_generation: u64,
    /// Slab size at which trimming starts (lowered in tests).
    trim_min_slots: usize,
}

impl<T> Default for BlockSlab<T> {
    fn default() -> Self {
        BlockSlab {
            slots: Vec::new(),
            vacant: Vec::new(),
            max_live: MAX_LIVE,
            max_generation: MAX_GENERATION,
            trim_past_vacant: usize::MAX,
            fresh_generation: 0,
            trim_min_slots: TRIM_MIN_SLOTS,
        }
    }
}

impl<T> BlockSlab<T> {
    #[inline]
    fn id(index: usize, generation: u64) -> u64 {
        generation << SLOT_BITS | (index as u64 + 1)
    }

    /// The slot of live block `id`.
    #[inline]
    fn live_slot(&self, id: u64) -> Option<usize> {
        let index = ((id & SLOT_MASK).checked_sub(1))? as usize;
        let slot = self.slots.get(index)?;
        (slot.generation == id >> SLOT_BITS && slot.value.is_some()).then_some(index)
    }

    /// Whether `insert` has no slot left.
    #[inline]
    pub(super) fn is_full(&self) -> bool {
        self.vacant.is_empty() && self.slots.len() >= self.max_live
    }

    /// Stores `value` under a new id; `None` when [`MAX_LIVE`] blocks are live.
    #[inline]
    pub(super) fn insert(&mut self, value: T) -> Option<u64> {
        let index = match self.vacant.pop() {
            Some(i) => i as usize,
            None if self.slots.len() < self.max_live => {
                self.slots.push(Slot { generation: self.fresh_generation, value: None });
                let len = self.slots.len();
                if len >= self.trim_min_slots {
                    // Trim once fewer than a quarter of the slots are live.
                    self.trim_past_vacant = len - len / 4;
                }
                len - 1
            }
            None => return None,
        };
        let slot = &mut self.slots[index];
        slot.value = Some(value);
        Some(Self::id(index, slot.generation))
    }

    #[inline]
    pub(super) fn get(&self, id: u64) -> Option<&T> {
        self.slots[self.live_slot(id)?].value.as_ref()
    }

    #[inline]
    pub(super) fn get_mut(&mut self, id: u64) -> Option<&mut T> {
        let index = self.live_slot(id)?;
        self.slots[index].value.as_mut()
    }

    /// Drops the block (in place: moving it out costs more than the rest of a free);
    /// its id never names anything again. Returns whether it was there.
    #[inline]
    pub(super) fn remove(&mut self, id: u64) -> bool {
        let Some(index) = self.live_slot(id) else { return false };
        let slot = &mut self.slots[index];
        slot.value = None;
        if slot.generation < self.max_generation {
            slot.generation += 1;
            self.vacant.push(index as u32);
            if self.vacant.len() > self.trim_past_vacant {
                self.trim();
            }
        }
        true
    }

    /// Drops the empty slots at the end and the memory they held, except those past half their
    /// generations (a hot slot reused for minutes, or a retired one): new slots would start
    /// above them and retire after a few uses each. The scan is paid for by the frees since the
    /// last attempt: the next one waits until the live blocks halve again (or the last one goes).
    #[cold]
    fn trim(&mut self) {
        let worn = self.max_generation / 2;
        let keep = self.slots.iter().rposition(|s| s.value.is_some() || s.generation > worn).map_or(0, |i| i + 1);
        if keep < self.slots.len() {
            let dropped = self.slots[keep..].iter().map(|s| s.generation).max().unwrap_or(0);
            self.fresh_generation = self.fresh_generation.max(dropped);
            self.slots.truncate(keep);
            self.vacant.retain(|&i| (i as usize) < keep);
            self.slots.shrink_to(keep.saturating_mul(2));
            self.vacant.shrink_to(self.vacant.len().saturating_mul(2));
        }
        // Slots retired by their generations count as live here; they are few.
        let len = self.slots.len();
        let live = len - self.vacant.len();
        self.trim_past_vacant = if len >= self.trim_min_slots { len - (live / 2).max(1) } else { usize::MAX };
    }

    /// Live blocks with their ids, in slot order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (u64, &T)> {
        self.slots.iter().enumerate().filter_map(|(i, s)| {
            let value = s.value.as_ref()?;
            Some((Self::id(i, s.generation), value))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_start_at_one_and_a_freed_id_never_names_a_later_block() {
        let mut slab = BlockSlab::default();
        let a = slab.insert("a").unwrap();
        let b = slab.insert("b").unwrap();
        assert_eq!((a, b), (1, 2));
        assert!(slab.remove(a));
        let c = slab.insert("c").unwrap();
        assert_ne!(c, a, "the slot is reused under a new generation");
        assert_eq!(c & SLOT_MASK, a & SLOT_MASK);
        assert_eq!(slab.get(a), None);
        assert!(!slab.remove(a), "a stale id frees nothing");
        assert_eq!(slab.get(c), Some(&"c"));
        assert_eq!(slab.get_mut(b).map(|v| *v), Some("b"));
        let mut live: Vec<_> = slab.iter().map(|(id, v)| (id, *v)).collect();
        live.sort_unstable();
        assert_eq!(live, vec![(b, "b"), (c, "c")]);
    }

    #[test]
    fn ids_that_name_no_slot_miss() {
        let mut slab = BlockSlab::default();
        slab.insert(1).unwrap();
        for id in [0, 1 << SLOT_BITS, 2, u64::MAX, (1 << 53) - 1] {
            assert_eq!(slab.get(id), None, "{id}");
            assert!(!slab.remove(id), "{id}");
        }
    }

    #[test]
    fn a_slot_out_of_generations_retires_and_ids_stay_below_2_pow_53() {
        let mut slab = BlockSlab { max_generation: 3, ..BlockSlab::default() };
        let mut seen = std::collections::HashSet::new();
        for _ in 0..10 {
            let id = slab.insert(()).unwrap();
            assert!(seen.insert(id), "id {id} handed out twice");
            assert!(slab.remove(id));
        }
        // Generations 0..=3 of slot 1, then the same of slot 2, then slot 3.
        assert_eq!(slab.slots.len(), 3);
        assert!(seen.iter().all(|id| id >> SLOT_BITS <= 3));
    }

    #[test]
    fn a_slab_gives_back_its_slots_after_a_burst_and_stale_ids_still_miss() {
        let mut slab = BlockSlab { trim_min_slots: 16, ..BlockSlab::default() };
        let mut ids: Vec<u64> = (0..1000).map(|i| slab.insert(i).unwrap()).collect();
        // A block high in the slab keeps it long; the others go.
        let kept = ids.remove(900);
        for &id in &ids {
            assert!(slab.remove(id));
        }
        assert_eq!(slab.slots.len(), 901, "trimmed down to the last live slot");
        assert!(slab.slots.capacity() <= 2 * 901 && slab.vacant.iter().all(|&i| i < 901));
        assert!(slab.remove(kept));
        assert_eq!(slab.slots.len(), 0, "an empty slab keeps no slots");
        assert!(slab.slots.capacity() == 0 && slab.vacant.capacity() == 0);
        // The slots come back under generations no stale id carries.
        let again: Vec<u64> = (0..1000).map(|i| slab.insert(i).unwrap()).collect();
        for id in ids.iter().chain([&kept]) {
            assert_eq!(slab.get(*id), None, "stale id {id}");
            assert!(!again.contains(id), "id {id} handed out twice");
        }
        assert_eq!(again.iter().filter_map(|&id| slab.get(id)).count(), 1000);
    }

    #[test]
    fn a_trim_keeps_worn_slots_so_new_slots_start_low() {
        // 64 blocks; slot `hot` is then reused past half its generations (LIFO reuse makes one
        // slot hot), and the others are all freed.
        let burst_with_hot_slot = |hot: usize| {
            let mut slab = BlockSlab { trim_min_slots: 16, max_generation: 100, ..BlockSlab::default() };
            let ids: Vec<u64> = (0..64).map(|i| slab.insert(i).unwrap()).collect();
            slab.remove(ids[hot]);
            for _ in 0..60 {
                let id = slab.insert(0).unwrap();
                assert_eq!(id & SLOT_MASK, hot as u64 + 1);
                slab.remove(id);
            }
            ids.iter().enumerate().filter(|&(i, _)| i != hot).for_each(|(_, &id)| assert!(slab.remove(id)));
            slab
        };
        assert_eq!(burst_with_hot_slot(63).slots.len(), 64, "the worn last slot stays");
        let mut slab = burst_with_hot_slot(10);
        assert_eq!(slab.slots.len(), 11, "trimmed down to the worn slot");
        // Eleven reuse the slots left; the twelfth is a new slot, at the dropped slots' generation.
        let ids: Vec<u64> = (0..12).map(|_| slab.insert(0).unwrap()).collect();
        assert_eq!((ids[11] & SLOT_MASK, ids[11] >> SLOT_BITS), (12, 1));
    }

    #[test]
    fn small_slabs_never_trim() {
        let mut slab = BlockSlab::default();
        let ids: Vec<u64> = (0..100).map(|i| slab.insert(i).unwrap()).collect();
        for id in ids {
            slab.remove(id);
        }
        assert_eq!(slab.slots.len(), 100);
    }

    #[test]
    fn a_full_slab_refuses() {
        let mut slab = BlockSlab { max_live: 8, ..BlockSlab::default() };
        for _ in 0..8 {
            slab.insert(()).unwrap();
        }
        assert!(slab.is_full());
        assert_eq!(slab.insert(()), None);
        assert!(slab.remove(5));
        assert!(!slab.is_full());
        assert_eq!(slab.insert(()), Some(1 << SLOT_BITS | 5));
    }
}
