// Memory history with JS stacks (PyTorch `_record_memory_history`): allocator events in a
// bounded ring, the stack of every live block's malloc, and the leak report built from them.
import type { KvCacheSnapshot } from './internal/kv-registry.js'
import { performance } from 'node:perf_hooks'
import type { HeapEvent, SnapshotBlock, SnapshotSegment } from './binding.js'
import { invalidArgument, optionKeys, optionsObject, shown } from './errors.js'
import { EVENT_NUMBERS, NUMBERED_KINDS } from './heap-events.js'

/** Options of `heap.recordHistory()`. */
export interface RecordHistoryOptions {
  /** Events kept in the ring, oldest dropped first (default 100 000; at most {@link MAX_HISTORY_ENTRIES}). */
  maxEntries?: number
  /**
   * Record the JS stack of mallocs (default true: every one): snapshots and leak reports name
   * who allocated. `{ every: N }` records the stack of one malloc in N (the first, then each
   * Nth), the rest by size and time only, so a service can leave history on: a stack costs
   * V8's capture, several microseconds.
   */
  stacks?: boolean | StackSampling
}

/** `stacks: { every }` of {@link RecordHistoryOptions}: record one malloc's stack in `every`. */
export interface StackSampling {
  /** A positive integer: 1 records every stack, as `stacks: true`. */
  every: number
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
  /** Events in order, oldest first (empty when no history is being recorded: `recordHistory(false)` drops it, so snapshot first). */
  history: HistoryEntry[]
  /** The heap's live KV caches: which blocks are their pools, and one row per sequence. */
  kvCaches?: KvCacheSnapshot[]
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

/** A KV cache not released when the leak report was made. */
export interface KvCacheLeak {
  /** The cache's name. */
  name: string
  /** Device bytes of its pools and table. */
  bytes: number
  /** Sequences never freed. */
  sequences: number
  /** Tokens they hold. */
  tokens: number
}

/** `heap.leakReport()`: blocks allocated and never freed, grouped by allocation stack, most bytes first. */
export interface LeakReport {
  /** KV caches not released, with the sequences they still hold (their pools are not heap blocks of the JS table, so not in `groups`). */
  kvCaches?: KvCacheLeak[]
  /** Blocks still allocated (or reclaimed by the garbage collector without `free()`). */
  count: number
  /** Their bytes. */
  bytes: number
  /** By allocation stack, most bytes first. */
  groups: LeakGroup[]
}

const NOT_RECORDED = '(not recorded)'
/** Frames kept per allocation stack (capture cost grows with depth). */
export const STACK_FRAMES = 8

// Frames of wgalloc itself (its compiled JS) and of Node's internals are not the user's.
const OWN_FRAME = new RegExp(`\\(?${__dirname.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}[\\\\/]|\\(node:|^\\s*at node:`)

/**
 * `holder.stack`, trimmed to the caller's frames (formatting happens here, not at capture).
 *
 * Note [Stacks apart from the application's hook]: V8 formats a captured stack when `.stack`
 * is first read, through `Error.prepareStackTrace` as it is at that moment; an application's
 * hook may return call sites or anything else. The hook is set aside for that first read, so
 * the history always gets V8's (and Node's source-mapped) text.
 */
function userStack(holder: Holder): string {
  let text: unknown
  const errorClass = Error as { prepareStackTrace?: unknown }
  const hook = errorClass.prepareStackTrace
  try {
    errorClass.prepareStackTrace = undefined
    text = holder.stack
  } catch {
    text = undefined
  } finally {
    errorClass.prepareStackTrace = hook
  }
  if (typeof text !== 'string') return NOT_RECORDED
  const lines = text.split('\n').slice(1)
  const user = lines.filter((l) => !OWN_FRAME.test(l)).map((l) => l.trim())
  return user.length > 0 ? user.join('\n') : NOT_RECORDED
}

/** A captured, not yet formatted stack (V8 formats it when `.stack` is first read). */
export type Holder = { stack?: unknown }

/**
 * Captures the caller's stack from the frame that called `above` (the public method: wgalloc's
 * own frames are left out at capture, not trimmed later). Only STACK_FRAMES frames are kept,
 * and V8 formats them only when a report reads them.
 *
 * Note [Stack capture cost]: V8's capture walks the stack and, for each optimized frame, decodes
 * its deoptimization data to recover the inlined functions; that decoding, not GC or formatting,
 * is most of what a stack costs, and it grows with every frame walked before the caller's,
 * including the frames of functions V8 inlined (each is decoded as a frame of its own). So the
 * capture happens in the public method, with no history method or API wrapper frame in between
 * (Note [malloc's own API boundary]); `heap.malloc`, the hot one, writes this function out
 * rather than calling it (about 0.3-0.5 us less per stack).
 */
export function captureStack(above: (...args: never[]) => unknown): Holder {
  const holder: Holder = {}
  const limit = Error.stackTraceLimit
  Error.stackTraceLimit = STACK_FRAMES
  Error.captureStackTrace(holder, above)
  Error.stackTraceLimit = limit
  return holder
}

// Ring entries: numbers in one typed array, so recording allocates no object per event.
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
const K_MOVED = 5
const FIRST_CAPACITY = 4096
const ROW = 6

/**
 * What a heap records while `recordHistory()` is on. Allocator events reach it in batches (the
 * heap drains the native queue every DRAIN_EVERY calls, and before any report) as packed
 * numbers, stored as rows of one typed array. Without stacks a malloc and a free cost a counter each
 * (which blocks are live is the native heap's to say); with stacks, a malloc adds the
 * capture and one map write, undone when the block's FREED event arrives. `t` is when a batch
 * arrived.
 */
export class HeapHistory {
  readonly #max: number
  readonly #stacks: boolean
  /** Mallocs between two recorded stacks (1: every one). */
  readonly #every: number
  /** Mallocs left until the next stack is recorded (0: this one). */
  #skip = 0
  readonly #pools: readonly string[]
  readonly #t0 = performance.now()
  // The ring: `#len` entries from `#start` (wrapping at `#max` once full).
  #cap = 0
  #len = 0
  #start = 0
  // ROW numbers per entry, side by side so recording one touches one cache line: time, block
  // (-1 for none), segment (-1 for none), offset (-1 for unknown), size, and a packed word of
  // action, pool index + 1 (0 for none) and flags (1: dedicated segment; 2: "before recording").
  #rows = new Float64Array(0)
  #holders: (Holder | undefined)[] = [] // by ring slot: the stack of its alloc entry
  // Stacks of this heap's mallocs until their memory returns to the pool (the FREED event).
  readonly #stackById = new Map<number, Holder>()
  readonly #segments = new Set<number>()
  // The segment of the last alloc event, known to be in `#segments` (most allocs repeat it).
  #lastSegment = -1
  // Blocks the GC net reclaimed, newest last; at most `#max`, see Note [Reclaimed blocks, bounded].
  #reclaimed: Reclaimed[] = []
  // Older reclaimed blocks, folded into groups by stack (at most `#max` stacks).
  readonly #reclaimedGroups = new Map<string, LeakGroup>()

