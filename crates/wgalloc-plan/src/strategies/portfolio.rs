//! Portfolio: greedy placement under every order x fit rule, plus linear scan; keeps the lowest
//! slab (as XLA's heap simulator does with its several heuristics).

use super::greedy::{place, Fit};
use super::orders::Order;
use crate::bound::problem_lower_bound;
use crate::error::PlanError;
use crate::record::Problem;

pub(crate) struct Candidate {
    pub offsets: Vec<u64>,
    pub height: u64,
    pub method: String,
}

pub(crate) fn height(p: &Problem, offsets: &[u64]) -> u64 {
    // Offsets come from checked placement, so offset + size cannot overflow.
    (0..p.len()).map(|i| offsets[i] + p.size[i]).max().unwrap_or(0)
}

pub(crate) fn plan(p: &Problem) -> Result<Candidate, PlanError> {
    let lb = problem_lower_bound(p);
    let mut best: Option<Candidate> = None;
    for order in Order::ALL {
        if best.as_ref().is_some_and(|b| b.height <= lb) {
            break; // at the lower bound: nothing can do better
        }
        let ord = order.compute(p);
        for fit in [Fit::Best, Fit::First] {
            if best.as_ref().is_some_and(|b| b.height <= lb) {
                break;
            }
            let offsets = place(p, &ord, fit)?;
            let h = height(p, &offsets);
            if best.as_ref().is_none_or(|b| h < b.height) {
                best = Some(Candidate {
                    offsets,
                    height: h,
                    method: format!("greedy({},{})", order.as_str(), fit.as_str()),
                });
            }
        }
    }
    // The online linear scan sometimes beats every offline order (e.g. MiniMalloc F).
    if best.as_ref().is_none_or(|b| b.height > lb) {
        let offsets = super::linear_scan::plan(p)?;
        let h = height(p, &offsets);
        if best.as_ref().is_none_or(|b| h < b.height) {
            best = Some(Candidate { offsets, height: h, method: "linearScan".into() });
        }
    }
    Ok(best.unwrap_or(Candidate { offsets: Vec::new(), height: 0, method: "empty".into() }))
}
