// runDemo(): the end-to-end demo behind `wgalloc demo`. Builds the transformer
// block, runs it eagerly (heap allocations per op) and planned (one slab),
// compares memory, time and output against a CPU reference, and returns every
// figure as one plain object (the CLI prints it; tests assert on it).
import { resolve } from 'node:path'
import type { Observation } from '../binding.js'
import { equalOutputs, median } from '../check.js'
import type { Executor } from '../exec.js'
import { Gpu } from '../gpu.js'
import type { Graph } from '../graph.js'
import { STRATEGIES, type Strategy, planMemory } from '../plan.js'
import { type DemoData, type ShapeOptions, badOption, graph as buildGraph, shapes, weights } from './model.js'
import { reference } from './reference.js'
import { checkWritable, writeWhole } from '../internal/output-file.js'

/** Options of `runDemo()`. */
export interface DemoOptions extends ShapeOptions {
  runs?: number
  strategy?: string
  timeLimitMs?: number
  svg?: string | null
  trace?: string | null
  seed?: number
  gpu?: Gpu
}

interface PlanRecord {
  id: string
  size: number
  first: number
  last: number
}

interface StrategyRow {
  strategy: Strategy
  slabSize: number
  lowerBound: number
  ratio: number
  ofNaive: number
  optimal: boolean
  timeMs: number
  method: string
}

/** Relative-ish tolerance: 1e-3 of the output's magnitude (at least 1e-3 absolute). */
export const RELATIVE_TOLERANCE = 1e-3

function maxAbsDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let max = 0
  for (let i = 0; i < a.length; i++) max = Math.max(max, Math.abs(a[i] - b[i]))
  return a.length === b.length ? max : Infinity
}

/** Peak bytes of live activations (params excluded) in an eager run's observed events. */
function activationPeak(observation: Observation, graph: Graph): number {
  const params = new Set(graph.tensors.filter((t) => t.kind === 'param').map((t) => t.id))
  let live = 0
  let peak = 0
  for (const e of observation.events) {
    if (params.has(e.tensor)) continue
    live += e.kind === 'alloc' ? e.size : -e.size
    peak = Math.max(peak, live)
  }
  return peak
}

async function timed(fn: () => Promise<unknown>): Promise<number> {
  const t0 = performance.now()
  await fn()
  return performance.now() - t0
}

/** Eager run from an emptied heap: the heap's peak reserved bytes are the run's footprint. */
async function eagerFootprint(gpu: Gpu, graph: Graph, data: DemoData) {
  const heap = gpu.heap
  heap.emptyCache()
  heap.resetPeakStats()
  const before = heap.stats()
  const { outputs, observation } = await gpu.runEager(graph, data.inputs, { params: data.params, observe: true })
  const after = heap.stats()
  return {
    outputs,
    // Minus whatever the caller already held on this device (nothing on a fresh one).
    peakReservedBytes: after.reservedBytes.peak - before.reservedBytes.current,
    peakAllocatedBytes: after.allocatedBytes.peak - before.allocatedBytes.current,
    peakLiveBytes: observation?.peakLiveBytes ?? 0,
    peakActivationBytes: observation ? activationPeak(observation, graph) : 0,
    driverAllocations: after.driverAllocations - before.driverAllocations,
  }
}

/** Every strategy on the executor's own usage records, with the device's alignment. */
async function planAll(records: PlanRecord[], alignment: number, timeLimitMs: number) {
  const naiveBytes = records.reduce((sum, r) => sum + r.size, 0)
  const rows: StrategyRow[] = []
  for (const strategy of STRATEGIES) {
    const p = await planMemory(records, { strategy, alignment, timeLimitMs })
    rows.push({
      strategy,
      slabSize: p.slabSize,
      lowerBound: p.lowerBound,
      ratio: p.ratio,
      ofNaive: p.slabSize / naiveBytes,
      optimal: p.optimal,
      timeMs: p.timeMs,
      method: p.method,
    })
  }
  return { naiveBytes, rows }
}

/**
 * Options: seq, dim, heads, ffn (shapes), runs (timed runs of each mode), strategy
 * (of the compiled plan), timeLimitMs (search budget of exact/best), svg and trace (paths,
 * null to skip), seed, gpu (an open device to reuse; otherwise
 * one is opened and destroyed).
 */
