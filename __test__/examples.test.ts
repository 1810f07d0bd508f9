// The examples as smoke tests: type-checked against the public types and compiled
// with the repo's tsc, then run as child processes at small, bounded sizes on the
// real device, asserting what they report (and, for the server, what it answers).
import { execFile, spawn } from 'node:child_process'
import { join, resolve } from 'node:path'
import test, { type ExecutionContext } from 'ava'
import { promtoolCheck, samples } from './promtool.js'

const ROOT = resolve(__dirname, '..')
const BUILD = join(ROOT, 'examples', 'build')
const TSC = require.resolve('typescript/bin/tsc')

/** A child's exit code (or the signal that ended it) and its output. */
interface Run {
  code: number | string | null | undefined
  stdout: string
  stderr: string
}

/** Runs node with `args`; resolves with the exit code and output instead of rejecting. */
function node(args: string[], { timeout = 90_000 } = {}): Promise<Run> {
  return new Promise((done) => {
    execFile(process.execPath, args, { cwd: ROOT, timeout, maxBuffer: 16 << 20 }, (err, stdout, stderr) =>
      done({ code: err ? (err.code ?? err.signal) : 0, stdout, stderr }),
    )
  })
}

let built: Promise<Run> | undefined
/** Type-checks and compiles the examples once (every test waits for it). */
function build(): Promise<Run> {
  built ??= node([TSC, '-p', join(ROOT, 'examples', 'tsconfig.json')])
  return built
}

/** min / max / first / last of a series the load test samples. */
interface Series {
  min: number
  max: number
  first: number
  last: number
}

/** The inference server's `--load-test --json` report (the fields checked here). */
interface LoadTestReport {
  workers: number
  devicePerWorker: boolean
  requests: number
  ok: number
  failed: number
  failures: unknown
  mismatched: number
  maxAbsError: number
  rows: number
  requestsPerSecond: number
  latencyMs: { p50: number; p99: number; max: number }
  executors: { deviceBytes: number }[]
  memory: {
    gcBeforeSamples: boolean
    samples: number
    heapReserved: Series
    heapAllocated: Series
    hostAllocated: Series
    jsHeapUsed: { slopePerRequest: number }
    rss: Series
  }
}

/** The heap's figures at the end of an epoch of the training loop. */
interface EpochHeap {
  allocated: number
  peakAllocated: number
  reserved: number
  driverAllocations: number
  cacheMisses: number
  cacheHits: number
}

/** The training loop's `--json` report (the fields checked here). */
interface TrainingReport {
  epochs: { loss: number; heap: EpochHeap }[]
  steps: number
  samples: number
  shape: { batch: number; hidden: number }
  initialLoss: number
  finalLoss: number
  firstStepCheck: { lossRelError: number; gradientRelError: number; updateRelError: number }
  stateBytes: number
  reservedAfterStep1: number
  reservedAtEnd: number
  reservedStable: boolean
  driverAllocationsAfterStep1: number
  driverAllocationsAtEnd: number
  driverAllocationsStable: boolean
  allocatedStable: boolean
  msPerStep: number
  graphStep: {
    maxAbsDiff: number
    inPlaceMaxAbsDiff: number
    hostBytesPerStep: { stateThroughHost: number; stateInPlace: number }
    deviceMs: number
    eagerMs: number
    compiledMs: number
    compiledInPlaceMs: number
  }
}

async function runJson<T>(t: ExecutionContext, args: string[]): Promise<T> {
  const b = await build()
  t.is(b.code, 0, `tsc failed:\n${b.stdout}${b.stderr}`)
  const r = await node(args)
  t.is(r.code, 0, `${args.join(' ')} failed:\n${r.stdout}\n${r.stderr}`)
  return JSON.parse(r.stdout.trim().split('\n').pop()!) as T
}