  constructor(options: unknown, pools: readonly string[]) {
    if (options != null && typeof options !== 'object') throw invalidArgument(['recordHistory', 'options'], '{ maxEntries?, stacks? }', shown(options))
    const { maxEntries = DEFAULT_ENTRIES, stacks = true } = optionsObject(
      options as RecordHistoryOptions,
      'recordHistory',
      optionKeys<RecordHistoryOptions>({ maxEntries: true, stacks: true }),
    )
    if (typeof maxEntries !== 'number' || !Number.isSafeInteger(maxEntries) || maxEntries <= 0) {
      throw invalidArgument(['recordHistory', 'options.maxEntries'], 'a positive integer', shown(maxEntries))
    }
    const every = typeof stacks === 'boolean' ? 1 : typeof stacks === 'object' && stacks !== null ? (stacks as StackSampling).every : undefined
    if (typeof every !== 'number' || !Number.isSafeInteger(every) || every <= 0)
      throw invalidArgument(['recordHistory', 'options.stacks'], 'a boolean or { every: N } with N a positive integer', shown(stacks))
    this.#max = Math.min(maxEntries, MAX_HISTORY_ENTRIES)
    this.#stacks = stacks !== false
    this.#every = every
    this.#pools = pools
  }

  /** Entries the ring keeps (the request capped at MAX_HISTORY_ENTRIES). */
  get maxEntries(): number {
    return this.#max
  }

  #now(): number {
    return Math.round((performance.now() - this.#t0) * 1000) / 1000
  }

  /** The ring grows by doubling up to `#max` entries (a large limit costs nothing until it is used). */
  #grow(): void {
    const cap = Math.min(this.#max, Math.max(FIRST_CAPACITY, this.#cap * 2))
    const rows = new Float64Array(cap * ROW)
    rows.set(this.#rows)
    this.#rows = rows
    this.#cap = cap
  }

  /** The ring slot for a new entry (the oldest one's once full). */
  #slot(): number {
    if (this.#len < this.#max) {
      if (this.#len === this.#cap) this.#grow()
      return this.#len++
    }
    const slot = this.#start
    this.#start = this.#start + 1 === this.#max ? 0 : this.#start + 1
    if (this.#stacks) this.#holders[slot] = undefined
    return slot
  }

  #push(action: number, t: number, block: number, seg: number, offset: number, size: number, pool: number, flags: number): number {
    const i = this.#slot()
    const rows = this.#rows
    const r = i * ROW
    rows[r] = t
    rows[r + 1] = block
    rows[r + 2] = seg
    rows[r + 3] = offset
    rows[r + 4] = size
    rows[r + 5] = action | (pool << 4) | (flags << 12)
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
      }
    }
  }

