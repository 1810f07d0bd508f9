import test, { type ExecutionContext } from 'ava'
import { readFileSync, mkdtempSync } from 'node:fs'
import { execFileSync } from 'node:child_process'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { planMemory, type PlanProgress, STRATEGIES, type Strategy, WgallocError, type WgallocErrorCode } from 'wgalloc'

const bench = fileURLToPath(new URL('../bench/data/', import.meta.url))
const cli = fileURLToPath(new URL('../dist/cli.js', import.meta.url))
const read = (p: string) => readFileSync(join(bench, p), 'utf8')

interface Rec {
  id: string
  size: number
  first: number
  last: number
}

/** Independent check: records live at the same time never share bytes; offsets aligned. */
function assertValid(t: ExecutionContext, records: Rec[], offsets: number[], alignment = 1) {
  for (let i = 0; i < records.length; i++) {
    t.is(offsets[i] % alignment, 0)
    for (let j = i + 1; j < records.length; j++) {
      const a = records[i]
      const b = records[j]
      const timeOverlap = a.first <= b.last && b.first <= a.last
      const memOverlap = offsets[i] < offsets[j] + b.size && offsets[j] < offsets[i] + a.size
      if (timeOverlap && memOverlap) t.fail(`${a.id} and ${b.id} overlap`)
    }
  }
}

test('Pisarchyk & Lee Figure 6: greedyBySize gives 124 with the published offsets', async (t) => {
  const plan = await planMemory(read('pisarchyk_fig6/fig6.csv'), { strategy: 'greedyBySize' })
  t.is(plan.slabSize, 124)
  t.deepEqual(plan.offsets, [0, 32, 64, 100, 116, 0, 104, 64])
  t.true(plan.optimal)
  const naive = await planMemory(read('pisarchyk_fig6/fig6.csv'), { strategy: 'naive' })
  t.is(naive.slabSize, 234)
})

test('every strategy gives a valid, aligned plan no smaller than the lower bound', async (t) => {
  const records: Rec[] = []
  let seed = 7
  const rnd = () => ((seed = (seed * 1103515245 + 12345) >>> 0) % 1000) / 1000
  for (let i = 0; i < 60; i++) {
    const first = Math.floor(rnd() * 40)
    records.push({ id: `t${i}`, size: 1 + Math.floor(rnd() * 5000), first, last: first + Math.floor(rnd() * 10) })
  }
  for (const strategy of STRATEGIES) {
    const plan = await planMemory(records, { strategy, alignment: 256, timeLimitMs: 200 })
    t.true(plan.slabSize >= plan.lowerBound, strategy)
    assertValid(t, records, plan.offsets, 256)
    plan.validate()
    const json = plan.toJSON()
    t.is(json.strategy, strategy)
    t.is(json.records.length, records.length)
  }
})

test('a model graph: views, outputs and params handled; offsets and aliases in toJSON', async (t) => {
  const graph = JSON.parse(read('models/ppocr-mobile-v2-cls.1x3x48x192.json')) as { lowerBound: number; tensors: { id: string; viewOf?: string }[] }
  const plan = await planMemory(graph, { alignment: 16 })
  t.is(plan.lowerBound, graph.lowerBound)
  t.true(plan.ratio < 1.07)
  const json = plan.toJSON()
  const views = graph.tensors.filter((x) => x.viewOf)
  t.true(
    views.every((v) => json.graph!.aliases.some((a) => a.id === v.id)),
    'every view is placed through its base',
  )
  // The graph section holds what PlannedGraph declares, each alias in one of its four shapes.
  const g = json.graph!
  t.deepEqual(Object.keys(g).sort(), ['aliases', 'constantSize', 'constants', 'inPlace', 'steps', 'workspace'])
  t.true(g.constants.every((c) => typeof c.id === 'string' && Number.isInteger(c.offset) && c.offset < g.constantSize))
  t.true(Number.isInteger(g.steps) && g.steps > 0)
  t.deepEqual(Object.keys(g.workspace).sort(), ['sharedSize', 'uniqueSize'])
  for (const a of g.aliases) {
    t.deepEqual(Object.keys(a).sort(), a.region === 'constant' ? ['id', 'offset', 'region'] : ['base', 'id', 'region'], a.id)
  }
  t.true(plan.toSVG().startsWith('<svg'))
})

