// Prometheus metrics (registerMetrics, `wgalloc/metrics`): every metric present, valid for
// promtool, and equal to the stats it is read from.
import test from 'ava'
import { Registry } from 'prom-client'
import { Gpu, type Graph } from 'wgalloc'
import { registerMetrics } from 'wgalloc/metrics'
import { exposition, promtoolCheck, samples } from './promtool.js'

test('metrics match heap.stats() per device and pool, and promtool accepts them', async (t) => {
  const a = await Gpu.request()
  const b = await Gpu.request()
  const registry = new Registry()
  const handle = registerMetrics({ a, b }, { registry })
  const blocks = [a.heap.malloc(4096), a.heap.malloc(3 << 20), b.heap.malloc(256)]
  blocks[0].free()
  a.heap.malloc(4096).free() // a cache hit
  const text = await registry.metrics()
  const check = promtoolCheck(text)
  t.true(check.ok, check.output)
  const got = samples(text)
  for (const [name, gpu] of [
    ['a', a],
    ['b', b],
  ] as const) {
    const s = gpu.heap.stats()
    for (const p of s.pools) {
      const l = `{device="${name}",pool="${p.pool}"}`
      t.is(got[`wgalloc_heap_reserved_bytes${l}`], p.reservedBytes.current, `reserved ${name} ${p.pool}`)
      t.is(got[`wgalloc_heap_allocated_bytes${l}`], p.allocatedBytes.current)
      t.is(got[`wgalloc_heap_active_blocks${l}`], p.activeBlocks.current)
      t.is(got[`wgalloc_heap_segments${l}`], p.segments.current)
    }
    const l = `{device="${name}"}`
    t.is(got[`wgalloc_heap_driver_allocations_total${l}`], s.driverAllocations)
    t.is(got[`wgalloc_heap_driver_frees_total${l}`], s.driverFrees)
    t.is(got[`wgalloc_heap_cache_hits_total${l}`], s.cacheHits)
    t.is(got[`wgalloc_heap_cache_misses_total${l}`], s.cacheMisses)
    t.is(got[`wgalloc_heap_pending_free_bytes${l}`], s.pendingFreeBytes)
    t.is(got[`wgalloc_heap_ooms_total${l}`], s.ooms)
    t.is(got[`wgalloc_memory_budget_bytes${l}`], gpu.memoryBudget.bytes)
    t.is(got[`wgalloc_host_cached_bytes${l}`], gpu.host.stats().cachedBytes)
  }
  t.true(got['wgalloc_heap_cache_hits_total{device="a"}'] >= 1)
  // Every registered metric has its HELP and TYPE lines.
  for (const n of handle.names) t.regex(text, new RegExp(`^# TYPE ${n} (gauge|counter)$`, 'm'), n)
  // A destroyed device reports nothing; the others go on.
  b.destroy()
  const after = samples(await registry.metrics())
  t.false(Object.keys(after).some((k) => k.includes('device="b"')))
  t.true(Object.keys(after).some((k) => k.includes('device="a"')))
  handle.unregister()
  t.is(await registry.metrics(), '\n')
  for (const blk of blocks.slice(1)) if (!blk.freed) blk.free()
  a.destroy()
})

