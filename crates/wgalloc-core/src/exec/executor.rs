//! The planned executor (AllocateSlab / AllocateTensor / ReleaseSlab): one plan,
//! slabs from the heap, every tensor bound at its planned offset, pipelines and
//! bind groups built once, and runs that create nothing.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use wgalloc_plan::{PlanOptions, Strategy, UsageRecord};

use super::bind::{self, binding_size, Range, Step};
use super::gate::{Gate, Ticket};
use super::graph::{ExecGraph, TensorKind};
use super::observer::{Observation, ObservedKind};
use super::weights::Weights;
use crate::context::Gpu;
use crate::error::{checked_add, Error, Result};
use crate::heap::{BlockBinding, DeviceBlock, Scope, ScopeCharge, Usage};
use crate::scope::guarded_alloc;
use crate::signal::lock;

/// How to compile a graph.
#[derive(Debug, Clone, Default)]
pub struct CompileOptions {
    pub strategy: Strategy,
    /// Search budget of `exact`/`best`.
    pub time_limit: Option<Duration>,
    /// Split the slab so no slab exceeds this (default: the device's max buffer size).
    pub max_slab_size: Option<u64>,
    /// Values of param tensors; every param tensor of the graph needs one.
    pub params: HashMap<String, Vec<u8>>,
    /// Plan from these records (e.g. an observed eager run) instead of the graph's lifetimes.
    pub records: Option<Vec<UsageRecord>>,
    /// Shared weights: param tensors not in `params` are bound in place from this store.
    pub weights: Option<Arc<Weights>>,
}

/// What a run returns.
#[derive(Debug, Default)]
pub struct RunOutput {
    /// Output tensors read back to the host, in graph order.
    pub outputs: Vec<(String, Vec<u8>)>,
    /// Output tensors left on the device (see [`DeviceIo`]), in graph order: caller-given
    /// blocks and new heap blocks alike.
    pub device_outputs: Vec<(String, Arc<DeviceBlock>)>,
    pub observation: Option<Observation>,
}

/// Inputs and outputs of a run that stay on the GPU. Each block is copied on the GPU, in the
/// run's submission, from or to the tensor's planned place, and recorded as used by it, so a
/// free defers until the run's work completed and later submissions see the result.
#[derive(Debug, Default, Clone)]
pub struct DeviceIo {
    /// Inputs read from blocks (at least the tensor's bytes) instead of host bytes.
    pub inputs: HashMap<String, Arc<DeviceBlock>>,
    /// Outputs written into these blocks (at least the tensor's bytes) and not read back.
    pub outputs_into: HashMap<String, Arc<DeviceBlock>>,
    /// Every other output goes into a new heap block instead of being read back.
    pub outputs_on_device: bool,
    /// Bytes a device input or output moves when fewer than its tensor's (a shape executor
    /// running below its bucket): blocks need only these, an input's remainder is zeroed, and
    /// an output gives only these. Never applies to external tensors, which are bound whole.
    pub bytes: HashMap<String, u64>,
    /// Per device input or output, the copies that move its bytes when they are not one prefix
    /// of the tensor (rows of a shape executor's tensor below a bucket on an inner dimension):
    /// `(source offset, destination offset, bytes)`, block to tensor for an input (whose other
    /// bytes are zeroed first), tensor to block for an output. Whole words each.
    pub runs: HashMap<String, Vec<(u64, u64, u64)>>,
    /// The values of the dims uniform for this run (a shape executor's asked dimensions, in
    /// declaration order); `None`: the dimensions the graph was instantiated at.
    pub dims: Option<Vec<u64>>,
}

impl DeviceIo {
    /// The bytes a device input or output `id` of `size` bytes moves.
    fn moved(&self, id: &str, size: u64) -> u64 {
        self.bytes.get(id).map_or(size, |&b| b.min(size))
    }

    /// Leases every block (see [`crate::BlockLease`]): taken when a run is called and held
    /// until it recorded its GPU work, so a `free()` in between takes effect after the run
    /// instead of failing it. `USE_AFTER_FREE` for a block freed already.
    pub fn lease(&self) -> Result<Vec<crate::BlockLease>> {
        self.inputs.values().chain(self.outputs_into.values()).map(|b| b.lease()).collect()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOptions {
    /// Record every AllocateTensor / free per op.
    pub observe: bool,
    /// Poison each tensor before its producer runs and check after every op that no
    /// live tensor changed: proves the plan on the device. Slow (one submit per op).
    pub check_plan: bool,
    /// Queue behind runs of the executor claimed earlier (default). False: a run that finds
    /// the executor busy fails at once with `EXECUTOR_BUSY` instead.
    pub wait: bool,
    /// Cancelled while the run waits for its turn: it leaves the queue at once with `ABORTED`
    /// (Note [Run queue]). Once its turn came, the run completes.
    pub cancel: Option<crate::signal::Cancel>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions { observe: false, check_plan: false, wait: true, cancel: None }
    }
}

/// Objects an executor created; after compile, runs add none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExecutorStats {
    pub pipelines_created: u64,
    pub bind_groups_created: u64,
    pub buffers_created: u64,
    /// Staging buffers the host cache had to create for input uploads (0 once warm).
    pub staging_buffers_created: u64,
    pub runs: u64,
    pub slabs: u64,
    pub slab_bytes: u64,
    pub constant_bytes: u64,
    /// Bytes of the shared weights store the executor binds (held once for all its users).
    pub shared_weight_bytes: u64,
}

/// Where a placed tensor's bytes are.
#[derive(Debug, Clone, Copy)]
struct Place {
    slab: usize,
    offset: u64,
}

/// One storage binding of an op that binds an external tensor.
#[derive(Debug, Clone, Copy)]
enum Binding {
    /// A planned range: region (slab, constants or weights), offset in it, size.
    Placed { slab: usize, offset: u64, size: u64 },
    /// The block the run gives for external tensor `tensor` (a root), from its start.
    External { tensor: usize, size: u64 },
    /// The shared workspace region.
    Workspace { size: u64 },
}

/// An op that binds an external tensor: its bind group is made at run time from the blocks
/// given, and kept while the next run gives the same blocks.
struct Deferred {
    pipeline: Arc<super::pipelines::Pipeline>,
    storage: Vec<Binding>,
    /// Index in `uniforms` of the op's uniform.
    uniform: Option<usize>,
    dispatch: [u32; 3],
    name: String,
    last: Mutex<Option<KeptStep>>,
}

