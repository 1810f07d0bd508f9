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

type Holder = { stack?: string }

// Ring columns: one number per field and entry, so recording allocates no object per event.
const ACTIONS = ['alloc', 'free', 'segment_alloc', 'segment_free', 'oom'] as const
const A_ALLOC = 0
const A_FREE = 1
const A_SEGMENT_ALLOC = 2
const A_SEGMENT_FREE = 3
const A_OOM = 4
// Native event kinds, in the order `takeEventNumbers` numbers them (src/heap.rs).
const K_ALLOCATED = 0
const K_RECYCLED = 1
const K_FREED = 2
const K_RELEASED = 3
const K_FAILED = 4
const FIRST_CAPACITY = 4096

/**
 * What a heap records while `recordHistory()` is on. Allocator events reach it in batches (the
 * heap drains the native queue every DRAIN_EVERY calls, and before any report) as packed
 * numbers, stored in column arrays; a malloc costs two map writes (three with a stack), and
 * the stack capture when asked for. `t` is when a batch arrived.
 */
export class HeapHistory {
  readonly #max: number
  readonly #stacks: boolean
  readonly #pools: readonly string[]
  readonly #t0 = performance.now()
  // The ring: `#len` entries from `#start` (wrapping at `#max` once full).
  #cap = 0
  #len = 0
  #start = 0
  #action = new Uint8Array(0)
  #pool = new Uint8Array(0) // pool index + 1; 0 for none
  #flags = new Uint8Array(0) // 1: dedicated segment; 2: "before recording"
  #t = new Float64Array(0)
  #block = new Float64Array(0) // -1 for none
  #seg = new Float64Array(0) // -1 for none
  #offset = new Float64Array(0) // -1 for unknown
  #size = new Float64Array(0)
  readonly #holders = new Map<number, Holder>() // ring slot -> stack of its alloc entry
  // Live blocks of this heap's mallocs (for leaks and snapshots): size, and stack.
  readonly #liveSize = new Map<number, number>()
  readonly #liveStack = new Map<number, Holder>()
  // Mallocs whose allocator event has not arrived yet: offset (and stack) for the alloc entry.
  readonly #freshOffset = new Map<number, number>()
  readonly #freshStack = new Map<number, Holder>()
  readonly #segments = new Set<number>()
  readonly #reclaimed: { size: number; holder: Holder | undefined }[] = []

  constructor(options: unknown, pools: readonly string[]) {
    if (options != null && typeof options !== 'object') throw new WgallocError('INVALID_ARGUMENT', 'recordHistory: options must be { maxEntries?, stacks? }')
    const { maxEntries = DEFAULT_ENTRIES, stacks = true } = (options ?? {}) as RecordHistoryOptions
    if (typeof maxEntries !== 'number' || !Number.isSafeInteger(maxEntries) || maxEntries <= 0) {
      throw new WgallocError('INVALID_ARGUMENT', `recordHistory: maxEntries must be a positive integer, got ${shown(maxEntries)}`)
    }
    if (typeof stacks !== 'boolean') throw new WgallocError('INVALID_ARGUMENT', `recordHistory: stacks must be a boolean, got ${shown(stacks)}`)
    this.#max = Math.min(maxEntries, MAX_HISTORY_ENTRIES)
    this.#stacks = stacks
    this.#pools = pools
  }

  /** Entries the ring keeps (the request capped at MAX_HISTORY_ENTRIES). */
  get maxEntries(): number {
    return this.#max
  }

