//! From records to the problems the strategies solve: records that share a range
//! (`shares_with`) become one unit, and units are split by memory space, each space
//! a separate problem with its own lower bound.

use crate::bound::aligned_lower_bound;
use crate::check::check_offsets;
use crate::error::PlanError;
use crate::record::{lcm, share_groups, Problem, UsageRecord};
use std::collections::HashMap;

/// One memory space: its units (as records) and their problem.
pub(crate) struct Space {
    pub name: String,
    pub problem: Problem,
    /// Aligned lower bound of the space, and the compressed point that gives it.
    pub bound: u64,
    pub bound_at: usize,
}

pub(crate) struct Layout {
    pub spaces: Vec<Space>,
    /// For each record: (space, unit within the space).
    pub place: Vec<(usize, usize)>,
}

impl Layout {
    pub fn new(records: &[UsageRecord], align: u64) -> Result<Layout, PlanError> {
        // Validates ids, lifetimes, alignments, fixed offsets and the size sum.
        let whole = Problem::new(records, align)?;
        let group = share_groups(records)?;
        let one_space = records.iter().all(|r| r.space_name() == records[0].space_name());
        if !records.is_empty() && one_space && group.iter().enumerate().all(|(i, &g)| g == i) {
            // The common case: every record is its own unit in one space, so the problem
            // just built is the space's (no copy of the records, no second pass).
            check_fixed(records, align)?;
            let name = records[0].space_name().to_string();
            let (bound, bound_at) = aligned_lower_bound(&whole);
            let place = (0..records.len()).map(|i| (0, i)).collect();
            return Ok(Layout { spaces: vec![Space { name, problem: whole, bound, bound_at }], place });
        }
        let mut unit_of = vec![usize::MAX; records.len()];
        let mut units: Vec<UsageRecord> = Vec::new();
        for i in 0..records.len() {
            if group[i] == i {
                unit_of[i] = units.len();
                let mut u = records[i].clone();
                u.shares_with = None;
                units.push(u);
            }
        }
        for (i, r) in records.iter().enumerate() {
            let g = group[i];
            if g == i {
                continue;
            }
            let u = &mut units[unit_of[g]];
            unit_of[i] = unit_of[g];
            if r.space_name() != u.space_name() {
                return Err(PlanError::invalid(
                    format!("record {:?}.space", r.id),
                    format!("{:?}, the space of {:?}", u.space_name(), u.id),
                    format!("{:?}", r.space_name()),
                )
                .with_hint(format!(
                    "record {:?} shares a range with {:?} but is in space {:?}, not {:?}",
                    r.id,
                    u.id,
                    r.space_name(),
                    u.space_name()
                )));
            }
            u.size = u.size.max(r.size);
            u.first = u.first.min(r.first);
            u.last = u.last.max(r.last);
            u.alignment = match (u.alignment, r.alignment) {
                (Some(a), Some(b)) => Some(lcm(a, b).ok_or_else(|| {
                    PlanError::SizeOverflow(format!("alignments of records sharing with {:?}", u.id))
                })?),
                (a, b) => a.or(b),
            };
            match (u.offset, r.offset) {
                (Some(a), Some(b)) if a != b => {
                    return Err(PlanError::invalid(
                        format!("record {:?}.offset", r.id),
                        format!("{a} (the offset of {:?}, sharing its range)", u.id),
                        b.to_string(),
                    )
                    .with_hint(format!(
                        "records {:?} and {:?} share a range but are fixed at {a} and {b}",
                        u.id, r.id
                    )))
                }
                (a, b) => u.offset = a.or(b),
            }
            u.preferred_offset = u.preferred_offset.or(r.preferred_offset);
        }
        let mut space_ix: HashMap<String, usize> = HashMap::new();
        let mut members: Vec<Vec<UsageRecord>> = Vec::new();
        let mut names: Vec<String> = Vec::new();
        let mut unit_place = Vec::with_capacity(units.len());
        for u in units {
            let k = match space_ix.get(u.space_name()) {
                Some(&k) => k,
                None => {
                    space_ix.insert(u.space_name().to_string(), members.len());
                    names.push(u.space_name().to_string());
                    members.push(Vec::new());
                    members.len() - 1
                }
            };
            unit_place.push((k, members[k].len()));
            members[k].push(u);
        }
        let mut spaces = Vec::with_capacity(members.len());
        for (units, name) in members.into_iter().zip(names) {
            let problem = Problem::new(&units, align)?;
            check_fixed(&units, align)?;
            let (bound, bound_at) = aligned_lower_bound(&problem);
            spaces.push(Space { name, problem, bound, bound_at });
        }
        let place = unit_of.iter().map(|&u| unit_place[u]).collect();
        Ok(Layout { spaces, place })
    }

    /// Offsets per record from offsets per unit of each space.
    pub fn record_offsets(&self, per_space: &[Vec<u64>]) -> Vec<u64> {
        self.place.iter().map(|&(s, u)| per_space[s][u]).collect()
    }
}

/// Fixed units of one space must not overlap while alive.
fn check_fixed(units: &[UsageRecord], align: u64) -> Result<(), PlanError> {
    let fixed: Vec<UsageRecord> = units.iter().filter(|u| u.offset.is_some()).cloned().collect();
    if fixed.is_empty() {
        return Ok(());
    }
    let offsets: Vec<u64> = fixed.iter().map(|u| u.offset.unwrap_or(0)).collect();
    check_offsets(&fixed, &offsets, u64::MAX, align).map_err(|e| {
        let why = e.to_string();
        PlanError::invalid("offset", "fixed offsets that do not overlap", "overlapping offsets")
            .with_hint(format!("fixed offsets conflict: {}", why.trim_start_matches("plan invalid: ")))
    })
}
