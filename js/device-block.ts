// `DeviceBlock`: a block's id plus the fields malloc reported; the native heap's slab is the
// block's one record, and this heap object's native owner holds it by id. A napi object per
// block, and napi-rs's per-call borrow registry, cost several times the allocator itself
// (src/block_ids.rs), so malloc and free are two raw native calls on numbers, and operations
// that need the block's buffer fetch a native handle once.
import { inspect } from 'node:util'
import { api } from './internal/api.js'
import type { BlockInfo, HeapEvent } from './binding.js'
import { asTyped, bytesOf, checkAs, type TensorData, type TypedArrayClass } from './internal/bytes.js'
import { WgallocError, shown, optionKeys, optionsObject, invalidArgument, noConstructor } from './errors.js'
import { type GpuEvent, wrapEvent } from './event.js'
import type { Heap } from './heap.js'
import type { HeapEvents } from './heap-events.js'
import { type Binding, native, type NativeHeapTable } from './internal/native.js'
import { type AsyncOptions, callWithSignal } from './internal/signal.js'
import { type Stream, streamHandle } from './stream.js'

/** Options of `block.read()`. */
export interface ReadOptions extends AsyncOptions {
  /** Return this typed array instead of bytes (the length must be whole elements). */
  as?: TypedArrayClass
}

/** Options of `heap.malloc()`. */
export interface MallocOptions {
  /** `'device'` (default) or `'shared'` (mappable and bindable where the adapter allows). */
  usage?: 'device' | 'shared'
  /** Optional shape metadata kept with the block. */
  shape?: number[]
}

/** Pool names: `device-small`, `device-large`, `shared-small`, `shared-large` or `scalar`. */
export type PoolName = HeapEvent['pool']

const POOLS = native.constantTables().pools as PoolName[]
const SHARED = new Set<string>(['shared-small', 'shared-large'])
const { heapMalloc, heapMallocIn, heapFree } = native
const kCreate = Symbol('DeviceBlock.create')

type NativeHeap = Binding.Heap & NativeHeapTable

/**
 * What the blocks of one heap object share: the heap, its native slot, a scratch array malloc
 * writes the block's fields into, its events, and the garbage-collection net (a block
 * collected without `free()` goes back to its pool).
 */
export class HeapTable {
  /**
   * Puts a new block under the garbage-collection net. Registering with a FinalizationRegistry
   * (and unregistering at `free()`) costs about as much as a cached malloc + free together, so
   * blocks wait in `unregistered` until the current turn of the event loop ends, or until
   * `REGISTER_BATCH` wait, and only those still live then are registered: a temporary freed in
   * the turn that allocated it never is. The list holds the blocks until then, so one dropped
   * without `free()` is registered and reclaimed as before.
   */
  track(block: DeviceBlock): void {
    const waiting = this.unregistered
    waiting.push(block)
    if (waiting.length >= REGISTER_BATCH) registerWaiting(this)
    else if (!this.#registerQueued) {
      this.#registerQueued = true
      queueMicrotask(this.#registerTask)
    }
  }

  /** `block` was freed before it was registered: it leaves the list if it is the last one in it. */
  untrack(block: DeviceBlock): void {
    const waiting = this.unregistered
    if (waiting[waiting.length - 1] === block) waiting.pop()
  }

  readonly native: NativeHeap
  readonly owner: Heap
  readonly events: HeapEvents
  readonly slot: number
  readonly scratch = new Float64Array(4)
  readonly registry: FinalizationRegistry<number>
  /** Blocks not in `registry` yet, freed or not (see `track`). */
  readonly unregistered: DeviceBlock[] = []
  #registerQueued = false
  readonly #registerTask = (): void => {
    this.#registerQueued = false
    registerWaiting(this)
  }

  constructor(nativeHeap: NativeHeap, owner: Heap, events: HeapEvents) {
    this.native = nativeHeap
    this.owner = owner
    this.events = events
    this.slot = nativeHeap.slot
    this.registry = new FinalizationRegistry((id) => {
      try {
        // Collected without free(): a leak the memory history reports with its stack.
        const size = nativeHeap.releaseBlock(id)
        events.history?.reclaimed(id, size)
        // Its FREED event waits in the native queue: drained in batches, as a free()'s is.
        if (events.historyOnly) events.tick()
      } catch {
        // Nothing to report to: the block's owner is gone, and the heap may be too.
      }
    })
  }
}

/** At most this many blocks wait for registration (see `HeapTable.track`). */
const REGISTER_BATCH = 256

let registerWaiting: (table: HeapTable) => void
let handleOf: (block: DeviceBlock) => Binding.DeviceBlock
let tableOf: (block: DeviceBlock) => HeapTable
let create: (table: HeapTable, id: number, size: number, requested: number, offset: number, pool: number) => DeviceBlock

/**
 * A block of device memory from `gpu.heap.malloc()`. Free it with `free()` (or `using`); a
 * block the garbage collector finds unreachable without `free()` goes back to its pool too.
 *
 * @example
 * ```js
 * const block = gpu.heap.malloc(1 << 20, { shape: [256, 1024] })
 * block.write(new Float32Array(1 << 18))
 * const head = await block.read(0, 16, { as: Float32Array })
 * block.free()
 * ```
 */
