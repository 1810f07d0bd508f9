'use strict'
// `DeviceBlock` as a plain JS object: the block's id in its heap's native table plus the
// fields malloc reported. A napi object per block, and napi-rs's per-call borrow registry,
// cost several times the allocator itself (src/block_table.rs), so malloc and free are two
// raw native calls on numbers, and operations that need the block's buffer fetch a native
// handle once (`blockHandle`).
const native = require('./native.cjs')
const { WgallocError, shown, toWgallocError } = require('./errors.cjs')
const { bytesOf } = require('./bytes.cjs')

/**
 * The heap's native helpers for blocks, taken off the public prototype before anything else
 * sees it: user code calling them could put blocks in the table that nothing frees, or free a
 * block under its JS object. Each is called as `fn(heap, ...args)`.
 */
const { slot, allocScalarId, blockHandle, releaseBlock, sameHeapAs } = Object.fromEntries(
  ['slot', 'allocScalarId', 'blockHandle', 'releaseBlock', 'sameHeapAs'].map((name) => {
    const proto = native.Heap.prototype
    const d = Object.getOwnPropertyDescriptor(proto, name)
    const fn = d.get ?? d.value
    delete proto[name]
    return [
      name,
      (heap, ...args) => {
        try {
          return fn.apply(heap, args)
        } catch (err) {
          throw toWgallocError(err, true)
        }
      },
    ]
  }),
)

const POOLS = native.heapPoolNames()
const SHARED = new Set(['shared-small', 'shared-large'])
const { heapMalloc, heapFree } = native
const kCreate = Symbol('DeviceBlock.create')

/**
 * What the blocks of one JS heap object share: the heap, its native slot, a scratch array
 * malloc writes the block's fields into, and the garbage-collection net (a block collected
 * without `free()` goes back to its pool).
 */
class HeapTable {
  constructor(heap) {
    this.heap = heap
    this.slot = slot(heap)
    this.scratch = new Float64Array(4)
    this.registry = new FinalizationRegistry((id) => {
      try {
        releaseBlock(heap, id)
      } catch {
        // Nothing to report to: the block's owner is gone, and the heap may be too.
      }
    })
  }
}

let handleOf
let tableOf

class DeviceBlock {
  #table
  #id
  #size
  #requested
  #offset
  #pool
  #freed = false
  #handle = null

  constructor(key, table, id, size, requested, offset, pool) {
    if (key !== kCreate) throw new WgallocError('INVALID_ARGUMENT', 'DeviceBlock has no public constructor; use gpu.heap.malloc()')
    this.#table = table
    this.#id = id
    this.#size = size
    this.#requested = requested
    this.#offset = offset
    this.#pool = pool
    table.registry.register(this, id, this)
  }