test('abort returns the best plan so far; onProgress reports improvements', async (t) => {
  const csv = read('minimalloc/challenging/K.1048576.csv')
  const ac = new AbortController()
  const reports: PlanProgress[] = []
  // The first report comes within tens of ms on an idle machine; under the whole suite (and the
  // next test's abandoned 300k-record parses) it took over 300 ms, so the abort comes at 1 s.
  setTimeout(() => ac.abort(), 1000)
  const started = Date.now()
  const plan = await planMemory(csv, { strategy: 'exact', timeLimitMs: 60_000, signal: ac.signal, onProgress: (p) => reports.push(p) })
  t.true(Date.now() - started < 10_000, 'the abort stopped the search')
  t.true(plan.slabSize >= plan.lowerBound)
  plan.validate()
  t.true(reports.length >= 1)
  for (let i = 1; i < reports.length; i++) t.true(reports[i].best <= reports[i - 1].best)
})

test('abort settles within 100 ms on a large input, whatever phase the planner is in', async (t) => {
  // 300k records as JSON text: parsing, then placement, each take far longer than 100 ms here.
  const records: Rec[] = []
  for (let i = 0; i < 300_000; i++) records.push({ id: `r${i}`, size: 64 + ((i * 7919) % 4096), first: i % 50_000, last: (i % 50_000) + (i % 97) })
  const text = JSON.stringify(records)
  for (const delayMs of [20, 400, 1500]) {
    const ac = new AbortController()
    const pending = planMemory(text, { strategy: 'greedyBySize', signal: ac.signal })
    await new Promise((resolve) => setTimeout(resolve, delayMs))
    const abortedAt = performance.now()
    ac.abort()
    const outcome = await pending.then(
      (plan) => plan,
      (err: WgallocError) => err,
    )
    const took = performance.now() - abortedAt
    t.true(took < 100, `settled ${took.toFixed(0)} ms after an abort at ${delayMs} ms`)
    if (outcome instanceof Error) t.is(outcome.code, 'ABORTED')
    else outcome.validate()
  }
})

test('bad input gives typed errors', async (t) => {
  const bad: [unknown, WgallocErrorCode | null][] = [
    [[{ id: 'a', size: -1, first: 0, last: 1 }], null],
    [[{ id: 'a', size: 1.5, first: 0, last: 1 }], null],
    [[{ id: 'a', size: 4, first: 3, last: 1 }], 'INVALID_ARGUMENT'],
    [
      [
        { id: 'a', size: 4, first: 0, last: 1 },
        { id: 'a', size: 4, first: 0, last: 1 },
      ],
      'INVALID_ARGUMENT',
    ],
    [
      [
        { id: 'a', size: 2 ** 63, first: 0, last: 1 },
        { id: 'b', size: 2 ** 63, first: 0, last: 1 },
      ],
      null,
    ],
    ['id,lower,upper,size\na,0,x,4\n', 'PARSE_ERROR'],
    [{ ops: [], tensors: [{ id: 'v', size: 4, first: 0, last: 0, viewOf: 'nope' }] }, 'INVALID_ARGUMENT'],
    [42, 'INVALID_ARGUMENT'],
  ]
  for (const [input, code] of bad) {
    const err = await t.throwsAsync(planMemory(input as never), { instanceOf: WgallocError })
    if (code) t.is(err.code, code, JSON.stringify(input))
    else t.true(['INVALID_ARGUMENT', 'PARSE_ERROR', 'SIZE_OVERFLOW'].includes(err.code), err.code)
  }
  // Any positive integer alignment is accepted (3 included); zero is not.
  await t.throwsAsync(planMemory([], { alignment: 0 }), { code: 'INVALID_ARGUMENT' })
  await t.throwsAsync(planMemory([], { strategy: 'magic' as never }), { instanceOf: WgallocError })
  const empty = await planMemory([])
  t.is(empty.slabSize, 0)
})

test('`wgalloc plan --strategy all --json` prints one array, an object per strategy', (t) => {
  const out = execFileSync(
    process.execPath,
    [cli, 'plan', join(bench, 'minimalloc/examples/input.12.csv'), '--strategy', 'all', '--time-limit', '1s', '--json'],
    { encoding: 'utf8' },
  )
  const rows = JSON.parse(out) as (Record<string, unknown> & { strategy: Strategy; slabSize: number })[]
  t.deepEqual(
    rows.map((r) => r.strategy),
    STRATEGIES,
  )
  for (const r of rows) for (const k of ['slabSize', 'lowerBound', 'ratio', 'optimal', 'timeMs']) t.true(k in r, k)
  t.is(rows.find((r) => r.strategy === 'best')!.slabSize, 12)
  const dir = mkdtempSync(join(tmpdir(), 'wgalloc-'))
  execFileSync(process.execPath, [cli, 'plan', join(bench, 'pisarchyk_fig6/fig6.csv'), '--svg', join(dir, 'p.svg'), '--json', join(dir, 'p.json')])
  t.is((JSON.parse(readFileSync(join(dir, 'p.json'), 'utf8')) as { slabSize: number }).slabSize, 124)
  t.regex(readFileSync(join(dir, 'p.svg'), 'utf8'), /^<svg/)
})
