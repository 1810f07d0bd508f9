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
  const message = /input 'tokens': expected a Uint32Array \(the tensor is u32\), or the raw bytes as a Uint8Array, got a Float32Array/
  await t.throwsAsync(exe.run({ tokens: floats }), { code: 'INVALID_ARGUMENT', message })
  await t.throwsAsync(shapes.run({ n: 1 }, { tokens: floats }), { code: 'INVALID_ARGUMENT', message })
  await t.throwsAsync(gpu.runEager(graph(), { tokens: floats }), { code: 'INVALID_ARGUMENT', message })
  await t.throwsAsync(gpu.compile(graph(), { plan: 'observe', sampleInputs: { tokens: floats } }), {
    code: 'INVALID_ARGUMENT',
    message: /sampleInputs 'tokens': expected a Uint32Array \(the tensor is u32\)/,
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

test('op params are numbers of a scalar type, a typed array, or bytes; numbers that cannot be bytes are refused', async (t) => {
  const gpu = await Gpu.request()
  t.teardown(() => gpu.destroy())
  const source = `@group(0) @binding(0) var<storage, read> x: array<u32>;
@group(0) @binding(1) var<storage, read_write> y: array<u32>;
struct P { a: u32, b: u32, c: u32, d: u32 }
@group(0) @binding(2) var<uniform> p: P;
@compute @workgroup_size(1) fn main() { y[0] = p.a; y[1] = p.b; y[2] = p.c; y[3] = p.d + x[0]; }`
  const graph = (params: unknown): Graph => ({
    kernels: { k: { source } },
    tensors: [
      { id: 'x', size: 16, kind: 'input', dtype: 'u32' },
      { id: 'y', size: 16, kind: 'output', dtype: 'u32' },
    ],
    ops: [{ kernel: 'k', inputs: ['x'], outputs: ['y'], params: params as never }],
  })
  const x = new Uint32Array(4)
  const run = async (params: unknown) => Array.from((await (await gpu.compile(graph(params))).run({ x })).outputs.y as Uint32Array)
  t.deepEqual(await run({ u32: [64, 192, 0, 7] }), [64, 192, 0, 7])
  t.deepEqual(await run(new Uint32Array([64, 192, 0, 7])), [64, 192, 0, 7])
  t.deepEqual(await run({ i32: [1, 2, 3, 4] }), [1, 2, 3, 4])
  const f = new Uint32Array(new Float32Array([0.5, 1, 2, 0]).buffer)
  t.deepEqual(await run({ f32: [0.5, 1, 2, 0] }), Array.from(f))
  // A plain array is bytes, as graph JSON files hold them (and parsed files come as objects).
  const bytes = Array.from(new Uint8Array(new Uint32Array([5, 6, 7, 8]).buffer))
  t.deepEqual(await run(bytes), [5, 6, 7, 8])
  t.deepEqual(Array.from((await (await gpu.compile(JSON.stringify(graph(bytes)))).run({ x })).outputs.y as Uint32Array), [5, 6, 7, 8])
  // Values taken for bytes: too short for the uniform, or not bytes at all.
  await t.throwsAsync(gpu.compile(graph([64, 192, 0, 0])), {
    code: 'INVALID_ARGUMENT',
    message: /params: expected at least 16 bytes \(the kernel's uniform declares them\), got 4 bytes of params/,
  })
  await t.throwsAsync(gpu.compile(graph([300, 1, 2, 3])), {
    code: 'INVALID_ARGUMENT',
    message: /op params\[0\]: expected a byte \(0-255\): a plain array holds bytes, got 300; for numbers pass \{ u32/,
  })
  await t.throwsAsync(gpu.compile(graph({ u32: [-1, 0, 0, 0] })), { code: 'INVALID_ARGUMENT', message: /u32\[0\]: expected an integer from 0/ })
  await t.throwsAsync(gpu.compile(graph({ i32: [0, 2 ** 31, 0, 0] })), { code: 'INVALID_ARGUMENT', message: /i32\[1\]/ })
  await t.throwsAsync(gpu.compile(graph({ f32: [0, Number.NaN, 0, 0] })), { code: 'INVALID_ARGUMENT', message: /f32\[1\]: expected a finite number/ })
  await t.throwsAsync(gpu.compile(graph({ u64: [1] })), { code: 'INVALID_ARGUMENT', message: /expected \{ u32/ })
  await t.throwsAsync(gpu.compile(graph({ u32: [] })), { code: 'INVALID_ARGUMENT', message: /non-empty array/ })
  await t.throwsAsync(gpu.runEager(graph([1.5]), { x }), { code: 'INVALID_ARGUMENT', message: /a plain array holds bytes/ })
  t.throws(() => gpu.compileShapes({ ...graph([256]), dims: ['n'] }), { code: 'INVALID_ARGUMENT', message: /a plain array holds bytes/ })
})
