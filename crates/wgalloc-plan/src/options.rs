//! Planner options: strategy, alignment, time budget, cancellation, progress.

use crate::strategy::Strategy;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Reported by the search each time it improves the best height or the bound. With
/// several memory spaces both figures are totals over the spaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Height of the best plan found so far.
    pub best: u64,
    /// Proven lower bound on the optimum so far: starts at the aligned lower bound
    /// (the plan's `lower_bound`), raised when the search proves a height infeasible.
    pub lower_bound: u64,
    pub elapsed: Duration,
}

/// Callback receiving [`Progress`]; must be `Send` so planning can run off-thread.
pub type ProgressFn = Box<dyn FnMut(Progress) + Send>;

/// Default search budget of `exact`/`best` when `time_limit` is `None`.
pub const DEFAULT_TIME_LIMIT: Duration = Duration::from_secs(1);

pub struct PlanOptions {
    pub strategy: Strategy,
    /// Plan-wide offset alignment (any positive integer). A record's offset is a
    /// multiple of both this and its own alignment (the larger, for powers of two).
    pub alignment: u64,
    /// Capacity in bytes of memory spaces, by name (`"default"` for records without a
    /// `space`). A space whose plan cannot fit fails with `INFEASIBLE` when that is
    /// proven, else `CAPACITY_NOT_MET`.
    pub capacities: HashMap<String, u64>,
    /// Budget of the `exact`/`best` search (default [`DEFAULT_TIME_LIMIT`]); heuristics, and the
    /// seeds the search starts from, ignore it (cancel stops them).
    pub time_limit: Option<Duration>,
    /// Set to true from any thread to stop the search; the best plan so far is returned.
    pub cancel: Option<Arc<AtomicBool>>,
    pub progress: Option<ProgressFn>,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            strategy: Strategy::Best,
            alignment: 1,
            capacities: HashMap::new(),
            time_limit: None,
            cancel: None,
            progress: None,
        }
    }
}

impl PlanOptions {
    pub fn with_strategy(strategy: Strategy) -> Self {
        PlanOptions { strategy, ..Default::default() }
    }
}

impl fmt::Debug for PlanOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PlanOptions")
            .field("strategy", &self.strategy)
            .field("alignment", &self.alignment)
            .field("capacities", &self.capacities)
            .field("time_limit", &self.time_limit)
            .field("cancel", &self.cancel.as_ref().map(|c| c.load(Ordering::Relaxed)))
            .field("progress", &self.progress.is_some())
            .finish()
    }
}

/// Deadline + cancel flag + progress sink, shared by the search loops.
/// The part of a [`Budget`] that search threads share (the progress callback stays with the caller).
pub(crate) struct Stop {
    deadline: Instant,
    cancel: Option<Arc<AtomicBool>>,
}

impl Stop {
    pub fn expired(&self) -> bool {
        self.cancel.as_ref().is_some_and(|c| c.load(Ordering::Relaxed)) || Instant::now() >= self.deadline
    }
}

pub(crate) struct Budget {
    start: Instant,
    deadline: Instant,
    cancel: Option<Arc<AtomicBool>>,
    progress: Option<ProgressFn>,
    /// Best heights and bounds of the other memory spaces, added to every report.
    pub others: (u64, u64),
    last: Option<(u64, u64)>,
}

impl Budget {
    pub fn new(start: Instant, limit: Duration, cancel: Option<Arc<AtomicBool>>, progress: Option<ProgressFn>) -> Self {
        let deadline = start.checked_add(limit).unwrap_or(start + Duration::from_secs(86_400 * 365));
        Budget { start, deadline, cancel, progress, others: (0, 0), last: None }
    }

    /// The overall deadline.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Moves the deadline (never past the overall one is the caller's business).
    pub fn set_deadline(&mut self, deadline: Instant) {
        self.deadline = deadline;
    }

    pub fn expired(&self) -> bool {
        self.cancelled() || Instant::now() >= self.deadline
    }

    /// A budget for a sub-problem: the same cancel flag, `deadline` (no later than this one's),
    /// and no progress reports (its heights are not the plan's).
    pub fn sub(&self, deadline: Instant) -> Budget {
        Budget {
            start: self.start,
            deadline: deadline.min(self.deadline),
            cancel: self.cancel.clone(),
            progress: None,
            others: (0, 0),
            last: None,
        }
    }

    /// What a search thread checks to stop: the deadline and the caller's cancel flag.
    pub fn stop(&self) -> Stop {
        Stop { deadline: self.deadline, cancel: self.cancel.clone() }
    }

    pub fn cancelled(&self) -> bool {
        self.cancel.as_ref().is_some_and(|c| c.load(Ordering::Relaxed))
    }

    /// Reports a space's best height and bound (totals with the other spaces); a
    /// report equal to the last one is dropped.
    pub fn report(&mut self, best: u64, lower_bound: u64) {
        let elapsed = self.start.elapsed();
        let total = (best.saturating_add(self.others.0), lower_bound.saturating_add(self.others.1));
        if self.last == Some(total) {
            return;
        }
        self.last = Some(total);
        if let Some(cb) = self.progress.as_mut() {
            cb(Progress { best: total.0, lower_bound: total.1, elapsed });
        }
    }
}
