'use strict'
// JS side of the heap: one Heap object per Gpu, allocator events and debug logs
// delivered to listeners (and node:diagnostics_channel) after each call, the
// ALLOCATION_FAILED retry, disposal and inspect output.
const { inspect } = require('node:util')
const diagnostics = require('node:diagnostics_channel')
const { memoizeGetter } = require('./memo.cjs')
const { shown } = require('./errors.cjs')

const EVENT_KINDS = ['ALLOCATED', 'RECYCLED', 'FREED', 'RELEASED', 'ALLOCATION_FAILED']
/** Allocator events are also published here, for tools that listen process-wide. */
const channel = diagnostics.channel('wgalloc:heap')

function installHeap({ Gpu, Heap, DeviceBlock, addSignal, dispose, toWgallocError }) {
  memoizeGetter(Gpu.prototype, 'heap')

  const listeners = new WeakMap() // heap -> { kind -> Set<fn> }
  const loggers = new WeakMap() // heap -> fn
  const entry = (heap) => {
    let l = listeners.get(heap)
    if (!l) {
      l = Object.fromEntries(EVENT_KINDS.map((k) => [k, new Set()]))
      listeners.set(heap, l)
    }
    return l
  }
  const listening = (heap) => {
    const l = listeners.get(heap)
    return (l && EVENT_KINDS.some((k) => l[k].size > 0)) || channel.hasSubscribers
  }
  const syncRecording = (heap) => heap.setEventRecording(listening(heap), loggers.has(heap))

  /** Delivers what the native heap recorded during the last call. */
  function dispatch(heap) {
    if (!listening(heap) && !loggers.has(heap)) return
    const { events, logs } = heap.takeEvents()
    const logger = loggers.get(heap)
    if (logger) for (const line of logs) logger(line)
    const l = listeners.get(heap)
    for (const e of events) {
      if (channel.hasSubscribers) channel.publish(e)
      if (l) for (const fn of l[e.kind]) fn(e)
    }
  }

  /**
   * Listens for allocator events: 'ALLOCATED' | 'RECYCLED' | 'FREED' | 'RELEASED' |
   * 'ALLOCATION_FAILED'. An ALLOCATION_FAILED listener may free blocks; malloc then
   * retries once. Listeners run synchronously after the call that caused the event.
   * Returns a function that removes the listener.
   */
  const checkKind = (kind) => {
    if (!EVENT_KINDS.includes(kind)) throw toWgallocError(new Error(`[INVALID_ARGUMENT] unknown heap event ${shown(kind)}; use one of ${EVENT_KINDS.join(', ')}`))
  }
  Heap.prototype.on = function (kind, fn) {
    checkKind(kind)
    const l = entry(this)
    if (typeof fn !== 'function') throw toWgallocError(new Error('[INVALID_ARGUMENT] listener must be a function'))
    l[kind].add(fn)
    syncRecording(this)
    return () => this.off(kind, fn)
  }
  Heap.prototype.off = function (kind, fn) {
    checkKind(kind)
    listeners.get(this)?.[kind].delete(fn)
    syncRecording(this)
  }
  /** Routes `WGALLOC_DEBUG_ALLOCATOR` lines to `fn` instead of stderr (null restores stderr). */
  Heap.prototype.setLogger = function (fn) {
    if (fn == null) loggers.delete(this)
    else if (typeof fn === 'function') loggers.set(this, fn)
    else throw toWgallocError(new Error('[INVALID_ARGUMENT] logger must be a function or null'))
    syncRecording(this)
  }

  // Every call that can allocate or free delivers the events it caused.
  for (const name of ['free', 'emptyCache', 'freeInactiveBuffers']) {
    const original = Heap.prototype[name]
    Heap.prototype[name] = function (...args) {
      try {
        return original.apply(this, args)
      } finally {
        dispatch(this)
      }
    }
  }
  // Blocks remember their heap so `block.free()` can deliver the events it caused.
  const blockHeaps = new WeakMap()
  const malloc = Heap.prototype.malloc
  Heap.prototype.malloc = function (size, options) {
    let block
    try {
      block = malloc.call(this, size, options)
    } catch (err) {
      dispatch(this) // ALLOCATION_FAILED listeners may free memory now
      if (err.code !== 'OUT_OF_MEMORY' || !listeners.get(this)?.ALLOCATION_FAILED.size) throw err
      block = malloc.call(this, size, options)
    } finally {
      dispatch(this)
    }
    blockHeaps.set(block, this)
    return block
  }
  const allocScalar = Heap.prototype.allocScalar
  Heap.prototype.allocScalar = function (value) {
    try {
      const block = allocScalar.call(this, value)
      blockHeaps.set(block, this)
      return block
    } finally {
      dispatch(this)
    }
  }
  const blockFree = DeviceBlock.prototype.free
  DeviceBlock.prototype.free = function () {
    try {
      return blockFree.call(this)
    } finally {
      const heap = blockHeaps.get(this)
      if (heap) dispatch(heap)
    }
  }

  addSignal(DeviceBlock.prototype, 'read', 2)
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

module.exports = { installHeap, EVENT_KINDS, channel }
