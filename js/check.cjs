'use strict'
// Eager vs planned execution of a graph, with checksum kernels standing in for a
// model graph's ops: bitwise equality of outputs, slab vs lower bound, memory
// and time of both modes. Used by `wgalloc check`, the tests and the benchmarks.
const { WgallocError } = require('./errors.cjs')

/** Deterministic bytes for every input of `graph`. */
function sampleInputs(graph) {
  const inputs = {}
  if (!Array.isArray(graph?.tensors)) throw new WgallocError('INVALID_ARGUMENT', 'the graph has no tensors array')
  for (const t of graph.tensors.filter((x) => x?.kind === 'input')) {
    if (!Number.isSafeInteger(t.size) || t.size < 1) {
      throw new WgallocError('INVALID_ARGUMENT', `tensor ${JSON.stringify(t.id)}: size must be a positive integer, got ${JSON.stringify(t.size)}`)
    }
    const bytes = new Uint8Array(t.size)
    let h = 2166136261
    for (const c of t.id) h = Math.imul(h ^ c.charCodeAt(0), 16777619)
    for (let i = 0; i < bytes.length; i++) bytes[i] = (Math.imul(i, 2654435761) + h) >>> 13
    inputs[t.id] = bytes
  }
  return inputs
}

function equalOutputs(a, b) {
  const keys = Object.keys(a)
  return (
    keys.length === Object.keys(b).length &&
    keys.every(
      (k) =>
        k in b && Buffer.compare(Buffer.from(a[k].buffer, a[k].byteOffset, a[k].byteLength), Buffer.from(b[k].buffer, b[k].byteOffset, b[k].byteLength)) === 0,
    )
  )
}

/** The element size of a tensor's dtype (bytes when it has none). */
const ELEMENT = { f32: 4, u32: 4, i32: 4, f16: 2, u16: 2, i8: 1, u8: 1 }
const TYPED = { f32: Float32Array, u32: Uint32Array, i32: Int32Array, f16: Uint16Array, u16: Uint16Array, i8: Int8Array, u8: Uint8Array }

/**
 * Where eager and planned outputs first differ: the output, the element index (by dtype), both
 * values and the op that last wrote the output; null when they are equal bit for bit.
 */
function firstDifference(graph, eager, planned) {
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
    const tensor = graph.tensors.find((t) => t.id === id)
    const size = ELEMENT[tensor?.dtype] ?? 1
    const index = Math.floor(at / size)
    const T = TYPED[tensor?.dtype] ?? Uint8Array
    const value = (v) => {
      const bytes = new Uint8Array(v.buffer, v.byteOffset, v.byteLength)
      const at = index * size
      return at + size <= bytes.length ? new T(bytes.slice(at, at + size).buffer)[0] : undefined
    }
    const writer = [...graph.ops].reverse().find((op) => op.outputs?.includes(id))
    return { output: id, index, dtype: tensor?.dtype ?? 'bytes', eager: value(a), planned: value(b), op: writer?.name ?? null }
  }
  return null
}

function median(xs) {
  const s = [...xs].sort((x, y) => x - y)
  return s[s.length >> 1]
}

async function timeRuns(n, fn) {
  const t = []
  for (let i = 0; i < n; i++) {
    const t0 = process.hrtime.bigint()
    await fn()
    t.push(Number(process.hrtime.bigint() - t0) / 1e6)
  }
  return median(t)
}

/**
 * Runs `graph` (an executable graph object) eagerly and planned on `gpu`.
 * @returns figures: outputsEqual, slabSize, lowerBound, ratio, eagerPeakReservedBytes,
 *          plannedPeakBytes, eagerMs, plannedMs, plan (the MemoryPlan)
 */
async function checkGraph(gpu, graph, { strategy = 'best', timeLimitMs = 1000, runs = 5, checkPlan = false } = {}) {
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
    const difference = firstDifference(graph, eager.outputs, planned.outputs)
    return {
      outputsEqual: difference === null && equalOutputs(eager.outputs, planned.outputs),
      firstDifference: difference,
      outputs: Object.keys(planned.outputs).length,
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

module.exports = { checkGraph, sampleInputs, equalOutputs, firstDifference, median, timeRuns }
