// Reliability: concurrency across worker threads, the GC safety net, exit with
// GPU work pending, random misuse of the public API, and the fast-check fuzzers of
// __test__/fuzz/ (each in a child process, so a crash or a hang is reported as such).
// `npm test` runs the short mode; `npm run stress` (WGALLOC_STRESS=1) the long one.
// Every test records its counts for the README table (reliability-report.ts).
import { spawnSync } from 'node:child_process'
import { Worker } from 'node:worker_threads'
import test from 'ava'
import { ERROR_CODES, Gpu, type Graph, planMemory, WgallocError } from 'wgalloc'
import { isThenable } from './fuzz/outcome.js'
import { runSuite } from './fuzz/spawn.js'
import { collectGarbageUntil } from './helpers.js'
import { knob, MODE, record } from './reliability-report.js'

const OPS = knob('WGALLOC_STRESS_OPS', 300, 20_000)
const WORKERS = knob('WGALLOC_STRESS_WORKERS', 4, 4)
const CYCLES = knob('WGALLOC_STRESS_CYCLES', 50_000, 1_000_000)
// Fuzzers: runs per property are multiplied by the scale and capped in time per property.
const FUZZ_SCALE = knob('WGALLOC_FUZZ_SCALE', 1, 50)
const FUZZ_TIME_MS = knob('WGALLOC_FUZZ_TIME_MS', 5_000, 120_000)
const ENTRY = JSON.stringify(require.resolve('..'))

/** A worker: random heap / host / executor work on the shared device, every byte checked. */
const WORKER = `
const { parentPort, workerData } = require('node:worker_threads')
const { Gpu } = require(${ENTRY})
const { seed, handle, ops } = workerData
let s = seed
const rnd = (n) => ((s = (Math.imul(s, 1103515245) + 12345) >>> 0) % n)
const fill = (n, tag) => Uint8Array.from({ length: n }, (_, i) => (i * 7 + tag * 13 + seed) & 0xff)
const ADD = '@group(0) @binding(0) var<storage, read_write> a: array<u32>;\\n@group(0) @binding(1) var<storage, read_write> b: array<u32>;\\n@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3<u32>) { if (g.x < arrayLength(&b)) { b[g.x] = a[g.x] + ' + seed + 'u; } }'
;(async () => {
  const gpu = Gpu.attach(handle)
  const graph = { kernels: { k: { source: ADD } }, tensors: [{ id: 'x', size: 1024, kind: 'input', dtype: 'u32' }, { id: 't', size: 1024 }, { id: 'y', size: 1024, kind: 'output', dtype: 'u32' }],
    ops: [{ kernel: 'k', inputs: ['x'], outputs: ['t'], dispatch: [4] }, { kernel: 'k', inputs: ['t'], outputs: ['y'], dispatch: [4] }] }
  const exe = await gpu.compile(graph)
  const live = []
  const counts = { ops: 0, reads: 0, corrupted: 0 }
  for (let i = 0; i < ops; i++) {
    counts.ops++
    const r = rnd(10)
    if (r < 4 || live.length === 0) {
      const size = 4 + rnd(64) * 64
      const b = gpu.heap.malloc(size)
      const tag = i & 0xff
      b.write(fill(size, tag))
      live.push({ b, size, tag })
    } else if (r < 6) {
      const { b, size, tag } = live.splice(rnd(live.length), 1)[0]
      const back = await b.read()
      counts.reads++
      if (Buffer.compare(back, Buffer.from(fill(size, tag))) !== 0) counts.corrupted++
      b.free()
    } else if (r < 8) {
      const { b, size, tag } = live[rnd(live.length)]
      const back = await gpu.download(b)
      counts.reads++
      if (Buffer.compare(Buffer.from(back), Buffer.from(fill(size, tag))) !== 0) counts.corrupted++
    } else {
      const x = Uint32Array.from({ length: 256 }, (_, k) => k + i)
      const { outputs } = await exe.run({ x })
      counts.reads++
      if (outputs.y.some((v, k) => v !== k + i + 2 * seed)) counts.corrupted++
    }
  }
  for (const { b, size, tag } of live) {
    const back = await b.read()
    counts.reads++
    if (Buffer.compare(back, Buffer.from(fill(size, tag))) !== 0) counts.corrupted++
    b.free()
  }
  exe.release()
  parentPort.postMessage(counts)
})().catch((e) => parentPort.postMessage({ error: String(e && e.stack || e) }))
`

