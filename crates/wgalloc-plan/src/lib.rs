//! Static memory planner of wgalloc: given buffers with known sizes and lifetimes
//! (usage records), assign each an offset in one slab so that buffers live at the
//! same time never share bytes, and make the slab small.
//!
//! ```
//! use wgalloc_plan::{plan, PlanOptions, Strategy, UsageRecord};
//!
//! let records = vec![
//!     UsageRecord::new("a", 32, 0, 1),
//!     UsageRecord::new("b", 28, 1, 4),
//!     UsageRecord::new("c", 36, 2, 5),
//! ];
//! let p = plan(&records, PlanOptions::with_strategy(Strategy::GreedyBySize)).unwrap();
//! assert_eq!(p.slab_size(), 64); // a and c never overlap, so they share bytes
//! assert!(p.validate().is_ok());
//! assert!(p.to_json().contains("\"slabSize\":64"));
//! ```
//!
//! Public surface: [`UsageRecord`], [`Strategy`], [`PlanOptions`] (+ [`Progress`]),
//! [`Plan`], [`plan`], [`lower_bound`], [`check_offsets`], [`PlanError`] (with
//! stable `code()`), [`csv`] (MiniMalloc format), [`json`] (our records format)
//! [`doc`] (the graph document the planner and the executor read), [`graph`] (records from a
//! tensor graph, as AITemplate builds them) and [`input`] (an input in any of these formats,
//! told apart, with the options of planning it).
//!
//! Lower bound reported by plans: LOAD (the largest total size live at one op index)
//! strengthened for alignment (see `bound.rs`) and raised by the exact search when it
//! proves a height infeasible; [`lower_bound`] is plain LOAD.

mod bound;
mod check;
pub mod csv;
pub mod doc;
mod error;
pub mod graph;
mod index;
pub mod input;
pub mod json;
mod layout;
mod options;
mod plan;
mod planner;
mod radix;
mod rank_set;
mod record;
mod strategies;
mod strategy;
mod svg;
// Shared by the unit tests and the `plan_suite` example's perturbed instances; not API.
#[doc(hidden)]
pub mod test_rng;

pub use bound::lower_bound;
pub use check::check_offsets;
pub use error::PlanError;
pub use options::{PlanOptions, Progress, ProgressFn, DEFAULT_TIME_LIMIT};
pub use plan::{OptimalBy, Plan, SpacePlan};
pub use planner::plan;
pub use record::{UsageRecord, DEFAULT_SPACE};
pub use strategy::Strategy;
