// Plan execution: compiled executors, shared weights and shape-keyed executors, with typed
// inputs and outputs, device-resident I/O and profile-guided planning (`plan: 'observe'`).
import { inspect } from 'node:util'
import { api } from './internal/api.js'
import type { ExecutorStats, Observation, RunResult, ShapeExecutorStats } from './binding.js'
import { DeviceBlock, type HeapTable, adoptBlock, blockRef } from './device-block.js'
import { type HeapScope, nativeScope } from './heap-scope.js'
import { LiveObjects } from './internal/live-objects.js'
import { WgallocError, optionKeys, optionsObject, parseJson, shown, toWgallocError, u32, invalidArgument, noConstructor } from './errors.js'
import {
  type Graph,
  type GraphDims,
  type GraphInputs,
  type GraphOutputIds,
  type GraphOutputs,
  type OutputArray,
  type TensorData,
  byteMap,
  checkDtype,
  checkDtypes,
  dtypes,
  graphJson,
  typed,
  zeroInputs,
} from './graph.js'
import { type Binding, native } from './internal/native.js'
import { type MemoryPlan, type Strategy, type UsageRecord, wrapPlan } from './plan.js'
import { ASYNC_OPTIONS, type AsyncOptions, checkSignal, withSignal } from './internal/signal.js'

/** Options of `gpu.compile()`. */
export interface CompileOptions extends AsyncOptions {
  /** Planner strategy (default `best`). */
  strategy?: Strategy
  /** Search budget of `exact` / `best` in ms (default 1000). */
  timeLimitMs?: number
  /** Split the slab so none exceeds this many bytes. */
  maxSlabSize?: number
  /** Param values by id. */
  params?: Record<string, TensorData>
  /** `static` plans from the graph; `observe` runs eagerly once and plans from what it saw. */
  plan?: 'static' | 'observe'
  /** Inputs for the observed run (zeros by default). */
  sampleInputs?: Record<string, TensorData>
  /** Shared weights (`gpu.createWeights()`): params not in `params` are bound from them, without a copy. */
  weights?: Weights
  /** A heap scope charged with the executor's device bytes until `release()` (`QUOTA_EXCEEDED` when they do not fit). */
  scope?: HeapScope
}

const COMPILE_OPTIONS = optionKeys<CompileOptions>({
  strategy: true,
  timeLimitMs: true,
  maxSlabSize: true,
  params: true,
  plan: true,
  sampleInputs: true,
  weights: true,
  scope: true,
  signal: true,
})

/** Options of `gpu.createWeights()`. */
export interface CreateWeightsOptions {
  /**
   * A heap scope charged with the weights' device bytes until they go back to the heap: at `release()`, or later
   * while an executor compiled with them lives (`QUOTA_EXCEEDED` when they do not fit).
   */
  scope?: HeapScope
}

/** Options of `gpu.compileShapes()`: a compile's options plus how shapes map to executors. */
export interface CompileShapesOptions extends Omit<CompileOptions, 'plan' | 'sampleInputs' | 'signal' | 'scope'> {
  /**
   * A heap scope charged with the device bytes of the cached executors (slabs and constants) as
   * they come and go. A run or warmup whose new executor would take the scope past its limit
   * fails with QUOTA_EXCEEDED: that executor is released at once, and the cached ones stay.
   */
  scope?: HeapScope
  /** Name in metrics, unique among the device's live shape executors (default `shapes-<n>`). */
  name?: string
  /**
   * Per dimension, sizes to round up to (`{ batch: [1, 2, 4, 8, 16] }`); other dimensions compile per exact value.
   * A bucket may be on the first factor of a byte-size input or output (`'batch * 1024'`) or of a
   * shape extent (`shape: ['b', 's * 4']`, or a one-dimension extent such as `'s + 1'`); anything
   * else is `INVALID_ARGUMENT` here.
   */
  buckets?: Record<string, number[]>
  /** Executors kept; the least recently used is released first (default 8). */
  capacity?: number
}

const COMPILE_SHAPES_OPTIONS = optionKeys<CompileShapesOptions>({
  strategy: true,
  timeLimitMs: true,
  maxSlabSize: true,
  params: true,
  weights: true,
  scope: true,
  name: true,
  buckets: true,
  capacity: true,
})

/** Options of `gpu.runEager()`. */
export interface RunEagerOptions extends AsyncOptions {
  /** Param values by id. */
  params?: Record<string, TensorData>
  /** Record every allocation and free per op (`result.observation`). */
  observe?: boolean
}

