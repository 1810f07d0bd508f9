//! The closed sets of names the core declares, as lists: the facade reads some (pool names by
//! index), and a test holds every literal union of the public types to them.

use napi_derive::napi;
use wgalloc_core::error::OomSource;
use wgalloc_core::exec::ObservedKind;
use wgalloc_core::heap::{BlockState, HeapEventKind, PoolKind};
use wgalloc_core::host::Direction;
use wgalloc_core::kv::KvDtype;
use wgalloc_core::profile::{CopyKind, Mode};
use wgalloc_core::BudgetSource;
use wgalloc_plan::doc::TensorKind;
use wgalloc_plan::graph::WorkspaceMode;
use wgalloc_plan::Strategy;

/// Every closed set of names, each in the core's order.
/// @internal
#[napi(object)]
pub struct ConstantTables {
    pub pools: Vec<String>,
    pub heap_event_kinds: Vec<String>,
    pub block_states: Vec<String>,
    pub budget_sources: Vec<String>,
    pub observed_event_kinds: Vec<String>,
    pub copy_kinds: Vec<String>,
    pub profiler_modes: Vec<String>,
    pub host_directions: Vec<String>,
    pub kv_dtypes: Vec<String>,
    pub backends: Vec<String>,
    pub device_types: Vec<String>,
    pub tensor_kinds: Vec<String>,
    pub workspace_modes: Vec<String>,
    pub strategies: Vec<String>,
    pub oom_sources: Vec<String>,
}

/// The core's closed sets of names.
/// @internal
#[napi(catch_unwind)]
pub fn constant_tables() -> ConstantTables {
    ConstantTables {
        pools: PoolKind::ALL.iter().map(|k| k.as_str().to_string()).collect(),
        heap_event_kinds: HeapEventKind::ALL.iter().map(|k| k.as_str().to_string()).collect(),
        block_states: BlockState::ALL.iter().map(|k| k.as_str().to_string()).collect(),
        budget_sources: BudgetSource::ALL.iter().map(|k| k.as_str().to_string()).collect(),
        observed_event_kinds: ObservedKind::ALL.iter().map(|k| k.as_str().to_string()).collect(),
        copy_kinds: CopyKind::ALL.iter().map(|k| k.as_str().to_string()).collect(),
        profiler_modes: Mode::ALL.iter().map(|k| k.as_str().to_string()).collect(),
        host_directions: Direction::ALL.iter().map(|k| k.as_str().to_string()).collect(),
        kv_dtypes: KvDtype::ALL.iter().map(|k| k.as_str().to_string()).collect(),
        backends: wgalloc_core::adapter::backend_names().into_iter().map(String::from).collect(),
        device_types: wgalloc_core::adapter::DEVICE_TYPES
            .iter()
            .map(|&t| wgalloc_core::adapter::device_type_name(t).to_string())
            .collect(),
        tensor_kinds: TensorKind::ALL.iter().map(|k| k.as_str().to_string()).collect(),
        workspace_modes: WorkspaceMode::ALL.iter().map(|k| k.as_str().to_string()).collect(),
        strategies: Strategy::ALL.iter().map(|k| k.as_str().to_string()).collect(),
        oom_sources: OomSource::ALL.iter().map(|k| k.as_str().to_string()).collect(),
    }
}