  #now(): number {
    return Math.round((performance.now() - this.#t0) * 1000) / 1000
  }

  /** Columns grow by doubling up to `#max` (a large limit costs nothing until it is used). */
  #grow(): void {
    const cap = Math.min(this.#max, Math.max(FIRST_CAPACITY, this.#cap * 2))
    const grow8 = (a: Uint8Array) => {
      const b = new Uint8Array(cap)
      b.set(a)
      return b
    }
    const grow64 = (a: Float64Array) => {
      const b = new Float64Array(cap)
      b.set(a)
      return b
    }
    this.#action = grow8(this.#action)
    this.#pool = grow8(this.#pool)
    this.#flags = grow8(this.#flags)
    this.#t = grow64(this.#t)
    this.#block = grow64(this.#block)
    this.#seg = grow64(this.#seg)
    this.#offset = grow64(this.#offset)
    this.#size = grow64(this.#size)
    this.#cap = cap
  }

  /** The ring slot for a new entry (the oldest one's once full). */
  #slot(): number {
    if (this.#len < this.#max) {
      if (this.#len === this.#cap) this.#grow()
      return this.#len++
    }
    const slot = this.#start
    this.#start = (this.#start + 1) % this.#max
    this.#holders.delete(slot)
    return slot
  }

  #push(action: number, t: number, block: number, seg: number, offset: number, size: number, pool: number, flags: number): number {
    const i = this.#slot()
    this.#action[i] = action
    this.#t[i] = t
    this.#block[i] = block
    this.#seg[i] = seg
    this.#offset[i] = offset
    this.#size[i] = size
    this.#pool[i] = pool
    this.#flags[i] = flags
    return i
  }

  /** Segments and blocks that exist when recording starts. */
  seed(segments: SnapshotSegment[]): void {
    for (const s of segments) {
      const pool = this.#pools.indexOf(s.pool) + 1
      this.#push(A_SEGMENT_ALLOC, 0, -1, s.id, -1, s.size, pool, s.dedicated ? 1 : 0)
      this.#segments.add(s.id)
      for (const b of s.blocks) {
        if (b.state === 'free') continue
        this.#push(A_ALLOC, 0, b.blockId, s.id, b.offset, b.size, pool, 2)
        this.#liveSize.set(b.blockId, b.size)
      }
    }
  }

