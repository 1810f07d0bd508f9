//! Portfolio: greedy placement under every order x fit rule, plus linear scan; keeps the lowest
//! slab (as XLA's heap simulator does with its several heuristics).

use super::greedy::{place, Fit};
use super::orders::Order;
use super::Stop;
use crate::bound::problem_lower_bound;
use crate::error::PlanError;
use crate::record::Problem;

pub(crate) struct Candidate {
    pub offsets: Vec<u64>,
    pub height: u64,
    pub method: String,
}

impl Candidate {
    pub fn empty() -> Candidate {
        Candidate { offsets: Vec::new(), height: 0, method: String::new() }
    }
}

pub(crate) fn height(p: &Problem, offsets: &[u64]) -> u64 {
    // Offsets come from checked placement, so offset + size cannot overflow.
    (0..p.len()).map(|i| offsets[i] + p.size[i]).max().unwrap_or(0)
}

/// Once `stop` says so, the best candidate so far is kept; with none yet, [`PlanError::Stopped`].
pub(crate) fn plan(p: &Problem, stop: Stop) -> Result<Candidate, PlanError> {
    let lb = problem_lower_bound(p);
    let mut best: Option<Candidate> = None;
    let keep = |offsets: Vec<u64>, method: &dyn Fn() -> String, best: &mut Option<Candidate>| {
        let h = height(p, &offsets);
        if best.as_ref().is_none_or(|b| h < b.height) {
            *best = Some(Candidate { offsets, height: h, method: method() });
        }
    };
    'search: {
        for order in Order::ALL {
            let ord = order.compute(p);
            for fit in [Fit::Best, Fit::First] {
                if best.as_ref().is_some_and(|b| b.height <= lb) {
                    break 'search; // at the lower bound: nothing can do better
                }
                let offsets = match place(p, &ord, fit, stop) {
                    Err(PlanError::Stopped) if best.is_some() => break 'search,
                    r => r?,
                };
                keep(offsets, &|| format!("greedy({},{})", order.as_str(), fit.as_str()), &mut best);
            }
        }
        // The online linear scan sometimes beats every offline order (e.g. MiniMalloc F).
        if best.as_ref().is_none_or(|b| b.height > lb) {
            match super::linear_scan::plan(p, stop) {
                Err(PlanError::Stopped) if best.is_some() => break 'search,
                r => keep(r?, &|| "linearScan".into(), &mut best),
            }
        }
    }
    Ok(best.unwrap_or(Candidate { offsets: Vec::new(), height: 0, method: "empty".into() }))
}
