// Tensors with a shape: a bucket on an inner dimension places rows where the kernels look for
// them, byte-size tensors that cannot be placed are refused, and kernels read the asked dims.
import test from 'ava'
import { Gpu, type Graph, type GraphTensor } from 'wgalloc'

const SUM = `@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(1) fn main(@builtin(workgroup_id) id: vec3<u32>) {
  let width = arrayLength(&x) / arrayLength(&y);
  var sum = 0.0;
  for (var j = 0u; j < width; j++) { sum += x[id.x * width + j]; }
  y[id.x] = sum;
}`
const DOUBLE = `@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> z: array<f32>;
@compute @workgroup_size(1) fn main(@builtin(workgroup_id) id: vec3<u32>) { z[id.x] = 2.0 * x[id.x]; }`
// Row means over the asked s, read from the dims uniform: the padding would otherwise count.
const MEAN = `struct Dims { b: u32, s: u32 }
@group(1) @binding(0) var<uniform> dims: Dims;
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(1) fn main(@builtin(workgroup_id) id: vec3<u32>) {
  let width = arrayLength(&x) / arrayLength(&y);
  var sum = 0.0;
  for (var j = 0u; j < dims.s; j++) { sum += x[id.x * width + j]; }
  y[id.x] = sum / f32(dims.s);
}`

function rowsGraph(sum = SUM): Graph {
  return {
    dims: ['b', 's'],
    kernels: { sum: { source: sum }, double: { source: DOUBLE } },
    tensors: [
      { id: 'x', shape: ['b', 's'], dtype: 'f32', kind: 'input' },
      { id: 'y', shape: ['b'], dtype: 'f32', kind: 'output' },
      { id: 'z', shape: ['b', 's'], dtype: 'f32', kind: 'output' },
    ],
    ops: [
      { kernel: 'sum', inputs: ['x'], outputs: ['y'], dispatch: ['b'] },
      { kernel: 'double', inputs: ['x'], outputs: ['z'], dispatch: ['b * s'] },
    ],
  }
}

/** `b` rows of `s`: row r is (10 r + 1) * [1, 2, .., s]. */
const rows = (b: number, s: number) => Float32Array.from({ length: b * s }, (_, i) => (10 * Math.floor(i / s) + 1) * ((i % s) + 1))
const rowSums = (x: Float32Array, s: number) => Array.from({ length: x.length / s }, (_, r) => x.subarray(r * s, (r + 1) * s).reduce((a, v) => a + v, 0))

test('a bucket on an inner dimension places shaped tensors row by row; a byte size there is refused', async (t) => {
  const gpu = await Gpu.request()
  t.teardown(() => gpu.destroy())
  const model = gpu.compileShapes(rowsGraph(), { buckets: { s: [4, 8] } })
  const r = await model.run({ b: 2, s: 3 }, { x: new Float32Array([1, 2, 3, 10, 20, 30]) })
  t.deepEqual([...r.outputs.y], [6, 60], 'row sums (a flat tail pad gave [16, 50])')
  t.deepEqual([...r.outputs.z], [2, 4, 6, 20, 40, 60], 'outputs cut row by row')
  for (const [b, s] of [
    [1, 5],
    [3, 4],
    [3, 7],
  ]) {
    const x = rows(b, s)
    const out = await model.run({ b, s }, { x })
    t.deepEqual([...out.outputs.y], rowSums(x, s), `b=${b} s=${s}`)
    t.deepEqual(
      [...out.outputs.z],
      [...x].map((v) => v * 2),
      `b=${b} s=${s}`,
    )
  }
  t.deepEqual(model.shapeOf({ b: 3, s: 7 }), { b: 3, s: 8 })
  model.release()
  // The same tensor in bytes: padding its tail would mix rows, so it is refused at creation.
  const bytes = rowsGraph()
  const x: GraphTensor = { id: 'x', size: 'b * s * 4', dtype: 'f32', kind: 'input' }
  const byteGraph = { ...bytes, tensors: [x, bytes.tensors[1], bytes.tensors[2]] }
  t.throws(() => gpu.compileShapes(byteGraph, { buckets: { s: [4, 8] } }), {
    code: 'INVALID_ARGUMENT',
    message: /input 'x' is sized in bytes \("b \* s \* 4"\).*bucketed dimension 's'.*Declare the tensor's shape/,
  })
  // A bucket on its first factor stays allowed.
  const outer = gpu.compileShapes(byteGraph, { buckets: { b: [4] } })
  t.deepEqual([...(await outer.run({ b: 2, s: 3 }, { x: new Float32Array([1, 2, 3, 10, 20, 30]) })).outputs.y], [6, 60])
  outer.release()
  // A plain graph takes integer shapes; a shape without a dtype, or disagreeing with size, is refused.
  const plain = await gpu.compile({
    kernels: { double: { source: DOUBLE } },
    tensors: [
      { id: 'x', shape: [2, 3], dtype: 'f32', kind: 'input' },
      { id: 'z', shape: [2, 3], dtype: 'f32', size: 24, kind: 'output' },
    ],
    ops: [{ kernel: 'double', inputs: ['x'], outputs: ['z'], dispatch: [6] }],
  })
  t.deepEqual([...(await plain.run({ x: new Float32Array([1, 2, 3, 4, 5, 6]) })).outputs.z], [2, 4, 6, 8, 10, 12])
  plain.release()
  const bad = (tensor: GraphTensor): Graph => ({ kernels: {}, tensors: [tensor], ops: [] })
  await t.throwsAsync(gpu.compile(bad({ id: 'x', shape: [2, 3], kind: 'input' })), { code: 'INVALID_ARGUMENT', message: /shape needs a dtype/ })
  await t.throwsAsync(gpu.compile(bad({ id: 'x', shape: [2, 3], dtype: 'f32', size: 20, kind: 'input' })), {
    code: 'INVALID_ARGUMENT',
    message: /size: expected 24 \(shape \[2, 3\] of f32\), got 20; the size disagrees with the shape/,
  })
})