export async function runDemo(options: DemoOptions = {}) {
  const { runs = 10, strategy = 'best', timeLimitMs = 1000, svg = 'plan.svg', trace = 'trace.json', seed = 1 } = options
  if (!Number.isInteger(runs) || runs < 1) throw badOption('--runs', 'a positive integer', String(runs))
  if (!STRATEGIES.includes(strategy as Strategy)) throw badOption('--strategy', `one of ${STRATEGIES.join(', ')}`, `'${strategy}'`)
  const s = shapes(options)
  const started = performance.now()
  const graph = buildGraph(s)
  const data = weights(s, seed)
  const gpu = options.gpu ?? (await Gpu.request())
  let exe: Executor | undefined
  try {
    // Eager first, before the executor's slab sits in the heap.
    const eager = await eagerFootprint(gpu, graph, data)
    exe = await gpu.compile(graph, { strategy: strategy as Strategy, timeLimitMs, params: data.params })
    const compiled = exe
    // The first run also proves the plan on the device: every op's outputs are
    // poisoned first, and no tensor live across an op may change.
    const planned = (await exe.run(data.inputs, { checkPlan: true })).outputs
    const expected = reference(s, data)

    const records = exe.plan.toJSON().records.map(({ id, size, first, last }) => ({ id, size: Number(size), first: Number(first), last: Number(last) }))
    const strategies = await planAll(records, gpu.heap.alignment, timeLimitMs)

    // Interleaved so drift (thermal, caches) hits both modes alike.
    const eagerMs: number[] = []
    const plannedMs: number[] = []
    for (let i = 0; i < runs; i++) {
      eagerMs.push(await timed(() => gpu.runEager(graph, data.inputs, { params: data.params })))
      plannedMs.push(await timed(() => compiled.run(data.inputs)))
    }

    const maxAbsReference = expected.reduce((m, v) => Math.max(m, Math.abs(v)), 0)
    const maxAbsError = maxAbsDiff(planned.out, expected)
    const tolerance = RELATIVE_TOLERANCE * Math.max(1, maxAbsReference)
    let svgPath: string | null = null
    if (svg) {
      svgPath = resolve(svg)
      writeWhole(svgPath, exe.plan.toSVG())
    }
    // One eager and one planned run under the profiler: per-kernel GPU time and the
    // heap's memory counters side by side in a Chrome trace / Perfetto file.
    let tracePath: string | null = null
    if (trace) {
      tracePath = resolve(trace)
      checkWritable(tracePath)
      await gpu.profiler.profile(
        async () => {
          await gpu.runEager(graph, data.inputs, { params: data.params })
          await compiled.run(data.inputs)
        },
        { mode: 'interval,event' },
      )
      await gpu.profiler.exportTrace(tracePath)
    }
    const plan = exe.plan
    const stats = exe.stats()
    const paramBytes = Object.values(data.params).reduce((sum, p) => sum + p.byteLength, 0)
    return {
      device: { adapter: gpu.info.adapterName, backend: gpu.info.backend, deviceType: gpu.info.deviceType },
      model: {
        ...s,
        ops: graph.ops.length,
        tensors: graph.tensors.length,
        intermediates: graph.tensors.filter((t) => t.kind === 'intermediate' && !t.viewOf).length,
        views: graph.tensors.filter((t) => t.viewOf).length,
        paramBytes,
      },
      planning: {
        records: records.length,
        alignment: gpu.heap.alignment,
        naiveBytes: strategies.naiveBytes,
        lowerBound: plan.lowerBound,
        strategies: strategies.rows,
      },
      plan: { strategy: plan.strategy, method: plan.method, slabSize: plan.slabSize, lowerBound: plan.lowerBound, ratio: plan.ratio, optimal: plan.optimal },
      memory: {
        eagerPeakReservedBytes: eager.peakReservedBytes,
        eagerPeakAllocatedBytes: eager.peakAllocatedBytes,
        eagerPeakLiveBytes: eager.peakLiveBytes,
        eagerPeakActivationBytes: eager.peakActivationBytes,
        eagerDriverAllocations: eager.driverAllocations,
        plannedDeviceBytes: exe.deviceBytes,
        plannedSlabBytes: stats.slabBytes,
        plannedConstantBytes: stats.constantBytes,
      },
      time: { runs, eagerMs: median(eagerMs), plannedMs: median(plannedMs), speedup: median(eagerMs) / median(plannedMs) },
      accuracy: {
        maxAbsError,
        maxAbsReference,
        tolerance,
        ok: maxAbsError < tolerance,
        eagerEqualsPlanned: equalOutputs(eager.outputs, planned),
        eagerMaxAbsDiff: maxAbsDiff(eager.outputs.out, planned.out),
        planCheckedOnDevice: true,
      },
      executor: stats,
      svg: svgPath,
      trace: tracePath,
      wallMs: performance.now() - started,
    }
  } finally {
    exe?.release()
    if (!options.gpu) gpu.destroy()
  }
}