const RUN_EAGER_OPTIONS = optionKeys<RunEagerOptions>({ params: true, observe: true, signal: true })

/** Options of `executor.run()`. */
export interface RunOptions extends AsyncOptions {
  /** Record every allocation and free per op (`result.observation`). */
  observe?: boolean
  /** Poison tensors before their producer and check after every op that no live tensor changed (`PLAN_INVALID` otherwise). */
  checkPlan?: boolean
  /** `host` (default) reads outputs back; `device` leaves each output (not in `outputsInto`) in a new heap block, in `result.blocks`. */
  outputs?: 'host' | 'device'
  /** Outputs written on the GPU into these blocks (at least the tensor's bytes) and not read back. */
  outputsInto?: Record<string, DeviceBlock>
  /**
   * Runs of one executor take turns in call order: by default (`true`) a run called while another
   * is queued or in flight waits for its turn. `false`: it fails at once with `EXECUTOR_BUSY`
   * instead (for a caller that would rather use another executor than wait).
   */
  wait?: boolean
}

const RUN_OPTIONS = optionKeys<RunOptions>({ observe: true, checkPlan: true, outputs: true, outputsInto: true, wait: true, signal: true })

/** What the memory observer saw during one run. */
export interface ExecObservation extends Observation {
  /** Copies of the usage records, ready for `planMemory()`. */
  toUsageRecords(): UsageRecord[]
}

/**
 * Outputs typed by their tensor's dtype (Uint8Array without one), and the observation if asked
 * for. For a graph given as a literal, `outputs` has its output ids, each as its dtype's array.
 */
export interface ExecResult<G extends Graph = Graph> {
  /** Output tensors by id (those not sent into `outputsInto` blocks). */
  outputs: GraphOutputs<G>
  /** What the run allocated and freed, with `observe: true`. */
  observation?: ExecObservation
  /** Outputs left on the device (`outputs: 'device'`), by id: the caller frees them. */
  blocks?: Partial<Record<GraphOutputIds<G>, DeviceBlock>>
}

/** No `outputsInto` blocks. */
export type NoOutputBlocks = Record<never, DeviceBlock>

/** `outputsInto` of a run of graph `G`: blocks for some of its outputs. */
export type OutputBlocks<G extends Graph> = Partial<Record<GraphOutputIds<G>, DeviceBlock>>

/** What a run with `outputs: 'device'` returns: every output not in `outputsInto` is in `blocks`. */
export interface DeviceExecResult<G extends Graph = Graph, Into extends OutputBlocks<G> = NoOutputBlocks> extends Omit<ExecResult<G>, 'outputs' | 'blocks'> {
  /** Nothing is read back: empty. */
  outputs: Partial<GraphOutputs<G>>
  /** The outputs left on the device, by id: the caller frees them. */
  blocks: string extends keyof Into ? Partial<Record<GraphOutputIds<G>, DeviceBlock>> : Record<Exclude<GraphOutputIds<G>, keyof Into>, DeviceBlock>
}

/** Run options that leave outputs on the device, with `outputsInto` blocks `I`. */
export interface DeviceRunOptions<I = unknown> {
  /** `'device'`. */
  outputs: 'device'
  /** Blocks of the caller's for some outputs. */
  outputsInto?: I
}

/** What a run with `options` returns: {@link DeviceExecResult} with `outputs: 'device'`, else {@link ExecResult}. */
export type RunResultOf<G extends Graph, O> = [O] extends [DeviceRunOptions<infer I>]
  ? DeviceExecResult<G, unknown extends I ? NoOutputBlocks : I extends OutputBlocks<G> ? I : NoOutputBlocks>
  : ExecResult<G>

/** What an executor needs from its device: the native device, its heap's table, and the heap's OOM report. */
export interface ExecDevice {
  native: Binding.Gpu
  table: () => HeapTable
  /** Reports an OUT_OF_MEMORY as the heap's malloc does (see Note [One path for every OOM]); returns the error. */
  outOfMemory: (err: unknown) => unknown
}

/** `work`, with an OUT_OF_MEMORY it rejects with reported through the heap. */
async function reportingOom<T>(device: ExecDevice, work: Promise<T>): Promise<T> {
  try {
    return await work
  } catch (err) {
    throw device.outOfMemory(err)
  }
}

type Types = Map<string, string | undefined>

