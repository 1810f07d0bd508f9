//! How a live block goes back to the heap: its holder, its leases and its scope charge, all in
//! the block's slab record.
//!
//! Note [Block lifetime]: the slab record is the one record of a live block. A block is held
//! either by a handle (`owner` is [`HANDLE`]: wgalloc-core's `DeviceBlock`, which frees it with
//! [`HeapCore::free_if`] or on drop) or, by id, by an owner ([`HeapCore::new_owner`]: a JS heap
//! object, which keeps only ids; [`HeapCore::free_owned_as`], [`HeapCore::release_owned`] for one
//! the garbage collector found, [`HeapCore::release_owner`] for all it still holds when it
//! goes). A handle can pass its block to an owner ([`HeapCore::adopt_if`]). It goes back to the
//! heap exactly once, by the first of: a free with no lease out; the end of the last lease
//! after a free while leased (FREE_DEFERRED: no new lease, and the owner no longer names it);
//! its holder's end (a handle dropped, an owner released). Going back returns its scope charge
//! (after the heap's lock is let go: Note [Scope locks]), and then the record waits as a
//! pending free while GPU work recorded on it may still run (see [`reusable`]) and is removed
//! after that, which retires the id (the slot's generation moves on, so the id never names
//! another block: a stale id is `USE_AFTER_FREE` or `DOUBLE_FREE`, never another block). While
//! live, a block may move (compaction) unless something may still name its old place (pins,
//! holds, streams with unsubmitted work, shared and scalar pools). `docs/heap.md` (Block
//! lifetime) draws the states and names the test that holds each transition.

use super::*;

/// The holder of a block that a handle gives back: its caller frees it with [`HeapCore::free_if`].
pub const HANDLE: u32 = 0;
/// In a record's lease count: freed while leased; the last lease gives it back.
const FREE_DEFERRED: u32 = 1 << 31;

/// What a handle of a block held by id shows: fixed from malloc to free.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockFacts {
    pub size: u64,
    pub requested: u64,
    pub pool: PoolKind,
}

/// Why `owner` cannot free block `id`: it does not hold it (freed already, or another's).
#[cold]
#[inline(never)]
fn not_held(id: u64, owner: u32) -> Error {
    Error::DoubleFree(if owner == HANDLE {
        format!("block {id} is not allocated (already freed?)")
    } else {
        format!("block {id} was already freed")
    })
}

impl<S: SegmentStorage, C: Completion> HeapCore<S, C> {
    /// A new owner tag: blocks malloc'd for it ([`HeapCore::malloc_for_as`]) or adopted by it
    /// are its to free by id, and go back with [`HeapCore::release_owner`].
    pub fn new_owner(&self) -> Result<u32> {
        let mut st = self.state();
        let tag = st.next_owner;
        st.next_owner = tag.checked_add(1).ok_or_else(|| {
            let oom = LimitOom::new(OomSource::OwnerTags, "a new heap object", "open the device again");
            Error::from(oom.limit(u32::MAX as u64).in_use(u32::MAX as u64))
        })?;
        Ok(tag)
    }

    /// Frees block `id`, which a handle holds ([`HANDLE`]). Its memory is reused once nothing
    /// can still touch it (see `reusable`).
    pub fn free(&self, id: u64) -> Result<()> {
        self.free_if(id, || Ok(()))
    }

    /// Frees block `id`, held by a handle, once `transition` (run under the heap's lock) agrees:
    /// a handle's freed flag changes only this way, so the lock a free takes anyway orders it and
    /// it needs no atomic read-modify-write of its own. Leased, the block goes back when its last
    /// lease ends. `transition` must not call into the heap (its lock is held). Its error type
    /// is the caller's (the runtime's own, on a device), so the free path converts nothing.
    pub fn free_if<E: From<Error>>(&self, id: u64, transition: impl FnOnce() -> Result<(), E>) -> Result<(), E> {
        let charge = {
            let mut st = self.state();
            transition()?;
            self.give_back(&mut st, id, HANDLE)?
        };
        drop(charge);
        Ok(())
    }

