// Errors name the call the user made and the rule that was broken, with the same code
// wherever the same rule is broken.
import test from 'ava'
import { Gpu, type Graph, type WgallocError } from 'wgalloc'
import { gpu } from './helpers.js'

test('stream.copy of overlapping ranges names copy, not copyFrom', async (t) => {
  const g = await gpu()
  const b = g.heap.malloc(4096)
  const s = g.createStream()
  const err = t.throws(() => s.copy(b, b, { srcOffset: 0, dstOffset: 1024, size: 2048 }), { code: 'INVALID_ARGUMENT' })
  t.regex(err.message, /^copy: srcOffset: expected a source range that does not overlap the destination, got 0\.\.2048/)
  t.like((err as WgallocError).details, { call: 'copy', path: 'srcOffset' })
  const other = g.heap.malloc(4096)
  t.regex(t.throws(() => b.copyFrom(b)).message, /^copyFrom: /)
  b.free()
  other.free()
})

test('malloc and createBuffer above maxBufferSize are both INVALID_ARGUMENT naming the limit', async (t) => {
  const g = await gpu()
  const size = g.info.maxBufferSize + 256
  t.regex(t.throws(() => g.heap.malloc(size), { code: 'INVALID_ARGUMENT' }).message, /maxBufferSize/)
  t.throws(() => g.createBuffer(size), { code: 'INVALID_ARGUMENT' })
})

test('malloc(0) and malloc(-5) describe the same valid range', async (t) => {
  const g = await gpu()
  const zero = t.throws(() => g.heap.malloc(0), { code: 'INVALID_ARGUMENT' }).message
  const negative = t.throws(() => g.heap.malloc(-5), { code: 'INVALID_ARGUMENT' }).message
  t.is(zero.replace(/got .*$/, ''), negative.replace(/got .*$/, ''))
  t.regex(zero, /from 1 to 2\^53-1 bytes, got 0$/)
})

test('runEager refuses a tensor above the binding limit by name, as compile does', async (t) => {
  const g = await gpu()
  const big = g.info.maxStorageBufferBindingSize + 256
  const graph: Graph = {
    kernels: {
      k: {
        source:
          '@group(0) @binding(0) var<storage, read_write> a: array<u32>;\n@group(0) @binding(1) var<storage, read_write> b: array<u32>;\n@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3<u32>) { b[g.x] = a[g.x]; }',
      },
    },
    tensors: [
      { id: 'x', size: 256, kind: 'input' },
      { id: 'huge', size: big, kind: 'output' },
    ],
    ops: [{ kernel: 'k', inputs: ['x'], outputs: ['huge'], dispatch: [1] }],
  }
  const eager = await t.throwsAsync(g.runEager(graph, { x: new Uint8Array(256) }), { code: 'INVALID_ARGUMENT' })
  t.regex(eager.message, /tensor 'huge' is \d+ bytes; the device binds at most/)
  const compiled = await t.throwsAsync(g.compile(graph), { code: 'INVALID_ARGUMENT' })
  t.is(compiled.message, eager.message)
})

test('upload errors name upload, uploadBatch errors name the item', async (t) => {
  const g = await gpu()
  const other = await Gpu.request()
  const foreign = other.heap.malloc(256)
  const mine = g.heap.malloc(256)
  const single = await t.throwsAsync(g.upload(foreign, new Uint8Array(16)), { code: 'INVALID_ARGUMENT' })
  t.regex(single.message, /^upload: dst: expected a block of this device, got a block of another device/)
  const batch = await t.throwsAsync(
    g.uploadBatch([
      { block: mine, data: new Uint8Array(16) },
      { block: foreign, data: new Uint8Array(16) },
    ]),
    { code: 'INVALID_ARGUMENT' },
  )
  t.regex(batch.message, /^uploadBatch: items\[1\]\.dst: expected a block of this device, got a block of another device$/)
  t.like((batch as WgallocError).details, { call: 'uploadBatch', path: 'items[1].dst' })
  mine.free()
  foreign.free()
  other.destroy()
})
