// An HTTP inference server on WGSL kernels. The main thread builds the model graph
// once (its batch a symbolic dimension), opens the device and uploads the weights once;
// each worker thread attaches to that device through `gpu.shareHandle()` / `Gpu.attach()`
// (or, with --device-per-worker, opens its own), binds the shared weights, and serves
// requests one at a time: a request of r rows runs the plan of the smallest batch bucket
// (1, 2, 4, ... --batch) that holds r, with its input written into a device block the
// worker keeps and its output written into another, of which r rows are read back.
//
//   npm run examples:build
//   node examples/build/inference-server.js --port 8080
//   curl -s localhost:8080/infer -d '{"input": [[0.1, -0.2, ...64 numbers]]}'
//   node examples/build/inference-server.js --load-test --requests 400 --concurrency 16
//
// Routes: POST /infer {"input": [[...inputs numbers], ... up to --batch rows]} ->
// {"output": [[...class probabilities]], "argmax": [...], "worker": i};
// GET /stats; GET /metrics (Prometheus text: wgalloc's heap, host cache and profiler metrics);
// GET /healthz.
// Options: --port 8080 --host 127.0.0.1 --workers (cores, at most 4) --batch 8 --inputs 64 --hidden 256
// --classes 16 --device-per-worker --seed 1; load test: --load-test --requests 400
// --concurrency 16 --warmup 32 --json

import { fork } from 'node:child_process'
import { join } from 'node:path'
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import { availableParallelism } from 'node:os'
import { parseArgs } from 'node:util'
import { Registry } from 'prom-client'
import { Gpu, type Weights } from 'wgalloc'
import { registerMetrics } from 'wgalloc/metrics'
import { formatBytes, intOption, runMain } from './lib/cli'
import { classifierGraph, classifierWeights, type ClassifierShape } from './lib/classifier'
import type { ClientConfig, ClientReport, FromClient } from './lib/load-client'
import { summarize, type SeriesSummary } from './lib/load-test'
import { InferenceError, WorkerPool, type DeviceMemory, type JsHeap } from './lib/worker-pool'

const MAX_BODY = 1 << 20

class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message)
  }
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = []
    let size = 0
    req.on('data', (c: Buffer) => {
      size += c.length
      if (size > MAX_BODY) {
        reject(new HttpError(413, 'INVALID_ARGUMENT', `request body above ${MAX_BODY} bytes`))
        req.destroy()
      } else chunks.push(c)
    })
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')))
    req.on('error', reject)
  })
}

/** The request's rows, packed (the worker runs the smallest batch bucket that holds them). */
function parseInput(text: string, s: ClassifierShape): { x: Float32Array; rows: number } {
  let body: unknown
  try {
    body = JSON.parse(text)
  } catch {
    throw new HttpError(400, 'PARSE_ERROR', 'the body must be JSON')
  }
  const input = (body as { input?: unknown })?.input
  if (!Array.isArray(input) || input.length < 1 || input.length > s.batch) {
    throw new HttpError(400, 'INVALID_ARGUMENT', `"input" must be an array of 1 to ${s.batch} rows`)
  }
  const x = new Float32Array(input.length * s.inputs)
  input.forEach((row: unknown, r) => {
    if (!Array.isArray(row) || row.length !== s.inputs || !row.every((v) => typeof v === 'number' && Number.isFinite(v))) {
      throw new HttpError(400, 'INVALID_ARGUMENT', `input[${r}] must be an array of ${s.inputs} finite numbers`)
    }
    x.set(row as number[], r * s.inputs)
  })
  return { x, rows: input.length }
}

function argmax(row: ArrayLike<number>): number {
  let best = 0
  for (let i = 1; i < row.length; i++) if (row[i] > row[best]) best = i
  return best
}

function send(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body)
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) })
  res.end(text)
}

