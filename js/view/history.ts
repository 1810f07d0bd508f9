// Memory history for the viewer, modelled on PyTorch's `_record_memory_history` +
// `_snapshot()`: the heap's own history (heap.recordHistory) with names for blocks, and the
// replay of an alloc/free trace through a real heap, each block named by its trace id.
import { shown, stringifyInput, invalidArgument } from '../errors.js'
import type { Heap } from '../heap.js'
import type { MemorySnapshot, RecordHistoryOptions } from '../heap-history.js'
import type { DeviceBlock } from '../device-block.js'
import { type Trace, checkTrace, simulate } from '../replay.js'

/** A memory snapshot as the viewer reads it, with an optional page title. */
export interface MemoryHistorySnapshot extends MemorySnapshot {
  /** Page title. */
  title?: string
  /** For a replayed trace: what was replayed. */
  replayOf?: ReplayedTrace
}

/** The trace a memory history replayed. */
export interface ReplayedTrace {
  /** Events in the trace. */
  events: number
  /** The trace's peak live bytes, where it says. */
  peakLiveBytes?: number
}

/** What `recordMemoryHistory()` returns. */
export interface MemoryRecorder {
  /** Names block `blockId` (shown on hover in the viewer). */
  label(blockId: number, text: string): void
  /** The segments and the events so far, JSON-ready. */
  snapshot(): MemoryHistorySnapshot
  /** Stops recording. */
  stop(): void
}

/**
 * Starts recording `heap`'s memory history (`heap.recordHistory`; blocks and segments that
 * exist already are recorded first) and lets the caller name blocks for the viewer.
 */
export function recordMemoryHistory(heap: Heap, options?: RecordHistoryOptions): MemoryRecorder {
  if (!heap || typeof heap !== 'object' || typeof (heap as Partial<Heap>).recordHistory !== 'function') {
    throw invalidArgument('heap', 'a heap (gpu.heap)', shown(heap), 'recordMemoryHistory: pass a heap')
  }
  heap.recordHistory(options)
  const labels = new Map<number, string>()
  return {
    label(blockId, text) {
      labels.set(blockId, String(text))
    },
    snapshot() {
      const snap = heap.memorySnapshot()
      for (const e of snap.history) {
        const label = e.action === 'alloc' && e.blockId !== undefined ? labels.get(e.blockId) : undefined
        if (label !== undefined) e.label = label
      }
      return snap
    },
    stop() {
      heap.recordHistory(false)
    },
  }
}

/**
 * Replays an alloc/free trace (bench/data/traces format) through `heap` while recording, each
 * block labelled with its trace id. The heap should start empty.
 */
export function replayHistory(heap: Heap, trace: Trace): MemoryHistorySnapshot {
  return replayOnHeap(heap, trace, false)
}

/**
 * `replayHistory`; with `skipFailed`, an allocation that fails with OUT_OF_MEMORY is left out
 * (the heap records it as an `oom` event, the viewer's marker) and its free is skipped, as the
 * simulator does, so the replay goes on to the end of the trace.
 * @internal
 */
export function replayOnHeap(heap: Heap, trace: Trace, skipFailed: boolean): MemoryHistorySnapshot {
  if (!heap || typeof heap !== 'object' || typeof (heap as Partial<Heap>).malloc !== 'function') {
    throw invalidArgument('heap', 'a heap (gpu.heap)', shown(heap), 'replayHistory: pass a heap')
  }
  if (!trace || !Array.isArray(trace.events)) {
    throw invalidArgument(
      'trace.events',
      'an array of { op: "alloc", id, size } | { op: "free", id }',
      shown(trace?.events),
      'a trace is an object with an events array',
    )
  }
  // The trace's rules are the core's (wgalloc-core replay::Trace): a bad event is refused, named,
  // before anything is allocated.
  checkTrace(trace)
  // The replay records on the heap and stops at the end: it must not take over a recording.
  if (heap.recordingHistory) {
    throw invalidArgument(
      'heap',
      'a heap not recording its history',
      'one recording',
      'replayHistory: stop that first (heap.recordHistory(false)) or replay on another device',
    )
  }
  heap.emptyCache()
  const recorder = recordMemoryHistory(heap, { stacks: false })
  const live = new Map<string | number, DeviceBlock>()
  const refused = new Set<string | number>() // ids whose allocation failed (skipFailed), until their free
  try {
    for (const [i, e] of trace.events.entries()) {
      if (e.op === 'alloc') {
        if (!Number.isSafeInteger(e.size) || (e.size as number) < 0) throw invalidArgument(`trace event ${i}.size`, 'a non-negative integer', shown(e.size))
        if (live.has(e.id) || refused.has(e.id))
          throw invalidArgument(`trace event ${i}.id`, 'an id not live', shown(e.id), 'the id is allocated again while live')
        let block: DeviceBlock
        try {
          block = heap.malloc(Math.max(e.size as number, 1))
        } catch (err) {
          if (!skipFailed || (err as { code?: unknown }).code !== 'OUT_OF_MEMORY') throw err
          refused.add(e.id)
          continue
        }
        recorder.label(block.id, String(e.id))
        live.set(e.id, block)
      } else if (e.op === 'free') {
        if (refused.delete(e.id)) continue
        const block = live.get(e.id)
        if (!block) throw invalidArgument(`trace event ${i}.id`, 'the id of a live allocation', shown(e.id), 'the event frees an unknown id')
        live.delete(e.id)
        block.free()
      } else {
        throw invalidArgument(`trace event ${i}.op`, '"alloc" or "free"', shown(e.op))
      }
    }
    const snap = recorder.snapshot()
    const title = [trace.model, trace.trace, (trace.requests ?? 1) > 1 ? `${trace.requests} requests` : null].filter(Boolean).join(' · ')
    return { ...snap, title: title || undefined, replayOf: { events: trace.events.length, peakLiveBytes: trace.peakLiveBytes } }
  } finally {
    for (const b of live.values()) b.free()
    recorder.stop()
  }
}

