import { readFileSync, readdirSync } from 'node:fs'
import { join } from 'node:path'
import test from 'ava'
import { Gpu, type Graph, WgallocError, type WgallocErrorCode } from 'wgalloc'
import { chain } from './graphs.js'

const { checkGraph, sampleInputs } = require('../dist/check.js') as {
  checkGraph: (
    gpu: Gpu,
    graph: Graph,
    options?: { runs?: number; checkPlan?: boolean },
  ) => Promise<{ outputsEqual: boolean; ratio: number; slabSize: number; lowerBound: number; plannedPeakBytes: number; eagerPeakReservedBytes: number }>
  sampleInputs: (graph: Pick<Graph, 'tensors'>) => Record<string, Uint8Array>
}

const MODELS = join(__dirname, '../bench/data/models')

test('a compiled graph computes the right numbers, reuses memory and creates nothing per run', async (t) => {
  const gpu = await Gpu.request()
  const graph = chain(10)
  const x = Float32Array.from({ length: 256 }, (_, i) => i)
  const w = new Float32Array(256).fill(0.25)
  const exe = await gpu.compile(graph, { params: { w } })
  t.true(exe.plan.slabSize <= 3 * 1024, `slab ${exe.plan.slabSize} reuses memory`)
  t.is(exe.plan.slabSize, exe.plan.lowerBound)
  const { outputs } = await exe.run({ x })
  t.true(outputs.y instanceof Float32Array)
  t.deepEqual(
    Array.from(outputs.y),
    Array.from(x, (v) => v + 2.5),
  )
  await exe.run({ x }) // the host cache is warm after the first runs
  const before = exe.stats()
  for (let i = 0; i < 5; i++) await exe.run({ x })
  const after = exe.stats()
  t.is(after.stagingBuffersCreated, before.stagingBuffersCreated, 'warm runs create no staging buffers')
  t.is(after.pipelinesCreated, before.pipelinesCreated)
  t.is(after.bindGroupsCreated, before.bindGroupsCreated)
  t.is(after.buffersCreated, before.buffersCreated)
  t.is(after.runs, 7)
  const eager = await gpu.runEager(graph, { x }, { params: { w }, observe: true })
  t.deepEqual(Array.from(eager.outputs.y), Array.from(outputs.y))
  const records = eager.observation!.toUsageRecords()
  t.is(records.length, 12 /* x, w + t0..t8 + y */)
  t.deepEqual(
    records.find((r) => r.id === 't4'),
    { id: 't4', size: 1024, first: 4, last: 5 },
  )
  t.true(eager.observation!.events.every((e) => typeof e.op === 'number' && (e.kind === 'alloc' || e.kind === 'free')))
  exe.release()
  await t.throwsAsync(exe.run({ x }), { code: 'USE_AFTER_FREE' })
  gpu.destroy()
})

test('plan: "observe" plans from an eager run and gives the same results', async (t) => {
  const gpu = await Gpu.request()
  const graph = chain(6)
  const x = new Float32Array(256).fill(1)
  const w = new Float32Array(256).fill(2)
  const a = await gpu.compile(graph, { params: { w } })
  const b = await gpu.compile(graph, { params: { w }, plan: 'observe', sampleInputs: { x } })
  t.is(b.plan.slabSize, a.plan.slabSize)
  t.deepEqual(Array.from((await b.run({ x })).outputs.y), Array.from((await a.run({ x })).outputs.y))
  const checked = await b.run({ x }, { checkPlan: true, observe: true })
  t.true(checked.observation!.events.length > 0)
  gpu.destroy()
})

test('planned runs equal eager runs bit for bit on every model graph; planned memory is smaller', async (t) => {
  const gpu = await Gpu.request()
  for (const file of readdirSync(MODELS).filter((f) => f.endsWith('.json'))) {
    const graph: Graph = JSON.parse(gpu.checksumGraph(readFileSync(join(MODELS, file), 'utf8')))
    const f = await checkGraph(gpu, graph, { runs: 1, checkPlan: true })
    t.true(f.outputsEqual, `${file}: outputs equal`)
    t.true(f.ratio <= 1.02, `${file}: slab ${f.slabSize} within 1.02x of ${f.lowerBound}`)
    // The slab holds what is live at once; the eager heap reserves that plus its fragmentation.
    t.true(f.plannedPeakBytes < f.eagerPeakReservedBytes, `${file}: planned ${f.plannedPeakBytes} vs eager ${f.eagerPeakReservedBytes}`)
  }
  gpu.destroy()
})