interface Service {
  shape: ClassifierShape
  pool: WorkerPool
  memory: () => Promise<Memory>
  served: number
  /** Called after each /infer reply (the load test samples memory from it). */
  onServed?: () => void
  /** Prometheus metrics of the shared device (none with a device per worker). */
  metrics?: Registry
}

async function route(svc: Service, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const path = (req.url ?? '/').split('?')[0]
  if (path === '/healthz' && req.method === 'GET') return send(res, 200, { ok: true })
  if (path === '/metrics' && req.method === 'GET') {
    if (!svc.metrics) throw new HttpError(404, 'NOT_FOUND', 'metrics need the shared device (not --device-per-worker)')
    const text = await svc.metrics.metrics()
    res.writeHead(200, { 'content-type': svc.metrics.contentType, 'content-length': Buffer.byteLength(text) })
    res.end(text)
    return
  }
  if (path === '/stats' && req.method === 'GET') {
    const workers = await svc.pool.stats()
    return send(res, 200, {
      served: svc.served,
      memory: await svc.memory(),
      workers: workers.map((w, i) => ({ ...svc.pool.workers[i], executor: w.executor })),
    })
  }
  if (path !== '/infer') throw new HttpError(404, 'NOT_FOUND', `no route ${path}`)
  if (req.method !== 'POST') throw new HttpError(405, 'METHOD_NOT_ALLOWED', 'POST a JSON body to /infer')
  const { x, rows } = parseInput(await readBody(req), svc.shape)
  const { probs, worker } = await svc.pool.infer(x)
  const C = svc.shape.classes
  const output = Array.from({ length: rows }, (_, r) => Array.from(probs.subarray(r * C, (r + 1) * C)))
  svc.served++
  send(res, 200, { output, argmax: output.map(argmax), worker })
  svc.onServed?.()
}

function serve(svc: Service): Server {
  return createServer((req, res) => {
    route(svc, req, res).catch((err: unknown) => {
      const status = err instanceof HttpError ? err.status : 500
      const code = err instanceof HttpError || err instanceof InferenceError ? err.code : 'INTERNAL'
      if (!res.headersSent) send(res, status, { error: { code, message: (err as Error).message } })
    })
  })
}

/** The process's memory: RSS, the V8 heaps of all its threads, and the device's heap and host cache. */
interface Memory extends DeviceMemory, JsHeap {
  rss: number
  /** RSS outside the V8 heaps: wgpu, the driver, Node's native side. */
  native: number
}

interface MemorySample extends Memory {
  /** Requests served since the timed phase started. */
  served: number
}

/**
 * Forks the load client (a separate process, so RSS is the server's alone), samples
 * the server's memory every `requests / 20` requests it serves in the timed phase,
 * and combines both into one report.
 */
