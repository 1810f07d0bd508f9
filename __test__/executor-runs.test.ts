// Runs of one executor called concurrently take turns in call order (plain and shape executors,
// after an aborted run too), `wait: false` is the way to be refused with EXECUTOR_BUSY, a shape
// executor refuses dims at which a tensor is not whole elements of its dtype, and its release()
// lets go of shared weights at once.
import test from 'ava'
import { Gpu, type Graph, Weights } from 'wgalloc'
import { chain } from './graphs.js'
import { gpu } from './helpers.js'

/** Floats per batch row. */
const ROW = 256

/** y = 2 x + w, row by row: x and y `batch` rows, w one row (a param). */
const SCALE = `
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> w: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  if (g.x < arrayLength(&y)) { y[g.x] = 2.0 * x[g.x] + w[g.x % ${ROW}u]; }
}`

function scaleGraph(weightBytes = ROW * 4): Graph {
  return {
    dims: ['batch'],
    kernels: { k: { source: SCALE } },
    tensors: [
      { id: 'x', size: `batch * ${ROW * 4}`, kind: 'input', dtype: 'f32' },
      { id: 'w', size: weightBytes, kind: 'param', dtype: 'f32' },
      { id: 'y', size: `batch * ${ROW * 4}`, kind: 'output', dtype: 'f32' },
    ],
    ops: [{ kernel: 'k', inputs: ['x', 'w'], outputs: ['y'], dispatch: [`batch * ${ROW / 64}`] }],
  }
}

const w = (floats = ROW) => new Float32Array(floats).map((_, i) => (i % 7) * 0.5)
/** Run `k`'s input at `batch` rows. */
const xOf = (k: number, batch: number) => new Float32Array(batch * ROW).map((_, i) => k * 1000 + (i % 997))
const expected = (x: Float32Array, weights: Float32Array) => Array.from(x, (v, i) => 2 * v + weights[i % ROW])

test('six concurrent runs of a shape executor at batches 3 and 4 of one bucket all resolve, each with its outputs', async (t) => {
  const dev = await gpu()
  const weights = w()
  const shapes = dev.compileShapes(scaleGraph(), { params: { w: weights }, buckets: { batch: [4] } })
  const batches = [3, 4, 3, 4, 3, 4]
  const inputs = batches.map((b, k) => xOf(k, b))
  const settled = await Promise.allSettled(batches.map((batch, k) => shapes.run({ batch }, { x: inputs[k] })))
  for (const [k, r] of settled.entries()) {
    if (r.status === 'rejected') {
      t.fail(`run ${k} (batch ${batches[k]}) rejected: ${r.reason}`)
      continue
    }
    t.deepEqual(Array.from(r.value.outputs.y), expected(inputs[k], weights), `run ${k} (batch ${batches[k]})`)
  }
  t.is(shapes.stats().cached, 1, 'one bucket, one executor')
  shapes.release()
})

test('concurrent runs of one executor queue and resolve with their own outputs', async (t) => {
  const dev = await gpu()
  const g = chain(3)
  const exe = await dev.compile(g, { params: { w: new Float32Array(ROW).fill(0.5) } })
  const inputs = Array.from({ length: 8 }, (_, k) => new Float32Array(ROW).map((_, i) => k * 100 + i))
  // Every other run checks the plan (one submit per op): slow runs and fast ones interleave.
  const runs = inputs.map((x, k) => exe.run({ x }, { checkPlan: k % 2 === 0 }))
  const results = await Promise.all(runs)
  for (const [k, r] of results.entries()) {
    t.deepEqual(
      Array.from(r.outputs.y),
      Array.from(inputs[k], (v) => v + 1.5),
      `run ${k}`,
    )
  }
  t.is(exe.stats().runs, 8)
  exe.release()
})

test('a run retried right after an aborted one resolves: the executor is not left busy', async (t) => {
  const dev = await gpu()
  const exe = await dev.compile(chain(3), { params: { w: new Float32Array(ROW).fill(0.5) } })
  const x = new Float32Array(ROW).map((_, i) => i * 0.25)
  const want = Array.from(x, (v) => v + 1.5)
  for (let i = 0; i < 3; i++) {
    const ac = new AbortController()
    const aborted = exe.run({ x }, { signal: ac.signal, checkPlan: true })
    ac.abort()
    await t.throwsAsync(aborted, { code: 'ABORTED' })
    // No wait and no retry loop: the retry queues behind the aborted run, which still ends.
    t.deepEqual(Array.from((await exe.run({ x })).outputs.y), want, `try ${i}`)
  }
  exe.release()
})

test('wait: false fails with EXECUTOR_BUSY while another run is in flight, and runs once it is idle', async (t) => {
  const dev = await gpu()
  const exe = await dev.compile(chain(3), { params: { w: new Float32Array(ROW).fill(0.5) } })
  const x = new Float32Array(ROW).map((_, i) => i)
  const want = Array.from(x, (v) => v + 1.5)
  const first = exe.run({ x }, { checkPlan: true }) // claimed when called
  const err = await t.throwsAsync(exe.run({ x }, { wait: false }), { code: 'EXECUTOR_BUSY' })
  t.regex(err!.message, /wait: false/)
  t.deepEqual(Array.from((await first).outputs.y), want)
  t.deepEqual(Array.from((await exe.run({ x }, { wait: false })).outputs.y), want, 'idle: runs')
  exe.release()
})

