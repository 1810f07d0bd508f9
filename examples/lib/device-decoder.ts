// The decoder on the GPU: weights are heap blocks for the server's life, and one forward pass
// over a step of the KV cache (prefill chunks and decode rows of many sequences together) is
// WGSL kernels dispatched on heap blocks plus the cache's own `write` and `attention` kernels.
// Activations are malloc'd for the step and freed right after recording: the heap reuses them
// once the step's work ran.

import type { ComputeKernel, DeviceBlock, Gpu, HeapScope, KvCache, KvStepEntry, Stream } from 'wgalloc'
import { RMS_EPS, type DecoderShape, type DecoderWeights } from './decoder'

const WG = 64
const TILE = 8
const F32 = 4

const header = (bindings: string[], uniform: string): string =>
  [
    ...bindings.map((b, i) => `@group(0) @binding(${i}) var<storage, read_write> ${b};`),
    `@group(0) @binding(${bindings.length}) var<uniform> p: ${uniform};`,
  ].join('\n')

const SOURCES = {
  // x[r] = token_embedding[ids[r].token] + position_embedding[ids[r].position].
  embed: `${header(['ids: array<u32>', 'tok: array<f32>', 'pos: array<f32>', 'x: array<f32>'], 'vec4u')}
@compute @workgroup_size(${WG}) fn main(@builtin(global_invocation_id) g: vec3u) {
  let rows = p.x;
  let d = p.y;
  if (g.x >= rows * d) { return; }
  let r = g.x / d;
  let c = g.x % d;
  x[g.x] = tok[ids[2u * r] * d + c] + pos[ids[2u * r + 1u] * d + c];
}`,
  // y[r] = RMSNorm(x[sel[r]]) * gain: the selection picks the rows whose logits a step needs.
  rmsnorm: `${header(['x: array<f32>', 'sel: array<u32>', 'gain: array<f32>', 'y: array<f32>'], 'N')}
struct N { rows: u32, d: u32, eps: f32, pad: u32 }
@compute @workgroup_size(${WG}) fn main(@builtin(global_invocation_id) g: vec3u) {
  let r = g.x;
  if (r >= p.rows) { return; }
  let src = sel[r] * p.d;
  var ss = 0.0;
  for (var c = 0u; c < p.d; c++) { ss += x[src + c] * x[src + c]; }
  let inv = 1.0 / sqrt(ss / f32(p.d) + p.eps);
  for (var c = 0u; c < p.d; c++) { y[r * p.d + c] = x[src + c] * inv * gain[c]; }
}`,
  // y = x W (mode 0), y += x W (mode 1: the residual add), y = gelu(x W) (mode 2); p = (M, N, K, mode).
  matmul: `${header(['x: array<f32>', 'w: array<f32>', 'y: array<f32>'], 'vec4u')}
@compute @workgroup_size(${TILE}, ${TILE}) fn main(@builtin(global_invocation_id) g: vec3u) {
  let n = g.x;
  let m = g.y;
  if (m >= p.x || n >= p.y) { return; }
  var acc = 0.0;
  for (var k = 0u; k < p.z; k++) { acc += x[m * p.z + k] * w[k * p.y + n]; }
  let i = m * p.y + n;
  if (p.w == 1u) { acc += y[i]; }
  if (p.w == 2u) {
    let t = clamp(0.7978845608028654 * (acc + 0.044715 * acc * acc * acc), -10.0, 10.0);
    acc = 0.5 * acc * (1.0 + tanh(t));
  }
  y[i] = acc;
}`,
}

const MODE = { store: 0, add: 1, gelu: 2 } as const

const u32s = (...v: number[]): Uint32Array => Uint32Array.from(v)
const bytes = (a: Float32Array | Uint32Array): Uint8Array => new Uint8Array(a.buffer, a.byteOffset, a.byteLength)

/** One step's rows: `ids` holds (token, position) per row in step order; `logitRows` the rows whose logits are read. */
export interface StepRows {
  ids: Uint32Array
  logitRows: number[]
}

export class DeviceDecoder {
  private readonly k: Record<keyof typeof SOURCES, ComputeKernel>
  private readonly w: { tok: DeviceBlock; pos: DeviceBlock; normOut: DeviceBlock; wOut: DeviceBlock; layers: Record<string, DeviceBlock>[] }

  /** Uploads the weights into blocks of `scope` (the model's quota) and compiles the kernels. */
  constructor(
    readonly gpu: Gpu,
    readonly shape: DecoderShape,
    weights: DecoderWeights,
    scope: HeapScope,
  ) {
    this.k = Object.fromEntries(
      Object.entries(SOURCES).map(([name, source]) => [name, gpu.createKernel({ source, bindings: name === 'matmul' ? 3 : 4, uniform: true, name })]),
    ) as Record<keyof typeof SOURCES, ComputeKernel>
    const upload = (a: Float32Array): DeviceBlock => {
      const b = scope.malloc(a.byteLength)
      b.write(bytes(a))
      return b
    }
    this.w = {
      tok: upload(weights.tokenEmbedding),
      pos: upload(weights.positionEmbedding),
      normOut: upload(weights.normOut),
      wOut: upload(weights.wOut),
      layers: weights.layers.map((l) => Object.fromEntries(Object.entries(l).map(([name, a]) => [name, upload(a)]))),
    }
  }

