// Memory view data: heap snapshots (with or without a recorded history) and
// alloc/free traces become blocks with lifetimes in event steps (an alloc or a
// free is one step), segments with lifetimes, and summary figures. The page
// draws the active-memory timeline and the segment map from these columns.
import { type Loose, type SummaryRow, array, count, fail, id, object } from './check.js'
import { shown } from '../errors.js'
import type { HostReplay } from './history.js'

const STATES = ['active', 'pending-free']

/** Column store the page reads (arrays, not objects: 60k blocks stay small). */
function blockColumns() {
  return {
    label: [] as string[],
    size: [] as number[],
    start: [] as number[],
    end: [] as number[],
    seg: [] as number[],
    off: [] as number[],
    pool: [] as number[],
    state: [] as number[],
    // The JS stack of the block's malloc (heap.recordHistory with stacks), index into `stacks`; -1 without one.
    stack: [] as number[],
  }
}

type Columns = ReturnType<typeof blockColumns>

interface Block {
  blockId: number
  offset: number
  size: number
  state: string
  stack?: string
}

interface Segment {
  id: number
  pool: string
  size: number
  dedicated: boolean
  blocks: Block[]
}

interface SegmentSpan {
  id: number
  pool: number
  size: number
  dedicated: boolean
  start: number
  end: number
}

/** Distinct stacks, shared by the blocks allocated at one place. */
class StackTable {
  readonly list: string[] = []
  readonly #index = new Map<string, number>()
  add(stack: unknown): number {
    if (typeof stack !== 'string' || stack === '') return -1
    let k = this.#index.get(stack)
    if (k === undefined) this.#index.set(stack, (k = this.list.push(stack) - 1))
    return k
  }
}

function poolIndex(pools: string[], name: string): number {
  let i = pools.indexOf(name)
  if (i < 0) i = pools.push(name) - 1
  return i
}

function checkSegments(list: unknown, where: string): Segment[] {
  return array(list, where).map((s, i) => {
    const at = `${where}[${i}]`
    object(s, at)
    const blocks = array(s.blocks, `${at}.blocks`).map((b, j) => {
      const bt = `${at}.blocks[${j}]`
      object(b, bt)
      if (b.state !== 'free' && !STATES.includes(b.state)) fail(`${bt}.state`, "'active', 'pending-free' or 'free'", shown(b.state))
      return {
        blockId: count(b.blockId ?? 0, `${bt}.blockId`),
        offset: count(b.offset, `${bt}.offset`),
        size: count(b.size, `${bt}.size`),
        state: b.state,
        stack: typeof b.stack === 'string' ? b.stack : undefined,
      }
    })
    return { id: count(s.id, `${at}.id`), pool: String(s.pool), size: count(s.size, `${at}.size`), dedicated: Boolean(s.dedicated), blocks }
  })
}

/** Peak of a step function given as +size at start and -size at end. */
function peakOf(starts: number[], ends: number[], sizes: number[], steps: number): { peak: number; at: number } {
  const delta = new Float64Array(steps + 1)
  for (let i = 0; i < sizes.length; i++) {
    delta[starts[i]] += sizes[i]
    delta[ends[i]] -= sizes[i]
  }
  let cur = 0
  let peak = 0
  let at = 0
  for (let t = 0; t < steps; t++) {
    cur += delta[t]
    if (cur > peak) {
      peak = cur
      at = t
    }
  }
  return { peak, at }
}

