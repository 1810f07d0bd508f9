// Heap scopes: per-tenant quotas on one device. One tenant running out leaves the other
// serving; stats per scope are exact; scopes nest; executors and weights can be charged.
import diagnostics from 'node:diagnostics_channel'
import test from 'ava'
import { Registry } from 'prom-client'
import { type DeviceBlock, type DeviceChannelMessage, Gpu, type Graph, HeapScope, WgallocError, registerMetrics } from 'wgalloc'
import { samples } from './promtool.js'
import { copyGraph } from './graphs.js'
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
  if (WgallocError.is(err, 'QUOTA_EXCEEDED')) t.deepEqual(err.details, { scope: 'tenant-a', limit: 64 * KiB, allocated: 64 * KiB, requested: align })
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
  t.throws(() => model.scope({ name: 'big', limit: 512 * KiB }), { code: 'INVALID_ARGUMENT', message: /at most 262144 \(the parent scope 'model' limit\)/ })
  t.throws(() => model.scope({ name: 'kv-cache', limit: 1 }), { code: 'INVALID_ARGUMENT', message: /exists already/ })
  t.deepEqual(
    gpu.heap.scopes().map((s) => s.path),
    ['model', 'model/kv-cache'],
  )
  // A disposed child leaves the list (and the metrics that read it); its parent stays.
  const done = model.scope({ name: 'finished', limit: KiB })
  done.dispose()
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
  // The charge follows the memory: weights released while an executor binds them stay charged.
  const bound = gpu.createWeights({ w: new Float32Array(1024) }, { scope })
  const weightsGraph: Graph = {
    ...graph,
    tensors: [...graph.tensors, { id: 'w', size: 4096, kind: 'param' }],
    ops: [{ kernel: 'k', inputs: ['w'], outputs: ['y'], dispatch: [16] }],
  }
  const user = await gpu.compile(weightsGraph, { weights: bound })
  bound.release()
  t.is(scope.stats().allocatedBytes, 4096, 'an executor still binds the released weights')
  user.release()
  t.is(scope.stats().allocatedBytes, 0)
  // Too small a scope: the executor is refused and its slabs go back to the heap.
  const tiny = gpu.heap.scope({ name: 'tiny', limit: 256 })
  const before = gpu.heap.stats().allocatedBytes.current
  await t.throwsAsync(gpu.compile(graph, { scope: tiny }), { code: 'QUOTA_EXCEEDED', message: /scope 'tiny'/ })
  t.is(gpu.heap.stats().allocatedBytes.current, before)
  await t.throwsAsync(gpu.compile(graph, { scope: {} as never }), { code: 'INVALID_ARGUMENT' })
  gpu.destroy()
})

test.serial('executors and weights dropped without release() return their scope charge when collected', async (t) => {
  const gpu = await Gpu.request()
  const graph = copyGraph(768 * KiB)
  const scope = gpu.heap.scope({ name: 'tenant', limit: 4096 * KiB })
  // Four compiles of an executor of about half the limit, each dropped: every one fits.
  let size = 0
  for (let i = 0; i < 4; i++) {
    await (async () => {
      const exe = await gpu.compile(graph, { scope })
      size = exe.deviceBytes
    })()
    await collectGarbageUntil(() => scope.stats().allocatedBytes === 0)
    t.is(scope.stats().allocatedBytes, 0, `compile ${i + 1}: the charge came back`)
  }
  t.true(size > 1024 * KiB)
  ;(() => {
    gpu.createWeights({ w: new Uint8Array(1024 * KiB) }, { scope })
  })()
  await collectGarbageUntil(() => scope.stats().allocatedBytes === 0)
  t.is(scope.stats().allocatedBytes, 0, 'weights too')
  // Released ones are not returned twice.
  const exe = await gpu.compile(graph, { scope })
  exe.release()
  const kept = await gpu.compile(graph, { scope })
  await collectGarbageUntil(() => false, 300)
  t.is(scope.stats().allocatedBytes, kept.deviceBytes)
  kept.release()
  gpu.destroy()
})

