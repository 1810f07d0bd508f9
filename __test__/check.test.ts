// `wgalloc check` explains a mismatch: the output, the first differing element, both values
// and the op that last wrote the output (also in --json).
import test from 'ava'
import type { Graph } from 'wgalloc'

interface Difference {
  output: string
  index: number | null
  dtype?: string
  eager: number | string | undefined
  planned: number | string | undefined
  op: string | null
}
const { firstDifference } = require('../dist/check.js') as {
  firstDifference: (
    graph: Pick<Graph, 'tensors' | 'ops'>,
    eager: Record<string, ArrayBufferView>,
    planned: Record<string, ArrayBufferView>,
  ) => Difference | null
}

const graph: Pick<Graph, 'tensors' | 'ops'> = {
  tensors: [
    { id: 'x', size: 12, kind: 'input', dtype: 'f32' },
    { id: 'y', size: 12, kind: 'output', dtype: 'f32' },
    { id: 'z', size: 4, kind: 'output' },
  ],
  ops: [
    { name: 'first', inputs: ['x'], outputs: ['y'] },
    { name: 'again', inputs: ['y'], outputs: ['y'] },
    { name: 'bytes', inputs: ['y'], outputs: ['z'] },
  ],
}

test('equal outputs have no difference', (t) => {
  const out = { y: new Float32Array([1, 2, 3]), z: new Uint8Array([1, 2, 3, 4]) }
  t.is(firstDifference(graph, out, { y: new Float32Array([1, 2, 3]), z: new Uint8Array([1, 2, 3, 4]) }), null)
})

test('the first differing element is named by output, index in its dtype, values and writer', (t) => {
  const eager = { y: new Float32Array([1, 2, 3]), z: new Uint8Array([1, 2, 3, 4]) }
  t.deepEqual(firstDifference(graph, eager, { y: new Float32Array([1, 2, 3.5]), z: new Uint8Array([1, 2, 3, 4]) }), {
    output: 'y',
    index: 2,
    dtype: 'f32',
    eager: 3,
    planned: 3.5,
    op: 'again',
  })
  t.deepEqual(firstDifference(graph, eager, { y: new Float32Array([1, 2, 3]), z: new Uint8Array([1, 9, 3, 4]) }), {
    output: 'z',
    index: 1,
    dtype: 'bytes',
    eager: 2,
    planned: 9,
    op: 'bytes',
  })
  t.is(firstDifference(graph, eager, { z: eager.z })!.planned, 'missing')
})
