// planMemory features seen from JS: fixed and preferred offsets, in-place sharing,
// any positive alignment, memory spaces with capacities, graph inputs first, strict
// fields, exact integers past 2^53, the aligned lower bound, and round trips of a
// written plan (toJSON, toJsonString, `wgalloc plan --json`).
import { execFileSync } from 'node:child_process'
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import test from 'ava'
import { Gpu, type MemoryPlanJSON, type PlanProgress, STRATEGIES, type WgallocError, planMemory } from 'wgalloc'
import { chain } from './graphs.js'

const fast = { timeLimitMs: 100 }

test('fixed offsets are kept by every strategy; overlapping fixed records are refused', async (t) => {
  const records = [
    { id: 'f', size: 16, first: 0, last: 4, offset: 32 },
    { id: 'a', size: 32, first: 0, last: 2 },
    { id: 'b', size: 40, first: 3, last: 6 },
  ]
  for (const strategy of STRATEGIES) {
    const p = await planMemory(records, { strategy, ...fast })
    t.is(p.offsetOf('f'), 32, strategy)
    p.validate()
  }
  const e = await t.throwsAsync<WgallocError>(
    planMemory([
      { id: 'f', size: 16, first: 0, last: 4, offset: 0 },
      { id: 'g', size: 8, first: 2, last: 3, offset: 8 },
    ]),
  )
  t.is(e.code, 'INVALID_ARGUMENT')
  t.regex(e.message, /"f".*"g"|"g".*"f"/)
})

test('preferred offsets are kept where they fit', async (t) => {
  const p = await planMemory(
    [
      { id: 'a', size: 8, first: 0, last: 2, preferredOffset: 40 },
      { id: 'b', size: 8, first: 0, last: 2 },
    ],
    fast,
  )
  t.is(p.offsetOf('a'), 40)
})

test('the CSV offset column is read as fixed', async (t) => {
  const p = await planMemory('id,lower,upper,size,offset\na,0,3,8,100\nb,0,3,8,\n', fast)
  t.is(p.offsetOf('a'), 100)
})

test('unknown record fields are refused unless strict is false', async (t) => {
  const records = [{ id: 'a', size: 8, first: 0, last: 1, ofset: 4 }]
  // JS objects: a bad field is the caller's argument; JSON text: the text does not parse.
  const e = await t.throwsAsync<WgallocError>(planMemory(records, fast))
  t.is(e.code, 'INVALID_ARGUMENT')
  t.regex(e.message, /records\[0\]\.ofset.*unknown field/)
  const text = await t.throwsAsync<WgallocError>(planMemory(JSON.stringify(records), fast))
  t.is(text.code, 'PARSE_ERROR')
  const p = await planMemory(records, { ...fast, strict: false })
  t.is(p.slabSize, 8)
})

test('in-place sharing gives one range and checks lifetimes', async (t) => {
  const records = [
    { id: 'a', size: 64, first: 0, last: 2 },
    { id: 'b', size: 48, first: 2, last: 4, sharesWith: 'a' },
    { id: 'x', size: 32, first: 1, last: 5 },
  ]
  const p = await planMemory(records, fast)
  t.is(p.offsetOf('b'), p.offsetOf('a'))
  t.is(p.slabSize, 96)
  const e = await t.throwsAsync<WgallocError>(planMemory([records[0], { ...records[1], first: 1 }], fast))
  t.is(e.code, 'INVALID_ARGUMENT')
})

test('in-place ops on a graph save bytes', async (t) => {
  const graph = {
    ops: [
      { type: 'Conv', inputs: ['x'], outputs: ['a'] },
      { type: 'Relu', inputs: ['a'], outputs: ['b'] },
      { type: 'Conv', inputs: ['b'], outputs: ['c'] },
    ],
    graphInputs: [{ id: 'x', size: 4, last: 0 }],
    tensors: [
      { id: 'a', size: 64, first: 0, last: 1 },
      { id: 'b', size: 64, first: 1, last: 2 },
      { id: 'c', size: 8, first: 2, last: 2, isOutput: true },
    ],
  }
  const plain = await planMemory(graph, fast)
  const shared = await planMemory(graph, { ...fast, inPlace: true })
  t.is(plain.slabSize, 128)
  t.is(shared.slabSize, 72)
  t.deepEqual(shared.toJSON().graph!.inPlace, [{ id: 'b', base: 'a' }])
})