/// The external blocks (by id) a deferred op's last bind group was made for, that step, and
/// the blocks' places (pinned while the step is kept).
struct KeptStep {
    ids: Vec<u64>,
    step: Arc<Step>,
    _externals: Vec<BlockBinding>,
}

/// The dims uniform of an executor whose kernels declare it (Note [The dims uniform]), and the
/// values last written to it.
struct DimsUniform {
    block: DeviceBlock,
    written: Mutex<Vec<u64>>,
}

/// The places of the regions the kept bind groups name (slabs, constant region, shared weights,
/// workspace), pinned while the executor lives.
struct Places {
    slabs: Vec<BlockBinding>,
    constants: Option<BlockBinding>,
    weights: Option<BlockBinding>,
    workspace: Option<BlockBinding>,
}

impl Places {
    fn pin(
        slabs: &[DeviceBlock],
        constants: Option<&DeviceBlock>,
        weights: Option<&Arc<Weights>>,
        workspace: Option<&DeviceBlock>,
    ) -> Result<Places> {
        Ok(Places {
            slabs: slabs.iter().map(DeviceBlock::binding).collect::<Result<_>>()?,
            constants: constants.map(DeviceBlock::binding).transpose()?,
            weights: weights.map(|w| w.block().binding()).transpose()?,
            workspace: workspace.map(DeviceBlock::binding).transpose()?,
        })
    }

    /// The place of region `slab` (as [`region`] numbers them).
    fn region(&self, slab: usize) -> &BlockBinding {
        match slab {
            CONSTANTS => self.constants.as_ref().expect("params are in the constant region"),
            WEIGHTS => self.weights.as_ref().expect("shared params are in the weights"),
            i => &self.slabs[i],
        }
    }

    fn workspace(&self) -> &BlockBinding {
        self.workspace.as_ref().expect("allocated at compile")
    }
}

pub struct Executor {
    gpu: Gpu,
    graph: Arc<ExecGraph>,
    plan: wgalloc_plan::Plan,
    /// Slabs then, if any params, the constant region.
    slabs: Vec<DeviceBlock>,
    constants: Option<DeviceBlock>,
    /// Shared weights, let go at `release()` (the store's block is freed by its last user).
    weights: Mutex<Option<Arc<Weights>>>,
    uniforms: Vec<DeviceBlock>,
    workspace: Option<DeviceBlock>,
    dims: Option<DimsUniform>,
    /// The places of the blocks above, which the steps' bind groups name.
    places: Places,
    /// Per tensor (views resolved): slab index (or usize::MAX for the constant region) and offset.
    place: Vec<Option<Place>>,
    /// Per op: its step, built at compile time, or (binding an external tensor) made per run.
    steps: Vec<Option<Step>>,
    deferred: Vec<Option<Deferred>>,
    readback: wgpu::Buffer,
    readback_layout: Vec<(usize, u64)>,
    life: Mutex<Life>,
    /// Runs take turns in claim order: one at a time, since they share the slabs (Note [Run queue]).
    turns: Arc<Gate>,
    stats: Mutex<ExecutorStats>,
    runs: AtomicU64,
    /// The scope charged with `device_bytes` ([`Executor::charge_to`]), returned at `release()`
    /// or when the executor drops (Note [A scope's bytes are its live charges]).
    charge: Mutex<Option<ScopeCharge>>,
}

/// How many runs are claimed (queued or running) and whether `release` ran: changed together,
/// under one lock.
#[derive(Debug, Default)]
struct Life {
    claims: usize,
    released: bool,
}

/// One run of an executor, claimed before it starts ([`Executor::claim`]): it holds the run's
/// place in the executor's queue, and a `release()` from then on frees the executor's blocks
/// once this and every other claimed run ended (each still runs). Ends the run (and gives up
/// its place) when dropped, also unstarted or with its future dropped.
pub struct RunClaim<E: std::ops::Deref<Target = Executor>> {
    exe: E,
    ticket: Ticket,
}

impl<E: std::ops::Deref<Target = Executor>> RunClaim<E> {
    /// Waits (asynchronously) until every run claimed earlier ended, then runs as
    /// [`Executor::run_io`] does.
    pub async fn run_io(
        self,
        inputs: &HashMap<String, Vec<u8>>,
        io: &DeviceIo,
        options: RunOptions,
    ) -> Result<RunOutput> {
        match &options.cancel {
            // Given up while queued: `self` drops here, and with it the place in the queue.
            Some(cancel) if !TurnOrCancel { turn: self.ticket.turn(), cancel: cancel.cancelled() }.await => {
                return Err(Error::Aborted)
            }
            Some(_) => {}
            None => self.ticket.turn().await,
        }
        self.exe.run_inner(inputs, io, options).await
    }
}

/// The turn of a ticket, or its cancellation, whichever comes first: true for the turn.
struct TurnOrCancel<'a> {
    turn: super::gate::Turn<'a>,
    cancel: crate::signal::DoneFuture<()>,
}

impl std::future::Future for TurnOrCancel<'_> {
    type Output = bool;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<bool> {
        use std::task::Poll;
        if std::pin::Pin::new(&mut self.turn).poll(cx).is_ready() {
            return Poll::Ready(true);
        }
        if std::pin::Pin::new(&mut self.cancel).poll(cx).is_ready() {
            return Poll::Ready(false);
        }
        Poll::Pending
    }
}

impl<E: std::ops::Deref<Target = Executor>> Drop for RunClaim<E> {
    fn drop(&mut self) {
        // Then `ticket` drops, handing the turn to the next claim.
        let mut life = lock(&self.exe.life);
        life.claims -= 1;
        if life.released && life.claims == 0 {
            self.exe.free_blocks();
        }
    }
}

const CONSTANTS: usize = usize::MAX;
const WEIGHTS: usize = usize::MAX - 1;

/// The block a [`Place`]'s `slab` index names: a slab, the constant region or the shared weights.
fn region<'a>(
    slabs: &'a [DeviceBlock],
    constants: Option<&'a DeviceBlock>,
    weights: Option<&'a Arc<Weights>>,
    slab: usize,
) -> &'a DeviceBlock {
    match slab {
        CONSTANTS => constants.expect("params are in the constant region"),
        WEIGHTS => weights.expect("shared params are in the weights").block(),
        i => &slabs[i],
    }
}

impl Gpu {
    /// Plans `graph`, allocates its slab(s) and constants from the heap, and builds
    /// every pipeline and bind group.
    pub fn compile(&self, graph: ExecGraph, options: CompileOptions) -> Result<Executor> {
        Executor::new(self, Arc::new(graph), options)
    }
}