test('inference server: load test answers every request correctly with flat device memory', async (t) => {
  const r = await runJson<LoadTestReport>(t, [
    '--expose-gc',
    join(BUILD, 'inference-server.js'),
    '--load-test',
    '--requests',
    '300',
    '--concurrency',
    '8',
    '--workers',
    '2',
    '--json',
  ])
  t.is(r.workers, 2)
  t.is(r.requests, 300)
  t.is(r.ok, 300, JSON.stringify(r.failures))
  t.is(r.failed, 0)
  t.is(r.mismatched, 0, 'every reply matches the float64 CPU reference')
  t.true(r.maxAbsError > 0 && r.maxAbsError < 1e-5, `max abs error ${r.maxAbsError}`)
  t.true(r.rows > r.requests, 'requests carry 1..batch rows')
  t.true(r.requestsPerSecond > 0)
  t.true(r.latencyMs.p50 > 0 && r.latencyMs.p99 >= r.latencyMs.p50 && r.latencyMs.max >= r.latencyMs.p99)
  const m = r.memory
  t.true(m.gcBeforeSamples)
  t.true(m.samples >= 20, `${m.samples} samples`)
  // Runs allocate nothing from the device heap: the executors' slabs are all it holds.
  t.is(m.heapReserved.min, m.heapReserved.max)
  t.true(m.heapReserved.first > 0)
  t.is(m.heapAllocated.min, m.heapAllocated.max)
  // Staging for inputs comes from the host cache: a few 2 KiB blocks, not one per request.
  t.true(m.hostAllocated.max - m.hostAllocated.min <= 16 << 10, `host cache ${m.hostAllocated.min} -> ${m.hostAllocated.max}`)
  // Each request makes tens of KiB of garbage; none of it may stay reachable.
  t.true(m.jsHeapUsed.slopePerRequest < 4096, `JS heap used grows ${m.jsHeapUsed.slopePerRequest} B/request`)
  // RSS moves with V8's heap sizing (young generation growth), bounded far below a per-request leak.
  t.true(m.rss.max - m.rss.first < 48 << 20, `RSS ${m.rss.first} -> max ${m.rss.max}`)
  t.log(
    `${r.requestsPerSecond.toFixed(0)} requests/s, p50 ${r.latencyMs.p50.toFixed(1)} ms, p99 ${r.latencyMs.p99.toFixed(1)} ms; RSS ${(m.rss.first / 2 ** 20).toFixed(1)} -> ${(m.rss.last / 2 ** 20).toFixed(1)} MiB`,
  )
})

test('inference server: a device per worker gives the same answers', async (t) => {
  const r = await runJson<LoadTestReport>(t, [
    join(BUILD, 'inference-server.js'),
    '--load-test',
    '--requests',
    '40',
    '--concurrency',
    '4',
    '--workers',
    '2',
    '--device-per-worker',
    '--json',
  ])
  t.true(r.devicePerWorker)
  t.is(r.ok, 40)
  t.is(r.mismatched, 0)
  // Two devices, each holding one executor: twice the shared case's single executor footprint at least.
  t.true(r.memory.heapReserved.first >= 2 * r.executors[0].deviceBytes)
})

/** The classifier's shape (examples/lib/classifier.ts). */
interface ClassifierShape {
  batch: number
  inputs: number
  hidden: number
  classes: number
}
type ClassifierWeights = Record<'w1' | 'b1' | 'w2' | 'b2' | 'w3' | 'b3', Float32Array>

/** The server's answer to a bad request. */
interface ErrorReply {
  error: { code: string }
}

/** GET /stats (the fields checked here). */
interface StatsReply {
  served: number
  workers: { executor: { runs: number; cached: number; misses: number } }[]
  memory: { heapReserved: number }
}

