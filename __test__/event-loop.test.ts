// No call blocks the event loop: with a GPU job of more than a second in flight, every public
// async call returns its promise at once (the work queues behind the job), and the longest
// event-loop gap over the whole time stays small. A call that submitted, wrote, mapped or
// destroyed on the calling thread would hold it until the job finished: on some drivers
// (lavapipe among them) a queue submission waits for the one before it.
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { monitorEventLoopDelay } from 'node:perf_hooks'
import test from 'ava'
import {
  type DeviceBlock,
  type Executor,
  Gpu,
  type GpuBuffer,
  type HostBlock,
  type KvCache,
  type KvSequence,
  type ShapeExecutor,
  type Stream,
  planMemory,
} from 'wgalloc'
import { apiSurface } from './api-surface.js'
import { DOUBLE_GRAPH, DOUBLE_SHAPES, DOUBLE_X } from './graphs.js'
import { pattern } from './helpers.js'

/**
 * Each invocation hashes 16 * 65535 times; the job's length scales with the number of
 * workgroups. One loop of 65535 turns: llvmpipe (lavapipe) ends a shader's loops after that many.
 */
const STEP = 'h = (h ^ (h >> 13u)) * 1664525u + i;'
const SPIN = `
@group(0) @binding(0) var<storage, read_write> y: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  var h = y[g.x] + g.x;
  for (var i = 0u; i < 65535u; i++) { ${STEP.repeat(16)} }
  y[g.x] = h;
}`
/** Most workgroups a job may take. */
const MAX_WORKGROUPS = 1 << 14

const GRAPH = DOUBLE_GRAPH
const SHAPES = DOUBLE_SHAPES
const X = DOUBLE_X

/**
 * The longest gap the calls may add to the machine's own (the longest gap of a quiet window
 * measured just before). A call that waited for the GPU job shows as a gap of the job's length,
 * over a second, in every attempt. With the calls warmed up, the gap while the job runs is 5 to
 * 15 ms on two cores shared with other test processes; as any one measurement there can catch the
 * thread descheduled for tens of milliseconds, the best of up to `ATTEMPTS` counts (an attempt
 * whose job turned out shorter than `JOB_MS` is repeated with a longer one).
 */
const MAX_GAP_MS = 20
const ATTEMPTS = 3
const JOB_MS = 1000

interface Fixture {
  gpu: Gpu
  exe: Executor
  /** Disposed (`Symbol.asyncDispose`) while the job runs. */
  spare: Executor
  shapes: ShapeExecutor
  block: DeviceBlock
  other: DeviceBlock
  buffer: GpuBuffer
  stream: Stream
  down: HostBlock
  dir: string
  /** Devices the calls opened: destroyed after the measurement. */
  opened: Gpu[]
  /** Destroyed first while the job runs, so the calls come while a destroy waits. */
  doomed: GpuBuffer
  kv: KvCache
  /** Swapped out before the job, swapped in while it runs. */
  seq: KvSequence
}

/** Every public async call (keys as the types name them), started while the GPU is busy. */
const ASYNC_CALLS: Record<string, (f: Fixture) => Promise<unknown>> = {
  'Gpu.request': (f) => Gpu.request().then((g) => f.opened.push(g)),
  'Gpu.enumerate': () => Gpu.enumerate(),
  'Gpu.readBuffer': (f) => f.gpu.readBuffer(f.buffer, 0, 16),
  'Gpu.upload': (f) => f.gpu.upload(f.other, pattern(256, 5)),
  'Gpu.uploadBatch': (f) => f.gpu.uploadBatch([{ block: f.other, data: pattern(64, 6) }]),
  'Gpu.download': (f) => f.gpu.download(f.other),
  'Gpu.compile': (f) => f.gpu.compile(GRAPH).then((e) => e.release()),
  'Gpu.runEager': (f) => f.gpu.runEager(GRAPH, { x: X }),
  'Executor.run': (f) => Promise.all([f.exe.run({ x: X }), f.exe.run({ x: X }, { outputs: 'device' })]),
  'ShapeExecutor.run': (f) => f.shapes.run({ batch: 1 }, { x: X }),
  'ShapeExecutor.warmup': (f) => f.shapes.warmup([{ batch: 2 }]),
  'DeviceBlock.read': (f) => f.other.read(0, 4),
  'HostBlock.map': (f) => f.down.map(),
  'KvSequence.swapIn': (f) => f.seq.swapIn(),
  'GpuEvent.wait': (f) => f.stream.submit().wait(),
  'Stream.synchronize': (f) => f.stream.synchronize(),
  'Profiler.flush': (f) => f.gpu.profiler.flush(),
  'Profiler.exportTrace': (f) => f.gpu.profiler.exportTrace(join(f.dir, 'trace.json')),
  'Profiler.stopCapture': (f) => f.gpu.profiler.stopCapture(),
  'Profiler.profile': (f) => f.gpu.profiler.profile(() => f.gpu.download(f.other)),
  planMemory: () => planMemory([{ id: 'a', size: 4, first: 0, last: 1 }]),
}