  /**
   * Whether this malloc records its stack: with `{ every: N }`, malloc k (counted from 0 since
   * recording started) does iff k % N == 0. The caller then calls {@link captureStack}.
   */
  sample(): boolean {
    if (!this.#stacks) return false
    if (this.#skip > 0) {
      this.#skip--
      return false
    }
    this.#skip = this.#every - 1
    return true
  }

  /** A malloc with a stack returned block `id`. */
  allocated(id: number, holder: Holder): void {
    this.#stackById.set(id, holder)
  }

  /**
   * The garbage collector found block `id` of `size` bytes unreachable without `free()`: a leak.
   *
   * Note [Reclaimed blocks, bounded]: `maxEntries` bounds everything a history keeps, so a
   * service that drops blocks without `free()` for days holds no more than it allows. The
   * newest `maxEntries` reclaimed blocks keep their captured stacks; once that many wait, the
   * older half is folded into per-stack counts (formatting each stack once), and past
   * `maxEntries` distinct stacks, folded blocks count under `(not recorded)`. The leak report's
   * counts and bytes stay exact; only stacks can be lost.
   */
  reclaimed(id: number, size: number): void {
    if (size <= 0) return
    this.#reclaimed.push({ size, holder: this.#stackById.get(id) })
    if (this.#reclaimed.length > this.#max) this.#fold(this.#reclaimed.length - Math.floor(this.#max / 2))
  }

  /** Folds the `count` oldest reclaimed blocks into `#reclaimedGroups`. */
  #fold(count: number): void {
    const groups = this.#reclaimedGroups
    for (const { size, holder } of this.#reclaimed.slice(0, count)) {
      let stack = holder ? userStack(holder) : NOT_RECORDED
      if (!groups.has(stack) && groups.size >= this.#max) stack = NOT_RECORDED
      const g = groups.get(stack) ?? { stack, count: 0, bytes: 0, reclaimed: 0 }
      g.count++
      g.bytes += size
      g.reclaimed++
      groups.set(stack, g)
    }
    this.#reclaimed = this.#reclaimed.slice(count)
  }

  /** Records native allocator events, EVENT_NUMBERS each; `segment` looks up a new segment. */
  eventNumbers(numbers: Float64Array, segment: (id: number) => SnapshotSegment | undefined): void {
    const t = this.#now()
    for (let i = 0; i + EVENT_NUMBERS <= numbers.length; i += EVENT_NUMBERS) {
      const kind = numbers[i]
      const block = numbers[i + 1]
      const seg = numbers[i + 2]
      const size = numbers[i + 4]
      const pool = numbers[i + 5] + 1
      if (kind === K_ALLOCATED || kind === K_RECYCLED) {
        if (seg >= 0 && seg !== this.#lastSegment && !this.#segments.has(seg)) {
          this.#segments.add(seg)
          const s = segment(seg)
          this.#push(A_SEGMENT_ALLOC, t, -1, seg, -1, s?.size ?? size, pool, s?.dedicated ? 1 : 0)
        }
        this.#lastSegment = seg
        const slot = this.#push(A_ALLOC, t, block, seg, numbers[i + 3], size, pool, 0)
        if (this.#stacks) this.#holders[slot] = this.#stackById.get(block)
      } else if (kind === K_FREED) {
        if (this.#stacks) this.#stackById.delete(block)
        this.#push(A_FREE, t, block, -1, -1, size, pool, 0)
      } else if (kind === K_RELEASED) {
        this.#segments.delete(seg)
        if (seg === this.#lastSegment) this.#lastSegment = -1
        this.#push(A_SEGMENT_FREE, t, -1, seg, -1, size, pool, 0)
      } else if (kind === K_FAILED) this.#push(A_OOM, t, -1, -1, -1, size, pool, 0)
      else if (kind === K_MOVED) {
        // The trace format has no move: the block leaves its old place and takes the new
        // one, keeping its stack.
        this.#push(A_FREE, t, block, -1, -1, size, pool, 0)
        const slot = this.#push(A_ALLOC, t, block, seg, numbers[i + 3], size, pool, 0)
        if (this.#stacks) this.#holders[slot] = this.#stackById.get(block)
      }
    }
  }

  /** Records one allocator event (the logger's path, which takes events as objects). */
  event(e: HeapEvent, segment: (id: number) => SnapshotSegment | undefined): void {
    const kind = (NUMBERED_KINDS as readonly string[]).indexOf(e.kind)
    const numbers = [kind, e.blockId ?? -1, e.segmentId ?? -1, e.offset ?? -1, e.size, this.#pools.indexOf(e.pool)]
    this.eventNumbers(new Float64Array(numbers), segment)
  }

  /** The stack recorded for live block `id`, if any. */
  stackOf(id: number): string | undefined {
    const holder = this.#stackById.get(id)
    return holder ? userStack(holder) : undefined
  }

  /** The ring as entries, oldest first, with each alloc's stack formatted. */
  entries(): HistoryEntry[] {
    const out: HistoryEntry[] = []
    for (let k = 0; k < this.#len; k++) {
      const i = (this.#start + k) % this.#max
      const r = i * ROW
      const [t, block, seg, offset, size, word] = this.#rows.subarray(r, r + ROW)
      const code = word & 0xf
      const flags = word >> 12
      const e: HistoryEntry = { action: ACTIONS[code], t }
      const poolIndex = (word >> 4) & 0xff
      const pool = poolIndex > 0 ? this.#pools[poolIndex - 1] : undefined
      switch (code) {
        case A_ALLOC: {
          e.blockId = block
          e.segmentId = seg >= 0 ? seg : undefined
          e.offset = offset >= 0 ? offset : null
          e.size = size
          e.pool = pool
          if (flags & 2) e.label = 'before recording'
          const holder = this.#holders[i]
          if (holder) e.stack = userStack(holder)
          break
        }
        case A_FREE:
          // As PyTorch's free entries: the block's bytes and pool, so a reader needs no join.
          Object.assign(e, { blockId: block, size, pool })
          break
        case A_SEGMENT_ALLOC:
          Object.assign(e, { segmentId: seg, size, pool, dedicated: (flags & 1) === 1 })
          break
        case A_SEGMENT_FREE:
          Object.assign(e, { segmentId: seg, size, pool })
          break
        default:
          Object.assign(e, { size, pool })
      }
      out.push(e)
    }
    return out
  }

  /** Live blocks (`[id, size]` pairs) and those the GC reclaimed, grouped by allocation stack. */
  leaks(live: Float64Array): LeakReport {
    return groupLeaks(live, (id) => this.#stackById.get(id), this.#reclaimed, this.#reclaimedGroups.values())
  }
}

type Reclaimed = { size: number; holder: Holder | undefined }

/** Live blocks (`[id, size]` pairs) with no history: one group, `(not recorded)`. */
export function unrecordedLeaks(live: Float64Array): LeakReport {
  return groupLeaks(live, () => undefined, [], [])
}

/** Live blocks (`[id, size]` pairs, with their stacks) and reclaimed ones, grouped by stack, most bytes first. */
function groupLeaks(live: Float64Array, stackOf: (id: number) => Holder | undefined, reclaimed: readonly Reclaimed[], folded: Iterable<LeakGroup>): LeakReport {
  const groups = new Map<string, LeakGroup>()
  for (const f of folded) groups.set(f.stack, { ...f })
  const add = (size: number, holder: Holder | undefined, wasReclaimed: boolean) => {
    const stack = holder ? userStack(holder) : NOT_RECORDED
    const g = groups.get(stack) ?? { stack, count: 0, bytes: 0, reclaimed: 0 }
    g.count++
    g.bytes += size
    if (wasReclaimed) g.reclaimed++
    groups.set(stack, g)
  }
  for (let i = 0; i + 1 < live.length; i += 2) add(live[i + 1], stackOf(live[i]), false)
  for (const b of reclaimed) add(b.size, b.holder, true)
  const list = [...groups.values()].sort((a, b) => b.bytes - a.bytes)
  return { count: list.reduce((n, g) => n + g.count, 0), bytes: list.reduce((n, g) => n + g.bytes, 0), groups: list }
}

/** The leak report as text, for stderr. */
export function formatLeakReport(report: LeakReport, device: string): string {
  const lines: string[] = []
  if (report.count > 0) lines.push(`wgalloc: ${report.count} block(s), ${report.bytes} bytes never freed on ${device}:`)
  for (const g of report.groups) {
    lines.push(`  ${g.count} block(s), ${g.bytes} bytes${g.reclaimed ? ` (${g.reclaimed} reclaimed by the garbage collector)` : ''}, allocated at:`)
    for (const frame of g.stack.split('\n').slice(0, 8)) lines.push(`      ${frame}`)
  }
  for (const c of report.kvCaches ?? [])
    lines.push(`wgalloc: KV cache '${c.name}' (${c.bytes} bytes) never released on ${device}: ${c.sequences} sequence(s), ${c.tokens} tokens never freed`)
  return lines.length ? `${lines.join('\n')}\n` : ''
}
