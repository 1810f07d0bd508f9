//! Strategy names, stable for the JS API.

use crate::error::PlanError;
use std::fmt;
use std::str::FromStr;

/// Placement strategy. Names (`as_str`) are camelCase and stable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Strategy {
    /// Bump allocation: every record gets its own bytes.
    Naive,
    /// Online first-free simulation in lifetime order (after Wimmer & Moessenboeck).
    LinearScan,
    /// Pisarchyk & Lee, greedy by size for offset calculation.
    GreedyBySize,
    /// Pisarchyk & Lee, greedy by operator breadth.
    GreedyByBreadth,
    /// TFLite's ArenaPlanner: records live over the whole run (graph inputs) first,
    /// then greedy by size.
    GreedyInputsFirst,
    /// Greedy placement under several orders and fit rules; keeps the smallest.
    Portfolio,
    /// Anytime exact search (MiniMalloc-style), seeded by the portfolio.
    Exact,
    /// Portfolio, then exact search within the time budget.
    #[default]
    Best,
}

impl Strategy {
    pub const ALL: [Strategy; 8] = [
        Strategy::Naive,
        Strategy::LinearScan,
        Strategy::GreedyBySize,
        Strategy::GreedyByBreadth,
        Strategy::GreedyInputsFirst,
        Strategy::Portfolio,
        Strategy::Exact,
        Strategy::Best,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Naive => "naive",
            Strategy::LinearScan => "linearScan",
            Strategy::GreedyBySize => "greedyBySize",
            Strategy::GreedyByBreadth => "greedyByBreadth",
            Strategy::GreedyInputsFirst => "greedyInputsFirst",
            Strategy::Portfolio => "portfolio",
            Strategy::Exact => "exact",
            Strategy::Best => "best",
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Strategy {
    type Err = PlanError;
    fn from_str(s: &str) -> Result<Self, PlanError> {
        Strategy::ALL.into_iter().find(|k| k.as_str() == s).ok_or_else(|| {
            PlanError::invalid(
                "strategy",
                format!("one of {}", Strategy::ALL.iter().map(|k| k.as_str()).collect::<Vec<_>>().join(", ")),
                format!("{s:?}"),
            )
            .with_hint(format!("unknown strategy {s:?}"))
        })
    }
}