/** A snapshot alone: the heap at one moment (no timeline). */
function fromSegments(segments: Segment[], title: string | undefined) {
  const pools: string[] = []
  const blocks: Columns = blockColumns()
  const stacks = new StackTable()
  const segs: SegmentSpan[] = segments.map((s, k) => {
    for (const b of s.blocks) {
      if (b.state === 'free') continue
      blocks.label.push(`block ${b.blockId}`)
      blocks.size.push(b.size)
      blocks.start.push(0)
      blocks.end.push(1)
      blocks.seg.push(k)
      blocks.off.push(b.offset)
      blocks.pool.push(poolIndex(pools, s.pool))
      blocks.state.push(STATES.indexOf(b.state))
      blocks.stack.push(stacks.add(b.stack))
    }
    return { id: s.id, pool: poolIndex(pools, s.pool), size: s.size, dedicated: s.dedicated, start: 0, end: 1 }
  })
  const byPool = pools.map((name) => ({ name, segments: 0, reserved: 0, active: 0, pending: 0, free: 0, largestFree: 0 }))
  for (const s of segments) {
    const p = byPool[pools.indexOf(s.pool)]
    p.segments++
    p.reserved += s.size
    for (const b of s.blocks) {
      if (b.state === 'active') p.active += b.size
      else if (b.state === 'pending-free') p.pending += b.size
      else {
        p.free += b.size
        p.largestFree = Math.max(p.largestFree, b.size)
      }
    }
  }
  const sum = (k: 'reserved' | 'active' | 'pending' | 'free') => byPool.reduce((a, p) => a + p[k], 0)
  return {
    kind: 'memory',
    title: title ?? 'wgalloc heap snapshot',
    subtitle: `${segments.length} segments, ${blocks.size.length} blocks`,
    mode: 'snapshot',
    steps: 1,
    pools,
    blocks,
    stacks: stacks.list,
    segments: segs,
    ooms: [],
    byPool,
    summary: [
      ['reserved', sum('reserved'), 'bytes'] as SummaryRow,
      ['active', sum('active'), 'bytes'],
      ['pending free', sum('pending'), 'bytes'],
      ['free in segments', sum('free'), 'bytes'],
      ['largest free range', Math.max(0, ...byPool.map((p) => p.largestFree)), 'bytes'],
      ['segments', segments.length, 'count'],
      ['blocks', blocks.size.length, 'count'],
    ],
  }
}

/**
 * A snapshot with its recorded history: the timeline and the segment map at any step. The
 * history is a ring, so it may start after blocks and segments were made: their frees are
 * skipped, and those still live at the end (in `segments`) are drawn from the first step.
 */
function fromHistory(segments: Segment[], history: unknown, title: string | undefined) {
  const pools: string[] = []
  const blocks: Columns = blockColumns()
  const stacks = new StackTable()
  const segs: SegmentSpan[] = []
  const segIndex = new Map<number, number>() // live segment id -> index in segs
  const live = new Map<number, number>() // live block id -> index in blocks
  const ooms: { t: number; size: number; pool: string }[] = []
  // Seen in the window: a second free of one of these is corrupt input, not an older block.
  const windowBlocks = new Set<number>()
  const windowSegments = new Set<number>()
  let older = 0 // events about blocks and segments from before the window
  let t = 0
  const openSegment = (segmentId: number, size: number, pool: string, dedicated: boolean, start = t) => {
    segIndex.set(segmentId, segs.push({ id: segmentId, pool: poolIndex(pools, pool), size, dedicated, start, end: -1 }) - 1)
  }
  /** A block live from step `start` (until its free, or the end). */
  const openBlock = (blockId: number, label: string, size: number, start: number, seg: number | undefined, offset: number, pool: string, stack: number) => {
    live.set(blockId, blocks.size.length)
    blocks.label.push(label)
    blocks.size.push(size)
    blocks.start.push(start)
    blocks.end.push(-1)
    blocks.seg.push(seg ?? -1)
    blocks.off.push(offset)
    blocks.pool.push(poolIndex(pools, pool))
    blocks.state.push(0)
    blocks.stack.push(stack)
  }
  for (const [i, e] of array(history, 'history').entries()) {
    const at = `history[${i}]`
    object(e, at)
    switch (e.action) {
      case 'segment_alloc':
        openSegment(count(e.segmentId, `${at}.segmentId`), count(e.size, `${at}.size`), String(e.pool), Boolean(e.dedicated))
        windowSegments.add(e.segmentId)
        break
      case 'segment_free': {
        const k = segIndex.get(e.segmentId)
        if (k === undefined) {
          if (windowSegments.has(e.segmentId)) fail(`${at}.segmentId`, 'a live segment', shown(e.segmentId), 'the segment is freed twice')
          older++
          break
        }
        segs[k].end = t
        segIndex.delete(e.segmentId)
        break
      }
      case 'alloc': {
        const blockId = count(e.blockId, `${at}.blockId`)
        if (live.has(blockId)) fail(`${at}.blockId`, 'a block not live', shown(blockId), 'the block is allocated twice without a free')
        windowBlocks.add(blockId)
        openBlock(
          blockId,
          e.label != null ? String(e.label) : e.shape ? `block ${blockId} [${e.shape.join('x')}]` : `block ${blockId}`,
          count(e.size, `${at}.size`),
          t,
          segIndex.get(e.segmentId),
          e.offset == null ? -1 : count(e.offset, `${at}.offset`),
          String(e.pool),
          stacks.add(e.stack),
        )
        t++
        break
      }
      case 'free': {
        const k = live.get(e.blockId)
        if (k === undefined) {
          if (windowBlocks.has(e.blockId)) fail(`${at}.blockId`, 'a live block', shown(e.blockId), 'the block is freed twice')
          older++
          break
        }
        blocks.end[k] = t
        live.delete(e.blockId)
        t++
        break
      }
      case 'oom':
        ooms.push({ t, size: count(e.size, `${at}.size`), pool: String(e.pool) })
        break
      default:
        fail(`${at}.action`, 'alloc, free, segment_alloc, segment_free or oom', shown(e.action))
    }
  }
  // Segments and blocks of the final snapshot the window never saw made: there from the start.
  for (const s of segments) {
    if (!segIndex.has(s.id) && !windowSegments.has(s.id)) {
      openSegment(s.id, s.size, s.pool, s.dedicated, 0)
      older++
    }
    for (const b of s.blocks) {
      if (b.state === 'free' || live.has(b.blockId) || windowBlocks.has(b.blockId)) continue
      openBlock(b.blockId, `block ${b.blockId}`, b.size, 0, segIndex.get(s.id), b.offset, s.pool, -1)
      older++
    }
  }
  const steps = Math.max(t, 1)
  // Blocks live at the end keep the state the final snapshot gives them.
  const finalState = new Map<number, string>()
  const finalStack = new Map<number, string>()
  for (const s of segments) {
    for (const b of s.blocks) {
      finalState.set(b.blockId, b.state)
      if (b.stack) finalStack.set(b.blockId, b.stack)
    }
  }
  for (const [blockId, k] of live) {
    blocks.end[k] = steps
    blocks.state[k] = Math.max(0, STATES.indexOf(finalState.get(blockId) ?? 'active'))
    if (blocks.stack[k] < 0) blocks.stack[k] = stacks.add(finalStack.get(blockId))
  }
  for (const s of segs) if (s.end < 0) s.end = steps
  const active = peakOf(blocks.start, blocks.end, blocks.size, steps)
  const reserved = peakOf(
    segs.map((s) => s.start),
    segs.map((s) => s.end),
    segs.map((s) => s.size),
    steps,
  )
  return {
    kind: 'memory',
    title: title ?? 'wgalloc memory history',
    subtitle: `${blocks.size.length} allocations, ${steps} steps, ${segs.length} segments${older > 0 ? '; the history begins mid-run (its ring dropped older events)' : ''}`,
    mode: 'history',
    steps,
    pools,
    blocks,
    stacks: stacks.list,
    segments: segs,
    ooms,
    peakStep: active.at,
    summary: [
      ['peak active', active.peak, 'bytes'] as SummaryRow,
      ['peak reserved', reserved.peak, 'bytes'],
      ['reserved / active at peak', active.peak > 0 ? reserved.peak / active.peak : 1, 'ratio'],
      ['allocations', blocks.size.length, 'count'],
      ['segments', segs.length, 'count'],
      ['out-of-memory events', ooms.length, 'count'],
    ],
  }
}

