// Public types of wgalloc: the generated native declarations, plus what the JS
// facade adds (typed errors, `{ signal }` options, disposal, diagnostics channels).
// Every public symbol carries a doc comment: `npm run docs:check` fails otherwise.

/**
 * GPU memory management for WebGPU in Node: a caching device heap, a host staging cache
 * with stream events, a static memory planner and executor, and a profiler, over wgpu.
 *
 * @example
 * ```js
 * const { Gpu } = require('wgalloc')
 * const gpu = await Gpu.request()
 * const block = gpu.heap.malloc(1024)
 * await gpu.upload(block, new Uint8Array(1024).fill(7))
 * const bytes = await gpu.download(block)
 * block.free()
 * gpu.destroy()
 * ```
 * @module
 */

import type {
  Observation,
  Executor,
  CopyOptions,
  DeviceBlock,
  Weights,
  ShapeExecutor,
  Gpu,
  Heap,
  HeapEvent,
  Host,
  MemoryPlan,
  PlanMemoryOptions,
  PlanProgress,
  PlanSpace,
  Profiler,
  ProfilerStartOptions,
} from '../index.js'

export type {
  AdapterDescription,
  ShapeExecutorStats,
  EnumerateOptions,
  BlockInfo,
  CopyOptions,
  GpuInfo,
  GpuRequestOptions,
  DurationStat,
  HeapEvent,
  HeapStats,
  HostAllocOptions,
  HostBucketStats,
  HostConfig,
  HostStats,
  PrivatePoolInfo,
  ProfilerInfo,
  ProfilerStartOptions,
  ProfilerStats,
  OperationStats,
  CopyStats,
  FallbackStats,
  TimestampHygiene,
  KernelOptions,
  MemoryBudget,
  PlanMemoryOptions,
  PlanProgress,
  PlanSpace,
  PoolStats,
  SnapshotBlock,
  SnapshotSegment,
  Stat,
} from '../index.js'
export {
  ComputeKernel,
  DeviceBlock,
  Executor,
  Gpu,
  GpuBuffer,
  GpuEvent,
  Heap,
  Host,
  HostBlock,
  MemoryPlan,
  Profiler,
  ShapeExecutor,
  Stream,
  Weights,
} from '../index.js'
export type { ExecutorStats, Observation, ObservedEvent, ObservedRecord } from '../index.js'

/** Options of `heap.malloc()`. */
export interface MallocOptions {
  /** `'device'` (default) or `'shared'` (mappable and bindable where the adapter allows). */
  usage?: 'device' | 'shared'
  /** Optional shape metadata kept with the block. */
  shape?: number[]
}

/** Transfer direction of a host block. */
export type HostDirection = 'upload' | 'download'

/** Options of `gpu.download()`. */
export interface DownloadOptions extends AsyncOptions {
  /** Byte offset in the device block (a multiple of 4; default 0). */
  offset?: number
  /** Bytes to read (default: to the end of the block). */
  length?: number
  /** Return this typed array instead of bytes (the length must be whole elements). */
  as?: TypedArrayClass
}

/** A typed-array class, for reads that return one (`{ as: Float32Array }`). */
export type TypedArrayClass =
  | Uint8ArrayConstructor
  | Int8ArrayConstructor
  | Uint16ArrayConstructor
  | Int16ArrayConstructor
  | Uint32ArrayConstructor
  | Int32ArrayConstructor
  | Float32ArrayConstructor
  | Float64ArrayConstructor
  | BigInt64ArrayConstructor
  | BigUint64ArrayConstructor

/** Options of `block.read()`. */
export interface ReadOptions extends AsyncOptions {
  /** Return this typed array instead of bytes (the length must be whole elements). */
  as?: TypedArrayClass
}

/** Options of `gpu.upload()`. */
export interface UploadOptions extends AsyncOptions {
  /** Byte offset in the device block (a multiple of 4; default 0). */
  offset?: number
}

/** One range of `gpu.uploadBatch()`: `data` goes into `block` at byte `offset`. */
export interface UploadBatchItem {
  /** The destination block. */
  block: DeviceBlock
  /** The bytes to write: any typed array, DataView or ArrayBuffer. */
  data: TensorData
  /** Byte offset in the device block (a multiple of 4; default 0). */
  offset?: number
}

