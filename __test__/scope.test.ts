// Heap scopes: per-tenant quotas on one device. One tenant running out leaves the other
// serving; stats per scope are exact; scopes nest; executors and weights can be charged.
import test from 'ava'
import { Registry } from 'prom-client'
import { type DeviceBlock, Gpu, type Graph, HeapScope, WgallocError, registerMetrics } from 'wgalloc'
import { samples } from './promtool.js'
import { collectGarbageUntil } from './helpers.js'

const KiB = 1024

test('two tenants on one device: one runs out, the other keeps allocating; stats are exact', async (t) => {
  const gpu = await Gpu.request()
  const align = gpu.heap.alignment
  const a = gpu.heap.scope({ name: 'tenant-a', limit: 64 * KiB })
  const b = gpu.heap.scope({ name: 'tenant-b', limit: 1024 * KiB })
  t.true(a instanceof HeapScope)
  const held: DeviceBlock[] = []
  for (let i = 0; i < 4; i++) held.push(a.malloc(16 * KiB))
  const err = t.throws(() => a.malloc(1), { instanceOf: WgallocError, code: 'QUOTA_EXCEEDED' })
  t.regex(err!.message, /scope 'tenant-a'/)
  t.regex(err!.message, /65536/)
  // Tenant b is untouched.
  const bBlocks = [b.malloc(100 * KiB), b.malloc(3)]
  t.like(b.stats(), { allocatedBytes: 100 * KiB + Math.ceil(3 / align) * align, activeBlocks: 2, quotaExceeded: 0 })
  t.is(a.path, 'tenant-a')
  t.like(a.stats(), {
    limit: 64 * KiB,
    allocatedBytes: 64 * KiB,
    peakAllocatedBytes: 64 * KiB,
    activeBlocks: 4,
    quotaExceeded: 1,
  })
  // Freeing returns the bytes; a refused malloc allocated nothing.
  held.pop()!.free()
  t.is(a.stats().allocatedBytes, 48 * KiB)
  held.push(a.malloc(16 * KiB))
  t.is(a.stats().allocatedBytes, 64 * KiB)
  for (const x of [...held, ...bBlocks]) x.free()
  t.like(a.stats(), { allocatedBytes: 0, activeBlocks: 0 })
  t.like(b.stats(), { allocatedBytes: 0, activeBlocks: 0 })
  t.is(gpu.heap.stats().activeBlocks.current, 0)
  gpu.destroy()
})

test('scopes nest: a child is charged to its parent, and its limit cannot exceed the parent', async (t) => {
  const gpu = await Gpu.request()
  const model = gpu.heap.scope({ name: 'model', limit: 256 * KiB })
  const kv = model.scope({ name: 'kv-cache', limit: 128 * KiB })
  const x = kv.malloc(100 * KiB)
  t.is(model.stats().allocatedBytes, 100 * KiB)
  t.is(kv.path, 'model/kv-cache')
  const y = model.malloc(150 * KiB)
  t.throws(() => kv.malloc(10 * KiB), { code: 'QUOTA_EXCEEDED', message: /scope 'model'/ }, 'the parent is full first')
  t.throws(() => model.scope({ name: 'big', limit: 512 * KiB }), { code: 'INVALID_ARGUMENT', message: /exceeds the parent scope/ })
  t.throws(() => model.scope({ name: 'kv-cache', limit: 1 }), { code: 'INVALID_ARGUMENT', message: /exists already/ })
  t.deepEqual(
    gpu.heap.scopes().map((s) => s.path),
    ['model', 'model/kv-cache'],
  )
  x.free()
  y.free()
  t.is(model.stats().allocatedBytes, 0)
  gpu.destroy()
})

test.serial('bad limits, a disposed scope, and blocks collected without free()', async (t) => {
  const gpu = await Gpu.request()
  for (const limit of [0, -1, 1.5, Number.NaN, '10', 2 ** 60]) {
    t.throws(() => gpu.heap.scope({ name: `s${String(limit)}`, limit: limit as number }), { code: 'INVALID_ARGUMENT' }, String(limit))
  }
  t.throws(() => gpu.heap.scope({ name: 'over', limit: gpu.memoryBudget.bytes + 1 }), { code: 'INVALID_ARGUMENT', message: /memory budget/ })
  t.throws(() => gpu.heap.scope({ limit: 10 } as never), { code: 'INVALID_ARGUMENT' })
  t.throws(() => gpu.heap.scope(null as never), { code: 'INVALID_ARGUMENT' })
  const s = gpu.heap.scope({ name: 'short-lived', limit: 64 * KiB })
  const kept = s.malloc(4 * KiB)
  s.dispose()
  t.throws(() => s.malloc(4), { code: 'INVALID_ARGUMENT', message: /disposed/ })
  kept.free() // a live block of a disposed scope stays valid
  // The name is free again once disposed.
  const again = gpu.heap.scope({ name: 'short-lived', limit: 64 * KiB })
  ;(() => {
    again.malloc(8 * KiB) // dropped without free(): the GC net returns its bytes to the scope
  })()
  await collectGarbageUntil(() => again.stats().allocatedBytes === 0)
  t.is(again.stats().allocatedBytes, 0)
  gpu.destroy()
})

test('executors and weights charged to a scope; scope metrics per path', async (t) => {
  const gpu = await Gpu.request()
  const source =
    '@group(0) @binding(0) var<storage, read_write> a: array<u32>;\n@group(0) @binding(1) var<storage, read_write> b: array<u32>;\n@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3<u32>) { if (g.x < arrayLength(&b)) { b[g.x] = a[g.x] + 1u; } }'
  const graph: Graph = {
    kernels: { k: { source } },
    tensors: [
      { id: 'x', size: 4096, kind: 'input' },
      { id: 'y', size: 4096, kind: 'output' },
    ],
    ops: [{ kernel: 'k', inputs: ['x'], outputs: ['y'], dispatch: [16] }],
  }
  const scope = gpu.heap.scope({ name: 'model-a', limit: 1024 * KiB })
  const exe = await gpu.compile(graph, { scope })
  t.is(scope.stats().allocatedBytes, exe.deviceBytes)
  const weights = gpu.createWeights({ w: new Float32Array(1024) }, { scope })
  t.is(scope.stats().allocatedBytes, exe.deviceBytes + weights.deviceBytes)
  const registry = new Registry()
  registerMetrics({ main: gpu }, { registry })
  const got = samples(await registry.metrics())
  t.is(got['wgalloc_scope_allocated_bytes{device="main",scope="model-a"}'], scope.stats().allocatedBytes)
  t.is(got['wgalloc_scope_limit_bytes{device="main",scope="model-a"}'], 1024 * KiB)
  exe.release()
  weights.release()
  t.is(scope.stats().allocatedBytes, 0)
  // Too small a scope: the executor is refused and its slabs go back to the heap.
  const tiny = gpu.heap.scope({ name: 'tiny', limit: 256 })
  const before = gpu.heap.stats().allocatedBytes.current
  await t.throwsAsync(gpu.compile(graph, { scope: tiny }), { code: 'QUOTA_EXCEEDED', message: /scope 'tiny'/ })
  t.is(gpu.heap.stats().allocatedBytes.current, before)
  await t.throwsAsync(gpu.compile(graph, { scope: {} as never }), { code: 'INVALID_ARGUMENT' })
  gpu.destroy()
})
