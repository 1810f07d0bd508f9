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
    /// Any other argument the caller got wrong: `path` (the field, as the caller names it)
    /// should have been `expected` but was `got`; `hint` (may be empty) says what to do.
    #[error("{path}: expected {expected}, got {got}{}", if hint.is_empty() { String::new() } else { format!("; {hint}") })]
    InvalidArgument { path: String, expected: String, got: String, hint: String },
    /// Malformed CSV/JSON. `line` is 1-based; 0 for JSON, where `field` is the path.
    #[error("{}", parse_message(*line, field, message))]
    Parse { line: usize, field: String, message: String },
    /// A field of JSON input has the wrong type or value (PARSE_ERROR): `path` names it,
    /// `expected` what it should have been, `got` what it was; `hint` (may be empty) what to do.
    #[error("{path}: expected {expected}, got {got}{}", if hint.is_empty() { String::new() } else { format!("; {hint}") })]
    Field { path: String, expected: String, got: String, hint: String },
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
            | PlanError::InvalidArgument { .. } => "INVALID_ARGUMENT",
            PlanError::Parse { .. } | PlanError::Field { .. } => "PARSE_ERROR",
            PlanError::SizeOverflow(_) => "SIZE_OVERFLOW",
            PlanError::PlanInvalid(_) => "PLAN_INVALID",
            PlanError::Infeasible(_) => "INFEASIBLE",
            PlanError::CapacityNotMet(_) => "CAPACITY_NOT_MET",
            PlanError::Stopped => "ABORTED",
            PlanError::Internal(_) => "INTERNAL",
        }
    }

    /// [`PlanError::InvalidArgument`] without a hint.
    pub fn invalid(path: impl Into<String>, expected: impl Into<String>, got: impl Into<String>) -> Self {
        let (path, expected, got) = (path.into(), expected.into(), got.into());
        // Every field is what a caller reads in `err.details`: none may be blank.
        debug_assert!(!path.is_empty() && !expected.is_empty() && !got.is_empty(), "{path:?} {expected:?} {got:?}");
        PlanError::InvalidArgument { path, expected, got, hint: String::new() }
    }

    /// The same error with `hint`, what to do; other variants pass through.
    #[must_use]
    pub fn with_hint(self, hint: impl Into<String>) -> Self {
        match self {
            PlanError::InvalidArgument { path, expected, got, .. } => {
                PlanError::InvalidArgument { path, expected, got, hint: hint.into() }
            }
            PlanError::Field { path, expected, got, .. } => PlanError::Field { path, expected, got, hint: hint.into() },
            other => other,
        }
    }

    /// Every INVALID_ARGUMENT's `(path, expected, got)`: the field, what would have been
    /// accepted, and what was given. `None` for the other codes.
    pub fn invalid_argument(&self) -> Option<(String, String, String)> {
        let record = |id: &str| format!("record {id:?}");
        Some(match self {
            PlanError::InvalidArgument { path, expected, got, .. } => (path.clone(), expected.clone(), got.clone()),
            PlanError::InvalidLifetime { id, first, last } => {
                (format!("{}.first", record(id)), format!("at most {last} (its last op)"), first.to_string())
            }
            PlanError::DuplicateId { id } => ("id".into(), "an id no other record has".into(), format!("{id:?}")),
            PlanError::BadAlignment { what, alignment } => {
                (what.clone(), "a positive integer".into(), alignment.to_string())
            }
            PlanError::UnknownView { id, view_of } => {
                (format!("tensor {id:?}.viewOf"), "the id of a tensor".into(), format!("{view_of:?}"))
            }
            PlanError::ViewCycle { id } => {
                (format!("tensor {id:?}.viewOf"), "a chain of views that ends".into(), "a cycle".into())
            }
            _ => return None,
        })
    }

    /// The `(path, expected, got)` of a bad JSON field ([`PlanError::Field`]): the same
    /// data as an INVALID_ARGUMENT's, since a field of objects the caller passed is an argument.
    pub fn field(&self) -> Option<(String, String, String)> {
        match self {
            PlanError::Field { path, expected, got, .. } => Some((path.clone(), expected.clone(), got.clone())),
            _ => None,
        }
    }

    /// [`PlanError::Field`] without a hint.
    pub(crate) fn bad_field(path: impl Into<String>, expected: impl Into<String>, got: impl Into<String>) -> Self {
        PlanError::Field { path: path.into(), expected: expected.into(), got: got.into(), hint: String::new() }
    }

    pub(crate) fn parse(line: usize, field: impl Into<String>, message: impl Into<String>) -> Self {
        PlanError::Parse { line, field: field.into(), message: message.into() }
    }
}

/// `INVALID_ARGUMENT` for the value at `path`: what it must be, and what it was.
pub(crate) fn invalid(path: impl fmt::Display, expected: impl fmt::Display, got: impl fmt::Display) -> PlanError {
    PlanError::InvalidArgument {
        path: path.to_string(),
        expected: expected.to_string(),
        got: got.to_string(),
        hint: String::new(),
    }
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
