//! Independent plan checker: alignment, bounds, overflow, and disjointness of
//! every pair of records whose lifetimes overlap. Sweep over time with the live
//! records kept sorted by offset, so checking neighbours suffices (O(n log n)).
//! Indices stay below 2^63 (they index a slice), which the event packing relies on.

use crate::error::PlanError;
use crate::radix::sort_by_key;
use crate::rank_set::RankSet;
use crate::record::{lcm, share_groups, UsageRecord};
use std::collections::HashMap;

/// Checks `offsets` against `records` inside a slab of `slab_size` bytes.
/// `default_align` is the plan-wide alignment (records may ask for more; an offset
/// must be a multiple of both). Fixed records must sit at their offset; records that
/// share a range (`shares_with`) must have one offset, one space and lifetimes that
/// at most touch; only records of the same memory space may not overlap.
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
    if default_align == 0 {
        return bad("plan alignment 0".into());
    }
    for (r, &o) in records.iter().zip(offsets) {
        if r.first > r.last {
            return bad(format!("record {:?} has first > last", r.id));
        }
        let own = r.alignment.unwrap_or(1);
        let Some(a) = (own > 0).then(|| lcm(own, default_align)).flatten() else {
            return bad(format!("record {:?} has alignment {own}", r.id));
        };
        if o % a != 0 {
            return bad(format!("record {:?} at offset {o} is not aligned to {a}", r.id));
        }
        if r.offset.is_some_and(|f| f != o) {
            return bad(format!("record {:?} is fixed at {} but placed at {o}", r.id, r.offset.unwrap_or(0)));
        }
        match o.checked_add(r.size) {
            Some(end) if end <= slab_size => {}
            Some(end) => return bad(format!("record {:?} ends at {end}, past the slab ({slab_size})", r.id)),
            None => return bad(format!("record {:?}: offset + size overflows", r.id)),
        }
    }
    // Records sharing a range become one unit: one offset, the union of lifetimes.
    let group = share_groups(records).map_err(|e| PlanError::PlanInvalid(e.to_string()))?;
    let n = records.len();
    let (mut first, mut last, mut size) = (vec![0u64; n], vec![0u64; n], vec![0u64; n]);
    for (i, r) in records.iter().enumerate() {
        (first[i], last[i], size[i]) = (r.first, r.last, r.size);
    }
    for (i, r) in records.iter().enumerate() {
        let g = group[i];
        if g == i {
            continue;
        }
        if offsets[i] != offsets[g] || r.space_name() != records[g].space_name() {
            return bad(format!(
                "records {:?} and {:?} share a range but not its offset or space",
                records[g].id, r.id
            ));
        }
        first[g] = first[g].min(r.first);
        last[g] = last[g].max(r.last);
        size[g] = size[g].max(r.size);
    }
    let mut spaces: HashMap<&str, u64> = HashMap::new();
    let mut space = Vec::with_capacity(n);
    // Neighbouring records are mostly in one space: look a name up only when it changes.
    let mut previous: Option<(&str, u64)> = None;
    for r in records {
        let name = r.space_name();
        let k = match previous {
            Some((l, k)) if l == name => k,
            _ => {
                let k = spaces.len() as u64;
                let k = *spaces.entry(name).or_insert(k);
                previous = Some((name, k));
                k
            }
        };
        space.push(k);
    }
    // Units with bytes ranked by (space, offset, index): the live set is a set of ranks.
    let mut by_offset: Vec<(u64, u64)> = Vec::with_capacity(n);
    for i in 0..n {
        if size[i] > 0 && group[i] == i {
            by_offset.push((offsets[i], i as u64));
        }
    }
    sort_by_key(&mut by_offset);
    let space_of = |i: usize| space[i];
    if spaces.len() > 1 {
        let mut keyed: Vec<(u64, u64)> = by_offset.iter().map(|&(_, i)| (space_of(i as usize), i)).collect();
        sort_by_key(&mut keyed); // stable: offsets stay ascending within a space
        by_offset = keyed.into_iter().map(|(_, i)| (offsets[i as usize], i)).collect();
    }
    let mut rank = vec![0usize; n];
    for (k, &(_, i)) in by_offset.iter().enumerate() {
        rank[i as usize] = k;
    }
    // Events (time, index | kind << 63): all starts (kind 0), then all ends (kind 1), so
    // the stable sort puts starts first at equal times (lifetimes are inclusive).
    let mut ev: Vec<(u64, u64)> = Vec::with_capacity(2 * by_offset.len());
    ev.extend(by_offset.iter().map(|&(_, i)| (first[i as usize], i)));
    ev.extend(by_offset.iter().map(|&(_, i)| (last[i as usize], i | 1 << 63)));
    sort_by_key(&mut ev);
    // Live ranges of a space are disjoint (each was checked on insertion), so an overlap
    // with the newcomer shows at its neighbour in (space, offset) order.
    let mut live = RankSet::new(by_offset.len());
    let index = |k: usize| by_offset[k].1 as usize;
    let collide = |a: usize, b: usize| {
        bad(format!("records {:?} and {:?} overlap in time and memory", records[a].id, records[b].id))
    };
    for (_, e) in ev {
        let i = (e & !(1 << 63)) as usize;
        if e & 1 << 63 != 0 {
            live.remove(rank[i]);
            continue;
        }
        let (o, end) = (offsets[i], offsets[i] + size[i]);
        if let Some(j) = live.prev(rank[i]).map(index) {
            if space_of(j) == space_of(i) && offsets[j] + size[j] > o {
                return collide(j, i);
            }
        }
        if let Some(j) = live.next(rank[i]).map(index) {
            if space_of(j) == space_of(i) && offsets[j] < end {
                return collide(i, j);
            }
        }
        live.insert(rank[i]);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_offsets;
    use crate::record::UsageRecord;

    /// Pairwise oracle for disjointness alone.
    fn disjoint(r: &[UsageRecord], off: &[u64]) -> bool {
        (0..r.len()).all(|i| {
            (0..i).all(|j| {
                let live = r[i].overlaps(&r[j]) && r[i].size > 0 && r[j].size > 0;
                !live || off[i] + r[i].size <= off[j] || off[j] + r[j].size <= off[i]
            })
        })
    }

    #[test]
    fn matches_pairwise_oracle() {
        let mut next = crate::test_rng::below(0x9E37_79B9_7F4A_7C15u64);
        let mut rejected = 0;
        for round in 0..3000 {
            let n = 1 + next(12) as usize;
            // Huge times exercise the high digits of the event keys.
            let base = if round % 3 == 0 { u64::MAX - 40 } else { 0 };
            let recs: Vec<UsageRecord> = (0..n)
                .map(|i| {
                    let first = base + next(20);
                    UsageRecord::new(format!("r{i}"), next(6), first, first + next(8))
                })
                .collect();
            let off: Vec<u64> = (0..n).map(|_| next(16)).collect();
            let ok = check_offsets(&recs, &off, 64, 1).is_ok();
            assert_eq!(ok, disjoint(&recs, &off), "round {round}: {recs:?} at {off:?}");
            rejected += usize::from(!ok);
        }
        assert!(rejected > 500, "too few overlapping cases: {rejected}");
    }
}