/** What a worker posts back: its counts, or the error that stopped it. */
interface WorkerResult {
  ops: number
  reads: number
  corrupted: number
  error?: string
}

test.serial("worker threads share one device; every block holds its owner's bytes; nothing leaks", async (t) => {
  const gpu = await Gpu.request()
  const handle = gpu.shareHandle()
  const results = await Promise.all(
    Array.from(
      { length: WORKERS },
      (_, w) =>
        new Promise<WorkerResult>((resolve, reject) => {
          const worker = new Worker(WORKER, { eval: true, workerData: { seed: w + 1, handle, ops: OPS } })
          worker.once('message', resolve)
          worker.once('error', reject)
        }),
    ),
  )
  for (const r of results) t.falsy(r.error, r.error)
  const total = results.reduce((n, r) => n + r.ops, 0)
  t.is(total, OPS * WORKERS)
  t.is(
    results.reduce((n, r) => n + r.corrupted, 0),
    0,
    'no corrupted read',
  )
  gpu.heap.freeInactiveBuffers()
  const s = gpu.heap.stats()
  t.is(s.activeBlocks.current, 0)
  t.is(s.allocatedBytes.current, 0)
  t.log(`${total} operations on ${WORKERS} threads; peak reserved ${s.reservedBytes.peak} bytes`)
  const corrupted = results.reduce((n, r) => n + r.corrupted, 0)
  gpu.heap.emptyCache()
  // Scalar blocks of executors (uniforms) are freed with the executor objects, by the GC.
  await collectGarbageUntil(() => {
    gpu.heap.emptyCache()
    return gpu.heap.stats().reservedBytes.current === 0
  })
  t.is(gpu.heap.stats().reservedBytes.current, 0, 'emptyCache returns reserved bytes to zero')
  const after = gpu.heap.stats()
  record(
    'workers',
    {
      operations: total,
      threads: WORKERS,
      reads: results.reduce((n, r) => n + r.reads, 0),
      corruptedReads: corrupted,
      leakedBytes: after.allocatedBytes.current + after.reservedBytes.current,
    },
    gpu,
  )
  gpu.destroy()
})

test.serial('host blocks and executors dropped without free() are reclaimed by the GC', async (t) => {
  const gpu = await Gpu.request()
  const graph: Graph = {
    kernels: {
      k: {
        source:
          '@group(0) @binding(0) var<storage, read_write> a: array<u32>;\n@group(0) @binding(1) var<storage, read_write> b: array<u32>;\n@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3<u32>) { if (g.x < arrayLength(&b)) { b[g.x] = a[g.x]; } }',
      },
    },
    tensors: [
      { id: 'x', size: 4096, kind: 'input' },
      { id: 'y', size: 4096, kind: 'output' },
    ],
    ops: [{ kernel: 'k', inputs: ['x'], outputs: ['y'], dispatch: [16] }],
  }
  await (async () => {
    for (let i = 0; i < 5; i++) await gpu.compile(graph)
    for (let i = 0; i < 20; i++) gpu.host.alloc(65536, { direction: 'upload' })
  })()
  await collectGarbageUntil(() => gpu.heap.stats().activeBlocks.current === 0 && gpu.host.stats().activeRequests.current === 0)
  t.is(gpu.heap.stats().activeBlocks.current, 0, 'executor slabs returned')
  t.is(gpu.host.stats().activeRequests.current, 0, 'host blocks returned')
  const before = gpu.host.stats().numHostAlloc
  gpu.host.alloc(65536, { direction: 'upload' }).free()
  t.is(gpu.host.stats().numHostAlloc, before, 'their memory is reused')
  record('gc', {
    faults: { 'executors and host blocks dropped without free()': 25 },
    leakedBytes: gpu.heap.stats().allocatedBytes.current + gpu.host.stats().activeBytes.current,
  })
  gpu.destroy()
})

test.serial('a process exits promptly with GPU work pending and the poller running', (t) => {
  const script = `
    const { Gpu } = require(${ENTRY})
    Gpu.request().then((gpu) => {
      const a = gpu.createBuffer(64 << 20), b = gpu.createBuffer(64 << 20)
      const s = gpu.createStream()
      for (let i = 0; i < 16; i++) s.copy(a, b)
      s.submit()
      gpu.heap.malloc(1 << 20)
      console.log('submitted ' + Date.now())
    })`
  const r = spawnSync(process.execPath, ['-e', script], { encoding: 'utf8', timeout: 20_000 })
  const exited = Date.now()
  t.is(r.status, 0, r.stderr)
  const submitted = Number(/submitted (\d+)/.exec(r.stdout)?.[1])
  const ms = exited - submitted
  t.log(`exited ${ms} ms after submitting 1 GiB of copies`)
  t.true(ms < 2000, `exit took ${ms} ms`)
  record('exit', { faults: { 'process exit with 1 GiB of copies in flight': 1 }, exitMs: ms, crashes: r.status === 0 ? 0 : 1 })
})

