//! Placement strategies. Each returns one offset per record of a [`Problem`].

pub(crate) mod exact;
pub(crate) mod greedy;
pub(crate) mod improve;
pub(crate) mod linear_scan;
pub(crate) mod naive;
pub(crate) mod orders;
pub(crate) mod portfolio;
pub(crate) mod window;

/// Asked between pieces of work: true once the caller cancelled or the time limit passed.
pub(crate) type Stop<'a> = &'a dyn Fn() -> bool;

/// Records placed between two polls of a [`Stop`]: cheap to poll, quick to react.
pub(crate) const STOP_POLL: usize = 1024;
