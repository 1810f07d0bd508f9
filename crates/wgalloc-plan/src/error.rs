//! Typed errors. Every failure on user input maps to one variant; `code()` gives the
//! stable string the JS binding exposes.

use std::fmt;
use thiserror::Error;

/// Everything that can go wrong while parsing, building or planning.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum PlanError {
    /// `first > last` for a record.
    #[error("record {id:?}: first op {first} is after last op {last}")]
    InvalidLifetime { id: String, first: u64, last: u64 },
    /// Two records (or tensors) share an id.
    #[error("duplicate id {id:?}")]
    DuplicateId { id: String },
    /// Alignment is zero.
    #[error("{what}: alignment {alignment} is not a positive integer")]
    BadAlignment { what: String, alignment: u64 },
    /// A view names a tensor that does not exist.
    #[error("tensor {id:?} is a view of unknown tensor {view_of:?}")]
    UnknownView { id: String, view_of: String },
    /// A chain of views loops back on itself.
    #[error("tensor {id:?} is part of a view cycle")]
    ViewCycle { id: String },
    /// Any other argument the caller got wrong.
    // The code says INVALID_ARGUMENT already; the message says what is wrong.
    #[error("{0}")]
    InvalidArgument(String),
    /// Malformed CSV/JSON. `line` is 1-based; 0 for JSON, where `field` is the path.
    #[error("{}", parse_message(*line, field, message))]
    Parse { line: usize, field: String, message: String },
    /// A size, offset or sum of sizes does not fit in u64.
    #[error("size overflow: {0}")]
    SizeOverflow(String),
    /// No plan fits a memory space's capacity: proven by the live bytes at one
    /// op index (named in the message) or by the exhaustive search.
    #[error("infeasible: {0}")]
    Infeasible(String),
    /// A capacity was given, no plan within it was found in the time limit, and
    /// infeasibility was not proven either.
    #[error("capacity not met: {0}")]
    CapacityNotMet(String),
    /// Planning was cancelled before any plan existed. (A time limit bounds the search only:
    /// the strategy's first plan is always made, so a plan always comes back.)
    #[error("planning was cancelled before any plan existed")]
    Stopped,
    /// A plan failed the independent checker.
    #[error("plan invalid: {0}")]
    PlanInvalid(String),
    /// The planner itself failed (a bug: the caller's input was not the cause).
    #[error("internal error: {0}; please report it")]
    Internal(String),
}

fn parse_message(line: usize, field: &str, message: &str) -> String {
    match line {
        0 => format!("{field}: {message}"),
        _ => format!("parse error at line {line}, field {field:?}: {message}"),
    }
}

impl PlanError {
    /// Stable machine-readable code (part of the JS API; never rename).
    pub fn code(&self) -> &'static str {
        match self {
            PlanError::InvalidLifetime { .. }
            | PlanError::DuplicateId { .. }
            | PlanError::BadAlignment { .. }
            | PlanError::UnknownView { .. }
            | PlanError::ViewCycle { .. }
            | PlanError::InvalidArgument(_) => "INVALID_ARGUMENT",
            PlanError::Parse { .. } => "PARSE_ERROR",
            PlanError::SizeOverflow(_) => "SIZE_OVERFLOW",
            PlanError::PlanInvalid(_) => "PLAN_INVALID",
            PlanError::Infeasible(_) => "INFEASIBLE",
            PlanError::CapacityNotMet(_) => "CAPACITY_NOT_MET",
            PlanError::Stopped => "ABORTED",
            PlanError::Internal(_) => "INTERNAL",
        }
    }

    pub(crate) fn parse(line: usize, field: impl Into<String>, message: impl Into<String>) -> Self {
        PlanError::Parse { line, field: field.into(), message: message.into() }
    }
}

/// `INVALID_ARGUMENT` for the value at `path`: what it must be, and what it was.
pub(crate) fn invalid(path: impl fmt::Display, expected: impl fmt::Display, got: impl fmt::Display) -> PlanError {
    PlanError::InvalidArgument(format!("{path}: expected {expected}, got {got}"))
}

/// Checked arithmetic helpers: every size/offset sum goes through these.
pub(crate) fn add(a: u64, b: u64, what: &str) -> Result<u64, PlanError> {
    a.checked_add(b).ok_or_else(|| PlanError::SizeOverflow(format!("{what}: {a} + {b}")))
}

/// Smallest multiple of `align` (any positive integer) that is >= `x`.
#[inline]
pub(crate) fn align_up(x: u64, align: u64) -> Result<u64, PlanError> {
    debug_assert!(align > 0);
    // Powers of two (the common case, 1 included) by mask: this sits in the search's inner loop.
    let r = if align.is_power_of_two() { x & (align - 1) } else { x % align };
    if r == 0 {
        Ok(x)
    } else {
        add(x, align - r, "aligning an offset")
    }
}
