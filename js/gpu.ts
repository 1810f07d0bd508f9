// `Gpu`: an open device (adapter, device, queue, poller thread) and the entry to everything
// else: its heap, host cache, profiler, streams, kernels, transfers and executors.
import { inspect } from 'node:util'
import { api } from './internal/api.js'
import type { AdapterDescription, GpuInfo, KernelOptions, MemoryBudget } from './binding.js'
import { type GpuBuffer, bufferHandle, wrapBuffer } from './buffer.js'
import { asTyped, bytesOf, checkAs, type TensorData, type TypedArrayClass } from './internal/bytes.js'
import type { DeviceBlock } from './device-block.js'
import { blockHandle } from './device-block.js'
import { channels, deviceDestroyed, deviceOpened, warn } from './diagnostics.js'
import { type WgallocError, messageOf, u32, optionKeys, optionsObject, invalidArgument, noConstructor, shown } from './errors.js'
import { type GpuEvent, wrapEvent } from './event.js'
import {
  type CompileOptions,
  type CompileShapesOptions,
  type CreateWeightsOptions,
  type ExecDevice,
  type ExecResult,
  type Executor,
  type RunEagerOptions,
  type ShapeExecutor,
  type Weights,
  compile,
  compileShapes,
  runEager,
  shapeExecutorsOf,
  weightsOf,
} from './exec.js'
import type { Graph, GraphInputs } from './graph.js'
import { type Heap, type HeapProfile, outOfMemoryOf, tableOfHeap, wrapHeap } from './heap.js'
import { type Host, wrapHost } from './host.js'
import { type ComputeKernel, wrapKernel } from './kernel.js'
import { type KvCache, type KvCacheOptions, createKvCache, kvCachesOfHeap } from './kv.js'
import { type Binding, native } from './internal/native.js'
import { type Profiler, trackForExitReport, wrapProfiler } from './profiler.js'
import { ASYNC_OPTIONS, type AsyncOptions, callWithSignal, checkSignal } from './internal/signal.js'
import { type Stream, wrapStream } from './stream.js'

/** wgpu backends wgalloc can open (`primary`: every first-class backend of the platform). */
export type Backend = 'vulkan' | 'metal' | 'dx12' | 'primary'

/** Options of `Gpu.request()`. */
export interface GpuRequestOptions extends AsyncOptions {
  /** Backends to consider. `WGPU_BACKEND` overrides. */
  backends?: Backend[]
  /** Which adapter to prefer when several match. */
  powerPreference?: 'low-power' | 'high-performance' | 'none'
  /** Case-insensitive substring of the adapter name. `WGPU_ADAPTER_NAME` overrides. */
  adapterName?: string
  /** Accept only a software adapter (e.g. lavapipe). */
  forceFallbackAdapter?: boolean
  /** Features the device must have, by wgpu name (e.g. `TIMESTAMP_QUERY`). */
  requiredFeatures?: string[]
  /** Features enabled when the adapter has them. */
  optionalFeatures?: string[]
  /** Memory budget in bytes (integer, at most 2^53-1). Derived from the driver when absent. */
  memoryBudget?: number
  /** Position in `Gpu.enumerate()`'s list. `WGALLOC_ADAPTER` (an index or an id) overrides. */
  adapterIndex?: number
  /** An `id` from `Gpu.enumerate()`. `WGALLOC_ADAPTER` overrides. */
  adapterId?: string
  /** Heap settings applied once the device is open. */
  heap?: HeapRequestOptions
}

/** The `heap` option of `Gpu.request()`. */
export interface HeapRequestOptions {
  /**
   * A profile from an earlier run's `heap.profile()` (object or JSON text): its segments are
   * reserved before `request()` returns (see `heap.warmStart()`); if they cannot be, the device
   * is closed again and the error is thrown.
   */
  profile?: HeapProfile | string
}

const REQUEST_OPTIONS = optionKeys<GpuRequestOptions>({
  backends: true,
  powerPreference: true,
  adapterName: true,
  forceFallbackAdapter: true,
  requiredFeatures: true,
  optionalFeatures: true,
  memoryBudget: true,
  adapterIndex: true,
  adapterId: true,
  heap: true,
  signal: true,
})

