// Memory history with JS stacks (PyTorch `_record_memory_history`): allocator events in a
// bounded ring, the stack of every live block's malloc, and the leak report built from them.
import { performance } from 'node:perf_hooks'
import type { HeapEvent, SnapshotBlock, SnapshotSegment } from './binding.js'
import { WgallocError, shown } from './errors.js'

/** Options of `heap.recordHistory()`. */
export interface RecordHistoryOptions {
  /** Events kept in the ring, oldest dropped first (default 100 000; at most {@link MAX_HISTORY_ENTRIES}). */
  maxEntries?: number
  /** Record the JS stack of every malloc (default true): snapshots and leak reports name who allocated. */
  stacks?: boolean
}

/** The most events a history keeps; a larger `maxEntries` is capped to it. */
export const MAX_HISTORY_ENTRIES = 10_000_000
const DEFAULT_ENTRIES = 100_000

/** One entry of a memory history (the viewer's `wgalloc-memory-history` format). */
export interface HistoryEntry {
  /** What happened: a block allocated or freed (after its GPU work), a segment mapped or unmapped, a failed request. */
  action: 'alloc' | 'free' | 'segment_alloc' | 'segment_free' | 'oom'
  /** Milliseconds since recording started. */
  t: number
  /** The block (alloc, free). */
  blockId?: number
  /** The segment (alloc, segment_alloc, segment_free). */
  segmentId?: number
  /** Byte offset of the block in its segment (alloc). */
  offset?: number | null
  /** Bytes of the block, the segment or the failed request. */
  size?: number
  /** Pool name. */
  pool?: string
  /** The segment holds one large block only (segment_alloc). */
  dedicated?: boolean
  /** The JS stack of the malloc (alloc, with `stacks`). */
  stack?: string
  /** A name for the block, shown by the viewer (`recordMemoryHistory().label()`; `before recording` for blocks that existed already). */
  label?: string
}

/** A snapshot block with the JS stack of its malloc, where one was recorded. */
export interface HistorySnapshotBlock extends SnapshotBlock {
  /** The stack of the malloc that made the block (history recorded with `stacks`). */
  stack?: string
}

/** A segment of a memory snapshot. */
export interface HistorySnapshotSegment extends Omit<SnapshotSegment, 'blocks'> {
  /** Its ranges in offset order, active blocks with their stacks. */
  blocks: HistorySnapshotBlock[]
}

/** `heap.memorySnapshot()`: the segments with each live block's stack, and the event ring (`wgalloc view` draws it). */
export interface MemorySnapshot {
  /** Always `wgalloc-memory-history`. */
  format: 'wgalloc-memory-history'
  /** Format version. */
  version: 1
  /** Every segment with its blocks. */
  segments: HistorySnapshotSegment[]
  /** Events in order, oldest first (empty when history was never recorded). */
  history: HistoryEntry[]
}

/** Live blocks that share one allocation stack. */
export interface LeakGroup {
  /** The stack of their malloc (`(not recorded)` without history stacks). */
  stack: string
  /** Blocks. */
  count: number
  /** Their bytes. */
  bytes: number
  /** How many of them the garbage collector found unreachable without `free()`. */
  reclaimed: number
}

/** `heap.leakReport()`: blocks allocated and never freed, grouped by allocation stack, most bytes first. */
export interface LeakReport {
  /** Blocks still allocated (or reclaimed by the garbage collector without `free()`). */
  count: number
  /** Their bytes. */
  bytes: number
  /** By allocation stack, most bytes first. */
  groups: LeakGroup[]
}

const NOT_RECORDED = '(not recorded)'
/** Frames kept per allocation stack (capture cost grows with depth). */
const STACK_FRAMES = 8

// Frames of wgalloc itself (its compiled JS) and of Node's internals are not the user's.
const OWN_FRAME = new RegExp(`\\(?${__dirname.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}[\\\\/]|\\(node:|^\\s*at node:`)