/// Refuses a graph with a tensor the device cannot bind, naming it (compile and eager runs).
pub(crate) fn check_binding_limit(graph: &ExecGraph, max_binding: u64) -> Result<()> {
    match graph.tensors.iter().find(|t| t.size > max_binding) {
        Some(t) => Err(Error::invalid(
            format!("tensors '{}'.size", t.id),
            format!("at most {max_binding} bytes"),
            t.size.to_string(),
        )
        .with_hint(format!(
            "tensor '{}' is {} bytes; the device binds at most {max_binding} bytes per storage buffer \
             (maxStorageBufferBindingSize): split the tensor",
            t.id, t.size
        ))),
        None => Ok(()),
    }
}

/// Refuses a graph run without data for one of its params: it would compute on zeros.
pub(crate) fn check_params_given(
    graph: &ExecGraph,
    params: &HashMap<String, Vec<u8>>,
    weights: Option<&Weights>,
) -> Result<()> {
    let given = |id: &str| params.contains_key(id) || weights.is_some_and(|w| w.entry(id).is_some());
    let missing = graph
        .tensors
        .iter()
        .enumerate()
        .find(|&(i, t)| graph.root[i] == i && t.kind == TensorKind::Param && !given(&t.id));
    match missing {
        Some((_, t)) => Err(Error::invalid(format!("params.{}", t.id), format!("{} bytes", t.size), "undefined")
            .with_hint(format!(
                "param '{}' ({} bytes) has no data: pass it in params ({{ params: {{ '{}': bytes }} }})",
                t.id, t.size, t.id
            ))),
        None => Ok(()),
    }
}

