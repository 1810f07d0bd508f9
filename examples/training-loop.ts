// A training loop on WGSL kernels, written the way a training script on wgalloc is: an
// MLP regressor learns y = sin(3 x0) cos(2 x1) with mini-batch Adam. Parameters and
// Adam's moments live on the device as heap blocks, updated in place. Each step writes
// the batch into fresh blocks, records forward, loss, backward and the optimizer on one
// stream, submits, and reads back the loss: 4 bytes. Activations and gradients are
// malloc'd during the step and freed right after their last use; reading the loss is the
// step's only sync point, and by then the step's work ran, so the blocks it freed are
// back in the heap's cache and serve the next step: reserved memory stays flat.
// (Within a step a freed block is not reused: the step's work is not submitted yet.)
//
//   npm run examples:build && node examples/build/training-loop.js [--epochs 20] [--json]
//
// Options: --epochs 20 --batch 64 --samples 512 --hidden 32 --lr 0.01 --seed 1 --json

import { parseArgs } from 'node:util'
import { Gpu, type DeviceBlock, type HeapStats } from 'wgalloc'
import { formatBytes, intOption, numberOption, runMain } from './lib/cli'
import { DeviceRegressor, readF32 } from './lib/device-regressor'
import { mulberry32 } from './lib/random'
import {
  PARAMS,
  adamUpdate,
  dataset,
  gradients,
  hyper,
  initialState,
  mseLoss,
  trainStepGraph,
  type Adam,
  type ParamId,
  type RegressorShape,
  type State,
} from './lib/regressor'

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
 * Checks the first GPU step against the float64 CPU reference: the loss, the gradients
 * (read from their blocks, kept alive for this step only) and the Adam update (moments
 * from the GPU's gradients, parameters from the GPU's moments, which avoids Adam's
 * sensitivity to near-zero gradients). Returns the worst relative errors.
 */
