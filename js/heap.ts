// `Heap`: the device's caching allocator (MPSHeapAllocator): malloc/free on the raw N-API
// fast path, allocator events, OUT_OF_MEMORY reports, stats and snapshots.
import { kvCachesOf } from './internal/kv-registry.js'
import { inspect } from 'node:util'
import { api, fail } from './internal/api.js'
import type { BlockInfo, HeapEvent, HeapStats, SnapshotSegment, WarmStartResult } from './binding.js'
import { DeviceBlock, HeapTable, type MallocOptions, mallocBlock, scalarBlock, scopedBlock, shapeOption, tableOf, usageCode } from './device-block.js'
import { type OutOfMemoryDetails, WgallocError, stringifyInput, toWgallocError, invalidArgument, noConstructor, shown } from './errors.js'
import { HeapEvents, type HeapEventKind, type OutOfMemoryEvent, POOL_NAMES } from './heap-events.js'
import { type HeapScope, type HeapScopeOptions, findScope, listScopes, setScopedMalloc, topScope } from './heap-scope.js'
import {
  HeapHistory,
  captureStack,
  STACK_FRAMES,
  type LeakReport,
  type Holder as StackHolder,
  type MemorySnapshot,
  type RecordHistoryOptions,
  formatLeakReport,
  unrecordedLeaks,
} from './heap-history.js'
import type { Binding, NativeHeapTable } from './internal/native.js'
import { writeOomSnapshot } from './internal/oom.js'
import { ReportFiles } from './internal/report-file.js'

/** One pool of a heap profile. */
export interface HeapProfilePool {
  /** `device-small`, `device-large`, `shared-small`, `shared-large` or `scalar`. */
  pool: string
  /** Bytes allocated in the pool when its arena's live bytes peaked (small and large pools of one usage share an arena). */
  peakLiveBytes: number
  /** Sizes of the segments a warm start reserves for the pool (each rounded up to 64 KiB). */
  segments: number[]
}

/**
 * What a heap learned about its workload (`heap.profile()`), for a warm start of the next run
 * (`heap.warmStart(profile)`, `Gpu.request({ heap: { profile } })`). Plain JSON; see
 * [Warm starts](../docs/heap.md#warm-starts).
 */
export interface HeapProfile {
  /** Always `wgalloc-heap-profile`. */
  format: 'wgalloc-heap-profile'
  /** The profile format's version (1). */
  version: number
  /** Pools the run allocated from, each at most once. */
  pools: HeapProfilePool[]
}

/** A profile from the native JSON text, its fields in the documented order. */
export function profileFromJson(text: string): HeapProfile {
  const p = JSON.parse(text) as HeapProfile
  return { format: p.format, version: p.version, pools: p.pools.map(({ pool, peakLiveBytes, segments }) => ({ pool, peakLiveBytes, segments })) }
}

const kCreate = Symbol('Heap.create')
let create: (handle: Binding.Heap) => Heap
let tableOfHeap: (heap: Heap) => HeapTable
/** The error of a call other than `malloc` that may be an OUT_OF_MEMORY of `heap`, reported as malloc's are. */
let outOfMemoryOf: (heap: Heap, err: unknown) => unknown

/** OUT_OF_MEMORY errors already given their report (Note [One path for every OOM]). */
const reportedOoms = new WeakSet<WgallocError>()

/**
 * The device's caching allocator (`gpu.heap`): blocks sub-allocated from cached segments,
 * watermarks, garbage collection of idle segments, an out-of-memory ladder and statistics.
 */