test('random misuse of the public API never kills the process; every error is typed', async (t) => {
  const gpu = await Gpu.request({ memoryBudget: 256 * 2 ** 20 })
  let seed = 99
  const rnd = (n: number) => (seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) % n
  const values: unknown[] = [
    undefined,
    null,
    0,
    -1,
    1.5,
    NaN,
    Infinity,
    2 ** 53,
    2 ** 60,
    '',
    'x',
    '16',
    true,
    {},
    [],
    [1, 2],
    new Uint8Array(3),
    new Float32Array(2),
    () => 1,
    Symbol('s'),
    10n,
    64,
    4096,
  ]
  const pick = () => values[rnd(values.length)]
  const targets = (): [object, string[]][] => {
    const block = gpu.heap.malloc(256)
    const host = gpu.host.alloc(256, { direction: 'upload' })
    return [
      [gpu, ['createBuffer', 'writeBuffer', 'readBuffer', 'createStream', 'shareHandle']],
      [gpu.heap, ['malloc', 'allocScalar', 'free', 'getBlockInfo', 'setHighWatermarkRatio', 'setLowWatermarkRatio', 'on', 'setLogger']],
      [block, ['write', 'read', 'copyFrom', 'setShape', 'recordStream', 'free']],
      [gpu.host, ['alloc', 'beginAllocateToPool', 'endAllocateToPool', 'releasePool', 'configure']],
      [host, ['write', 'read', 'free']],
      [gpu.createStream(), ['copy', 'dispatch', 'submit']],
      [gpu, ['compile', 'runEager', 'upload', 'download']],
      [{ planMemory }, ['planMemory']],
    ]
  }
  const known = new Set(ERROR_CODES)
  let calls = 0
  let typed = 0
  for (let round = 0; round < 40; round++) {
    for (const [obj, methods] of targets()) {
      for (const m of methods) {
        const args = Array.from({ length: rnd(4) }, pick)
        calls++
        try {
          // Called by name: any method of the object, with any arguments.
          const r = (obj as Record<string, (...args: unknown[]) => unknown>)[m](...args)
          if (isThenable(r)) await r
        } catch (e) {
          const ok = (e instanceof WgallocError && known.has(e.code)) || e instanceof TypeError || e instanceof RangeError
          const thrown = e as { constructor?: { name?: unknown }; message?: unknown } | null | undefined
          if (!ok) t.fail(`${m}(${args.map(String).join(', ')}) threw ${thrown?.constructor?.name}: ${thrown?.message}`)
          typed++
        }
      }
    }
  }
  t.false(gpu.lost)
  const b = gpu.heap.malloc(1024)
  b.write(new Uint8Array(1024).fill(5))
  t.true(
    (await b.read()).every((x) => x === 5),
    'still computes correctly after the fuzzing',
  )
  t.log(`${calls} random calls, ${typed} typed errors`)
  record('misuse', { badInputs: calls, typedErrors: typed })
  gpu.destroy()
})

test.serial('cached alloc/free cycles: driver allocations and RSS stay flat after warm-up', async (t) => {
  const cycles = CYCLES
  const gpu = await Gpu.request()
  const heap = gpu.heap
  const sizes = [256, 4096, 65536, 1 << 20]
  for (let i = 0; i < 1000; i++) heap.malloc(sizes[i & 3]).free()
  const samples: { i: number; rss: number; driver: number }[] = []
  const step = Math.max(1, Math.floor(cycles / 10))
  for (let i = 0; i < cycles; i++) {
    heap.malloc(sizes[i & 3]).free()
    if (i % step === 0) {
      // Collect first: dropped handles are garbage until the GC (and the finalizers it
      // queues for the event loop) ran, not leaks.
      for (let k = 0; k < 2; k++) {
        if (globalThis.gc) globalThis.gc()
        await new Promise(setImmediate)
      }
      samples.push({ i, rss: process.memoryUsage().rss, driver: heap.stats().driverAllocations })
    }
  }
  const first = samples[1] ?? samples[0]
  const last = samples[samples.length - 1]
  const slope = (last.rss - first.rss) / Math.max(1, last.i - first.i)
  t.log(`${cycles} cycles; RSS slope ${slope.toFixed(3)} bytes/cycle; driver allocations ${first.driver} -> ${last.driver}`)
  t.is(last.driver, first.driver, 'no driver allocation after warm-up')
  t.true(slope < 64, `RSS grows ${slope.toFixed(1)} bytes per cycle`)
  record('cycles', {
    operations: cycles,
    rssSlopeBytesPerCycle: slope,
    driverAllocations: [first.driver, last.driver],
    leakedBytes: heap.stats().allocatedBytes.current,
  })
  gpu.destroy()
})

