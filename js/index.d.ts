// Public types of wgalloc: the generated native declarations, plus what the JS
// facade adds (typed errors, `{ signal }` options, disposal).

import type { Observation, Executor, CopyOptions, DeviceBlock, HeapEvent, HostBlock, MemoryPlan, PlanMemoryOptions, PlanProgress, ProfilerStartOptions } from '../index.js'

export type {
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
  MallocOptions,
  MemoryBudget,
  PlanMemoryOptions,
  PlanProgress,
  PoolStats,
  SnapshotBlock,
  SnapshotSegment,
  Stat,
} from '../index.js'
export { ComputeKernel, DeviceBlock, Executor, Gpu, GpuBuffer, GpuEvent, Heap, Host, HostBlock, MemoryPlan, Profiler, Stream } from '../index.js'
export type { ExecutorStats, Observation, ObservedEvent, ObservedRecord } from '../index.js'

/** Transfer direction of a host block. */
export type HostDirection = 'upload' | 'download'

/** Options of `gpu.download()`. */
export interface DownloadOptions extends AsyncOptions {
  /** Byte offset in the device block (a multiple of 4; default 0). */
  offset?: number
  /** Bytes to read (default: to the end of the block). */
  length?: number
}

/** Options of `gpu.upload()`. */
export interface UploadOptions extends AsyncOptions {
  /** Byte offset in the device block (a multiple of 4; default 0). */
  offset?: number
}

/** One range of `gpu.uploadBatch()`: `data` goes into `block` at byte `offset`. */
export interface UploadBatchItem {
  block: DeviceBlock
  data: Uint8Array
  /** Byte offset in the device block (a multiple of 4; default 0). */
  offset?: number
}

