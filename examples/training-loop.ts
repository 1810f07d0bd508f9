// A training loop on WGSL kernels: an MLP regressor learns y = sin(3 x0) cos(2 x1)
// with mini-batch Adam. Each step (forward, MSE loss, backward, Adam update) is one
// eager run of a graph: every activation and gradient is a block of the device heap
// (`gpu.heap`) from the op that produces it to its last use, so after the first
// step the caching allocator serves every request from memory it already holds.
//
//   npm run examples:build && node examples/build/training-loop.js [--epochs 20] [--json]
//
// Options: --epochs 20 --batch 64 --samples 512 --hidden 32 --lr 0.01 --seed 1 --json

import { parseArgs } from 'node:util'
import { Gpu, type HeapStats } from 'wgalloc'
import { formatBytes, intOption, numberOption, runMain } from './lib/cli'
import { mulberry32 } from './lib/random'
import { PARAMS, adamUpdate, dataset, gradients, hyper, initialState, mseLoss, trainStepGraph, type Adam, type RegressorShape, type State } from './lib/regressor'

interface EpochReport {
  epoch: number
  /** Mean of the batch losses the GPU computed this epoch. */
  loss: number
  heap: { allocated: number; peakAllocated: number; reserved: number; segments: number; driverAllocations: number; cacheHits: number; cacheMisses: number }
}

/** Largest |a - b| over two arrays, and the largest |b| (for relative tolerances). */
function maxDiff(a: ArrayLike<number>, b: ArrayLike<number>): { diff: number; scale: number } {
  let diff = 0
  let scale = 0
  for (let i = 0; i < a.length; i++) {
    diff = Math.max(diff, Math.abs(a[i] - b[i]))
    scale = Math.max(scale, Math.abs(b[i]))
  }
  return { diff, scale }
}

/**
 * Checks the first GPU step against the float64 CPU reference: the loss, the
 * gradients (through Adam's moments, which are linear in them) and the update rule
 * (applied on the CPU to the GPU's own moments, which avoids Adam's sensitivity to
 * near-zero gradients). Returns the worst relative errors.
 */
function checkStep(s: RegressorShape, before: State, after: State, x: Float32Array, y: Float32Array, h: Float32Array, a: Adam, gpuLoss: number) {
  const { loss, grads } = gradients(s, before, x, y)
  let grad = 0
  let update = 0
  for (const id of PARAMS) {
    const m = maxDiff(after[`m_${id}`], grads[id].map((g) => (1 - a.beta1) * g))
    const v = maxDiff(after[`v_${id}`], grads[id].map((g) => (1 - a.beta2) * g * g))
    grad = Math.max(grad, m.diff / Math.max(m.scale, 1e-12), v.diff / Math.max(v.scale, 1e-20))
    const w = maxDiff(after[id], adamUpdate(before[id], after[`m_${id}`], after[`v_${id}`], h))
    update = Math.max(update, w.diff / a.lr)
  }
  return { lossRelError: Math.abs(gpuLoss - loss) / loss, gradientRelError: grad, updateRelError: update }
}

