// `wgalloc demo` end to end at tiny sizes: real kernels on the real device,
// checked against the CPU reference, plus the CLI's --json output.
import { type ExecFileException, execFile } from 'node:child_process'
import { existsSync, mkdtempSync, readFileSync, readdirSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import test, { type ExecutionContext } from 'ava'
import { STRATEGIES, type Strategy } from 'wgalloc'
import { type DemoData, graph, type ShapeOptions, type Shapes, shapes, weights } from './demo-model.js'

interface DemoOptions extends ShapeOptions {
  runs?: number
  strategy?: string
  timeLimitMs?: number
  svg?: string | null
  trace?: string | null
  seed?: number
}
/** What runDemo() returns (and `wgalloc demo --json` prints), as far as these tests read it. */
interface DemoFigures {
  model: { seq: number; intermediates: number; views: number; paramBytes: number }
  planning: { alignment: number; naiveBytes: number; strategies: { strategy: Strategy; slabSize: number; lowerBound: number }[] }
  plan: { strategy: Strategy; slabSize: number; lowerBound: number }
  memory: { eagerPeakReservedBytes: number; plannedDeviceBytes: number; plannedSlabBytes: number; plannedConstantBytes: number }
  time: { eagerMs: number; plannedMs: number }
  accuracy: { maxAbsError: number; ok: boolean; eagerEqualsPlanned: boolean; eagerMaxAbsDiff: number }
  svg: string | null
  trace: string | null
}
const { runDemo } = require('../dist/demo/index.js') as { runDemo: (options?: DemoOptions) => Promise<DemoFigures> }
const { reference } = require('../dist/demo/reference.js') as { reference: (s: Shapes, data: DemoData) => Float64Array }

const CLI = resolve(__dirname, '..', 'dist', 'cli.js')
const scratch = () => mkdtempSync(join(tmpdir(), 'wgalloc-demo-'))

interface CliResult {
  code: ExecFileException['code']
  stdout: string
  stderr: string
}

/** Runs the CLI; resolves with the exit code and output instead of rejecting on failure. */
function cli(args: string[], cwd: string): Promise<CliResult> {
  return new Promise((done) => {
    execFile(process.execPath, [CLI, ...args], { cwd }, (err, stdout, stderr) => done({ code: err ? err.code : 0, stdout, stderr }))
  })
}

/** What every demo result must satisfy, whatever the shapes. */
function assertFigures(t: ExecutionContext, f: DemoFigures, { tight = true } = {}) {
  const a = f.accuracy
  t.true(a.maxAbsError < 1e-3, `max abs error ${a.maxAbsError}`)
  t.true(a.ok)
  t.true(a.eagerEqualsPlanned, `eager and planned outputs differ (max ${a.eagerMaxAbsDiff})`)
  t.is(a.eagerMaxAbsDiff, 0)
  t.deepEqual(
    f.planning.strategies.map((s) => s.strategy),
    [...STRATEGIES],
  )
  // naive places records side by side (each at an aligned offset): no strategy does worse.
  const naive = f.planning.strategies.find((s) => s.strategy === 'naive')!
  t.true(naive.slabSize >= f.planning.naiveBytes)
  for (const s of f.planning.strategies) {
    t.true(s.slabSize >= s.lowerBound, `${s.strategy}: slab ${s.slabSize} below lower bound ${s.lowerBound}`)
    t.true(s.slabSize <= naive.slabSize, `${s.strategy}: slab above naive's`)
  }
  const best = f.planning.strategies.find((s) => s.strategy === 'best')!
  if (tight) t.true(best.slabSize <= 1.02 * best.lowerBound, `best: ${best.slabSize} vs lower bound ${best.lowerBound}`)
  t.true(f.plan.slabSize >= f.plan.lowerBound)
  t.true(f.memory.plannedDeviceBytes < f.memory.eagerPeakReservedBytes, `planned ${f.memory.plannedDeviceBytes} vs eager ${f.memory.eagerPeakReservedBytes}`)
  // Device bytes: the slab and the params' constant region (blocks rounded up to the alignment).
  const m = f.memory
  t.true(m.plannedDeviceBytes >= m.plannedSlabBytes + m.plannedConstantBytes)
  t.true(m.plannedDeviceBytes < m.plannedSlabBytes + m.plannedConstantBytes + 2 * f.planning.alignment)
  t.true(m.plannedConstantBytes >= f.model.paramBytes)
  t.true(f.time.eagerMs > 0 && f.time.plannedMs > 0)
}

test('runDemo: planned output matches the CPU reference and eager, in less memory', async (t) => {
  const dir = scratch()
  const svg = join(dir, 'plan.svg')
  const trace = join(dir, 'trace.json')
  const f = await runDemo({ seq: 8, dim: 16, heads: 2, runs: 2, svg, trace })
  // The profiled runs: a structurally valid Trace Event file with kernels and memory counters.
  const events = (JSON.parse(readFileSync(trace, 'utf8')) as { traceEvents: { ph: unknown; ts: unknown; dur: number; name: string }[] }).traceEvents
  t.true(events.every((e) => typeof e.ph === 'string' && typeof e.ts === 'number' && 'pid' in e && 'tid' in e))
  t.true(events.filter((e) => e.ph === 'X').every((e) => e.dur >= 0))
  t.true(
    events.some((e) => e.ph === 'X' && /layernorm|matmul|softmax|gelu|add/i.test(e.name)),
    'kernels on the GPU track',
  )
  t.true(
    events.some((e) => e.ph === 'C'),
    'memory counters',
  )
  assertFigures(t, f)
  t.is(f.svg, svg)
  t.true(existsSync(svg))
  t.true(readFileSync(svg, 'utf8').startsWith('<svg'))
  t.true(f.model.intermediates >= 12)
  t.is(f.model.views, 1)
  // Intermediates reuse memory: the slab is well below every tensor side by side.
  t.true(f.plan.slabSize < 0.6 * f.planning.naiveBytes)
})

test('runDemo: shapes that are not multiples of the workgroup size (bounds checks in every kernel)', async (t) => {
  // seq 5, dim 10 (head dim 5), hidden 30: partial workgroups and partial 4 x 4 matmul blocks everywhere.
  // Tensors are not 32-byte multiples, so alignment padding makes 1.02 x the lower bound too tight.
  const f = await runDemo({ seq: 5, dim: 10, heads: 2, ffn: 3, runs: 1, svg: null, trace: null, strategy: 'greedyBySize' })
  assertFigures(t, f, { tight: false })
  t.is(f.plan.strategy, 'greedyBySize')
  t.is(f.svg, null)
})

test('the CPU reference notices a wrong weight (the comparison can fail)', (t) => {
  const s = shapes({ seq: 4, dim: 8, heads: 2, ffn: 2 })
  const data = weights(s, 7)
  const good = reference(s, data)
  data.params.w_v[3] += 0.01
  const bad = reference(s, data)
  const diff = good.reduce((m, v, i) => Math.max(m, Math.abs(v - bad[i])), 0)
  t.true(diff > 1e-4, `diff ${diff}`)
  t.true(good.every(Number.isFinite))
})

test('the graph keeps every op output separate and reads attention through a view', (t) => {
  const g = graph(shapes({ seq: 8, dim: 16, heads: 2 }))
  const produced = g.ops.flatMap((o) => o.outputs)
  t.is(new Set(produced).size, produced.length)
  const view = g.tensors.find((x) => x.viewOf)!
  t.is(view.viewOf, 'attn')
  t.true(g.ops.some((o) => o.inputs.includes(view.id)))
  for (const o of g.ops) t.true(o.params instanceof Uint8Array && o.params.byteLength === 16, `${o.name} params`)
})

test('bad shape options are refused', async (t) => {
  await t.throwsAsync(runDemo({ dim: 10, heads: 4, svg: null }), { instanceOf: RangeError, message: /multiple of --heads/ })
  await t.throwsAsync(runDemo({ seq: 0, svg: null }), { instanceOf: RangeError })
  await t.throwsAsync(runDemo({ strategy: 'nope', svg: null }), { instanceOf: RangeError })
})

test('CLI: `wgalloc demo --json` prints the figures and writes plan.svg and trace.json into wgalloc-demo/', async (t) => {
  const cwd = scratch()
  const { code, stdout, stderr } = await cli(['demo', '--seq', '8', '--dim', '16', '--heads', '2', '--runs', '2', '--json'], cwd)
  const f = JSON.parse(stdout) as DemoFigures & { svg: string; trace: string } // printed even when a check fails (exit code 1), so the figures say which
  assertFigures(t, f)
  t.is(code, 0, stderr)
  t.is(f.model.seq, 8)
  const out = join(cwd, 'wgalloc-demo')
  t.is(f.svg, join(out, 'plan.svg'))
  t.is(f.trace, join(out, 'trace.json'))
  t.true(readFileSync(f.svg, 'utf8').startsWith('<svg'))
  t.true(Array.isArray((JSON.parse(readFileSync(f.trace, 'utf8')) as { traceEvents: unknown }).traceEvents))
  t.deepEqual(readdirSync(cwd), ['wgalloc-demo'], 'nothing loose in the working directory')
  // stdout is the JSON; the files written are named on stderr.
  t.regex(stderr, new RegExp(`wrote ${f.svg.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}`))
})

test('CLI: `wgalloc demo --out DIR` writes into DIR and says so', async (t) => {
  const cwd = scratch()
  const { code, stdout, stderr } = await cli(['demo', '--seq', '8', '--dim', '16', '--heads', '2', '--runs', '1', '--out', 'results/run1'], cwd)
  t.is(code, 0, stderr)
  const dir = join(cwd, 'results', 'run1')
  t.deepEqual(readdirSync(dir).sort(), ['plan.svg', 'trace.json'])
  t.regex(stdout, /^wrote .*results\/run1\/plan\.svg$/m)
  t.regex(stdout, /^wrote .*results\/run1\/trace\.json$/m)
})

test('CLI: a bad option is a usage error, not a crash', async (t) => {
  const { code, stderr } = await cli(['demo', '--dim', 'x'], scratch())
  t.is(code, 1)
  t.regex(stderr, /INVALID_ARGUMENT.*--dim/)
  const heads = await cli(['demo', '--dim', '10', '--heads', '4'], scratch())
  t.is(heads.code, 1)
  t.regex(heads.stderr, /INVALID_ARGUMENT.*multiple of --heads/)
})
