// CPU reference of the demo block: plain loops, the same math as the WGSL
// kernels, accumulated in float64 so it measures the GPU's f32 error.
import { type DemoData, EPS, type Shapes } from './model.js'

type Vec = ArrayLike<number>

function layernorm(x: Vec, gamma: Vec, beta: Vec, rows: number, cols: number): Float64Array {
  const y = new Float64Array(rows * cols)
  for (let r = 0; r < rows; r++) {
    const base = r * cols
    let mean = 0
    for (let c = 0; c < cols; c++) mean += x[base + c]
    mean /= cols
    let v = 0
    for (let c = 0; c < cols; c++) v += (x[base + c] - mean) ** 2
    const inv = 1 / Math.sqrt(v / cols + EPS)
    for (let c = 0; c < cols; c++) y[base + c] = (x[base + c] - mean) * inv * gamma[c] + beta[c]
  }
  return y
}

/** a[m, k] @ b[k, n] + bias[n] */
function matmul(a: Vec, b: Vec, bias: Vec, m: number, n: number, k: number): Float64Array {
  const c = new Float64Array(m * n)
  for (let i = 0; i < m; i++) {
    for (let j = 0; j < n; j++) {
      let acc = 0
      for (let t = 0; t < k; t++) acc += a[i * k + t] * b[t * n + j]
      c[i * n + j] = acc + bias[j]
    }
  }
  return c
}

/** Scaled dot-product attention per head; q, k, v and the result are [seq, heads * headDim]. */
function attention(q: Vec, k: Vec, v: Vec, seq: number, heads: number, headDim: number): Float64Array {
  const dim = heads * headDim
  const scale = 1 / Math.sqrt(headDim)
  const out = new Float64Array(seq * dim)
  const p = new Float64Array(seq)
  for (let h = 0; h < heads; h++) {
    for (let i = 0; i < seq; i++) {
      let max = -Infinity
      for (let j = 0; j < seq; j++) {
        let acc = 0
        for (let d = 0; d < headDim; d++) acc += q[i * dim + h * headDim + d] * k[j * dim + h * headDim + d]
        p[j] = acc * scale
        max = Math.max(max, p[j])
      }
      let sum = 0
      for (let j = 0; j < seq; j++) sum += p[j] = Math.exp(p[j] - max)
      for (let d = 0; d < headDim; d++) {
        let acc = 0
        for (let j = 0; j < seq; j++) acc += p[j] * v[j * dim + h * headDim + d]
        out[i * dim + h * headDim + d] = acc / sum
      }
    }
  }
  return out
}

const gelu = (x: Float64Array) => x.map((v) => 0.5 * v * (1 + Math.tanh(Math.max(-10, Math.min(10, 0.7978845608028654 * (v + 0.044715 * v ** 3))))))
const add = (a: Float64Array, b: Vec) => a.map((v, i) => v + b[i])

/** The block's output for input `x` (Float32Array [seq, dim]) and `params`. */
export function reference(s: Shapes, { params: w, inputs: { x } }: DemoData): Float64Array {
  const { seq, dim, heads, headDim, hidden } = s
  const ln1 = layernorm(x, w.ln1_g, w.ln1_b, seq, dim)
  const q = matmul(ln1, w.w_q, w.b_q, seq, dim, dim)
  const k = matmul(ln1, w.w_k, w.b_k, seq, dim, dim)
  const v = matmul(ln1, w.w_v, w.b_v, seq, dim, dim)
  const attn = attention(q, k, v, seq, heads, headDim)
  const res1 = add(Float64Array.from(x), matmul(attn, w.w_o, w.b_o, seq, dim, dim))
  const ln2 = layernorm(res1, w.ln2_g, w.ln2_b, seq, dim)
  const ff = gelu(matmul(ln2, w.w_1, w.b_1, seq, hidden, dim))
  return add(res1, matmul(ff, w.w_2, w.b_2, seq, dim, hidden))
}
