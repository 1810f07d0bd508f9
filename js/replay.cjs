'use strict'
// Replays an eager alloc/free trace (bench/data/traces format) through the device heap
// (`replayHeap`, real GPU memory) or through the heap's policy on host storage
// (`simulate`, no GPU, the same Rust code), beside baselines simulated on the same events:
// PyTorch's CUDA caching allocator policy, power-of-two buckets (ORT-WebGPU's /
// CachingHostAllocator's) and an exact-size free list (tfjs-webgpu's buffer manager).
// Parsing, checking (bad events are INVALID_ARGUMENT naming their index) and the
// simulations are in Rust (wgalloc-core `replay`).
const native = require('./native.cjs')
const { toWgallocError } = require('./errors.cjs')

/** One small heap of slack, so tiny workloads are not judged by heap granularity. */
const SLACK = 8 * 2 ** 20

/** Runs the native simulation on a trace object or its JSON text; errors are typed. */
function simulateNative(trace, options) {
  try {
    return native.simulateTrace(typeof trace === 'string' ? trace : JSON.stringify(trace ?? null), options)
  } catch (err) {
    throw toWgallocError(err)
  }
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

/** wgalloc's own figures: padding at the peak and the target check. */
function withTarget(f, peakAllocated) {
  f.peakAllocatedBytes = peakAllocated
  f.withinTarget = f.peakReservedBytes <= 1.15 * f.peakLiveBytes + SLACK
  return f
}

function fromNative(sim, p) {
  return figures(p.policy, p.peakReservedBytes, p.peakLiveBytes, p.driverAllocations, sim.requests, sim.events)
}

/** The baselines of a trace: `[pytorch-cuda, power-of-two, exact-size]`. */
function baselines(trace) {
  const sim = simulateNative(trace, { baselinesOnly: true })
  return sim.baselines.map((p) => fromNative(sim, p))
}

const pytorchCuda = (trace) => baselines(trace)[0]
const powerOfTwo = (trace) => baselines(trace)[1]
const exactSize = (trace) => baselines(trace)[2]

/**
 * The heap's policy on host storage, no GPU (`options`: the device it stands for, see
 * `SimulateTraceOptions`): wgalloc's figures with `baselines`.
 */
function simulate(trace, options) {
  const sim = simulateNative(trace, options)
  const ours = withTarget({ ...fromNative(sim, sim.wgalloc), simulated: true }, sim.wgalloc.peakAllocatedBytes)
  return { ...ours, baselines: sim.baselines.map((p) => fromNative(sim, p)) }
}

/** Runs the trace through `heap` (real GPU memory; it should start empty): figures with `baselines`. */
function replayHeap(heap, trace) {
  // Checks the trace before any GPU memory is touched.
  const sim = simulateNative(trace, { baselinesOnly: true })
  heap.emptyCache()
  heap.resetPeakStats()
  heap.resetAccumulatedStats()
  const live = new Map() // id (as the Rust check keys it) -> [block, size]
  let liveBytes = 0
  let peakLive = 0
  try {
    for (const e of trace.events) {
      const id = String(e.id)
      if (e.op === 'alloc') {
        live.set(id, [heap.malloc(Math.max(e.size, 1)), e.size])
        liveBytes += e.size
        peakLive = Math.max(peakLive, liveBytes)
      } else {
        const [block, size] = live.get(id)
        liveBytes -= size
        block.free()
        live.delete(id)
      }
    }
  } finally {
    for (const [block] of live.values()) block.free()
  }
  const s = heap.stats()
  const ours = withTarget(
    { ...figures('wgalloc', s.reservedBytes.peak, peakLive, s.driverAllocations, sim.requests, sim.events), simulated: false },
    // Bytes of blocks at the peak (alignment padding and best-fit holes inside segments show here).
    s.allocatedBytes.peak,
  )
  return { ...ours, baselines: sim.baselines.map((p) => fromNative(sim, p)) }
}

module.exports = { replayHeap, simulate, baselines, pytorchCuda, powerOfTwo, exactSize }
