'use strict'
// Memory history for the viewer, modelled on PyTorch's
// `_record_memory_history` + `_snapshot()`: heap events become a list of
// alloc / free / segment_alloc / segment_free / oom entries, each block with
// its segment and offset, so a page can draw the active-memory timeline and the
// segment map at any moment.
const { performance } = require('node:perf_hooks')
const { WgallocError } = require('../errors.cjs')

const FORMAT = 'wgalloc-memory-history'

/**
 * Starts recording `heap`'s allocator events. Blocks and segments that exist
 * already are recorded first. `label(blockId, text)` names a block (shown on hover);
 * `snapshot()` returns `{ format, version, segments, history }` (JSON-ready);
 * `stop()` removes the listeners.
 */
function recordMemoryHistory(heap) {
  if (!heap || typeof heap.on !== 'function' || typeof heap.snapshot !== 'function') {
    throw new WgallocError('INVALID_ARGUMENT', 'recordMemoryHistory: pass a heap (gpu.heap)')
  }
  const t0 = performance.now()
  const now = () => Math.round((performance.now() - t0) * 1000) / 1000
  const history = []
  const allocs = new Map() // live block id -> its alloc entry (for labels)
  const known = new Set() // live segment ids

  const addSegment = (s) => {
    known.add(s.id)
    history.push({ action: 'segment_alloc', t: now(), segmentId: s.id, size: s.size, pool: s.pool, dedicated: s.dedicated })
  }
  const addBlock = (entry) => {
    allocs.set(entry.blockId, entry)
    history.push(entry)
  }
  for (const s of heap.snapshot()) {
    addSegment(s)
    for (const b of s.blocks) {
      if (b.state !== 'free')
        addBlock({ action: 'alloc', t: 0, blockId: b.blockId, segmentId: s.id, offset: b.offset, size: b.size, pool: s.pool, label: 'before recording' })
    }
  }

  const onAlloc = (e) => {
    if (!known.has(e.segmentId)) {
      // A new segment: only a snapshot knows its size.
      const s = heap.snapshot().find((x) => x.id === e.segmentId)
      addSegment(s ?? { id: e.segmentId, size: e.size, pool: e.pool, dedicated: false })
    }
    // The block may already be gone when the event arrives late (native users of the heap).
    const info = heap.getBlockInfo(e.blockId)
    const entry = { action: 'alloc', t: now(), blockId: e.blockId, segmentId: e.segmentId, offset: info ? info.offset : null, size: e.size, pool: e.pool }
    if (info) entry.requestedSize = info.requestedSize
    if (info?.shape) entry.shape = info.shape
    addBlock(entry)
  }
  const offs = [
    heap.on('ALLOCATED', onAlloc),
    heap.on('RECYCLED', onAlloc),
    heap.on('FREED', (e) => {
      allocs.delete(e.blockId)
      history.push({ action: 'free', t: now(), blockId: e.blockId })
    }),
    heap.on('RELEASED', (e) => {
      known.delete(e.segmentId)
      history.push({ action: 'segment_free', t: now(), segmentId: e.segmentId })
    }),
    heap.on('ALLOCATION_FAILED', (e) => history.push({ action: 'oom', t: now(), size: e.size, pool: e.pool })),
  ]
  return {
    label(blockId, text) {
      const entry = allocs.get(blockId)
      if (entry) entry.label = String(text)
    },
    snapshot() {
      return { format: FORMAT, version: 1, segments: heap.snapshot(), history: history.slice() }
    },
    stop() {
      for (const off of offs.splice(0)) off()
    },
  }
}

/**
 * Replays an alloc/free trace (bench/data/traces format) through `heap` while
 * recording, each block labelled with its trace id. The heap should start empty.
 */
function replayHistory(heap, trace) {
  if (!trace || !Array.isArray(trace.events)) {
    throw new WgallocError('INVALID_ARGUMENT', 'a trace is an object with an events array of { op: "alloc", id, size } | { op: "free", id }')
  }
  heap.emptyCache()
  const recorder = recordMemoryHistory(heap)
  const live = new Map()
  try {
    for (const [i, e] of trace.events.entries()) {
      if (e.op === 'alloc') {
        if (!Number.isSafeInteger(e.size) || e.size < 0) throw new WgallocError('INVALID_ARGUMENT', `trace event ${i}: size must be a non-negative integer`)
        const block = heap.malloc(Math.max(e.size, 1))
        recorder.label(block.id, e.id)
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
    const title = [trace.model, trace.trace, trace.requests > 1 ? `${trace.requests} requests` : null].filter(Boolean).join(' · ')
    return { ...snap, title: title || undefined, replayOf: { events: trace.events.length, peakLiveBytes: trace.peakLiveBytes } }
  } finally {
    for (const b of live.values()) b.free()
    recorder.stop()
  }
}

module.exports = { recordMemoryHistory, replayHistory, FORMAT }