/** A result as a run builds it; the public methods type it from their graph. */
interface AnyResult {
  outputs: Record<string, OutputArray>
  observation?: ExecObservation
  blocks?: Record<string, DeviceBlock>
}

/** The result of native run `r`; `device`: the run was asked for `outputs: 'device'` (`blocks` is then always set). */
function execResult(r: RunResult, types: Types, table: HeapTable | null, device: boolean): AnyResult {
  const outputs: Record<string, OutputArray> = {}
  for (const id of r.outputOrder) outputs[id] = typed(r.outputs[id], types.get(id))
  const result: AnyResult = { outputs }
  if (r.observation) {
    result.observation = {
      ...r.observation,
      toUsageRecords() {
        return this.usageRecords.map((x) => ({ ...x }))
      },
    }
  }
  if (table && (device || r.deviceOutputs?.length)) result.blocks = Object.fromEntries((r.deviceOutputs ?? []).map((o) => [o.tensor, adoptBlock(table, o)]))
  return result
}

/**
 * Splits run inputs into host bytes and device blocks, and turns `outputsInto` / `outputs` into the
 * native options. Every block must come from one heap object (`gpu.heap`): its table holds them.
 */
function runArguments(inputs: unknown, options: RunOptions, defaultTable: () => HeapTable, types: Types) {
  if (inputs == null || typeof inputs !== 'object') throw invalidArgument('inputs', 'an object of { id: TypedArray | DeviceBlock }', shown(inputs))
  const { signal, outputsInto, outputs, observe, checkPlan, wait } = options
  // The public options only: the native ones also take a heap slot and raw block ids.
  const flags = { observe, checkPlan, wait }
  // Keyed by ids the caller chose: no prototype, so no id reaches one.
  const host: Record<string, Uint8Array> = Object.create(null)
  const deviceInputs: Record<string, number> = Object.create(null)
  const into: Record<string, number> = Object.create(null)
  let table: HeapTable | null = null
  const take = (block: unknown, what: string) => {
    const ref = blockRef(block, what)
    if (table && ref.table !== table)
      throw invalidArgument(
        what,
        "a block of the same gpu.heap object as the run's other blocks",
        'a block of another',
        'every block of one run must come from the same gpu.heap object',
      )
    table = ref.table
    return ref.id
  }
  for (const [id, value] of Object.entries(inputs)) {
    if (value instanceof DeviceBlock) deviceInputs[id] = take(value, `inputs.${id}`)
    else {
      checkDtype(value, types.get(id), `input '${id}'`)
      host[id] = byteMap({ [id]: value }, 'inputs')[id]
    }
  }
  if (outputsInto != null) {
    if (typeof outputsInto !== 'object') throw invalidArgument('options.outputsInto', 'an object of { id: DeviceBlock }', shown(outputsInto))
    for (const [id, block] of Object.entries(outputsInto)) into[id] = take(block, `outputsInto.${id}`)
  }
  if (outputs !== undefined && outputs !== 'host' && outputs !== 'device') throw invalidArgument('options.outputs', "'host' or 'device'", shown(outputs))
  const device = table !== null || outputs === 'device'
  const chosen: HeapTable | null = table ?? (device ? defaultTable() : null)
  const nativeOptions = chosen ? { ...flags, heapSlot: chosen.slot, deviceInputs, outputsInto: into, outputs } : flags
  /** A run that ended after its caller aborted: the blocks it made for outputs go back to the heap (`outputsInto` blocks stay the caller's). */
  const dropLate = (r: RunResult) => {
    for (const o of r.deviceOutputs ?? []) if (chosen && !Object.hasOwn(into, o.tensor)) adoptBlock(chosen, o).free()
  }
  return { host, nativeOptions, signal, table: chosen, dropLate }
}

/**
 * One run through `start` (the native call, made before any await so the run claims its place at
 * once): arguments split and checked, an OOM reported through the heap, an abort honoured, the
 * result typed by `types`.
 */
