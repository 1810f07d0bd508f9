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
    return {
      outputsEqual: equalOutputs(eager.outputs, planned.outputs),
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

module.exports = { checkGraph, sampleInputs, equalOutputs, median, timeRuns }
