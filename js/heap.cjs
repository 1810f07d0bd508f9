'use strict'
// JS side of the heap: one Heap object per Gpu, allocator events and debug logs
// delivered to listeners (and the `wgalloc:heap` diagnostics channel) after each
// call, the ALLOCATION_FAILED retry, disposal and inspect output.
const { inspect } = require('node:util')
const { memoizeGetter } = require('./memo.cjs')
const { addSignal } = require('./signal.cjs')
const { shown } = require('./errors.cjs')
const { checkAs, asTyped } = require('./bytes.cjs')
const { oomDetails, writeOomSnapshot } = require('./oom.cjs')
const { DeviceBlock, HeapTable, mallocBlock, scalarBlock, usageCode, heapOf, sameHeapAs } = require('./device-block.cjs')

const EVENT_KINDS = ['ALLOCATED', 'RECYCLED', 'FREED', 'RELEASED', 'ALLOCATION_FAILED', 'OUT_OF_MEMORY']

// The blocks of one JS heap object live in its native table (see device-block.cjs).
const kTable = Symbol('wgalloc.heapTable')
const tableOf = (heap) => heap[kTable] ?? Object.defineProperty(heap, kTable, { value: new HeapTable(heap) })[kTable]

function installHeap({ Gpu, Heap, WgallocError, dispose, toWgallocError, diag }) {
  memoizeGetter(Gpu.prototype, 'heap')
  /** Allocator events are also published here, for tools that listen process-wide. */
  const channel = diag.channels.heap

  // Per-heap JS state lives on the heap object itself (a symbol key is cheaper than a
  // WeakMap lookup on the malloc/free hot path, and blocks point at their heap the same
  // way: a WeakMap entry per block made short-lived blocks costly to collect).
  const kState = Symbol('wgalloc.heapState')
  const state = (heap) => {
    let st = heap[kState]
    if (!st) {
      st = {
        listeners: Object.fromEntries(EVENT_KINDS.map((k) => [k, new Set()])),
        logger: null,
        // Whether a listener or logger is set (the channel is checked per call).
        active: false,
        // Whether the channel had subscribers when recording was last set: the native
        // heap records events only while someone listens, and a channel subscriber can
        // come and go between any two calls.
        channelSeen: false,
      }
      Object.defineProperty(heap, kState, { value: st })
    }
    return st
  }
  // OUT_OF_MEMORY comes from the facade, not the native event log: it needs no recording.
  const NATIVE_KINDS = EVENT_KINDS.filter((k) => k !== 'OUT_OF_MEMORY')
  const listening = (st) => NATIVE_KINDS.some((k) => st.listeners[k].size > 0) || channel.hasSubscribers
  const syncRecording = (heap) => {
    const st = state(heap)
    st.active = st.logger !== null || EVENT_KINDS.some((k) => st.listeners[k].size > 0)
    st.channelSeen = channel.hasSubscribers
    heap.setEventRecording(listening(st), st.logger !== null)
  }
  /** Whether events may need delivering around a call: nothing to do in the common case. */
  const busy = (heap) => {
    const st = heap[kState]
    return (st !== undefined && (st.active || st.channelSeen)) || channel.hasSubscribers
  }
  /** Before a call that can allocate or free: follow channel (un)subscriptions. */
  const follow = (heap) => {
    if (state(heap).channelSeen !== channel.hasSubscribers) syncRecording(heap)
  }

  /** Delivers what the native heap recorded during the last call. */
  function dispatch(heap) {
    const st = state(heap)
    if (!listening(st) && st.logger === null) return
    const { events, logs } = heap.takeEvents()
    if (st.logger) for (const line of logs) st.logger(line)
    for (const e of events) {
      if (channel.hasSubscribers) channel.publish({ ...e, heap })
      for (const fn of st.listeners[e.kind]) fn(e)
    }
  }

  /**
   * Listens for allocator events: 'ALLOCATED' | 'RECYCLED' | 'FREED' | 'RELEASED' |
   * 'ALLOCATION_FAILED'. An ALLOCATION_FAILED listener may free blocks; malloc then
   * retries once. Listeners run synchronously after the call that caused the event.
   * Returns a function that removes the listener.
   */
  const checkKind = (kind) => {
    if (!EVENT_KINDS.includes(kind))
      throw toWgallocError(new Error(`[INVALID_ARGUMENT] unknown heap event ${shown(kind)}; use one of ${EVENT_KINDS.join(', ')}`))
  }
  Heap.prototype.on = function (kind, fn) {
    checkKind(kind)
    const l = state(this).listeners
    if (typeof fn !== 'function') throw toWgallocError(new Error('[INVALID_ARGUMENT] listener must be a function'))
    l[kind].add(fn)
    syncRecording(this)
    return () => this.off(kind, fn)
  }
  Heap.prototype.off = function (kind, fn) {
    checkKind(kind)
    state(this).listeners[kind].delete(fn)
    syncRecording(this)
  }
  /** Routes `WGALLOC_DEBUG_ALLOCATOR` lines to `fn` instead of stderr (null restores stderr). */
  Heap.prototype.setLogger = function (fn) {
    if (fn == null) state(this).logger = null
    else if (typeof fn === 'function') state(this).logger = fn
    else throw toWgallocError(new Error('[INVALID_ARGUMENT] logger must be a function or null'))
    syncRecording(this)
  }

  /**
   * Runs `fn`, a call that can allocate or free, and delivers the events it caused. With
   * `retryOnOom`, an OUT_OF_MEMORY that ALLOCATION_FAILED listeners were told of is retried
   * once: they may have freed memory.
   */
  const delivering = (heap, fn, retryOnOom = false) => {
    if (!busy(heap)) return fn()
    follow(heap)
    try {
      return fn()
    } catch (err) {
      if (!retryOnOom) throw err
      dispatch(heap) // ALLOCATION_FAILED listeners may free memory now
      const e = toWgallocError(err, true)
      if (e.code !== 'OUT_OF_MEMORY' || !state(heap).listeners.ALLOCATION_FAILED.size) throw e
      return fn()
    } finally {
      dispatch(heap)
    }
  }
  for (const name of ['emptyCache', 'freeInactiveBuffers']) {
    const original = Heap.prototype[name]
    Heap.prototype[name] = function (...args) {
      return delivering(this, () => original.apply(this, args))
    }
  }
  /**
   * Allocates a block of at least `size` bytes from the pool for `options.usage` ('device',
   * the default, or 'shared') and the size; `options.shape` is kept as metadata.
   */
  Heap.prototype.malloc = function (size, options) {
    const usage = usageCode(options)
    const table = tableOf(this)
    let block
    try {
      block = delivering(this, () => mallocBlock(table, size, usage), true)
    } catch (err) {
      throw outOfMemory(this, toWgallocError(err, true), size)
    }
    const shape = options?.shape
    if (shape !== undefined && shape !== null) {
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
  function outOfMemory(heap, err, size) {
    if (err?.code !== 'OUT_OF_MEMORY') return err
    const details = oomDetails(err, size)
    details.snapshotPath = writeOomSnapshot(heap, details)
    err.details = details
    const listeners = heap[kState]?.listeners.OUT_OF_MEMORY
    if (listeners) {
      const event = { kind: 'OUT_OF_MEMORY', ...details }
      for (const fn of listeners) fn(event)
    }
    return err
  }

  /** A block from the scalar pool already holding `value` (1 byte to 64 KiB). */
  Heap.prototype.allocScalar = function (value) {
    const table = tableOf(this)
    return delivering(this, () => scalarBlock(table, value), true)
  }
  /** Frees `block` (same as `block.free()`), checking that it belongs to this heap. */
  Heap.prototype.free = function (block) {
    if (!(block instanceof DeviceBlock)) throw new WgallocError('INVALID_ARGUMENT', 'heap.free: pass a DeviceBlock from heap.malloc()')
    // Another heap object of the same device (a Gpu.attach) frees it too; another device cannot.
    if (heapOf(block) !== this && !sameHeapAs(this, heapOf(block)))
      throw new WgallocError('INVALID_ARGUMENT', "heap.free: the block belongs to another device's heap")
    return block.free()
  }
  const blockFree = DeviceBlock.prototype.free
  DeviceBlock.prototype.free = function () {
    const heap = heapOf(this)
    return busy(heap) ? delivering(heap, () => blockFree.call(this)) : blockFree.call(this)
  }

  addSignal(DeviceBlock.prototype, 'read', 2)
  // `{ as: Float32Array }` returns that typed array instead of bytes.
  const readBytes = DeviceBlock.prototype.read
  DeviceBlock.prototype.read = function (offset, length, options) {
    try {
      const as = options?.as
      checkAs(as, 'read')
      const bytes = readBytes.call(this, offset, length, options)
      return as === undefined ? bytes : bytes.then((b) => asTyped(b, as, 'read'))
    } catch (err) {
      return Promise.reject(err)
    }
  }
  DeviceBlock.prototype[dispose] = function () {
    if (!this.freed) this.free()
  }

  Heap.prototype[inspect.custom] = function () {
    const s = this.stats()
    return `Heap { allocated: ${s.allocatedBytes.current}, reserved: ${s.reservedBytes.current}, activeBlocks: ${s.activeBlocks.current}, segments: ${s.segments.current} }`
  }
  DeviceBlock.prototype[inspect.custom] = function () {
    if (this.freed) return `DeviceBlock { id: ${this.id}, freed }`
    return `DeviceBlock { id: ${this.id}, size: ${this.size}, requestedSize: ${this.requestedSize}, offset: ${this.offset}, pool: '${this.pool}' }`
  }
}

module.exports = { installHeap, EVENT_KINDS, tableOf }