/**
 * Options accepted by every asynchronous call. An already-aborted signal rejects before
 * any work starts; aborting later rejects at once, while GPU work already submitted
 * still completes (results that arrive after the abort are released).
 */
export interface AsyncOptions {
  /** Aborting rejects the call with a `WgallocError` whose code is `ABORTED` (name `AbortError`, `cause` = the signal's reason). */
  signal?: AbortSignal
}

/** Stable error codes: branch on `error.code`, never on the message. */
export type WgallocErrorCode =
  | 'INVALID_ARGUMENT'
  | 'ADAPTER_NOT_FOUND'
  | 'DEVICE_REQUEST_FAILED'
  | 'DEVICE_LOST'
  | 'OUT_OF_MEMORY'
  | 'GPU_VALIDATION'
  | 'USE_AFTER_FREE'
  | 'DOUBLE_FREE'
  | 'EXECUTOR_BUSY'
  | 'ABORTED'
  | 'PLAN_INVALID'
  | 'PROFILER_STATE'
  | 'IO_ERROR'
  | 'PARSE_ERROR'
  | 'SIZE_OVERFLOW'
  | 'INFEASIBLE'
  | 'CAPACITY_NOT_MET'
  | 'BINARY_NOT_FOUND'
  | 'INTERNAL'

/** Allocator event kinds delivered by `heap.on()`. */
export type HeapEventKind = 'ALLOCATED' | 'RECYCLED' | 'FREED' | 'RELEASED' | 'ALLOCATION_FAILED'

/** The figures of a failed `malloc()`: `err.details` of its OUT_OF_MEMORY, and what OUT_OF_MEMORY listeners get. */
export interface OutOfMemoryDetails {
  /** Bytes asked for. */
  requested: number
  /** The request rounded up to the heap's alignment. */
  aligned?: number
  /** The pool the request went to. */
  pool?: string
  /** Bytes in live blocks. */
  allocated?: number
  /** Bytes cached in free ranges, ready for reuse. */
  cached?: number
  /** Bytes freed but waiting for their GPU work. */
  pendingFree?: number
  /** Bytes the heap holds from the driver. */
  reserved?: number
  /** The high watermark in bytes (null when disabled). */
  highWatermark?: number | null
  /** The memory budget in bytes. */
  budget?: number
  /** The largest cached free range. */
  largestFreeBlock?: number
  /** Where the heap's snapshot was written (`WGALLOC_OOM_SNAPSHOT=dir`), or null. */
  snapshotPath?: string | null
}

/** What `heap.on('OUT_OF_MEMORY', ...)` listeners get, after the ladder gave up and before `malloc()` throws. */
export interface OutOfMemoryEvent extends OutOfMemoryDetails {
  /** Always `OUT_OF_MEMORY`. */
  kind: 'OUT_OF_MEMORY'
}

/** Planner strategies, in `STRATEGIES` order. */
export type Strategy = 'naive' | 'linearScan' | 'greedyBySize' | 'greedyByBreadth' | 'greedyInputsFirst' | 'portfolio' | 'exact' | 'best'
/** Every planner strategy, fastest first (`best` runs the portfolio, then `exact`). */
export declare const STRATEGIES: readonly Strategy[]

/** One usage record: `size` bytes live from op `first` to op `last` (inclusive). */
export interface UsageRecord {
  /** Unique id of the tensor or buffer. */
  id: string
  /** Bytes. */
  size: number
  /** Index of the first op that uses it. */
  first: number
  /** Index of the last op that uses it (inclusive). */
  last: number
  /**
   * Offset alignment for this record in bytes: any positive integer. The plan's alignment applies too: the
   * offset is a multiple of both (the larger of the two, for powers of two).
   */
  alignment?: number
  /** Fixed offset: kept by every strategy; fixed records overlapping while alive are INVALID_ARGUMENT. */
  offset?: number
  /** Offset kept where its bytes are free over the record's lifetime; otherwise placed as usual. */
  preferredOffset?: number
  /** Id of a record whose range this one reuses in place (lifetimes may touch at one op, not overlap). */
  sharesWith?: string
  /** Alias of `sharesWith`. */
  inPlaceOf?: string
  /** Memory space (planned as its own slab; default `"default"`). */
  space?: string
}