impl Executor {
    fn new(gpu: &Gpu, graph: Arc<ExecGraph>, options: CompileOptions) -> Result<Executor> {
        gpu.check_alive()?;
        let heap = gpu.heap()?;
        let driver_before = heap.stats().driver_allocations;
        let pipelines_before = gpu.pipelines_created();
        let limits = gpu.limits();
        check_binding_limit(&graph, limits.max_storage_buffer_binding_size)?;
        // Usage records: roots in the slab, sizes in whole words.
        let records = match options.records {
            Some(r) => r,
            None => graph
                .placed_roots()
                .map(|i| {
                    Ok(UsageRecord::new(
                        graph.tensors[i].id.clone(),
                        binding_size(graph.tensors[i].size)?,
                        graph.first[i] as u64,
                        graph.last[i] as u64,
                    ))
                })
                .collect::<Result<Vec<_>>>()?,
        };
        // Params live in the constant region and externals in the caller's blocks: records for
        // them (an observed run has some) are skipped.
        let records: Vec<UsageRecord> = records
            .into_iter()
            .filter(|r| graph.tensor(&r.id).is_none_or(|t| !matches!(t.kind, TensorKind::Param | TensorKind::External)))
            .collect();
        for r in &records {
            let Some(&i) = graph.index.get(&r.id) else {
                return Err(Error::invalid("records", "ids of tensors of the graph", crate::error::quoted(&r.id))
                    .with_hint(format!("usage record '{}' names no tensor of the graph", r.id)));
            };
            if graph.root[i] != i || r.size < graph.tensors[i].size {
                return Err(Error::invalid(
                    format!("records '{}'.size", r.id),
                    format!("at least {} bytes", graph.tensors[i].size),
                    r.size.to_string(),
                )
                .with_hint(format!(
                    "usage record '{}' ({} bytes) does not match the graph's tensor ({} bytes, {})",
                    r.id,
                    r.size,
                    graph.tensors[i].size,
                    if graph.root[i] != i { "a view" } else { "a root" }
                )));
            }
        }
        if let Some(missing) = graph.placed_roots().find(|&i| !records.iter().any(|r| r.id == graph.tensors[i].id)) {
            return Err(Error::invalid(
                "records",
                format!("a record for tensor '{}'", graph.tensors[missing].id),
                "none",
            )
            .with_hint(format!("no usage record for tensor '{}'", graph.tensors[missing].id)));
        }
        let alignment = heap.alignment();
        let plan = wgalloc_plan::plan(
            &records,
            PlanOptions { strategy: options.strategy, alignment, time_limit: options.time_limit, ..Default::default() },
        )
        .map_err(|e| Error::PlanInvalid(format!("planning failed: {e}")))?;
        plan.validate().map_err(|e| Error::PlanInvalid(e.to_string()))?;

        // Split into slabs no larger than the cap (records keep their relative offsets).
        let cap = options.max_slab_size.unwrap_or(limits.max_buffer_size).min(limits.max_buffer_size);
        let mut order: Vec<usize> = (0..records.len()).collect();
        order.sort_by_key(|&i| plan.offsets()[i]);
        let mut bases: Vec<(u64, u64)> = Vec::new(); // (base, size)
        let mut place: Vec<Option<Place>> = vec![None; graph.tensors.len()];
        for &i in &order {
            let (offset, size) = (plan.offsets()[i], records[i].size);
            let end = checked_add(offset, size, "slab")?;
            if size > cap {
                return Err(Error::invalid(
                    format!("tensors '{}'.size", records[i].id),
                    format!("at most {cap} bytes (maxSlabSize)"),
                    size.to_string(),
                )
                .with_hint(format!("tensor '{}' ({size} bytes) is larger than maxSlabSize ({cap})", records[i].id)));
            }
            match bases.last_mut() {
                Some((base, len)) if end - *base <= cap => *len = (*len).max(end - *base),
                _ => bases.push((offset, size)),
            }
            let slab = bases.len() - 1;
            place[graph.index[&records[i].id]] = Some(Place { slab, offset: offset - bases[slab].0 });
        }
        let slabs =
            bases.iter().map(|&(_, size)| heap.malloc(size.max(4), Usage::Device)).collect::<Result<Vec<_>>>()?;

        // Constant region: params, written once.
        let mut constant_size = 0u64;
        let mut const_at = HashMap::new();
        for (i, t) in graph.tensors.iter().enumerate() {
            if graph.root[i] == i && t.kind == TensorKind::Param {
                if !options.params.contains_key(&t.id) {
                    if let Some((at, len)) = options.weights.as_ref().and_then(|w| w.entry(&t.id)) {
                        if len != t.size {
                            return Err(Error::invalid(
                                format!("weights '{}'", t.id),
                                format!("{} bytes", t.size),
                                format!("{len} bytes"),
                            )
                            .with_hint(format!("param '{}' needs {} bytes; the weights hold {len}", t.id, t.size)));
                        }
                        place[i] = Some(Place { slab: WEIGHTS, offset: at });
                        continue;
                    }
                }
                let at = crate::error::align_up(constant_size, alignment)?;
                const_at.insert(i, at);
                constant_size = checked_add(at, binding_size(t.size)?, "constant region")?;
            }
        }
        for id in options.params.keys() {
            match graph.tensor(id) {
                Some(t) if t.kind == TensorKind::Param => {}
                _ => {
                    return Err(Error::invalid(
                        "params",
                        "names of param tensors of the graph",
                        crate::error::quoted(id),
                    )
                    .with_hint(format!("params names '{id}', which is not a param tensor of the graph")))
                }
            }
        }
        let weights = options.weights.clone();
        if let Some(w) = &weights {
            if !w.block().heap().same_heap(&heap) {
                return Err(Error::invalid("weights", "weights of this device", "weights of another device")
                    .in_call("compile")
                    .with_hint("create the weights on this device"));
            }
        }
        check_params_given(&graph, &options.params, weights.as_deref())?;
        let constants = if constant_size > 0 { Some(heap.malloc(constant_size, Usage::Device)?) } else { None };
        if let Some(block) = &constants {
            for (&i, &at) in &const_at {
                place[i] = Some(Place { slab: CONSTANTS, offset: at });
                let t = &graph.tensors[i];
                let mut bytes = options.params[&t.id].clone();
                if bytes.len() as u64 != t.size {
                    return Err(Error::invalid(
                        format!("params.{}", t.id),
                        format!("{} bytes", t.size),
                        format!("{} bytes", bytes.len()),
                    )
                    .with_hint(format!(
                        "param '{}' needs {} bytes, got {}",
                        t.id,
                        t.size,
                        bytes.len()
                    )));
                }
                bytes.resize(binding_size(t.size)? as usize, 0);
                block.write(&bytes, at)?;
            }
        }
        for i in 0..graph.tensors.len() {
            place[i] = place[graph.root[i]];
        }

        // Pipelines, uniforms and bind groups: built once, so the blocks they bind stay put
        // while the executor lives.
        let max_workspace = graph.ops.iter().map(|o| o.workspace).max().unwrap_or(0);
        // Ops run one after another on one queue, so one region serves every op's workspace.
        let workspace =
            if max_workspace > 0 { Some(heap.malloc(binding_size(max_workspace)?, Usage::Device)?) } else { None };
        let places = Places::pin(&slabs, constants.as_ref(), weights.as_ref(), workspace.as_ref())?;
        let mut steps = Vec::with_capacity(graph.ops.len());
        let mut uniforms = Vec::new();
        let mut bind_groups = 0;
        let ranges = |ids: &mut dyn Iterator<Item = &String>| -> Result<Vec<(usize, u64, u64)>> {
            ids.map(|id| {
                let i = graph.index[id];
                let p = place[i].ok_or_else(|| Error::Internal(format!("tensor '{id}' has no placement")))?;
                Ok((p.slab, p.offset, binding_size(graph.tensors[i].size)?))
            })
            .collect()
        };
        let mut deferred = Vec::with_capacity(graph.ops.len());
        // The dims uniform, when a kernel declares it (pipelines are cached: the loop below
        // finds them built).
        let mut declares_dims = false;
        for op in &graph.ops {
            if let Some(pipeline) = bind::op_pipeline(gpu, &graph, op)? {
                bind::check_dims_uniform(&pipeline, &graph.dims, &format!("op '{}'", op.name))?;
                declares_dims |= pipeline.dims_size.is_some();
            }
        }
        let dims = if declares_dims {
            let values: Vec<u64> = graph.dims.iter().map(|(_, v)| *v).collect();
            let block = heap.alloc_scalar(&bind::dims_bytes(&values)?)?;
            Some(DimsUniform { block, written: Mutex::new(values) })
        } else {
            None
        };
        let dims_block = dims.as_ref().map(|d| &d.block);
        for op in &graph.ops {
            let Some(pipeline) = bind::op_pipeline(gpu, &graph, op)? else {
                steps.push(None);
                deferred.push(None);
                continue;
            };
            let external = |id: &String| graph.tensors[graph.root[graph.index[id]]].kind == TensorKind::External;
            if op.inputs.iter().chain(&op.outputs).any(external) {
                let mut storage = op
                    .inputs
                    .iter()
                    .chain(&op.outputs)
                    .map(|id| {
                        let i = graph.index[id];
                        let size = binding_size(graph.tensors[i].size)?;
                        Ok(match place[i] {
                            Some(p) => Binding::Placed { slab: p.slab, offset: p.offset, size },
                            None => Binding::External { tensor: graph.root[i], size },
                        })
                    })
                    .collect::<Result<Vec<_>>>()?;
                if op.workspace > 0 {
                    storage.push(Binding::Workspace { size: binding_size(op.workspace)? });
                }
                let uniform = bind::op_uniform(gpu, op, &pipeline)?.map(|u| {
                    uniforms.push(u);
                    uniforms.len() - 1
                });
                steps.push(None);
                deferred.push(Some(Deferred {
                    pipeline,
                    storage,
                    uniform,
                    dispatch: op.dispatch,
                    name: op.name.clone(),
                    last: Mutex::new(None),
                }));
                continue;
            }
            let mut storage: Vec<Range> = ranges(&mut op.inputs.iter().chain(&op.outputs))?
                .into_iter()
                .map(|(slab, offset, size)| Range::at(places.region(slab), offset, size))
                .collect();
            if op.workspace > 0 {
                storage.push(Range::at(places.workspace(), 0, binding_size(op.workspace)?));
            }
            let uniform = bind::op_uniform(gpu, op, &pipeline)?;
            let bind_group = bind::bind_group(gpu, &op.name, &pipeline, &storage, uniform.as_ref())?;
            bind_groups += 1;
            let dims = bind::dims_group(gpu, &op.name, &pipeline, dims_block)?;
            bind_groups += u64::from(dims.is_some());
            steps.push(Some(Step { pipeline, bind_group, dispatch: op.dispatch, name: op.name.clone(), dims }));
            deferred.push(None);
            uniforms.extend(uniform);
        }

        // One read-back buffer for all outputs, reused by every run.
        let mut readback_layout = Vec::new();
        let mut readback_size = 0u64;
        for t in graph.outputs() {
            let i = graph.index[&t.id];
            readback_layout.push((i, readback_size));
            readback_size = checked_add(readback_size, binding_size(t.size)?, "outputs")?;
        }
        let device = gpu.device();
        let readback = guarded_alloc(device, "allocating the output read-back buffer", readback_size.max(4), || {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("wgalloc outputs"),
                size: readback_size.max(4),
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        })?;
        let stats = ExecutorStats {
            pipelines_created: gpu.pipelines_created() - pipelines_before,
            bind_groups_created: bind_groups,
            buffers_created: heap.stats().driver_allocations - driver_before + 1,
            staging_buffers_created: 0,
            runs: 0,
            slabs: slabs.len() as u64,
            slab_bytes: slabs.iter().map(|s| s.size()).sum(),
            constant_bytes: constant_size,
            shared_weight_bytes: weights.as_ref().map_or(0, |w| w.device_bytes()),
        };
        Ok(Executor {
            gpu: gpu.clone(),
            graph,
            plan,
            slabs,
            constants,
            weights: Mutex::new(weights),
            uniforms,
            workspace,
            dims,
            places,
            place,
            steps,
            deferred,
            readback,
            readback_layout,
            life: Mutex::new(Life::default()),
            turns: Arc::default(),
            charge: Mutex::new(None),
            stats: Mutex::new(stats),
            runs: AtomicU64::new(0),
        })
    }