  static {
    /** The native handle of a block (USE_AFTER_FREE once freed); other values pass through. */
    handleOf = (b) => (b !== null && typeof b === 'object' && #handle in b ? b.#native() : b)
    tableOf = (b) => b.#table
  }

  #native() {
    if (this.#freed) throw new WgallocError('USE_AFTER_FREE', `block ${this.#id} was freed; allocate a new block`)
    return (this.#handle ??= blockHandle(this.#table.heap, this.#id))
  }

  /** Block id (as in heap events, snapshots and `heap.getBlockInfo()`). */
  get id() {
    return this.#id
  }
  /** Allocated bytes (the request rounded up to the storage offset alignment). */
  get size() {
    return this.#size
  }
  /** Bytes asked for. */
  get requestedSize() {
    return this.#requested
  }
  /** Offset inside the segment buffer (a multiple of the storage offset alignment). */
  get offset() {
    return this.#offset
  }
  /** Pool name: `device-small`, `device-large`, `shared-small`, `shared-large` or `scalar`. */
  get pool() {
    return POOLS[this.#pool]
  }
  /** From a `shared` pool (mappable where the adapter has MAPPABLE_PRIMARY_BUFFERS). */
  get isShared() {
    return SHARED.has(POOLS[this.#pool])
  }
  /** True once `free()` ran (reuse still waits for the block's GPU work). */
  get freed() {
    return this.#freed
  }
  /** What the heap knows about the block. `USE_AFTER_FREE` once freed. */
  info() {
    return this.#native().info()
  }
  /** Shape metadata, or null. `USE_AFTER_FREE` once freed. */
  get shape() {
    return this.#native().shape
  }
  /** Sets (or clears, with null) the shape metadata. */
  setShape(shape) {
    return this.#native().setShape(shape)
  }
  /** Writes `data` (any typed array, DataView or ArrayBuffer) at `offset` (default 0, a multiple of 4); ordered before later submissions. */
  write(data, offset) {
    return this.#native().write(bytesOf(data, 'write: data'), offset)
  }
  /** Reads `length` bytes at `offset` once earlier work completed. */
  read(offset, length) {
    try {
      return this.#native().read(offset, length)
    } catch (err) {
      return Promise.reject(err)
    }
  }
  /** Copies `src` into this block (up to the smaller size) and submits; returns the event. */
  copyFrom(src) {
    return this.#native().copyFrom(handleOf(src))
  }
  /** Marks the block as used by `stream`: a later `free()` waits for that stream's work. */
  recordStream(stream) {
    return this.#native().recordStream(stream)
  }
  /** Returns the block to the heap; a second call fails with `DOUBLE_FREE`. */
  free() {
    if (this.#freed) throw new WgallocError('DOUBLE_FREE', `block ${this.#id} was already freed`)
    heapFree(this.#table.slot, this.#id)
    this.#freed = true
    this.#handle = null
    this.#table.registry.unregister(this)
  }
}

/** `usage` option to the code `heapMalloc` takes. */
function usageCode(options) {
  if (options === undefined || options === null) return 0
  if (typeof options !== 'object') throw new WgallocError('INVALID_ARGUMENT', "malloc: options must be an object, e.g. { usage: 'shared' }")
  const usage = options.usage
  if (usage === undefined || usage === null || usage === 'device') return 0
  if (usage === 'shared') return 1
  throw new WgallocError('INVALID_ARGUMENT', `unknown usage ${shown(usage)}; use 'device' or 'shared'`)
}

/** Allocates a block of `table`'s heap (the native call throws `[CODE] message` errors). */
function mallocBlock(table, size, usage) {
  const s = table.scratch
  const id = heapMalloc(table.slot, size, usage, s)
  return new DeviceBlock(kCreate, table, id, s[0], s[1], s[2], s[3])
}

/** A block of `table`'s scalar pool already holding `value`. */
function scalarBlock(table, value) {
  const id = allocScalarId(table.heap, value)
  const info = table.heap.getBlockInfo(id)
  return new DeviceBlock(kCreate, table, id, info.size, info.requestedSize, info.offset, POOLS.indexOf(info.pool))
}

/** A block the native side put in `table` (an executor's device output). */
function adoptBlock(table, out) {
  return new DeviceBlock(kCreate, table, out.id, out.size, out.requested, out.offset, out.pool)
}

/** `block`'s table and id, for native calls that take blocks by id; refuses non-blocks and freed blocks. */
function blockRef(block, what) {
  if (!(block instanceof DeviceBlock)) throw new WgallocError('INVALID_ARGUMENT', `${what} must be a DeviceBlock from gpu.heap.malloc()`)
  if (block.freed) throw new WgallocError('USE_AFTER_FREE', `${what}: block ${block.id} was freed; allocate a new block`)
  return { table: tableOf(block), id: block.id }
}

module.exports = { sameHeapAs, DeviceBlock, HeapTable, mallocBlock, scalarBlock, adoptBlock, blockRef, usageCode, handleOf, heapOf: (b) => tableOf(b).heap }