test('a heap listener that throws changes nothing malloc returns, and is reported as a warning', async (t) => {
  const gpu = await Gpu.request()
  const heap = gpu.heap
  const scope = heap.scope({ name: 'listened', limit: 1024 * KiB })
  const warnings: DeviceChannelMessage[] = []
  const onDevice = (m: unknown) => {
    if ((m as DeviceChannelMessage).kind === 'warning') warnings.push(m as DeviceChannelMessage)
  }
  diagnostics.subscribe('wgalloc:device', onDevice)
  t.teardown(() => diagnostics.unsubscribe('wgalloc:device', onDevice))
  const boom = () => {
    throw new Error('listener failed')
  }
  const offAllocated = heap.on('ALLOCATED', boom)
  const offRecycled = heap.on('RECYCLED', boom)
  const a = scope.malloc(512 * KiB)
  const b = scope.malloc(512 * KiB)
  t.is(scope.stats().allocatedBytes, a.size + b.size, 'the scope keeps its charge')
  t.is(scope.stats().activeBlocks, 2)
  a.free()
  const c = scope.malloc(512 * KiB) // recycled
  t.is(scope.stats().allocatedBytes, b.size + c.size)
  t.true(warnings.length >= 3)
  t.regex((warnings[0] as { message: string }).message, /listener threw.*listener failed/)
  offAllocated()
  offRecycled()
  // An OUT_OF_MEMORY listener that throws leaves the typed OOM error as it is.
  heap.on('OUT_OF_MEMORY', boom)
  heap.setHighWatermarkRatio(0.001)
  const err = t.throws<WgallocError>(() => heap.malloc(64 << 20), { code: 'OUT_OF_MEMORY' })
  t.is(typeof err?.details?.reserved, 'number')
  b.free()
  c.free()
  t.is(scope.stats().allocatedBytes, 0)
  t.is(heap.stats().allocatedBytes.current, 0)
  gpu.destroy()
})

test.serial('an executor dropped without release() returns its charge when collected; a charge returns once', async (t) => {
  const gpu = await Gpu.request()
  const scope = gpu.heap.scope({ name: 'collected', limit: 4096 * KiB })
  let bytes = 0
  await (async () => {
    const exe = await gpu.compile(copyGraph(64 * KiB), { scope })
    bytes = exe.deviceBytes
  })()
  t.true(bytes > 0)
  await collectGarbageUntil(() => scope.stats().allocatedBytes === 0)
  t.is(scope.stats().allocatedBytes, 0, 'the native executor returned its charge with its memory')
  const charge = scope.charge(1000)
  t.is(scope.stats().allocatedBytes, 1000)
  charge.release()
  charge.release()
  t.is(scope.stats().allocatedBytes, 0, 'released once')
  gpu.destroy()
})

test('scopes live in the native heap: another heap object of the device sees and charges them', async (t) => {
  const gpu = await Gpu.request()
  const attached = Gpu.attach(gpu.shareHandle()) // as a worker thread would
  const tenant = gpu.heap.scope({ name: 'shared-tenant', limit: 256 * KiB })
  tenant.scope({ name: 'model', limit: 128 * KiB })
  t.deepEqual(
    attached.heap.scopes().map((s) => s.path),
    ['shared-tenant', 'shared-tenant/model'],
  )
  const there = attached.heap.findScope('shared-tenant/model')
  t.truthy(there)
  t.is(attached.heap.findScope('shared-tenant/none'), undefined)
  const blocks = [there!.malloc(100 * KiB), attached.heap.findScope('shared-tenant')!.malloc(140 * KiB)]
  // No JS bookkeeping of the other heap object is involved: the figures are the native scope's.
  t.like(tenant.stats(), { allocatedBytes: 240 * KiB, activeBlocks: 1 })
  t.like(gpu.heap.findScope('shared-tenant/model')!.stats(), { allocatedBytes: 100 * KiB, activeBlocks: 1 })
  t.throws(() => there!.malloc(20 * KiB), { code: 'QUOTA_EXCEEDED', message: /scope 'shared-tenant'/ })
  for (const b of blocks) b.free()
  t.like(tenant.stats(), { allocatedBytes: 0, peakAllocatedBytes: 240 * KiB, activeBlocks: 0, quotaExceeded: 1 })
  tenant.dispose()
  t.deepEqual(attached.heap.scopes(), [])
  t.true(there!.disposed)
  gpu.destroy()
})
