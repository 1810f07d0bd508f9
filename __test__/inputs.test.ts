// Run inputs are checked before any GPU work: a typed array of another element type than the
// tensor's dtype, and a name the graph does not have, are refused by name.
import test from 'ava'
import { Gpu, type Graph, type WgallocError } from 'wgalloc'

const SOURCE = `@group(0) @binding(0) var<storage, read> tokens: array<u32>;
@group(0) @binding(1) var<storage, read_write> y: array<u32>;
@compute @workgroup_size(16) fn main(@builtin(global_invocation_id) g: vec3<u32>) { y[g.x] = tokens[g.x] + 1u; }`

function graph(dims?: string[]): Graph {
  const size = dims ? 'n * 64' : 64
  return {
    ...(dims ? { dims } : {}),
    kernels: { k: { source: SOURCE } },
    tensors: [
      { id: 'tokens', size, kind: 'input', dtype: 'u32' },
      { id: 'y', size, kind: 'output', dtype: 'u32' },
    ],
    ops: [{ kernel: 'k', inputs: ['tokens'], outputs: ['y'], dispatch: [1] }],
  }
}

test('a typed array of another element type is INVALID_ARGUMENT naming the input, the dtype and the array', async (t) => {
  const gpu = await Gpu.request()
  t.teardown(() => gpu.destroy())
  const exe = await gpu.compile(graph())
  const shapes = gpu.compileShapes(graph(['n']))
  const floats = new Float32Array(16).fill(1.5)
  const message = /input 'tokens' is u32, got a Float32Array: pass a Uint32Array, or the raw bytes as a Uint8Array/
  await t.throwsAsync(exe.run({ tokens: floats }), { code: 'INVALID_ARGUMENT', message })
  await t.throwsAsync(shapes.run({ n: 1 }, { tokens: floats }), { code: 'INVALID_ARGUMENT', message })
  await t.throwsAsync(gpu.runEager(graph(), { tokens: floats }), { code: 'INVALID_ARGUMENT', message })
  await t.throwsAsync(gpu.compile(graph(), { plan: 'observe', sampleInputs: { tokens: floats } }), {
    code: 'INVALID_ARGUMENT',
    message: /sampleInputs 'tokens' is u32/,
  })
  await t.throwsAsync(exe.run({ tokens: new Int32Array(16) }), { code: 'INVALID_ARGUMENT', message: /got a Int32Array/ })
  // The right type, and raw bytes spelled as such, run.
  const tokens = Uint32Array.from({ length: 16 }, (_, i) => i)
  const want = Array.from(tokens, (v) => v + 1)
  t.deepEqual(Array.from((await exe.run({ tokens })).outputs.y), want)
  const raw = new Uint8Array(tokens.buffer)
  t.deepEqual(Array.from((await exe.run({ tokens: raw })).outputs.y), want)
  t.deepEqual(Array.from((await exe.run({ tokens: Buffer.from(raw) })).outputs.y), want)
  t.deepEqual(Array.from((await exe.run({ tokens: new DataView(tokens.buffer) })).outputs.y), want)
  t.deepEqual(Array.from((await exe.run({ tokens: tokens.buffer })).outputs.y), want)
  t.deepEqual(Array.from((await shapes.run({ n: 1 }, { tokens })).outputs.y), want)
  exe.release()
  shapes.release()
})

test('an input name the graph does not have is named, with the inputs the graph has', async (t) => {
  const gpu = await Gpu.request()
  t.teardown(() => gpu.destroy())
  const exe = await gpu.compile(graph())
  const shapes = gpu.compileShapes(graph(['n']))
  const message = /'tokenz' is not an input tensor of the graph; its inputs are 'tokens'/
  const err = await t.throwsAsync<WgallocError>(exe.run({ tokenz: new Uint32Array(16) }), { code: 'INVALID_ARGUMENT', message })
  t.notRegex(err?.message ?? '', /missing/)
  await t.throwsAsync(shapes.run({ n: 1 }, { tokenz: new Uint32Array(16) }), { code: 'INVALID_ARGUMENT', message })
  await t.throwsAsync(exe.run({ tokens: new Uint32Array(16), y: new Uint32Array(16) }), { code: 'INVALID_ARGUMENT', message: /'y' is not an input tensor/ })
  await t.throwsAsync(exe.run({}), { code: 'INVALID_ARGUMENT', message: /input 'tokens' is missing/ })
  exe.release()
  shapes.release()
})