/** Options accepted by every asynchronous call. */
export interface AsyncOptions {
  /** Aborting rejects the call with a `WgallocError` whose code is `ABORTED`. */
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
  | 'BINARY_NOT_FOUND'
  | 'INTERNAL'

/** Allocator event kinds delivered by `heap.on()`. */
export type HeapEventKind = 'ALLOCATED' | 'RECYCLED' | 'FREED' | 'RELEASED' | 'ALLOCATION_FAILED'

/** Planner strategies, in `STRATEGIES` order. */
export type Strategy = 'naive' | 'linearScan' | 'greedyBySize' | 'greedyByBreadth' | 'portfolio' | 'exact' | 'best'
export declare const STRATEGIES: readonly Strategy[]

/** One usage record: `size` bytes live from op `first` to op `last` (inclusive). */
export interface UsageRecord {
  id: string
  size: number
  first: number
  last: number
  alignment?: number
}

export interface PlanMemoryCallOptions extends Omit<PlanMemoryOptions, 'strategy'>, AsyncOptions {
  strategy?: Strategy
  /** Called when the search improves its best height or lower bound. */
  onProgress?: (progress: PlanProgress) => void
}

/**
 * Plans an offset in one slab for every record (or every tensor of a graph),
 * off the main thread. Aborting resolves with the best plan found so far.
 *
 * @example
 * const plan = await planMemory([{ id: 'a', size: 32, first: 0, last: 1 }, { id: 'b', size: 28, first: 1, last: 4 }])
 * plan.slabSize // 60
 */
export declare function planMemory(
  input: UsageRecord[] | { records: UsageRecord[] } | object | string,
  options?: PlanMemoryCallOptions,
): Promise<MemoryPlan>

/** A tensor of an executable graph. */
export interface GraphTensor {
  id: string
  /** Bytes. */
  size: number
  /** Default `intermediate`. Inputs come with every run, params at compile time, outputs are returned. */
  kind?: 'input' | 'param' | 'intermediate' | 'output'
  /** Shares the bytes of this tensor (and extends its life). */
  viewOf?: string
  /** Element type of returned outputs: f32, u32, i32, u16, f16 (as Uint16Array), i8, u8. */
  dtype?: string
}

/** An op: its storage bindings are inputs, then outputs, then workspace, all `var<storage, read_write>`; params bind next as a uniform. */
export interface GraphOp {
  name?: string
  /** Kernel id; omit for an op that only creates views. */
  kernel?: string
  inputs: string[]
  outputs: string[]
  dispatch?: [number] | [number, number] | [number, number, number]
  /** Bytes of the op's uniform. */
  params?: ArrayBufferView | number[]
  /** Scratch bytes bound after the outputs. */
  workspace?: number
}

/** A graph of WGSL kernels. */
export interface Graph {
  kernels: Record<string, { source: string; entryPoint?: string }>
  tensors: GraphTensor[]
  ops: GraphOp[]
}

type TensorData = ArrayBufferView | ArrayBuffer

export interface CompileOptions extends AsyncOptions {
  strategy?: Strategy
  timeLimitMs?: number
  /** Split the slab so none exceeds this many bytes. */
  maxSlabSize?: number
  /** Param values by id. */
  params?: Record<string, TensorData>
  /** `static` plans from the graph; `observe` runs eagerly once and plans from what it saw. */
  plan?: 'static' | 'observe'
  /** Inputs for the observed run (zeros by default). */
  sampleInputs?: Record<string, TensorData>
}

/** Outputs typed by their tensor's dtype (Uint8Array without one), and the observation if asked for. */
export interface ExecResult {
  outputs: Record<string, Float32Array | Uint32Array | Int32Array | Uint16Array | Int8Array | Uint8Array>
  observation?: Observation & { toUsageRecords(): UsageRecord[] }
}

/** Every error wgalloc throws (argument type errors included). */
export declare class WgallocError extends Error {
  readonly code: WgallocErrorCode
  constructor(code: WgallocErrorCode, message: string, options?: { cause?: unknown })
}

/** All codes `WgallocError.code` can take. */
export declare const ERROR_CODES: readonly WgallocErrorCode[]

declare module '../index.js' {
  interface GpuRequestOptions {
    /** Aborting rejects `Gpu.request()` with code `ABORTED`. */
    signal?: AbortSignal
  }
  interface HostBlock {
    /** Resolves once mapped (after the work recorded on the block was submitted and ran). */
    map(options?: AsyncOptions): Promise<void>
    /** Frees the block unless already freed. */
    [Symbol.dispose](): void
  }
  interface Gpu {
    /** Copies `data` into `block` through the host cache; resolves once the GPU has it. */
    upload(block: DeviceBlock, data: Uint8Array, options?: UploadOptions): Promise<void>
    /**
     * Uploads every item with one submission through the host cache (the items are packed
     * into few staging blocks); resolves once the GPU has them all.
     */
    uploadBatch(items: UploadBatchItem[], options?: AsyncOptions): Promise<void>
    /** Reads a device block through the host cache. */
    download(block: DeviceBlock, options?: DownloadOptions): Promise<Buffer>
    /** Reads `size` bytes at `offset` once all earlier work completed. */
    readBuffer(buffer: GpuBuffer, offset: number, size: number, options?: AsyncOptions): Promise<Buffer>
    /** Destroys the device (same as `destroy()`). */
    [Symbol.dispose](): void
  }
  interface Profiler {
    /** Collects outstanding GPU timestamps, then writes Trace Event JSON (chrome://tracing, ui.perfetto.dev). `IO_ERROR` if unwritable. */
    exportTrace(path: string): Promise<void>
    /** Ends the capture started by `startCapture(name)` and resolves with the trace file's path. */
    stopCapture(): Promise<string>
    /** Runs `fn` in a profiling session (start, await, flush, stop) and resolves with its result. */
    profile<T>(fn: () => T | Promise<T>, options?: ProfilerStartOptions): Promise<T>
  }
  interface GpuBuffer {
    /** Releases the GPU memory (same as `destroy()`). */
    [Symbol.dispose](): void
  }
  interface Heap {
    /** Listens for allocator events; returns a function that removes the listener. */
    on(kind: HeapEventKind, listener: (event: HeapEvent) => void): () => void
    off(kind: HeapEventKind, listener: (event: HeapEvent) => void): void
    /** Routes `WGALLOC_DEBUG_ALLOCATOR` lines to `logger` instead of stderr (null restores stderr). */
    setLogger(logger: ((line: string) => void) | null): void
  }
  interface DeviceBlock {
    /** Reads `length` bytes at `offset` once earlier work completed. */
    read(offset?: number, length?: number, options?: AsyncOptions): Promise<Buffer>
    /** Frees the block unless already freed. */
    [Symbol.dispose](): void
  }
  interface MemoryPlan {
    /** The plan as a plain object (offsets, records, and for graphs the constant region and aliases). */
    toJSON(): {
      strategy: Strategy
      method: string
      slabSize: number
      lowerBound: number
      ratio: number
      optimal: boolean
      timeMs: number
      alignment: number
      offsets: number[]
      records: Array<UsageRecord & { offset: number }>
      graph?: unknown
    }
  }
  interface Gpu {
    /** Plans `graph` into slabs from the heap and builds every pipeline and bind group once. */
    compile(graph: Graph | string, options?: CompileOptions): Promise<Executor>
    /** Runs `graph` eagerly: outputs come from the heap at each op and return after their last use. */
    runEager(graph: Graph | string, inputs: Record<string, TensorData>, options?: { params?: Record<string, TensorData>; observe?: boolean }): Promise<ExecResult>
  }
  interface Executor {
    /** Uploads the inputs, dispatches every op in order, returns the outputs. */
    run(inputs: Record<string, TensorData>, options?: { observe?: boolean; checkPlan?: boolean } & AsyncOptions): Promise<ExecResult>
    /** Releases the slabs (same as `release()`). */
    [Symbol.dispose](): void
  }
  interface GpuEvent {
    /** Resolves once the GPU finished this submission. */
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
    /** Waits for the stream's work (same as `synchronize()`). */
    [Symbol.asyncDispose](): Promise<void>
  }
}
