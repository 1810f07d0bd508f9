//! Entry point: validate records, run the chosen strategy, check the result.

use crate::error::PlanError;
use crate::options::{Budget, PlanOptions, DEFAULT_TIME_LIMIT};
use crate::plan::Plan;
use crate::record::{Problem, UsageRecord};
use crate::strategies::greedy::{place, Fit};
use crate::strategies::orders::Order;
use crate::strategies::{exact, linear_scan, naive, portfolio};
use crate::strategy::Strategy;
use std::time::Instant;

/// Plans `records` with `opts`. Every returned plan has passed [`Plan::validate`].
/// Empty input gives an empty plan with slab 0.
pub fn plan(records: &[UsageRecord], opts: PlanOptions) -> Result<Plan, PlanError> {
    let start = Instant::now();
    let problem = Problem::new(records, opts.alignment)?;
    let p = &problem;
    let (offsets, optimal, method) = match opts.strategy {
        Strategy::Naive => (naive::plan(p)?, false, "naive".to_string()),
        Strategy::LinearScan => (linear_scan::plan(p)?, false, "linearScan".to_string()),
        Strategy::GreedyBySize => (place(p, &Order::Size.compute(p), Fit::Best)?, false, "greedyBySize".to_string()),
        Strategy::GreedyByBreadth => {
            (place(p, &Order::Breadth.compute(p), Fit::Best)?, false, "greedyByBreadth".to_string())
        }
        Strategy::Portfolio => {
            let c = portfolio::plan(p)?;
            (c.offsets, false, c.method)
        }
        Strategy::Exact | Strategy::Best => {
            let limit = opts.time_limit.unwrap_or(DEFAULT_TIME_LIMIT);
            let mut budget = Budget::new(start, limit, opts.cancel, opts.progress);
            let seed = if opts.strategy == Strategy::Best {
                portfolio::plan(p)?
            } else {
                let offsets = place(p, &Order::Size.compute(p), Fit::Best)?;
                let height = portfolio::height(p, &offsets);
                portfolio::Candidate { offsets, height, method: "greedyBySize".into() }
            };
            let out = exact::search(p, seed, &mut budget)?;
            (out.best.offsets, out.optimal, out.best.method)
        }
    };
    Plan::assemble(records, p, offsets, opts.alignment, optimal, opts.strategy, method, start.elapsed())
}
