// A shape executor checks at creation what does not depend on the shape, and compiles given
// shapes before traffic with warmup().
import test from 'ava'
import { Gpu, type Graph } from 'wgalloc'

const COPY = `@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3<u32>) { if (g.x < arrayLength(&y)) { y[g.x] = x[g.x] * 2.0; } }`
const SCALED = `@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
struct P { scale: f32, bias: f32 }
@group(0) @binding(3) var<uniform> p: P;
@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3<u32>) { if (g.x < arrayLength(&y)) { y[g.x] = x[g.x] * w[0] * p.scale + p.bias; } }`

function graph(source: string, extra: Partial<Graph> = {}): Graph {
  return {
    dims: ['batch'],
    kernels: { k: { source } },
    tensors: [
      { id: 'x', size: 'batch * 256', kind: 'input', dtype: 'f32' },
      { id: 'y', size: 'batch * 256', kind: 'output', dtype: 'f32' },
    ],
    ops: [{ kernel: 'k', inputs: ['x'], outputs: ['y'], dispatch: ['batch'] }],
    ...extra,
  }
}

test('compileShapes refuses at creation a kernel that does not compile or bind, missing params and short op params', async (t) => {
  const gpu = await Gpu.request()
  t.teardown(() => gpu.destroy())
  const before = gpu.heap.stats().allocatedBytes.current
  t.throws(() => gpu.compileShapes(graph('@compute @workgroup_size(1) fn main( {')), { code: 'SHADER_ERROR' })
  const threeBindings = COPY.replace('@compute', '@group(0) @binding(2) var<storage, read_write> z: array<f32>;\n@compute').replace('* 2.0;', '* z[0];')
  t.throws(() => gpu.compileShapes(graph(threeBindings)), { code: 'SHADER_ERROR', message: /binding 2 \('z'.*nothing is bound there/ })
  const withParam: Graph = {
    dims: ['batch'],
    kernels: { k: { source: SCALED } },
    tensors: [
      { id: 'x', size: 'batch * 256', kind: 'input', dtype: 'f32' },
      { id: 'w', size: 4, kind: 'param', dtype: 'f32' },
      { id: 'y', size: 'batch * 256', kind: 'output', dtype: 'f32' },
    ],
    ops: [{ kernel: 'k', inputs: ['x', 'w'], outputs: ['y'], dispatch: ['batch'], params: new Float32Array([3, 1]) }],
  }
  t.throws(() => gpu.compileShapes(withParam), { code: 'INVALID_ARGUMENT', message: /param 'w' \(4 bytes\) has no data/ })
  const short = { ...withParam, ops: [{ ...withParam.ops[0], params: new Float32Array([3]) }] }
  t.throws(() => gpu.compileShapes(short, { params: { w: new Float32Array([2]) } }), {
    code: 'INVALID_ARGUMENT',
    message: /params: expected at least 8 bytes \(the kernel's uniform declares them\), got 4 bytes of params/,
  })
  t.is(gpu.heap.stats().allocatedBytes.current, before, 'the checks take no device memory')
  // The same graph, right, is accepted and runs.
  const ok = gpu.compileShapes(withParam, { params: { w: new Float32Array([2]) } })
  t.is(gpu.heap.stats().allocatedBytes.current, before, 'creation compiles no executor')
  const r = await ok.run({ batch: 1 }, { x: new Float32Array(64).fill(1) })
  t.deepEqual(Array.from(r.outputs.y.slice(0, 2)), [7, 7])
  ok.release()
})

test('warmup compiles the given shapes off the JS thread; their first runs are hits', async (t) => {
  const gpu = await Gpu.request()
  t.teardown(() => gpu.destroy())
  const model = gpu.compileShapes(graph(COPY), { buckets: { batch: [1, 4, 16] } })
  await model.warmup([{ batch: 1 }, { batch: 3 }, { batch: 16 }])
  t.like(model.stats(), { misses: 3, hits: 0, cached: 3 })
  for (const batch of [1, 2, 4, 9, 16]) {
    const r = await model.run({ batch }, { x: new Float32Array(batch * 64).fill(batch) })
    t.deepEqual(Array.from(r.outputs.y), Array(batch * 64).fill(batch * 2))
  }
  t.like(model.stats(), { misses: 3, hits: 5 })
  await t.throwsAsync(model.warmup([{ batch: 17 }]), { code: 'INVALID_ARGUMENT', message: /above its largest bucket/ })
  await t.throwsAsync(model.warmup({ batch: 1 } as never), { code: 'INVALID_ARGUMENT', message: /array of dims/ })
  model.release()
  await t.throwsAsync(model.warmup([{ batch: 1 }]), { code: 'USE_AFTER_FREE' })
})

test('a shape executor given a scope is charged with its cached executors as they come and go', async (t) => {
  const gpu = await Gpu.request()
  t.teardown(() => gpu.destroy())
  const scope = gpu.heap.scope({ name: 'tenant', limit: 128 << 10 })
  const model = gpu.compileShapes(graph(COPY), { scope, name: 'copy', buckets: { batch: [1, 4, 16, 256] }, capacity: 2 })
  t.is(model.name, 'copy')
  t.throws(() => gpu.compileShapes(graph(COPY), { name: 'copy' }), { code: 'INVALID_ARGUMENT', message: /named 'copy' already/ })
  t.deepEqual(
    gpu.shapeExecutors().map((s) => s.name),
    ['copy'],
  )
  t.is(scope.stats().allocatedBytes, 0, 'nothing compiled yet, nothing charged')
  const x = (batch: number) => new Float32Array(batch * 64).fill(1)
  await model.run({ batch: 3 }, { x: x(3) })
  t.is(scope.stats().allocatedBytes, model.stats().deviceBytes)
  t.true(model.stats().deviceBytes > 0)
  await model.warmup([{ batch: 16 }])
  t.is(scope.stats().allocatedBytes, model.stats().deviceBytes)
  await model.run({ batch: 1 }, { x: x(1) }) // evicts batch 4 (capacity 2)
  t.is(model.stats().evictions, 1)
  t.is(scope.stats().allocatedBytes, model.stats().deviceBytes, 'an eviction returns its bytes')
  // batch 256 holds x and y of 64 KiB each: with what is cached, past the 128 KiB limit. Refused
  // before it runs: its executor goes back at once, and the cache and its charge stay as they were.
  const cached = model.stats()
  const live = gpu.heap.stats().activeBlocks.current
  const big = await t.throwsAsync(model.run({ batch: 200 }, { x: x(200) }, { outputs: 'device' }), { code: 'QUOTA_EXCEEDED' })
  t.regex(big!.message, /scope 'tenant'/)
  t.is(model.stats().cached, cached.cached)
  t.is(model.stats().deviceBytes, cached.deviceBytes)
  t.is(scope.stats().allocatedBytes, cached.deviceBytes)
  t.is(gpu.heap.stats().activeBlocks.current, live, 'no executor or output block left behind')
  // The next run fits again.
  const { outputs } = await model.run({ batch: 2 }, { x: x(2) })
  t.deepEqual([...outputs.y].slice(0, 2), [2, 2])
  t.true(gpu.heap.stats().activeBlocks.current >= live)
  model.release()
  t.is(scope.stats().allocatedBytes, 0)
  t.deepEqual(gpu.shapeExecutors(), [])
})