test('device blocks under an inner bucket move row by row; external blocks must hold the bucket', async (t) => {
  const gpu = await Gpu.request()
  t.teardown(() => gpu.destroy())
  const model = gpu.compileShapes(rowsGraph(), { buckets: { s: [4] } })
  await model.run({ b: 2, s: 4 }, { x: new Float32Array(8).fill(7) }) // non-zero where padding goes
  const x = rows(2, 3)
  const input = gpu.heap.malloc(x.byteLength)
  input.write(x)
  const into = gpu.heap.malloc(x.byteLength)
  const r = await model.run({ b: 2, s: 3 }, { x: input }, { outputsInto: { z: into } })
  t.deepEqual([...r.outputs.y], rowSums(x, 3), 'the padding was zeroed on the GPU')
  t.deepEqual(
    [...(await into.read(0, x.byteLength, { as: Float32Array }))],
    [...x].map((v) => v * 2),
  )
  const d = await model.run({ b: 2, s: 3 }, { x: input }, { outputs: 'device' })
  t.is(d.blocks.z.size >= x.byteLength, true)
  t.deepEqual(
    [...(await d.blocks.z.read(0, x.byteLength, { as: Float32Array }))],
    [...x].map((v) => v * 2),
  )
  d.blocks.y.free()
  d.blocks.z.free()
  model.release()
  // Rows that are not whole 4-byte words cannot be copied on the GPU.
  const g = rowsGraph()
  const half = gpu.compileShapes(
    { ...g, tensors: [{ id: 'x', shape: ['b', 's'], dtype: 'u16', kind: 'input' }, g.tensors[1], g.tensors[2]] },
    { buckets: { s: [4] } },
  )
  await t.throwsAsync(half.run({ b: 2, s: 3 }, { x: input }), { code: 'INVALID_ARGUMENT', message: /device input 'x'.*\[2, 3\].*\[2, 4\].*shapeOf/ })
  half.release()
  // An external tensor is bound whole in the bucket's shape: a block for the asked shape is refused.
  const ext: Graph = {
    ...g,
    kernels: {
      ...g.kernels,
      double: {
        source: DOUBLE.replace(
          '@group(0) @binding(1) var<storage, read_write> z',
          '@group(0) @binding(1) var<storage, read> kv: array<f32>;\n@group(0) @binding(2) var<storage, read_write> z',
        ).replace('2.0 * x[id.x]', '2.0 * x[id.x] + kv[id.x]'),
      },
    },
    tensors: [...g.tensors, { id: 'kv', shape: ['b', 's'], dtype: 'f32', kind: 'external' }],
    ops: [g.ops[0], { ...g.ops[1], inputs: ['x', 'kv'] }],
  }
  const withKv = gpu.compileShapes(ext, { buckets: { s: [4] } })
  const small = gpu.heap.malloc(24)
  await t.throwsAsync(withKv.run({ b: 2, s: 3 }, { x, kv: small }), {
    code: 'INVALID_ARGUMENT',
    message: /external tensor 'kv'.*shape \[2, 3\] asked, \[2, 4\] in the bucket: 32 bytes.*shapeOf\(dims\)/,
  })
  const kv = gpu.heap.malloc(32)
  kv.write(new Float32Array([100, 200, 300, 400, 500, 600, 700, 800]))
  const k = await withKv.run({ b: 2, s: 3 }, { x, kv })
  t.deepEqual([...k.outputs.z], [102, 204, 306, 522, 644, 766], 'read in the bucket layout')
  for (const b of [input, into, small, kv]) b.free()
  withKv.release()
})