export class Heap {
  readonly #native: Binding.Heap & NativeHeapTable
  /** What an ALLOCATION_FAILED listener that frees memory changes (see `HeapEvents.delivering`). */
  readonly #memoryState = (): string => {
    const s = this.#native.stats()
    return `${s.activeBlocks.current} ${s.allocatedBytes.current} ${s.reservedBytes.current} ${s.pendingFreeBytes}`
  }
  readonly #events: HeapEvents
  readonly #table: HeapTable

  private constructor(key: symbol, handle: Binding.Heap) {
    if (key !== kCreate) throw noConstructor('Heap', 'gpu.heap')
    this.#native = handle as Binding.Heap & NativeHeapTable
    this.#events = new HeapEvents(this.#native, this)
    this.#table = new HeapTable(this.#native, this, this.#events)
  }
  static {
    create = (handle) => new Heap(kCreate, handle)
    setScopedMalloc({
      samplesStack: (heap) => heap.#events.busy && heap.#events.history?.sample() === true,
      malloc: (heap, scope, size, options, stack) => heap.#malloc(size, options, (table, usage) => scopedBlock(table, scope, size, usage), stack),
    })
    tableOfHeap = (heap) => heap.#table
    outOfMemoryOf = (heap, err) => heap.#outOfMemory(toWgallocError(err, true), 0)
  }

  /**
   * Allocates a block of at least `size` bytes from the pool for `options.usage` and the size.
   * Fails with `INVALID_ARGUMENT` for a bad size or usage and `OUT_OF_MEMORY` when the high
   * watermark or the driver refuses, after releasing cached segments and retrying (the message
   * names requested, allocated, cached, reserved and budget bytes, and the largest free block;
   * `err.details` has them as numbers).
   * @example
   * ```js
   * const block = gpu.heap.malloc(1 << 20, { usage: 'device', shape: [256, 1024] })
   * block.write(new Uint8Array(1 << 20))
   * const head = await block.read(0, 16)
   * block.free() // or `using block = ...`
   * ```
   */
  malloc(size: number, options?: MallocOptions): DeviceBlock {
    // Note [malloc's own API boundary]: not `@api`, whose wrapper (a rest array and `apply`) is
    // one more frame for V8 to decode in every stack a history captures (Note [Stack capture
    // cost]). The boundary is the same: the receiver is checked first (the private field's brand
    // check: a foreign one is an illegal invocation), and errors leave as WgallocErrors reported
    // on `wgalloc:device`. The stack is captured here, in the public method.
    try {
      const events = this.#events
      let stack: StackHolder | null = null
      if (events.busy && events.history?.sample()) {
        // captureStack written out: V8 walks a helper's frame too (Note [Stack capture cost]).
        stack = {}
        const limit = Error.stackTraceLimit
        Error.stackTraceLimit = STACK_FRAMES
        Error.captureStackTrace(stack, Heap.prototype.malloc)
        Error.stackTraceLimit = limit
      }
      return this.#malloc(size, options, null, stack)
    } catch (err) {
      throw fail(err, this, 'malloc')
    }
  }

  /**
   * `malloc`, or with `scoped` a scope's malloc (the native heap charges the scope). `stack`:
   * the caller's, captured in its public method when the history samples this malloc.
   */
  #malloc(
    size: number,
    options: MallocOptions | undefined,
    scoped: ((table: HeapTable, usage: number) => DeviceBlock) | null,
    stack: StackHolder | null,
  ): DeviceBlock {
    const table = this.#table
    const usage = usageCode(options)
    // Read and checked before allocating: a getter that throws or a bad shape must not leave
    // a block (nor a driver allocation, a peak or events) behind.
    const shape = shapeOption(options)
    let block: DeviceBlock
    const events = this.#events
    if (!events.busy) {
      try {
        block = scoped ? scoped(table, usage) : mallocBlock(table, size, usage)
      } catch (err) {
        throw this.#outOfMemory(toWgallocError(err, true), size)
      }
    } else {
      const history = events.history
      // The stack is the history's before the block's events are delivered (at once, when
      // others listen), so the ring's alloc entry carries it too.
      const allocate = () => {
        const b = scoped ? scoped(table, usage) : mallocBlock(table, size, usage)
        if (stack !== null) history?.allocated(b.id, stack)
        return b
      }
      const historyOnly = events.historyOnly
      try {
        block = historyOnly ? allocate() : events.delivering(allocate, this.#memoryState)
      } catch (err) {
        throw this.#outOfMemory(toWgallocError(err, true), size)
      }
      if (historyOnly) events.tick()
    }
    if (shape !== null) {
      try {
        block.setShape(shape)
      } catch (err) {
        block.free()
        throw err
      }
    }
    return block
  }

  /**
   * An OUT_OF_MEMORY gets `details` (the request and the heap's figures), the snapshot written
   * where WGALLOC_OOM_SNAPSHOT says, and goes to the heap's OUT_OF_MEMORY listeners.
   */
  #outOfMemory(err: unknown, size: number): unknown {
    // Note [One path for every OOM]: whichever call ran out of device memory (a malloc, a
    // compile or a shape cache miss, weights, a run's device outputs), its error passes here
    // once: `details`, the snapshot and the OUT_OF_MEMORY listeners.
    if (!WgallocError.is(err, 'OUT_OF_MEMORY') || reportedOoms.has(err)) return err
    reportedOoms.add(err)
    // Every native OUT_OF_MEMORY carries its figures as data, `source` first; the facade adds
    // the size a malloc asked for where the native figures lack it.
    const details: OutOfMemoryDetails = { ...(size > 0 ? { requested: size } : {}), ...(err.details as OutOfMemoryDetails) }
    details.snapshotPath = writeOomSnapshot(this.#native, details)
    err.details = details
    this.#events.outOfMemory(details)
    return err
  }

  /** A block from the scalar pool already holding `value` (1 byte to 64 KiB; uniform-bindable). */
  @api allocScalar(value: Uint8Array): DeviceBlock {
    // Bytes only: a Float32Array's elements would otherwise be taken one byte each.
    if (!(value instanceof Uint8Array))
      throw invalidArgument(
        ['allocScalar', 'value'],
        "a Uint8Array of the value's bytes (new Uint8Array(f32.buffer))",
        ArrayBuffer.isView(value) ? `a ${(value as object).constructor.name}` : shown(value),
      )
    const history = this.#events.history
    const stack = history?.sample() ? captureStack(Heap.prototype.allocScalar) : null
    return this.#events.delivering(() => {
      const block = scalarBlock(this.#table, value)
      if (stack) history?.allocated(block.id, stack)
      return block
    }, this.#memoryState)
  }
  /** Frees `block` (same as `block.free()`), checking that it belongs to this heap. */
  @api free(block: DeviceBlock): void {
    if (!(block instanceof DeviceBlock)) throw invalidArgument(['heap.free', 'block'], 'a DeviceBlock from heap.malloc()', shown(block))
    // Another heap object of the same device (a Gpu.attach) frees it too; another device cannot.
    const owner = tableOf(block).native
    if (owner !== this.#native && !this.#native.sameHeapAs(owner))
      throw invalidArgument(['heap.free', 'block'], "a block of this device's heap", "a block of another device's heap")
    block.free()
  }

  /**
   * Listens for allocator events; returns a function that removes the listener. Listeners
   * run synchronously after the call that caused the event; an `ALLOCATION_FAILED`
   * listener may free blocks, and `malloc()` then retries once. While a kind's listeners run,
   * events of that kind their own calls raise reach them no more (an `ALLOCATION_FAILED`
   * listener that mallocs from a full heap would be called without end); the `wgalloc:heap`
   * channel still gets them. A listener that throws changes nothing the call returns: the
   * exception is reported as a `warning` on `wgalloc:device`. `INVALID_ARGUMENT` for an unknown kind.
   */
  on(kind: HeapEventKind, listener: (event: HeapEvent) => void): () => void
  /** Listens for failed allocations: the request, the heap's figures and the snapshot path. */
  on(kind: 'OUT_OF_MEMORY', listener: (event: OutOfMemoryEvent) => void): () => void
  @api on(kind: HeapEventKind | 'OUT_OF_MEMORY', listener: ((event: HeapEvent) => void) | ((event: OutOfMemoryEvent) => void)): () => void {
    this.#events.on(kind, listener)
    return () => this.off(kind as HeapEventKind, listener as (event: HeapEvent) => void)
  }
  /** Removes a listener added with `on()`. */
  off(kind: HeapEventKind, listener: (event: HeapEvent) => void): void
  /** Removes an OUT_OF_MEMORY listener. */
  off(kind: 'OUT_OF_MEMORY', listener: (event: OutOfMemoryEvent) => void): void
  @api off(kind: HeapEventKind | 'OUT_OF_MEMORY', listener: ((event: HeapEvent) => void) | ((event: OutOfMemoryEvent) => void)): void {
    this.#events.off(kind, listener)
  }
  /** Routes `WGALLOC_DEBUG_ALLOCATOR` lines to `logger` instead of stderr (null restores stderr). */
  @api setLogger(logger: ((line: string) => void) | null): void {
    this.#events.setLogger(logger)
  }

  /**
   * Records a memory history (PyTorch `_record_memory_history`): every allocation, free,
   * segment map and unmap in a ring of `maxEntries` events (default 100 000, capped at 10^7),
   * and with `stacks` (default true) the JS stack of every malloc, or with `stacks: { every: N }`
   * of one malloc in N (cheap enough to leave on in production). `memorySnapshot()` and
   * `leakReport()` read it; `wgalloc view` draws the snapshot. `false` stops recording. Off by
   * default, and then free: malloc and free take their fast path.
   * @example
   * ```js
   * gpu.heap.recordHistory({ maxEntries: 10000 })
   * await serveRequests()
   * writeFileSync('memory.json', JSON.stringify(gpu.heap.memorySnapshot())) // wgalloc view memory.json
   * console.log(gpu.heap.leakReport().groups[0]?.stack)
   * ```
   */
  @api recordHistory(options?: RecordHistoryOptions | false): void {
    if (options === false) {
      this.#events.setHistory(null)
      return
    }
    const history = new HeapHistory(options, POOL_NAMES)
    history.seed(this.#native.snapshot())
    this.#events.setHistory(history)
  }
  /** Whether a memory history is being recorded. */
  @api get recordingHistory(): boolean {
    return this.#events.history !== null
  }
  /**
   * Every segment with its blocks (active ones with the stack of their malloc, when the history
   * records stacks) and the history's events, oldest first: the `wgalloc view` memory page's input.
   */
  @api memorySnapshot(): MemorySnapshot {
    this.#events.drain()
    const history = this.#events.history
    const segments = this.#native.snapshot().map((s) => ({
      ...s,
      blocks: s.blocks.map((b) => {
        const stack = b.state === 'free' ? undefined : history?.stackOf(b.blockId)
        return stack === undefined ? b : { ...b, stack }
      }),
    }))
    const kvCaches = kvCachesOf(this).map((c) => c.snapshot())
    return { format: 'wgalloc-memory-history', version: 1, segments, history: history?.entries() ?? [], ...(kvCaches.length ? { kvCaches } : {}) }
  }
  /**
   * Blocks allocated through this heap and not freed, grouped by the stack of their malloc, most
   * bytes first; blocks the garbage collector reclaimed without `free()` count too. Stacks need
   * `recordHistory()` (or `WGALLOC_LEAK_REPORT=1`, which also prints the report at exit);
   * without it, live blocks are grouped under `(not recorded)`.
   */
  @api leakReport(): LeakReport {
    this.#events.drain()
    const live = this.#native.tableBlocks()
    const report = this.#events.history?.leaks(live) ?? unrecordedLeaks(live)
    const kvCaches = kvCachesOf(this).map((c) => c.leak())
    return kvCaches.length ? { ...report, kvCaches } : report
  }

  /**
   * A quota over this heap for a tenant or a model: the scope's `malloc` is charged to it, and
   * fails with `QUOTA_EXCEEDED` naming the scope past `limit` bytes while other scopes go on.
   * Scopes nest (`scope.scope()`), each at most its parent's limit; top-level ones at most the
   * device's budget. `INVALID_ARGUMENT` for a limit that is not a positive integer or exceeds
   * the parent's, or a name used already.
   */
  @api scope(options: HeapScopeOptions): HeapScope {
    return topScope(this, this.#native, options)
  }
  /**
   * Every live scope of the device, depth first: those made through this heap object and
   * those of other heap objects of the device (a worker's `Gpu.attach`). Disposed scopes are
   * left out, with their children.
   */
  @api scopes(): HeapScope[] {
    return listScopes(this, this.#native)
  }
  /** The live scope at `path` (names joined with `/`, as `scope.path`), made here or by another heap object of the device. */
  @api findScope(path: string): HeapScope | undefined {
    if (typeof path !== 'string') throw invalidArgument(['findScope', 'path'], 'a string', shown(path))
    return findScope(this, this.#native, path)
  }

  /** Releases idle cached segments to the driver; returns the bytes released. */
  @api emptyCache(): number {
    return this.#events.delivering(() => this.#native.emptyCache())
  }
  /**
   * What the heap learned about its workload: per pool, the bytes allocated when its arena's live
   * bytes peaked, and the segments a warm start reserves for them (one per arena, 1.02x its peak
   * plus 1 MiB). The peaks are kept since the heap was created (`resetPeakStats()` does not
   * clear them); after a warm start, per arena, the larger of the profile's and the run's. Save it
   * as JSON for the next run.
   */
  @api profile(): HeapProfile {
    return profileFromJson(this.#native.profileJson())
  }
  /**
   * Reserves a profile's segments up front (after releasing the idle segments of the arenas it
   * names), so a workload like the one it was taken from makes no driver allocation; the heap
   * grows past them as usual. All or nothing: `OUT_OF_MEMORY` naming the figures when they would
   * take the heap above its high watermark, `INVALID_ARGUMENT` naming the field for a bad
   * profile (wrong `format` or `version`, an unknown pool, a size that is not a byte count, a
   * segment above `maxBufferSize`). `profile` may be the object or its JSON text.
   */
  @api warmStart(profile: HeapProfile | string): WarmStartResult {
    const text = typeof profile === 'string' ? profile : stringifyInput(profile ?? null, 'warmStart: the profile')
    try {
      return this.#events.delivering(() => this.#native.warmStartJson(text))
    } catch (err) {
      throw toWgallocError(err, true)
    }
  }
  /** Returns freed blocks whose GPU work completed to their pools. */
  @api freeInactiveBuffers(): void {
    this.#events.delivering(() => this.#native.freeInactiveBuffers())
  }
  /**
   * Allocator statistics: bytes, blocks and segments (current, peak, cumulative), cache and
   * driver counters, per pool. A plain object of numbers.
   */
  @api stats(): HeapStats {
    return this.#native.stats()
  }
  /** Sets every `peak` to its `current` value. */
  @api resetPeakStats(): void {
    this.#native.resetPeakStats()
  }
  /** Zeroes the cumulative figures (`allocated`, `freed`) and the counters. */
  @api resetAccumulatedStats(): void {
    this.#native.resetAccumulatedStats()
  }
  /** Every segment with its blocks and free ranges. */
  @api snapshot(): SnapshotSegment[] {
    return this.#native.snapshot()
  }
  /** Information on a live block by id, or null. */
  @api getBlockInfo(id: number): BlockInfo | null {
    return this.#native.getBlockInfo(id)
  }
  /** Hard limit as a fraction of the memory budget (0 disables; at most 2). */
  @api get highWatermarkRatio(): number {
    return this.#native.highWatermarkRatio
  }
  /** Soft limit (garbage collection of idle segments) as a fraction of the budget; 0 disables. */
  @api get lowWatermarkRatio(): number {
    return this.#native.lowWatermarkRatio
  }
  /**
   * Sets the hard limit (fraction of the budget, 0 to 2; 0 disables); lowers the low watermark
   * to it if needed. `INVALID_ARGUMENT` out of range.
   */
  @api setHighWatermarkRatio(ratio: number): void {
    this.#native.setHighWatermarkRatio(ratio)
  }
  /**
   * Sets the soft limit (fraction of the budget, at most the high watermark; 0 disables).
   * `INVALID_ARGUMENT` out of range.
   */
  @api setLowWatermarkRatio(ratio: number): void {
    this.#native.setLowWatermarkRatio(ratio)
  }
  /** Bytes the heap may still reserve before garbage collection starts (`Infinity` while the low watermark is disabled). */
  @api get lowWatermarkHeadroom(): number {
    return this.#native.lowWatermarkHeadroom
  }
  /** Storage offset alignment of every block offset. */
  @api get alignment(): number {
    return this.#native.alignment
  }
  /** The `WGALLOC_DEBUG_ALLOCATOR` mask in force. */
  @api get debugMask(): number {
    return this.#native.debugMask
  }
  /** Readable `console.log` output. */
  @api [inspect.custom](): string {
    const s = this.#native.stats()
    return `Heap { allocated: ${s.allocatedBytes.current}, reserved: ${s.reservedBytes.current}, activeBlocks: ${s.activeBlocks.current}, segments: ${s.segments.current} }`
  }
}

/** The heap object for a native heap; with `WGALLOC_LEAK_REPORT` set, it records stacks and reports leaks at exit. */
export function wrapHeap(handle: Binding.Heap, device: string): Heap {
  const heap = create(handle)
  if (leakReportWanted()) {
    heap.recordHistory({ stacks: true })
    trackForLeakReport(heap, device)
  }
  return heap
}

const leakReportWanted = () => {
  const v = process.env.WGALLOC_LEAK_REPORT
  return v !== undefined && v !== '' && v !== '0'
}

// Heaps whose leaks `WGALLOC_LEAK_REPORT` prints at exit; weak, so a dropped device is not kept.
const leakWatch = new Set<{ heap: WeakRef<Heap>; device: string }>()
let leakExitHook = false
const leakFiles = new ReportFiles('wgalloc-leaks', 'WGALLOC_LEAK_REPORT')

function trackForLeakReport(heap: Heap, device: string): void {
  leakWatch.add({ heap: new WeakRef(heap), device })
  if (leakExitHook) return
  leakExitHook = true
  process.on('exit', () => {
    const dir = process.env.WGALLOC_LEAK_REPORT
    for (const { heap: ref, device: name } of leakWatch) {
      const h = ref.deref()
      if (!h) continue
      try {
        const report = h.leakReport()
        const text = formatLeakReport(report, name)
        if (text) process.stderr.write(text)
        // A value other than 1 names a folder for the report and the memory snapshot.
        if (dir && dir !== '1' && report.count > 0 && leakFiles.take()) {
          const text = `${JSON.stringify({ kind: 'wgalloc-leaks', device: name, report, snapshot: h.memorySnapshot() })}\n`
          process.stderr.write(`wgalloc: wrote ${leakFiles.write(dir, text)}\n`)
        }
      } catch {
        // A report at exit must not turn into an error of its own (the device may be gone).
      }
    }
    leakFiles.sayHowManySkipped()
  })
}
export { outOfMemoryOf, tableOfHeap }
