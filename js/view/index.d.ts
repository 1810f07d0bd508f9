// Types of `wgalloc/view`: HTML pages for heap snapshots, alloc/free traces,
// memory plans and profiler traces, and the memory-history recorder they draw.

import type { Heap, SnapshotSegment } from '../index.js'

/** What `detectKind` finds: a heap snapshot, an alloc/free trace, a plan or a profiler trace. */
export type ViewKind = 'snapshot' | 'trace' | 'plan' | 'profile'
/** Each kind with a description of the JSON it accepts. */
export declare const VIEW_KINDS: Readonly<Record<ViewKind, string>>

export interface RenderHtmlOptions {
  /** Page title (default: from the input). */
  title?: string
  /** Skip detection. */
  kind?: ViewKind
}

/**
 * One self-contained HTML page (inline CSS, JS and data; no network) for `json`.
 * Throws `INVALID_ARGUMENT` for JSON of no known kind or with a malformed field.
 */
export declare function renderHtml(json: unknown, options?: RenderHtmlOptions): string
/** The kind of `json`, read from its shape; `INVALID_ARGUMENT` naming the accepted kinds otherwise. */
export declare function detectKind(json: unknown): ViewKind
/** Parses a JSON file: `IO_ERROR` when unreadable, `PARSE_ERROR` naming the file when not JSON. */
export declare function readJsonFile(path: string): unknown

export type MemoryHistoryEntry =
  | {
      action: 'alloc'
      t: number
      blockId: number
      segmentId: number
      offset: number | null
      size: number
      pool: string
      requestedSize?: number
      shape?: number[]
      label?: string
    }
  | { action: 'free'; t: number; blockId: number }
  | { action: 'segment_alloc'; t: number; segmentId: number; size: number; pool: string; dedicated: boolean }
  | { action: 'segment_free'; t: number; segmentId: number }
  | { action: 'oom'; t: number; size: number; pool: string }

/** A heap snapshot with the history that led to it (`t`: ms since recording started). */
export interface MemoryHistorySnapshot {
  format: 'wgalloc-memory-history'
  version: 1
  segments: SnapshotSegment[]
  history: MemoryHistoryEntry[]
  title?: string
}

export interface MemoryRecorder {
  /** Names a live block (shown on hover in the page). */
  label(blockId: number, text: string): void
  /** The heap now, with everything recorded so far (plain JSON). */
  snapshot(): MemoryHistorySnapshot
  /** Removes the heap listeners. */
  stop(): void
}

/** Records `heap`'s allocator events (PyTorch's `_record_memory_history`); blocks that exist already come first. */
export declare function recordMemoryHistory(heap: Heap): MemoryRecorder

export type TraceEvent = { op: 'alloc'; id: string | number; size: number } | { op: 'free'; id: string | number }
export interface AllocFreeTrace {
  events: TraceEvent[]
  model?: string
  trace?: string
  requests?: number
  peakLiveBytes?: number
}

/** Replays an alloc/free trace through `heap` (which should be empty), each block labelled with its trace id. */
export declare function replayHistory(heap: Heap, trace: AllocFreeTrace): MemoryHistorySnapshot & { replayOf: { events: number; peakLiveBytes?: number } }
