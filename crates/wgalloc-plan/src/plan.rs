//! The result of planning: one offset per record inside a slab, with its quality
//! figures. Fields are private so a `Plan` in hand has always passed the checker;
//! plans computed elsewhere enter through [`Plan::from_parts`], which validates.

use crate::bound::{lower_bound, problem_lower_bound};
use crate::check::check_offsets;
use crate::error::PlanError;
use crate::record::{Problem, UsageRecord};
use crate::strategy::Strategy;
use serde::Serialize;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    records: Vec<UsageRecord>,
    offsets: Vec<u64>,
    alignment: u64,
    slab_size: u64,
    lower_bound: u64,
    optimal: bool,
    strategy: Strategy,
    method: String,
    elapsed: Duration,
}

/// JSON shape of a plan (camelCase, stable).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PlanJson<'a> {
    strategy: &'static str,
    method: &'a str,
    slab_size: u64,
    lower_bound: u64,
    ratio: f64,
    optimal: bool,
    time_ms: f64,
    alignment: u64,
    offsets: &'a [u64],
    records: Vec<PlacedJson<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PlacedJson<'a> {
    id: &'a str,
    size: u64,
    first: u64,
    last: u64,
    offset: u64,
}

impl Plan {
    /// Builds and validates a plan. `pub(crate)`: planners use this.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn assemble(
        records: &[UsageRecord],
        problem: &Problem,
        offsets: Vec<u64>,
        alignment: u64,
        optimal: bool,
        strategy: Strategy,
        method: String,
        elapsed: Duration,
    ) -> Result<Plan, PlanError> {
        let lb = problem_lower_bound(problem);
        let slab_size = slab_of(records, &offsets)?;
        let plan = Plan {
            records: records.to_vec(),
            offsets,
            alignment,
            slab_size,
            lower_bound: lb,
            // A plan at LOAD is optimal whatever the search proved.
            optimal: optimal || slab_size == lb,
            strategy,
            method,
            elapsed,
        };
        plan.validate()?;
        Ok(plan)
    }

    /// Wraps offsets computed elsewhere (e.g. received from JS) and validates them.
    /// The slab size is the highest `offset + size`.
    pub fn from_parts(records: Vec<UsageRecord>, offsets: Vec<u64>, alignment: u64) -> Result<Plan, PlanError> {
        crate::record::check_alignment("plan", alignment)?;
        if records.len() != offsets.len() {
            return Err(PlanError::PlanInvalid(format!("{} records but {} offsets", records.len(), offsets.len())));
        }
        let slab_size = slab_of(&records, &offsets)?;
        let lb = lower_bound(&records)?;
        let plan = Plan {
            records,
            offsets,
            alignment,
            slab_size,
            lower_bound: lb,
            optimal: slab_size == lb,
            strategy: Strategy::Naive,
            method: "external".into(),
            elapsed: Duration::ZERO,
        };
        plan.validate()?;
        Ok(plan)
    }

    /// Re-runs the independent checker: alignment, bounds, overflow, and
    /// disjoint byte ranges for every pair of records with overlapping lifetimes.
    pub fn validate(&self) -> Result<(), PlanError> {
        check_offsets(&self.records, &self.offsets, self.slab_size, self.alignment)?;
        if self.slab_size < self.lower_bound {
            return Err(PlanError::PlanInvalid(format!(
                "slab {} is below the lower bound {}",
                self.slab_size, self.lower_bound
            )));
        }
        Ok(())
    }

    pub fn records(&self) -> &[UsageRecord] {
        &self.records
    }
    /// Offset of each record, in the order of `records()`.
    pub fn offsets(&self) -> &[u64] {
        &self.offsets
    }
    /// Offset of the record with this id.
    pub fn offset_of(&self, id: &str) -> Option<u64> {
        self.records.iter().position(|r| r.id == id).map(|i| self.offsets[i])
    }
    pub fn slab_size(&self) -> u64 {
        self.slab_size
    }
    /// LOAD: max live bytes at one op index (alignment padding not counted).
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
    /// Proven optimal (at LOAD, or by exhausting the search).
    pub fn optimal(&self) -> bool {
        self.optimal
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

    /// JSON: `strategy, method, slabSize, lowerBound, ratio, optimal, timeMs,
    /// alignment, offsets, records[{id,size,first,last,offset}]`.
    pub fn to_json(&self) -> String {
        let json = PlanJson {
            strategy: self.strategy.as_str(),
            method: &self.method,
            slab_size: self.slab_size,
            lower_bound: self.lower_bound,
            ratio: self.ratio(),
            optimal: self.optimal,
            time_ms: self.elapsed.as_secs_f64() * 1e3,
            alignment: self.alignment,
            offsets: &self.offsets,
            records: self
                .records
                .iter()
                .zip(&self.offsets)
                .map(|(r, &offset)| PlacedJson { id: &r.id, size: r.size, first: r.first, last: r.last, offset })
                .collect(),
        };
        // Serialising plain numbers and strings cannot fail.
        serde_json::to_string(&json).unwrap_or_default()
    }

    /// SVG picture: op index on x, offset on y, one rectangle per record.
    pub fn to_svg(&self) -> String {
        crate::svg::render(self)
    }
}

fn slab_of(records: &[UsageRecord], offsets: &[u64]) -> Result<u64, PlanError> {
    records.iter().zip(offsets).try_fold(0u64, |m, (r, &o)| {
        o.checked_add(r.size)
            .map(|e| m.max(e))
            .ok_or_else(|| PlanError::PlanInvalid(format!("record {:?}: offset {o} + size overflows", r.id)))
    })
}
