// WGSL kernels shared by the examples, and the uniform bytes and dispatch sizes of
// each op. Binding convention of wgalloc graphs and of `stream.dispatch`: an op's
// inputs, then its outputs (a dispatch's blocks), all `var<storage, read_write>`, then
// its uniform. Every uniform is four 32-bit words (16 bytes, no padding rules) but
// `adam_inplace`'s, eight.

import type { ComputeKernel, GraphOp, Gpu } from 'wgalloc'

/** Threads per workgroup of the 1-D kernels. */
export const WG = 64
/** 2-D kernels run TILE x TILE workgroups. */
export const TILE = 8

const storage = (names: string[]): string => names.map((n, i) => `@group(0) @binding(${i}) var<storage, read_write> ${n}: array<f32>;`).join('\n')
const uniform = (binding: number): string => `struct P { a: u32, b: u32, c: u32, d: u32 }\n@group(0) @binding(${binding}) var<uniform> p: P;`

/** Activation applied by `linear`, passed in its uniform. */
export const ACT = { none: 0, tanh: 1, gelu: 2 } as const
export type Activation = keyof typeof ACT

const SOURCES: Record<string, string> = {
  // y[m, n] = act(x[m, :] . w[:, n] + b[n]); p = (M, N, K, act). One thread per output.
  linear: `${storage(['x', 'w', 'b', 'y'])}
${uniform(4)}
@compute @workgroup_size(${TILE}, ${TILE}) fn main(@builtin(global_invocation_id) g: vec3u) {
  let n = g.x;
  let m = g.y;
  // Rows: at most p.a, and no more than the bound output holds (one graph serves every batch size).
  if (m >= min(p.a, arrayLength(&y) / p.b) || n >= p.b) { return; }
  var acc = b[n];
  for (var k = 0u; k < p.c; k++) { acc += x[m * p.c + k] * w[k * p.b + n]; }
  if (p.d == 1u) { acc = tanh(clamp(acc, -15.0, 15.0)); }
  if (p.d == 2u) {
    // GELU, tanh approximation; the argument is clamped so tanh never overflows.
    let t = clamp(0.7978845608028654 * (acc + 0.044715 * acc * acc * acc), -10.0, 10.0);
    acc = 0.5 * acc * (1.0 + tanh(t));
  }
  y[m * p.b + n] = acc;
}`,

  // Row-wise softmax with the max subtracted first; p = (rows, cols, -, -). One thread per row.
  softmax: `${storage(['x', 'y'])}
${uniform(2)}
@compute @workgroup_size(${WG}) fn main(@builtin(global_invocation_id) g: vec3u) {
  let r = g.x;
  if (r >= min(p.a, arrayLength(&y) / p.b)) { return; }
  let base = r * p.b;
  var mx = x[base];
  for (var c = 1u; c < p.b; c++) { mx = max(mx, x[base + c]); }
  var sum = 0.0;
  for (var c = 0u; c < p.b; c++) { let e = exp(x[base + c] - mx); y[base + c] = e; sum += e; }
  for (var c = 0u; c < p.b; c++) { y[base + c] /= sum; }
}`,

  // Mean squared error and its gradient: dpred = 2 (pred - expected) / len,
  // loss[0] = mean((pred - expected)^2); p = (len, -, -, -). One workgroup.
  mse: `${storage(['pred', 'expected', 'dpred', 'loss'])}
${uniform(4)}
var<workgroup> partial: array<f32, ${WG}>;
@compute @workgroup_size(${WG}) fn main(@builtin(local_invocation_index) l: u32) {
  let len = p.a;
  var s = 0.0;
  for (var i = l; i < len; i += ${WG}u) {
    let d = pred[i] - expected[i];
    dpred[i] = 2.0 * d / f32(len);
    s += d * d;
  }
  partial[l] = s;
  workgroupBarrier();
  for (var half = ${WG / 2}u; half > 0u; half /= 2u) {
    if (l < half) { partial[l] += partial[l + half]; }
    workgroupBarrier();
  }
  if (l == 0u) { loss[0] = partial[0] / f32(len); }
}`,

  // Weight and bias gradients of a linear layer: dw[k, n] = sum_m x[m, k] dy[m, n],
  // db[n] = sum_m dy[m, n]; p = (M, N, K, -). One thread per weight.
  linear_grad_w: `${storage(['x', 'dy', 'dw', 'db'])}
${uniform(4)}
@compute @workgroup_size(${TILE}, ${TILE}) fn main(@builtin(global_invocation_id) g: vec3u) {
  let n = g.x;
  let k = g.y;
  if (k >= p.c || n >= p.b) { return; }
  var acc = 0.0;
  var bias = 0.0;
  for (var m = 0u; m < p.a; m++) {
    let d = dy[m * p.b + n];
    acc += x[m * p.c + k] * d;
    bias += d;
  }
  dw[k * p.b + n] = acc;
  if (k == 0u) { db[n] = bias; }
}`,

  // Gradient through a linear layer into the tanh before it: dz[m, k] =
  // (sum_n dy[m, n] w[k, n]) (1 - h[m, k]^2), h = tanh output; p = (M, N, K, -).
  linear_grad_x_tanh: `${storage(['dy', 'w', 'h', 'dz'])}
${uniform(4)}
@compute @workgroup_size(${TILE}, ${TILE}) fn main(@builtin(global_invocation_id) g: vec3u) {
  let k = g.x;
  let m = g.y;
  if (m >= p.a || k >= p.c) { return; }
  var acc = 0.0;
  for (var n = 0u; n < p.b; n++) { acc += dy[m * p.b + n] * w[k * p.b + n]; }
  let hv = h[m * p.c + k];
  dz[m * p.c + k] = acc * (1.0 - hv * hv);
}`,

  // Adam (Kingma & Ba): hyper = [lr, beta1, beta2, eps, 1 - beta1^t, 1 - beta2^t];
  // p = (len, -, -, -). One thread per parameter.
  adam: `${storage(['w', 'grad', 'm', 'v', 'hyper', 'w_next', 'm_next', 'v_next'])}
${uniform(8)}
@compute @workgroup_size(${WG}) fn main(@builtin(global_invocation_id) g: vec3u) {
  let i = g.x;
  if (i >= p.a) { return; }
  let gi = grad[i];
  let mi = hyper[1] * m[i] + (1.0 - hyper[1]) * gi;
  let vi = hyper[2] * v[i] + (1.0 - hyper[2]) * gi * gi;
  m_next[i] = mi;
  v_next[i] = vi;
  w_next[i] = w[i] - hyper[0] * (mi / hyper[4]) / (sqrt(vi / hyper[5]) + hyper[3]);
}`,

  // Adam in place, for parameters and moments that live on the device: the same
  // arithmetic as `adam`, with the hyper-parameters in the uniform instead of a tensor
  // (a graph's uniform is four u32 words; a kernel dispatched on heap blocks takes any).
  adam_inplace: `${storage(['w', 'grad', 'm', 'v'])}
struct A { len: u32, lr: f32, beta1: f32, beta2: f32, eps: f32, bc1: f32, bc2: f32, pad: f32 }
@group(0) @binding(4) var<uniform> p: A;
@compute @workgroup_size(${WG}) fn main(@builtin(global_invocation_id) g: vec3u) {
  let i = g.x;
  if (i >= p.len) { return; }
  let gi = grad[i];
  let mi = p.beta1 * m[i] + (1.0 - p.beta1) * gi;
  let vi = p.beta2 * v[i] + (1.0 - p.beta2) * gi * gi;
  m[i] = mi;
  v[i] = vi;
  w[i] = w[i] - p.lr * (mi / p.bc1) / (sqrt(vi / p.bc2) + p.eps);
}`,
}