// ---- fast-check fuzzers (__test__/fuzz/), each in a child process --------------------
// Two children at a time: the machine this must run on has two cores.
let running = 0
const queue: (() => void)[] = []
async function slot<T>(fn: () => Promise<T>): Promise<T> {
  if (running >= 2) await new Promise<void>((r) => queue.push(r))
  running++
  try {
    return await fn()
  } finally {
    running--
    queue.shift()?.()
  }
}

const SUITES = {
  api: 'random calls with random arguments across the whole public API',
  heap: 'heap / host cache / streams model: double free, use after free, cross-device calls, exact stats',
  lost: 'device destroyed in the middle of work: every waiter settles, every later call is DEVICE_LOST',
  graph: 'compile / run / runEager with malformed graphs: typed refusals, planned == eager',
  plan: 'planMemory with random and malformed records, graphs and CSV, aborts',
  profiler: 'profiler sessions, captures and exports with bad modes and paths',
  boundary: 'async calls raced by free, GC and changed inputs; workers terminated mid-call; exit with the GPU busy',
  serving: 'device inputs, external state, outputsInto, shared weights and shapes, blocks freed or reused around runs',
}
for (const [suite, what] of Object.entries(SUITES)) {
  test(`fuzz ${suite}: ${what}`, async (t) => {
    t.timeout(Math.max(120_000, FUZZ_TIME_MS * 12 + 60_000))
    const env = { WGALLOC_FUZZ_SCALE: String(FUZZ_SCALE), WGALLOC_FUZZ_TIME_MS: String(FUZZ_TIME_MS) }
    const { summary, crash } = await slot(() => runSuite(suite, { env, timeoutMs: FUZZ_TIME_MS * 10 + 60_000 }))
    const c = summary?.counts
    record(`fuzz-${suite}`, {
      runs: c?.runs ?? 0,
      operations: c?.operations ?? 0,
      badInputs: c?.badInputs ?? 0,
      errors: c?.errors,
      codes: c?.codes,
      faults: c?.faults ?? {},
      reads: c?.reads ?? 0,
      corruptedReads: c?.corruptedReads ?? 0,
      leakedBytes: c?.leakedBytes ?? 0,
      hangs: (c?.hangs ?? 0) + (crash?.hung ? 1 : 0),
      crashes: crash && !crash.hung ? 1 : 0,
      seed: summary?.seed,
      ms: summary?.ms,
    })
    if (crash) {
      const how = crash.hung ? 'hung (killed)' : crash.signal ? `died of ${crash.signal}` : `exited ${crash.code} without a summary`
      return t.fail(
        `the ${suite} fuzzer ${how}; replay with npm run build:test && WGALLOC_FUZZ_SEED=${summary?.seed ?? '<see stderr>'} node --expose-gc dist-test/fuzz/run.js ${suite}\nlast steps:\n${crash.lastSteps}\nstderr:\n${crash.stderr}`,
      )
    }
    const counts = summary.counts
    t.log(
      `${MODE}: ${counts.runs} sequences, ${counts.operations} operations, ${counts.badInputs} bad inputs, ${counts.reads} reads checked, seed ${summary.seed}, ${summary.ms} ms`,
    )
    if (counts.problems.length) t.log(`notes: ${counts.problems.join('; ')}`)
    t.deepEqual(summary.failures, [], `replay with npm run build:test && WGALLOC_FUZZ_SEED=${summary.seed} node --expose-gc dist-test/fuzz/run.js ${suite}`)
    t.is(counts.errors.bad, 0, 'every error typed')
    t.is(counts.hangs, 0)
    t.is(counts.corruptedReads, 0)
    t.is(counts.leakedBytes, 0)
    t.true(counts.operations > 0)
  })
}
