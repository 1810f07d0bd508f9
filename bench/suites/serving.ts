// Serving-grade execution: chained executors through device blocks vs through the host,
// shared weights vs per-executor params, and a mixed-batch request stream through a shape
// executor vs padding every request to the largest batch. Each against a baseline from the
// same run.
import type { Dispatch, Executor, Graph } from 'wgalloc'
import { chain } from '../../__test__/graphs.js'
import { SHORT, type Suite } from '../harness.js'

const ROWS = 64 // rows per batch unit: tensors are batch * ROWS * 256 floats

/** A chain of `n` adds whose tensors hold `batch` units of 64 KiB (dims for compileShapes). */
function model(n: number, { symbolic = false, batch = 1 } = {}): { graph: Graph; row: number } {
  const g = chain(n, { len: ROWS * 256 })
  const row = g.tensors.find((t) => t.id === 'x')!.size as number
  for (const t of g.tensors) {
    if (t.kind === 'param') continue
    t.size = symbolic ? `batch * ${row}` : batch * row
  }
  for (const op of g.ops) op.dispatch = op.dispatch!.map((d) => (symbolic ? `batch * ${d}` : batch * (d as number))) as Dispatch
  if (symbolic) g.dims = ['batch']
  return { graph: g, row }
}

const params = (row: number) => ({ w: new Float32Array(row / 4).fill(0.5) })

async function timed(n: number, fn: (i: number) => Promise<unknown>): Promise<number> {
  for (let i = 0; i < 3; i++) await fn(i)
  const t = performance.now()
  for (let i = 0; i < n; i++) await fn(i)
  return (performance.now() - t) / n
}

/** Requests per second and latency percentiles of `clients` concurrent loops of `perClient` calls each. */
async function drive(clients: number, perClient: number, call: () => Promise<unknown>) {
  const latencies: number[] = []
  const t0 = performance.now()
  await Promise.all(
    Array.from({ length: clients }, async () => {
      for (let i = 0; i < perClient; i++) {
        const s = performance.now()
        await call()
        latencies.push(performance.now() - s)
      }
    }),
  )
  const seconds = (performance.now() - t0) / 1000
  latencies.sort((a, b) => a - b)
  const at = (q: number) => latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))]
  return { rps: latencies.length / seconds, p50: at(0.5), p99: at(0.99) }
}

