//! Independent plan checker: alignment, bounds, overflow, and disjointness of
//! every pair of records whose lifetimes overlap. Sweep over time with the live
//! records kept sorted by offset, so checking neighbours suffices (O(n log n)).

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
    // Events: starts at `first` sort before ends at the same index (inclusive lifetimes).
    let mut ev: Vec<(u64, u8, usize)> = Vec::with_capacity(2 * records.len());
    for (i, r) in records.iter().enumerate() {
        if r.size > 0 {
            ev.push((r.first, 0, i));
            ev.push((r.last, 1, i));
        }
    }
    ev.sort_unstable();
    let mut live: BTreeMap<(u64, usize), u64> = BTreeMap::new(); // (offset, idx) -> end
    for (_, kind, i) in ev {
        let (o, end) = (offsets[i], offsets[i] + records[i].size);
        if kind == 1 {
            live.remove(&(o, i));
            continue;
        }
        if let Some((&(_, j), &pend)) = live.range(..(o, i)).next_back() {
            if pend > o {
                return bad(format!("records {:?} and {:?} overlap in time and memory", records[j].id, records[i].id));
            }
        }
        if let Some((&(po, j), _)) = live.range((o, i)..).next() {
            if po < end {
                return bad(format!("records {:?} and {:?} overlap in time and memory", records[i].id, records[j].id));
            }
        }
        live.insert((o, i), end);
    }
    Ok(())
}
