// One worker thread of the inference server: attaches to the server's device
// through its share handle (or opens its own), compiles the model for changing batch
// sizes (one plan per batch bucket, made on first use and cached), and runs the requests
// it is sent one after another. A request's rows are written into an input block the
// worker keeps; the run writes the probabilities into an output block, and only the
// request's rows are read back: steady-state requests create no driver buffers.

import { parentPort, workerData } from 'node:worker_threads'
import { Gpu, Weights, type ShapeExecutor } from 'wgalloc'
import type { FromWorker, ToWorker, WorkerInit } from './worker-pool'

const port = parentPort!
const post = (m: FromWorker, transfer: ArrayBuffer[] = []) => port.postMessage(m, transfer)

async function start(init: WorkerInit): Promise<void> {
  const ownDevice = init.handle === null
  const gpu = ownDevice ? await Gpu.request() : Gpu.attach(init.handle!)
  const t0 = performance.now()
  // On the shared device every worker binds the one copy of the weights the server uploaded.
  const weights = init.weights === null ? undefined : Weights.attach(init.weights)
  const { batch, inputs, classes } = init.shape
  // Batch buckets 1, 2, 4, ... up to the largest batch: a request pads to the next one, not to the largest.
  const buckets = [...new Set([...Array.from({ length: Math.ceil(Math.log2(batch)) }, (_, i) => 2 ** i), batch])]
  const exe: ShapeExecutor = gpu.compileShapes(init.graph, {
    ...(weights ? { weights } : { params: init.params }),
    buckets: { batch: buckets },
    capacity: buckets.length,
  })
  // Compile every bucket now, so no request waits for a plan and the figures below are complete.
  const xBlock = gpu.heap.malloc(batch * inputs * 4)
  const outBlock = gpu.heap.malloc(batch * classes * 4)
  for (const b of buckets) await exe.run({ batch: b }, { x: xBlock }, { outputsInto: { probs: outBlock } })
  weights?.release() // the executors keep their own reference
  // With shared weights, what the executors hold is their slabs.
  const held = exe.stats().deviceBytes
  post({ type: 'ready', slabBytes: held, deviceBytes: held, compileMs: performance.now() - t0 })
  let runs = 0

  let queue = Promise.resolve()
  port.on('message', (m: ToWorker) => {
    if (m.type === 'infer') {
      queue = queue.then(async () => {
        try {
          const rows = m.x.length / inputs
          xBlock.write(m.x)
          await exe.run({ batch: rows }, { x: xBlock }, { outputsInto: { probs: outBlock } })
          const probs = await outBlock.read(0, rows * classes * 4, { as: Float32Array })
          runs++
          post({ type: 'result', id: m.id, probs }, [probs.buffer as ArrayBuffer])
        } catch (err) {
          const e = err as { code?: string; message?: string }
          post({ type: 'result', id: m.id, error: { code: e.code ?? 'INTERNAL', message: e.message ?? String(err) } })
        }
      })
    } else if (m.type === 'stats') {
      if (m.gc) (globalThis as { gc?: () => void }).gc?.()
      const heap = gpu.heap.stats()
      const host = gpu.host.stats()
      const { heapTotal, heapUsed } = process.memoryUsage() // this thread's V8 heap
      post({
        type: 'stats',
        id: m.id,
        executor: { ...exe.stats(), runs },
        device: { heapReserved: heap.reservedBytes.current, heapAllocated: heap.allocatedBytes.current, hostAllocated: host.allocatedBytes.current },
        js: { heapTotal, heapUsed },
      })
    } else if (m.type === 'close') {
      void queue.then(() => {
        exe.release()
        xBlock.free()
        outBlock.free()
        // An attached device belongs to the main thread, which destroys it.
        if (ownDevice) gpu.destroy()
        port.close()
      })
    }
  })
}

start(workerData as WorkerInit).catch((err: unknown) => {
  post({ type: 'fatal', message: String((err as Error)?.message ?? err) })
  port.close()
})
