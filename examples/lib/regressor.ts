// The training example's model: an MLP regressor (2 -> hidden -> hidden -> 1, tanh)
// fitted to y = sin(3 x0) cos(2 x1) by Adam. Shapes, data, initial state, a float64 CPU
// reference of a training step (it checks the kernels), and the same step as one wgalloc
// graph (what the example compares its device-resident step with; the step itself is in
// device-regressor.ts).

import type { Graph, GraphTensor, GraphOp } from 'wgalloc'
import { kernels, launch } from './kernels'
import { mulberry32, uniform, type Rng } from './random'

export const PARAMS = ['w1', 'b1', 'w2', 'b2', 'w3', 'b3'] as const
export type ParamId = (typeof PARAMS)[number]
/** Parameters and Adam's first and second moments, by id (`w1`, `m_w1`, `v_w1`, ...). */
export type State = Record<string, Float32Array>

export interface RegressorShape {
  batch: number
  hidden: number
}

export interface Adam {
  lr: number
  beta1: number
  beta2: number
  eps: number
}

const IN = 2
const F32 = 4

export function paramSizes({ hidden: H }: RegressorShape): Record<ParamId, number> {
  return { w1: IN * H, b1: H, w2: H * H, b2: H, w3: H, b3: 1 }
}

/** The target function the network learns. */
export const target = (x0: number, x1: number): number => Math.sin(3 * x0) * Math.cos(2 * x1)

/** `n` points uniform in [-1, 1]^2 and their targets. */
export function dataset(n: number, next: Rng): { x: Float32Array; y: Float32Array } {
  const x = uniform(next, n * IN, 1)
  const y = new Float32Array(n)
  for (let i = 0; i < n; i++) y[i] = target(x[2 * i], x[2 * i + 1])
  return { x, y }
}

/** Initial parameters (scaled by fan-in) and zero moments. */
export function initialState(s: RegressorShape, seed = 1): State {
  const next = mulberry32(seed)
  const fanIn: Record<ParamId, number> = { w1: IN, b1: IN, w2: s.hidden, b2: s.hidden, w3: s.hidden, b3: s.hidden }
  const state: State = {}
  for (const [id, n] of Object.entries(paramSizes(s)) as [ParamId, number][]) {
    state[id] = uniform(next, n, 1 / Math.sqrt(fanIn[id]))
    state[`m_${id}`] = new Float32Array(n)
    state[`v_${id}`] = new Float32Array(n)
  }
  return state
}

/** Adam's hyper-parameter tensor for step `t` (1-based). */
export function hyper(a: Adam, t: number): Float32Array {
  return Float32Array.of(a.lr, a.beta1, a.beta2, a.eps, 1 - a.beta1 ** t, 1 - a.beta2 ** t, 0, 0)
}

/**
 * One training step as a graph. With `state: 'inputs'` every tensor the step reads (batch,
 * parameters, moments, hyper-parameters) is an input, so the same graph runs eagerly or
 * compiled, and the updated parameters and moments (`<id>_next`) are outputs. With
 * `state: 'external'` the parameters and moments are external tensors: a compiled run binds
 * the caller's blocks and Adam updates them in place (`<id>_next` is a view of `<id>`), so
 * nothing is uploaded or read back but the batch and the loss. Activations and gradients are
 * intermediates: eagerly, each is a heap block from the op that produces it to its last use.
 */
export function trainStepGraph(s: RegressorShape, { state = 'inputs' }: { state?: 'inputs' | 'external' } = {}): Graph {
  const { batch: B, hidden: H } = s
  const t = (id: string, elements: number, kind: GraphTensor['kind'] = 'intermediate'): GraphTensor => ({ id, size: elements * F32, kind, dtype: 'f32' })
  const sizes = paramSizes(s)
  const tensors: GraphTensor[] = [t('x', B * IN, 'input'), t('y', B, 'input'), t('hyper', 8, 'input')]
  const kind = state === 'external' ? 'external' : 'input'
  for (const id of PARAMS) tensors.push(t(id, sizes[id], kind), t(`m_${id}`, sizes[id], kind), t(`v_${id}`, sizes[id], kind))
  // Activations, then gradients.
  tensors.push(t('h1', B * H), t('h2', B * H), t('pred', B), t('dpred', B))
  for (const id of PARAMS) tensors.push(t(`d${id}`, sizes[id]))
  tensors.push(t('dz2', B * H), t('dz1', B * H), t('loss', 1, 'output'))
  for (const id of PARAMS) {
    for (const key of [id, `m_${id}`, `v_${id}`]) {
      // In place: the updated value is the same bytes as the old one (each element is read, then written, by one invocation).
      tensors.push(state === 'external' ? { ...t(`${key}_next`, sizes[id]), viewOf: key } : t(`${key}_next`, sizes[id], 'output'))
    }
  }

  const ops: GraphOp[] = [
    { name: 'fc1', inputs: ['x', 'w1', 'b1'], outputs: ['h1'], ...launch.linear(B, H, IN, 'tanh') },
    { name: 'fc2', inputs: ['h1', 'w2', 'b2'], outputs: ['h2'], ...launch.linear(B, H, H, 'tanh') },
    { name: 'fc3', inputs: ['h2', 'w3', 'b3'], outputs: ['pred'], ...launch.linear(B, 1, H, 'none') },
    { name: 'mse', inputs: ['pred', 'y'], outputs: ['dpred', 'loss'], ...launch.mse(B) },
    { name: 'fc3.grad_w', inputs: ['h2', 'dpred'], outputs: ['dw3', 'db3'], ...launch.linearGradW(B, 1, H) },
    { name: 'fc3.grad_x', inputs: ['dpred', 'w3', 'h2'], outputs: ['dz2'], ...launch.linearGradXTanh(B, 1, H) },
    { name: 'fc2.grad_w', inputs: ['h1', 'dz2'], outputs: ['dw2', 'db2'], ...launch.linearGradW(B, H, H) },
    { name: 'fc2.grad_x', inputs: ['dz2', 'w2', 'h1'], outputs: ['dz1'], ...launch.linearGradXTanh(B, H, H) },
    { name: 'fc1.grad_w', inputs: ['x', 'dz1'], outputs: ['dw1', 'db1'], ...launch.linearGradW(B, H, IN) },
  ]
  for (const id of PARAMS) {
    ops.push({
      name: `adam.${id}`,
      inputs: [id, `d${id}`, `m_${id}`, `v_${id}`, 'hyper'],
      outputs: [`${id}_next`, `m_${id}_next`, `v_${id}_next`],
      ...launch.adam(sizes[id]),
    })
  }
  return { kernels: kernels('linear', 'mse', 'linear_grad_w', 'linear_grad_x_tanh', 'adam'), tensors, ops }
}

