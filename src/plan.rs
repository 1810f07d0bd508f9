//! `planMemory` bindings: parse the input, run the planner on its own thread
//! (the JS thread never blocks), expose progress, cancellation and the plan.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use napi::bindgen_prelude::*;
use napi_derive::napi;
use serde_json::{json, Value};
use wgalloc_core::signal::Slot;
use wgalloc_plan::graph::{GraphRecords, Location};
use wgalloc_plan::input::{Format, PlanInput, RequestOptions};
use wgalloc_plan::{PlanError, PlanOptions, Progress};

use crate::error::{coded, plan_err, to_u64};

/// Options of `planMemory()`.
#[napi(object)]
pub struct PlanMemoryOptions {
    /// `naive`, `linearScan`, `greedyBySize`, `greedyByBreadth`, `greedyInputsFirst`, `portfolio`, `exact`, `best` (default).
    pub strategy: Option<String>,
    /// Offset alignment in bytes: any positive integer; default 1, or the device's storage alignment when planning for
    /// wgpu. A record's own `alignment` applies too: its offset is a multiple of both (the larger, for powers of two).
    pub alignment: Option<f64>,
    /// Capacity in bytes of the default memory space (records without `space`): a plan that cannot fit fails with
    /// `INFEASIBLE` (proven, naming the op index whose live bytes exceed it) or `CAPACITY_NOT_MET`.
    pub capacity: Option<f64>,
    /// Capacities of named memory spaces (`space` of the records; `default` for records without one).
    pub capacities: Option<HashMap<String, f64>>,
    /// Refuse unknown record fields and CSV columns (default true); false ignores them. A graph's unknown fields are
    /// always refused.
    pub strict: Option<bool>,
    /// Graph inputs: let elementwise ops write their output over a same-sized input that dies there.
    pub in_place: Option<bool>,
    /// Graphs: plan inputs into the slab as `gpu.compile()` does (default false: they stay
    /// in the caller's buffers).
    pub inputs_in_slab: Option<bool>,
    /// Search budget of `exact`/`best` in ms (default 1000).
    pub time_limit_ms: Option<f64>,
    /// Graph inputs: `shared` (default), `unique` or `inSlab` workspaces.
    pub workspace: Option<String>,
    /// Graph inputs: widen lifetimes to the graph's parallel `steps`.
    pub multistream: Option<bool>,
}

/// One memory space of a plan.
#[napi(object)]
pub struct PlanSpace {
    /// The records' `space` (`default` for records without one).
    pub name: String,
    /// Bytes of this space's slab.
    pub slab_size: f64,
    /// Lower bound on this space's slab.
    pub lower_bound: f64,
    /// The capacity it was planned against, if one was given.
    pub capacity: Option<f64>,
}

/// Search progress: best height so far and the proven lower bound.
#[napi(object)]
pub struct PlanProgress {
    /// Smallest slab size found so far, in bytes.
    pub best: f64,
    /// Proven lower bound, in bytes: no plan is smaller.
    pub lower_bound: f64,
    /// Milliseconds since planning started.
    pub elapsed_ms: f64,
}

type Outcome = std::result::Result<(wgalloc_plan::Plan, Option<GraphRecords>), PlanError>;

/// A planning run on a background thread (the facade's `planMemory()` drives it).
/// @internal
#[napi]
pub struct PlanJob {
    cancel: Arc<AtomicBool>,
    progress: Arc<Mutex<Option<Progress>>>,
    outcome: Arc<Slot<Outcome>>,
}

#[napi]
impl PlanJob {
    /// Stops the search; `wait()` then resolves with the best plan found so far, or rejects with
    /// `ABORTED` when there was none yet.
    #[napi(catch_unwind)]
    pub fn cancel(&self) {
        self.cancel.store(true, Ordering::Relaxed);
    }

    /// The latest progress report, or null before the first.
    #[napi(catch_unwind)]
    pub fn progress(&self) -> Option<PlanProgress> {
        let p = (*self.progress.lock().ok()?)?;
        Some(PlanProgress {
            best: p.best as f64,
            lower_bound: p.lower_bound as f64,
            elapsed_ms: p.elapsed.as_secs_f64() * 1e3,
        })
    }

    /// True once the plan (or an error) is ready.
    #[napi(catch_unwind, getter)]
    pub fn done(&self) -> bool {
        self.outcome.is_done()
    }