/** Storage bindings of each kernel: an op's inputs plus outputs, a dispatch's blocks. */
const BINDINGS: Record<string, number> = {
  linear: 4,
  softmax: 2,
  mse: 4,
  linear_grad_w: 4,
  linear_grad_x_tanh: 4,
  adam: 8,
  adam_inplace: 4,
}

/** The named kernels compiled for `stream.dispatch` on heap blocks (all take a uniform). */
export function createKernels<N extends string>(gpu: Gpu, ...names: N[]): Record<N, ComputeKernel> {
  return Object.fromEntries(names.map((name) => [name, gpu.createKernel({ source: SOURCES[name], bindings: BINDINGS[name], uniform: true, name })])) as Record<
    N,
    ComputeKernel
  >
}

/** The `kernels` table of a graph using the named kernels. */
export function kernels(...names: string[]): Record<string, { source: string; entryPoint: string }> {
  return Object.fromEntries(names.map((id) => [id, { source: SOURCES[id], entryPoint: 'main' }]))
}

/** Uniform bytes: four u32 words. */
function words(a: number, b = 0, c = 0, d = 0): Uint8Array {
  return new Uint8Array(Uint32Array.of(a, b, c, d).buffer)
}

const ceil = (a: number, b: number): number => Math.ceil(a / b)

/** How to run an op: fits a `GraphOp` (spread into it) and `stream.dispatch` alike. */
export interface Launch extends Pick<GraphOp, 'kernel' | 'dispatch' | 'params'> {
  kernel: string
  dispatch: [number] | [number, number]
  params: Uint8Array
}

/** `{ kernel, dispatch, params }` of each op kind, from its shapes. */
export const launch = {
  linear: (m: number, n: number, k: number, act: Activation): Launch => ({
    kernel: 'linear',
    dispatch: [ceil(n, TILE), ceil(m, TILE)],
    params: words(m, n, k, ACT[act]),
  }),
  softmax: (rows: number, cols: number): Launch => ({ kernel: 'softmax', dispatch: [ceil(rows, WG)], params: words(rows, cols) }),
  mse: (len: number): Launch => ({ kernel: 'mse', dispatch: [1], params: words(len) }),
  linearGradW: (m: number, n: number, k: number): Launch => ({ kernel: 'linear_grad_w', dispatch: [ceil(n, TILE), ceil(k, TILE)], params: words(m, n, k) }),
  linearGradXTanh: (m: number, n: number, k: number): Launch => ({
    kernel: 'linear_grad_x_tanh',
    dispatch: [ceil(k, TILE), ceil(m, TILE)],
    params: words(m, n, k),
  }),
  adam: (len: number): Launch => ({ kernel: 'adam', dispatch: [ceil(len, WG)], params: words(len) }),
  /** `adam_inplace` over `len` parameters; `hyper` as from the regressor's `hyper()`: [lr, beta1, beta2, eps, 1 - beta1^t, 1 - beta2^t]. */
  adamInPlace: (len: number, hyper: Float32Array): Launch => {
    const u = new DataView(new ArrayBuffer(32))
    u.setUint32(0, len, true)
    for (let i = 0; i < 6; i++) u.setFloat32(4 * (i + 1), hyper[i], true)
    return { kernel: 'adam_inplace', dispatch: [ceil(len, WG)], params: new Uint8Array(u.buffer) }
  },
}