  /**
   * Captures the caller's stack for the next malloc, from the frame that called `above` (the
   * public method: wgalloc's own frames are left out at capture, not trimmed later). Only
   * STACK_FRAMES frames are kept, and V8 formats them only when a report reads them.
   */
  capture(above: (...args: never[]) => unknown): Holder | null {
    if (!this.#stacks) return null
    const holder: Holder = {}
    const limit = Error.stackTraceLimit
    Error.stackTraceLimit = STACK_FRAMES
    Error.captureStackTrace(holder, above)
    Error.stackTraceLimit = limit
    return holder
  }

  /** A malloc returned block `id` of `size` bytes at `offset`. */
  allocated(id: number, size: number, offset: number, holder: Holder | null): void {
    this.#liveSize.set(id, size)
    this.#freshOffset.set(id, offset)
    if (holder) {
      this.#liveStack.set(id, holder)
      this.#freshStack.set(id, holder)
    }
  }

  /** `free()` ran on block `id`: it is no longer the caller's (its memory returns after its GPU work). */
  released(id: number): void {
    this.#liveSize.delete(id)
    if (this.#stacks) this.#liveStack.delete(id)
  }

  /** The garbage collector found block `id` unreachable without `free()`: a leak. */
  reclaimed(id: number): void {
    const size = this.#liveSize.get(id)
    if (size === undefined) return
    this.#reclaimed.push({ size, holder: this.#liveStack.get(id) })
    this.released(id)
  }

  /** Records native allocator events, five numbers each; `segment` looks up a new segment. */
  eventNumbers(numbers: Float64Array, segment: (id: number) => SnapshotSegment | undefined): void {
    const t = this.#now()
    for (let i = 0; i + 4 < numbers.length; i += 5) {
      const kind = numbers[i]
      const block = numbers[i + 1]
      const seg = numbers[i + 2]
      const size = numbers[i + 3]
      const pool = numbers[i + 4] + 1
      if (kind === K_ALLOCATED || kind === K_RECYCLED) {
        if (seg >= 0 && !this.#segments.has(seg)) {
          this.#segments.add(seg)
          const s = segment(seg)
          this.#push(A_SEGMENT_ALLOC, t, -1, seg, -1, s?.size ?? size, pool, s?.dedicated ? 1 : 0)
        }
        const offset = this.#freshOffset.get(block)
        if (offset !== undefined) this.#freshOffset.delete(block)
        const slot = this.#push(A_ALLOC, t, block, seg, offset ?? -1, size, pool, 0)
        const holder = this.#freshStack.get(block)
        if (holder) {
          this.#freshStack.delete(block)
          this.#holders.set(slot, holder)
        }
      } else if (kind === K_FREED) this.#push(A_FREE, t, block, -1, -1, 0, 0, 0)
      else if (kind === K_RELEASED) {
        this.#segments.delete(seg)
        this.#push(A_SEGMENT_FREE, t, -1, seg, -1, size, pool, 0)
      } else if (kind === K_FAILED) this.#push(A_OOM, t, -1, -1, -1, size, pool, 0)
    }
  }

  /** Records one allocator event (the logger's path, which takes events as objects). */
  event(e: HeapEvent, segment: (id: number) => SnapshotSegment | undefined): void {
    const kind = ['ALLOCATED', 'RECYCLED', 'FREED', 'RELEASED', 'ALLOCATION_FAILED'].indexOf(e.kind)
    this.eventNumbers(new Float64Array([kind, e.blockId ?? -1, e.segmentId ?? -1, e.size, this.#pools.indexOf(e.pool)]), segment)
  }

  /** The stack recorded for live block `id`, if any. */
  stackOf(id: number): string | undefined {
    const holder = this.#liveStack.get(id)
    return holder ? userStack(holder) : undefined
  }

  /** The ring as entries, oldest first, with each alloc's stack formatted. */
  entries(): HistoryEntry[] {
    const out: HistoryEntry[] = []
    for (let k = 0; k < this.#len; k++) {
      const i = (this.#start + k) % this.#max
      const action = ACTIONS[this.#action[i]]
      const e: HistoryEntry = { action, t: this.#t[i] }
      const pool = this.#pool[i] > 0 ? this.#pools[this.#pool[i] - 1] : undefined
      switch (this.#action[i]) {
        case A_ALLOC: {
          e.blockId = this.#block[i]
          e.segmentId = this.#seg[i] >= 0 ? this.#seg[i] : undefined
          e.offset = this.#offset[i] >= 0 ? this.#offset[i] : null
          e.size = this.#size[i]
          e.pool = pool
          if (this.#flags[i] & 2) e.label = 'before recording'
          const holder = this.#holders.get(i)
          if (holder) e.stack = userStack(holder)
          break
        }
        case A_FREE:
          e.blockId = this.#block[i]
          break
        case A_SEGMENT_ALLOC:
          Object.assign(e, { segmentId: this.#seg[i], size: this.#size[i], pool, dedicated: (this.#flags[i] & 1) === 1 })
          break
        case A_SEGMENT_FREE:
          Object.assign(e, { segmentId: this.#seg[i], size: this.#size[i], pool })
          break
        default:
          Object.assign(e, { size: this.#size[i], pool })
      }
      out.push(e)
    }
    return out
  }

  /** Live blocks (and those the GC reclaimed) grouped by allocation stack. */
  leaks(): LeakReport {
    const groups = new Map<string, LeakGroup>()
    const add = (size: number, holder: Holder | undefined, reclaimed: boolean) => {
      const stack = holder ? userStack(holder) : NOT_RECORDED
      const g = groups.get(stack) ?? { stack, count: 0, bytes: 0, reclaimed: 0 }
      g.count++
      g.bytes += size
      if (reclaimed) g.reclaimed++
      groups.set(stack, g)
    }
    for (const [id, size] of this.#liveSize) add(size, this.#liveStack.get(id), false)
    for (const b of this.#reclaimed) add(b.size, b.holder, true)
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