test('kernels read the asked dims from the dims uniform at @group(1) @binding(0)', async (t) => {
  const gpu = await Gpu.request()
  t.teardown(() => gpu.destroy())
  const model = gpu.compileShapes(rowsGraph(MEAN), { buckets: { s: [8] } })
  const shapes = [
    [2, 3],
    [1, 8],
    [3, 5],
    [2, 1],
  ]
  // Called together: the runs queue on the bucket's executor, each with its own dims.
  const results = await Promise.all(shapes.map(([b, s]) => model.run({ b, s }, { x: rows(b, s) })))
  results.forEach((r, i) => {
    const [b, s] = shapes[i]
    const means = rowSums(rows(b, s), s).map((v) => v / s)
    t.deepEqual([...r.outputs.y], means, `b=${b} s=${s}`)
  })
  t.is(model.stats().misses, 3, 'b exact (1, 2, 3), s in one bucket')
  model.release()
  // More fields than the graph has dims, and a plain graph, are refused.
  const three = MEAN.replace('struct Dims { b: u32, s: u32 }', 'struct Dims { b: u32, s: u32, t: u32 }')
  t.throws(() => gpu.compileShapes(rowsGraph(three)), {
    code: 'INVALID_ARGUMENT',
    message: /expected a dims uniform of at most 8 bytes \(b, s: one u32 each\), got 12 bytes/,
  })
})

test('a shape extent takes a bucket on its first factor only: "b * s" bucketed on s is refused, on b placed right', async (t) => {
  const gpu = await Gpu.request()
  t.teardown(() => gpu.destroy())
  // y[r] = 100 * (r / S) + r % S, with S the compiled s (the length of `sl`).
  const source = `
@group(0) @binding(0) var<storage, read> x: array<u32>;
@group(0) @binding(1) var<storage, read> sl: array<u32>;
@group(0) @binding(2) var<storage, read_write> y: array<u32>;
@compute @workgroup_size(1) fn main() {
  let S = arrayLength(&sl);
  for (var r = 0u; r < arrayLength(&x); r++) { y[r] = x[r] + (r / S) * 100u + (r % S); } }`
  const graph: Graph = {
    dims: ['b', 's'],
    kernels: { lay: { source } },
    tensors: [
      { id: 'x', shape: ['b * s'], dtype: 'u32', kind: 'input' },
      { id: 'sl', shape: ['s'], dtype: 'u32', kind: 'input' },
      { id: 'y', shape: ['b * s'], dtype: 'u32', kind: 'output' },
    ],
    ops: [{ kernel: 'lay', inputs: ['x', 'sl'], outputs: ['y'], dispatch: [1] }],
  }
  t.throws(() => gpu.compileShapes(graph, { buckets: { s: [4] } }), {
    code: 'INVALID_ARGUMENT',
    message: /tensors 'x'\.shape\[0\].*'s' is not the first factor of its extent/,
  })
  const inputs = { x: new Uint32Array(6), sl: new Uint32Array(2) }
  const want = [0, 1, 100, 101, 200, 201]
  const byB = gpu.compileShapes(graph, { buckets: { b: [4] } })
  t.deepEqual(Array.from((await byB.run({ b: 3, s: 2 }, inputs)).outputs.y), want)
  byB.release()
})