    pub fn plan(&self) -> &wgalloc_plan::Plan {
        &self.plan
    }

    pub fn graph(&self) -> &ExecGraph {
        &self.graph
    }

    pub fn stats(&self) -> ExecutorStats {
        let mut s = *lock(&self.stats);
        s.runs = self.runs.load(Ordering::Relaxed);
        s
    }

    /// Device bytes the executor holds: slabs plus the constant region (0 once released; a
    /// run in flight then returns them when it ends).
    /// Charges the executor's device bytes to `scope` until it is released or dropped;
    /// `QUOTA_EXCEEDED` when they do not fit (nothing charged). Once per executor.
    pub fn charge_to(&self, scope: &Scope) -> Result<()> {
        if lock(&self.life).released {
            return Err(Error::UseAfterFree("the executor was released; compile the graph again".into()));
        }
        let bytes = self.device_bytes();
        self.gpu.heap()?.charge_once(&mut lock(&self.charge), scope, bytes, "compile", "executor")
    }

    pub fn device_bytes(&self) -> u64 {
        if lock(&self.life).released {
            return 0;
        }
        self.slabs.iter().map(DeviceBlock::size).sum::<u64>() + self.constants.as_ref().map_or(0, DeviceBlock::size)
    }

    fn region(&self, slab: usize) -> &DeviceBlock {
        region(&self.slabs, self.constants.as_ref(), None, slab)
    }

    fn range(&self, tensor: usize) -> Result<(&wgpu::Buffer, u64, u64)> {
        let p = self.place[tensor].ok_or_else(|| Error::Internal("tensor without placement".into()))?;
        let at = self.places.region(p.slab);
        Ok((&at.buffer, at.offset + p.offset, binding_size(self.graph.tensors[tensor].size)?))
    }

    /// Runs the graph on `inputs` (every input tensor, exact byte length) and returns the outputs.
    pub async fn run(&self, inputs: &HashMap<String, Vec<u8>>, options: RunOptions) -> Result<RunOutput> {
        self.run_io(inputs, &DeviceIo::default(), options).await
    }

    /// [`Executor::run`] with inputs and outputs on the device as `io` says; `inputs` holds the
    /// host bytes of every other input. When no output is read back, the run returns once its
    /// work is submitted: blocks chained into the next run are ordered by the queue. Runs of one
    /// executor take turns in call order (see [`Executor::claim`]).
    pub async fn run_io(
        &self,
        inputs: &HashMap<String, Vec<u8>>,
        io: &DeviceIo,
        options: RunOptions,
    ) -> Result<RunOutput> {
        Executor::claim(self, options.wait)?.run_io(inputs, io, options).await
    }

    /// Claims `exe` for one run now, before the run starts (a caller that returns before its
    /// run is polled claims first, so a `release()` right after waits for that run). Runs take
    /// turns in claim order: the claim's run starts once every run claimed before it ended.
    /// `USE_AFTER_FREE` once released; with `wait` false, `EXECUTOR_BUSY` while another run is
    /// claimed (queued or running) instead of a place in the queue.
    pub fn claim<E: std::ops::Deref<Target = Executor>>(exe: E, wait: bool) -> Result<RunClaim<E>> {
        let ticket = {
            let mut life = lock(&exe.life);
            if life.released {
                return Err(Error::UseAfterFree("this executor was released; compile the graph again".into()));
            }
            // Taken under the `life` lock: no release() comes between the check and the claim.
            let ticket = if wait {
                exe.turns.ticket()
            } else {
                exe.turns.ticket_now().ok_or_else(|| {
                    Error::Busy(
                        "this executor is busy with an earlier run, and this run was asked not to wait (wait: false); \
                         leave wait unset to queue the run behind the earlier ones"
                            .into(),
                    )
                })?
            };
            life.claims += 1;
            ticket
        };
        Ok(RunClaim { exe, ticket })
    }