/** Options of `Gpu.enumerate()`. */
export interface EnumerateOptions extends AsyncOptions {
  /** Backends to list (as in `request`); default: every backend of the platform. */
  backends?: Backend[]
}

/** Options of `gpu.upload()`. */
export interface UploadOptions extends AsyncOptions {
  /** Byte offset in the device block (a multiple of 4; default 0). */
  offset?: number
}

/** Options of `gpu.download()`. */
export interface DownloadOptions extends AsyncOptions {
  /** Byte offset in the device block (a multiple of 4; default 0). */
  offset?: number
  /** Bytes to read (default: to the end of the block). */
  length?: number
  /** Return this typed array instead of bytes (the length must be whole elements). */
  as?: TypedArrayClass
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

const kCreate = Symbol('Gpu.create')
let create: (handle: Binding.Gpu) => Gpu

/** Publishes a completed transfer on `wgalloc:host`: `{ kind, gpu, bytes, items, ms }`. */
function transferred<T>(promise: Promise<T>, kind: 'upload' | 'download', gpu: Gpu, bytes: number | undefined, items: number, started: bigint): Promise<T> {
  if (!channels.host.hasSubscribers) return promise
  return promise.then((v) => {
    channels.host.publish({
      kind,
      gpu,
      bytes: bytes ?? (v as { length?: number } | undefined)?.length ?? 0,
      items,
      ms: Number(process.hrtime.bigint() - started) / 1e6,
    })
    return v
  })
}

/**
 * An open GPU device (adapter, device, queue, poller thread).
 *
 * @example
 * ```js
 * const gpu = await Gpu.request({ powerPreference: 'high-performance', signal: AbortSignal.timeout(5000) })
 * const block = gpu.heap.malloc(1024)
 * await gpu.upload(block, new Float32Array(256).fill(1))
 * const back = await gpu.download(block, { as: Float32Array })
 * block.free()
 * gpu.destroy() // or `using gpu = ...`
 * ```
 */
export class Gpu {
  readonly #native: Binding.Gpu
  #heap: Heap | undefined
  #host: Host | undefined
  #profiler: Profiler | undefined
  readonly #exec: ExecDevice

  private constructor(key: symbol, handle: Binding.Gpu) {
    if (key !== kCreate) throw noConstructor('Gpu', 'await Gpu.request()')
    this.#native = handle
    this.#exec = { native: handle, table: () => tableOfHeap(this.heap), outOfMemory: (err) => outOfMemoryOf(this.heap, err) }
  }
  static {
    create = (handle) => new Gpu(kCreate, handle)
  }

  /**
   * Opens an adapter and a device.
   * Fails with `ADAPTER_NOT_FOUND` when no adapter matches the options, `DEVICE_REQUEST_FAILED`
   * when the driver refuses the device (e.g. a missing required feature), `INVALID_ARGUMENT`
   * for unknown backends or features, `ABORTED` when `options.signal` fires first (a device
   * that opens afterwards is destroyed).
   */
  @api static async request(options?: GpuRequestOptions): Promise<Gpu> {
    const { signal, heap, ...rest } = optionsObject(options, 'Gpu.request', REQUEST_OPTIONS)
    const { profile } = optionsObject(heap, 'Gpu.request: heap', optionKeys<HeapRequestOptions>({ profile: true }))
    const handle = await callWithSignal(
      signal,
      () => native.Gpu.request(rest),
      (late) => late.destroy(),
    )
    const gpu = create(handle)
    if (profile !== undefined) {
      try {
        gpu.heap.warmStart(profile)
      } catch (err) {
        gpu.destroy()
        throw err
      }
    }
    deviceOpened(gpu, 'request')
    if (process.env.WGALLOC_PROFILE) {
      // WGALLOC_PROFILE asked for stderr output, so this warning is printed as well as published.
      try {
        trackForExitReport(gpu.profiler)
      } catch (err) {
        warn(`wgalloc profiler disabled: ${messageOf(err)}`, { gpu, code: (err as WgallocError).code })
        process.emitWarning(`wgalloc profiler disabled: ${messageOf(err)}`)
      }
    }
    return gpu
  }
  /**
   * Every adapter wgpu can open (`backends` as in `request`), in the order `adapterIndex`
   * counts, with the memory budget a device on it would get.
   */
  @api static async enumerate(options?: EnumerateOptions): Promise<AdapterDescription[]> {
    const { signal, ...rest } = optionsObject(options, 'Gpu.enumerate', optionKeys<EnumerateOptions>({ backends: true, signal: true }))
    return callWithSignal(signal, () => native.Gpu.enumerate(rest))
  }
  /**
   * The device behind a handle from `shareHandle()` (for worker threads). It is the same device:
   * `destroy()` here destroys it for every thread, so a worker lets go of it instead.
   */
  @api static attach(handle: number): Gpu {
    const gpu = create(native.Gpu.attach(handle))
    deviceOpened(gpu, 'attach')
    try {
      trackForExitReport(gpu.profiler)
    } catch {}
    return gpu
  }