export const suites: Suite[] = [
  {
    name: 'serving-chain',
    description: 'two executors chained through a device block vs through the host (ms per request, host bytes)',
    async run({ gpu }) {
      const { graph, row } = model(4)
      const a = await gpu.compile(graph, { params: params(row) })
      const b = await gpu.compile(graph, { params: params(row) })
      const x = new Float32Array(row / 4).fill(1)
      const viaHost = await timed(50, async () => {
        const { outputs } = await a.run({ x })
        await b.run({ x: outputs.y ?? Object.values(outputs)[0] })
      })
      // A serving loop keeps its hand-over block: the output is written into it on the GPU.
      const y = gpu.heap.malloc(row)
      const chained = await timed(50, async () => {
        await a.run({ x }, { outputsInto: { y } })
        await b.run({ x: y })
      })
      y.free()
      a.release()
      b.release()
      return [
        {
          measured: { value: chained, unit: 'ms/request chained on the GPU' },
          baseline: { value: viaHost, unit: 'ms/request', what: 'output read back and uploaded again' },
          ratio: chained / viaHost,
          ratioMeaning: 'chained / through the host (lower is better)',
          hostBytesPerRequest: { chained: 2 * row, viaHost: 4 * row },
        },
      ]
    },
  },
  {
    name: 'serving-concurrency',
    description:
      'one executor driven by 1, 4 and 16 concurrent clients: requests per second and p50/p99 latency, runs queued by the executor vs a mutex around it in JS',
    async run({ gpu }) {
      const { graph, row } = model(4)
      const exe = await gpu.compile(graph, { params: params(row) })
      const x = new Float32Array(row / 4).fill(1)
      // What a service wrote before runs queued: a promise-chain mutex around the executor.
      let tail: Promise<unknown> = Promise.resolve()
      const locked = () => {
        const p = tail.then(run)
        tail = p.catch(() => {})
        return p
      }
      const want = (await exe.run({ x })).outputs
      // Every answer is checked: a queue that mixed up runs' outputs would be fast and wrong.
      const run = async () => {
        const { outputs } = await exe.run({ x })
        for (const id of Object.keys(want))
          if (Buffer.compare(Buffer.from(outputs[id].buffer), Buffer.from(want[id].buffer)) !== 0) throw new Error(`output ${id} differs`)
      }
      for (let i = 0; i < 2; i++) await run()
      const results = []
      for (const clients of [1, 4, 16]) {
        const perClient = SHORT ? 2 : Math.max(4, Math.round(48 / clients))
        // ABBA order, so drift in the machine's speed cancels; each figure is the better of two.
        const q1 = await drive(clients, perClient, run)
        const m1 = await drive(clients, perClient, locked)
        const m2 = await drive(clients, perClient, locked)
        const q2 = await drive(clients, perClient, run)
        const queued = q1.rps >= q2.rps ? q1 : q2
        const mutex = m1.rps >= m2.rps ? m1 : m2
        results.push({
          measured: { value: queued.rps, unit: `requests/s, ${clients} client(s), runs queued by the executor` },
          baseline: { value: mutex.rps, unit: 'requests/s', what: `${clients} client(s) behind a JS mutex` },
          ratio: queued.rps / mutex.rps,
          ratioMeaning: 'throughput queued / mutex (higher is better)',
          latencyMs: { queued: { p50: queued.p50, p99: queued.p99 }, mutex: { p50: mutex.p50, p99: mutex.p99 } },
        })
      }
      exe.release()
      return results
    },
  },
  {
    name: 'serving-weights',
    description: 'four executors sharing one weights copy vs four with their own params (resident bytes, ms per request)',
    async run({ gpu }) {
      const { graph, row } = model(4)
      const x = new Float32Array(row / 4).fill(1)
      const weights = gpu.createWeights(params(row))
      const shared = await Promise.all([0, 1, 2, 3].map(() => gpu.compile(graph, { weights })))
      const own = await Promise.all([0, 1, 2, 3].map(() => gpu.compile(graph, { params: params(row) })))
      const resident = (list: Executor[]) => list.reduce((n, e) => n + e.stats().constantBytes, 0)
      const sharedBytes = resident(shared) + weights.deviceBytes
      const ownBytes = resident(own)
      const sharedMs = await timed(40, (i) => shared[i % 4].run({ x }))
      const ownMs = await timed(40, (i) => own[i % 4].run({ x }))
      for (const e of [...shared, ...own]) e.release()
      weights.release()
      return [
        {
          measured: { value: sharedBytes, unit: 'B weights resident, 4 executors sharing' },
          baseline: { value: ownBytes, unit: 'B', what: 'weights resident, 4 executors with their own params' },
          ratio: sharedBytes / ownBytes,
          ratioMeaning: 'resident weight bytes shared / own (0.25 = one copy for four)',
          msPerRequest: { shared: sharedMs, own: ownMs, ratio: sharedMs / ownMs },
        },
      ]
    },
  },
  {
    name: 'serving-shapes',
    description: 'mixed batches 1-16 through a bucketed shape executor vs padding every request to 16 (ms per request, peak reserved)',
    async run({ gpu }) {
      const batches = Array.from({ length: 60 }, (_, i) => 1 + ((i * 7 + 3) % 16))
      const { graph, row } = model(4, { symbolic: true })
      const p = params(row)
      const inputs = (b: number) => ({ x: new Float32Array((b * row) / 4).fill(1) })
      gpu.heap.emptyCache()
      gpu.heap.resetPeakStats()
      const shapes = gpu.compileShapes(graph, { params: p, buckets: { batch: [1, 2, 4, 8, 16] }, capacity: 5 })
      const bucketMs = await timed(batches.length, (i) => shapes.run({ batch: batches[i % batches.length] }, inputs(batches[i % batches.length])))
      const bucketPeak = gpu.heap.stats().reservedBytes.peak
      const stats = shapes.stats()
      shapes.clear()
      gpu.heap.emptyCache()
      gpu.heap.resetPeakStats()
      const padded = await gpu.compile(model(4, { batch: 16 }).graph, { params: p })
      const full = inputs(16)
      const padMs = await timed(batches.length, (i) => {
        const b = batches[i % batches.length]
        full.x.fill(0)
        full.x.set(inputs(b).x)
        return padded.run(full)
      })
      const padPeak = gpu.heap.stats().reservedBytes.peak
      padded.release()
      return [
        {
          measured: { value: bucketMs, unit: 'ms/request, shape executor (buckets 1,2,4,8,16)' },
          baseline: { value: padMs, unit: 'ms/request', what: 'every request padded to batch 16' },
          ratio: bucketMs / padMs,
          ratioMeaning: 'shape executor / padded (lower is better)',
          peakReserved: { shapes: bucketPeak, padded: padPeak, ratio: bucketPeak / padPeak },
          cache: stats,
        },
      ]
    },
  },
]