    async fn run_inner(
        &self,
        inputs: &HashMap<String, Vec<u8>>,
        io: &DeviceIo,
        options: RunOptions,
    ) -> Result<RunOutput> {
        self.gpu.check_alive()?;
        check_io(&self.graph, inputs, io, &self.gpu.heap()?)?;
        // Inputs go through the host staging cache: a cache hit costs no driver call,
        // and each staging block is reused only once its copy ran.
        let mut stream = self.gpu.create_stream()?;
        // External blocks are bound, not copied: record this run's stream on them now, so a
        // free() from now on waits for the run's work (and one before is USE_AFTER_FREE).
        for t in self.graph.externals() {
            io.inputs[&t.id].record_stream(&stream)?;
        }
        let host = self.gpu.host()?;
        let created_before = host.raw_stats().num_host_alloc;
        let mut staging = Vec::new();
        for t in self.graph.inputs() {
            let i = self.graph.index[&t.id];
            let p = self.place[i].ok_or_else(|| Error::Internal(format!("input '{}' has no placement", t.id)))?;
            let size = binding_size(t.size)?;
            // Inputs are never views (the graph refuses them), so each has a place in a slab.
            let slab =
                self.slabs.get(p.slab).ok_or_else(|| Error::Internal(format!("input '{}' is not in a slab", t.id)))?;
            if let Some(block) = io.inputs.get(&t.id) {
                let what = format!("run input '{}'", t.id);
                let moved = io.moved(&t.id, t.size);
                if let Some(runs) = io.runs.get(&t.id) {
                    // Rows of the asked shape into the bucket's, zeros between them.
                    let at = self.places.region(p.slab);
                    stream.encoder()?.clear_buffer(&at.buffer, at.offset + p.offset, Some(size));
                    for &(src, dst, len) in runs {
                        slab.copy_on(&mut stream, block, src, p.offset + dst, len, &what)?;
                    }
                    continue;
                }
                slab.copy_on(&mut stream, block, 0, p.offset, moved, &what)?;
                if moved < t.size {
                    // The rest is zero, as host inputs are padded.
                    let at = self.places.region(p.slab);
                    stream.encoder()?.clear_buffer(&at.buffer, at.offset + p.offset + moved, Some(size - moved));
                }
                continue;
            }
            let mut bytes = inputs[&t.id].clone();
            bytes.resize(size as usize, 0);
            let block = host.alloc(size, crate::host::Direction::Upload)?;
            block.write(&bytes, 0)?;
            block.copy_to_device_on(&mut stream, slab, 0, p.offset, size)?;
            staging.push(block);
        }
        // Counts every staging creation on the device meanwhile; exact when runs do not overlap other uploads.
        lock(&self.stats).staging_buffers_created += host.raw_stats().num_host_alloc.saturating_sub(created_before);
        let mut observation = options.observe.then(|| Observation { events: Vec::new(), ops: self.graph.ops.len() });
        if let Some(obs) = observation.as_mut() {
            self.observe(obs);
        }
        let weights = lock(&self.weights).clone();
        if let Some(u) = &self.dims {
            // Queued: it runs after the earlier runs' submitted work, before this run's.
            let values = io.dims.clone().unwrap_or_else(|| self.graph.dims.iter().map(|(_, v)| *v).collect());
            let mut written = lock(&u.written);
            if *written != values {
                u.block.write(&bind::dims_bytes(&values)?, 0)?;
                *written = values;
            }
        }
        let bound = self.bind_externals(&io.inputs)?;
        if options.check_plan {
            stream.submit()?; // the checked run reads inputs back on other streams
            self.run_checked(&mut stream, &bound).await?;
        } else {
            let steps: Vec<&Step> = self.run_steps(&bound).flatten().collect();
            bind::encode(&mut stream, &steps)?;
        }
        let mut device_outputs = Vec::new();
        let mut read_back = Vec::new();
        for &(i, at) in &self.readback_layout {
            let t = &self.graph.tensors[i];
            let moved = io.moved(&t.id, t.size);
            let target = match io.outputs_into.get(&t.id) {
                Some(block) => Some(block.clone()),
                None if io.outputs_on_device => Some(Arc::new(self.gpu.heap()?.malloc(moved.max(1), Usage::Device)?)),
                None => None,
            };
            if let Some(block) = target {
                let p = self.place[i].ok_or_else(|| Error::Internal(format!("output '{}' has no placement", t.id)))?;
                let what = format!("run output '{}'", t.id);
                match io.runs.get(&t.id) {
                    Some(runs) => {
                        for &(src, dst, len) in runs {
                            block.copy_on(&mut stream, self.region(p.slab), p.offset + src, dst, len, &what)?;
                        }
                    }
                    None => block.copy_on(&mut stream, self.region(p.slab), p.offset, 0, moved, &what)?,
                }
                device_outputs.push((t.id.clone(), block));
                continue;
            }
            read_back.push((i, at));
            let (buffer, offset, size) = self.range(i)?;
            let info = crate::profile::CopyInfo {
                kind: crate::profile::CopyKind::Download,
                bytes: size,
                blocking: true,
                via_host: false,
                src_block: None,
                dst_block: None,
            };
            stream.encode_copy(buffer, offset, &self.readback, at, size, info)?;
        }
        let event = stream.submit()?;
        for block in staging {
            block.free()?;
        }
        let heap = self.gpu.heap()?;
        for s in self.slabs.iter().chain(weights.as_ref().map(|w| w.block())) {
            heap.record_use(s.id(), event.seq());
        }
        for block in io.inputs.values().chain(device_outputs.iter().map(|(_, b)| b)) {
            heap.record_use(block.id(), event.seq());
        }
        let mut outputs = Vec::with_capacity(read_back.len());
        if !read_back.is_empty() {
            self.gpu.map_read(&self.readback).await?;
            {
                let _lease = self.gpu.lease_mapping()?;
                let view = self
                    .readback
                    .get_mapped_range(..)
                    .map_err(|e| Error::Internal(format!("output mapping failed: {e}")))?;
                for &(i, at) in &read_back {
                    let t = &self.graph.tensors[i];
                    outputs.push((t.id.clone(), view[at as usize..(at + t.size) as usize].to_vec()));
                }
            }
            self.readback.unmap();
        }
        self.runs.fetch_add(1, Ordering::Relaxed);
        Ok(RunOutput { outputs, device_outputs, observation })
    }

    /// The bind groups of the ops that bind external tensors, made for this run's blocks (or
    /// kept from the last run when it gave the same blocks), in op order.
    fn bind_externals(&self, blocks: &HashMap<String, Arc<DeviceBlock>>) -> Result<Vec<Option<Arc<Step>>>> {
        let g = &self.graph;
        let block_of = |tensor: usize| -> Result<&Arc<DeviceBlock>> {
            blocks.get(&g.tensors[tensor].id).ok_or_else(|| {
                Error::invalid(format!("inputs.{}", g.tensors[tensor].id), "a DeviceBlock", "undefined").with_hint(
                    format!("external tensor '{}' needs a DeviceBlock in the run's inputs", g.tensors[tensor].id),
                )
            })
        };
        let mut out = Vec::with_capacity(self.deferred.len());
        for d in &self.deferred {
            let Some(d) = d else {
                out.push(None);
                continue;
            };
            let mut ids = Vec::new();
            for b in &d.storage {
                if let Binding::External { tensor, .. } = *b {
                    ids.push(block_of(tensor)?.id());
                }
            }
            let mut last = lock(&d.last);
            // Block ids are never reused, so the same ids mean the same live ranges.
            if let Some(kept) = last.as_ref().filter(|kept| kept.ids == ids) {
                out.push(Some(kept.step.clone()));
                continue;
            }
            // Pinned while the step is kept: its bind group names these places.
            let externals = d
                .storage
                .iter()
                .filter_map(|b| match *b {
                    Binding::External { tensor, .. } => Some(block_of(tensor).and_then(|b| b.binding())),
                    _ => None,
                })
                .collect::<Result<Vec<_>>>()?;
            let mut external = externals.iter();
            let storage: Vec<Range> = d
                .storage
                .iter()
                .map(|b| match *b {
                    Binding::Placed { slab, offset, size } => Range::at(self.places.region(slab), offset, size),
                    Binding::External { size, .. } => Range::at(external.next().expect("one per external"), 0, size),
                    Binding::Workspace { size } => Range::at(self.places.workspace(), 0, size),
                })
                .collect();
            let uniform = d.uniform.map(|u| &self.uniforms[u]);
            let bind_group = bind::bind_group(&self.gpu, &d.name, &d.pipeline, &storage, uniform)?;
            let dims = bind::dims_group(&self.gpu, &d.name, &d.pipeline, self.dims.as_ref().map(|u| &u.block))?;
            lock(&self.stats).bind_groups_created += 1 + u64::from(dims.is_some());
            let step = Arc::new(Step {
                pipeline: d.pipeline.clone(),
                bind_group,
                dispatch: d.dispatch,
                name: d.name.clone(),
                dims,
            });
            *last = Some(KeptStep { ids, step: step.clone(), _externals: externals });
            out.push(Some(step));
        }
        Ok(out)
    }