// ---- float64 CPU reference ----

/** Predictions of the network for `n` rows of `x`. */
export function predict(s: RegressorShape, w: State, x: Float32Array, n: number): { h1: Float64Array; h2: Float64Array; pred: Float64Array } {
  const H = s.hidden
  const h1 = new Float64Array(n * H)
  const h2 = new Float64Array(n * H)
  const pred = new Float64Array(n)
  for (let m = 0; m < n; m++) {
    for (let j = 0; j < H; j++) {
      let a = w.b1[j]
      for (let k = 0; k < IN; k++) a += x[m * IN + k] * w.w1[k * H + j]
      h1[m * H + j] = Math.tanh(a)
    }
    for (let j = 0; j < H; j++) {
      let a = w.b2[j]
      for (let k = 0; k < H; k++) a += h1[m * H + k] * w.w2[k * H + j]
      h2[m * H + j] = Math.tanh(a)
    }
    let a = w.b3[0]
    for (let k = 0; k < H; k++) a += h2[m * H + k] * w.w3[k]
    pred[m] = a
  }
  return { h1, h2, pred }
}

/** Mean squared error of the network on `n` rows. */
export function mseLoss(s: RegressorShape, w: State, x: Float32Array, y: Float32Array, n: number): number {
  const { pred } = predict(s, w, x, n)
  let sum = 0
  for (let m = 0; m < n; m++) sum += (pred[m] - y[m]) ** 2
  return sum / n
}

/** Loss and gradient of every parameter on one batch. */
export function gradients(s: RegressorShape, w: State, x: Float32Array, y: Float32Array): { loss: number; grads: Record<ParamId, Float64Array> } {
  const { batch: B, hidden: H } = s
  const { h1, h2, pred } = predict(s, w, x, B)
  const sizes = paramSizes(s)
  const g = Object.fromEntries(PARAMS.map((id) => [id, new Float64Array(sizes[id])])) as Record<ParamId, Float64Array>
  let loss = 0
  const dz2 = new Float64Array(H)
  const dz1 = new Float64Array(H)
  for (let m = 0; m < B; m++) {
    const d = pred[m] - y[m]
    loss += d * d
    const dp = (2 * d) / B
    g.b3[0] += dp
    for (let k = 0; k < H; k++) {
      g.w3[k] += h2[m * H + k] * dp
      dz2[k] = dp * w.w3[k] * (1 - h2[m * H + k] ** 2)
    }
    for (let k = 0; k < H; k++) {
      let acc = 0
      for (let n = 0; n < H; n++) {
        g.w2[k * H + n] += h1[m * H + k] * dz2[n]
        acc += dz2[n] * w.w2[k * H + n]
      }
      dz1[k] = acc * (1 - h1[m * H + k] ** 2)
    }
    for (let n = 0; n < H; n++) {
      g.b2[n] += dz2[n]
      g.b1[n] += dz1[n]
      for (let k = 0; k < IN; k++) g.w1[k * H + n] += x[m * IN + k] * dz1[n]
    }
  }
  return { loss: loss / B, grads: g }
}

/** Adam's parameter update from given moments (float64). */
export function adamUpdate(w: Float32Array, m: Float32Array, v: Float32Array, h: Float32Array): Float64Array {
  const [lr, , , eps, bc1, bc2] = h
  return Float64Array.from(w, (wi, i) => wi - (lr * (m[i] / bc1)) / (Math.sqrt(v[i] / bc2) + eps))
}
