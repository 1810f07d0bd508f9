//! The result of planning: one offset per record inside a slab (one slab per memory
//! space), with its quality figures. Fields are private so a `Plan` in hand has
//! always passed the checker; plans computed elsewhere enter through
//! [`Plan::from_parts`], which validates.

use crate::check::check_offsets;
use crate::error::PlanError;
use crate::json::{int, record_json};
use crate::layout::Layout;
use crate::record::UsageRecord;
use crate::strategy::Strategy;
use serde_json::{json, Map, Value};
use std::time::Duration;

/// What proves a plan optimal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptimalBy {
    /// The slab equals the (aligned) lower bound.
    LowerBound,
    /// The exact search proved no smaller slab exists (the lower bound was raised to it).
    Search,
}

impl OptimalBy {
    pub fn as_str(self) -> &'static str {
        match self {
            OptimalBy::LowerBound => "lowerBound",
            OptimalBy::Search => "search",
        }
    }
}

/// One memory space of a plan: its slab, lower bound and capacity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpacePlan {
    pub name: String,
    pub slab_size: u64,
    pub lower_bound: u64,
    pub capacity: Option<u64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    records: Vec<UsageRecord>,
    offsets: Vec<u64>,
    alignment: u64,
    slab_size: u64,
    lower_bound: u64,
    optimal_by: Option<OptimalBy>,
    strategy: Strategy,
    method: String,
    elapsed: Duration,
    spaces: Vec<SpacePlan>,
}

