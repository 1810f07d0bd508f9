// The inference server's model: an MLP classifier (in -> hidden -> hidden -> classes,
// GELU, softmax) over a fixed batch of rows, as a wgalloc graph with seeded weights,
// plus a float64 CPU reference of the same math.

import type { Graph, GraphOp, GraphTensor } from 'wgalloc'
import { TILE, WG, kernels, launch } from './kernels'
import { mulberry32, uniform } from './random'

export interface ClassifierShape {
  /** Rows per executor run (a request sends 1..batch rows; the rest are zero padding). */
  batch: number
  inputs: number
  hidden: number
  classes: number
}

export type Weights = Record<'w1' | 'b1' | 'w2' | 'b2' | 'w3' | 'b3', Float32Array>

const F32 = 4

/**
 * The graph: x [batch, inputs] -> probs [batch, classes]. Weights are params (uploaded once, or
 * bound from a shared store). With `batchDim`, the batch is the symbolic dimension `batch`
 * (at most `s.batch`) for `gpu.compileShapes()`: tensor sizes and the row dispatch counts are
 * expressions, and the kernels take their row count from the bound output.
 */
export function classifierGraph(s: ClassifierShape, { batchDim = false } = {}): Graph {
  const { batch: B, inputs: I, hidden: H, classes: C } = s
  const rows = (perRow: number, kind: GraphTensor['kind'] = 'intermediate'): GraphTensor => ({
    id: '',
    size: batchDim ? `batch * ${perRow * F32}` : B * perRow * F32,
    kind,
    dtype: 'f32',
  })
  const t = (id: string, elements: number, kind: GraphTensor['kind'] = 'intermediate'): GraphTensor =>
    ['x', 'h1', 'h2', 'logits', 'probs'].includes(id) ? { ...rows(elements / B, kind), id } : { id, size: elements * F32, kind, dtype: 'f32' }
  // Row dispatch counts: a number, or an expression over `batch` (division rounds up).
  const overRows = (op: GraphOp, per: number, axis: number): GraphOp => {
    if (!batchDim) return op
    const dispatch = [...op.dispatch!] as (number | string)[]
    dispatch[axis] = `batch / ${per}`
    return { ...op, dispatch: dispatch as GraphOp['dispatch'] }
  }
  const graph: Graph = {
    kernels: kernels('linear', 'softmax'),
    tensors: [
      t('x', B * I, 'input'),
      t('w1', I * H, 'param'),
      t('b1', H, 'param'),
      t('w2', H * H, 'param'),
      t('b2', H, 'param'),
      t('w3', H * C, 'param'),
      t('b3', C, 'param'),
      t('h1', B * H),
      t('h2', B * H),
      t('logits', B * C),
      t('probs', B * C, 'output'),
    ],
    ops: [
      overRows({ name: 'fc1', inputs: ['x', 'w1', 'b1'], outputs: ['h1'], ...launch.linear(B, H, I, 'gelu') }, TILE, 1),
      overRows({ name: 'fc2', inputs: ['h1', 'w2', 'b2'], outputs: ['h2'], ...launch.linear(B, H, H, 'gelu') }, TILE, 1),
      overRows({ name: 'fc3', inputs: ['h2', 'w3', 'b3'], outputs: ['logits'], ...launch.linear(B, C, H, 'none') }, TILE, 1),
      overRows({ name: 'softmax', inputs: ['logits'], outputs: ['probs'], ...launch.softmax(B, C) }, WG, 0),
    ],
  }
  return batchDim ? { ...graph, dims: ['batch'] } : graph
}

/** Weights scaled by fan-in, as an initialiser would. */
export function classifierWeights(s: ClassifierShape, seed = 1): Weights {
  const next = mulberry32(seed)
  const { inputs: I, hidden: H, classes: C } = s
  return {
    w1: uniform(next, I * H, 1 / Math.sqrt(I)),
    b1: uniform(next, H, 0.1),
    w2: uniform(next, H * H, 1 / Math.sqrt(H)),
    b2: uniform(next, H, 0.1),
    w3: uniform(next, H * C, 1 / Math.sqrt(H)),
    b3: uniform(next, C, 0.1),
  }
}

const gelu = (v: number): number => 0.5 * v * (1 + Math.tanh(Math.max(-10, Math.min(10, 0.7978845608028654 * (v + 0.044715 * v ** 3)))))

/** out[n] = act(x . w[:, n] + b[n]) for one row, in float64. */
function linearRow(x: ArrayLike<number>, w: Float32Array, b: Float32Array, k: number, n: number, act: (v: number) => number): Float64Array {
  const out = new Float64Array(n)
  for (let j = 0; j < n; j++) {
    let acc = b[j]
    for (let t = 0; t < k; t++) acc += x[t] * w[t * n + j]
    out[j] = act(acc)
  }
  return out
}

/** Class probabilities of one input row (float64 CPU reference). */
export function classifyRow(s: ClassifierShape, w: Weights, row: ArrayLike<number>): Float64Array {
  const { inputs: I, hidden: H, classes: C } = s
  const h1 = linearRow(row, w.w1, w.b1, I, H, gelu)
  const h2 = linearRow(h1, w.w2, w.b2, H, H, gelu)
  const logits = linearRow(h2, w.w3, w.b3, H, C, (v) => v)
  const max = Math.max(...logits)
  const e = logits.map((v) => Math.exp(v - max))
  const sum = e.reduce((a, b) => a + b, 0)
  return e.map((v) => v / sum)
}