async function loadTest(svc: Service, config: ClientConfig) {
  const samples: Promise<MemorySample>[] = []
  const every = Math.max(1, Math.floor(config.requests / 20))
  let base = -1 // served count when the timed phase started
  const sample = () => {
    const served = svc.served - base
    samples.push(svc.memory().then((m) => ({ served, ...m })))
  }
  svc.onServed = () => {
    if (base >= 0 && (svc.served - base) % every === 0) sample()
  }
  const client = fork(join(__dirname, 'lib', 'load-client.js'), { stdio: 'inherit' })
  const report = await new Promise<ClientReport>((resolve, reject) => {
    client.on('message', (m: FromClient) => {
      if (m.type === 'timed') {
        base = svc.served
        sample()
        client.send('go')
      } else if (m.type === 'done') resolve(m.report)
      else reject(new Error(`load client: ${m.message}`))
    })
    client.once('error', reject)
    client.once('exit', (code) => reject(new Error(`load client exited with code ${code}`)))
    client.send(config)
  })
  svc.onServed = undefined
  if ((svc.served - base) % every !== 0) sample()
  const memory = await Promise.all(samples)
  const xs = memory.map((m) => m.served)
  const series = (k: keyof Memory) =>
    summarize(
      xs,
      memory.map((m) => m[k]),
    )
  return {
    ...report,
    concurrency: config.concurrency,
    warmup: config.warmup,
    memory: {
      samples: memory.length,
      gcBeforeSamples: typeof (globalThis as { gc?: unknown }).gc === 'function',
      rss: series('rss'),
      native: series('native'),
      jsHeapTotal: series('heapTotal'),
      jsHeapUsed: series('heapUsed'),
      heapReserved: series('heapReserved'),
      heapAllocated: series('heapAllocated'),
      hostAllocated: series('hostAllocated'),
      series: memory,
    },
  }
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      port: { type: 'string' },
      host: { type: 'string', default: '127.0.0.1' },
      workers: { type: 'string' },
      batch: { type: 'string' },
      inputs: { type: 'string' },
      hidden: { type: 'string' },
      classes: { type: 'string' },
      seed: { type: 'string' },
      'device-per-worker': { type: 'boolean', default: false },
      'load-test': { type: 'boolean', default: false },
      requests: { type: 'string' },
      concurrency: { type: 'string' },
      warmup: { type: 'string' },
      json: { type: 'boolean', default: false },
    },
  })
  const shape: ClassifierShape = {
    batch: intOption('batch', values.batch, 8, 1, 1024),
    inputs: intOption('inputs', values.inputs, 64, 1, 4096),
    hidden: intOption('hidden', values.hidden, 256, 1, 4096),
    classes: intOption('classes', values.classes, 16, 2, 4096),
  }
  const workers = intOption('workers', values.workers, Math.min(4, availableParallelism()), 1, 64)
  const seed = intOption('seed', values.seed, 1, 0)
  const perWorker = values['device-per-worker']
  const log = values.json ? () => {} : console.log

  // The graph is built once; every worker compiles it into its own executors, one per batch bucket.
  const graph = classifierGraph(shape, { batchDim: true })
  const params = classifierWeights(shape, seed)
  const gpu = perWorker ? null : await Gpu.request()
  let pool: WorkerPool | undefined
  let weights: Weights | undefined
  let server: Server | undefined
  try {
    const handle = gpu ? gpu.shareHandle() : null
    // One device copy of the weights for every worker on the shared device.
    weights = gpu ? gpu.createWeights(params) : undefined
    const shared = weights ? weights.shareHandle() : null
    pool = await WorkerPool.start(workers, (index) => ({ index, handle, weights: shared, graph, shape, params }))
    const p = pool
    // With --expose-gc, every thread collects its garbage first, so RSS shows what
    // is retained rather than where V8's collection cycle happens to be.
    const gc = (globalThis as { gc?: () => void }).gc
    const memory = async (): Promise<Memory> => {
      const workerStats = await p.stats(gc !== undefined)
      gc?.()
      const { rss, heapTotal, heapUsed } = process.memoryUsage()
      const js = {
        heapTotal: heapTotal + workerStats.reduce((n, w) => n + w.js.heapTotal, 0),
        heapUsed: heapUsed + workerStats.reduce((n, w) => n + w.js.heapUsed, 0),
      }
      // A shared device is one heap and one host cache; devices of their own add up.
      const sum = (k: keyof DeviceMemory) => workerStats.reduce((n, w) => n + w.device[k], 0)
      const device = perWorker
        ? { heapReserved: sum('heapReserved'), heapAllocated: sum('heapAllocated'), hostAllocated: sum('hostAllocated') }
        : workerStats[0].device
      return { rss, native: rss - js.heapTotal, ...js, ...device }
    }
    // Metrics of the shared device, read from its heap, host cache and profiler at scrape time.
    let metrics: Registry | undefined
    if (gpu) {
      metrics = new Registry()
      registerMetrics({ main: gpu }, { registry: metrics })
    }
    const svc: Service = { shape, pool, memory, served: 0, metrics }
    const adapter = gpu?.info.adapterName ?? 'one device per worker'
    log(
      `device: ${adapter}; ${workers} workers ${perWorker ? 'with a device each' : 'sharing it (shareHandle / attach)'}; MLP ${shape.inputs}-${shape.hidden}-${shape.hidden}-${shape.classes}, batch ${shape.batch}`,
    )
    const w0 = pool.workers[0]
    log(
      `each worker: executors for batch buckets up to ${shape.batch} hold ${formatBytes(w0.deviceBytes)} of slabs; compiled in ${pool.workers.map((w) => w.compileMs.toFixed(0)).join(', ')} ms`,
    )

    server = serve(svc)
    const s = server
    const port = values['load-test'] ? 0 : intOption('port', values.port, 8080, 0, 65535)
    await new Promise<void>((resolve, reject) => {
      s.once('error', reject)
      s.listen(port, values['load-test'] ? '127.0.0.1' : values.host, resolve)
    })
    const address = server.address()
    const bound = typeof address === 'object' && address ? address.port : port

    if (!values['load-test']) {
      log(`listening on http://${values.host}:${bound} (POST /infer, GET /stats, GET /metrics, GET /healthz); Ctrl-C stops`)
      await new Promise<void>((resolve) => {
        process.once('SIGINT', resolve)
        process.once('SIGTERM', resolve)
      })
      log('stopping')
      return
    }

    const requests = intOption('requests', values.requests, 400)
    const concurrency = intOption('concurrency', values.concurrency, 16, 1, 1024)
    const warmup = intOption('warmup', values.warmup, 2 * concurrency, 0)
    const r = await loadTest(svc, { port: bound, shape, seed, requests, concurrency, warmup })
    const m = r.memory
    if (values.json) {
      console.log(JSON.stringify({ device: adapter, shape, workers, devicePerWorker: perWorker, executors: pool.workers, ...r }))
    } else {
      log(`load test: ${requests} requests (${r.rows} rows), ${concurrency} in flight, after ${warmup} warm-up requests`)
      log(`  throughput  ${r.requestsPerSecond.toFixed(1)} requests/s (${((r.rows / r.wallMs) * 1000).toFixed(0)} rows/s)`)
      log(`  latency     p50 ${r.latencyMs.p50.toFixed(1)} ms, p99 ${r.latencyMs.p99.toFixed(1)} ms, max ${r.latencyMs.max.toFixed(1)} ms`)
      log(`  correct     ${r.ok}/${requests} answered 200; ${r.ok - r.mismatched} match the CPU reference (max abs error ${r.maxAbsError.toExponential(1)})`)
      log(
        `  memory      ${m.samples} samples${m.gcBeforeSamples ? ', each after a GC in every thread' : ' (run node with --expose-gc to sample after a GC)'}: first -> last, max, slope`,
      )
      const rows: Array<[string, SeriesSummary]> = [
        ['RSS', m.rss],
        ['V8 heaps committed', m.jsHeapTotal],
        ['V8 heaps used', m.jsHeapUsed],
        ['native (RSS - V8)', m.native],
        ['device heap reserved', m.heapReserved],
        ['host staging cache', m.hostAllocated],
      ]
      for (const [name, x] of rows) {
        log(
          `    ${name.padEnd(22)}${formatBytes(x.first).padStart(11)} -> ${formatBytes(x.last).padStart(11)}  max ${formatBytes(x.max).padStart(11)}  ${x.slopePerRequest >= 0 ? '+' : ''}${x.slopePerRequest.toFixed(0)} B/request`,
        )
      }
      for (const f of r.failures) log(`  failed request ${f.index}: ${f.status} ${f.body}`)
    }
    if (r.failed > 0 || r.mismatched > 0) process.exitCode = 1
  } finally {
    if (server?.listening) {
      const closed = new Promise((resolve) => server!.close(resolve))
      server.closeAllConnections() // idle keep-alive sockets would hold close() open
      await closed
    }
    await pool?.close()
    weights?.release()
    gpu?.destroy()
  }
}

runMain(main)
