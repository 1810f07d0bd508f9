// Prometheus metrics (registerMetrics, `wgalloc/metrics`): every metric present, valid for
// promtool, and equal to the stats it is read from.
import test from 'ava'
import { Registry } from 'prom-client'
import { Gpu, type Graph } from 'wgalloc'
import { registerMetrics } from 'wgalloc/metrics'
import { promtoolCheck, samples } from './promtool.js'

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
  const got = samples(await registry.metrics())
  t.is(got['wgalloc_profiler_kernel_runs_total{device="0",op="copy_inc"}'], 1)
  t.true(got['wgalloc_profiler_kernel_seconds_total{device="0",op="copy_inc"}'] >= 0)
  exe.release()
  gpu.destroy()
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
