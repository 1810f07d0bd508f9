// Allocator events and debug logs of one heap object, delivered to its listeners (and the
// `wgalloc:heap` channel) after each call that can allocate or free. The native heap records
// events only while someone listens, so the common case costs one check per call.
import { type Binding, native, type NativeHeapTable } from './internal/native.js'
import type { HeapEvent } from './binding.js'
import type { PoolName } from './device-block.js'
import { channels, warn } from './diagnostics.js'
import { type WgallocError, messageOf, shown, toWgallocError, type OutOfMemoryDetails, invalidArgument } from './errors.js'
import type { Heap } from './heap.js'
import type { HeapHistory } from './heap-history.js'

/**
 * Allocator event kinds delivered by `heap.on()`. `MOVED`: the heap moved a live block to make
 * room, to another segment or within its own (`segmentId` and `offset` say where it is now).
 */
export type HeapEventKind = HeapEvent['kind']

/** What `heap.on('OUT_OF_MEMORY', ...)` listeners get, after the ladder gave up and before `malloc()` throws. */
export interface OutOfMemoryEvent extends OutOfMemoryDetails {
  /** Always `OUT_OF_MEMORY`. */
  kind: 'OUT_OF_MEMORY'
}

type Listener = (event: HeapEvent) => void
type OomListener = (event: OutOfMemoryEvent) => void

const channel = channels.heap
/** With only a memory history listening, the native event queue is drained every this many calls. */
const DRAIN_EVERY = 1024
// The core's tables, in the order `heapTakeEvents` numbers kinds and pools (src/block_ids.rs).
const TABLES = native.constantTables()
// OUT_OF_MEMORY is not among them: it comes from the facade, not the native event log.
export const NUMBERED_KINDS = TABLES.heapEventKinds as readonly HeapEventKind[]
type AnyKind = HeapEventKind | 'OUT_OF_MEMORY'
/** Every kind `heap.on()` takes: the core's, and OUT_OF_MEMORY, which the facade raises. */
export const EVENT_KINDS: readonly AnyKind[] = [...NUMBERED_KINDS, 'OUT_OF_MEMORY']
/** Pool names by the index native calls report them with. */
export const POOL_NAMES = TABLES.pools as readonly PoolName[]

/** Numbers per event in `heapTakeEvents`: kind, block, segment, offset, size, pool. */
export const EVENT_NUMBERS = 6
/** Events moved per `heapTakeEvents` call (a drain takes as many calls as it needs). */
const EVENTS_PER_TAKE = 2 * DRAIN_EVERY
const { heapTakeEvents } = native

/** Native events from their packed form. */
function unpack(numbers: Float64Array): HeapEvent[] {
  const events: HeapEvent[] = []
  for (let i = 0; i + EVENT_NUMBERS <= numbers.length; i += EVENT_NUMBERS) {
    const e: HeapEvent = { kind: NUMBERED_KINDS[numbers[i]], size: numbers[i + 4], pool: POOL_NAMES[numbers[i + 5]] }
    if (numbers[i + 1] >= 0) e.blockId = numbers[i + 1]
    if (numbers[i + 2] >= 0) e.segmentId = numbers[i + 2]
    if (numbers[i + 3] >= 0) e.offset = numbers[i + 3]
    events.push(e)
  }
  return events
}

function checkKind(kind: unknown): asserts kind is AnyKind {
  if (!(EVENT_KINDS as readonly unknown[]).includes(kind)) throw invalidArgument('event', `one of ${EVENT_KINDS.join(', ')}`, shown(kind), 'unknown heap event')
}

/**
 * Note [Listeners are isolated]: a heap listener or logger runs inside the call that caused
 * its event, after the heap has done its work (a malloc has its block, a scope its charge).
 * An exception it throws must not change what that call returns: the caller would lose the
 * block it was handed, and a scope would roll back a charge for memory still live. So each
 * listener runs alone, and what it throws is reported as a `warning` on `wgalloc:device`.
 */
