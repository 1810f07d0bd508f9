//! Independent plan checker: alignment, bounds, overflow, and disjointness of
//! every pair of records whose lifetimes overlap. Sweep over time with the live
//! records kept sorted by offset, so checking neighbours suffices (O(n log n)).
//! Indices stay below 2^63 (they index a slice), which the event packing relies on.

use crate::error::PlanError;
use crate::record::UsageRecord;
use std::collections::BTreeMap;

/// Checks `offsets` against `records` inside a slab of `slab_size` bytes.
/// `default_align` is the plan-wide alignment (records may ask for more).
pub fn check_offsets(
    records: &[UsageRecord],
    offsets: &[u64],
    slab_size: u64,
    default_align: u64,
) -> Result<(), PlanError> {
    let bad = |m: String| Err(PlanError::PlanInvalid(m));
    if records.len() != offsets.len() {
        return bad(format!("{} records but {} offsets", records.len(), offsets.len()));
    }
    for (r, &o) in records.iter().zip(offsets) {
        if r.first > r.last {
            return bad(format!("record {:?} has first > last", r.id));
        }
        let a = r.alignment.unwrap_or(1).max(default_align);
        if !a.is_power_of_two() || o % a != 0 {
            return bad(format!("record {:?} at offset {o} is not aligned to {a}", r.id));
        }
        match o.checked_add(r.size) {
            Some(end) if end <= slab_size => {}
            Some(end) => return bad(format!("record {:?} ends at {end}, past the slab ({slab_size})", r.id)),
            None => return bad(format!("record {:?}: offset + size overflows", r.id)),
        }
    }
    // Events packed as (time, kind, index) in one u128 for a fast sort: starts (kind 0)
    // at `first` come before ends (kind 1) at the same index (inclusive lifetimes).
    let mut ev: Vec<u128> = Vec::with_capacity(2 * records.len());
    for (i, r) in records.iter().enumerate() {
        if r.size > 0 {
            ev.push((r.first as u128) << 64 | i as u128);
            ev.push((r.last as u128) << 64 | 1 << 63 | i as u128);
        }
    }
    ev.sort_unstable();
    // Live records by offset -> (end, index). Live ranges are disjoint (each was checked
    // on insertion), so an overlap with the newcomer shows at a neighbour.
    let mut live: BTreeMap<u64, (u64, usize)> = BTreeMap::new();
    for e in ev {
        let i = (e as u64 & !(1 << 63)) as usize;
        let (o, end) = (offsets[i], offsets[i] + records[i].size);
        if e as u64 & 1 << 63 != 0 {
            live.remove(&o);
            continue;
        }
        if let Some((_, &(pend, j))) = live.range(..=o).next_back() {
            if pend > o {
                return bad(format!("records {:?} and {:?} overlap in time and memory", records[j].id, records[i].id));
            }
        }
        if let Some((&po, &(_, j))) = live.range(o..).next() {
            if po < end {
                return bad(format!("records {:?} and {:?} overlap in time and memory", records[i].id, records[j].id));
            }
        }
        live.insert(o, (end, i));
    }
    Ok(())
}
