// The inference server's worker threads, seen from the main thread: each worker
// holds one executor of the model (an executor runs one request at a time), and
// a request goes to the worker with the fewest requests outstanding.

import { Worker } from 'node:worker_threads'
import { join } from 'node:path'
import type { Graph, ShapeExecutorStats } from 'wgalloc'
import type { ClassifierShape } from './classifier'

/**
 * What a worker starts from. `handle` null: the worker opens its own device. `weights`: the
 * share handle of the shared device's one copy of the params (`params` then unused).
 */
export interface WorkerInit {
  index: number
  handle: number | null
  weights: number | null
  graph: Graph
  shape: ClassifierShape
  params: Record<string, Float32Array>
}

/** The memory a worker's device reports (the shared device's, when shared). */
export interface DeviceMemory {
  heapReserved: number
  heapAllocated: number
  hostAllocated: number
}

/** A thread's V8 heap: committed and used bytes. */
export interface JsHeap {
  heapTotal: number
  heapUsed: number
}

/** A worker's model: its plan cache (one executor per batch bucket) and the requests it ran. */
export interface WorkerExecutorStats extends ShapeExecutorStats {
  runs: number
}

export interface WorkerStats {
  executor: WorkerExecutorStats
  device: DeviceMemory
  js: JsHeap
}

export type ToWorker = { type: 'infer'; id: number; x: Float32Array } | { type: 'stats'; id: number; gc: boolean } | { type: 'close' }
export type FromWorker =
  | { type: 'ready'; slabBytes: number; deviceBytes: number; compileMs: number }
  | { type: 'result'; id: number; probs?: Float32Array; error?: { code: string; message: string } }
  | ({ type: 'stats'; id: number } & WorkerStats)
  | { type: 'fatal'; message: string }

export interface WorkerInfo {
  slabBytes: number
  deviceBytes: number
  compileMs: number
}

/** A request that failed in a worker, with the wgalloc error code. */
export class InferenceError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message)
  }
}

interface Slot {
  worker: Worker
  outstanding: number
  info: WorkerInfo
  /** False once the worker exited: it gets no more requests. */
  alive: boolean
}

type Pending = { resolve: (value: never) => void; reject: (err: Error) => void; slot: Slot }

export class WorkerPool {
  private readonly pending = new Map<number, Pending>()
  private nextId = 1

  private constructor(private readonly slots: Slot[]) {
    for (const slot of slots) {
      slot.worker.on('message', (m: FromWorker) => this.onMessage(slot, m))
      const fail = (err: Error) => {
        for (const [id, p] of this.pending) {
          if (p.slot !== slot) continue
          this.pending.delete(id)
          p.reject(err)
        }
      }
      slot.worker.on('error', fail)
      slot.worker.on('exit', (code) => {
        slot.alive = false
        fail(new InferenceError('INTERNAL', `worker exited with code ${code}`))
      })
    }
  }

  /** Starts `count` workers and resolves once each compiled its executor. */
  static async start(count: number, init: (index: number) => WorkerInit): Promise<WorkerPool> {
    const script = join(__dirname, 'inference-worker.js')
    const starting = Array.from({ length: count }, (_, i) => {
      const worker = new Worker(script, { workerData: init(i) })
      return new Promise<Slot>((resolve, reject) => {
        const onMessage = (m: FromWorker) => {
          if (m.type === 'ready')
            resolve({ worker, outstanding: 0, alive: true, info: { slabBytes: m.slabBytes, deviceBytes: m.deviceBytes, compileMs: m.compileMs } })
          else if (m.type === 'fatal') reject(new Error(`worker ${i}: ${m.message}`))
          worker.off('message', onMessage)
        }
        worker.on('message', onMessage)
        worker.once('error', reject)
      })
    })
    const settled = await Promise.allSettled(starting)
    const failed = settled.find((s): s is PromiseRejectedResult => s.status === 'rejected')
    if (failed) {
      for (const s of settled) if (s.status === 'fulfilled') await s.value.worker.terminate()
      throw failed.reason
    }
    return new WorkerPool(settled.map((s) => (s as PromiseFulfilledResult<Slot>).value))
  }

  get workers(): WorkerInfo[] {
    return this.slots.map((s) => s.info)
  }

  /** Runs one batch (`x`, transferred to the worker); resolves with its class probabilities. */
  infer(x: Float32Array): Promise<{ probs: Float32Array; worker: number }> {
    const alive = this.slots.filter((s) => s.alive)
    if (alive.length === 0) return Promise.reject(new InferenceError('INTERNAL', 'no worker is running'))
    const slot = alive.reduce((a, b) => (b.outstanding < a.outstanding ? b : a))
    const worker = this.slots.indexOf(slot)
    return this.request<Float32Array>(slot, (id) => ({ type: 'infer', id, x }), [x.buffer as ArrayBuffer]).then((probs) => ({ probs, worker }))
  }

  /**
   * Each worker's executor counters, its device's memory and its V8 heap; with `gc`, each worker
   * first collects its garbage (where the process runs with --expose-gc).
   */
  stats(gc = false): Promise<WorkerStats[]> {
    return Promise.all(this.slots.map((slot) => this.request<WorkerStats>(slot, (id) => ({ type: 'stats', id, gc }))))
  }

  /** Lets every worker finish its queue, release its executor and exit. */
  async close(): Promise<void> {
    await Promise.all(
      this.slots
        .filter((s) => s.alive)
        .map(
          (s) =>
            new Promise<void>((resolve) => {
              s.worker.once('exit', () => resolve())
              s.worker.postMessage({ type: 'close' } satisfies ToWorker)
            }),
        ),
    )
  }

  private request<T>(slot: Slot, message: (id: number) => ToWorker, transfer: ArrayBuffer[] = []): Promise<T> {
    if (!slot.alive) return Promise.reject(new InferenceError('INTERNAL', 'the worker exited'))
    const id = this.nextId++
    slot.outstanding++
    return new Promise<T>((resolve, reject) => {
      this.pending.set(id, { resolve: resolve as (value: never) => void, reject, slot })
      slot.worker.postMessage(message(id), transfer)
    }).finally(() => {
      slot.outstanding--
    })
  }

  private onMessage(_slot: Slot, m: FromWorker): void {
    if (m.type !== 'result' && m.type !== 'stats') return
    const p = this.pending.get(m.id)
    if (!p) return
    this.pending.delete(m.id)
    if (m.type === 'stats') p.resolve({ executor: m.executor, device: m.device, js: m.js } as never)
    else if (m.error) p.reject(new InferenceError(m.error.code, m.error.message))
    else p.resolve(m.probs as never)
  }
}
