// A small GPT-style decoder: its shape, seeded random weights, and a float32 CPU reference
// (full causal attention over the whole sequence, no cache) that the GPU decode loop is
// checked against. Pre-norm blocks: x += Wo attn(RMSNorm(x)); x += W2 gelu(W1 RMSNorm(x));
// learned token and position embeddings; grouped-query attention; untied output head.

import { mulberry32, uniform } from './random'

export interface DecoderShape {
  vocab: number
  dModel: number
  layers: number
  queryHeads: number
  /** Fewer than `queryHeads`: each K/V head serves `queryHeads / kvHeads` query heads (GQA). */
  kvHeads: number
  headDim: number
  /** MLP hidden width. */
  hidden: number
  /** Positions the position embedding covers: the longest sequence. */
  maxPositions: number
}

export const DEFAULT_SHAPE: DecoderShape = { vocab: 256, dModel: 64, layers: 2, queryHeads: 4, kvHeads: 2, headDim: 16, hidden: 256, maxPositions: 256 }

export interface LayerWeights {
  /** RMSNorm gains before attention and before the MLP, [dModel]. */
  norm1: Float32Array
  norm2: Float32Array
  /** Projections, row-major [in][out] (`y = x W`). */
  wq: Float32Array
  wk: Float32Array
  wv: Float32Array
  wo: Float32Array
  w1: Float32Array
  w2: Float32Array
}

export interface DecoderWeights {
  /** [vocab][dModel] and [maxPositions][dModel]. */
  tokenEmbedding: Float32Array
  positionEmbedding: Float32Array
  layers: LayerWeights[]
  normOut: Float32Array
  /** [dModel][vocab]. */
  wOut: Float32Array
}

export const RMS_EPS = 1e-5

/** Weights from `seed`, scaled so activations keep unit size and logits spread over a few units (few near-ties). */
export function decoderWeights(s: DecoderShape, seed = 1): DecoderWeights {
  const next = mulberry32(seed)
  const u = (n: number, scale: number) => uniform(next, n, scale)
  // uniform(scale) has standard deviation scale / sqrt(3): sqrt(3 / fanIn) keeps unit variance.
  const fan = (fanIn: number, gain = 1) => gain * Math.sqrt(3 / fanIn)
  const gains = (n: number) => Float32Array.from(u(n, 0.1), (v) => 1 + v)
  const D = s.dModel
  const Q = s.queryHeads * s.headDim
  const KV = s.kvHeads * s.headDim
  return {
    tokenEmbedding: u(s.vocab * D, 1),
    positionEmbedding: u(s.maxPositions * D, 0.5),
    layers: Array.from({ length: s.layers }, () => ({
      norm1: gains(D),
      norm2: gains(D),
      // Larger query/key gains make attention peaked rather than a plain average.
      wq: u(D * Q, fan(D, 2)),
      wk: u(D * KV, fan(D, 2)),
      wv: u(D * KV, fan(D)),
      wo: u(Q * D, fan(Q, 0.5)),
      w1: u(D * s.hidden, fan(D)),
      w2: u(s.hidden * D, fan(s.hidden, 0.5)),
    })),
    normOut: gains(D),
    wOut: u(D * s.vocab, fan(D, 2)),
  }
}

/** GELU, tanh approximation; the argument is clamped as the WGSL kernel clamps it. */
export function gelu(a: number): number {
  const t = Math.max(-10, Math.min(10, 0.7978845608028654 * (a + 0.044715 * a * a * a)))
  return 0.5 * a * (1 + Math.tanh(t))
}

/** `rows` x `n` = (`rows` x `k`) (`k` x `n`), each result rounded to float32 as the GPU stores it. */
function matmul(x: Float32Array, w: Float32Array, rows: number, k: number, n: number): Float32Array {
  const y = new Float32Array(rows * n)
  for (let m = 0; m < rows; m++) {
    for (let j = 0; j < n; j++) {
      let acc = 0
      for (let i = 0; i < k; i++) acc += x[m * k + i] * w[i * n + j]
      y[m * n + j] = acc
    }
  }
  return y
}

function rmsNorm(x: Float32Array, g: Float32Array, rows: number, d: number): Float32Array {
  const y = new Float32Array(rows * d)
  for (let m = 0; m < rows; m++) {
    let ss = 0
    for (let c = 0; c < d; c++) ss += x[m * d + c] ** 2
    const inv = 1 / Math.sqrt(ss / d + RMS_EPS)
    for (let c = 0; c < d; c++) y[m * d + c] = x[m * d + c] * inv * g[c]
  }
  return y
}

/** Causal grouped-query attention over the whole sequence: q [n][queryHeads][headDim], k/v [n][kvHeads][headDim]. */
function attention(s: DecoderShape, q: Float32Array, k: Float32Array, v: Float32Array, n: number): Float32Array {
  const { queryHeads: H, kvHeads: KH, headDim: Dh } = s
  const out = new Float32Array(n * H * Dh)
  const scale = 1 / Math.sqrt(Dh)
  const scores = new Float64Array(n)
  for (let t = 0; t < n; t++) {
    for (let h = 0; h < H; h++) {
      const kh = Math.floor(h / (H / KH))
      const qo = (t * H + h) * Dh
      let max = -Infinity
      for (let u = 0; u <= t; u++) {
        let dot = 0
        for (let d = 0; d < Dh; d++) dot += q[qo + d] * k[(u * KH + kh) * Dh + d]
        scores[u] = dot * scale
        max = Math.max(max, scores[u])
      }
      let sum = 0
      for (let u = 0; u <= t; u++) sum += scores[u] = Math.exp(scores[u] - max)
      for (let d = 0; d < Dh; d++) {
        let acc = 0
        for (let u = 0; u <= t; u++) acc += scores[u] * v[(u * KH + kh) * Dh + d]
        out[qo + d] = acc / sum
      }
    }
  }
  return out
}

/**
 * The logits after each position of `tokens` ([n][vocab]): the whole sequence through the
 * model at once, the way a model without a KV cache computes it.
 */
export function referenceLogits(s: DecoderShape, w: DecoderWeights, tokens: readonly number[]): Float32Array {
  const n = tokens.length
  const D = s.dModel
  const x = new Float32Array(n * D)
  tokens.forEach((tok, t) => {
    for (let c = 0; c < D; c++) x[t * D + c] = w.tokenEmbedding[tok * D + c] + w.positionEmbedding[t * D + c]
  })
  const Q = s.queryHeads * s.headDim
  const KV = s.kvHeads * s.headDim
  for (const l of w.layers) {
    const h = rmsNorm(x, l.norm1, n, D)
    const att = attention(s, matmul(h, l.wq, n, D, Q), matmul(h, l.wk, n, D, KV), matmul(h, l.wv, n, D, KV), n)
    const o = matmul(att, l.wo, n, Q, D)
    for (let i = 0; i < x.length; i++) x[i] += o[i]
    const u = matmul(rmsNorm(x, l.norm2, n, D), l.w1, n, D, s.hidden).map(gelu)
    const m = matmul(u, l.w2, n, s.hidden, D)
    for (let i = 0; i < x.length; i++) x[i] += m[i]
  }
  return matmul(rmsNorm(x, w.normOut, n, D), w.wOut, n, D, s.vocab)
}

/** Index of the largest value (the first of equal ones). */
export function argmax(row: ArrayLike<number>): number {
  let best = 0
  for (let i = 1; i < row.length; i++) if (row[i] > row[best]) best = i
  return best
}