test('inference server: HTTP routes, typed errors and a clean shutdown', async (t) => {
  const b = await build()
  t.is(b.code, 0, b.stdout + b.stderr)
  const { classifierWeights, classifyRow } = require(join(BUILD, 'lib', 'classifier.js')) as {
    classifierWeights: (shape: ClassifierShape, seed?: number) => ClassifierWeights
    classifyRow: (shape: ClassifierShape, w: ClassifierWeights, row: ArrayLike<number>) => Float64Array
  }
  const shape: ClassifierShape = { batch: 2, inputs: 4, hidden: 8, classes: 3 }
  const child = spawn(
    process.execPath,
    [join(BUILD, 'inference-server.js'), '--port', '0', '--workers', '1', '--batch', '2', '--inputs', '4', '--hidden', '8', '--classes', '3'],
    { cwd: ROOT },
  )
  let stdout = ''
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((r) => child.once('exit', (code, signal) => r({ code, signal })))
  const port = await new Promise<number>((resolve, reject) => {
    child.stdout.on('data', (d) => {
      stdout += d
      const m = /listening on http:\/\/[^:]+:(\d+)/.exec(stdout)
      if (m) resolve(Number(m[1]))
    })
    exited.then(() => reject(new Error(`server exited early:\n${stdout}`)))
  })
  const call = async <T = unknown>(method: string, path: string, body?: string): Promise<{ status: number; json: T }> => {
    const res = await fetch(`http://127.0.0.1:${port}${path}`, { method, body })
    return { status: res.status, json: (await res.json()) as T }
  }
  try {
    const rows = [
      [0.5, -1, 0.25, 2],
      [0, 0, 0, 0],
    ]
    const ok = await call<{ output: number[][] }>('POST', '/infer', JSON.stringify({ input: rows }))
    t.is(ok.status, 200)
    const w = classifierWeights(shape, 1)
    rows.forEach((row, k) => {
      const expected = classifyRow(shape, w, row)
      for (const [c, p] of ok.json.output[k].entries()) t.true(Math.abs(p - expected[c]) < 1e-5, `row ${k} class ${c}: ${p} vs ${expected[c]}`)
    })
    t.deepEqual((await call<ErrorReply>('POST', '/infer', '{"input": [[1, 2, 3]]}')).json.error.code, 'INVALID_ARGUMENT')
    t.is((await call('POST', '/infer', '{"input": [[1, 2, 3, 4], [1, 2, 3, 4], [1, 2, 3, 4]]}')).status, 400, 'more rows than the batch')
    const bad = await call<ErrorReply>('POST', '/infer', 'not json')
    t.is(bad.status, 400)
    t.is(bad.json.error.code, 'PARSE_ERROR')
    t.is((await call('GET', '/infer')).status, 405)
    t.is((await call('GET', '/nope')).status, 404)
    const stats = await call<StatsReply>('GET', '/stats')
    t.is(stats.status, 200)
    t.is(stats.json.served, 1)
    t.is(stats.json.workers[0].executor.runs, 1)
    // Changing batch sizes: one executor per bucket (1 and 2 rows), compiled before serving.
    t.like(stats.json.workers[0].executor, { cached: 2, misses: 2 })
    t.true(stats.json.memory.heapReserved > 0)
    // Prometheus scrapes /metrics: valid for promtool, and the heap's figures as /stats has them.
    const scrape = await fetch(`http://127.0.0.1:${port}/metrics`)
    t.is(scrape.status, 200)
    t.regex(scrape.headers.get('content-type')!, /^text\/plain/)
    const text = await scrape.text()
    const check = promtoolCheck(text)
    t.true(check.ok, check.output)
    const got = samples(text)
    const reserved = Object.entries(got)
      .filter(([k]) => k.startsWith('wgalloc_heap_reserved_bytes{device="main"'))
      .reduce((n, [, v]) => n + v, 0)
    const now = await call<StatsReply>('GET', '/stats')
    t.is(reserved, now.json.memory.heapReserved)
    for (const name of [
      'heap_allocated_bytes',
      'heap_active_blocks',
      'heap_segments',
      'heap_pending_free_bytes',
      'heap_driver_allocations_total',
      'heap_cache_hits_total',
    ]) {
      t.true(
        Object.keys(got).some((k) => k.startsWith(`wgalloc_${name}{`)),
        name,
      )
    }
  } finally {
    child.kill('SIGTERM')
  }
  t.deepEqual(await exited, { code: 0, signal: null }, 'SIGTERM closes the server, the workers and the device')
})