    /// Each op's step for a run: built at compile time, or bound to this run's external blocks.
    fn run_steps<'a>(&'a self, bound: &'a [Option<Arc<Step>>]) -> impl Iterator<Item = Option<&'a Step>> + 'a {
        self.steps.iter().zip(bound).map(|(s, b)| s.as_ref().or(b.as_deref()))
    }

    /// AllocateTensor at the producer, free after the last use, at planned offsets.
    fn observe(&self, obs: &mut Observation) {
        let g = &self.graph;
        for (k, op) in g.ops.iter().enumerate() {
            for i in g.placed_roots().filter(|&i| g.first[i] == k) {
                let p = self.place[i].expect("placed");
                obs.record(
                    k,
                    &op.name,
                    ObservedKind::Alloc,
                    &g.tensors[i].id,
                    g.tensors[i].size,
                    p.slab as u64,
                    p.offset,
                );
            }
            for i in g.placed_roots().filter(|&i| g.last[i] == k && k + 1 < g.ops.len()) {
                let p = self.place[i].expect("placed");
                obs.record(
                    k,
                    &op.name,
                    ObservedKind::Free,
                    &g.tensors[i].id,
                    g.tensors[i].size,
                    p.slab as u64,
                    p.offset,
                );
            }
        }
    }

    /// One submit per op: poison the op's outputs, run it, then check every tensor
    /// that was live before the op still holds what it held.
    async fn run_checked(&self, stream: &mut crate::stream::Stream, bound: &[Option<Arc<Step>>]) -> Result<()> {
        let g = &self.graph;
        let steps: Vec<Option<&Step>> = self.run_steps(bound).collect();
        let mut snapshots: HashMap<usize, Vec<u8>> = HashMap::new();
        for t in g.inputs() {
            let r = g.index[&t.id];
            let (buffer, offset, size) = self.range(r)?;
            snapshots.insert(r, self.gpu.submit_readback(buffer, offset, size, None)?.finish().await?);
        }
        for (k, op) in g.ops.iter().enumerate() {
            // Tensors this op brings to life (not views of inputs, which exist from the start).
            let outs: Vec<usize> = op
                .outputs
                .iter()
                .map(|id| g.root[g.index[id]])
                .filter(|&r| {
                    g.first[r] == k && matches!(g.tensors[r].kind, TensorKind::Intermediate | TensorKind::Output)
                })
                .collect();
            for &r in &outs {
                let (buffer, offset, size) = self.range(r)?;
                let poison: Vec<u8> = (0..size).map(|b| [0xde, 0xad, 0xbe, 0xef][(b % 4) as usize]).collect();
                self.gpu.write_words(buffer, offset, &poison, size, "poisoning an op's outputs", None)?;
            }
            if let Some(step) = steps[k] {
                bind::encode(stream, &[step])?;
            }
            stream.submit()?;
            // Everything the op writes, through views too: a view of a tensor that is
            // already live is aliasing the graph declares, not a plan fault.
            let mut written: Vec<usize> = op.outputs.iter().map(|id| g.root[g.index[id]]).collect();
            written.sort_unstable();
            written.dedup();
            // Tensors live across this op that it does not write must be unchanged.
            let live: Vec<usize> =
                snapshots.keys().copied().filter(|&r| g.last[r] >= k && written.binary_search(&r).is_err()).collect();
            for r in live {
                let (buffer, offset, size) = self.range(r)?;
                let now = self.gpu.submit_readback(buffer, offset, size, None)?.finish().await?;
                if now != snapshots[&r] {
                    return Err(Error::PlanInvalid(format!(
                        "op '{}' (#{k}) overwrote live tensor '{}': the plan places overlapping live tensors",
                        op.name, g.tensors[r].id
                    )));
                }
            }
            // Externals are the caller's blocks, outside the plan.
            written.retain(|&r| g.tensors[r].kind != TensorKind::External);
            for &r in written.iter().filter(|&&r| !matches!(g.tensors[r].kind, TensorKind::Param)) {
                let (buffer, offset, size) = self.range(r)?;
                snapshots.insert(r, self.gpu.submit_readback(buffer, offset, size, None)?.finish().await?);
            }
            snapshots.retain(|&r, _| g.last[r] > k || g.tensors[r].kind == TensorKind::Output);
        }
        Ok(())
    }

    /// Returns the slabs and constants to the heap (ReleaseSlab) and lets go of the shared
    /// weights (freed when their last user lets go). Idempotent.
    pub fn release(&self) -> bool {
        let mut life = lock(&self.life);
        if life.released {
            return false;
        }
        life.released = true;
        drop(lock(&self.charge).take());
        // Runs claimed before (queued or in flight) still run: the last to end frees the blocks.
        if life.claims == 0 {
            self.free_blocks();
        }
        true
    }

    /// Frees the slabs, constants and uniforms (called once, under the `life` lock).
    fn free_blocks(&self) {
        let dims = self.dims.as_ref().map(|d| &d.block);
        for s in self
            .slabs
            .iter()
            .chain(self.constants.iter())
            .chain(self.uniforms.iter())
            .chain(self.workspace.iter())
            .chain(dims)
        {
            let _ = s.free();
        }
        lock(&self.weights).take();
    }

    pub fn is_released(&self) -> bool {
        lock(&self.life).released
    }
}