  /** Device bytes of the weights. */
  get weightBytes(): number {
    const all = [this.w.tok, this.w.pos, this.w.normOut, this.w.wOut, ...this.w.layers.flatMap((l) => Object.values(l))]
    return all.reduce((n, b) => n + b.size, 0)
  }

  /**
   * Records the forward pass of `step` (already appended to `cache`) on `stream` and returns
   * a block of `[rows.logitRows.length][vocab]` logits for the caller to read and free (null
   * when no row needs logits: a step of prefill chunks only).
   */
  forward(stream: Stream, cache: KvCache, step: readonly KvStepEntry[], rows: StepRows): DeviceBlock | null {
    const heap = this.gpu.heap
    const temps: DeviceBlock[] = []
    const alloc = (floats: number): DeviceBlock => {
      const b = heap.malloc(floats * F32)
      temps.push(b)
      return b
    }
    const upload = (a: Uint32Array): DeviceBlock => {
      const b = alloc(a.length)
      b.write(bytes(a))
      return b
    }
    try {
      return this.record(stream, cache, step, rows, alloc, upload)
    } finally {
      // Freed now, reused once the step's work ran (the stream recorded them).
      for (const b of temps) b.free()
    }
  }

  private record(
    stream: Stream,
    cache: KvCache,
    step: readonly KvStepEntry[],
    rows: StepRows,
    alloc: (floats: number) => DeviceBlock,
    upload: (a: Uint32Array) => DeviceBlock,
  ): DeviceBlock | null {
    const s = this.shape
    const R = rows.ids.length / 2
    const D = s.dModel
    const Q = s.queryHeads * s.headDim
    const KV = s.kvHeads * s.headDim
    const matmul = (x: DeviceBlock, w: DeviceBlock, y: DeviceBlock, m: number, n: number, k: number, mode: keyof typeof MODE) =>
      stream.dispatch(this.k.matmul, [x, w, y], [Math.ceil(n / TILE), Math.ceil(m / TILE)], u32s(m, n, k, MODE[mode]))
    const norm = (x: DeviceBlock, sel: DeviceBlock, gain: DeviceBlock, y: DeviceBlock, rowCount: number) => {
      const p = new DataView(new ArrayBuffer(16))
      p.setUint32(0, rowCount, true)
      p.setUint32(4, D, true)
      p.setFloat32(8, RMS_EPS, true)
      stream.dispatch(this.k.rmsnorm, [x, sel, gain, y], Math.ceil(rowCount / WG), new Uint8Array(p.buffer))
    }

    const ids = upload(rows.ids)
    const x = alloc(R * D)
    stream.dispatch(this.k.embed, [ids, this.w.tok, this.w.pos, x], Math.ceil((R * D) / WG), u32s(R, D, 0, 0))
    const every = upload(Uint32Array.from({ length: R }, (_, i) => i))
    const h = alloc(R * D)
    const q = alloc(R * Q)
    const k = alloc(R * KV)
    const v = alloc(R * KV)
    const att = alloc(R * Q)
    const u = alloc(R * s.hidden)
    this.w.layers.forEach((l, layer) => {
      norm(x, every, l.norm1, h, R)
      matmul(h, l.wq, q, R, Q, D, 'store')
      matmul(h, l.wk, k, R, KV, D, 'store')
      matmul(h, l.wv, v, R, KV, D, 'store')
      // Every sequence's new K/V into its blocks, then one attention dispatch for the whole batch.
      cache.write(stream, layer, step, k, v)
      cache.attention(stream, layer, step, q, att, { queryHeads: s.queryHeads })
      matmul(att, l.wo, x, R, D, Q, 'add')
      norm(x, every, l.norm2, h, R)
      matmul(h, l.w1, u, R, s.hidden, D, 'gelu')
      matmul(u, l.w2, x, R, D, s.hidden, 'add')
    })
    const L = rows.logitRows.length
    let logits: DeviceBlock | null = null
    if (L > 0) {
      const last = alloc(L * D)
      norm(x, upload(Uint32Array.from(rows.logitRows)), this.w.normOut, last, L)
      logits = this.gpu.heap.malloc(L * s.vocab * F32)
      matmul(last, this.w.wOut, logits, L, s.vocab, D, 'store')
    }
    return logits
  }

  /** Frees the weights. */
  release(): void {
    for (const b of [this.w.tok, this.w.pos, this.w.normOut, this.w.wOut, ...this.w.layers.flatMap((l) => Object.values(l))]) b.free()
  }
}
