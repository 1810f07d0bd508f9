// WGSL kernels of the demo transformer block, and the uniform bytes and
// dispatch sizes of each op. Binding convention (see js/exec.ts): the op's
// inputs, then its outputs, all `read_write` storage (every tensor lives in one
// slab buffer), then the op's uniform. Every uniform is four 32-bit words so
// it needs no padding rules.

import type { Dispatch, GraphKernel } from '../graph.js'

/** What an op of each kind launches: kernel, workgroups and uniform bytes. */
export interface Launch {
  kernel: string
  dispatch: Dispatch
  params: Uint8Array
}

const WG = 64 // threads per workgroup of the 1-D kernels
const TILE = 8 // matmul and attention workgroups are TILE x TILE
const BLOCK = 4 // outputs per matmul thread in each direction
const MAX_GROUPS = 65535 // WebGPU's guaranteed maxComputeWorkgroupsPerDimension

const storage = (names: string[]) => names.map((n, i) => `@group(0) @binding(${i}) var<storage, read_write> ${n}: array<f32>;`).join('\n')
const uniform = (binding: number, fields: string) => `struct P { ${fields} }\n@group(0) @binding(${binding}) var<uniform> p: P;`

// 1-D kernels may need more than 65535 workgroups: they spread over x and y.
const FLAT = 'let i = g.x + g.y * n.x * ' + WG + 'u;'

export const SOURCES: Record<string, string> = {
  // y[r, :] = (x[r, :] - mean) / sqrt(var + eps) * gamma + beta; one thread per row.
  layernorm: `${storage(['x', 'gamma', 'beta', 'y'])}
${uniform(4, 'rows: u32, cols: u32, eps: f32, pad: u32')}
@compute @workgroup_size(${WG}) fn main(@builtin(global_invocation_id) g: vec3u, @builtin(num_workgroups) n: vec3u) {
  ${FLAT}
  if (i >= p.rows) { return; }
  let base = i * p.cols;
  var mean = 0.0;
  for (var c = 0u; c < p.cols; c++) { mean += x[base + c]; }
  mean /= f32(p.cols);
  var v = 0.0;
  for (var c = 0u; c < p.cols; c++) { let d = x[base + c] - mean; v += d * d; }
  let inv = inverseSqrt(v / f32(p.cols) + p.eps);
  for (var c = 0u; c < p.cols; c++) { y[base + c] = (x[base + c] - mean) * inv * gamma[c] + beta[c]; }
}`,

  // c[M, N] = a[M, K] @ b[K, N] + bias[N]. Each thread computes a 4 x 4 block,
  // so every value it loads feeds four multiply-adds (4x fewer loads than one
  // output per thread, which matters on CPU adapters like lavapipe). Reads past
  // the edges are clamped to a valid index and their results never written.
  matmul: `${storage(['a', 'b', 'bias', 'c'])}
${uniform(4, 'm: u32, n: u32, k: u32, pad: u32')}
@compute @workgroup_size(${TILE}, ${TILE}) fn main(@builtin(global_invocation_id) g: vec3u) {
  let row0 = g.y * ${BLOCK}u;
  let col0 = g.x * ${BLOCK}u;
  if (row0 >= p.m || col0 >= p.n) { return; }
  let rows = min(vec4u(row0) + vec4u(0u, 1u, 2u, 3u), vec4u(p.m - 1u));
  let cols = min(vec4u(col0) + vec4u(0u, 1u, 2u, 3u), vec4u(p.n - 1u));
  var acc: array<vec4f, 4>;
  for (var t = 0u; t < p.k; t++) {
    let bt = vec4f(b[t * p.n + cols.x], b[t * p.n + cols.y], b[t * p.n + cols.z], b[t * p.n + cols.w]);
    acc[0] += a[rows.x * p.k + t] * bt;
    acc[1] += a[rows.y * p.k + t] * bt;
    acc[2] += a[rows.z * p.k + t] * bt;
    acc[3] += a[rows.w * p.k + t] * bt;
  }
  let bias4 = vec4f(bias[cols.x], bias[cols.y], bias[cols.z], bias[cols.w]);
  for (var r = 0u; r < ${BLOCK}u; r++) {
    let row = row0 + r;
    if (row >= p.m) { break; }
    let v = acc[r] + bias4;
    for (var j = 0u; j < ${BLOCK}u; j++) {
      if (col0 + j < p.n) { c[row * p.n + col0 + j] = v[j]; }
    }
  }
}`,

  // s[h, i, j] = scale * q[i, h, :] . k[j, h, :]; q and k are [seq, heads * headDim].
  attn_scores: `${storage(['q', 'k', 's'])}
${uniform(3, 'seq: u32, heads: u32, head_dim: u32, scale: f32')}
@compute @workgroup_size(${TILE}, ${TILE}) fn main(@builtin(global_invocation_id) g: vec3u) {
  let j = g.x;
  let i = g.y;
  let h = g.z;
  if (i >= p.seq || j >= p.seq) { return; }
  let dim = p.heads * p.head_dim;
  let qi = i * dim + h * p.head_dim;
  let kj = j * dim + h * p.head_dim;
  var acc = 0.0;
  for (var d = 0u; d < p.head_dim; d++) { acc += q[qi + d] * k[kj + d]; }
  s[(h * p.seq + i) * p.seq + j] = acc * p.scale;
}`,

  // Row-wise softmax, max subtracted first; one thread per row.
  softmax: `${storage(['x', 'y'])}
${uniform(2, 'rows: u32, cols: u32, pad0: u32, pad1: u32')}
@compute @workgroup_size(${WG}) fn main(@builtin(global_invocation_id) g: vec3u, @builtin(num_workgroups) n: vec3u) {
  ${FLAT}
  if (i >= p.rows) { return; }
  let base = i * p.cols;
  var m = x[base];
  for (var c = 1u; c < p.cols; c++) { m = max(m, x[base + c]); }
  var sum = 0.0;
  for (var c = 0u; c < p.cols; c++) { let e = exp(x[base + c] - m); y[base + c] = e; sum += e; }
  let inv = 1.0 / sum;
  for (var c = 0u; c < p.cols; c++) { y[base + c] *= inv; }
}`,

  // o[i, h, d] = sum_j probs[h, i, j] * v[j, h, d]; o is [seq, heads, headDim].
  attn_values: `${storage(['probs', 'v', 'o'])}
${uniform(3, 'seq: u32, heads: u32, head_dim: u32, pad: u32')}
@compute @workgroup_size(${TILE}, ${TILE}) fn main(@builtin(global_invocation_id) g: vec3u) {
  let d = g.x;
  let i = g.y;
  let h = g.z;
  if (i >= p.seq || d >= p.head_dim) { return; }
  let dim = p.heads * p.head_dim;
  let prow = (h * p.seq + i) * p.seq;
  var acc = 0.0;
  for (var j = 0u; j < p.seq; j++) { acc += probs[prow + j] * v[j * dim + h * p.head_dim + d]; }
  o[i * dim + h * p.head_dim + d] = acc;
}`,

  // GELU, tanh approximation; the tanh argument is clamped because some
  // drivers compute tanh through exp and overflow to NaN for large inputs.
  gelu: `${storage(['x', 'y'])}
${uniform(2, 'len: u32, pad0: u32, pad1: u32, pad2: u32')}
@compute @workgroup_size(${WG}) fn main(@builtin(global_invocation_id) g: vec3u, @builtin(num_workgroups) n: vec3u) {
  ${FLAT}
  if (i >= p.len) { return; }
  let v = x[i];
  let t = clamp(0.7978845608028654 * (v + 0.044715 * v * v * v), -10.0, 10.0);
  y[i] = 0.5 * v * (1.0 + tanh(t));
}`,

  add: `${storage(['a', 'b', 'c'])}
${uniform(3, 'len: u32, pad0: u32, pad1: u32, pad2: u32')}
@compute @workgroup_size(${WG}) fn main(@builtin(global_invocation_id) g: vec3u, @builtin(num_workgroups) n: vec3u) {
  ${FLAT}
  if (i >= p.len) { return; }
  c[i] = a[i] + b[i];
}`,
}

