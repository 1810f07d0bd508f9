// Kernels as people write them: `var<storage, read>` inputs work, and a kernel whose
// bindings differ from what wgalloc binds is refused up front, naming the binding.
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import test from 'ava'
import { chain, params } from './graphs.js'
import { gpu } from './helpers.js'

const AXPY = readFileSync(join(__dirname, '../crates/wgalloc-core/tests/kernels/axpy.wgsl'), 'utf8')
const f32 = (buf: ArrayBufferView): Float32Array => new Float32Array(buf.buffer, buf.byteOffset, buf.byteLength / 4)

test('a kernel declaring var<storage, read> inputs runs, on blocks of one segment', async (t) => {
  const g = await gpu()
  const source = AXPY.replace('var<storage, read_write> x', 'var<storage, read> x')
  const axpy = g.createKernel({ source, bindings: 2, uniform: true, name: 'axpy-read' })
  const n = 256
  const x = g.heap.malloc(4 * n)
  const y = g.heap.malloc(4 * n)
  x.write(new Uint8Array(Float32Array.from({ length: n }, (_, i) => i).buffer))
  y.write(new Uint8Array(new Float32Array(n).fill(1).buffer))
  const s = g.createStream()
  s.dispatch(axpy, [x, y], Math.ceil(n / 64), new Float32Array([3]))
  await s.synchronize()
  const out = f32(await y.read())
  for (let i = 0; i < n; i++) t.is(out[i], 3 * i + 1)
  x.free()
  y.free()
})

test('an executor graph whose kernels read inputs through var<storage, read> equals the read_write one', async (t) => {
  const g = await gpu()
  const base = chain(3, { len: 256 })
  const readOnly = structuredClone(base)
  readOnly.kernels.add.source = base.kernels.add.source
    .replace('var<storage, read_write> a', 'var<storage, read> a')
    .replace('var<storage, read_write> b', 'var<storage, read> b')
  const w = new Uint8Array(new Float32Array(256).fill(0.5).buffer)
  const x = Float32Array.from({ length: 256 }, (_, i) => i)
  const a = await g.compile(base, { params: { w } })
  const b = await g.compile(readOnly, { params: { w } })
  t.deepEqual(Array.from(f32((await b.run({ x })).outputs.y)), Array.from(f32((await a.run({ x })).outputs.y)))
  a.release()
  b.release()
})

test('an op binding more storage buffers than its kernel declares is refused at compile, naming op and binding', async (t) => {
  const g = await gpu()
  const graph = chain(2, { len: 64 })
  graph.ops[0].inputs.push('w') // three storage buffers + the uniform for a kernel declaring a, b, c and p
  const err = await t.throwsAsync(g.compile(graph, { params: { w: new Uint8Array(256) } }), { code: 'SHADER_ERROR' })
  t.regex(err.message, /^op 'add0': kernel 'add': binding 3 \('p' at line \d+\) is declared as a uniform buffer, but wgalloc supplies a storage buffer there/)
})

test('WGSL errors come back as SHADER_ERROR with line and column; a wrong entry point names the ones there are', async (t) => {
  const g = await gpu()
  const err = t.throws(() => g.createKernel({ source: AXPY.replace('p.alpha', 'p.beta'), bindings: 2, uniform: true }), { code: 'SHADER_ERROR' })
  t.regex(err.message, /at line 8, column \d+/)
  const entry = t.throws(() => g.createKernel({ source: AXPY, bindings: 2, uniform: true, entryPoint: 'run' }), { code: 'SHADER_ERROR' })
  t.regex(entry.message, /no @compute entry point 'run' \(compute entry points: main\)/)
  t.is(params(1, 1).length, 16)
})