/** Options of `planMemory()`. */
export interface PlanMemoryCallOptions extends Omit<PlanMemoryOptions, 'strategy'>, AsyncOptions {
  /** Planner strategy (default `best`). */
  strategy?: Strategy
  /** Called when the search improves its best height or lower bound (polled every 50 ms). */
  onProgress?: (progress: PlanProgress) => void
}

/**
 * Plans an offset in one slab for every record (or every tensor of a graph, or MiniMalloc
 * CSV text), off the main thread; every plan is checked by an independent validator.
 * Aborting during the search resolves with the best plan found so far; a signal already
 * aborted at the call rejects with `ABORTED`. Bad input rejects with `INVALID_ARGUMENT` or
 * `PARSE_ERROR`.
 *
 * @example
 * ```js
 * const plan = await planMemory([{ id: 'a', size: 32, first: 0, last: 1 }, { id: 'b', size: 28, first: 1, last: 4 }])
 * plan.slabSize      // 60
 * plan.offsetOf('b') // 32
 * ```
 */
export declare function planMemory(input: UsageRecord[] | { records: UsageRecord[] } | object | string, options?: PlanMemoryCallOptions): Promise<MemoryPlan>

/** A tensor of an executable graph. */
export interface GraphTensor {
  /** Unique id (the key of inputs, params and outputs). */
  id: string
  /** Bytes (in a `compileShapes()` graph, may be an expression such as `'batch * 1024'`). */
  size: number | string
  /** Default `intermediate`. Inputs come with every run, params at compile time, outputs are returned. */
  kind?: 'input' | 'param' | 'intermediate' | 'output'
  /** Shares the bytes of this tensor (and extends its life). */
  viewOf?: string
  /** Element type of returned outputs: f32, u32, i32, u16, f16 (as Uint16Array), i8, u8. */
  dtype?: string
}

/** An op: its storage bindings are inputs, then outputs, then workspace, all `var<storage, read_write>`; params bind next as a uniform. */
export interface GraphOp {
  /** Name in profiles, observations and errors (default: the op's index). */
  name?: string
  /** Kernel id; omit for an op that only creates views. */
  kernel?: string
  /** Tensor ids bound first, in order. */
  inputs: string[]
  /** Tensor ids bound after the inputs, in order. */
  outputs: string[]
  /** Workgroup counts (missing dimensions are 1). */
  dispatch?: [number | string] | [number | string, number | string] | [number | string, number | string, number | string]
  /** Bytes of the op's uniform. */
  params?: ArrayBufferView | number[]
  /** Scratch bytes bound after the outputs. */
  workspace?: number | string
}

/** A WGSL compute kernel of a graph. */
export interface GraphKernel {
  /** WGSL source. */
  source: string
  /** The `@compute` function to run (default `main`). */
  entryPoint?: string
}

/** A graph of WGSL kernels. */
export interface Graph {
  /** Kernels by id. */
  kernels: Record<string, GraphKernel>
  /** Every tensor, with its size and kind. */
  tensors: GraphTensor[]
  /** Ops in execution order. */
  ops: GraphOp[]
  /** Dimension names for `gpu.compileShapes()`: sizes and dispatch counts may then be expressions over them. */
  dims?: string[]
}

/** Tensor bytes: any typed array, DataView or ArrayBuffer. */
export type TensorData = ArrayBufferView | ArrayBuffer

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
}

/** Options of `gpu.compileShapes()`: a compile's options plus how shapes map to executors. */
export interface CompileShapesOptions extends Omit<CompileOptions, 'plan' | 'sampleInputs' | 'signal'> {
  /** Per dimension, sizes to round up to (`{ batch: [1, 2, 4, 8, 16] }`); other dimensions compile per exact value. */
  buckets?: Record<string, number[]>
  /** Executors kept; the least recently used is released first (default 8). */
  capacity?: number
}

