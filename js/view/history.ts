// Memory history for the viewer, modelled on PyTorch's `_record_memory_history` +
// `_snapshot()`: the heap's own history (heap.recordHistory) with names for blocks, and the
// replay of an alloc/free trace through a real heap, each block named by its trace id.
import { WgallocError } from '../errors.js'
import type { Heap } from '../heap.js'
import type { MemorySnapshot, RecordHistoryOptions } from '../heap-history.js'
import type { DeviceBlock } from '../device-block.js'
import type { Trace } from '../replay.js'

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
    throw new WgallocError('INVALID_ARGUMENT', 'recordMemoryHistory: pass a heap (gpu.heap)')
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
  if (!trace || !Array.isArray(trace.events)) {
    throw new WgallocError('INVALID_ARGUMENT', 'a trace is an object with an events array of { op: "alloc", id, size } | { op: "free", id }')
  }
  // The replay records on the heap and stops at the end: it must not take over a recording.
  if (heap.recordingHistory) {
    throw new WgallocError(
      'INVALID_ARGUMENT',
      'replayHistory: this heap is recording its history; stop that first (heap.recordHistory(false)) or replay on another device',
    )
  }
  heap.emptyCache()
  const recorder = recordMemoryHistory(heap, { stacks: false })
  const live = new Map<string | number, DeviceBlock>()
  try {
    for (const [i, e] of trace.events.entries()) {
      if (e.op === 'alloc') {
        if (!Number.isSafeInteger(e.size) || (e.size as number) < 0)
          throw new WgallocError('INVALID_ARGUMENT', `trace event ${i}: size must be a non-negative integer`)
        if (live.has(e.id)) throw new WgallocError('INVALID_ARGUMENT', `trace event ${i}: id ${String(e.id)} is allocated again while live`)
        const block = heap.malloc(Math.max(e.size as number, 1))
        recorder.label(block.id, String(e.id))
        live.set(e.id, block)
      } else if (e.op === 'free') {
        const block = live.get(e.id)
        if (!block) throw new WgallocError('INVALID_ARGUMENT', `trace event ${i} frees unknown id ${e.id}`)
        live.delete(e.id)
        block.free()
      } else {
        throw new WgallocError('INVALID_ARGUMENT', `trace event ${i}: op must be "alloc" or "free"`)
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