    /// Frees block `id`, which `owner` holds: `DOUBLE_FREE` if it does not (freed already, or
    /// another owner's).
    #[inline]
    pub fn free_owned_as<E: From<Error>>(&self, id: u64, owner: u32) -> Result<(), E> {
        let charge = self.give_back(&mut self.state(), id, owner)?;
        drop(charge);
        Ok(())
    }

    /// Frees block `id` if `owner` still holds it (the garbage collector found its holder
    /// unreachable without a free); its size, or `None` if it is not there.
    pub fn release_owned(&self, id: u64, owner: u32) -> Option<u64> {
        let (size, charge) = {
            let mut st = self.state();
            let size = st.blocks.get(id)?.size;
            (size, self.give_back(&mut st, id, owner).ok()?)
        };
        drop(charge);
        Some(size)
    }

    /// Frees every block `owner` still holds (its holder went); leased ones go back when their
    /// last lease ends.
    pub fn release_owner(&self, owner: u32) {
        let charges: Vec<Box<ScopeCharge>> = {
            let mut st = self.state();
            let ids: Vec<u64> = st.blocks.iter().filter(|(_, r)| held_by(r, owner)).map(|(id, _)| id).collect();
            ids.into_iter().filter_map(|id| self.give_back(&mut st, id, owner).ok().flatten()).collect()
        };
        drop(charges);
    }

    /// `(id, size)` of every block `owner` holds, in id order.
    pub fn owned_blocks(&self, owner: u32) -> Vec<(u64, u64)> {
        let st = self.state();
        let mut blocks: Vec<(u64, u64)> =
            st.blocks.iter().filter(|(_, r)| held_by(r, owner)).map(|(id, r)| (id, r.size)).collect();
        drop(st);
        blocks.sort_unstable();
        blocks
    }

    /// What a handle of block `id`, held by `owner`, shows; `USE_AFTER_FREE` if `owner` does not
    /// hold it (freed, or another owner's).
    pub fn owned_block(&self, id: u64, owner: u32) -> Result<BlockFacts> {
        let st = self.state();
        let rec = st.blocks.get(id).filter(|r| held_by(r, owner)).ok_or_else(|| freed(id))?;
        Ok(BlockFacts { size: rec.size, requested: rec.requested, pool: rec.pool })
    }

    /// Passes block `id` from its handle to `owner` once `transition` (under the heap's lock,
    /// like [`HeapCore::free_if`]'s) agrees: the handle no longer frees it, the owner does.
    pub fn adopt_if<E: From<Error>>(
        &self,
        id: u64,
        owner: u32,
        transition: impl FnOnce() -> Result<(), E>,
    ) -> Result<(), E> {
        let mut st = self.state();
        transition()?;
        let rec = st.blocks.get_mut(id).filter(|r| held_by(r, HANDLE)).ok_or_else(|| freed(id))?;
        rec.owner = owner;
        Ok(())
    }

    /// Gives block `id` the scope charge it returns when it goes back to the heap (right after
    /// its malloc: the charge is taken first, Note [Scope locks]).
    pub fn set_charge(&self, id: u64, charge: ScopeCharge) {
        // Boxed before the lock; what is left (the charge of a block freed already, or one it
        // had) goes back after it.
        let charge = Box::new(charge);
        let left = {
            let mut st = self.state();
            match st.blocks.get_mut(id).filter(|r| r.pending.is_none()) {
                Some(rec) => rec.charge.replace(charge),
                None => Some(charge),
            }
        };
        drop(left);
    }

    /// Leases block `id` once `check` (under the heap's lock) agrees: a free meanwhile takes
    /// effect when the last lease ends ([`HeapCore::end_lease`]). `USE_AFTER_FREE` for a block
    /// freed already, leased or not.
    pub fn lease_if<E: From<Error>>(&self, id: u64, check: impl FnOnce() -> Result<(), E>) -> Result<(), E> {
        let mut st = self.state();
        check()?;
        let rec = st
            .blocks
            .get_mut(id)
            .filter(|r| r.pending.is_none() && r.leases & FREE_DEFERRED == 0)
            .ok_or_else(|| freed(id))?;
        // The count stays below the flag: past 2^31 leases at once, refuse rather than wrap.
        if rec.leases + 1 == FREE_DEFERRED {
            let oom = LimitOom::new(OomSource::BlockLeases, format!("leasing block {id}"), "end a lease first");
            return Err(Error::from(oom.limit(FREE_DEFERRED as u64 - 1).in_use(rec.leases as u64)).into());
        }
        rec.leases += 1;
        Ok(())
    }

