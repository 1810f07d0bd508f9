// Eager vs planned execution of a graph, with checksum kernels standing in for a model
// graph's ops: bitwise equality of outputs, slab vs lower bound, memory and time of both
// modes. Used by `wgalloc check`, the tests and the benchmarks.
import type { ExecutorStats } from './binding.js'
import { invalidArgument, shown } from './errors.js'
import type { Gpu } from './gpu.js'
import { type Graph, type GraphTensor, type OutputArray, tensorBytes } from './graph.js'
import type { Strategy } from './plan.js'

/** Deterministic bytes for every input of `graph`. */
export function sampleInputs(graph: Graph): Record<string, Uint8Array> {
  const inputs: Record<string, Uint8Array> = {}
  if (!Array.isArray(graph?.tensors)) throw invalidArgument('graph.tensors', 'an array', shown(graph?.tensors), 'the graph has no tensors array')
  for (const t of graph.tensors.filter((x) => x?.kind === 'input')) {
    const size = tensorBytes(t)
    if (!Number.isSafeInteger(size) || (size as number) < 1) {
      throw invalidArgument(`tensor ${JSON.stringify(t.id)}.size`, 'a positive integer', shown(size))
    }
    const bytes = new Uint8Array(size as number)
    let h = 2166136261
    for (const c of t.id) h = Math.imul(h ^ c.charCodeAt(0), 16777619)
    for (let i = 0; i < bytes.length; i++) bytes[i] = (Math.imul(i, 2654435761) + h) >>> 13
    inputs[t.id] = bytes
  }
  return inputs
}

const bytesOfArray = (a: ArrayBufferView) => Buffer.from(a.buffer, a.byteOffset, a.byteLength)

/** Whether both output sets hold the same ids with the same bytes. */
export function equalOutputs(a: Record<string, ArrayBufferView>, b: Record<string, ArrayBufferView>): boolean {
  const keys = Object.keys(a)
  return keys.length === Object.keys(b).length && keys.every((k) => k in b && Buffer.compare(bytesOfArray(a[k]), bytesOfArray(b[k])) === 0)
}

/** The element size of a tensor's dtype (bytes when it has none). */
const ELEMENT: Record<string, number> = { f32: 4, u32: 4, i32: 4, f16: 2, u16: 2, i8: 1, u8: 1 }
type Typed = new (buffer: ArrayBuffer) => ArrayLike<number>
const TYPED: Record<string, Typed> = { f32: Float32Array, u32: Uint32Array, i32: Int32Array, f16: Uint16Array, u16: Uint16Array, i8: Int8Array, u8: Uint8Array }

/** Where eager and planned outputs first differ. */
export interface Difference {
  /** The output tensor. */
  output: string
  /** The first differing element (by dtype), or null when the output is missing. */
  index: number | null
  /** The tensor's dtype (`bytes` without one). */
  dtype?: string
  /** The eager value. */
  eager: number | string | undefined
  /** The planned value. */
  planned: number | string | undefined
  /** The op that last wrote the output. */
  op: string | null
}

/**
 * Where eager and planned outputs first differ: the output, the element index (by dtype), both
 * values and the op that last wrote the output; null when they are equal bit for bit.
 */
export function firstDifference(graph: Graph, eager: Record<string, ArrayBufferView>, planned: Record<string, ArrayBufferView>): Difference | null {
  for (const id of Object.keys(eager)) {
    const a = eager[id]
    const b = planned[id]
    if (!b) return { output: id, index: null, eager: 'present', planned: 'missing', op: null }
    const x = new Uint8Array(a.buffer, a.byteOffset, a.byteLength)
    const y = new Uint8Array(b.buffer, b.byteOffset, b.byteLength)
    const n = Math.min(x.length, y.length)
    let at = 0
    while (at < n && x[at] === y[at]) at++
    if (at === n && x.length === y.length) continue
    const tensor: GraphTensor | undefined = graph.tensors.find((t) => t.id === id)
    const dtype = tensor?.dtype
    const size = (dtype && ELEMENT[dtype]) || 1
    const index = Math.floor(at / size)
    const T: Typed = (dtype && TYPED[dtype]) || Uint8Array
    const value = (v: ArrayBufferView) => {
      const all = new Uint8Array(v.buffer, v.byteOffset, v.byteLength)
      const start = index * size
      return start + size <= all.length ? new T(all.slice(start, start + size).buffer)[0] : undefined
    }
    const writer = [...graph.ops].reverse().find((op) => op.outputs?.includes(id))
    return { output: id, index, dtype: dtype ?? 'bytes', eager: value(a), planned: value(b), op: writer?.name ?? null }
  }
  return null
}

/** The median of `xs`. */
export function median(xs: number[]): number {
  const s = [...xs].sort((x, y) => x - y)
  return s[s.length >> 1]
}

/** Median wall time of `n` awaited runs of `fn`, ms. */
export async function timeRuns(n: number, fn: () => Promise<unknown>): Promise<number> {
  const t: number[] = []
  for (let i = 0; i < n; i++) {
    const t0 = process.hrtime.bigint()
    await fn()
    t.push(Number(process.hrtime.bigint() - t0) / 1e6)
  }
  return median(t)
}

/** Options of `checkGraph()`. */
export interface CheckOptions {
  strategy?: Strategy
  timeLimitMs?: number
  runs?: number
  checkPlan?: boolean
}

/** What `checkGraph()` measured. */
export interface CheckFigures {
  outputsEqual: boolean
  firstDifference: Difference | null
  outputs: number
  slabSize: number
  lowerBound: number
  ratio: number
  optimal: boolean
  strategy: string
  eagerPeakReservedBytes: number
  plannedPeakBytes: number
  memoryRatio: number
  eagerMs: number
  plannedMs: number
  planCheckedOnDevice: boolean
  stats: ExecutorStats
  svg: string
}

/** Runs `graph` (an executable graph object) eagerly and planned on `gpu`. */
export async function checkGraph(
  gpu: Gpu,
  graph: Graph,
  { strategy = 'best', timeLimitMs = 1000, runs = 5, checkPlan = false }: CheckOptions = {},
): Promise<CheckFigures> {
  const inputs = sampleInputs(graph)
  const heap = gpu.heap
  heap.emptyCache()
  heap.resetPeakStats()
  const eager = await gpu.runEager(graph, inputs)
  const eagerPeakReservedBytes = heap.stats().reservedBytes.peak
  const exe = await gpu.compile(graph, { strategy, timeLimitMs })
  try {
    const planned = await exe.run(inputs, { checkPlan })
    const eagerMs = await timeRuns(runs, () => gpu.runEager(graph, inputs))
    const plannedMs = await timeRuns(runs, () => exe.run(inputs))
    const plan = exe.plan
    const outputs: Record<string, OutputArray> = planned.outputs
    const difference = firstDifference(graph, eager.outputs, outputs)
    return {
      outputsEqual: difference === null && equalOutputs(eager.outputs, outputs),
      firstDifference: difference,
      outputs: Object.keys(outputs).length,
      slabSize: plan.slabSize,
      lowerBound: plan.lowerBound,
      ratio: plan.ratio,
      optimal: plan.optimal,
      strategy: plan.strategy,
      eagerPeakReservedBytes,
      plannedPeakBytes: exe.deviceBytes,
      memoryRatio: exe.deviceBytes / eagerPeakReservedBytes,
      eagerMs,
      plannedMs,
      planCheckedOnDevice: checkPlan,
      stats: exe.stats(),
      svg: plan.toSVG(),
    }
  } finally {
    exe.release()
  }
}