impl Plan {
    /// Builds and validates a plan. `pub(crate)`: planners use this. `searched[k]`
    /// says whether space k's bound was raised by the search.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn assemble(
        records: Vec<UsageRecord>,
        offsets: Vec<u64>,
        alignment: u64,
        spaces: Vec<SpacePlan>,
        searched: bool,
        strategy: Strategy,
        method: String,
        elapsed: Duration,
    ) -> Result<Plan, PlanError> {
        let slab_size = spaces.iter().try_fold(0u64, |s, x| crate::error::add(s, x.slab_size, "sum of space slabs"))?;
        let lower_bound = spaces.iter().map(|x| x.lower_bound).sum();
        let optimal_by =
            (slab_size == lower_bound).then_some(if searched { OptimalBy::Search } else { OptimalBy::LowerBound });
        let plan =
            Plan { records, offsets, alignment, slab_size, lower_bound, optimal_by, strategy, method, elapsed, spaces };
        plan.validate()?;
        Ok(plan)
    }

    /// Wraps offsets computed elsewhere (e.g. received from JS) and validates them.
    /// Offsets are relative to each record's memory space; a space's slab is its
    /// highest `offset + size`.
    pub fn from_parts(records: Vec<UsageRecord>, offsets: Vec<u64>, alignment: u64) -> Result<Plan, PlanError> {
        crate::record::check_alignment("plan", alignment)?;
        if records.len() != offsets.len() {
            return Err(PlanError::PlanInvalid(format!("{} records but {} offsets", records.len(), offsets.len())));
        }
        let layout = Layout::new(&records, alignment)?;
        let mut spaces: Vec<SpacePlan> = layout
            .spaces
            .iter()
            .map(|s| SpacePlan { name: s.name.clone(), slab_size: 0, lower_bound: s.bound, capacity: None })
            .collect();
        for (i, r) in records.iter().enumerate() {
            let end = offsets[i]
                .checked_add(r.size)
                .ok_or_else(|| PlanError::PlanInvalid(format!("record {:?}: offset + size overflows", r.id)))?;
            let s = &mut spaces[layout.place[i].0];
            s.slab_size = s.slab_size.max(end);
        }
        Plan::assemble(records, offsets, alignment, spaces, false, Strategy::Naive, "external".into(), Duration::ZERO)
    }

    /// Re-runs the independent checker: alignment, bounds, overflow, fixed offsets,
    /// sharing, and disjoint byte ranges for every pair of records of one space with
    /// overlapping lifetimes; and each space's slab against its capacity.
    pub fn validate(&self) -> Result<(), PlanError> {
        check_offsets(&self.records, &self.offsets, self.slab_size, self.alignment)?;
        for (r, &o) in self.records.iter().zip(&self.offsets) {
            let s = self.spaces.iter().find(|s| s.name == r.space_name());
            if s.is_none_or(|s| o + r.size > s.slab_size) {
                return Err(PlanError::PlanInvalid(format!("record {:?} ends past its space's slab", r.id)));
            }
        }
        for s in &self.spaces {
            if s.slab_size < s.lower_bound {
                return Err(PlanError::PlanInvalid(format!(
                    "space {:?}: slab {} is below the lower bound {}",
                    s.name, s.slab_size, s.lower_bound
                )));
            }
            if s.capacity.is_some_and(|c| s.slab_size > c) {
                return Err(PlanError::PlanInvalid(format!("space {:?}: slab exceeds its capacity", s.name)));
            }
        }
        Ok(())
    }

    pub fn records(&self) -> &[UsageRecord] {
        &self.records
    }
    /// Offset of each record (within its memory space), in the order of `records()`.
    pub fn offsets(&self) -> &[u64] {
        &self.offsets
    }
    /// Offset of the record with this id.
    pub fn offset_of(&self, id: &str) -> Option<u64> {
        self.records.iter().position(|r| r.id == id).map(|i| self.offsets[i])
    }
    /// Bytes of the slab: the highest `offset + size`; with several memory spaces,
    /// the sum of their slabs.
    pub fn slab_size(&self) -> u64 {
        self.slab_size
    }
    /// Lower bound on the slab (summed over spaces): the aligned bound (see
    /// `bound.rs`), raised to what the exact search proved. The same figure the
    /// progress reports end on.
    pub fn lower_bound(&self) -> u64 {
        self.lower_bound
    }
    /// `slab_size / lower_bound` (1.0 for an empty plan).
    pub fn ratio(&self) -> f64 {
        if self.lower_bound == 0 {
            1.0
        } else {
            self.slab_size as f64 / self.lower_bound as f64
        }
    }
    /// Optimal: `slab_size == lower_bound`, by the bound itself or by the search
    /// (see [`Plan::optimal_by`]).
    pub fn optimal(&self) -> bool {
        self.optimal_by.is_some()
    }
    pub fn optimal_by(&self) -> Option<OptimalBy> {
        self.optimal_by
    }
    pub fn strategy(&self) -> Strategy {
        self.strategy
    }
    /// Which heuristic or search produced the offsets, e.g. `"greedy(area,bestFit)"`.
    pub fn method(&self) -> &str {
        &self.method
    }
    pub fn alignment(&self) -> u64 {
        self.alignment
    }
    pub fn elapsed(&self) -> Duration {
        self.elapsed
    }
    /// The memory spaces, in order of first appearance.
    pub fn spaces(&self) -> &[SpacePlan] {
        &self.spaces
    }

    /// JSON: `strategy, method, slabSize, lowerBound, ratio, optimal, optimalBy,
    /// timeMs, alignment, offsets, spaces[{name,slabSize,lowerBound,capacity?}],
    /// records[{id,size,first,last,alignment?,preferredOffset?,sharesWith?,space?,
    /// fixed?,offset}]`. Integers above 2^53 - 1 are decimal strings (exact in JS);
    /// a record's `offset` is where it was placed, and `fixed: true` marks a fixed one.
    /// [`crate::json::parse_records`] reads this back with every constraint.
    pub fn to_json(&self) -> String {
        let records: Vec<Value> = self
            .records
            .iter()
            .zip(&self.offsets)
            .map(|(r, &o)| {
                let mut v = record_json(r);
                if let Value::Object(m) = &mut v {
                    if r.offset.is_some() {
                        m.insert("fixed".into(), Value::Bool(true));
                    }
                    m.insert("offset".into(), int(o));
                }
                v
            })
            .collect();
        let spaces: Vec<Value> = self
            .spaces
            .iter()
            .map(|s| {
                let mut m = Map::new();
                m.insert("name".into(), Value::String(s.name.clone()));
                m.insert("slabSize".into(), int(s.slab_size));
                m.insert("lowerBound".into(), int(s.lower_bound));
                if let Some(c) = s.capacity {
                    m.insert("capacity".into(), int(c));
                }
                Value::Object(m)
            })
            .collect();
        json!({
            "strategy": self.strategy.as_str(),
            "method": self.method,
            "slabSize": int(self.slab_size),
            "lowerBound": int(self.lower_bound),
            "ratio": self.ratio(),
            "optimal": self.optimal(),
            "optimalBy": self.optimal_by.map(OptimalBy::as_str),
            "timeMs": self.elapsed.as_secs_f64() * 1e3,
            "alignment": int(self.alignment),
            "offsets": self.offsets.iter().map(|&o| int(o)).collect::<Vec<_>>(),
            "spaces": spaces,
            "records": records,
        })
        .to_string()
    }

    /// SVG picture: op index on x, offset on y, one rectangle per record.
    pub fn to_svg(&self) -> String {
        crate::svg::render(self)
    }
}
