//! Entry point: validate records, group shared ranges, plan each memory space with
//! the chosen strategy, check capacities, check the result.

use crate::error::PlanError;
use crate::layout::{Layout, Space};
use crate::options::{Budget, PlanOptions, DEFAULT_TIME_LIMIT};
use crate::plan::{Plan, SpacePlan};
use crate::record::{Problem, UsageRecord};
use crate::strategies::greedy::{place, Fit};
use crate::strategies::orders::Order;
use crate::strategies::{exact, improve, linear_scan, naive, portfolio, window, Stop};
use crate::strategy::Strategy;
use std::borrow::Cow;
use std::time::Instant;

/// Share of what is left of `best`'s budget the peak-window relaxation may take.
const WINDOW_SHARE: f64 = 0.4;

/// Plans `records` with `opts`. Every returned plan has passed [`Plan::validate`].
/// The plan keeps the records: pass them by value (a `Vec`) to spare it a copy.
/// Empty input gives an empty plan with slab 0.
pub fn plan<'a>(records: impl Into<Cow<'a, [UsageRecord]>>, mut opts: PlanOptions) -> Result<Plan, PlanError> {
    let start = Instant::now();
    let records: Cow<'a, [UsageRecord]> = records.into();
    let layout = Layout::new(&records, opts.alignment)?;
    if opts.cancel.as_ref().is_some_and(|c| c.load(std::sync::atomic::Ordering::Relaxed)) {
        return Err(PlanError::Stopped);
    }
    if let Some(name) = opts.capacities.keys().find(|n| !layout.spaces.iter().any(|s| &s.name == *n)) {
        if !layout.spaces.is_empty() || name != crate::record::DEFAULT_SPACE {
            return Err(PlanError::invalid(
                format!("capacities.{name}"),
                "a space some record uses",
                format!("{name:?}"),
            )
            .with_hint(format!("capacity given for space {name:?}, which no record uses")));
        }
    }
    let limit = opts.time_limit.unwrap_or(DEFAULT_TIME_LIMIT);
    let mut budget = Budget::new(start, limit, opts.cancel.take(), opts.progress.take());
    let overall = budget.deadline();
    let n = layout.spaces.len();
    // Seeds first: every space has a plan (and its figures) before any search runs.
    let mut outs: Vec<SpaceOutcome> = Vec::with_capacity(n);
    for sp in &layout.spaces {
        let cap = opts.capacities.get(&sp.name).copied();
        if let Some(c) = cap {
            check_capacity_bound(sp, c)?;
        }
        // The time limit is the search's: a seed stops early only when cancelled (the caller
        // then wants no plan, so none is made). `best` starts from the whole portfolio, so it is
        // never worse than `portfolio`.
        let cancelled = || budget.cancelled();
        outs.push(seed(&sp.problem, opts.strategy, sp.bound, &cancelled)?);
    }
    if matches!(opts.strategy, Strategy::Exact | Strategy::Best) {
        for k in 0..n {
            let others = |f: fn(&SpaceOutcome) -> u64| (0..n).filter(|&j| j != k).map(|j| f(&outs[j])).sum::<u64>();
            budget.others = (others(|o| o.height), others(|o| o.bound));
            // The spaces still to search share what is left of the budget evenly.
            let now = Instant::now();
            let share = overall.saturating_duration_since(now) / (n - k) as u32;
            budget.set_deadline(now + share);
            let sp = &layout.spaces[k];
            let seed = std::mem::replace(&mut outs[k].candidate, portfolio::Candidate::empty());
            let out = exact::search(&sp.problem, seed, sp.bound, &mut budget)?;
            let mut best = out.best;
            let mut bound = out.lower_bound;
            if opts.strategy == Strategy::Best && best.height > bound {
                if sp.problem.len() > exact::MAX_SEARCH_BUFFERS {
                    // Too large for the search whole: the peak's window exactly, with a share of the time.
                    let now = Instant::now();
                    let slice = budget.deadline().saturating_duration_since(now).mul_f64(WINDOW_SHARE);
                    if let Some(c) = window::relax_peak(&sp.problem, sp.bound_at, &best, &budget, now + slice)? {
                        best = c;
                        budget.report(best.height, bound);
                    }
                }
                best = improve::improve(&sp.problem, best, bound, &mut budget)?;
                bound = bound.min(best.height);
            }
            outs[k] = SpaceOutcome { height: best.height, bound, candidate: best };
            budget.report(outs[k].height, outs[k].bound);
        }
    }
    let mut spaces = Vec::with_capacity(n);
    let mut per_space = Vec::with_capacity(n);
    let mut methods = Vec::with_capacity(n);
    for (sp, out) in layout.spaces.iter().zip(outs) {
        let capacity = opts.capacities.get(&sp.name).copied();
        if let Some(c) = capacity.filter(|&c| out.height > c) {
            return Err(capacity_error(sp, c, out.height, out.bound));
        }
        spaces.push(SpacePlan { name: sp.name.clone(), slab_size: out.height, lower_bound: out.bound, capacity });
        methods.push(if n == 1 {
            out.candidate.method.clone()
        } else {
            format!("{}: {}", sp.name, out.candidate.method)
        });
        per_space.push(out.candidate.offsets);
    }
    let searched = spaces.iter().zip(&layout.spaces).any(|(s, sp)| s.lower_bound > sp.bound);
    let offsets = layout.record_offsets(&per_space);
    let method = if methods.is_empty() { "empty".to_string() } else { methods.join("; ") };
    Plan::assemble(
        records.into_owned(),
        offsets,
        opts.alignment,
        spaces,
        searched,
        opts.strategy,
        method,
        start.elapsed(),
    )
}

