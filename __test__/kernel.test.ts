// Kernels dispatched directly on heap blocks: results read back from the GPU, stream
// ordering, deferred frees, and typed errors for bad input.
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { inspect } from 'node:util'
import test from 'ava'
import { ComputeKernel, Gpu, type WgallocError } from 'wgalloc'
import { gpu } from './helpers.js'

// The Rust kernel tests use the same kernel.
const AXPY = readFileSync(join(__dirname, '../crates/wgalloc-core/tests/kernels/axpy.wgsl'), 'utf8')

const f32 = (buf: ArrayBufferView): Float32Array => new Float32Array(buf.buffer, buf.byteOffset, buf.byteLength / 4)

test('axpy on heap blocks: two ordered dispatches, values read back', async (t) => {
  const g = await gpu()
  const n = 1000
  const x = Float32Array.from({ length: n }, (_, i) => i)
  const y0 = Float32Array.from({ length: n }, (_, i) => 1 - i / 2)
  const bx = g.heap.malloc(4 * n)
  const by = g.heap.malloc(4 * n)
  bx.write(new Uint8Array(x.buffer))
  by.write(new Uint8Array(y0.buffer))
  const axpy = g.createKernel({ source: AXPY, bindings: 2, uniform: true, name: 'axpy' })
  t.true(axpy instanceof ComputeKernel)
  t.regex(inspect(axpy), /ComputeKernel \{ name: 'axpy', bindings: 2, uniform: true \}/)
  const s = g.createStream()
  s.dispatch(axpy, [bx, by], Math.ceil(n / 64), new Float32Array([2, 0, 0, 0]))
  s.dispatch(axpy, [bx, by], [Math.ceil(n / 64), 1, 1], new Float32Array([3]))
  // Freed with the dispatches recorded but unsubmitted: the block must not be reused yet.
  const xId = bx.id
  bx.free()
  t.is(g.heap.getBlockInfo(xId)!.state, 'pending-free')
  await s.synchronize()
  const y = f32(await by.read())
  for (let i = 0; i < n; i++) t.is(y[i], 5 * x[i] + y0[i], `y[${i}]`)
  by.free()
})

test('bad input is typed and records nothing', async (t) => {
  const g = await gpu()
  const axpy = g.createKernel({ source: AXPY, bindings: 2, uniform: true })
  const a = g.heap.malloc(256)
  const b = g.heap.malloc(256)
  const s = g.createStream()
  const code = (fn: () => unknown) => t.throws<WgallocError>(fn).code
  t.is(
    code(() => s.dispatch(axpy, [a], 1, new Float32Array(4))),
    'INVALID_ARGUMENT',
  )
  t.is(
    code(() => s.dispatch(axpy, [a, b], 1)),
    'INVALID_ARGUMENT',
  )
  t.is(
    code(() => s.dispatch(axpy, [a, b], [], new Float32Array(4))),
    'INVALID_ARGUMENT',
  )
  // Shorter than the shader's uniform struct: the kernel would read zeros.
  const wide = g.createKernel({ source: AXPY.replace('alpha: f32 }', 'alpha: f32, beta: vec4<f32> }'), bindings: 2, uniform: true })
  t.regex(t.throws(() => s.dispatch(wide, [a, b], 1, new Float32Array(4))).message, /expected at least 32 bytes \(the kernel's uniform declares them\)/)
  t.is(
    code(() => s.dispatch(axpy, [a, b], 2 ** 31, new Float32Array(4))),
    'INVALID_ARGUMENT',
  )
  t.is(
    code(() => g.createKernel({ source: 'fn main( {', bindings: 1 })),
    'SHADER_ERROR',
  )
  t.is(
    code(() => g.createKernel({ source: AXPY, bindings: 0, uniform: true })),
    'INVALID_ARGUMENT',
  )
  const other = await Gpu.request()
  const foreign = other.heap.malloc(256)
  t.is(
    code(() => s.dispatch(axpy, [a, foreign], 1, new Float32Array(4))),
    'INVALID_ARGUMENT',
  )
  b.free()
  t.is(
    code(() => s.dispatch(axpy, [a, b], 1, new Float32Array(4))),
    'USE_AFTER_FREE',
  )
  t.is(s.pendingCommands, 0)
  foreign.free()
  other.destroy()
  a.free()
})
