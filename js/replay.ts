// Replays an eager alloc/free trace (bench/data/traces format) through the device heap, and
// through two simple caching policies for comparison: an exact-size free list (tfjs-webgpu's
// buffer manager) and power-of-two buckets (ORT-WebGPU's / CachingHostAllocator's). The
// baselines are simulated (they only count bytes); the heap run allocates real GPU memory.
import type { DeviceBlock } from './device-block.js'
import { WgallocError } from './errors.js'
import type { Heap } from './heap.js'

/** One small heap of slack, so tiny workloads are not judged by heap granularity. */
const SLACK = 8 * 2 ** 20

/** One event of an alloc/free trace. */
export interface TraceEvent {
  /** An allocation or a free. */
  op: 'alloc' | 'free'
  /** The buffer (a free names an earlier alloc's id). */
  id: string | number
  /** Bytes (alloc). */
  size?: number
}

/** An eager alloc/free trace (the `bench/data/traces` format). */
export interface Trace {
  /** Allocations and frees in order. */
  events: TraceEvent[]
  /** Requests the trace covers (default 1). */
  requests?: number
  /** The model it was recorded from. */
  model?: string
  /** Which run of the model. */
  trace?: string
  /** The largest sum of live sizes. */
  peakLiveBytes?: number
}

/** What each policy reports for a trace. */
export interface PolicyFigures {
  policy: string
  peakReservedBytes: number
  peakLiveBytes: number
  fragmentation: number
  driverAllocations: number
  driverAllocationsPer1000Requests: number
  events: number
  peakAllocatedBytes?: number
  withinTarget?: boolean
}

/** Checks the trace's shape and every event; returns its request count. */
export function checkTrace(trace: unknown): number {
  const t = trace as Partial<Trace> | null
  if (!t || typeof t !== 'object' || !Array.isArray(t.events)) {
    throw new WgallocError('INVALID_ARGUMENT', 'a trace is an object with an events array of { op: "alloc", id, size } | { op: "free", id }')
  }
  return t.requests ?? 1
}

function figures(policy: string, peakReserved: number, peakLive: number, driverAllocations: number, requests: number, events: number): PolicyFigures {
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
function simulateKeyed(policy: string, trace: Trace, keyOf: (size: number) => number): PolicyFigures {
  const requests = checkTrace(trace)
  const free = new Map<number, number>() // key -> count of cached buffers
  const live = new Map<string | number, { size: number; key: number }>()
  let reserved = 0
  let peakReserved = 0
  let liveBytes = 0
  let peakLive = 0
  let driver = 0
  for (const e of trace.events) {
    if (e.op === 'alloc') {
      const size = e.size ?? 0
      const key = keyOf(Math.max(size, 4))
      const cached = free.get(key) ?? 0
      if (cached > 0) free.set(key, cached - 1)
      else {
        reserved += key
        driver++
      }
      live.set(e.id, { size, key })
      liveBytes += size
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

/** The exact-size free list baseline. */
export const exactSize = (trace: Trace): PolicyFigures => simulateKeyed('exact-size free list', trace, (s) => Math.ceil(s / 4) * 4)
/** The power-of-two buckets baseline. */
export const powerOfTwo = (trace: Trace): PolicyFigures => simulateKeyed('power-of-two buckets', trace, (s) => 2 ** Math.ceil(Math.log2(s)))

/** Runs the trace through `heap` (real GPU memory); the heap should start empty. */
export function replayHeap(heap: Heap, trace: Trace): PolicyFigures {
  const requests = checkTrace(trace)
  heap.emptyCache()
  heap.resetPeakStats()
  heap.resetAccumulatedStats()
  const live = new Map<string | number, DeviceBlock>()
  let liveBytes = 0
  let peakLive = 0
  try {
    for (const e of trace.events) {
      if (e.op === 'alloc') {
        const size = e.size ?? 0
        live.set(e.id, heap.malloc(Math.max(size, 1)))
        liveBytes += size
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