/** The budget a replay for the viewer runs under by default: the simulator's default device. */
export const VIEW_REPLAY_BUDGET = 8 * 2 ** 30

/** Options of `replayOnHost()`. */
export interface HostReplayOptions {
  /** Bytes the replay may hold (default `VIEW_REPLAY_BUDGET`). */
  budget?: number
  /** Offset alignment of the device it stands for (a power of two; default 256). */
  alignment?: number
}

/** What a replay on host storage found, for the viewer's memory page. */
export interface HostReplay {
  budget: number
  alignment: number
  /** Indices in `events` of the allocations that did not fit: the page's out-of-memory markers. */
  failed: number[]
  /** The heap's policy on the same events under the same budget (host storage, no device). */
  heap: { peakReservedBytes: number; peakAllocatedBytes: number; driverAllocations: number; failedAllocations: number }
}

/**
 * Replays an alloc/free trace for the viewer without a device: nothing is allocated on a GPU
 * and nothing is held but bookkeeping, so an untrusted file costs no device memory whatever
 * its sizes. The heap's policy runs once on host storage (the simulator of `wgalloc replay
 * --simulate`, which also checks the trace) with `budget` as the device's capacity, for the
 * reserved bytes and the count of refused allocations. The markers come from one pass here:
 * an allocation fails when its bytes (rounded up to the alignment, as the heap rounds them)
 * beside those live would exceed the budget, which no placement can avoid; it is left out and
 * its free skipped, as the simulator does. The simulator's binding gives totals, not which
 * events failed, so the heap's own count can be higher (segment granularity, fragmentation);
 * the page shows both.
 * @internal
 */
export function replayOnHost(trace: unknown, options: HostReplayOptions = {}): HostReplay {
  const budget = options.budget ?? VIEW_REPLAY_BUDGET
  if (!Number.isSafeInteger(budget) || budget <= 0) throw invalidArgument('options.budget', 'a positive integer of bytes (the replay budget)', shown(budget))
  const alignment = options.alignment ?? 256
  const text = typeof trace === 'string' ? trace : stringifyInput(trace ?? null, 'the trace')
  // Checks the trace first (INVALID_ARGUMENT naming a bad event), then nothing below can fail.
  const sim = simulate(text, { budget, capacity: budget, alignment })
  const events = (typeof trace === 'string' ? JSON.parse(text) : trace) as Trace
  const failed: number[] = []
  const live = new Map<string, number>() // id -> bytes held
  let held = 0
  for (const [i, e] of events.events.entries()) {
    const key = String(e.id)
    if (e.op === 'alloc') {
      const bytes = Math.ceil(Math.max(e.size ?? 0, 1) / alignment) * alignment
      if (held + bytes > budget) failed.push(i)
      else {
        live.set(key, bytes)
        held += bytes
      }
    } else {
      held -= live.get(key) ?? 0
      live.delete(key)
    }
  }
  return {
    budget,
    alignment,
    failed,
    heap: {
      peakReservedBytes: sim.peakReservedBytes,
      peakAllocatedBytes: sim.peakAllocatedBytes ?? 0,
      driverAllocations: sim.driverAllocations,
      failedAllocations: sim.failedAllocations ?? 0,
    },
  }
}