    /// Resolves with the validated plan.
    #[napi(catch_unwind, ts_return_type = "Promise<MemoryPlan>")]
    pub fn wait<'env>(&self, env: &'env Env) -> Result<PromiseRaw<'env, MemoryPlan>> {
        let outcome = self.outcome.clone();
        env.spawn_future(async move {
            let (plan, graph) = outcome.wait().await.map_err(plan_err)?;
            Ok(MemoryPlan { inner: Arc::new(plan), graph: graph.map(Arc::new) })
        })
    }
}

/// Starts planning `text` (`format`: `records` JSON, `graph` JSON, `json` (either, told apart on the planner
/// thread), or MiniMalloc `csv`).
/// Bad options fail here; bad input, found while parsing on the planner thread, rejects `wait()`.
/// @internal
#[napi(catch_unwind)]
pub fn start_plan(format: String, text: String, options: Option<PlanMemoryOptions>) -> Result<PlanJob> {
    let o = options.unwrap_or(PlanMemoryOptions {
        strategy: None,
        alignment: None,
        capacity: None,
        capacities: None,
        strict: None,
        in_place: None,
        inputs_in_slab: None,
        time_limit_ms: None,
        workspace: None,
        multistream: None,
    });
    let mut capacities = HashMap::new();
    for (name, c) in o.capacities.iter().flatten() {
        capacities.insert(name.clone(), to_u64(*c, &format!("capacities.{name}"))?);
    }
    let request = RequestOptions {
        strategy: o.strategy,
        alignment: o.alignment.map(|a| to_u64(a, "alignment")).transpose()?,
        capacity: o.capacity.map(|c| to_u64(c, "capacity")).transpose()?,
        capacities,
        strict: o.strict,
        time_limit_ms: o.time_limit_ms.map(|ms| to_u64(ms, "timeLimitMs")).transpose()?,
        workspace: o.workspace,
        multistream: o.multistream,
        in_place: o.in_place,
        inputs_in_slab: o.inputs_in_slab,
    }
    .resolve()
    .map_err(plan_err)?;
    let format: Format = format.parse().map_err(plan_err)?;
    let (strict, graph_options) = (request.strict, request.graph);
    // Parsing and checking a large input takes seconds: they run on the planner thread
    // too, and their errors reject `wait()`.
    let parse = move || PlanInput::parse(format, &text, strict)?.into_records(&graph_options);
    let cancel = Arc::new(AtomicBool::new(false));
    let progress = Arc::new(Mutex::new(None));
    let outcome = Slot::new();
    let sink = progress.clone();
    let opts = PlanOptions {
        cancel: Some(cancel.clone()),
        progress: Some(Box::new(move |p| {
            if let Ok(mut slot) = sink.lock() {
                *slot = Some(p);
            }
        })),
        ..request.plan
    };
    let done = outcome.clone();
    std::thread::Builder::new()
        .name("wgalloc-plan".into())
        .spawn(move || {
            let cancelled = opts.cancel.clone();
            let work = move || {
                parse().and_then(|(records, graph)| {
                    // Parsing a large input takes seconds: a cancel meanwhile skips the planning.
                    if cancelled.is_some_and(|c| c.load(Ordering::Relaxed)) {
                        return Err(PlanError::Stopped);
                    }
                    wgalloc_plan::plan(records, opts).map(|p| (p, graph))
                })
            };
            // A panic must still settle `wait()`: left unsettled, planMemory would never return.
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work))
                .unwrap_or_else(|_| Err(PlanError::Internal("the planner panicked".into())));
            done.complete(outcome);
        })
        .map_err(|e| coded("INTERNAL", &format!("cannot start the planner thread: {e}")))?;
    Ok(PlanJob { cancel, progress, outcome })
}

/// A validated memory plan: an offset in one slab for every usage record.
#[napi]
pub struct MemoryPlan {
    inner: Arc<wgalloc_plan::Plan>,
    graph: Option<Arc<GraphRecords>>,
}

impl MemoryPlan {
    pub(crate) fn from_plan(plan: wgalloc_plan::Plan) -> Self {
        MemoryPlan { inner: Arc::new(plan), graph: None }
    }
}