function isolated(kind: string, call: () => void): void {
  try {
    call()
  } catch (err) {
    warn(`a heap '${kind}' listener threw (ignored; the call it listened to went on): ${messageOf(err)}`, { error: err })
  }
}

export class HeapEvents {
  readonly #native: Binding.Heap & NativeHeapTable
  readonly #owner: Heap
  readonly #listeners = new Map<AnyKind, Set<Listener | OomListener>>(EVENT_KINDS.map((k) => [k, new Set()]))
  /** Kinds whose listeners are running now (see #calling). */
  readonly #running = new Set<AnyKind>()
  #logger: ((line: string) => void) | null = null
  #history: HeapHistory | null = null
  // Calls since the native queue was last drained for the memory history alone.
  #undrained = 0
  // Whether a listener or logger is set (the channel is checked per call).
  #active = false
  // Whether a memory history is set and nothing else listens (the channel is checked per call).
  #historyOnly = false
  // Whether the channel had subscribers when recording was last set: a channel subscriber
  // can come and go between any two calls.
  #channelSeen = false
  // Where `heapTakeEvents` writes; made on the first drain.
  #numbers: Float64Array | null = null

  constructor(heap: Binding.Heap & NativeHeapTable, owner: Heap) {
    this.#native = heap
    this.#owner = owner
  }

  on(kind: unknown, fn: unknown): void {
    checkKind(kind)
    if (typeof fn !== 'function') throw invalidArgument('listener', 'a function', shown(fn))
    this.#listeners.get(kind)?.add(fn as Listener)
    this.#sync()
  }

  off(kind: unknown, fn: unknown): void {
    checkKind(kind)
    this.#listeners.get(kind)?.delete(fn as Listener)
    this.#sync()
  }

  setLogger(fn: unknown): void {
    if (fn == null) this.#logger = null
    else if (typeof fn === 'function') this.#logger = fn as (line: string) => void
    else throw invalidArgument('logger', 'a function or null', shown(fn))
    this.#sync()
  }

  /** The memory history being recorded, or null. */
  get history(): HeapHistory | null {
    return this.#history
  }

  /** Starts (or, with null, stops) feeding allocator events to a memory history. */
  setHistory(history: HeapHistory | null): void {
    this.drain()
    this.#history = history
    this.#sync()
  }

  #othersListening(): boolean {
    return NUMBERED_KINDS.some((k) => (this.#listeners.get(k)?.size ?? 0) > 0)
  }

  #listening(): boolean {
    return this.#history !== null || NUMBERED_KINDS.some((k) => (this.#listeners.get(k)?.size ?? 0) > 0) || channel.hasSubscribers
  }

