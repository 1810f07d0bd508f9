//! `Executor`, eager runs and the memory observer in JS.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use napi::bindgen_prelude::*;
use napi_derive::napi;
use wgalloc_core::exec::{self as core_exec, CompileOptions, DeviceIo, EagerOptions, ExecGraph, RunOptions};
use wgalloc_core::heap::PoolKind;

use crate::block_ids;
use crate::error::{invalid, invalid_hint, to_u64, IntoNapi};
use crate::gpu::Gpu;
use crate::plan::MemoryPlan;
use wgalloc_core::heap::BlockOwner;

/// Options of the native `compileGraph()` (the facade's `compile()` adds `plan: 'observe'`).
/// @internal
#[napi(object)]
pub struct CompileGraphOptions {
    /// Planner strategy (default `best`).
    pub strategy: Option<String>,
    /// Search budget of `exact`/`best` in ms.
    pub time_limit_ms: Option<f64>,
    /// Split the slab so none exceeds this many bytes (default: the device's max buffer size).
    pub max_slab_size: Option<f64>,
    /// Values of param tensors, by id.
    pub params: Option<HashMap<String, Uint8Array>>,
    /// Usage records (JSON) to plan from instead of the graph's lifetimes.
    pub records_json: Option<String>,
    /// Handle of shared weights (`weights.shareHandle()`): params not in `params` bind there.
    pub weights_handle: Option<f64>,
}

/// Compile options with params copied and shared weights taken before the call returns (the caller
/// may reuse its bytes or release its weights handle meanwhile); records stay JSON text, for the
/// caller to parse off the JS thread.
pub(crate) fn compile_options(options: Option<CompileGraphOptions>) -> Result<(CompileOptions, Option<String>)> {
    let o = options.unwrap_or(CompileGraphOptions {
        strategy: None,
        time_limit_ms: None,
        max_slab_size: None,
        params: None,
        records_json: None,
        weights_handle: None,
    });
    let strategy = match o.strategy.as_deref() {
        None => wgalloc_plan::Strategy::Best,
        Some(s) => s.parse().map_err(crate::error::plan_err)?,
    };
    let options = CompileOptions {
        strategy,
        time_limit: o.time_limit_ms.map(|ms| to_u64(ms, "timeLimitMs").map(Duration::from_millis)).transpose()?,
        max_slab_size: o.max_slab_size.map(|b| to_u64(b, "maxSlabSize")).transpose()?,
        params: owned(o.params),
        records: None,
        weights: o
            .weights_handle
            .map(|h| wgalloc_core::exec::Weights::attach(to_u64(h, "weights")?).napi())
            .transpose()?,
    };
    Ok((options, o.records_json))
}

/// Options of a run (the facade adds `signal`).
#[napi(object)]
pub struct ExecRunOptions {
    /// Record every allocation and free per op.
    pub observe: Option<bool>,
    /// Poison tensors before their producer and check after every op that no live tensor changed.
    pub check_plan: Option<bool>,
    /// Slot of the heap object that holds the block ids below (the facade passes `gpu.heap`'s).
    pub heap_slot: Option<u32>,
    /// Inputs read from heap blocks on the GPU: tensor id -> block id.
    pub device_inputs: Option<HashMap<String, f64>>,
    /// Outputs written into heap blocks on the GPU and not read back: tensor id -> block id.
    pub outputs_into: Option<HashMap<String, f64>>,
    /// `host` (default) reads outputs back; `device` leaves every other output in a new heap block.
    pub outputs: Option<String>,
    /// Queue behind the executor's earlier runs (default `true`); `false` fails with
    /// `EXECUTOR_BUSY` at once while another run is queued or in flight.
    pub wait: Option<bool>,
    /// A token from `runCancelToken()`: `cancelRun(token)` while the run is queued takes it out
    /// of the queue at once.
    pub cancel: Option<f64>,
}

/// Cancellation tokens of runs called with a signal, by number, until the run ends.
static CANCELS: std::sync::Mutex<Option<HashMap<u64, wgalloc_core::signal::Cancel>>> = std::sync::Mutex::new(None);
static NEXT_CANCEL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

fn cancels<T>(f: impl FnOnce(&mut HashMap<u64, wgalloc_core::signal::Cancel>) -> T) -> T {
    f(CANCELS.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert_with(HashMap::new))
}

/// A token for one run's `cancel` option (the facade takes one per run given a signal).
/// @internal
#[napi(catch_unwind)]
pub fn run_cancel_token() -> f64 {
    let n = NEXT_CANCEL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    cancels(|c| c.insert(n, wgalloc_core::signal::Cancel::new()));
    n as f64
}