/** The graph's `kernels` table. */
export function kernels(): Record<string, GraphKernel> {
  return Object.fromEntries(Object.entries(SOURCES).map(([id, source]) => [id, { source, entryPoint: 'main' }]))
}

/** Uniform bytes: four words, each a u32 (integer) or an f32 ({ f32: x }). */
function words(...values: (number | { f32: number })[]): Uint8Array {
  const buf = new ArrayBuffer(16)
  const view = new DataView(buf)
  values.forEach((v, i) => {
    if (typeof v === 'object') view.setFloat32(i * 4, v.f32, true)
    else view.setUint32(i * 4, v, true)
  })
  return new Uint8Array(buf)
}

const ceil = (a: number, b: number) => Math.ceil(a / b)

/** Workgroups for `count` threads of a 1-D kernel, spread over y past 65535. */
function grid1d(count: number): Dispatch {
  const groups = ceil(count, WG)
  if (groups <= MAX_GROUPS) return [groups]
  const y = ceil(groups, MAX_GROUPS)
  return [ceil(groups, y), y]
}

/** { kernel, dispatch, params } of each op kind, from its shapes. */
export const launch = {
  layernorm: (rows: number, cols: number, eps: number): Launch => ({ kernel: 'layernorm', dispatch: grid1d(rows), params: words(rows, cols, { f32: eps }, 0) }),
  matmul: (m: number, n: number, k: number): Launch => ({
    kernel: 'matmul',
    dispatch: [ceil(n, TILE * BLOCK), ceil(m, TILE * BLOCK)],
    params: words(m, n, k, 0),
  }),
  attnScores: (seq: number, heads: number, headDim: number): Launch => ({
    kernel: 'attn_scores',
    dispatch: [ceil(seq, TILE), ceil(seq, TILE), heads],
    params: words(seq, heads, headDim, { f32: 1 / Math.sqrt(headDim) }),
  }),
  softmax: (rows: number, cols: number): Launch => ({ kernel: 'softmax', dispatch: grid1d(rows), params: words(rows, cols, 0, 0) }),
  attnValues: (seq: number, heads: number, headDim: number): Launch => ({
    kernel: 'attn_values',
    dispatch: [ceil(headDim, TILE), ceil(seq, TILE), heads],
    params: words(seq, heads, headDim, 0),
  }),
  gelu: (len: number): Launch => ({ kernel: 'gelu', dispatch: grid1d(len), params: words(len, 0, 0, 0) }),
  add: (len: number): Launch => ({ kernel: 'add', dispatch: grid1d(len), params: words(len, 0, 0, 0) }),
}