/**
 * The KV caches of a memory snapshot: a label for each of their heap blocks (`kv 'main' layer 0
 * K`) and one summary row per sequence, so the page shows which blocks hold KV and whose.
 */
function kvAnnotations(caches: unknown): { labels: Map<number, string>; rows: SummaryRow[] } {
  const labels = new Map<number, string>()
  const rows: SummaryRow[] = []
  if (caches === undefined) return { labels, rows }
  for (const [i, c] of array(caches, 'kvCaches').entries()) {
    const cache = object(c, `kvCaches[${i}]`)
    const name = String(cache.name)
    const heapBlocks = array(cache.heapBlocks, `kvCaches[${i}].heapBlocks`)
    heapBlocks.forEach((b, k) => {
      const what = k === heapBlocks.length - 1 ? 'block table' : `layer ${k >> 1} ${k % 2 ? 'V' : 'K'}`
      labels.set(count(b, `kvCaches[${i}].heapBlocks[${k}]`), `kv '${name}' ${what}`)
    })
    rows.push([
      `kv '${name}' blocks used`,
      `${count(cache.usedBlocks, `kvCaches[${i}].usedBlocks`)} of ${count(cache.totalBlocks, `kvCaches[${i}].totalBlocks`)}`,
      'text',
    ])
    for (const [k, q] of array(cache.sequences, `kvCaches[${i}].sequences`).entries()) {
      const seq = object(q, `kvCaches[${i}].sequences[${k}]`)
      const at = `kvCaches[${i}].sequences[${k}]`
      const where = seq.swapped ? 'swapped out' : `${count(seq.blocks, `${at}.blocks`)} blocks, ${count(seq.sharedBlocks, `${at}.sharedBlocks`)} shared`
      rows.push([
        `kv '${name}' sequence ${id(seq.id, `${at}.id`)}${seq.scope ? ` (${seq.scope})` : ''}`,
        `${count(seq.tokens, `${at}.tokens`)} tokens, ${where}`,
        'text',
      ])
    }
  }
  return { labels, rows }
}