/// Gives up the run holding `token` if it is still queued (its signal fired), and forgets the
/// token (also what the facade calls when the run was refused before it was queued).
/// @internal
#[napi(catch_unwind)]
pub fn cancel_run(token: f64) {
    if let Some(c) = cancels(|c| c.remove(&(token as u64))) {
        c.cancel();
    }
}

/// Forgets `token` once its run ended.
pub(crate) fn drop_cancel_token(options: &RunOptions) {
    if let Some(cancel) = &options.cancel {
        cancels(|c| c.retain(|_, v| v != cancel));
    }
}

/// An output left on the device in a new heap block, with the fields the facade's `DeviceBlock` needs.
#[napi(object)]
pub struct DeviceOutput {
    /// Output tensor id.
    pub tensor: String,
    /// Block id, held by the heap object of `heapSlot`.
    pub id: f64,
    /// Allocated bytes.
    pub size: f64,
    /// Requested bytes (the tensor's size).
    pub requested: f64,
    /// Offset in its segment when the run ended (the heap may move the block later).
    pub offset: f64,
    /// Pool index (as `constantTables().pools` lists them).
    pub pool: u32,
}

/// One allocation or free attributed to an op.
#[napi(object)]
pub struct ObservedEvent {
    /// Index of the op in the graph's `ops`.
    pub op: u32,
    /// The op's `name` (its index as text when unnamed).
    pub op_name: String,
    /// `alloc` or `free`.
    #[napi(ts_type = "'alloc' | 'free'")]
    pub kind: String,
    /// Tensor id.
    pub tensor: String,
    /// Bytes of the tensor.
    pub size: f64,
    /// Heap block id (eager) or slab index (planned).
    pub location: f64,
    /// Byte offset in the block (eager, 0) or slab (planned).
    pub offset: f64,
}

/// A usage record derived from an observed run: `size` bytes live from op `first` to op `last`.
#[napi(object)]
pub struct ObservedRecord {
    /// Tensor id.
    pub id: String,
    /// Bytes.
    pub size: f64,
    /// Index of the op that allocated the tensor.
    pub first: f64,
    /// Index of the op after which it was freed (inclusive).
    pub last: f64,
}

/// What the memory observer saw during one run.
#[napi(object)]
pub struct Observation {
    /// Ops run.
    pub ops: u32,
    /// Every allocation and free, in order.
    pub events: Vec<ObservedEvent>,
    /// Records a planner needs, derived from the events.
    pub usage_records: Vec<ObservedRecord>,
    /// Largest total of tensor bytes live at one time.
    pub peak_live_bytes: f64,
}

/// What a native run returns (the facade turns outputs into typed arrays).
/// @internal
#[napi(object)]
pub struct RunResult {
    /// Output tensors by id, as bytes.
    pub outputs: HashMap<String, Buffer>,
    /// Output ids in graph order.
    pub output_order: Vec<String>,
    /// What the run allocated and freed, with `observe: true`.
    pub observation: Option<Observation>,
    /// Outputs left on the device in new heap blocks (`outputs: 'device'`), in graph order.
    pub device_outputs: Vec<DeviceOutput>,
}

/// What an executor created and ran. Runs create nothing: only `runs` and staging grow.
#[napi(object)]
pub struct ExecutorStats {
    /// Compute pipelines built at compile time.
    pub pipelines_created: f64,
    /// Bind groups built at compile time.
    pub bind_groups_created: f64,
    /// Driver buffers created at compile time (slabs, constant region).
    pub buffers_created: f64,
    /// Staging buffers created for input uploads (stops growing once the host cache is warm).
    pub staging_buffers_created: f64,
    /// Completed runs.
    pub runs: f64,
    /// Slabs the plan was split into (one unless it exceeds the max buffer size or `maxSlabSize`).
    pub slabs: f64,
    /// Bytes of all slabs.
    pub slab_bytes: f64,
    /// Bytes of the constant region (params).
    pub constant_bytes: f64,
    /// Bytes of the shared weights the executor binds (held once for all their users).
    pub shared_weight_bytes: f64,
}

fn observation(o: core_exec::Observation) -> Observation {
    Observation {
        ops: o.ops as u32,
        usage_records: o
            .to_usage_records()
            .into_iter()
            .map(|r| ObservedRecord { id: r.id, size: r.size as f64, first: r.first as f64, last: r.last as f64 })
            .collect(),
        peak_live_bytes: o.peak_live_bytes() as f64,
        events: o
            .events
            .into_iter()
            .map(|e| ObservedEvent {
                op: e.op as u32,
                op_name: e.op_name,
                kind: e.kind.as_str().into(),
                tensor: e.tensor,
                size: e.size as f64,
                location: e.location as f64,
                offset: e.offset as f64,
            })
            .collect(),
    }
}