test('training loop: state on the device, loss falls, the first step matches the CPU reference, reserved memory is constant after step 1', async (t) => {
  const r = await runJson<TrainingReport>(t, [join(BUILD, 'training-loop.js'), '--epochs', '10', '--json'])
  t.is(r.epochs.length, 10)
  t.is(r.steps, 10 * Math.floor(r.samples / r.shape.batch))
  t.true(r.finalLoss < r.initialLoss / 4, `loss ${r.initialLoss} -> ${r.finalLoss}`)
  t.true(r.epochs[9].loss < r.epochs[0].loss / 2, `epoch losses ${r.epochs.map((e) => e.loss.toFixed(4)).join(' ')}`)
  // Forward, backward and Adam on the GPU against float64 on the CPU.
  t.true(r.firstStepCheck.lossRelError < 1e-5, `loss ${r.firstStepCheck.lossRelError}`)
  t.true(r.firstStepCheck.gradientRelError < 1e-3, `gradients ${r.firstStepCheck.gradientRelError}`)
  t.true(r.firstStepCheck.updateRelError < 1e-3, `update ${r.firstStepCheck.updateRelError}`)
  // Parameters and both Adam moments stay allocated: 3 x (2H + H + H^2 + H + H + 1) floats at least.
  const H = r.shape.hidden
  t.true(r.stateBytes >= 3 * 4 * (H * H + 5 * H + 1), `state ${r.stateBytes} B`)
  // The caching allocator: what step 1 reserved serves every later step, and every
  // block a step mallocs is freed by its end.
  t.true(r.reservedAfterStep1 > 0)
  t.true(r.reservedStable, `reserved ${r.reservedAfterStep1} after step 1, ${r.reservedAtEnd} at the end`)
  t.true(r.driverAllocationsStable, `driver allocations ${r.driverAllocationsAfterStep1} after step 1, ${r.driverAllocationsAtEnd} at the end`)
  t.true(r.allocatedStable, 'between steps only the parameters and moments are allocated')
  for (const e of r.epochs) {
    t.is(e.heap.allocated, r.stateBytes)
    t.true(e.heap.peakAllocated > r.stateBytes, 'activations and gradients come from the heap')
    t.is(e.heap.reserved, r.reservedAfterStep1)
    t.is(e.heap.driverAllocations, r.driverAllocationsAfterStep1)
    t.is(e.heap.cacheMisses, r.epochs[0].heap.cacheMisses, 'no cache miss after the first epoch')
  }
  // Every step after the first is served from the cache, each epoch as many blocks as the last.
  const hits = r.epochs.map((e, i) => e.heap.cacheHits - (i ? r.epochs[i - 1].heap.cacheHits : 0))
  t.true(hits[1] > 0 && hits.slice(2).every((n) => n === hits[1]), `cache hits per epoch ${hits.join(' ')}`)
  // The same step as a graph run (state through the host) gives the same result.
  t.true(r.graphStep.maxAbsDiff < 1e-6, `device step vs graph step: ${r.graphStep.maxAbsDiff}`)
  // And a compiled graph binding the model's own blocks as external tensors, updated in place.
  t.true(r.graphStep.inPlaceMaxAbsDiff < 1e-6, `device step vs in-place graph step: ${r.graphStep.inPlaceMaxAbsDiff}`)
  t.deepEqual(r.graphStep.hostBytesPerStep, { stateThroughHost: 2 * r.stateBytes, stateInPlace: 0 })
  t.log(
    `${r.msPerStep.toFixed(2)} ms/step training; one step: ${r.graphStep.deviceMs.toFixed(2)} ms on the device, ${r.graphStep.eagerMs.toFixed(2)} ms eager graph, ${r.graphStep.compiledMs.toFixed(2)} ms compiled graph, ${r.graphStep.compiledInPlaceMs.toFixed(2)} ms compiled graph with the state in place`,
  )
})

/** The LLM server's `--check --json` summary (the fields checked here). */
interface LlmCheckReport {
  requests: number
  failed: string[]
  tokens: number
  mismatches: number
  maxLogitError: number
  prefixHitRatio: number
  cachedTokens: number
  peakBatch: number
  peakDecodeBatch: number
  preemptions: number
  healthz: number
  metricsHaveKv: boolean
  kv: { usedBlocks: number; sequences: number; prefixHitTokens: number }
}