test('profiler kernel time appears while the profiler records', async (t) => {
  const gpu = await Gpu.request()
  const registry = new Registry()
  registerMetrics(gpu, { registry })
  const source =
    '@group(0) @binding(0) var<storage, read_write> a: array<u32>;\n@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3<u32>) { if (g.x < arrayLength(&a)) { a[g.x] = a[g.x] + 1u; } }'
  const graph: Graph = {
    kernels: { inc: { source } },
    tensors: [
      { id: 'x', size: 256, kind: 'input' },
      { id: 'y', size: 256, kind: 'output' },
    ],
    ops: [{ name: 'copy_inc', kernel: 'inc', inputs: [], outputs: ['y'], dispatch: [1] }],
  }
  const exe = await gpu.compile(graph)
  await gpu.profiler.profile(() => exe.run({ x: new Uint32Array(64) }), { mode: 'interval' })
  const runs = async (): Promise<number | undefined> =>
    samples(await registry.metrics())['wgalloc_profiler_kernel_runs_total{device="0",op="copy_inc",pipeline="inc"}']
  const got = samples(await registry.metrics())
  t.is(got['wgalloc_profiler_kernel_runs_total{device="0",op="copy_inc",pipeline="inc"}'], 1)
  t.true(got['wgalloc_profiler_kernel_seconds_total{device="0",op="copy_inc",pipeline="inc"}'] >= 0)
  // After a reset the op's row is gone until it runs again; the counter then carries on from 1.
  gpu.profiler.resetStats()
  t.is(await runs(), undefined)
  await gpu.profiler.profile(async () => {
    for (let i = 0; i < 3; i++) await exe.run({ x: new Uint32Array(64) })
  })
  t.is(await runs(), 4)
  exe.release()
  gpu.destroy()
})