    /// Ends a lease of block `id`; the last one of a block freed meanwhile gives it back.
    pub fn end_lease(&self, id: u64) {
        let charge = {
            let mut st = self.state();
            let st = &mut *st;
            let Some(rec) = st.blocks.get_mut(id).filter(|r| r.pending.is_none() && r.leases & !FREE_DEFERRED > 0)
            else {
                return;
            };
            rec.leases -= 1;
            if rec.leases != FREE_DEFERRED {
                return;
            }
            rec.leases = 0;
            let charge = rec.charge.take();
            if let Some(place) = self.retire(rec, id, &mut st.stats, &mut st.pending) {
                self.return_to_pool(st, id, place);
            }
            charge
        };
        drop(charge);
    }

    /// Whether block `id` is live (not back to the heap; a block freed while leased is, until its
    /// last lease ends).
    pub fn is_active(&self, id: u64) -> bool {
        self.state().blocks.get(id).is_some_and(|r| r.pending.is_none())
    }

    /// The free of block `id` by its holder `owner`: back to the heap now, or when its last
    /// lease ends. Returns its scope charge for the caller to drop after the heap's lock.
    /// Inlined into each free: a call and its returned result cost as much as its checks.
    #[inline(always)]
    fn give_back(&self, st: &mut State<S>, id: u64, owner: u32) -> Result<Option<Box<ScopeCharge>>> {
        let Some(rec) = st.blocks.get_mut(id) else {
            return Err(not_held(id, owner));
        };
        if rec.owner != owner || rec.leases != 0 || rec.pending.is_some() {
            return defer_or_refuse(rec, id, owner);
        }
        let charge = rec.charge.take();
        if let Some(place) = self.retire(rec, id, &mut st.stats, &mut st.pending) {
            self.return_to_pool(st, id, place);
        }
        Ok(charge)
    }

    /// Live block `id`, of record `rec` (its charge taken, no lease out), goes back to the heap:
    /// a pending free while GPU work may still use it, else the place the caller gives back to
    /// its pool ([`HeapCore::return_to_pool`]; the record is borrowed here, so not in this call).
    #[inline(always)]
    fn retire(&self, rec: &mut BlockRec, id: u64, stats: &mut HeapStats, pending: &mut Vec<u64>) -> Option<BlockPlace> {
        let uses: Vec<StreamUse> = if rec.streams.is_empty() {
            Vec::new()
        } else {
            rec.streams.drain(..).map(|m| StreamUse::capture(&m)).collect()
        };
        let place = rec.place();
        stats.block_freed(place.pool, place.size, rec.requested);
        if self.tracker.is_lost() || reusable(rec, &uses, self.tracker.completed()) {
            return Some(place);
        }
        // Stays in the slab, marked: the sweep returns it once its work completed.
        rec.pending = Some(uses.into_boxed_slice());
        pending.push(id);
        stats.pending_added(place.size);
        None
    }
}

/// A free of block `id` (record `rec`) that does not give it back now: leased, it goes back
/// when its last lease ends; not held by `owner`, the free is refused.
#[cold]
#[inline(never)]
fn defer_or_refuse(rec: &mut BlockRec, id: u64, owner: u32) -> Result<Option<Box<ScopeCharge>>> {
    if !held_by(rec, owner) {
        return Err(not_held(id, owner));
    }
    rec.leases |= FREE_DEFERRED;
    Ok(None)
}

/// Whether `owner` holds the block of `rec` and may still free it: live, and not freed while
/// leased.
#[inline]
fn held_by(rec: &BlockRec, owner: u32) -> bool {
    rec.owner == owner && rec.pending.is_none() && rec.leases & FREE_DEFERRED == 0
}