/** `holder.stack`, trimmed to the caller's frames (formatting happens here, not at capture). */
function userStack(holder: { stack?: string }): string {
  const lines = (holder.stack ?? '').split('\n').slice(1)
  const user = lines.filter((l) => !OWN_FRAME.test(l)).map((l) => l.trim())
  return user.length > 0 ? user.join('\n') : NOT_RECORDED
}

interface LiveBlock {
  size: number
  holder: { stack?: string } | null
}

/** A ring entry with the malloc's stack kept unformatted until a report reads it. */
type Recorded = HistoryEntry & { holder?: { stack?: string } | null }

/**
 * What a heap records while `recordHistory()` is on. Allocator events reach it in batches (the
 * heap drains the native queue every DRAIN_EVERY calls, and before any report), so the cost per
 * malloc is two map writes, and the stack capture when asked for; `t` is when a batch arrived.
 */
export class HeapHistory {
  readonly #max: number
  readonly #stacks: boolean
  readonly #t0 = performance.now()
  readonly #ring: Recorded[] = []
  #start = 0 // index of the oldest entry once the ring wrapped
  readonly #live = new Map<number, LiveBlock>()
  // Mallocs whose allocator event has not arrived yet: offset and stack for the alloc entry.
  readonly #fresh = new Map<number, { offset: number; holder: { stack?: string } | null }>()
  readonly #segments = new Set<number>()
  readonly #reclaimed: LiveBlock[] = []

  constructor(options: unknown) {
    if (options != null && typeof options !== 'object') throw new WgallocError('INVALID_ARGUMENT', 'recordHistory: options must be { maxEntries?, stacks? }')
    const { maxEntries = DEFAULT_ENTRIES, stacks = true } = (options ?? {}) as RecordHistoryOptions
    if (typeof maxEntries !== 'number' || !Number.isSafeInteger(maxEntries) || maxEntries <= 0) {
      throw new WgallocError('INVALID_ARGUMENT', `recordHistory: maxEntries must be a positive integer, got ${shown(maxEntries)}`)
    }
    if (typeof stacks !== 'boolean') throw new WgallocError('INVALID_ARGUMENT', `recordHistory: stacks must be a boolean, got ${shown(stacks)}`)
    this.#max = Math.min(maxEntries, MAX_HISTORY_ENTRIES)
    this.#stacks = stacks
  }

  /** Entries the ring keeps (the request capped at MAX_HISTORY_ENTRIES). */
  get maxEntries(): number {
    return this.#max
  }

  /** Segments and blocks that exist when recording starts. */
  seed(segments: SnapshotSegment[]): void {
    for (const s of segments) {
      this.#push({ action: 'segment_alloc', t: 0, segmentId: s.id, size: s.size, pool: s.pool, dedicated: s.dedicated })
      this.#segments.add(s.id)
      for (const b of s.blocks) {
        if (b.state === 'free') continue
        this.#push({ action: 'alloc', t: 0, blockId: b.blockId, segmentId: s.id, offset: b.offset, size: b.size, pool: s.pool, label: 'before recording' })
        this.#live.set(b.blockId, { size: b.size, holder: null })
      }
    }
  }