/// What a run returns to JS; its new device outputs pass to `owner`, the heap object's.
pub(crate) fn result(
    out: core_exec::RunOutput,
    owner: Option<&BlockOwner>,
    given: &HashSet<String>,
) -> Result<RunResult> {
    let output_order = out.outputs.iter().map(|(id, _)| id.clone()).collect();
    let device_outputs = match owner {
        Some(owner) => out
            .device_outputs
            .into_iter()
            .filter(|(tensor, _)| !given.contains(tensor))
            .map(|(tensor, block)| {
                Ok(DeviceOutput {
                    size: block.size() as f64,
                    requested: block.requested_size() as f64,
                    offset: block.offset().unwrap_or_default() as f64,
                    pool: PoolKind::ALL.iter().position(|&k| k == block.pool()).unwrap_or(0) as u32,
                    id: owner.adopt(&block).napi()? as f64,
                    tensor,
                })
            })
            .collect::<Result<Vec<_>>>()?,
        None => Vec::new(),
    };
    Ok(RunResult {
        outputs: out.outputs.into_iter().map(|(id, bytes)| (id, bytes.into())).collect(),
        output_order,
        observation: out.observation.map(observation),
        device_outputs,
    })
}

pub(crate) fn owned(map: Option<HashMap<String, Uint8Array>>) -> HashMap<String, Vec<u8>> {
    map.unwrap_or_default().into_iter().map(|(k, v)| (k, v.to_vec())).collect()
}

fn parse_graph(json: &str) -> Result<ExecGraph> {
    ExecGraph::parse(json).napi()
}

/// A compiled graph: one plan, slabs from the heap, pipelines and bind groups built once.
#[napi]
pub struct Executor {
    inner: Arc<core_exec::Executor>,
}

#[napi]
impl Executor {
    /// The memory plan the executor runs with.
    #[napi(catch_unwind, getter)]
    pub fn plan(&self) -> MemoryPlan {
        MemoryPlan::from_plan(self.inner.plan().clone())
    }

    /// Objects created at compile time, runs so far and slab sizes.
    #[napi(catch_unwind)]
    pub fn stats(&self) -> ExecutorStats {
        let s = self.inner.stats();
        ExecutorStats {
            pipelines_created: s.pipelines_created as f64,
            bind_groups_created: s.bind_groups_created as f64,
            buffers_created: s.buffers_created as f64,
            staging_buffers_created: s.staging_buffers_created as f64,
            runs: s.runs as f64,
            slabs: s.slabs as f64,
            slab_bytes: s.slab_bytes as f64,
            constant_bytes: s.constant_bytes as f64,
            shared_weight_bytes: s.shared_weight_bytes as f64,
        }
    }

    /// Device bytes held: slabs plus the constant region.
    #[napi(catch_unwind, getter)]
    pub fn device_bytes(&self) -> f64 {
        self.inner.device_bytes() as f64
    }

    /// True once `release()` ran.
    #[napi(catch_unwind, getter)]
    pub fn released(&self) -> bool {
        self.inner.is_released()
    }

    /// Native form of `run(inputs, { observe, checkPlan, signal })`.
    /// The inputs are copied before this returns: the caller may reuse, transfer or lose
    /// them (a terminated worker) while the run is in flight.
    /// @internal
    #[napi(catch_unwind, ts_return_type = "Promise<RunResult>")]
    pub fn run<'env>(
        &self,
        env: &'env Env,
        inputs: HashMap<String, Uint8Array>,
        options: Option<ExecRunOptions>,
    ) -> Result<PromiseRaw<'env, RunResult>> {
        let exe = self.inner.clone();
        let inputs = owned(Some(inputs));
        let (opts, owner, io, given) = run_arguments(options)?;
        // Leased now: a free() before the run recorded its work takes effect after it.
        let leases = io.lease().napi()?;
        // Claimed now: runs take turns in call order, and a release() right after this call
        // lets the run complete.
        let claim = wgalloc_core::exec::Executor::claim(exe, opts.wait).napi()?;
        env.spawn_future(async move {
            let ended = opts.clone();
            let out = claim.run_io(&inputs, &io, opts).await;
            drop_cancel_token(&ended);
            drop(leases);
            result(out.napi()?, owner.as_deref(), &given)
        })
    }

    /// Returns the slabs to the heap (ReleaseSlab); later runs fail with `USE_AFTER_FREE`. Runs
    /// called before (queued or in flight) complete first, and the slabs go back when the last ends.
    /// Returns false if it was already released.
    #[napi(catch_unwind)]
    pub fn release(&self) -> bool {
        self.inner.release()
    }

    /// Charges the device bytes to `scope` until `release()` or collection (`QUOTA_EXCEEDED`
    /// when they do not fit).
    /// @internal
    #[napi(catch_unwind)]
    pub fn charge_to(&self, scope: &crate::heap::HeapScope) -> Result<()> {
        self.inner.charge_to(&scope.inner).napi()
    }
}