function checkStep(
  s: RegressorShape,
  before: State,
  after: State,
  gpuGrads: Record<ParamId, Float32Array>,
  x: Float32Array,
  y: Float32Array,
  h: Float32Array,
  a: Adam,
  gpuLoss: number,
) {
  const { loss, grads } = gradients(s, before, x, y)
  let grad = 0
  let update = 0
  for (const id of PARAMS) {
    const g = maxDiff(gpuGrads[id], grads[id])
    grad = Math.max(grad, g.diff / Math.max(g.scale, 1e-12))
    const m = maxDiff(
      after[`m_${id}`],
      gpuGrads[id].map((v) => (1 - a.beta1) * v),
    )
    const v = maxDiff(
      after[`v_${id}`],
      gpuGrads[id].map((v) => (1 - a.beta2) * v * v),
    )
    const w = maxDiff(after[id], adamUpdate(before[id], after[`m_${id}`], after[`v_${id}`], h))
    update = Math.max(update, m.diff / Math.max(m.scale, 1e-12), v.diff / Math.max(v.scale, 1e-20), w.diff / a.lr)
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
      epochs: { type: 'string' },
      batch: { type: 'string' },
      samples: { type: 'string' },
      hidden: { type: 'string' },
      lr: { type: 'string' },
      seed: { type: 'string' },
      json: { type: 'boolean', default: false },
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
    const next = mulberry32(seed + 1)
    const data = dataset(samples, next)
    const initial = initialState(shape, seed)
    const initialLoss = mseLoss(shape, initial, data.x, data.y, samples)
    const model = new DeviceRegressor(gpu, shape, initial)
    const stateBytes = model.stateBytes
    const stream = gpu.createStream()
    log(
      `device: ${gpu.info.adapterName} (${gpu.info.backend}); MLP 2-${shape.hidden}-${shape.hidden}-1, ${samples} samples, batch ${shape.batch}, Adam lr ${adam.lr}`,
    )
    log(`parameters and Adam moments on the device: ${formatBytes(stateBytes)}; initial loss (CPU, all samples) ${initialLoss.toFixed(5)}`)

    /**
     * Submits a recorded step and reads its loss back: the step's sync point. Waiting for
     * the submission too (not only for the read, which may resolve a moment earlier)
     * means every block the step freed is back in the heap's cache for the next step.
     */
    const finishStep = async (loss: DeviceBlock): Promise<number> => {
      const done = stream.submit()
      const [value] = await Promise.all([readF32(loss, 1), done.wait()])
      loss.free()
      return value[0]
    }
    const trainStep = (x: Float32Array, y: Float32Array, h: Float32Array): Promise<number> => finishStep(model.step(stream, x, y, h).loss)

    const batches = Math.floor(samples / shape.batch)
    const order = Array.from({ length: samples }, (_, i) => i)
    const x = new Float32Array(shape.batch * 2)
    const y = new Float32Array(shape.batch)
    const afterStep = { reserved: [] as number[], driverAllocations: [] as number[], allocated: [] as number[] }
    const report: EpochReport[] = []
    let firstStepCheck: ReturnType<typeof checkStep> | undefined
    let step = 0
    let started = 0
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
        if (step === 1) {
          // The first step keeps its gradients to check them, and reads the updated state once.
          const { loss, gradients: g } = model.step(stream, x, y, h, { keepGradients: true })
          const value = await finishStep(loss)
          const gpuGrads = {} as Record<ParamId, Float32Array>
          for (const id of PARAMS) {
            gpuGrads[id] = await readF32(g![id], model.sizes[id])
            g![id].free()
          }
          firstStepCheck = checkStep(shape, initial, await model.readState(), gpuGrads, x, y, h, adam, value)
          lossSum += value
          started = performance.now()
        } else {
          lossSum += await trainStep(x, y, h)
        }
        const s = heap.stats()
        afterStep.reserved.push(s.reservedBytes.current)
        afterStep.driverAllocations.push(s.driverAllocations)
        afterStep.allocated.push(s.allocatedBytes.current)
      }
      const e: EpochReport = { epoch, loss: lossSum / batches, heap: heapFigures(heap.stats()) }
      report.push(e)
      const f = e.heap
      log(
        `epoch ${String(epoch).padStart(3)}  loss ${e.loss.toFixed(5)}  | heap allocated ${formatBytes(f.allocated)} (peak ${formatBytes(f.peakAllocated)})` +
          `  reserved ${formatBytes(f.reserved)}  segments ${f.segments}  driver allocations ${f.driverAllocations}  cache hits ${f.cacheHits} misses ${f.cacheMisses}`,
      )
    }
    const msPerStep = step > 1 ? (performance.now() - started) / (step - 1) : NaN
    // A checkpoint: the only time the parameters come back to the host.
    const trained = await model.readState()
    const finalLoss = mseLoss(shape, trained, data.x, data.y, samples)
    const flat = (a: number[]) => a.every((n) => n === a[0])
    const reservedStable = flat(afterStep.reserved)
    const driverAllocationsStable = flat(afterStep.driverAllocations)
    const allocatedStable = afterStep.allocated.every((n) => n === stateBytes)
    log(
      `final loss (CPU, all samples) ${finalLoss.toFixed(5)}: ${(initialLoss / finalLoss).toFixed(1)}x lower after ${step} steps (${msPerStep.toFixed(2)} ms per step after the first, 4 bytes read back per step)`,
    )
    log(
      `first step vs CPU reference: loss ${firstStepCheck?.lossRelError.toExponential(1)}, gradients ${firstStepCheck?.gradientRelError.toExponential(1)}, update ${firstStepCheck?.updateRelError.toExponential(1)} (relative)`,
    )
    log(
      `reserved after step 1: ${formatBytes(afterStep.reserved[0])}; ${reservedStable ? 'unchanged' : 'CHANGED'} over the next ${step - 1} steps (driver allocations ${driverAllocationsStable ? 'unchanged' : 'grew'}: ${afterStep.driverAllocations[0]} -> ${afterStep.driverAllocations[step - 1]}); allocated between steps ${allocatedStable ? 'always' : 'NOT always'} the ${formatBytes(stateBytes)} of parameters and moments`,
    )

    // The same step as one graph run, two ways. With the state as inputs and outputs (how
    // this example trained before kernels could run on heap blocks), parameters and moments
    // cross the host every step. With the state as external tensors, a compiled run binds
    // the model's own blocks and Adam updates them in place: only the batch goes up and the
    // loss comes back. From the trained state, one step every way must agree (the same
    // kernels but Adam, whose arithmetic is the same); then each is timed.
    const graph = trainStepGraph(shape)
    const h = hyper(adam, step + 1)
    const stepInputs = { x, y, hyper: h, ...trained }
    const eager = await gpu.runEager(graph, stepInputs)
    const deviceLoss = await trainStep(x, y, h)
    const stepped = await model.readState()
    let maxAbsDiff = Math.abs(deviceLoss - (eager.outputs.loss as Float32Array)[0])
    for (const key of Object.keys(stepped)) maxAbsDiff = Math.max(maxAbsDiff, maxDiff(stepped[key], eager.outputs[`${key}_next`] as Float32Array).diff)
    const inPlace = await gpu.compile(trainStepGraph(shape, { state: 'external' }))
    model.writeState(trained)
    const boundInputs = { x, y, hyper: h, ...model.stateBlocks }
    const inPlaceLoss = ((await inPlace.run(boundInputs)).outputs.loss as Float32Array)[0]
    const steppedInPlace = await model.readState()
    let inPlaceMaxAbsDiff = Math.abs(deviceLoss - inPlaceLoss)
    for (const key of Object.keys(stepped)) inPlaceMaxAbsDiff = Math.max(inPlaceMaxAbsDiff, maxDiff(steppedInPlace[key], stepped[key]).diff)
    // Interleaved rounds and medians: a burst of load on a shared machine hits all alike.
    const exe = await gpu.compile(graph)
    const ms: number[][] = [[], [], [], []]
    try {
      const runs = [() => trainStep(x, y, h), () => gpu.runEager(graph, stepInputs), () => exe.run(stepInputs), () => inPlace.run(boundInputs)]
      for (let round = 0; round < 11; round++) {
        for (const [i, run] of runs.entries()) {
          const t0 = performance.now()
          await run()
          ms[i].push(performance.now() - t0)
        }
      }
    } finally {
      exe.release()
      inPlace.release()
    }
    const median = (a: number[]) => a.sort((p, q) => p - q)[a.length >> 1]
    const within = (d: number) => (d === 0 ? 'identical results' : `results within ${d.toExponential(1)}`)
    const graphStep = {
      maxAbsDiff,
      inPlaceMaxAbsDiff,
      deviceMs: median(ms[0]),
      eagerMs: median(ms[1]),
      compiledMs: median(ms[2]),
      compiledInPlaceMs: median(ms[3]),
      hostBytesPerStep: { stateThroughHost: 2 * stateBytes, stateInPlace: 0 },
    }
    log(
      `the same step as a graph: state through the host each step, ${within(maxAbsDiff)}; state bound in place (external tensors), ${within(inPlaceMaxAbsDiff)};`,
    )
    log(
      `  ${graphStep.deviceMs.toFixed(2)} ms per step on the device vs ${graphStep.eagerMs.toFixed(2)} ms eager graph, ${graphStep.compiledMs.toFixed(2)} ms compiled graph (${formatBytes(2 * stateBytes)} of state through the host), ${graphStep.compiledInPlaceMs.toFixed(2)} ms compiled graph with the state in place (none) (medians of 11 interleaved rounds)`,
    )

    model.free()
    if (values.json) {
      console.log(
        JSON.stringify({
          device: gpu.info.adapterName,
          shape,
          samples,
          steps: step,
          msPerStep,
          adam,
          initialLoss,
          finalLoss,
          firstStepCheck,
          epochs: report,
          stateBytes,
          reservedAfterStep1: afterStep.reserved[0],
          reservedAtEnd: afterStep.reserved[step - 1],
          reservedStable,
          driverAllocationsAfterStep1: afterStep.driverAllocations[0],
          driverAllocationsAtEnd: afterStep.driverAllocations[step - 1],
          driverAllocationsStable,
          allocatedStable,
          graphStep,
        }),
      )
    }
  } finally {
    gpu.destroy()
  }
}

runMain(main)