struct SpaceOutcome {
    candidate: portfolio::Candidate,
    height: u64,
    bound: u64,
}

/// The strategy's own plan of one space (for `exact`/`best`, the search's seed).
/// [`PlanError::Stopped`] when `stop` fired before it had one.
fn seed(p: &Problem, strategy: Strategy, bound: u64, stop: Stop) -> Result<SpaceOutcome, PlanError> {
    let greedy = |order: Order| place(p, &order.compute(p), Fit::Best, stop);
    let (offsets, method) = match strategy {
        Strategy::Naive => (naive::plan(p)?, "naive"),
        Strategy::LinearScan => (linear_scan::plan(p, stop)?, "linearScan"),
        Strategy::GreedyBySize | Strategy::Exact => (greedy(Order::Size)?, "greedyBySize"),
        Strategy::GreedyByBreadth => (greedy(Order::Breadth)?, "greedyByBreadth"),
        Strategy::GreedyInputsFirst => (greedy(Order::InputsFirst)?, "greedyInputsFirst"),
        Strategy::Portfolio | Strategy::Best => {
            let c = portfolio::plan(p, stop)?;
            return Ok(outcome(p, c.offsets, &c.method, bound));
        }
    };
    Ok(outcome(p, offsets, method, bound))
}

fn outcome(p: &Problem, offsets: Vec<u64>, method: &str, bound: u64) -> SpaceOutcome {
    let height = portfolio::height(p, &offsets);
    SpaceOutcome { candidate: portfolio::Candidate { offsets, height, method: method.to_string() }, height, bound }
}

/// Fails at once when the live bytes at one op index already exceed the capacity.
fn check_capacity_bound(sp: &Space, capacity: u64) -> Result<(), PlanError> {
    if sp.bound > capacity {
        let op = sp.problem.times.get(sp.bound_at).copied().unwrap_or(0);
        return Err(PlanError::Infeasible(format!(
            "space {:?}: at op {op} the live records need at least {} bytes (with alignment), above its capacity {capacity}",
            sp.name, sp.bound
        )));
    }
    Ok(())
}

fn capacity_error(sp: &Space, capacity: u64, height: u64, bound: u64) -> PlanError {
    if bound > capacity {
        PlanError::Infeasible(format!(
            "space {:?}: the exact search proved no plan fits below {bound} bytes, above its capacity {capacity}",
            sp.name
        ))
    } else {
        PlanError::CapacityNotMet(format!(
            "space {:?}: the best plan found needs {height} bytes, above its capacity {capacity}; the lower bound is \
             {bound}, so a plan may exist (try strategy best with a longer time limit)",
            sp.name
        ))
    }
}