export class DeviceBlock {
  readonly #table: HeapTable
  readonly #id: number
  readonly #size: number
  readonly #requested: number
  /** The offset last seen: at malloc, then wherever `offset` last found the block. */
  #offset: number
  readonly #pool: number
  #freed = false
  /** In the table's FinalizationRegistry (see `HeapTable.track`). */
  #registered = false
  #handle: Binding.DeviceBlock | null = null

  private constructor(key: symbol, table: HeapTable, id: number, size: number, requested: number, offset: number, pool: number) {
    if (key !== kCreate) throw noConstructor('DeviceBlock', 'gpu.heap.malloc()')
    this.#table = table
    this.#id = id
    this.#size = size
    this.#requested = requested
    this.#offset = offset
    this.#pool = pool
    table.track(this)
  }

  static {
    registerWaiting = (table) => {
      for (const b of table.unregistered) {
        if (b.#freed) continue
        table.registry.register(b, b.#id, b)
        b.#registered = true
      }
      table.unregistered.length = 0
    }
    handleOf = (b) => b.#native()
    tableOf = (b) => b.#table
    create = (table, id, size, requested, offset, pool) => new DeviceBlock(kCreate, table, id, size, requested, offset, pool)
  }

  #native(): Binding.DeviceBlock {
    if (this.#freed) throw new WgallocError('USE_AFTER_FREE', `block ${this.#id} was freed; allocate a new block`)
    if (this.#handle === null) this.#handle = this.#table.native.blockHandle(this.#id)
    return this.#handle
  }

  /** Block id (as in heap events, snapshots and `heap.getBlockInfo()`). */
  @api get id(): number {
    return this.#id
  }
  /** Allocated bytes (the request rounded up to the storage offset alignment). */
  @api get size(): number {
    return this.#size
  }
  /** Bytes asked for. */
  @api get requestedSize(): number {
    return this.#requested
  }
  /**
   * Offset inside the segment buffer now (a multiple of the storage offset alignment). The heap
   * may move a live block to make room, between operations that use it (a `MOVED` heap event),
   * so read it when needed. After `free()`, the offset last read.
   */
  @api get offset(): number {
    if (!this.#freed) this.#offset = this.#native().offset
    return this.#offset
  }
  /** The pool the block came from. */
  @api get pool(): PoolName {
    return POOLS[this.#pool]
  }
  /** From a `shared` pool (mappable where the adapter has MAPPABLE_PRIMARY_BUFFERS). */
  @api get isShared(): boolean {
    return SHARED.has(POOLS[this.#pool])
  }
  /** True once `free()` ran (reuse still waits for the block's GPU work). */
  @api get freed(): boolean {
    return this.#freed
  }
  /** The heap the block came from. */
  @api get heap(): Heap {
    return this.#table.owner
  }
  /** What the heap knows about the block. `USE_AFTER_FREE` once freed. */
  @api info(): BlockInfo {
    return this.#native().info()
  }
  /** Shape metadata, or null. `USE_AFTER_FREE` once freed. */
  @api get shape(): number[] | null {
    return this.#native().shape
  }
  /** Sets (or clears, with null) the shape metadata. */
  @api setShape(shape: number[] | null): void {
    this.#native().setShape(shape)
  }
  /** Writes `data` (any typed array, DataView or ArrayBuffer) at `offset` (default 0, a multiple of 4); ordered before later submissions. */
  @api write(data: TensorData, offset?: number): void {
    this.#native().write(bytesOf(data, 'write: data'), offset)
  }
  /**
   * Reads `length` bytes (default: to the end) at `offset` (default 0, any alignment) once
   * earlier work completed. `USE_AFTER_FREE` once freed, `INVALID_ARGUMENT` out of range.
   */
  read(offset?: number, length?: number, options?: AsyncOptions & { as?: undefined }): Promise<Buffer>
  /** Reads as `read()` and returns the typed array `options.as` names. */
  read<T extends TypedArrayClass>(offset: number | undefined, length: number | undefined, options: ReadOptions & { as: T }): Promise<InstanceType<T>>
  @api async read(offset?: number, length?: number, options?: ReadOptions): Promise<ArrayBufferView> {
    const { signal, as } = optionsObject(options, 'read', optionKeys<ReadOptions>({ as: true, signal: true }))
    checkAs(as, 'read')
    const bytes = callWithSignal(signal, () => this.#native().read(offset, length))
    return as === undefined ? bytes : bytes.then((b) => asTyped(b, as, 'read'))
  }
  /**
   * Copies `src` into this block (up to the smaller requested size, which must be whole 4-byte words, as
   * WebGPU copies them: `INVALID_ARGUMENT` otherwise) and submits; returns the event.
   */
  @api copyFrom(src: DeviceBlock): GpuEvent {
    if (!(src instanceof DeviceBlock)) throw invalidArgument(['copyFrom', 'src'], 'a DeviceBlock', shown(src))
    return wrapEvent(this.#native().copyFrom(src.#native()))
  }
  /** Marks the block as used by `stream`: a later `free()` waits for that stream's work. */
  @api recordStream(stream: Stream): void {
    this.#native().recordStream(streamHandle(stream))
  }
  /** Returns the block to the heap; a second call fails with `DOUBLE_FREE`. */
  @api free(): void {
    const events = this.#table.events
    if (!events.busy) this.#release()
    else if (events.historyOnly) {
      this.#release()
      events.tick()
    } else events.delivering(() => this.#release())
  }
  #release(): void {
    if (this.#freed) throw new WgallocError('DOUBLE_FREE', `block ${this.#id} was already freed`)
    heapFree(this.#table.slot, this.#id)
    this.#freed = true
    this.#handle = null
    if (this.#registered) this.#table.registry.unregister(this)
    else this.#table.untrack(this)
  }
  /** Frees the block unless already freed. */
  @api [Symbol.dispose](): void {
    if (!this.#freed) this.free()
  }
  /** Readable `console.log` output. */
  @api [inspect.custom](): string {
    if (this.#freed) return `DeviceBlock { id: ${this.#id}, freed }`
    return `DeviceBlock { id: ${this.#id}, size: ${this.#size}, requestedSize: ${this.#requested}, offset: ${this.offset}, pool: '${this.pool}' }`
  }
}

const MALLOC_OPTIONS = optionKeys<MallocOptions>({ usage: true, shape: true })

/** `usage` option to the code `heapMalloc` takes. */
export function usageCode(options: unknown): number {
  if (options === undefined || options === null) return 0
  if (typeof options !== 'object') throw invalidArgument(['malloc', 'options'], "an object, e.g. { usage: 'shared' }", shown(options))
  const { usage } = optionsObject(options as MallocOptions, 'malloc', MALLOC_OPTIONS)
  if (usage === undefined || usage === null || usage === 'device') return 0
  if (usage === 'shared') return 1
  throw invalidArgument('options.usage', "'device' or 'shared'", shown(usage), 'unknown usage')
}

/**
 * The `shape` a malloc sets, read and checked before the block exists, so a refused malloc
 * allocates nothing (the dimensions' rule is the native `setShape`'s: integers from 0 to 2^53-1).
 */
export function shapeOption(options: unknown): number[] | null {
  const shape = (options as MallocOptions | null | undefined)?.shape
  if (shape === undefined || shape === null) return null
  if (!Array.isArray(shape)) throw invalidArgument(['malloc', 'options.shape'], 'an array of dimensions, e.g. [256, 1024]', shown(shape))
  const dims = Array.from(shape as unknown[])
  dims.forEach((d, i) => {
    if (typeof d !== 'number' || !Number.isSafeInteger(d) || d < 0)
      throw invalidArgument(['malloc', `options.shape[${i}]`], 'a non-negative integer below 2^53', shown(d))
  })
  return dims as number[]
}

/** Allocates a block of `table`'s heap (the native call throws errors carrying their data: Note [Errors carry their data]). */
export function mallocBlock(table: HeapTable, size: number, usage: number): DeviceBlock {
  const s = table.scratch
  const id = heapMalloc(table.slot, size, usage, s)
  return create(table, id, s[0], s[1], s[2], s[3])
}

/** A block of `table`'s heap charged to the scope at index `scope` (its record holds the charge). */
export function scopedBlock(table: HeapTable, scope: number, size: number, usage: number): DeviceBlock {
  const s = table.scratch
  const id = heapMallocIn(table.slot, scope, size, usage, s)
  return create(table, id, s[0], s[1], s[2], s[3])
}

/** A block of `table`'s scalar pool already holding `value`. */
export function scalarBlock(table: HeapTable, value: Uint8Array): DeviceBlock {
  const id = table.native.allocScalarId(value)
  const info = table.native.getBlockInfo(id) as BlockInfo
  return create(table, id, info.size, info.requestedSize, info.offset, POOLS.indexOf(info.pool as PoolName))
}

/** A block the native side put in `table` (an executor's device output). */
export function adoptBlock(table: HeapTable, out: { id: number; size: number; requested: number; offset: number; pool: number }): DeviceBlock {
  return create(table, out.id, out.size, out.requested, out.offset, out.pool)
}

/** `block`'s table and id, for native calls that take blocks by id; refuses non-blocks and freed blocks. */
export function blockRef(block: unknown, what: string): { table: HeapTable; id: number } {
  if (!(block instanceof DeviceBlock)) throw invalidArgument(what, 'a DeviceBlock from gpu.heap.malloc()', shown(block))
  if (block.freed) throw new WgallocError('USE_AFTER_FREE', `${what}: block ${block.id} was freed; allocate a new block`)
  return { table: tableOf(block), id: block.id }
}

/** The native handle of `block` (USE_AFTER_FREE once freed); INVALID_ARGUMENT naming `what` for a non-block. */
export function blockHandle(block: unknown, what: string): Binding.DeviceBlock {
  if (!(block instanceof DeviceBlock)) throw invalidArgument(what, 'a DeviceBlock from gpu.heap.malloc()', shown(block))
  return handleOf(block)
}

export { tableOf }