test('ASYNC_CALLS lists every public async call', (t) => {
  const { classes, functions } = apiSurface()
  const typed = functions.filter((f) => f.async).map((f) => f.name)
  for (const [name, ms] of classes) {
    if (name !== 'WgallocError') typed.push(...ms.filter((m) => m.async && !m.internal && !m.isSymbol).map((m) => `${m.owner}.${m.name}`))
  }
  t.deepEqual(typed.sort(), Object.keys(ASYNC_CALLS).sort())
})

/** Records the job's dispatch on a fresh stream and submits; returns its event. */
function spin(gpu: Gpu, y: DeviceBlock, workgroups: number) {
  const kernel = gpu.createKernel({ source: SPIN, bindings: 1, name: 'spin' })
  const s = gpu.createStream()
  s.dispatch(kernel, [y], workgroups)
  return s.submit()
}

/** How many workgroups make a job of at least `ms` on this device. */
async function calibrate(gpu: Gpu, y: DeviceBlock, ms: number): Promise<number> {
  let n = 1
  for (;;) {
    const t0 = performance.now()
    await spin(gpu, y, n).wait()
    const took = performance.now() - t0
    // Three times the need: the machine's load may change between the calibration and the job.
    if (took >= ms / 4 || n * 4 > MAX_WORKGROUPS) return Math.min(MAX_WORKGROUPS, Math.ceil((n * 3 * ms) / Math.max(took, 1)))
    n *= took < ms / 64 ? 16 : 4
  }
}

interface Attempt {
  /** How long each call held the event loop, by name. */
  held: Record<string, number>
  /** Longest event-loop gap while the job ran, and in a quiet window before it. */
  gapMs: number
  noiseMs: number
  issuedMs: number
  ranMs: number
  /** Whether the job still ran once every call was issued. */
  inFlight: boolean
}

/**
 * Starts a job of `workgroups`, then every call while it runs; measures until the job is done.
 * The quiet window before it lasts `quietMs`.
 */
async function attempt(f: Fixture, workgroups: number, quietMs: number, failed: (why: string) => void): Promise<Attempt> {
  f.spare = await f.gpu.compile(GRAPH)
  f.doomed = f.gpu.createBuffer(16)
  if (!f.seq.freed) f.seq.free()
  f.seq = f.kv.addSequence()
  f.seq.append([1, 2, 3, 4, 5])
  f.seq.swapOut()
  const quiet = monitorEventLoopDelay({ resolution: 1 })
  quiet.enable()
  await new Promise((r) => setTimeout(r, quietMs))
  quiet.disable()

  const histogram = monitorEventLoopDelay({ resolution: 1 })
  histogram.enable()
  // Armed: its timer must be running before the calls, or a first call that blocks goes unseen.
  await new Promise((r) => setTimeout(r, 10))
  const job = spin(f.gpu, f.block, workgroups)
  const started = performance.now()
  const held: Record<string, number> = {}
  const pending: Promise<unknown>[] = []
  const time = (key: string, call: () => Promise<unknown> | undefined) => {
    const t0 = performance.now()
    const p = call()
    held[key] = performance.now() - t0
    if (p) pending.push(p.catch((e) => failed(`${key}: ${e}`)))
  }
  // A destroy takes wgpu's device-wide lock for writing: the calls below must not wait behind it.
  time('GpuBuffer.destroy', () => void f.doomed.destroy())
  // The profiling session first: the profiler calls after it run inside it, with a capture.
  const order = ['Profiler.profile', ...Object.keys(ASYNC_CALLS).filter((k) => k !== 'Profiler.profile')]
  for (const key of order) {
    if (key === 'Profiler.flush') f.gpu.profiler.startCapture(join(f.dir, 'capture'))
    time(key, () => ASYNC_CALLS[key](f))
    await new Promise((r) => setImmediate(r))
  }
  // Dispose-symbol twins of the calls above.
  time('Stream[Symbol.asyncDispose]', () => f.stream[Symbol.asyncDispose]())
  time('Executor[Symbol.asyncDispose]', () => f.spare[Symbol.asyncDispose]())
  const inFlight = !job.query()
  const issuedMs = performance.now() - started
  // Measured while the job runs: the calls' own continuations come after it.
  while (!job.query()) await new Promise((r) => setTimeout(r, 2))
  histogram.disable()
  const ranMs = performance.now() - started
  await Promise.all(pending)
  return { held, gapMs: histogram.max / 1e6, noiseMs: quiet.max / 1e6, issuedMs, ranMs, inFlight }
}

