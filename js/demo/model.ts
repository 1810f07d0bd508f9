// The demo model: one pre-norm transformer encoder block (f32) as a wgalloc
// graph, plus deterministic weights and input. Every op writes its own tensor,
// so lifetimes are many and varied and the planner has real work to do.
import { invalidArgument } from '../errors.js'
import type { Graph, GraphOp, GraphTensor } from '../graph.js'
import { type Launch, kernels, launch } from './kernels.js'
import { mulberry32, uniform } from './random.js'

const F32 = 4
export const EPS = 1e-5

/** Shape options of the block. */
export interface ShapeOptions {
  seq?: number
  dim?: number
  heads?: number
  ffn?: number
}

/** The block's shapes, checked and completed. */
export interface Shapes {
  seq: number
  dim: number
  heads: number
  ffn: number
  headDim: number
  hidden: number
}

/** Weights and input of the block. */
export interface DemoData {
  params: Record<string, Float32Array>
  inputs: { x: Float32Array }
}

/** A bad demo option: a RangeError whose cause is the INVALID_ARGUMENT the CLI reports. */
export function badOption(path: string, expected: string, got: string): RangeError {
  const err = invalidArgument(path, expected, got)
  return new RangeError(err.message, { cause: err })
}

/** Checks and completes the shape options. */
export function shapes({ seq = 64, dim = 128, heads = 4, ffn = 4 }: ShapeOptions = {}): Shapes {
  for (const [name, v] of Object.entries({ seq, dim, heads, ffn })) {
    if (!Number.isInteger(v) || v < 1) throw badOption(`--${name}`, 'a positive integer', String(v))
  }
  if (dim % heads !== 0) throw badOption('--dim', `a multiple of --heads (${heads})`, String(dim))
  return { seq, dim, heads, ffn, headDim: dim / heads, hidden: dim * ffn }
}

/** Parameter shapes, by tensor id. */
export function paramShapes({ dim, hidden }: Shapes): Record<string, number[]> {
  return {
    ln1_g: [dim],
    ln1_b: [dim],
    w_q: [dim, dim],
    b_q: [dim],
    w_k: [dim, dim],
    b_k: [dim],
    w_v: [dim, dim],
    b_v: [dim],
    w_o: [dim, dim],
    b_o: [dim],
    ln2_g: [dim],
    ln2_b: [dim],
    w_1: [dim, hidden],
    b_1: [hidden],
    w_2: [hidden, dim],
    b_2: [dim],
  }
}

/** Deterministic weights (scaled by fan-in, as an initialiser would) and input. */
export function weights(s: Shapes, seed = 1): DemoData {
  const next = mulberry32(seed)
  const params: Record<string, Float32Array> = {}
  for (const [id, shape] of Object.entries(paramShapes(s))) {
    const n = shape.reduce((a, b) => a * b, 1)
    if (id.endsWith('_g'))
      params[id] = uniform(next, n, 0.1, 1) // layer-norm gains near 1
    else if (shape.length === 1)
      params[id] = uniform(next, n, 0.1) // biases
    else params[id] = uniform(next, n, 1 / Math.sqrt(shape[0])) // [fanIn, fanOut]
  }
  return { params, inputs: { x: uniform(next, s.seq * s.dim, 1) } }
}

/** The graph: tensors (sizes in bytes), ops in execution order, kernels. */
export function graph(s: Shapes): Graph {
  const { seq, dim, heads, headDim, hidden } = s
  const rows = seq * dim
  const tensors: GraphTensor[] = [{ id: 'x', size: rows * F32, kind: 'input', dtype: 'f32' }]
  for (const [id, shape] of Object.entries(paramShapes(s))) {
    tensors.push({ id, size: shape.reduce((a, b) => a * b, 1) * F32, kind: 'param', dtype: 'f32' })
  }
  const act = (id: string, elements: number, kind: GraphTensor['kind'] = 'intermediate') => tensors.push({ id, size: elements * F32, kind, dtype: 'f32' })
  act('ln1', rows)
  act('q', rows)
  act('k', rows)
  act('v', rows)
  act('scores', heads * seq * seq)
  act('probs', heads * seq * seq)
  act('attn', rows) // [seq, heads, headDim] ...
  tensors.push({ id: 'attn_2d', size: rows * F32, kind: 'intermediate', dtype: 'f32', viewOf: 'attn' }) // ... read as [seq, dim]
  act('proj', rows)
  act('res1', rows)
  act('ln2', rows)
  act('ff1', seq * hidden)
  act('gelu', seq * hidden)
  act('ff2', rows)
  act('out', rows, 'output')

  const op = (name: string, inputs: string[], outputs: string[], l: Launch): GraphOp => ({ name, inputs, outputs, ...l })
  const ops = [
    op('ln1', ['x', 'ln1_g', 'ln1_b'], ['ln1'], launch.layernorm(seq, dim, EPS)),
    op('q_proj', ['ln1', 'w_q', 'b_q'], ['q'], launch.matmul(seq, dim, dim)),
    op('k_proj', ['ln1', 'w_k', 'b_k'], ['k'], launch.matmul(seq, dim, dim)),
    op('v_proj', ['ln1', 'w_v', 'b_v'], ['v'], launch.matmul(seq, dim, dim)),
    op('scores', ['q', 'k'], ['scores'], launch.attnScores(seq, heads, headDim)),
    op('softmax', ['scores'], ['probs'], launch.softmax(heads * seq, seq)),
    op('attn', ['probs', 'v'], ['attn'], launch.attnValues(seq, heads, headDim)),
    op('out_proj', ['attn_2d', 'w_o', 'b_o'], ['proj'], launch.matmul(seq, dim, dim)),
    op('residual1', ['x', 'proj'], ['res1'], launch.add(rows)),
    op('ln2', ['res1', 'ln2_g', 'ln2_b'], ['ln2'], launch.layernorm(seq, dim, EPS)),
    op('ffn_up', ['ln2', 'w_1', 'b_1'], ['ff1'], launch.matmul(seq, hidden, dim)),
    op('gelu', ['ff1'], ['gelu'], launch.gelu(seq * hidden)),
    op('ffn_down', ['gelu', 'w_2', 'b_2'], ['ff2'], launch.matmul(seq, dim, hidden)),
    op('residual2', ['res1', 'ff2'], ['out'], launch.add(rows)),
  ]
  return { kernels: kernels(), tensors, ops }
}