test('bad graphs, inputs and misuse give typed errors; the device and other executors are unharmed', async (t) => {
  const gpu = await Gpu.request()
  const params = { w: new Float32Array(256) }
  const good = await gpu.compile(chain(3), { params })
  const x = new Float32Array(256)
  const bad = (mutate: (g: Graph) => void): Graph => {
    const g = chain(3)
    mutate(g)
    return g
  }
  const cases: [Graph | string, WgallocErrorCode, RegExp][] = [
    [
      bad((g) => {
        g.ops[0].kernel = 'nope'
      }),
      'INVALID_ARGUMENT',
      /unknown kernel/,
    ],
    [
      bad((g) => {
        g.ops[1].inputs[0] = 'ghost'
      }),
      'INVALID_ARGUMENT',
      /unknown tensor/,
    ],
    [
      bad((g) => {
        g.ops.reverse()
      }),
      'INVALID_ARGUMENT',
      /before any op produces it/,
    ],
    [
      bad((g) => {
        g.ops[0].outputs = []
      }),
      'INVALID_ARGUMENT',
      /no outputs/,
    ],
    [
      bad((g) => {
        g.tensors.push({ id: 'v1', size: 4, viewOf: 'w' }, { id: 'v2', size: 4, viewOf: 'v1' })
        g.ops[0].inputs.push('v2')
      }),
      'INVALID_ARGUMENT',
      /view of a view of param/,
    ],
    [
      bad((g) => {
        g.kernels.add.source = g.kernels.add.source.replace('p.scale', 'p.missing_field')
      }),
      'SHADER_ERROR',
      /missing_field/,
    ],
    [
      bad((g) => {
        g.ops[0].dispatch = [0]
      }),
      'INVALID_ARGUMENT',
      /at least 1/,
    ],
    [
      bad((g) => {
        g.ops[0].dispatch = [1e6]
      }),
      'INVALID_ARGUMENT',
      /maxComputeWorkgroupsPerDimension/,
    ],
    ['{"tensors": 5}', 'INVALID_ARGUMENT', /tensors: expected an array, got integer `5`/],
  ]
  for (const [graph, code, message] of cases) {
    const err = await t.throwsAsync(gpu.compile(graph, { params }), { instanceOf: WgallocError })
    t.is(err!.code, code, err!.message)
    t.regex(err!.message, message)
  }
  await t.throwsAsync(good.run({ x: new Float32Array(3) }), { code: 'INVALID_ARGUMENT' })
  await t.throwsAsync(good.run({}), { code: 'INVALID_ARGUMENT' })
  await t.throwsAsync(good.run({ x, extra: x }), { code: 'INVALID_ARGUMENT' })
  await t.throwsAsync(good.run({ x: 'text' } as never), { code: 'INVALID_ARGUMENT' })
  await t.throwsAsync(gpu.compile(chain(2), { params: { w: new Float32Array(3) } }), { code: 'INVALID_ARGUMENT' })
  // A param without data would compute on zeros: refused by name, compiled or eager.
  const noParam = await t.throwsAsync(gpu.compile(chain(2)), { code: 'INVALID_ARGUMENT' })
  t.regex(noParam!.message, /^params\.w: expected 1024 bytes, got undefined; param 'w' \(1024 bytes\) has no data/)
  const noParamEager = await t.throwsAsync(gpu.runEager(chain(2), { x }), { code: 'INVALID_ARGUMENT' })
  t.is(noParamEager!.message, noParam!.message)
  // Concurrent runs of one executor take turns in call order: all eight complete normally.
  const settled = await Promise.allSettled(Array.from({ length: 8 }, () => good.run({ x }, { checkPlan: true })))
  t.true(settled.every((r) => r.status === 'fulfilled'))
  // Still healthy.
  t.deepEqual(Array.from((await good.run({ x })).outputs.y.slice(0, 4)), [0, 0, 0, 0])
  t.false(gpu.lost)
  gpu.destroy()
})

test('tensors larger than the binding limit are named; slabs split under maxSlabSize', async (t) => {
  const gpu = await Gpu.request()
  const big = chain(2)
  big.tensors[2].size = gpu.info.maxStorageBufferBindingSize + 4
  const params = { w: new Float32Array(256) }
  const err = await t.throwsAsync(gpu.compile(big, { params }), { code: 'INVALID_ARGUMENT' })
  t.regex(err!.message, /tensor 't0'/)
  const graph = chain(6)
  const x = Float32Array.from({ length: 256 }, (_, i) => i % 7)
  const whole = await gpu.compile(graph, { params })
  const split = await gpu.compile(graph, { maxSlabSize: 1024, params })
  t.true(split.stats().slabs > 1)
  t.deepEqual(Array.from((await split.run({ x })).outputs.y), Array.from((await whole.run({ x })).outputs.y))
  gpu.destroy()
})

test('sample inputs are deterministic', (t) => {
  const g: Pick<Graph, 'tensors'> = { tensors: [{ id: 'a', size: 8, kind: 'input' }] }
  t.deepEqual(sampleInputs(g).a, sampleInputs(g).a)
})
