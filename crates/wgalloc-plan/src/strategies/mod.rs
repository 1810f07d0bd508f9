//! Placement strategies. Each returns one offset per record of a [`Problem`].

pub(crate) mod exact;
pub(crate) mod greedy;
pub(crate) mod linear_scan;
pub(crate) mod naive;
pub(crate) mod orders;
pub(crate) mod portfolio;