#[napi]
impl MemoryPlan {
    /// The strategy asked for (`best`, `exact`, ...).
    #[napi(catch_unwind, getter)]
    pub fn strategy(&self) -> String {
        self.inner.strategy().as_str().into()
    }
    /// Which algorithm produced the winning layout (e.g. the portfolio member).
    #[napi(catch_unwind, getter)]
    pub fn method(&self) -> String {
        self.inner.method().into()
    }
    /// Bytes of the slab: the highest offset + size over all records.
    #[napi(catch_unwind, getter)]
    pub fn slab_size(&self) -> f64 {
        self.inner.slab_size() as f64
    }
    /// Lower bound on the slab: the largest total size live at one time, strengthened for alignment and raised by
    /// the exact search; the same figure `onProgress` ends on. No plan is smaller.
    #[napi(catch_unwind, getter)]
    pub fn lower_bound(&self) -> f64 {
        self.inner.lower_bound() as f64
    }
    /// slabSize / lowerBound (1 is optimal).
    #[napi(catch_unwind, getter)]
    pub fn ratio(&self) -> f64 {
        self.inner.ratio()
    }
    /// Optimal: `slabSize === lowerBound` (see `optimalBy`).
    #[napi(catch_unwind, getter)]
    pub fn optimal(&self) -> bool {
        self.inner.optimal()
    }
    /// What proves it optimal: `lowerBound` (the slab meets the aligned lower bound) or `search` (the exact
    /// search proved no smaller slab exists and raised the bound to it); null when not optimal.
    #[napi(catch_unwind, getter)]
    pub fn optimal_by(&self) -> Option<String> {
        self.inner.optimal_by().map(|o| o.as_str().to_string())
    }
    /// Memory spaces, in order of first appearance: each planned on its own, with its slab, lower bound and
    /// capacity. Offsets are within the record's space; `slabSize` is their sum.
    #[napi(catch_unwind, getter)]
    pub fn spaces(&self) -> Vec<PlanSpace> {
        self.inner
            .spaces()
            .iter()
            .map(|s| PlanSpace {
                name: s.name.clone(),
                slab_size: s.slab_size as f64,
                lower_bound: s.lower_bound as f64,
                capacity: s.capacity.map(|c| c as f64),
            })
            .collect()
    }
    /// Planning time, ms.
    #[napi(catch_unwind, getter)]
    pub fn time_ms(&self) -> f64 {
        self.inner.elapsed().as_secs_f64() * 1e3
    }
    /// Every offset is a multiple of this many bytes.
    #[napi(catch_unwind, getter)]
    pub fn alignment(&self) -> f64 {
        self.inner.alignment() as f64
    }
    /// Offsets in record order.
    #[napi(catch_unwind, getter)]
    pub fn offsets(&self) -> Vec<f64> {
        self.inner.offsets().iter().map(|&o| o as f64).collect()
    }
    /// Offset of the record `id`, or null.
    #[napi(catch_unwind)]
    pub fn offset_of(&self, id: String) -> Option<f64> {
        self.inner.offset_of(&id).map(|o| o as f64)
    }
    /// Re-checks the plan with the independent checker; throws `PLAN_INVALID` if it fails.
    #[napi(catch_unwind)]
    pub fn validate(&self) -> Result<()> {
        self.inner.validate().map_err(plan_err)
    }
    /// SVG picture of the layout (op index on x, offset on y).
    #[napi(catch_unwind, js_name = "toSVG")]
    pub fn to_svg(&self) -> String {
        self.inner.to_svg()
    }
    /// The plan as JSON text (`toJSON()` returns it parsed).
    #[napi(catch_unwind)]
    pub fn to_json_string(&self) -> String {
        let mut v: Value = serde_json::from_str(&self.inner.to_json()).unwrap_or(Value::Null);
        if let (Some(g), Value::Object(map)) = (&self.graph, &mut v) {
            map.insert("graph".into(), graph_json(g));
        }
        v.to_string()
    }
}

fn graph_json(g: &GraphRecords) -> Value {
    let aliases: Vec<Value> = g
        .aliases
        .iter()
        .map(|(id, loc)| match loc {
            Location::Slab { base } => json!({ "id": id, "region": "slab", "base": base }),
            Location::Constant { offset } => json!({ "id": id, "region": "constant", "offset": offset }),
            Location::Input { base } => json!({ "id": id, "region": "input", "base": base }),
            Location::External { base } => json!({ "id": id, "region": "external", "base": base }),
        })
        .collect();
    json!({
        "constantSize": g.constant_size,
        "constants": g.constants.iter().map(|(id, o)| json!({ "id": id, "offset": o })).collect::<Vec<_>>(),
        "aliases": aliases,
        "workspace": { "sharedSize": g.workspace.shared_size, "uniqueSize": g.workspace.unique_size },
        "steps": g.steps,
        "inPlace": g.in_place.iter().map(|(id, base)| json!({ "id": id, "base": base })).collect::<Vec<_>>(),
    })
}