test('with a long GPU job in flight, no async call holds the event loop', async (t) => {
  // On a software adapter (lavapipe) the job runs on the CPU cores the event loop needs as well:
  // one rendering thread leaves the event loop a core on a two-core machine. Read when the
  // device opens; other adapters ignore it.
  process.env.LP_NUM_THREADS ??= '1'
  const gpu = await Gpu.request()
  const y = gpu.heap.malloc(MAX_WORKGROUPS * 64 * 4)
  const other = gpu.heap.malloc(256)
  other.write(pattern(256, 3))
  const fixture: Fixture = {
    gpu,
    exe: await gpu.compile(GRAPH),
    spare: await gpu.compile(GRAPH),
    shapes: gpu.compileShapes(SHAPES),
    block: y,
    other,
    buffer: gpu.createBuffer(16),
    stream: gpu.createStream(),
    down: gpu.host.alloc(256, { direction: 'download' }),
    dir: mkdtempSync(join(tmpdir(), 'wgalloc-evloop-')),
    opened: [],
    doomed: gpu.createBuffer(16),
    kv: gpu.createKvCache({ layers: 2, kvHeads: 1, headDim: 8, blockTokens: 4, maxBlocks: 16, maxSequenceLength: 64 }),
    seq: undefined as unknown as KvSequence,
  }
  fixture.seq = fixture.kv.addSequence()
  // Every call once first: what a first use sets up (pipelines, staging, code paths) is no wait.
  await attempt(fixture, 1, 0, (why) => t.fail(why))
  let workgroups = await calibrate(gpu, y, JOB_MS)
  const over = (a: Attempt) => Math.max(a.gapMs, ...Object.values(a.held)) - a.noiseMs
  let best: Attempt | undefined
  for (let i = 0; i < ATTEMPTS + 2 && !(best && over(best) <= MAX_GAP_MS); i++) {
    const a = await attempt(fixture, workgroups, JOB_MS, (why) => t.fail(why))
    const slowest = Object.entries(a.held).sort((x, y) => y[1] - x[1])
    t.log(
      `job ${a.ranMs.toFixed(0)} ms, calls issued in ${a.issuedMs.toFixed(0)} ms; longest gap ${a.gapMs.toFixed(1)} ms` +
        ` (quiet: ${a.noiseMs.toFixed(1)} ms); longest calls: ${slowest
          .slice(0, 3)
          .map(([k, ms]) => `${k} ${ms.toFixed(1)} ms`)
          .join(', ')}`,
    )
    t.true(a.inFlight, 'the job still ran once every call was issued')
    if (a.ranMs < JOB_MS) {
      // The machine got faster since the calibration: a longer job, and this attempt does not count.
      workgroups = Math.min(MAX_WORKGROUPS, Math.ceil((workgroups * 2 * JOB_MS) / a.ranMs))
      continue
    }
    if (!best || over(a) < over(best)) best = a
  }
  if (!best) return t.fail(`no job ran ${JOB_MS} ms`)
  const b = best
  for (const [key, ms] of Object.entries(b.held)) t.true(ms - b.noiseMs <= MAX_GAP_MS, `${key} held the event loop ${ms.toFixed(1)} ms`)
  t.true(b.gapMs - b.noiseMs <= MAX_GAP_MS, `longest event-loop gap ${b.gapMs.toFixed(1)} ms (quiet: ${b.noiseMs.toFixed(1)} ms)`)
  for (const g of fixture.opened) g.destroy()
  y.free()
  other.free()
  gpu.destroy()
})