test('every family has one sample per label set, and counters stay put across scrapes with no work between', async (t) => {
  const a = await Gpu.request()
  const b = await Gpu.request()
  t.teardown(() => {
    a.destroy()
    b.destroy()
  })
  const registry = new Registry()
  registerMetrics({ a, b }, { registry })
  // Rows in every family: blocks in two pools, nested scopes (one refused), and two kernels
  // run under one op name (the profiler keeps a row per op name and pipeline).
  const blocks = [a.heap.malloc(4096), a.heap.malloc(3 << 20), b.heap.malloc(256)]
  a.heap.malloc(4096).free()
  const tenant = a.heap.scope({ name: 'tenant', limit: 1 << 20 })
  const model = tenant.scope({ name: 'model', limit: 64 << 10 })
  blocks.push(model.malloc(1024))
  t.throws(() => model.malloc(128 << 10), { code: 'QUOTA_EXCEEDED' })
  const body = (expr: string) =>
    `@group(0) @binding(0) var<storage, read> x: array<u32>;\n@group(0) @binding(1) var<storage, read_write> y: array<u32>;\n@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3<u32>) { if (g.x < arrayLength(&y)) { y[g.x] = ${expr}; } }`
  const kernels = { inc: { source: body('x[g.x] + 1u') }, dbl: { source: body('x[g.x] * 2u') } }
  const exe = await a.compile({
    kernels,
    tensors: [
      { id: 'x', size: 256, kind: 'input' },
      { id: 'h', size: 256 },
      { id: 'y', size: 256, kind: 'output' },
    ],
    ops: [
      { name: 'layer', kernel: 'inc', inputs: ['x'], outputs: ['h'], dispatch: [1] },
      { name: 'layer', kernel: 'dbl', inputs: ['h'], outputs: ['y'], dispatch: [1] },
    ],
  })
  t.teardown(() => exe.release())
  // Rows with different counts under one op name: labelled by op alone, a scrape held both and
  // the counter guard took the second for a reset of the first.
  const one = await a.compile({
    kernels,
    tensors: [
      { id: 'x', size: 256, kind: 'input' },
      { id: 'y', size: 256, kind: 'output' },
    ],
    ops: [{ name: 'layer', kernel: 'inc', inputs: ['x'], outputs: ['y'], dispatch: [1] }],
  })
  t.teardown(() => one.release())
  // Two KV caches, with sequences, a prefix hit and a swap: every kv_cache family has rows.
  const caches = ['chat', 'code'].map((name) =>
    a.createKvCache({ name, layers: 1, kvHeads: 1, headDim: 4, blockTokens: 4, maxBlocks: 8, maxSequenceLength: 32 }),
  )
  t.teardown(() => {
    for (const c of caches) c.release()
  })
  for (const c of caches) {
    const prompt = [1, 2, 3, 4, 5]
    c.addSequence(prompt).append(prompt)
    const hit = c.addSequence(prompt)
    hit.append([5])
    hit.fork().append([6])
    hit.swapOut()
    await hit.swapIn()
  }
  // A shape executor with a hit, misses and an eviction: every shape_executor family has rows.
  const shapes = a.compileShapes(
    {
      dims: ['batch'],
      kernels,
      tensors: [
        { id: 'x', size: 'batch * 256', kind: 'input' },
        { id: 'y', size: 'batch * 256', kind: 'output' },
      ],
      ops: [{ name: 'layer', kernel: 'inc', inputs: ['x'], outputs: ['y'], dispatch: ['batch'] }],
    },
    { name: 'inc', capacity: 1 },
  )
  t.teardown(() => shapes.release())
  for (const batch of [1, 1, 2]) await shapes.run({ batch }, { x: new Uint32Array(64 * batch) })
  const x = new Uint32Array(64)
  for (let i = 0; i < 3; i++) await a.profiler.profile(() => exe.run({ x }))
  await a.profiler.profile(() => one.run({ x }))
  const layers = a.profiler.stats().operations.filter((op) => op.name === 'layer')
  t.true(layers.length >= 2, 'several profiler rows under the op name')
  t.true(new Set(layers.map((op) => op.runs)).size > 1, 'with different run counts')

  const scrapes: ReturnType<typeof exposition>[] = []
  for (let i = 0; i < 3; i++) {
    const text = await registry.metrics()
    const check = promtoolCheck(text)
    t.true(check.ok, `scrape ${i}: ${check.output}`)
    scrapes.push(exposition(text))
  }
  const { types } = scrapes[0]
  for (const [i, scrape] of scrapes.entries()) {
    t.deepEqual(scrape.types, types, `scrape ${i}: the same families`)
    const seen = new Set<string>()
    for (const s of scrape.samples) {
      t.true(types.has(s.name), `scrape ${i}: ${s.name} has a TYPE line`)
      const series = `${s.name}${s.labels}`
      t.false(seen.has(series), `scrape ${i}: ${series} appears twice`)
      seen.add(series)
    }
  }
  // Every family has rows here, so the checks above covered each of them.
  for (const family of types.keys())
    t.true(
      scrapes[0].samples.some((s) => s.name === family),
      `${family} has samples`,
    )
  const counters = (i: number) => new Map(scrapes[i].samples.filter((s) => types.get(s.name) === 'counter').map((s) => [`${s.name}${s.labels}`, s.value]))
  t.true(counters(0).size > 0)
  t.deepEqual(counters(1), counters(0), 'counters unchanged from the first scrape to the second')
  t.deepEqual(counters(2), counters(0), 'counters unchanged from the first scrape to the third')
  // The profiler's two rows under op 'layer' are two series with their own counts.
  const runs = scrapes[2].samples.filter(
    (s) => s.name === 'wgalloc_profiler_kernel_runs_total' && s.labels.includes('op="layer"') && s.labels.includes('device="a"'),
  )
  t.deepEqual(
    runs.map((s) => s.value),
    layers.map((op) => op.runs),
  )
  t.is(
    runs.reduce((sum, s) => sum + s.value, 0),
    7,
  )
  for (const blk of blocks) blk.free()
})

test('bad arguments are INVALID_ARGUMENT', async (t) => {
  const gpu = await Gpu.request()
  const registry = new Registry()
  t.throws(() => registerMetrics(gpu, { registry, prefix: 'bad prefix' }), { code: 'INVALID_ARGUMENT' })
  t.throws(() => registerMetrics({ x: {} } as never, { registry }), { code: 'INVALID_ARGUMENT' })
  t.throws(() => registerMetrics(42 as never, { registry }), { code: 'INVALID_ARGUMENT' })
  const h = registerMetrics(gpu, { registry })
  t.throws(() => h.add('0', gpu), { code: 'INVALID_ARGUMENT', message: /registered already/ })
  t.throws(() => registerMetrics(gpu, { registry }), { code: 'INVALID_ARGUMENT', message: /already/ }, 'the same names twice in one registry')
  t.is(h.names.filter((n) => registry.getSingleMetric(n) !== undefined).length, h.names.length, 'the first registration is intact')
  h.unregister()
  gpu.destroy()
})
