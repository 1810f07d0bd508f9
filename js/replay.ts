// Replays an eager alloc/free trace (bench/data/traces format) through the device heap
// (`replayHeap`, real GPU memory) or through the heap's policy on host storage (`simulate`, no
// GPU, the same Rust code), beside baselines simulated on the same events: PyTorch's CUDA
// caching allocator policy, power-of-two buckets (ORT-WebGPU's / CachingHostAllocator's) and an
// exact-size free list (tfjs-webgpu's buffer manager). Parsing, checking (bad events are
// INVALID_ARGUMENT naming their index) and the simulations are in Rust (wgalloc-core `replay`).
import type { ReplayTargetBounds, SimulateTraceOptions, SimulatedPolicy, TraceSimulation } from './binding.js'
import type { DeviceBlock } from './device-block.js'
import { WgallocError, stringifyInput, toWgallocError, invalidArgument, shown } from './errors.js'
import { type Heap, type HeapProfile, profileFromJson } from './heap.js'
import { native } from './internal/native.js'

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

/**
 * A part of the heap's per-trace target (wgalloc-core `replay::target`, `TargetMisses::PART_NAMES`):
 * peak reserved over 1.15 x peak live + 8 MiB, over pytorch-cuda's, driver allocations over
 * 2 x pytorch-cuda's + 2, bytes moved over 10% of the bytes the trace allocates.
 */
export type TargetPart = 'reserved-over-live' | 'reserved-over-pytorch-cuda' | 'driver-allocations' | 'bytes-moved'

/** The heap's per-trace target on one trace: its bounds and the parts missed. */
export interface TargetVerdict {
  /** Every part met. */
  met: boolean
  /** The parts missed, in the order of `TargetPart`. */
  missed: TargetPart[]
  /** The most each figure may be on this trace. */
  bounds: ReplayTargetBounds
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
  /** Bytes the trace's allocations request in all. */
  bytesAllocated?: number
  /** Buffers given back to the driver (wgalloc only). */
  driverFrees?: number
  peakAllocatedBytes?: number
  /** Bytes of live blocks the heap moved to make room (wgalloc only). */
  bytesMoved?: number
  /** Peak reserved within 1.15 x peak live + 8 MiB (wgalloc only; `target` has every part). */
  withinTarget?: boolean
  /** The per-trace target's verdict (wgalloc only). */
  target?: TargetVerdict
  simulated?: boolean
  /** Allocations refused for lack of memory (wgalloc simulated with a `capacity` only). */
  failedAllocations?: number
}

/** A replay from a warm start: what it reserved up front and how the run went past it. */
export interface WarmStartFigures {
  /** Segments the warm start reserved. */
  segments: number
  /** Their bytes. */
  reservedBytes: number
  /** Driver allocations after the warm start (0: the profile's segments held the whole run). */
  driverAllocationsAfter: number
  /** Peak reserved (warm segments included) over peak live. */
  fragmentation: number
  /** Peak reserved <= 1.05 x peak live + 2 MiB, the warm start's target. */
  withinTarget: boolean
}

/** wgalloc's figures on a trace, with the baselines simulated on the same events. */
export interface ReplayFigures extends PolicyFigures {
  baselines: PolicyFigures[]
  /** The heap's profile at the end of the replay (`heap.profile()`), for `--save-profile`. */
  profile?: HeapProfile
  /** With a warm start: its figures (`driverAllocations` then counts those after it). */
  warmStart?: WarmStartFigures
}

/** Options of `replayHeap` and `simulate` beyond the device's. */
export interface ReplayOptions {
  /** Start the heap warm from this profile (`heap.warmStart()`). */
  profile?: HeapProfile | string
}

/** The warm start's figures, judged against `bounds.warmReservedBytes` (from Rust). */
function warmFigures(f: PolicyFigures, segments: number, reservedBytes: number, bounds: ReplayTargetBounds): WarmStartFigures {
  return {
    segments,
    reservedBytes,
    driverAllocationsAfter: f.driverAllocations,
    fragmentation: f.fragmentation,
    withinTarget: f.peakReservedBytes <= bounds.warmReservedBytes,
  }
}

/** Runs the native simulation on a trace object or its JSON text; errors are typed. */
function simulateNative(trace: unknown, options?: SimulateTraceOptions): TraceSimulation {
  try {
    return native.simulateTrace(typeof trace === 'string' ? trace : stringifyInput(trace ?? null, 'the trace'), options)
  } catch (err) {
    throw toWgallocError(err, true)
  }
}

/** Checks the trace (INVALID_ARGUMENT naming the bad event); returns its request count. */
export function checkTrace(trace: unknown): number {
  return simulateNative(trace, { baselinesOnly: true }).requests
}

function figures(
  policy: string,
  peakReserved: number,
  peakLive: number,
  driverAllocations: number,
  requests: number,
  events: number,
  bytesAllocated: number,
): PolicyFigures {
  return {
    policy,
    peakReservedBytes: peakReserved,
    peakLiveBytes: peakLive,
    fragmentation: peakLive > 0 ? peakReserved / peakLive : 1,
    driverAllocations,
    driverAllocationsPer1000Requests: (driverAllocations / requests) * 1000,
    events,
    bytesAllocated,
  }
}