/** Options of `gpu.runEager()`. */
export interface RunEagerOptions extends AsyncOptions {
  /** Param values by id. */
  params?: Record<string, TensorData>
  /** Record every allocation and free per op (`result.observation`). */
  observe?: boolean
}

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
}

/** Outputs typed by their tensor's dtype (Uint8Array without one), and the observation if asked for. */
export interface ExecResult {
  /** Output tensors by id. */
  outputs: Record<string, Float32Array | Uint32Array | Int32Array | Uint16Array | Int8Array | Uint8Array>
  /** What the run allocated and freed, with `observe: true`. */
  observation?: ExecObservation
  /** Outputs left on the device (`outputs: 'device'`), by id: the caller frees them. */
  blocks?: Record<string, DeviceBlock>
}

/** What the memory observer saw during one run. */
export interface ExecObservation extends Observation {
  /** Copies of the usage records, ready for `planMemory()`. */
  toUsageRecords(): UsageRecord[]
}

/** Options of `profiler.flush()`. */
export interface FlushOptions extends AsyncOptions {
  /** Give up (resolve `false`) after this many ms (default 10 000). */
  timeoutMs?: number
}

/** Options of `profiler.profile()`: a session's options plus `signal`. */
export interface ProfileOptions extends ProfilerStartOptions, AsyncOptions {}

/**
 * A record of `MemoryPlan.toJSON()`: a usage record and where it was placed. Integers past 2^53 - 1 are
 * decimal strings (exact); planning a written plan again keeps every constraint.
 */
export interface PlannedRecord extends Omit<UsageRecord, 'size' | 'first' | 'last'> {
  /** Bytes (a decimal string past 2^53 - 1). */
  size: number | string
  /** Index of the first op that uses it (a decimal string past 2^53 - 1). */
  first: number | string
  /** Index of the last op that uses it, inclusive (a decimal string past 2^53 - 1). */
  last: number | string
  /** Byte offset in the record's memory space. */
  offset: number
  /** The record was fixed at `offset`. */
  fixed?: true
}

/** `MemoryPlan.toJSON()`: the plan as a plain object. */
export interface MemoryPlanJSON {
  /** The strategy asked for. */
  strategy: Strategy
  /** The algorithm that produced the layout. */
  method: string
  /** Bytes of the slab. */
  slabSize: number
  /** Proven lower bound in bytes. */
  lowerBound: number
  /** `slabSize / lowerBound`. */
  ratio: number
  /** `slabSize === lowerBound`. */
  optimal: boolean
  /** What proves it: the aligned lower bound itself, or the exact search (which raised the bound). */
  optimalBy: 'lowerBound' | 'search' | null
  /** Memory spaces, each its own slab (`slabSize` is their sum). */
  spaces: PlanSpace[]
  /** Planning time, ms. */
  timeMs: number
  /** Offset alignment in bytes. */
  alignment: number
  /** Offsets in record order. */
  offsets: number[]
  /** Records with their offsets. */
  records: PlannedRecord[]
  /** For graph input: the constant region, views and workspaces. */
  graph?: unknown
}

/**
 * Every error wgalloc throws (argument type errors included). Aborts are WgallocErrors
 * with code `ABORTED` and name `AbortError`.
 */
export declare class WgallocError extends Error {
  /** Stable code: branch on it, not on the message. */
  readonly code: WgallocErrorCode
  /** Structured figures, where the error has them (OUT_OF_MEMORY from `malloc()`). */
  details?: OutOfMemoryDetails
  /** Creates an error with `code` (used by the facade; `options.cause` as for `Error`). */
  constructor(code: WgallocErrorCode, message: string, options?: { cause?: unknown })
}

/** All codes `WgallocError.code` can take. */
export declare const ERROR_CODES: readonly WgallocErrorCode[]

/**
 * Names of the `node:diagnostics_channel` channels wgalloc publishes on. Messages are built
 * only while a channel has subscribers; the library itself never prints.
 *
 * @example
 * ```js
 * const dc = require('node:diagnostics_channel')
 * dc.subscribe('wgalloc:heap', (m) => console.log(m.kind, m.size, m.pool))
 * dc.subscribe('wgalloc:device', (m) => { if (m.kind === 'error') console.error(m.call, m.code) })
 * ```
 */