test('llm server: continuous batching over the paged KV cache matches the CPU reference token for token', async (t) => {
  const r = await runJson<LlmCheckReport>(t, [join(BUILD, 'llm-server.js'), '--check', '--requests', '8', '--concurrency', '8', '--json'])
  t.deepEqual(r.failed, [])
  t.is(r.requests, 8)
  t.true(r.tokens > r.requests, `${r.tokens} tokens`)
  t.is(r.mismatches, 0, 'every generated token and its logits match the CPU reference without a cache')
  t.true(r.maxLogitError < 1e-4, `max logit error ${r.maxLogitError}`)
  // The shared system prompt is served from the prefix cache within each tenant.
  t.true(r.prefixHitRatio > 0 && r.kv.prefixHitTokens > 0 && r.cachedTokens > 0, `prefix hit ratio ${r.prefixHitRatio}`)
  t.true(r.peakDecodeBatch > 1, `peak decode batch ${r.peakDecodeBatch}`)
  t.is(r.healthz, 200)
  t.true(r.metricsHaveKv, '/metrics carries the KV cache figures')
  // Finished sequences are freed.
  t.is(r.kv.sequences, 0)
  t.is(r.kv.usedBlocks, 0)
})

test('llm server: a KV cache too small for the batch preempts and recomputes, still exact', async (t) => {
  const r = await runJson<LlmCheckReport>(t, [
    join(BUILD, 'llm-server.js'),
    '--check',
    '--requests',
    '10',
    '--concurrency',
    '10',
    '--kv-blocks',
    '12',
    '--block-tokens',
    '8',
    '--step-tokens',
    '16',
    '--json',
  ])
  t.deepEqual(r.failed, [])
  t.is(r.mismatches, 0)
  t.true(r.preemptions > 0, `${r.preemptions} preemptions`)
  t.true(r.peakBatch > 1)
  t.is(r.kv.usedBlocks, 0)
})

test('llm server check: a near-tie of the CPU reference accepts either token, a wider gap is a mismatch', async (t) => {
  const b = await build()
  t.is(b.code, 0, b.stdout + b.stderr)
  type Shape = { vocab: number }
  const { DEFAULT_SHAPE, decoderWeights, referenceLogits, argmax } = require(join(BUILD, 'lib', 'decoder.js')) as {
    DEFAULT_SHAPE: Shape
    decoderWeights: (s: Shape, seed: number) => unknown
    referenceLogits: (s: Shape, w: unknown, tokens: number[]) => Float32Array
    argmax: (row: ArrayLike<number>) => number
  }
  const { verify } = require(join(BUILD, 'lib', 'llm-check.js')) as {
    verify: (s: Shape, w: unknown, prompt: number[], tokens: number[], logits: number[][], tol: number) => { mismatches: number; nearTies: number }
  }
  const w = decoderWeights(DEFAULT_SHAPE, 1)
  const prompt = [5, 17, 99]
  const V = DEFAULT_SHAPE.vocab
  const cpu = Array.from(referenceLogits(DEFAULT_SHAPE, w, prompt).subarray(2 * V, 3 * V))
  const best = argmax(cpu)
  const second = argmax(cpu.map((x, i) => (i === best ? -Infinity : x)))
  const gap = cpu[best] - cpu[second]
  // "GPU" logits that put the runner-up first, off by the gap plus a little.
  const gpu = cpu.map((x, i) => (i === second ? cpu[best] + gap / 10 : x))
  t.like(verify(DEFAULT_SHAPE, w, prompt, [second], [gpu], gap * 2), { mismatches: 0, nearTies: 1 })
  t.like(verify(DEFAULT_SHAPE, w, prompt, [second], [gpu], gap / 2), { mismatches: 1, nearTies: 0 })
  t.like(verify(DEFAULT_SHAPE, w, prompt, [best], [cpu], 1e-6), { mismatches: 0, nearTies: 0 })
})
