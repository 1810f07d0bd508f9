//! Live blocks by id in reusable slots: a lookup on the malloc/free path is an index, not a hash.
//!
//! An id carries its slot and the slot's generation (`generation << SLOT_BITS | slot + 1`), so:
//! - it fits a JS number (below 2^53), which is how blocks cross to JS;
//! - it never names a later block: a freed block's slot is reused under the next generation,
//!   and a slot whose generations run out is retired instead of reused (one slot per half a
//!   billion reuses of it);
//! - a stale id misses (`get` is `None`) however often its slot was reused since.

/// Slot bits of an id: at most `2^24 - 1` blocks are live at once.
const SLOT_BITS: u32 = 24;
const SLOT_MASK: u64 = (1 << SLOT_BITS) - 1;
/// Slots available (the `+ 1` in an id keeps 0 from ever being one).
pub(super) const MAX_LIVE: usize = SLOT_MASK as usize;
/// Highest generation whose ids stay below 2^53.
const MAX_GENERATION: u64 = (1 << (53 - SLOT_BITS)) - 1;
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
}

impl<T> Default for BlockSlab<T> {
    fn default() -> Self {
        BlockSlab { slots: Vec::new(), vacant: Vec::new(), max_live: MAX_LIVE, max_generation: MAX_GENERATION }
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
                self.slots.push(Slot { generation: 0, value: None });
                self.slots.len() - 1
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
        }
        true
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