/** wgalloc's own figures: padding at the peak, bytes moved, driver frees and the target's verdict against `bounds` (from Rust). */
function withTarget(
  f: PolicyFigures,
  own: { peakAllocated: number | undefined; bytesMoved: number; driverFrees: number },
  bounds: ReplayTargetBounds,
): PolicyFigures {
  f.peakAllocatedBytes = own.peakAllocated
  f.bytesMoved = own.bytesMoved
  f.driverFrees = own.driverFrees
  const parts: [TargetPart, boolean][] = [
    ['reserved-over-live', f.peakReservedBytes > bounds.reservedOverLiveBytes],
    ['reserved-over-pytorch-cuda', f.peakReservedBytes > bounds.reservedPytorchCudaBytes],
    ['driver-allocations', f.driverAllocations > bounds.driverAllocations],
    ['bytes-moved', own.bytesMoved > bounds.bytesMoved],
  ]
  const missed = parts.filter(([, miss]) => miss).map(([part]) => part)
  f.withinTarget = !missed.includes('reserved-over-live')
  f.target = { met: missed.length === 0, missed, bounds }
  return f
}

const fromNative = (sim: TraceSimulation, p: SimulatedPolicy) =>
  figures(p.policy, p.peakReservedBytes, p.peakLiveBytes, p.driverAllocations, sim.requests, sim.events, p.bytesAllocated)

/** The baselines of a trace: `[pytorch-cuda, power-of-two, exact-size]`. */
export function baselines(trace: unknown): PolicyFigures[] {
  const sim = simulateNative(trace, { baselinesOnly: true })
  return sim.baselines.map((p) => fromNative(sim, p))
}

/** PyTorch's CUDA caching allocator policy on the trace. */
export const pytorchCuda = (trace: unknown): PolicyFigures => baselines(trace)[0]
/** The power-of-two buckets baseline. */
export const powerOfTwo = (trace: unknown): PolicyFigures => baselines(trace)[1]
/** The exact-size free list baseline. */
export const exactSize = (trace: unknown): PolicyFigures => baselines(trace)[2]

/** The heap's policy on host storage, no GPU (`options`: the device it stands for, and a profile to start warm from): wgalloc's figures with `baselines`. */
export function simulate(trace: unknown, options?: Omit<SimulateTraceOptions, 'profile'> & ReplayOptions): ReplayFigures {
  const profile = options?.profile
  const text = profile === undefined || typeof profile === 'string' ? profile : stringifyInput(profile, 'the profile')
  const sim = simulateNative(trace, { ...options, profile: text })
  if (!sim.wgalloc) throw new WgallocError('INTERNAL', 'the simulation returned no figures for the heap')
  const ours: ReplayFigures = {
    ...withTarget(
      { ...fromNative(sim, sim.wgalloc), simulated: true },
      { peakAllocated: sim.wgalloc.peakAllocatedBytes, bytesMoved: sim.wgalloc.bytesMoved, driverFrees: sim.wgalloc.driverFrees },
      sim.target,
    ),
    baselines: sim.baselines.map((p) => fromNative(sim, p)),
  }
  if (options?.capacity !== undefined) ours.failedAllocations = sim.wgalloc.failedAllocations
  if (sim.profile !== undefined && sim.profile !== null) ours.profile = profileFromJson(sim.profile)
  if (sim.warmStart) ours.warmStart = warmFigures(ours, sim.warmStart.segments, sim.warmStart.reservedBytes, sim.target)
  return ours
}

/**
 * Runs the trace through `heap` (real GPU memory; it should start empty), from a warm start with
 * `options.profile`: figures with `baselines` and the profile the heap ends with.
 */
export function replayHeap(heap: Heap, trace: Trace, options?: ReplayOptions): ReplayFigures {
  // Checks the trace before any GPU memory is touched.
  const sim = simulateNative(trace, { baselinesOnly: true })
  heap.emptyCache()
  const warm = options?.profile === undefined ? undefined : heap.warmStart(options.profile)
  heap.resetPeakStats()
  heap.resetAccumulatedStats()
  const live = new Map<string, [DeviceBlock, number]>() // id (as the Rust check keys it) -> block, size
  let liveBytes = 0
  let peakLive = 0
  try {
    for (const e of trace.events) {
      const id = String(e.id)
      if (e.op === 'alloc') {
        const size = e.size ?? 0
        live.set(id, [heap.malloc(Math.max(size, 1)), size])
        liveBytes += size
        peakLive = Math.max(peakLive, liveBytes)
      } else {
        const entry = live.get(id)
        if (!entry) throw invalidArgument('trace event id', 'the id of a live allocation', shown(e.id), 'the trace frees an unknown id')
        const [block, size] = entry
        liveBytes -= size
        block.free()
        live.delete(id)
      }
    }
  } finally {
    for (const [block] of live.values()) block.free()
  }
  const s = heap.stats()
  const bytesAllocated = sim.baselines[0].bytesAllocated
  const ours = withTarget(
    { ...figures('wgalloc', s.reservedBytes.peak, peakLive, s.driverAllocations, sim.requests, sim.events, bytesAllocated), simulated: false },
    // Bytes of blocks at the peak (alignment padding and best-fit holes inside segments show here).
    { peakAllocated: s.allocatedBytes.peak, bytesMoved: s.bytesMoved, driverFrees: s.driverFrees },
    sim.target,
  )
  const out: ReplayFigures = { ...ours, baselines: sim.baselines.map((p) => fromNative(sim, p)), profile: heap.profile() }
  if (warm) out.warmStart = warmFigures(out, warm.segments, warm.reservedBytes, sim.target)
  return out
}