export declare const CHANNELS: {
  /** `wgalloc:heap`: {@link HeapChannelMessage}. */
  readonly heap: 'wgalloc:heap'
  /** `wgalloc:host`: {@link HostChannelMessage}. */
  readonly host: 'wgalloc:host'
  /** `wgalloc:profiler`: {@link ProfilerChannelMessage}. */
  readonly profiler: 'wgalloc:profiler'
  /** `wgalloc:device`: {@link DeviceChannelMessage}. */
  readonly device: 'wgalloc:device'
}

/** A message on `wgalloc:heap`: an allocator event (as `heap.on()` gets it) and its heap. */
export interface HeapChannelMessage extends HeapEvent {
  /** The heap the event happened in. */
  heap: Heap
}

/** `wgalloc:host`: a staging block was allocated (`alloc`) or freed (`free`: `block.free()`, `host.free()` or disposal; not a block dropped to the GC). */
export interface HostBlockMessage {
  /** What happened. */
  kind: 'alloc' | 'free'
  /** The block's id. */
  id: number
  /** Its direction. */
  direction: HostDirection
  /** Bytes asked for. */
  requestedSize: number
  /** Bytes of its size class. */
  size: number
  /** Private pool id, 0 for the default pool. */
  poolId: number
  /** The host cache (on `alloc`). */
  host?: Host
}

/** `wgalloc:host`: an `upload()` / `uploadBatch()` (`upload`) or `download()` completed. */
export interface HostTransferMessage {
  /** Which transfer. */
  kind: 'upload' | 'download'
  /** The device. */
  gpu: Gpu
  /** Bytes moved. */
  bytes: number
  /** Ranges moved (`uploadBatch` items; 1 otherwise). */
  items: number
  /** Wall time from the call to completion, ms. */
  ms: number
}

/** A message on `wgalloc:host`. */
export type HostChannelMessage = HostBlockMessage | HostTransferMessage

/** `wgalloc:profiler`: a session started or stopped, a capture started, a trace was written, a CPU fallback was counted. */
export interface ProfilerChannelMessage {
  /** What happened. */
  kind: 'start' | 'stop' | 'capture' | 'trace' | 'fallback'
  /** The profiler. */
  profiler: Profiler
  /** `start`: the trace mode in effect, or null. */
  mode?: string | null
  /** `start`: counts and CPU times only. */
  statsOnly?: boolean
  /** `capture`: the capture name; `fallback`: the op name. */
  name?: string
  /** `trace`: the file written. */
  path?: string
  /** `fallback`: bytes copied between host and device. */
  bytes?: number
}

/** `wgalloc:device`: a device was opened by `Gpu.request()` or `Gpu.attach()`. */
export interface DeviceOpenMessage {
  /** What happened. */
  kind: 'open'
  /** The device. */
  gpu: Gpu
  /** `request` or `attach` (a worker thread sharing a device). */
  how: 'request' | 'attach'
  /** `gpu.info.adapterName`. */
  adapter: string
  /** `gpu.info.backend`. */
  backend: string
  /** `gpu.info.deviceType`. */
  deviceType: string
  /** `gpu.memoryBudget.bytes`. */
  memoryBudget: number
}

/** `wgalloc:device`: `gpu.destroy()` (or disposal) destroyed a device. */
export interface DeviceDestroyMessage {
  /** What happened. */
  kind: 'destroy'
  /** The device. */
  gpu: Gpu
}

/** `wgalloc:device`: a device was found lost (reported with the first `DEVICE_LOST` error a call throws). */
export interface DeviceLostMessage {
  /** What happened. */
  kind: 'lost'
  /** The device. */
  gpu: Gpu
  /** The error's message. */
  message: string
}

/** `wgalloc:device`: a public call is throwing (or rejecting with) a typed error. */
export interface DeviceErrorMessage {
  /** What happened. */
  kind: 'error'
  /** The call, e.g. `Heap.malloc`, `Gpu.compile`, `planMemory`. */
  call: string
  /** The error's code. */
  code: WgallocErrorCode
  /** The error's message. */
  message: string
  /** The error itself. */
  error: WgallocError
}