test('a shape below its bucket whose size is not whole dtype elements is INVALID_ARGUMENT, as compile refuses it', async (t) => {
  const dev = await gpu()
  // t holds 2 * b + 2 bytes of u32: whole elements at the bucket (b = 3), not at b = 2. (An
  // intermediate: as an input or output, a sum over a bucketed dimension cannot be placed.)
  const source = `
@group(0) @binding(0) var<storage, read_write> x: array<u32>;
@group(0) @binding(1) var<storage, read_write> t: array<u32>;
@group(0) @binding(2) var<storage, read_write> y: array<u32>;
@compute @workgroup_size(1)
fn main() { t[0] = x[0]; t[1] = x[1]; y[0] = t[0]; y[1] = t[1]; y[2] = x[2]; }`
  const graph: Graph = {
    dims: ['b'],
    kernels: { k: { source } },
    tensors: [
      { id: 'x', size: 'b * 4', kind: 'input', dtype: 'u32' },
      { id: 't', size: '2 * b + 2', dtype: 'u32' },
      { id: 'y', size: 'b * 4', kind: 'output', dtype: 'u32' },
    ],
    ops: [{ kernel: 'k', inputs: ['x'], outputs: ['t', 'y'] }],
  }
  const shapes = dev.compileShapes(graph, { buckets: { b: [3] } })
  const err = await t.throwsAsync(shapes.run({ b: 2 }, { x: new Uint32Array([7, 8]) }), { code: 'INVALID_ARGUMENT' })
  t.regex(err!.message, /tensor 't' at \{"b": 2\}: expected a whole number of u32 elements \(4 bytes each\), got 6 bytes/)
  const concrete = { ...graph, dims: undefined, tensors: graph.tensors.map((x) => ({ ...x, size: x.id === 't' ? 6 : 8 })) }
  await t.throwsAsync(dev.compile(concrete), { code: 'INVALID_ARGUMENT', message: /expected a whole number of u32 elements \(4 bytes each\), got 6 bytes/ })
  // Every element written: a slab's unwritten bytes hold whatever it last held.
  t.deepEqual(Array.from((await shapes.run({ b: 3 }, { x: new Uint32Array([7, 8, 9]) })).outputs.y), [7, 8, 9])
  shapes.release()
})

test.serial("a shape executor's release() lets go of its shared weights at once, without a GC", async (t) => {
  const dev = await Gpu.request()
  t.teardown(() => dev.destroy())
  const before = dev.heap.stats().allocatedBytes.current
  const floats = (1 << 20) / 4 // 1 MiB of weights
  const values = w(floats)
  const weights = dev.createWeights({ w: values })
  const handle = weights.shareHandle()
  const weightBytes = weights.deviceBytes
  t.true(weightBytes >= 1 << 20)
  const model = dev.compileShapes(scaleGraph(floats * 4), { weights, buckets: { batch: [4] } })
  const x = xOf(1, 3)
  t.deepEqual(Array.from((await model.run({ batch: 3 }, { x })).outputs.y), expected(x, values))
  model.release()
  const held = dev.heap.stats().allocatedBytes.current
  t.is(held - before, weightBytes, 'the slabs went back; the weights are still held by their handle')
  weights.release()
  t.is(dev.heap.stats().allocatedBytes.current, before, 'the weights went back too')
  t.is(held - dev.heap.stats().allocatedBytes.current, weightBytes)
  t.throws(() => Weights.attach(handle), { code: 'INVALID_ARGUMENT' })
})

test('an aborted run still queued leaves the queue at once and never runs', async (t) => {
  const dev = await gpu()
  const exe = await dev.compile(chain(3), { params: { w: new Float32Array(ROW).fill(0.5) } })
  const x = new Float32Array(ROW).map((_, i) => i)
  const want = Array.from(x, (v) => v + 1.5)
  const first = exe.run({ x }, { checkPlan: true }) // slow: one submit per op
  const ac = new AbortController()
  const queued = exe.run({ x }, { signal: ac.signal })
  const after = exe.run({ x })
  ac.abort()
  await t.throwsAsync(queued, { code: 'ABORTED' })
  const results = await Promise.all([first, after])
  for (const r of results) t.deepEqual(Array.from(r.outputs.y), want)
  t.is(exe.stats().runs, 2, 'the aborted run gave up its turn: only the other two ran')
  // A shape executor's queued run leaves its executor's queue the same way.
  const shapes = dev.compileShapes({ ...chain(3), dims: ['n'] }, { params: { w: new Float32Array(ROW).fill(0.5) } })
  const s1 = shapes.run({ n: 1 }, { x }, { checkPlan: true })
  const ac2 = new AbortController()
  const s2 = shapes.run({ n: 1 }, { x }, { signal: ac2.signal })
  ac2.abort()
  await t.throwsAsync(s2, { code: 'ABORTED' })
  t.deepEqual(Array.from((await s1).outputs.y), want)
  shapes.release()
  exe.release()
})
