'use strict'
// Replays an eager alloc/free trace (bench/data/traces format) through the
// device heap, and through two simple caching policies for comparison:
// an exact-size free list (tfjs-webgpu's buffer manager) and power-of-two
// buckets (ORT-WebGPU's / CachingHostAllocator's). The baselines are simulated
// (they only count bytes); the heap run allocates real GPU memory.
const { WgallocError } = require('./errors.cjs')

/** One small heap of slack, so tiny workloads are not judged by heap granularity. */
const SLACK = 8 * 2 ** 20

function checkTrace(trace) {
  if (!trace || !Array.isArray(trace.events)) {
    throw new WgallocError('INVALID_ARGUMENT', 'a trace is an object with an events array of { op: "alloc", id, size } | { op: "free", id }')
  }
  return trace.requests ?? 1
}

/** Fields every policy reports. */
function figures(policy, peakReserved, peakLive, driverAllocations, requests, events) {
  return {
    policy,
    peakReservedBytes: peakReserved,
    peakLiveBytes: peakLive,
    fragmentation: peakLive > 0 ? peakReserved / peakLive : 1,
    driverAllocations,
    driverAllocationsPer1000Requests: (driverAllocations / requests) * 1000,
    events,
  }
}

/** A cache keyed by rounded size: free buffers of the same key are reused, none released. */
function simulateKeyed(policy, trace, keyOf) {
  const requests = checkTrace(trace)
  const free = new Map() // key -> count of cached buffers
  const live = new Map() // id -> { size, key }
  let reserved = 0
  let peakReserved = 0
  let liveBytes = 0
  let peakLive = 0
  let driver = 0
  for (const e of trace.events) {
    if (e.op === 'alloc') {
      const key = keyOf(Math.max(e.size, 4))
      const cached = free.get(key) ?? 0
      if (cached > 0) free.set(key, cached - 1)
      else {
        reserved += key
        driver++
      }
      live.set(e.id, { size: e.size, key })
      liveBytes += e.size
    } else {
      const b = live.get(e.id)
      if (!b) throw new WgallocError('INVALID_ARGUMENT', `trace frees unknown id ${e.id}`)
      live.delete(e.id)
      liveBytes -= b.size
      free.set(b.key, (free.get(b.key) ?? 0) + 1)
    }
    peakReserved = Math.max(peakReserved, reserved)
    peakLive = Math.max(peakLive, liveBytes)
  }
  return figures(policy, peakReserved, peakLive, driver, requests, trace.events.length)
}

const exactSize = (trace) => simulateKeyed('exact-size free list', trace, (s) => Math.ceil(s / 4) * 4)
const powerOfTwo = (trace) => simulateKeyed('power-of-two buckets', trace, (s) => 2 ** Math.ceil(Math.log2(s)))

/** Runs the trace through `heap` (real GPU memory); the heap should start empty. */
function replayHeap(heap, trace) {
  const requests = checkTrace(trace)
  heap.emptyCache()
  heap.resetPeakStats()
  heap.resetAccumulatedStats()
  const live = new Map()
  let liveBytes = 0
  let peakLive = 0
  try {
    for (const e of trace.events) {
      if (e.op === 'alloc') {
        live.set(e.id, heap.malloc(Math.max(e.size, 1)))
        liveBytes += e.size
        peakLive = Math.max(peakLive, liveBytes)
      } else {
        const b = live.get(e.id)
        if (!b) throw new WgallocError('INVALID_ARGUMENT', `trace frees unknown id ${e.id}`)
        liveBytes -= b.requestedSize
        b.free()
        live.delete(e.id)
      }
    }
  } finally {
    for (const b of live.values()) b.free()
  }
  const s = heap.stats()
  const f = figures('wgalloc heap', s.reservedBytes.peak, peakLive, s.driverAllocations, requests, trace.events.length)
  // Bytes of blocks at the peak (alignment padding and best-fit holes inside segments show here).
  f.peakAllocatedBytes = s.allocatedBytes.peak
  f.withinTarget = f.peakReservedBytes <= 1.15 * peakLive + SLACK
  return f
}

module.exports = { replayHeap, exactSize, powerOfTwo }