async function runWith(
  device: ExecDevice,
  types: Types,
  inputs: unknown,
  opts: RunOptions,
  start: (host: Record<string, Uint8Array>, nativeOptions: Binding.ExecRunOptions) => Promise<RunResult>,
): Promise<AnyResult> {
  const { host, nativeOptions, signal, table, dropLate } = runArguments(inputs, opts, device.table, types)
  checkSignal(signal)
  // With a signal, an abort while the run is still queued takes it out of the queue at once.
  const cancel = signal ? native.runCancelToken() : undefined
  let started: Promise<RunResult>
  try {
    started = start(host, cancel === undefined ? nativeOptions : { ...nativeOptions, cancel })
  } catch (err) {
    if (cancel !== undefined) native.cancelRun(cancel) // refused before it was queued: forget the token
    throw err
  }
  if (cancel !== undefined) signal?.addEventListener('abort', () => native.cancelRun(cancel), { once: true })
  const r = await reportingOom(device, withSignal(started, signal, dropLate))
  return execResult(r, types, table, opts.outputs === 'device')
}

const kCreate = Symbol('exec.create')

let createWeights: (handle: Binding.Weights) => Weights
let weightsHandle: (weights: Weights) => Binding.Weights
let createExecutor: <G extends Graph>(handle: Binding.Executor, types: Types, device: ExecDevice) => Executor<G>
let createShapeExecutor: <G extends Graph>(handle: Binding.ShapeExecutor, types: Types, device: ExecDevice, name: string) => ShapeExecutor<G>

/**
 * Shared weights (`gpu.createWeights(params)`): one device copy of the params that any number of
 * executors, on this thread or on workers (`Weights.attach(weights.shareHandle())`), bind without
 * copying. The copy goes back to the heap once `release()` ran and no executor uses it.
 */
export class Weights {
  readonly #native: Binding.Weights

  private constructor(key: symbol, handle: Binding.Weights) {
    if (key !== kCreate) throw noConstructor('Weights', 'gpu.createWeights()')
    this.#native = handle
  }
  static {
    createWeights = (handle) => new Weights(kCreate, handle)
    weightsHandle = (w) => w.#native
  }

  /** The weights behind a handle from `shareHandle()`, while something still holds them. */
  @api static attach(handle: number): Weights {
    return createWeights(native.Weights.attach(handle))
  }
  /** Device bytes of the one copy (0 once released). */
  @api get deviceBytes(): number {
    return this.#native.deviceBytes
  }
  /** The param ids the store holds, sorted. */
  @api get ids(): string[] {
    return this.#native.ids
  }
  /** True once `release()` ran. */
  @api get released(): boolean {
    return this.#native.released
  }
  /**
   * A process-wide handle: pass it to a worker and call `Weights.attach(handle)` there.
   * It does not keep the weights alive.
   */
  @api shareHandle(): number {
    return this.#native.shareHandle()
  }
  /**
   * Lets go of this handle's reference; executors compiled with the weights keep theirs.
   * Returns false if it was already released.
   */
  @api release(): boolean {
    return this.#native.release()
  }
  /** Lets go of this handle (same as `release()`). */
  @api [Symbol.dispose](): void {
    if (!this.#native.released) this.release()
  }
  /** Readable `console.log` output. */
  @api [inspect.custom](): string {
    const w = this.#native
    return w.released ? 'Weights { released }' : `Weights { ids: [${w.ids.map((d) => `'${d}'`).join(', ')}], deviceBytes: ${w.deviceBytes} }`
  }
}

/**
 * The native compile options: params as bytes and shared weights as their handle. Only the public
 * options are copied: the native ones also take records and raw handles, which no caller may pass.
 */
function compileNative(rest: Record<string, unknown>, params: unknown, weights: unknown): Binding.CompileGraphOptions {
  if (weights != null && !(weights instanceof Weights)) throw invalidArgument('options.weights', 'weights from gpu.createWeights()', shown(weights))
  const { strategy, timeLimitMs, maxSlabSize } = rest as Binding.CompileGraphOptions
  return {
    strategy,
    timeLimitMs,
    maxSlabSize,
    params: byteMap(params, 'params'),
    ...(weights != null ? { weightsHandle: weightsHandle(weights).shareHandle() } : {}),
  }
}

/** A compiled graph: one plan, slabs from the heap, pipelines and bind groups built once. */
export class Executor<G extends Graph = Graph> {
  readonly #native: Binding.Executor
  readonly #types: Types
  readonly #device: ExecDevice

  private constructor(key: symbol, handle: Binding.Executor, types: Types, device: ExecDevice) {
    if (key !== kCreate) throw noConstructor('Executor', 'await gpu.compile()')
    this.#native = handle
    this.#types = types
    this.#device = device
  }
  static {
    createExecutor = (handle, types, device) => new Executor(kCreate, handle, types, device)
  }

