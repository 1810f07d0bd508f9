// One worker thread of the inference server: attaches to the server's device
// through its share handle (or opens its own), compiles its own executor of the
// model, and runs the requests it is sent one after another (an executor runs one
// request at a time). Inputs are staged through the device's host cache by
// `exe.run`, so steady-state requests create no driver buffers.

import { parentPort, workerData } from 'node:worker_threads'
import { Gpu, Weights, type Executor } from 'wgalloc'
import type { FromWorker, ToWorker, WorkerInit } from './worker-pool'

const port = parentPort!
const post = (m: FromWorker, transfer: ArrayBuffer[] = []) => port.postMessage(m, transfer)

async function start(init: WorkerInit): Promise<void> {
  const ownDevice = init.handle === null
  const gpu = ownDevice ? await Gpu.request() : Gpu.attach(init.handle!)
  const t0 = performance.now()
  // On the shared device every worker binds the one copy of the weights the server uploaded.
  const weights = init.weights === null ? undefined : Weights.attach(init.weights)
  const exe: Executor = await gpu.compile(init.graph, {
    ...(weights ? { weights } : { params: init.params }),
    strategy: 'best',
    timeLimitMs: 200,
  })
  weights?.release() // the executor keeps its own reference
  post({ type: 'ready', slabBytes: exe.stats().slabBytes, deviceBytes: exe.deviceBytes, compileMs: performance.now() - t0 })

  let queue = Promise.resolve()
  port.on('message', (m: ToWorker) => {
    if (m.type === 'infer') {
      queue = queue.then(async () => {
        try {
          // A copy of our own: the output's memory may belong to the native result.
          const probs = ((await exe.run({ x: m.x })).outputs.probs as Float32Array).slice()
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
        executor: exe.stats(),
        device: { heapReserved: heap.reservedBytes.current, heapAllocated: heap.allocatedBytes.current, hostAllocated: host.allocatedBytes.current },
        js: { heapTotal, heapUsed },
      })
    } else if (m.type === 'close') {
      void queue.then(() => {
        exe.release()
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