/** `heap.snapshot()` (an array of segments) or `{ segments, history?, kvCaches? }`. */
export function fromSnapshot(json: Loose | Loose[]) {
  const segments = checkSegments(Array.isArray(json) ? json : json.segments, 'segments')
  const view =
    !Array.isArray(json) && json.history !== undefined
      ? fromHistory(segments, json.history, json.title as string | undefined)
      : fromSegments(segments, Array.isArray(json) ? undefined : json.title)
  const kv = kvAnnotations(Array.isArray(json) ? undefined : json.kvCaches)
  if (kv.labels.size) view.blocks.label = view.blocks.label.map((l) => kv.labels.get(Number(/^block (\d+)/.exec(l)?.[1] ?? -1)) ?? l)
  view.summary.push(...kv.rows)
  return view
}

/**
 * An alloc/free trace without a device replay: the timeline of requested sizes, no segments.
 * With `replay` (`replayOnHost`), the allocations it found failing are out-of-memory markers
 * instead of blocks (their frees skipped), and the summary gives the budget and the heap
 * policy's figures on host storage.
 */
export function fromTrace(json: Loose, replay?: HostReplay) {
  const blocks: Columns = blockColumns()
  const live = new Map<string, number>()
  const failed = new Set(replay?.failed)
  const refused = new Set<string>() // ids whose allocation failed, until their free
  const ooms: { t: number; size: number; pool: string }[] = []
  let t = 0
  for (const [i, e] of array(json.events, 'events').entries()) {
    const at = `events[${i}]`
    object(e, at)
    const key = id(e.id, `${at}.id`)
    if (e.op === 'alloc' && failed.has(i)) {
      if (live.has(key) || refused.has(key)) fail(`${at}.id`, 'an id not live', shown(key), 'the id is allocated twice without a free')
      refused.add(key)
      ooms.push({ t, size: count(e.size, `${at}.size`), pool: 'requested' })
    } else if (e.op === 'free' && refused.delete(key)) {
      // The allocation failed: nothing to free.
    } else if (e.op === 'alloc') {
      if (live.has(key) || refused.has(key)) fail(`${at}.id`, 'an id not live', shown(key), 'the id is allocated twice without a free')
      live.set(key, blocks.size.length)
      blocks.label.push(key)
      blocks.size.push(count(e.size, `${at}.size`))
      blocks.start.push(t)
      blocks.end.push(-1)
      blocks.seg.push(-1)
      blocks.off.push(-1)
      blocks.pool.push(0)
      blocks.state.push(0)
      blocks.stack.push(-1)
    } else if (e.op === 'free') {
      const k = live.get(key)
      if (k === undefined) fail(`${at}.id`, 'the id of a live allocation', shown(key), 'free of unknown id')
      blocks.end[k] = t
      live.delete(key)
    } else {
      fail(`${at}.op`, '"alloc" or "free"', shown(e.op))
    }
    t++
  }
  const steps = Math.max(t, 1)
  for (const k of live.values()) blocks.end[k] = steps
  const active = peakOf(blocks.start, blocks.end, blocks.size, steps)
  const title = [json.model, json.trace].filter((x): x is string => typeof x === 'string').join(' · ')
  const allocations = blocks.size.length + ooms.length
  const summary: SummaryRow[] = [
    ['peak live', active.peak, 'bytes'],
    ['allocations', allocations, 'count'],
    ['events', steps, 'count'],
    ['requests', typeof json.requests === 'number' ? json.requests : 1, 'count'],
  ]
  if (replay)
    summary.push(
      ['budget', replay.budget, 'bytes'],
      ['out-of-memory events', ooms.length, 'count'],
      ['heap policy: peak reserved', replay.heap.peakReservedBytes, 'bytes'],
      ['heap policy: refused allocations', replay.heap.failedAllocations, 'count'],
    )
  return {
    kind: 'memory',
    title: title ? `${title} (alloc/free trace)` : 'alloc/free trace',
    subtitle: replay
      ? `${allocations} allocations, ${steps} events, replayed on host storage (no device) under a ${replay.budget}-byte budget: ${ooms.length} did not fit`
      : `${allocations} allocations, ${steps} events, not replayed on a device`,
    mode: 'trace',
    steps,
    pools: ['requested'],
    blocks,
    stacks: [] as string[],
    segments: [],
    ooms,
    peakStep: active.at,
    summary,
  }
}