test('any positive integer alignment; 0 and fractions are refused', async (t) => {
  const records = [
    { id: 'a', size: 10, first: 0, last: 2 },
    { id: 'b', size: 30, first: 0, last: 2 },
    { id: 'c', size: 10, first: 1, last: 3, alignment: 3 },
  ]
  const p = await planMemory(records, { ...fast, alignment: 20 })
  t.true(p.offsets.every((o) => o % 20 === 0))
  t.is(p.offsetOf('c')! % 60, 0)
  for (const alignment of [0, -4, 2.5]) {
    t.is((await t.throwsAsync<WgallocError>(planMemory(records, { ...fast, alignment }))).code, 'INVALID_ARGUMENT', String(alignment))
  }
  t.is((await t.throwsAsync<WgallocError>(planMemory([{ ...records[0], alignment: 0 }], fast))).code, 'INVALID_ARGUMENT')
})

test('memory spaces are planned apart; a capacity below the live bytes is INFEASIBLE', async (t) => {
  const records = [
    { id: 'u1', size: 16, first: 0, last: 3, space: 'uniform' },
    { id: 's1', size: 100, first: 0, last: 3 },
    { id: 'u2', size: 16, first: 1, last: 2, space: 'uniform' },
  ]
  const p = await planMemory(records, fast)
  t.is(p.offsetOf('s1'), 0)
  t.deepEqual(
    p.spaces.map((s) => [s.name, s.slabSize]),
    [
      ['uniform', 32],
      ['default', 100],
    ],
  )
  t.is(p.slabSize, 132)
  const e = await t.throwsAsync<WgallocError>(planMemory(records, { ...fast, capacities: { uniform: 31 } }))
  t.is(e.code, 'INFEASIBLE')
  t.regex(e.message, /uniform.*at op 1/)
  t.is((await planMemory(records, { ...fast, capacity: 100, capacities: { uniform: 32 } })).spaces[0].capacity, 32)
})

test('greedyInputsFirst places whole-run records first and is a listed strategy', async (t) => {
  t.true(STRATEGIES.includes('greedyInputsFirst'))
  const records = [
    { id: 'big', size: 40, first: 0, last: 1 },
    { id: 'in', size: 8, first: 0, last: 3 },
    { id: 'mid', size: 24, first: 2, last: 3 },
  ]
  t.is((await planMemory(records, { strategy: 'greedyInputsFirst' })).offsetOf('in'), 0)
  t.not((await planMemory(records, { strategy: 'greedyBySize' })).offsetOf('in'), 0)
})

test('the lower bound is the aligned one, the same in the result and in onProgress', async (t) => {
  const records = [
    { id: 'a', size: 60, first: 0, last: 1 },
    { id: 'b', size: 60, first: 1, last: 2 },
  ]
  const seen: PlanProgress[] = []
  const p = await planMemory(records, { alignment: 64, onProgress: (x) => seen.push(x) })
  t.is(p.slabSize, 124)
  t.is(p.lowerBound, 124)
  t.true(p.optimal)
  t.is(p.optimalBy, 'lowerBound')
  t.is(seen.at(-1)!.lowerBound, 124)
  const q = await planMemory(
    [
      { id: 'a', size: 3, first: 0, last: 1 },
      { id: 'b', size: 2, first: 0, last: 1 },
      { id: 'c', size: 3, first: 1, last: 2 },
    ],
    { strategy: 'naive', alignment: 2 },
  )
  t.true(q.slabSize > q.lowerBound)
  t.false(q.optimal)
  t.is(q.optimalBy, null)
})