  #sync(): void {
    this.#active = this.#history !== null || this.#logger !== null || EVENT_KINDS.some((k) => (this.#listeners.get(k)?.size ?? 0) > 0)
    this.#historyOnly = this.#history !== null && this.#logger === null && !this.#othersListening() && !(this.#listeners.get('ALLOCATION_FAILED')?.size ?? 0)
    this.#channelSeen = channel.hasSubscribers
    this.#native.setEventRecording(this.#listening(), this.#logger !== null)
  }

  /**
   * Whether a memory history is the only consumer: calls then skip the per-call delivery and
   * call `tick()`, which drains the native queue in batches.
   */
  get historyOnly(): boolean {
    return this.#historyOnly && !channel.hasSubscribers
  }

  /** One call's worth of events for a history alone: drained every DRAIN_EVERY calls. */
  tick(): void {
    if (++this.#undrained >= DRAIN_EVERY) this.drain()
  }

  /** Whether events may need delivering around a call: nothing to do in the common case. */
  get busy(): boolean {
    return this.#active || this.#channelSeen || channel.hasSubscribers
  }

  /** Delivers everything the native heap recorded (before a report reads the history). */
  drain(): void {
    this.#undrained = 0
    this.#dispatch(true)
  }

  /** Delivers what the native heap recorded during the last call(s). */
  #dispatch(now = false): void {
    if (!this.#listening() && this.#logger === null) return
    // A history alone takes its events in batches; listeners and loggers get them at once.
    if (!now && this.#history !== null && this.#logger === null && !channel.hasSubscribers && !this.#othersListening()) {
      if (++this.#undrained < DRAIN_EVERY) return
      this.#undrained = 0
    }
    const segment = (id: number) => this.#native.snapshot().find((seg) => seg.id === id)
    if (this.#logger) {
      const batch = this.#native.takeEvents()
      const logger = this.#logger
      for (const line of batch.logs) isolated('logger', () => logger(line))
      const events = batch.events
      for (const e of events) this.#history?.event(e, segment)
      this.#deliver(events)
    } else {
      // Without a logger, numbers written into one reused typed array instead of an object per
      // event (much cheaper); a history alone stores the numbers as they are.
      this.#numbers ??= new Float64Array(EVENTS_PER_TAKE * EVENT_NUMBERS)
      for (;;) {
        const n = heapTakeEvents(this.#native.slot, this.#numbers)
        if (n === 0) return
        const numbers = this.#numbers.subarray(0, n * EVENT_NUMBERS)
        this.#history?.eventNumbers(numbers, segment)
        if (channel.hasSubscribers || this.#othersListening()) this.#deliver(unpack(numbers))
        if (n < EVENTS_PER_TAKE) return
      }
    }
  }

  #deliver(events: HeapEvent[]): void {
    for (const e of events) {
      if (channel.hasSubscribers) channel.publish({ ...e, heap: this.#owner })
      const listeners = this.#listeners.get(e.kind as AnyKind)
      if (listeners?.size)
        this.#calling(e.kind as AnyKind, () => {
          for (const fn of listeners) isolated(e.kind, () => (fn as Listener)(e))
        })
    }
  }

  /**
   * Runs `call` (the listeners of `kind`) unless they are running already: an event of a kind
   * that a listener's own call raises (an ALLOCATION_FAILED or OUT_OF_MEMORY listener that
   * mallocs from a full heap) would call it again, without end. The listener gets its call's error.
   */
  #calling(kind: AnyKind, call: () => void): void {
    if (this.#running.has(kind)) return
    this.#running.add(kind)
    try {
      call()
    } finally {
      this.#running.delete(kind)
    }
  }

  /**
   * Runs `fn`, a call that can allocate or free, and delivers the events it caused. With
   * `memoryState` (a malloc's), an OUT_OF_MEMORY that ALLOCATION_FAILED listeners were told of
   * is retried once if they freed memory (`memoryState` changed): a retry of a heap they left
   * as it was would only fail again, and count and report the failure twice.
   */
  delivering<T>(fn: () => T, memoryState?: () => string): T {
    if (!this.busy) return fn()
    // Follow channel (un)subscriptions.
    if (this.#channelSeen !== channel.hasSubscribers) this.#sync()
    try {
      return fn()
    } catch (err) {
      if (memoryState === undefined) throw err
      const e = toWgallocError(err, true)
      if ((e as WgallocError).code !== 'OUT_OF_MEMORY' || !this.#listeners.get('ALLOCATION_FAILED')?.size) throw e
      const before = memoryState()
      this.#dispatch() // ALLOCATION_FAILED listeners may free memory now
      if (memoryState() === before) throw e
      return fn()
    } finally {
      this.#dispatch()
    }
  }

  /** Tells OUT_OF_MEMORY listeners of a failed malloc. */
  outOfMemory(details: OutOfMemoryDetails): void {
    const event: OutOfMemoryEvent = { kind: 'OUT_OF_MEMORY', ...details }
    const listeners = this.#listeners.get('OUT_OF_MEMORY')
    if (listeners?.size)
      this.#calling('OUT_OF_MEMORY', () => {
        for (const fn of listeners) isolated('OUT_OF_MEMORY', () => (fn as OomListener)(event))
      })
  }
}