/** `wgalloc:device`: something the library would otherwise have printed (e.g. the profiler disabled by a bad `WGALLOC_PROFILE`). */
export interface DeviceWarningMessage {
  /** What happened. */
  kind: 'warning'
  /** The warning. */
  message: string
  /** The device concerned, if any. */
  gpu?: Gpu
  /** The code of the error behind the warning, if any. */
  code?: WgallocErrorCode
}

/** A message on `wgalloc:device`. */
export type DeviceChannelMessage = DeviceOpenMessage | DeviceDestroyMessage | DeviceLostMessage | DeviceErrorMessage | DeviceWarningMessage

declare module '../index.js' {
  interface GpuRequestOptions {
    /** Aborting rejects `Gpu.request()` with code `ABORTED`; a device that opens afterwards is destroyed. */
    signal?: AbortSignal
  }
  interface EnumerateOptions {
    /** Aborting rejects `Gpu.enumerate()` with code `ABORTED`. */
    signal?: AbortSignal
  }
  interface HostBlock {
    /** Writes `data` (any typed array, DataView or ArrayBuffer) at `offset` into the mapped block. */
    write(data: TensorData, offset?: number): void
    /**
     * Resolves once mapped, after the work recorded on the block was submitted and ran: a
     * download block to read what was copied in, an upload block to write it again.
     * `USE_AFTER_FREE` once freed, `DEVICE_LOST`, `ABORTED`.
     */
    map(options?: AsyncOptions): Promise<void>
    /** Frees the block unless already freed. */
    [Symbol.dispose](): void
  }
  interface Gpu {
    /**
     * Copies `data` into `block` through the host cache; resolves once the GPU has it.
     * `INVALID_ARGUMENT` for a misaligned or out-of-range offset.
     *
     * @example
     * ```js
     * const block = gpu.heap.malloc(data.byteLength)
     * await gpu.upload(block, data, { signal: AbortSignal.timeout(1000) })
     * ```
     */
    upload(block: DeviceBlock, data: TensorData, options?: UploadOptions): Promise<void>
    /**
     * Uploads every item through the host cache: small items are packed into shared staging
     * blocks, large ones split, each block at most `host.config.pipelineBytes` (default 4 MiB)
     * and submitted as soon as it is written; resolves once the GPU has them all.
     */
    uploadBatch(items: UploadBatchItem[], options?: AsyncOptions): Promise<void>
    /** Reads a device block through the host cache (`length` bytes at `offset`, default: all of it). */
    download(block: DeviceBlock, options?: DownloadOptions & { as?: undefined }): Promise<Buffer>
    /** Downloads as the typed array `options.as` names. */
    download<T extends TypedArrayClass>(block: DeviceBlock, options: DownloadOptions & { as: T }): Promise<InstanceType<T>>
    /** Reads `size` bytes at `offset` (any alignment) once all earlier work completed. */
    readBuffer(buffer: GpuBuffer, offset: number, size: number, options?: AsyncOptions): Promise<Buffer>
    /** Destroys the device (same as `destroy()`). */
    [Symbol.dispose](): void
  }
  interface Profiler {
    /** Resolves `true` once every submitted timestamp was read back, `false` after `timeoutMs`. */
    flush(options?: FlushOptions | number): Promise<boolean>
    /** Collects outstanding GPU timestamps, then writes Trace Event JSON (chrome://tracing, ui.perfetto.dev). `IO_ERROR` if unwritable. */
    exportTrace(path: string, options?: AsyncOptions): Promise<void>
    /** Ends the capture started by `startCapture(name)` and resolves with the trace file's path. `PROFILER_STATE` without a capture. */
    stopCapture(options?: AsyncOptions): Promise<string>
    /**
     * Runs `fn` in a profiling session (start, await, flush, stop) and resolves with its result.
     * Aborting ends the session and rejects; `fn` itself is not cancelled.
     *
     * @example
     * ```js
     * await gpu.profiler.profile(() => exe.run({ x }), { mode: 'interval,event' })
     * console.table(gpu.profiler.stats().operations)
     * await gpu.profiler.exportTrace('trace.json')
     * ```
     */
    profile<T>(fn: () => T | Promise<T>, options?: ProfileOptions): Promise<T>
  }
  interface GpuBuffer {
    /** Releases the GPU memory (same as `destroy()`). */
    [Symbol.dispose](): void
  }
  interface Heap {
    /**
     * Allocates a block of at least `size` bytes from the pool for `options.usage` and the size.
     * Fails with `INVALID_ARGUMENT` for a bad size or usage and `OUT_OF_MEMORY` when the high
     * watermark or the driver refuses, after releasing cached segments and retrying (the message
     * names requested, allocated, cached, reserved and budget bytes, and the largest free block).
     * @example
     * ```js
     * const block = gpu.heap.malloc(1 << 20, { usage: 'device', shape: [256, 1024] })
     * block.write(new Uint8Array(1 << 20))
     * const head = await block.read(0, 16)
     * block.free() // or `using block = ...`
     * ```
     */
    malloc(size: number, options?: MallocOptions): DeviceBlock
    /** A block from the scalar pool already holding `value` (1 byte to 64 KiB; uniform-bindable). */
    allocScalar(value: Uint8Array): DeviceBlock
    /** Frees `block` (same as `block.free()`), checking that it belongs to this heap. */
    free(block: DeviceBlock): void
    /**
     * Listens for allocator events; returns a function that removes the listener. Listeners
     * run synchronously after the call that caused the event; an `ALLOCATION_FAILED`
     * listener may free blocks, and `malloc()` then retries once. `INVALID_ARGUMENT` for an
     * unknown kind.
     */
    on(kind: HeapEventKind, listener: (event: HeapEvent) => void): () => void
    /** Listens for failed allocations: the request, the heap's figures and the snapshot path. */
    on(kind: 'OUT_OF_MEMORY', listener: (event: OutOfMemoryEvent) => void): () => void
    /** Removes a listener added with `on()`. */
    off(kind: HeapEventKind, listener: (event: HeapEvent) => void): void
    /** Removes an OUT_OF_MEMORY listener. */
    off(kind: 'OUT_OF_MEMORY', listener: (event: OutOfMemoryEvent) => void): void
    /** Routes `WGALLOC_DEBUG_ALLOCATOR` lines to `logger` instead of stderr (null restores stderr). */
    setLogger(logger: ((line: string) => void) | null): void
  }
  interface DeviceBlock {
    /** True once `free()` ran (reuse still waits for the block's GPU work). */
    readonly freed: boolean
    /**
     * Returns the block to the heap; a second call fails with `DOUBLE_FREE`. A block the
     * garbage collector finds unreachable without `free()` goes back to its pool as well.
     */
    free(): void
    /**
     * Reads `length` bytes (default: to the end) at `offset` (default 0, any alignment) once
     * earlier work completed. `USE_AFTER_FREE` once freed, `INVALID_ARGUMENT` out of range.
     */
    read(offset?: number, length?: number, options?: AsyncOptions): Promise<Buffer>
    /** Reads as `read()` and returns the typed array `options.as` names. */
    read<T extends TypedArrayClass>(offset: number | undefined, length: number | undefined, options: ReadOptions & { as: T }): Promise<InstanceType<T>>
    /** Writes `data` (any typed array, DataView or ArrayBuffer) at `offset` (default 0, a multiple of 4). */
    write(data: TensorData, offset?: number): void
    /** Frees the block unless already freed. */
    [Symbol.dispose](): void
  }
  interface MemoryPlan {
    /** The plan as a plain object (offsets, records, and for graphs the constant region and aliases). */
    toJSON(): MemoryPlanJSON
  }
  interface Gpu {
    /**
     * Plans `graph` into slabs from the heap and builds every pipeline and bind group once.
     * `GPU_VALIDATION` names a kernel that fails WGSL validation; `INVALID_ARGUMENT` a bad
     * graph or a tensor above the max storage binding size; `OUT_OF_MEMORY`; `ABORTED`.
     *
     * @example
     * ```js
     * const exe = await gpu.compile(graph, { strategy: 'best', params: { w: weights } })
     * const { outputs } = await exe.run({ x: new Float32Array(64) })
     * exe.release()
     * ```
     */
    compile(graph: Graph | string, options?: CompileOptions): Promise<Executor>
    /**
     * Param bytes uploaded once into one heap block, for executors here and on worker threads to bind
     * in place (`compile(graph, { weights })`). Freed when released and no executor uses them.
     */
    createWeights(params: Record<string, TensorData>): Weights
    /**
     * A graph with symbolic dimensions (`dims: ['batch']`; sizes, dispatch counts and workspaces as
     * expressions such as `'batch * 1024'`), compiled once per shape and cached (LRU).
     */
    compileShapes(graph: Graph | string, options?: CompileShapesOptions): ShapeExecutor
    /** Runs `graph` eagerly: outputs come from the heap at each op and return after their last use. */
    runEager(graph: Graph | string, inputs: Record<string, TensorData>, options?: RunEagerOptions): Promise<ExecResult>
  }
  interface Executor {
    /**
     * Uploads the inputs, dispatches every op in order, returns the outputs. `EXECUTOR_BUSY`
     * while another run of this executor is in flight, `USE_AFTER_FREE` after `release()`,
     * `INVALID_ARGUMENT` for a missing or mis-sized input, `ABORTED` (the GPU work completes).
     */
    run(inputs: Record<string, TensorData | DeviceBlock>, options?: RunOptions): Promise<ExecResult>
    /** Releases the slabs (same as `release()`). */
    [Symbol.dispose](): void
    /** Releases the slabs (same as `release()`; nothing to wait for: freed slabs are reused only after their GPU work). */
    [Symbol.asyncDispose](): Promise<void>
  }
  interface Weights {
    /** Lets go of this handle (same as `release()`). */
    [Symbol.dispose](): void
  }
  interface ShapeExecutor {
    /**
     * Runs at `dims` (`{ batch: 3 }`) with inputs sized for them (host bytes or blocks of the bucket's
     * size); outputs come back sized for `dims`. Compiles the shape's executor on first use.
     */
    run(dims: Record<string, number>, inputs: Record<string, TensorData | DeviceBlock>, options?: RunOptions): Promise<ExecResult>
    /** Releases every cached executor (same as `clear()`). */
    [Symbol.dispose](): void
  }
  interface GpuEvent {
    /** Resolves once the GPU finished this submission. `DEVICE_LOST` if the device goes first. */
    wait(options?: AsyncOptions): Promise<void>
  }
  interface Stream {
    /** Records a copy from an upload block into a device block (unmaps the upload block). */
    copy(src: HostBlock, dst: DeviceBlock, options?: CopyOptions): void
    /** Records a copy from a device block into a download block (`await dst.map()` after submitting). */
    copy(src: DeviceBlock, dst: HostBlock, options?: CopyOptions): void
    /** Records a copy between heap blocks. */
    copy(src: DeviceBlock, dst: DeviceBlock, options?: CopyOptions): void
    /**
     * Records one dispatch of `kernel` (from `gpu.createKernel`) over `blocks` (binding i =
     * blocks[i], all `var<storage, read_write>`), with `workgroups` (a count or [x, y?, z?]) and,
     * if the kernel takes one, `uniform` bytes (any typed array). Each block is recorded as used
     * by this stream, so freeing it waits for the dispatch. `INVALID_ARGUMENT` on a wrong block
     * count, a missing or unexpected uniform, or workgroups above the device limit;
     * `USE_AFTER_FREE` for a freed block.
     *
     * ```ts
     * const axpy = gpu.createKernel({ source, bindings: 2, uniform: true })
     * stream.dispatch(axpy, [x, y], Math.ceil(n / 64), new Float32Array([alpha, 0, 0, 0]))
     * await stream.synchronize()
     * ```
     */
    dispatch(kernel: ComputeKernel, blocks: DeviceBlock[], workgroups: number | number[], uniform?: ArrayBufferView): void
    /** Submits pending work and resolves once all of this stream's work completed. */
    synchronize(options?: AsyncOptions): Promise<void>
    /** Submits recorded work that was never submitted (without waiting). */
    [Symbol.dispose](): void
    /** Waits for the stream's work (same as `synchronize()`). */
    [Symbol.asyncDispose](): Promise<void>
  }
}