test('lifetimes past 2^53 stay exact: BigInt and JSON text in, strings out; rounded numbers are refused', async (t) => {
  const base = 2n ** 60n + 1n
  const records = [
    { id: 'a', size: 8, first: base, last: base },
    { id: 'b', size: 8, first: base + 1n, last: base + 1n },
  ]
  const p = await planMemory(records, fast)
  t.is(p.slabSize, 8)
  const json = p.toJSON()
  t.is(json.records[0].first, String(base))
  t.is(json.records[1].last, String(base + 1n))
  const text = `[{"id":"a","size":8,"first":${base},"last":${base}},{"id":"b","size":8,"first":${base + 1n},"last":${base + 1n}}]`
  t.is((await planMemory(text, fast)).slabSize, 8)
  const again = await planMemory(json, fast)
  t.is(again.slabSize, 8)
  const e = await t.throwsAsync<WgallocError>(planMemory([{ id: 'a', size: 8, first: 2 ** 60, last: 2 ** 60 }], fast))
  t.is(e.code, 'SIZE_OVERFLOW')
})

test('a written plan keeps every constraint when planned again (toJSON, toJsonString, plan --json)', async (t) => {
  const records = [
    { id: 'a', size: 100, first: 0, last: 1 },
    { id: 'b', size: 28, first: 1, last: 4, alignment: 64 },
    { id: 'f', size: 8, first: 2, last: 2, offset: 512 },
    { id: 't', size: 50, first: 2, last: 3, sharesWith: 'a', preferredOffset: 256 },
    { id: 's', size: 4, first: 0, last: 0, space: 'heap2' },
  ]
  const p = await planMemory(records, { ...fast, alignment: 4 })
  const written = p.toJSON()
  t.deepEqual(JSON.parse(p.toJsonString()).records, written.records)
  const b = written.records.find((r) => r.id === 'b')!
  t.is(b.alignment, 64)
  t.true(written.records.find((r) => r.id === 'f')!.fixed)
  t.is(written.records.find((r) => r.id === 't')!.sharesWith, 'a')
  t.is(written.records.find((r) => r.id === 's')!.space, 'heap2')
  for (const input of [written, p.toJsonString()]) {
    const again = await planMemory(input, fast)
    t.is(again.offsetOf('b')! % 64, 0)
    t.is(again.offsetOf('f'), 512)
    t.is(again.offsetOf('t'), again.offsetOf('a'))
    t.true(again.offsets.every((o) => o % 4 === 0))
  }
  // The CLI writes the same plan and reads it back.
  const dir = mkdtempSync(join(tmpdir(), 'wgalloc-plan-'))
  const input = join(dir, 'in.json')
  const out = join(dir, 'out.json')
  writeFileSync(input, JSON.stringify(records))
  const cli = join(__dirname, '..', 'dist', 'cli.js')
  execFileSync(process.execPath, [cli, 'plan', input, '--time-limit', '100ms', '--alignment', '4', '--json', out])
  const fromCli: MemoryPlanJSON = JSON.parse(readFileSync(out, 'utf8'))
  t.is(fromCli.records.find((r) => r.id === 'b')!.alignment, 64)
  const replanned = await planMemory(readFileSync(out, 'utf8'), fast)
  t.is(replanned.offsetOf('b')! % 64, 0)
  t.is(replanned.offsetOf('f'), 512)
})

test('one planning story: planMemory with inputsInSlab gives the layout gpu.compile runs', async (t) => {
  const gpu = await Gpu.request()
  const alignment = gpu.info.minStorageBufferOffsetAlignment
  for (const n of [1, 3, 6]) {
    const graph = chain(n)
    const exe = await gpu.compile(graph, { params: { w: new Float32Array(Number(graph.tensors.find((x) => x.id === 'w')!.size) / 4) } })
    const planned = await planMemory(graph, { alignment, inputsInSlab: true })
    t.is(planned.slabSize, exe.plan.slabSize, `chain(${n})`)
    // Without it, inputs stay in the caller's buffers: never more slab than compile's.
    t.true((await planMemory(graph, { alignment })).slabSize <= exe.plan.slabSize)
    exe.release()
  }
  gpu.destroy()
})