type RunArguments = (RunOptions, Option<Arc<BlockOwner>>, DeviceIo, HashSet<String>);

/// A run's options, with its device blocks taken (shared handles) before the call returns; also
/// the ids of outputs written into caller blocks. The caller leases the blocks (`DeviceIo::lease`)
/// before returning too, so a free meanwhile takes effect after the run.
pub(crate) fn run_arguments(options: Option<ExecRunOptions>) -> Result<RunArguments> {
    let o = options.unwrap_or(ExecRunOptions {
        observe: None,
        check_plan: None,
        heap_slot: None,
        device_inputs: None,
        outputs_into: None,
        outputs: None,
        wait: None,
        cancel: None,
    });
    let cancel = match o.cancel {
        Some(token) => Some(
            cancels(|c| c.get(&(token as u64)).cloned())
                .ok_or_else(|| invalid("cancel", "a token from runCancelToken()", token.to_string()))?,
        ),
        None => None,
    };
    let opts = RunOptions {
        observe: o.observe.unwrap_or(false),
        check_plan: o.check_plan.unwrap_or(false),
        wait: o.wait.unwrap_or(true),
        cancel,
    };
    {
        let outputs_on_device = match o.outputs.as_deref() {
            None | Some("host") => false,
            Some("device") => true,
            Some(other) => return Err(invalid("outputs", "'host' or 'device'", wgalloc_core::error::quoted(other))),
        };
        // Blocks are taken (shared handles) before the call returns.
        let owner = match o.heap_slot {
            Some(slot) => Some(block_ids::owner(slot)?),
            None if o.device_inputs.is_some() || o.outputs_into.is_some() || outputs_on_device => {
                return Err(invalid_hint(
                    "heapSlot",
                    "the heap's slot",
                    "undefined",
                    "device inputs and outputs need the heap's slot (internal)",
                ))
            }
            None => None,
        };
        let io = match &owner {
            Some(t) => DeviceIo {
                inputs: block_ids::blocks(t, o.device_inputs.unwrap_or_default(), "input")?,
                outputs_into: block_ids::blocks(t, o.outputs_into.unwrap_or_default(), "output")?,
                outputs_on_device,
                ..DeviceIo::default()
            },
            None => DeviceIo::default(),
        };
        let given: HashSet<String> = io.outputs_into.keys().cloned().collect();
        Ok((opts, owner, io, given))
    }
}

#[napi]
impl Gpu {
    /// Plans and compiles a graph given as JSON text (the facade's `compile()` accepts objects).
    /// Arguments are parsed and copied before this returns; planning and compiling run off
    /// the JS thread.
    /// @internal
    #[napi(catch_unwind, ts_return_type = "Promise<Executor>")]
    pub fn compile_graph<'env>(
        &self,
        env: &'env Env,
        graph_json: String,
        options: Option<CompileGraphOptions>,
    ) -> Result<PromiseRaw<'env, Executor>> {
        let gpu = self.inner.clone();
        let (mut options, records_json) = compile_options(options)?;
        env.spawn_future(async move {
            options.records = records_json
                .map(|j| wgalloc_plan::json::parse_records(&j).map_err(crate::error::plan_err))
                .transpose()?;
            let graph = parse_graph(&graph_json)?;
            let exe = gpu.compile(graph, options).napi()?;
            Ok(Executor { inner: Arc::new(exe) })
        })
    }

    /// Native form of the facade's `runEager()`. Inputs and params are copied before this
    /// returns.
    /// @internal
    #[napi(catch_unwind, ts_return_type = "Promise<RunResult>")]
    pub fn run_eager_graph<'env>(
        &self,
        env: &'env Env,
        graph_json: String,
        inputs: HashMap<String, Uint8Array>,
        params: Option<HashMap<String, Uint8Array>>,
        observe: Option<bool>,
    ) -> Result<PromiseRaw<'env, RunResult>> {
        let gpu = self.inner.clone();
        let inputs = owned(Some(inputs));
        let params = owned(params);
        let options = EagerOptions { observe: observe.unwrap_or(false) };
        env.spawn_future(async move {
            let graph = parse_graph(&graph_json)?;
            result(gpu.run_eager(&graph, &inputs, &params, options).await.napi()?, None, &HashSet::new())
        })
    }

    /// The checksum graph of a model graph (`bench/data/models` format), as executable graph JSON.
    #[napi(catch_unwind)]
    pub fn checksum_graph(&self, model_json: String) -> Result<String> {
        let g = core_exec::checksum::from_model(&model_json, self.inner.info().max_compute_workgroups_per_dimension)
            .napi()?;
        Ok(g.to_json())
    }
}