  /** The memory plan the executor runs with. */
  @api get plan(): MemoryPlan {
    return wrapPlan(this.#native.plan)
  }
  /** Objects created at compile time, runs so far and slab sizes. */
  @api stats(): ExecutorStats {
    return this.#native.stats()
  }
  /** Device bytes held: slabs plus the constant region. */
  @api get deviceBytes(): number {
    return this.#native.deviceBytes
  }
  /** True once `release()` ran. */
  @api get released(): boolean {
    return this.#native.released
  }
  /**
   * Uploads the inputs (or binds input blocks), dispatches every op in order, returns the
   * outputs. Runs of one executor take turns in call order: a run called while others are queued
   * or in flight waits for them (with `wait: false` it fails with `EXECUTOR_BUSY` instead).
   * `USE_AFTER_FREE` after `release()`, `INVALID_ARGUMENT` for a missing or mis-sized input,
   * `ABORTED` when its `signal` fires: a queued run leaves the queue at once; a running one completes
   * its GPU work, and what it returns is released.
   */
  @api async run<O extends RunOptions = RunOptions>(inputs: GraphInputs<G, DeviceBlock>, options?: O): Promise<RunResultOf<G, O>> {
    const opts = optionsObject(options, 'run', RUN_OPTIONS)
    return (await runWith(this.#device, this.#types, inputs, opts, (host, o) => this.#native.run(host, o))) as RunResultOf<G, O>
  }
  /**
   * Returns the slabs to the heap (ReleaseSlab); later runs fail with `USE_AFTER_FREE`. Runs
   * called before (queued or in flight) complete first, and the slabs go back when the last ends.
   * Returns false if it was already released.
   */
  @api release(): boolean {
    return this.#native.release()
  }
  /** Releases the slabs (same as `release()`). */
  @api [Symbol.dispose](): void {
    if (!this.#native.released) this.release()
  }
  /** Releases the slabs (same as `release()`; nothing to wait for: freed slabs are reused only after their GPU work). */
  @api async [Symbol.asyncDispose](): Promise<void> {
    if (!this.#native.released) this.release()
  }
  /** Readable `console.log` output. */
  @api [inspect.custom](): string {
    const e = this.#native
    if (e.released) return 'Executor { released }'
    const p = e.plan
    return `Executor { slabSize: ${p.slabSize}, lowerBound: ${p.lowerBound}, strategy: '${p.strategy}', deviceBytes: ${e.deviceBytes}, runs: ${e.stats().runs} }`
  }
}

/**
 * A graph with symbolic dimensions (`"dims": ["batch"]`, sizes and dispatch counts as
 * expressions): each run names its dimensions, and the executor for that shape (exact, or
 * rounded up to a bucket) is compiled once and kept while it is among the most recently used.
 */
export class ShapeExecutor<G extends Graph = Graph> {
  readonly #native: Binding.ShapeExecutor
  readonly #types: Types
  readonly #device: ExecDevice
  readonly #name: string
  readonly #unregister: () => void
  #released = false

  private constructor(key: symbol, handle: Binding.ShapeExecutor, types: Types, device: ExecDevice, name: string) {
    if (key !== kCreate) throw noConstructor('ShapeExecutor', 'gpu.compileShapes()')
    this.#native = handle
    this.#types = types
    this.#device = device
    this.#name = name
    this.#unregister = liveShapeExecutors.add(device.native, this as unknown as ShapeExecutor)
  }
  static {
    createShapeExecutor = (handle, types, device, name) => new ShapeExecutor(kCreate, handle, types, device, name)
  }

  /** Name in metrics. */
  @api get name(): string {
    return this.#name
  }

  #checkLive(): void {
    if (this.#released) throw new WgallocError('USE_AFTER_FREE', 'this shape executor was released; call gpu.compileShapes() again')
  }
  /** The graph's dimension names. */
  @api get dims(): string[] {
    return this.#native.dims
  }
  /** The shape a run at `dims` uses (its buckets applied). */
  @api shapeOf(dims: Record<string, number>): Record<string, number> {
    return this.#native.shapeOf(dims)
  }
  /**
   * Runs at `dims` (`{ batch: 3 }`) with inputs sized for them (host bytes or blocks holding at
   * least those bytes; the bucket's remaining rows are zero, placed row by row for a tensor with a
   * `shape`); outputs, read back or left in blocks, come back sized for `dims`. External blocks
   * are bound whole in the bucket's shape: size them for `shapeOf(dims)`. Kernels read `dims`
   * from the dims uniform (`@group(1) @binding(0)`, see docs/execution.md). Compiles the shape's executor on first use; runs that share it
   * take turns, as `executor.run()` does. `INVALID_ARGUMENT` when a tensor's size at `dims` is not a
   * whole number of its dtype's elements.
   */
  @api async run<O extends RunOptions = RunOptions>(
    dims: Record<GraphDims<G>, number>,
    inputs: GraphInputs<G, DeviceBlock>,
    options?: O,
  ): Promise<RunResultOf<G, O>> {
    this.#checkLive()
    const opts = optionsObject(options, 'run', RUN_OPTIONS)
    if (dims == null || typeof dims !== 'object') throw invalidArgument('dims', 'an object such as { batch: 4 }', shown(dims))
    // A miss whose executor would take the scope past its limit fails here with QUOTA_EXCEEDED
    // (Note [Shape caches are charged as they grow], crates/wgalloc-core/src/exec/shapes.rs).
    const r = await runWith(this.#device, this.#types, inputs, opts, (host, o) => this.#native.runNative(dims, host, o))
    return r as RunResultOf<G, O>
  }
  /**
   * Compiles the executors of `shapes` now (each rounded up to its bucket), off the JS thread, so
   * the first requests of those shapes find them cached; with more shapes than the capacity, the
   * last ones stay. Errors as a run's compile would raise them.
   * @example
   * ```js
   * await model.warmup([{ batch: 1 }, { batch: 4 }, { batch: 16 }])
   * ```
   */
  @api async warmup(shapes: Record<GraphDims<G>, number>[], options?: AsyncOptions): Promise<void> {
    this.#checkLive()
    if (!Array.isArray(shapes)) throw invalidArgument(['warmup', 'shapes'], 'an array of dims such as [{ batch: 4 }]', shown(shapes))
    const { signal } = optionsObject(options, 'warmup', ASYNC_OPTIONS)
    checkSignal(signal)
    await reportingOom(this.#device, withSignal(this.#native.warmUpNative(shapes), signal))
  }
  /** Hits, misses, evictions and what the cached executors hold. */
  @api stats(): ShapeExecutorStats {
    return this.#native.stats()
  }
  /** Releases every cached executor (their slabs return to the heap); later runs compile again. */
  @api clear(): void {
    this.#native.clear()
  }
  /**
   * Ends the shape executor, as `executor.release()` does: every cached executor is released
   * (slabs back to the heap), it lets go of its shared weights (freed once their other holders
   * let go too), and later runs are USE_AFTER_FREE; runs called before complete. Calling it again
   * does nothing.
   */
  @api release(): void {
    this.#released = true
    this.#native.release()
    this.#unregister()
  }
  /** True once `release()` ran. */
  @api get released(): boolean {
    return this.#released
  }
  /** Same as `release()`. */
  @api [Symbol.dispose](): void {
    this.release()
  }
  /** Readable `console.log` output. */
  @api [inspect.custom](): string {
    const s = this.#native.stats()
    return `ShapeExecutor { dims: [${this.#native.dims.map((d) => `'${d}'`).join(', ')}], cached: ${s.cached}, hits: ${s.hits}, misses: ${s.misses} }`
  }
}

/** `gpu.compile()`. */
export async function compile<G extends Graph>(device: ExecDevice, graph: G | string, options?: CompileOptions): Promise<Executor<G>> {
  const { plan = 'static', sampleInputs, signal, params, weights, scope, ...rest } = optionsObject(options, 'compile', COMPILE_OPTIONS)
  const scopeHandle = scope === undefined ? undefined : nativeScope(scope, 'compile')
  checkSignal(signal)
  const json = graphJson(graph)
  const types = dtypes(json)
  // Note [Inputs match their dtype]: params too.
  checkDtypes(params, types, 'param')
  const nativeOptions: Binding.CompileGraphOptions = compileNative(rest, params, weights)
  if (plan === 'observe') {
    checkDtypes(sampleInputs, types, 'sampleInputs')
    const inputs = sampleInputs ? byteMap(sampleInputs, 'sampleInputs') : zeroInputs(parseJson(json, 'the graph'))
    const seen = await reportingOom(device, withSignal(device.native.runEagerGraph(json, inputs, nativeOptions.params, true), signal))
    const records = seen.observation?.usageRecords ?? []
    nativeOptions.recordsJson = JSON.stringify(records.map((r) => ({ ...r, size: Math.ceil(r.size / 4) * 4 })))
  } else if (plan !== 'static') {
    throw invalidArgument('options.plan', "'static' or 'observe'", shown(plan))
  }
  checkSignal(signal)
  // An executor finished after an abort is released at once (its slabs go back to the heap).
  const exe = await reportingOom(
    device,
    withSignal(device.native.compileGraph(json, nativeOptions), signal, (late) => late.release()),
  )
  const executor = createExecutor<G>(exe, types, device)
  if (scopeHandle) {
    try {
      exe.chargeTo(scopeHandle) // the native executor holds the charge: returned at release() or collection
    } catch (err) {
      exe.release() // over the scope's limit: its slabs go back to the heap
      throw toWgallocError(err, true)
    }
  }
  return executor
}

/** `gpu.runEager()`. */
export async function runEager<G extends Graph>(
  device: ExecDevice,
  graph: G | string,
  inputs: GraphInputs<G, never>,
  options?: RunEagerOptions,
): Promise<ExecResult<G>> {
  const opts = optionsObject(options, 'runEager', RUN_EAGER_OPTIONS)
  checkSignal(opts.signal)
  const json = graphJson(graph)
  const types = dtypes(json)
  checkDtypes(inputs, types, 'input')
  checkDtypes(opts.params, types, 'param')
  const r = await reportingOom(
    device,
    withSignal(device.native.runEagerGraph(json, byteMap(inputs, 'inputs'), byteMap(opts.params, 'params'), Boolean(opts.observe)), opts.signal),
  )
  return execResult(r, types, null, false) as unknown as ExecResult<G>
}

/** `gpu.createWeights()`. */
export function weightsOf(device: ExecDevice, params: Record<string, TensorData>, options?: CreateWeightsOptions): Weights {
  if (params == null || typeof params !== 'object') throw invalidArgument(['createWeights', 'params'], '{ id: TypedArray } of param bytes', shown(params))
  const { scope } = optionsObject(options, 'createWeights', optionKeys<CreateWeightsOptions>({ scope: true }))
  const scopeHandle = scope === undefined ? undefined : nativeScope(scope, 'createWeights')
  let handle: Binding.Weights
  try {
    handle = device.native.createWeightsNative(byteMap(params, 'params'))
  } catch (err) {
    throw device.outOfMemory(err)
  }
  const weights = createWeights(handle)
  if (scopeHandle) {
    try {
      handle.chargeTo(scopeHandle)
    } catch (err) {
      handle.release()
      throw toWgallocError(err, true)
    }
  }
  return weights
}

const liveShapeExecutors = new LiveObjects<ShapeExecutor>()
let nextShapesNumber = 0

/** The live shape executors of a device (metrics read them), oldest first. */
export const shapeExecutorsOf = (device: ExecDevice): ShapeExecutor[] => liveShapeExecutors.of(device.native)

/** `gpu.compileShapes()`. */
export function compileShapes<G extends Graph>(device: ExecDevice, graph: G | string, options?: CompileShapesOptions): ShapeExecutor<G> {
  const {
    buckets,
    capacity,
    params,
    weights,
    scope,
    name = `shapes-${nextShapesNumber++}`,
    ...rest
  } = optionsObject(options, 'compileShapes', COMPILE_SHAPES_OPTIONS)
  if (capacity != null) u32(capacity, 'compileShapes: capacity', 1)
  const scopeHandle = scope === undefined ? undefined : nativeScope(scope, 'compileShapes')
  if (typeof name !== 'string' || name === '') throw invalidArgument(['compileShapes', 'options.name'], 'a non-empty string', shown(name))
  if (liveShapeExecutors.of(device.native).some((s) => s.name === name))
    throw invalidArgument(
      ['compileShapes', 'options.name'],
      'a name no live shape executor of this device has',
      shown(name),
      `a live shape executor of this device is named ${shown(name)} already`,
    )
  const json = graphJson(graph)
  checkDtypes(params, dtypes(json), 'param')
  const se = device.native.compileShapesNative(json, { buckets, capacity }, compileNative(rest, params, weights))
  if (scopeHandle) {
    try {
      se.chargeTo(scopeHandle)
    } catch (err) {
      se.release()
      throw toWgallocError(err, true)
    }
  }
  return createShapeExecutor<G>(se, dtypes(json), device, name)
}