/// Host inputs as [`check_inputs`] wants them, each input given once (host or device), device
/// blocks live, of this device and large enough, and output targets naming outputs.
fn check_io(
    graph: &ExecGraph,
    inputs: &HashMap<String, Vec<u8>>,
    io: &DeviceIo,
    heap: &crate::heap::Heap,
) -> Result<()> {
    let blocks =
        io.inputs.iter().map(|(id, b)| ("input", id, b)).chain(io.outputs_into.iter().map(|(id, b)| ("output", id, b)));
    for (role, id, block) in blocks {
        // The run option the block came in, as the caller names it.
        let field = if role == "input" { "inputs" } else { "outputsInto" };
        let t = graph.tensor(id).filter(|t| match role {
            "input" => matches!(t.kind, TensorKind::Input | TensorKind::External),
            _ => t.kind == TensorKind::Output,
        });
        let Some(t) = t else {
            return Err(Error::invalid(
                format!("{field}.{id}"),
                format!("an {role} tensor of the graph"),
                crate::error::quoted(id),
            )
            .with_hint(format!("device {role} '{id}' is not an {role} tensor of the graph")));
        };
        let external = t.kind == TensorKind::External;
        if external && graph.index.get(id).is_some_and(|&i| graph.root[i] != i) {
            return Err(Error::invalid(
                format!("inputs.{id}"),
                "an external tensor, not a view of one",
                crate::error::quoted(id),
            )
            .with_hint(format!(
                "'{id}' is a view of external tensor '{}'; pass the block for that tensor",
                graph.tensors[graph.root[graph.index[id]]].id
            )));
        }
        let needed = if external { t.size } else { io.moved(id, t.size) };
        if !external && (!t.size.is_multiple_of(4) || !needed.is_multiple_of(4)) {
            return Err(Error::invalid(format!("{field}.{id}"), "a multiple of 4 bytes", format!("{} bytes", if t.size.is_multiple_of(4) { needed } else { t.size })).with_hint(format!(
                "{role} '{id}' is {} bytes: device {role}s must be a multiple of 4 bytes (GPU copies move whole words); \
                 pass host bytes instead",
                if t.size.is_multiple_of(4) { needed } else { t.size }
            )));
        }
        if role == "input" && inputs.contains_key(id) {
            return Err(Error::invalid(format!("inputs.{id}"), "host bytes or a device block, not both", "both")
                .with_hint(format!("input '{id}' is given twice: as host bytes and as a device block")));
        }
        if block.is_freed() {
            return Err(Error::UseAfterFree(format!("the block given for {role} '{id}' was freed")));
        }
        if !block.heap().same_heap(heap) {
            return Err(Error::invalid(format!("{field}.{id}"), "a block of this device", "a block of another device")
                .with_hint(format!("the block given for {role} '{id}' belongs to another device")));
        }
        if block.requested_size() < needed || (external && block.size() < binding_size(t.size)?) {
            return Err(Error::invalid(
                format!("{field}.{id}"),
                format!("a block of at least {needed} bytes"),
                format!("{} bytes", block.requested_size()),
            )
            .with_hint(format!(
                "the block given for {role} '{id}' holds {} bytes; the tensor needs {needed}",
                block.requested_size(),
            )));
        }
    }
    let mut external_blocks: Vec<(u64, &str)> = Vec::new();
    for t in graph.externals() {
        let Some(block) = io.inputs.get(&t.id) else {
            let how = if inputs.contains_key(&t.id) { "host bytes cannot be bound in place" } else { "none was given" };
            return Err(Error::invalid(
                format!("inputs.{}", t.id),
                format!("a DeviceBlock of at least {} bytes", t.size),
                if inputs.contains_key(&t.id) { "host bytes" } else { "undefined" },
            )
            .with_hint(format!(
                "external tensor '{}' needs a DeviceBlock of at least {} bytes in the run's inputs ({how})",
                t.id, t.size
            )));
        };
        if let Some((_, other)) = external_blocks.iter().find(|(b, _)| *b == block.id()) {
            return Err(Error::invalid(
                format!("inputs.{}", t.id),
                "a block of its own",
                format!("the block of '{other}'"),
            )
            .with_hint(format!(
                "external tensors '{other}' and '{}' are given the same block; each needs its own",
                t.id
            )));
        }
        external_blocks.push((block.id(), &t.id));
    }
    // Sorted, so the error names the same pair whatever the map's order.
    let mut into: Vec<(&String, u64)> = io.outputs_into.iter().map(|(id, b)| (id, b.id())).collect();
    into.sort();
    for (i, (id, block)) in into.iter().enumerate() {
        if let Some((other, _)) = into[..i].iter().find(|(_, b)| b == block) {
            return Err(Error::invalid(
                format!("outputsInto.{id}"),
                "a block of its own",
                format!("the block of '{other}'"),
            )
            .with_hint(format!(
                "outputs '{other}' and '{id}' are given the same block; the later copy would overwrite the other"
            )));
        }
    }
    check_inputs(graph, inputs, &io.inputs)
}

/// Every graph input not `on_device` present with its exact byte length, and nothing else.
pub(crate) fn check_inputs(
    graph: &ExecGraph,
    inputs: &HashMap<String, Vec<u8>>,
    on_device: &HashMap<String, Arc<DeviceBlock>>,
) -> Result<()> {
    // A name the graph does not have first: a misspelled input would otherwise be reported as
    // the input it was meant for, missing.
    let mut extra: Vec<&String> =
        inputs.keys().filter(|k| graph.tensor(k).is_none_or(|t| t.kind != TensorKind::Input)).collect();
    extra.sort();
    if let Some(extra) = extra.first() {
        let names: Vec<&str> = graph.inputs().map(|t| t.id.as_str()).collect();
        return Err(Error::invalid("inputs", "input tensors of the graph", crate::error::quoted(extra)).with_hint(
            format!(
                "'{extra}' is not an input tensor of the graph; its inputs are {}",
                if names.is_empty() { "none".to_string() } else { format!("'{}'", names.join("', '")) }
            ),
        ));
    }
    for t in graph.inputs().filter(|t| !on_device.contains_key(&t.id)) {
        let Some(bytes) = inputs.get(&t.id) else {
            return Err(Error::invalid(format!("inputs.{}", t.id), format!("{} bytes", t.size), "undefined")
                .with_hint(format!("input '{}' is missing", t.id)));
        };
        if bytes.len() as u64 != t.size {
            return Err(Error::invalid(
                format!("inputs.{}", t.id),
                format!("{} bytes", t.size),
                format!("{} bytes", bytes.len()),
            )
            .with_hint(format!("pass input '{}' whole, as the graph sizes it", t.id)));
        }
    }
    Ok(())
}