  #now(): number {
    return Math.round((performance.now() - this.#t0) * 1000) / 1000
  }

  #push(entry: Recorded): void {
    if (this.#ring.length < this.#max) this.#ring.push(entry)
    else {
      this.#ring[this.#start] = entry
      this.#start = (this.#start + 1) % this.#max
    }
  }

  /**
   * Captures the caller's stack for the next malloc, from the frame that called `above` (the
   * public method: wgalloc's own frames are left out at capture, not trimmed later). Only
   * STACK_FRAMES frames are kept, and V8 formats them only when a report reads them.
   */
  capture(above: (...args: never[]) => unknown): { stack?: string } | null {
    if (!this.#stacks) return null
    const holder: { stack?: string } = {}
    const limit = Error.stackTraceLimit
    Error.stackTraceLimit = STACK_FRAMES
    Error.captureStackTrace(holder, above)
    Error.stackTraceLimit = limit
    return holder
  }

  /** A malloc returned block `id` of `size` bytes at `offset`. */
  allocated(id: number, size: number, offset: number, holder: { stack?: string } | null): void {
    this.#live.set(id, { size, holder })
    this.#fresh.set(id, { offset, holder })
  }

  /** `free()` ran on block `id`: it is no longer the caller's (its memory returns after its GPU work). */
  released(id: number): void {
    this.#live.delete(id)
  }

  /** The garbage collector found block `id` unreachable without `free()`: a leak. */
  reclaimed(id: number): void {
    const block = this.#live.get(id)
    if (!block) return
    this.#live.delete(id)
    this.#reclaimed.push(block)
  }

  /** Records a native allocator event; `segmentSize` looks up a new segment's size. */
  event(e: HeapEvent, segmentSize: (id: number) => SnapshotSegment | undefined): void {
    const t = this.#now()
    switch (e.kind) {
      case 'ALLOCATED':
      case 'RECYCLED': {
        if (e.segmentId !== undefined && !this.#segments.has(e.segmentId)) {
          this.#segments.add(e.segmentId)
          const s = segmentSize(e.segmentId)
          this.#push({ action: 'segment_alloc', t, segmentId: e.segmentId, size: s?.size ?? e.size, pool: e.pool, dedicated: s?.dedicated ?? false })
        }
        const fresh = e.blockId === undefined ? undefined : this.#fresh.get(e.blockId)
        if (fresh) this.#fresh.delete(e.blockId as number)
        this.#push({
          action: 'alloc',
          t,
          blockId: e.blockId,
          segmentId: e.segmentId,
          offset: fresh?.offset ?? null,
          size: e.size,
          pool: e.pool,
          holder: fresh?.holder,
        })
        break
      }
      case 'FREED':
        this.#push({ action: 'free', t, blockId: e.blockId })
        break
      case 'RELEASED':
        if (e.segmentId !== undefined) this.#segments.delete(e.segmentId)
        this.#push({ action: 'segment_free', t, segmentId: e.segmentId, size: e.size, pool: e.pool })
        break
      case 'ALLOCATION_FAILED':
        this.#push({ action: 'oom', t, size: e.size, pool: e.pool })
        break
    }
  }

  /** The stack recorded for live block `id`, if any. */
  stackOf(id: number): string | undefined {
    const holder = this.#live.get(id)?.holder
    return holder ? userStack(holder) : undefined
  }

  /** The ring, oldest first, with each alloc's stack formatted. */
  entries(): HistoryEntry[] {
    const ordered = [...this.#ring.slice(this.#start), ...this.#ring.slice(0, this.#start)]
    return ordered.map(({ holder, ...e }) => (holder ? { ...e, stack: userStack(holder) } : e))
  }

  /** Live blocks (and those the GC reclaimed) grouped by allocation stack. */
  leaks(): LeakReport {
    const groups = new Map<string, LeakGroup>()
    const add = (b: LiveBlock, reclaimed: boolean) => {
      const stack = b.holder ? userStack(b.holder) : NOT_RECORDED
      const g = groups.get(stack) ?? { stack, count: 0, bytes: 0, reclaimed: 0 }
      g.count++
      g.bytes += b.size
      if (reclaimed) g.reclaimed++
      groups.set(stack, g)
    }
    for (const b of this.#live.values()) add(b, false)
    for (const b of this.#reclaimed) add(b, true)
    const list = [...groups.values()].sort((a, b) => b.bytes - a.bytes)
    return { count: list.reduce((n, g) => n + g.count, 0), bytes: list.reduce((n, g) => n + g.bytes, 0), groups: list }
  }
}

/** The leak report as text, for stderr. */
export function formatLeakReport(report: LeakReport, device: string): string {
  if (report.count === 0) return ''
  const lines = [`wgalloc: ${report.count} block(s), ${report.bytes} bytes never freed on ${device}:`]
  for (const g of report.groups) {
    lines.push(`  ${g.count} block(s), ${g.bytes} bytes${g.reclaimed ? ` (${g.reclaimed} reclaimed by the garbage collector)` : ''}, allocated at:`)
    for (const frame of g.stack.split('\n').slice(0, 8)) lines.push(`      ${frame}`)
  }
  return `${lines.join('\n')}\n`
}
