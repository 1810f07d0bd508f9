// gpu.profiler on lavapipe (which has timestamp queries): per-kernel GPU times on
// the demo graph, a Trace Event file that passes a structural check, stats
// objects, the bad-input list, and identical results with profiling on and off.
import { execFile } from 'node:child_process'
import { mkdtempSync, readFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import test, { type ExecutionContext } from 'ava'
import { Gpu, Profiler, WgallocError } from 'wgalloc'
import { graph, shapes, weights } from './demo-model.js'

/** One event of a Trace Event file, as far as these tests read it. */
interface TraceEvent {
  ph: string
  ts: number
  pid: number
  tid: number
  dur: number
  cat?: string
  name?: string
  args: Record<string, unknown>
}
interface TraceDoc {
  traceEvents: TraceEvent[]
}

const scratch = () => mkdtempSync(join(tmpdir(), 'wgalloc-prof-'))
const demo = () => {
  const s = shapes({ seq: 8, dim: 16, heads: 2 })
  return { g: graph(s), data: weights(s, 3) }
}

/** The Trace Event structure chrome://tracing and ui.perfetto.dev load. */
function checkTrace(t: ExecutionContext, doc: TraceDoc) {
  t.true(Array.isArray(doc.traceEvents))
  let lastCounter = -Infinity
  for (const e of doc.traceEvents) {
    for (const k of ['ph', 'ts', 'pid', 'tid'] as const) t.true(e[k] !== undefined, `event lacks ${k}: ${JSON.stringify(e)}`)
    t.true(typeof e.ts === 'number' && e.ts >= 0)
    if (e.ph === 'X') t.true(e.dur >= 0, `negative duration: ${JSON.stringify(e)}`)
    if (e.ph === 'C') {
      t.true(e.ts >= lastCounter, 'counter events ordered by ts')
      lastCounter = e.ts
    }
  }
}

test('demo graph: per-kernel GPU times, stats objects and a valid trace; results equal with profiling off', async (t) => {
  const gpu = await Gpu.request()
  const p = gpu.profiler
  t.true(p instanceof Profiler)
  t.is(gpu.profiler, p, 'one Profiler per Gpu')
  t.true(p.info.passTimestamps && p.info.copyTimestamps && p.info.dispatchTimestamps, p.info.timing)
  t.false(p.info.active)
  const { g, data } = demo()
  const exe = await gpu.compile(g, { params: data.params })
  const off = (await exe.run(data.inputs)).outputs
  const on = await p.profile(
    async () => {
      const r = (await exe.run(data.inputs)).outputs
      await gpu.runEager(g, data.inputs, { params: data.params })
      p.markCpuFallback('topk', 256)
      return r
    },
    { mode: 'interval,event' },
  )
  t.deepEqual(Object.keys(on), Object.keys(off))
  for (const k of Object.keys(off)) t.deepEqual(Buffer.from(on[k].buffer), Buffer.from(off[k].buffer), `output ${k}`)
  t.false(p.info.active)

  const s = p.stats()
  t.is(s.operations.length, g.ops.length)
  for (const o of s.operations) {
    for (const k of ['name', 'pipeline', 'runs', 'gpuTimedRuns', 'totalGpuMs', 'meanGpuMs', 'maxGpuMs', 'totalSchedulingMs', 'meanSchedulingMs'])
      t.true(k in o, k)
    t.is(o.runs, 2, `${o.name}: planned + eager`)
    t.true(o.totalGpuMs > 0 && o.maxGpuMs > 0 && o.meanGpuMs > 0, `${o.name} has a positive GPU time`)
  }
  const upload = s.copies.find((c) => c.kind === 'upload')
  const download = s.copies.find((c) => c.kind === 'download')
  t.truthy(upload && download)
  for (const k of ['count', 'bytes', 'blocking', 'viaHost', 'totalGpuMs', 'bandwidthGbps']) t.true(k in download!, k)
  t.true(download!.blocking >= 1 && download!.totalGpuMs > 0)
  t.deepEqual(s.fallbacks, [{ name: 'topk', runs: 1, bytes: 256 }])
  t.is(s.pendingSubmissions, 0)
  t.is(s.timestamps.zero + s.timestamps.reversed + s.timestamps.overflow, 0)
  t.true(p.formatStats().includes('wgalloc profiler: operations'))

  const path = join(scratch(), 'demo.trace.json')
  await p.exportTrace(path)
  const doc = JSON.parse(readFileSync(path, 'utf8')) as TraceDoc
  checkTrace(t, doc)
  const ev = doc.traceEvents
  const gpuTracks = new Set(ev.filter((e) => e.cat === 'op').map((e) => e.tid))
  t.true(
    [...gpuTracks].every((tid) => tid >= 100),
    'GPU work on stream tracks',
  )
  t.true(
    ev.some((e) => e.ph === 'X' && e.cat === 'cpu' && e.tid === 1),
    'CPU encode/submit track',
  )
  t.true(ev.some((e) => e.ph === 'C' && e.name === 'heap bytes' && 'allocated' in e.args && 'reserved' in e.args))
  t.true(
    ev.some((e) => e.ph === 'i' && e.cat === 'op'),
    "'event' mode adds instants",
  )
  exe.release()
  gpu.destroy()
})

test('capture writes one trace file with OOM instants and memory counters', async (t) => {
  const gpu = await Gpu.request({ memoryBudget: 64 << 20 })
  const p = gpu.profiler
  const name = join(scratch(), 'cap')
  p.startCapture(name)
  t.true(p.info.capturing)
  const a = gpu.heap.malloc(1 << 20)
  await gpu.upload(a, new Uint8Array(1 << 20).fill(7))
  t.throws(() => gpu.heap.malloc(1 << 30), { code: 'OUT_OF_MEMORY' })
  const back = await gpu.download(a)
  t.is(back[12345], 7)
  const file = await p.stopCapture()
  t.is(file, `${name}.json`)
  const doc = JSON.parse(readFileSync(file, 'utf8')) as TraceDoc
  checkTrace(t, doc)
  t.true(doc.traceEvents.some((e) => e.name === 'heap OOM' && e.ph === 'i'))
  t.true(doc.traceEvents.some((e) => e.name === 'host cache bytes' && e.ph === 'C'))
  t.true(doc.traceEvents.some((e) => e.name === 'copy upload' && e.args.viaHost))
  t.false(p.info.active)
  a.free()
  gpu.destroy()
})

test('bad input: unknown modes, stop without start, nested start, unwritable export, bad capture calls', async (t) => {
  const gpu = await Gpu.request()
  const p = gpu.profiler
  const mode = t.throws(() => p.start({ mode: 'intervals' as never }), { instanceOf: WgallocError, code: 'INVALID_ARGUMENT' })
  t.regex(mode.message, /'interval', 'event' or 'interval,event'/)
  t.throws(() => p.start({ mode: 3 as never }), { code: 'INVALID_ARGUMENT' })
  t.throws(() => p.stop(), { code: 'PROFILER_STATE', message: /start\(\) first/ })
  p.start()
  t.throws(() => p.start(), { code: 'PROFILER_STATE', message: /do not nest/ })
  await t.throwsAsync(
    p.profile(async () => 1),
    { code: 'PROFILER_STATE' },
  )
  p.stop()
  await t.throwsAsync(p.exportTrace('/nonexistent-dir/sub/trace.json'), { code: 'IO_ERROR', message: /writable directory/ })
  await t.throwsAsync(p.exportTrace(''), { code: 'INVALID_ARGUMENT' })
  await t.throwsAsync(p.stopCapture(), { code: 'PROFILER_STATE' })
  t.throws(() => p.markCpuFallback('', 1), { code: 'INVALID_ARGUMENT' })
  t.throws(() => p.markCpuFallback('x', -1), { code: 'INVALID_ARGUMENT' })
  // A failing profiled function keeps its own error and leaves the profiler stopped.
  await t.throwsAsync(
    p.profile(async () => {
      throw new RangeError('boom')
    }),
    { instanceOf: RangeError },
  )
  t.false(p.info.active)
  gpu.destroy()
})

test('WGALLOC_PROFILE: unknown flags name the valid ones; stats tables print at exit', async (t) => {
  const run = (env: Record<string, string>, code: string) => promisify(execFile)(process.execPath, ['-e', code], { env: { ...process.env, ...env } })
  const script = `const { Gpu } = require(${JSON.stringify(join(__dirname, '..'))})
    Gpu.request().then(async (gpu) => {
      const b = gpu.heap.malloc(4096); await b.read(0, 16)
      try { console.log('ok', JSON.stringify(gpu.profiler.info.envFlags)); await gpu.profiler.flush() } catch (e) { console.log(e.code, e.message) }
    })`
  const bad = await run({ WGALLOC_PROFILE: 'operation-stats,bogus' }, script)
  t.regex(bad.stdout, /INVALID_ARGUMENT WGALLOC_PROFILE: expected flags from all, operation-info, .*got 'bogus'; unknown WGALLOC_PROFILE flag/)
  const good = await run({ WGALLOC_PROFILE: 'copy-stats,copy-info,gpu-time,buffer-id' }, script)
  t.regex(good.stdout, /ok \["copy-info","copy-stats","gpu-time","buffer-id"\]/)
  t.regex(good.stderr, /wgalloc profiler: copy download #1: \d+ bytes, blocking.*src block Some\(\d+\).*\[GPU=[\d.]+ ms\]/)
  t.regex(good.stderr, /wgalloc profiler: copies\n\s+kind/)
})