function heapFigures(s: HeapStats): EpochReport['heap'] {
  return {
    allocated: s.allocatedBytes.current,
    peakAllocated: s.allocatedBytes.peak,
    reserved: s.reservedBytes.current,
    segments: s.segments.current,
    driverAllocations: s.driverAllocations,
    cacheHits: s.cacheHits,
    cacheMisses: s.cacheMisses,
  }
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      epochs: { type: 'string' }, batch: { type: 'string' }, samples: { type: 'string' }, hidden: { type: 'string' },
      lr: { type: 'string' }, seed: { type: 'string' }, json: { type: 'boolean', default: false },
    },
  })
  const epochs = intOption('epochs', values.epochs, 20)
  const shape: RegressorShape = { batch: intOption('batch', values.batch, 64, 1, 4096), hidden: intOption('hidden', values.hidden, 32, 1, 1024) }
  const samples = intOption('samples', values.samples, 512, shape.batch)
  const seed = intOption('seed', values.seed, 1, 0)
  const adam: Adam = { lr: numberOption('lr', values.lr, 0.01), beta1: 0.9, beta2: 0.999, eps: 1e-8 }
  const log = values.json ? () => {} : console.log

  const gpu = await Gpu.request()
  try {
    const heap = gpu.heap
    const graph = trainStepGraph(shape)
    const next = mulberry32(seed + 1)
    const data = dataset(samples, next)
    let state = initialState(shape, seed)
    const initialLoss = mseLoss(shape, state, data.x, data.y, samples)
    log(`device: ${gpu.info.adapterName} (${gpu.info.backend}); MLP 2-${shape.hidden}-${shape.hidden}-1, ${samples} samples, batch ${shape.batch}, Adam lr ${adam.lr}`)
    log(`initial loss (CPU, all samples) ${initialLoss.toFixed(5)}`)

    const batches = Math.floor(samples / shape.batch)
    const order = Array.from({ length: samples }, (_, i) => i)
    const x = new Float32Array(shape.batch * 2)
    const y = new Float32Array(shape.batch)
    const reservedAfterStep: number[] = []
    const driverAllocationsAfterStep: number[] = []
    const report: EpochReport[] = []
    let firstStepCheck: ReturnType<typeof checkStep> | undefined
    let step = 0
    const started = performance.now()
    for (let epoch = 1; epoch <= epochs; epoch++) {
      // Seeded Fisher-Yates shuffle: a different batch split every epoch.
      for (let i = samples - 1; i > 0; i--) {
        const j = Math.floor(next() * (i + 1))
        ;[order[i], order[j]] = [order[j], order[i]]
      }
      heap.resetPeakStats()
      let lossSum = 0
      for (let b = 0; b < batches; b++) {
        for (let r = 0; r < shape.batch; r++) {
          const i = order[b * shape.batch + r]
          x[2 * r] = data.x[2 * i]
          x[2 * r + 1] = data.x[2 * i + 1]
          y[r] = data.y[i]
        }
        step++
        const h = hyper(adam, step)
        const { outputs } = await gpu.runEager(graph, { x, y, hyper: h, ...state })
        const loss = (outputs.loss as Float32Array)[0]
        const updated: State = {}
        for (const key of Object.keys(state)) updated[key] = outputs[`${key}_next`] as Float32Array
        if (step === 1) firstStepCheck = checkStep(shape, state, updated, x, y, h, adam, loss)
        state = updated
        lossSum += loss
        const s = heap.stats()
        reservedAfterStep.push(s.reservedBytes.current)
        driverAllocationsAfterStep.push(s.driverAllocations)
      }
      const e: EpochReport = { epoch, loss: lossSum / batches, heap: heapFigures(heap.stats()) }
      report.push(e)
      const f = e.heap
      log(
        `epoch ${String(epoch).padStart(3)}  loss ${e.loss.toFixed(5)}  | heap allocated ${formatBytes(f.allocated)} (peak ${formatBytes(f.peakAllocated)})` +
          `  reserved ${formatBytes(f.reserved)}  segments ${f.segments}  driver allocations ${f.driverAllocations}  cache hits ${f.cacheHits} misses ${f.cacheMisses}`,
      )
    }
    const msPerStep = (performance.now() - started) / step
    const finalLoss = mseLoss(shape, state, data.x, data.y, samples)
    const reservedStable = reservedAfterStep.every((r) => r === reservedAfterStep[0])
    const driverAllocationsStable = driverAllocationsAfterStep.every((n) => n === driverAllocationsAfterStep[0])
    log(`final loss (CPU, all samples) ${finalLoss.toFixed(5)}: ${(initialLoss / finalLoss).toFixed(1)}x lower after ${step} steps (${msPerStep.toFixed(1)} ms per step, host round trip included)`)
    log(`first step vs CPU reference: loss ${firstStepCheck?.lossRelError.toExponential(1)}, gradients ${firstStepCheck?.gradientRelError.toExponential(1)}, update ${firstStepCheck?.updateRelError.toExponential(1)} (relative)`)
    log(`reserved after step 1: ${formatBytes(reservedAfterStep[0])}; ${reservedStable ? 'unchanged' : 'CHANGED'} over the next ${step - 1} steps (driver allocations ${driverAllocationsStable ? 'unchanged' : 'grew'}: ${driverAllocationsAfterStep[0]} -> ${driverAllocationsAfterStep[step - 1]})`)

    // The same step compiled: one planned slab instead of per-op heap blocks, one
    // submission instead of one per op. Its outputs must equal the eager step's bit
    // for bit (same kernels, same inputs).
    heap.resetPeakStats()
    const stepInputs = { x, y, hyper: hyper(adam, step + 1), ...state }
    const eager = await gpu.runEager(graph, stepInputs)
    const eagerPeakAllocated = heap.stats().allocatedBytes.peak
    const exe = await gpu.compile(graph)
    let compiled
    try {
      const planned = await exe.run(stepInputs)
      const bytes = (a: ArrayBufferView) => Buffer.from(a.buffer, a.byteOffset, a.byteLength)
      const equal = Object.keys(eager.outputs).every((k) => bytes(eager.outputs[k]).equals(bytes(planned.outputs[k])))
      const time = async (fn: () => Promise<unknown>) => {
        const t0 = performance.now()
        for (let i = 0; i < 10; i++) await fn()
        return (performance.now() - t0) / 10
      }
      const eagerMs = await time(() => gpu.runEager(graph, stepInputs))
      const compiledMs = await time(() => exe.run(stepInputs))
      compiled = { outputsEqualEager: equal, slabBytes: exe.stats().slabBytes, lowerBound: exe.plan.lowerBound, eagerPeakAllocated, eagerMs, compiledMs }
      log(`compiled step: slab ${formatBytes(compiled.slabBytes)} (lower bound ${formatBytes(compiled.lowerBound)}) vs eager peak allocated ${formatBytes(eagerPeakAllocated)}; outputs ${equal ? 'equal' : 'DIFFER from'} the eager step's`)
      log(`               ${compiledMs.toFixed(1)} ms per step vs ${eagerMs.toFixed(1)} ms eager (mean of 10)`)
    } finally {
      exe.release()
    }

    if (values.json) {
      console.log(JSON.stringify({
        device: gpu.info.adapterName, shape, samples, steps: step, msPerStep, adam,
        initialLoss, finalLoss, firstStepCheck, epochs: report,
        reservedAfterStep1: reservedAfterStep[0], reservedAtEnd: reservedAfterStep[step - 1], reservedStable,
        driverAllocationsAfterStep1: driverAllocationsAfterStep[0], driverAllocationsAtEnd: driverAllocationsAfterStep[step - 1], driverAllocationsStable,
        compiled,
      }))
    }
  } finally {
    gpu.destroy()
  }
}

runMain(main)