  /** The adapter, its backend and the limits wgalloc depends on. */
  @api get info(): GpuInfo {
    return this.#native.info
  }
  /** The memory budget in bytes and where it came from (`memoryBudget` option, driver, or default). */
  @api get memoryBudget(): MemoryBudget {
    return this.#native.memoryBudget
  }
  /** True once the device was lost or destroyed. */
  @api get lost(): boolean {
    return this.#native.lost
  }
  /** Driver errors that no error scope caught (they are counted, never thrown). */
  @api get uncapturedErrorCount(): number {
    return this.#native.uncapturedErrorCount
  }
  /** The device's caching allocator. */
  @api get heap(): Heap {
    if (this.#heap === undefined) this.#heap = wrapHeap(this.#native.heap, this.#native.info.adapterName)
    return this.#heap
  }
  /** The device's host staging cache. */
  @api get host(): Host {
    if (this.#host === undefined) this.#host = wrapHost(this.#native.host)
    return this.#host
  }
  /** The device's profiler. `INVALID_ARGUMENT` if `WGALLOC_PROFILE` holds an unknown flag. */
  @api get profiler(): Profiler {
    if (this.#profiler === undefined) this.#profiler = wrapProfiler(this.#native.profiler)
    return this.#profiler
  }
  /** A new ordered lane of GPU work. */
  @api createStream(): Stream {
    return wrapStream(this.#native.createStream())
  }
  /**
   * A zero-filled device-local buffer of `size` bytes (padded to a multiple of 4), outside the heap.
   * `INVALID_ARGUMENT` for a size that is not a non-negative integer or exceeds `info.maxBufferSize`,
   * `OUT_OF_MEMORY` when the driver refuses it.
   */
  @api createBuffer(size: number): GpuBuffer {
    return wrapBuffer(this.#native.createBuffer(size))
  }
  /**
   * Writes `data` at `offset` (a multiple of 4); ordered before all later submissions.
   * A length that is not a multiple of 4 is accepted only where the write ends at the buffer's end;
   * other misaligned or out-of-range writes fail with `INVALID_ARGUMENT`.
   */
  @api writeBuffer(buffer: GpuBuffer, offset: number, data: TensorData): void {
    this.#native.writeBuffer(bufferHandle(buffer, 'writeBuffer: buffer'), offset, bytesOf(data, 'writeBuffer: data'))
  }
  /** Reads `size` bytes at `offset` (any alignment) once all earlier work completed. */
  @api async readBuffer(buffer: GpuBuffer, offset: number, size: number, options?: AsyncOptions): Promise<Buffer> {
    const { signal } = optionsObject(options, 'readBuffer', ASYNC_OPTIONS)
    const handle = bufferHandle(buffer, 'readBuffer: buffer')
    return callWithSignal(signal, () => this.#native.readBuffer(handle, offset, size))
  }
  /**
   * A paged KV cache for LLM decoding on this device's heap: K/V block pools per layer, block
   * tables, prefix caching, copy-on-write forks and swap to host (see `docs/kv-cache.md`).
   * INVALID_ARGUMENT for options that describe no usable cache (with the figures); OUT_OF_MEMORY
   * or QUOTA_EXCEEDED when its pools do not fit.
   */
  @api createKvCache(options: KvCacheOptions): KvCache {
    try {
      return createKvCache(this.#native, this.heap, options)
    } catch (err) {
      throw outOfMemoryOf(this.heap, err) // Note [One path for every OOM]
    }
  }
  /** The device's live shape executors, oldest first (metrics read them). */
  @api shapeExecutors(): ShapeExecutor[] {
    return shapeExecutorsOf(this.#exec)
  }
  /** The device's live KV caches, oldest first (metrics read them). */
  @api kvCaches(): KvCache[] {
    return kvCachesOfHeap(this.heap)
  }
  /** Compiles a kernel for `stream.dispatch` (once per device and signature). */
  @api createKernel(options: KernelOptions): ComputeKernel {
    // A copy, checked and passed on (a getter is read once): the binding reads a u32, which would
    // wrap 2^32 + 2 to 2.
    const o = {
      ...optionsObject(options, 'createKernel', optionKeys<KernelOptions>({ source: true, entryPoint: true, bindings: true, uniform: true, name: true })),
    }
    if (o.bindings !== undefined) u32(o.bindings, 'createKernel: bindings')
    return wrapKernel(this.#native.createKernel(o as KernelOptions))
  }

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
  @api async upload(block: DeviceBlock, data: TensorData, options?: UploadOptions): Promise<void> {
    const { offset, signal } = optionsObject(options, 'upload', optionKeys<UploadOptions>({ offset: true, signal: true }))
    checkSignal(signal)
    const started = process.hrtime.bigint()
    const bytes = bytesOf(data, 'upload: data')
    const event = this.#native.submitUpload(blockHandle(block, 'upload: block'), bytes, offset)
    return transferred(wrapEvent(event).wait({ signal }), 'upload', this, bytes.byteLength, 1, started)
  }
  /**
   * Copies `data` into `block` at `offset` (default 0) through the host cache and submits,
   * without waiting: returns the submission's event.
   */
  @api submitUpload(block: DeviceBlock, data: TensorData, offset?: number): GpuEvent {
    return wrapEvent(this.#native.submitUpload(blockHandle(block, 'submitUpload: block'), bytesOf(data, 'submitUpload: data'), offset))
  }
  /**
   * Uploads every item through the host cache: small items are packed into shared staging
   * blocks, large ones split, each block at most `host.config.pipelineBytes` (default 4 MiB)
   * and submitted as soon as it is written; resolves once the GPU has them all.
   */
  @api async uploadBatch(items: UploadBatchItem[], options?: AsyncOptions): Promise<void> {
    const { signal } = optionsObject(options, 'uploadBatch', ASYNC_OPTIONS)
    checkSignal(signal)
    const started = process.hrtime.bigint()
    if (!Array.isArray(items)) throw invalidArgument(['uploadBatch', 'items'], 'an array of { block, data, offset }', shown(items))
    const blocks: Binding.DeviceBlock[] = new Array(items.length)
    const data: Uint8Array[] = new Array(items.length)
    const offsets: number[] = new Array(items.length)
    let bytes = 0
    for (let i = 0; i < items.length; i++) {
      const it = items[i] as Partial<UploadBatchItem> | null
      if (it === null || typeof it !== 'object')
        throw invalidArgument(['uploadBatch', `items[${i}]`], '{ block: DeviceBlock, data: TypedArray, offset?: number }', shown(it))
      blocks[i] = blockHandle(it.block, `uploadBatch: item ${i} block`)
      data[i] = bytesOf(it.data, `uploadBatch: item ${i} data`)
      offsets[i] = it.offset ?? 0
      bytes += data[i].byteLength
    }
    const event = this.#native.submitUploadBatch(blocks, data, offsets)
    return transferred(wrapEvent(event).wait({ signal }), 'upload', this, bytes, items.length, started)
  }
  /** Reads a device block through the host cache (`length` bytes at `offset`, default: all of it). */
  download(block: DeviceBlock, options?: DownloadOptions & { as?: undefined }): Promise<Buffer>
  /** Downloads as the typed array `options.as` names. */
  download<T extends TypedArrayClass>(block: DeviceBlock, options: DownloadOptions & { as: T }): Promise<InstanceType<T>>
  @api async download(block: DeviceBlock, options?: DownloadOptions): Promise<ArrayBufferView> {
    const { offset, length, signal, as } = optionsObject(
      options,
      'download',
      optionKeys<DownloadOptions>({ offset: true, length: true, as: true, signal: true }),
    )
    checkAs(as, 'download')
    const started = process.hrtime.bigint()
    const handle = blockHandle(block, 'download: block')
    const bytes = transferred(
      callWithSignal(signal, () => this.#native.downloadRange(handle, offset, length)),
      'download',
      this,
      undefined,
      1,
      started,
    )
    return as === undefined ? bytes : bytes.then((b) => asTyped(b, as, 'download'))
  }

  /**
   * Plans `graph` into slabs from the heap and builds every pipeline and bind group once.
   * `SHADER_ERROR` names a kernel that does not compile or whose bindings differ from what its
   * op supplies; `INVALID_ARGUMENT` a bad graph or a tensor above the max storage binding size;
   * `OUT_OF_MEMORY`; `ABORTED`.
   *
   * @example
   * ```js
   * const exe = await gpu.compile(graph, { strategy: 'best', params: { w: weights } })
   * const { outputs } = await exe.run({ x: new Float32Array(64) })
   * exe.release()
   * ```
   */
  @api async compile<const G extends Graph>(graph: G | string, options?: CompileOptions): Promise<Executor<G>> {
    return compile(this.#exec, graph, options)
  }
  /** Runs `graph` eagerly: outputs come from the heap at each op and return after their last use. */
  @api async runEager<const G extends Graph>(graph: G | string, inputs: GraphInputs<G, never>, options?: RunEagerOptions): Promise<ExecResult<G>> {
    return runEager(this.#exec, graph, inputs, options)
  }
  /**
   * Param bytes uploaded once into one heap block, for executors here and on worker threads to bind
   * in place (`compile(graph, { weights })`). Freed when released and no executor uses them.
   */
  @api createWeights(params: Record<string, TensorData>, options?: CreateWeightsOptions): Weights {
    return weightsOf(this.#exec, params, options)
  }
  /**
   * A graph with symbolic dimensions (`dims: ['batch']`; sizes, dispatch counts and workspaces as
   * expressions such as `'batch * 1024'`), compiled once per shape and cached (LRU). What does
   * not depend on the shape is checked here, without taking device memory: every kernel compiles
   * and matches its op's bindings, op params fit their uniform, every param has data
   * (`SHADER_ERROR` / `INVALID_ARGUMENT`, as `compile` raises them). `warmup(shapes)` compiles
   * given shapes before traffic.
   */
  @api compileShapes<const G extends Graph>(graph: G | string, options?: CompileShapesOptions): ShapeExecutor<G> {
    return compileShapes(this.#exec, graph, options)
  }
  /** The checksum graph of a model graph (`bench/data/models` format), as executable graph JSON. */
  @api checksumGraph(modelJson: string): string {
    return this.#native.checksumGraph(modelJson)
  }
  /**
   * A process-wide handle: pass it to a worker thread and call `Gpu.attach(handle)` there
   * to share this device and its heap. The handle does not keep the device open.
   */
  @api shareHandle(): number {
    return this.#native.shareHandle()
  }
  /** Destroys the device: every later call fails with `DEVICE_LOST`. */
  @api destroy(): void {
    this.#destroy()
  }
  /** Destroys the device (same as `destroy()`). */
  @api [Symbol.dispose](): void {
    this.#destroy()
  }
  #destroy(): void {
    const was = this.#native.lost
    this.#native.destroy()
    if (!was) deviceDestroyed(this)
  }
  /** Readable `console.log` output. */
  @api [inspect.custom](): string {
    if (this.#native.lost) return 'Gpu { lost }'
    const i = this.#native.info
    return `Gpu { adapter: '${i.adapterName}', backend: '${i.backend}', type: '${i.deviceType}', budget: ${this.#native.memoryBudget.bytes} }`
  }
}
