// The paged KV cache: KV memory wasted and sequences served against a fixed budget (paged
// against per-request reservation, in the same run), prefix reuse of a shared system prompt,
// batched paged decode attention against contiguous attention, and the cache's own work per
// token step.
import type { DeviceBlock, Gpu, KvCache, KvSequence } from 'wgalloc'
import { KvCache as KvCacheClass } from 'wgalloc'
import { type Result, SHORT, type Suite } from '../harness.js'

/** Deterministic uniform in [0, 1). */
function rng(seed: number): () => number {
  let s = seed >>> 0 || 1
  return () => {
    s ^= s << 13
    s ^= s >>> 17
    s ^= s << 5
    return (s >>> 0) / 2 ** 32
  }
}

/** A log-normal length with median `median` and shape `sigma`, clamped to [1, max]. */
function logNormal(r: () => number, median: number, sigma: number, max: number): number {
  const z = Math.sqrt(-2 * Math.log(1 - r())) * Math.cos(2 * Math.PI * r())
  return Math.max(1, Math.min(max, Math.round(median * Math.exp(sigma * z))))
}

const BLOCK = 16
const MAX_LEN = 2048
/** KV budget of the serving trace, in tokens. */
const BUDGET_TOKENS = 64 * 1024

interface Request {
  prompt: number
  output: number
}

/** A long-tailed serving trace: prompt and output lengths log-normal, as in public chat traces. */
function trace(n: number, seed: number): Request[] {
  const r = rng(seed)
  return Array.from({ length: n }, () => {
    const prompt = logNormal(r, 160, 1.0, MAX_LEN / 2)
    return { prompt, output: logNormal(r, 120, 1.0, MAX_LEN - prompt) }
  })
}

interface Served {
  /** Reserved minus used over reserved, averaged over the trace's steps (time-weighted). */
  waste: number
  /** The most requests holding KV at once. */
  peak: number
  steps: number
}

/**
 * Continuous batching over `reqs` against a budget: each step admits waiting requests first
 * come first served while `admit` says they fit, then every running request decodes one
 * token; `grow` fails when the cache is short, and the request admitted last is preempted
 * (its KV dropped, to be recomputed when it is admitted again), as vLLM's scheduler does.
 */
function schedule(
  reqs: Request[],
  policy: {
    admit(r: Request): boolean
    start(r: Request): void
    grow(r: Request, len: number): boolean
    finish(r: Request): void
    reserved(): number
  },
): Served {
  const waiting = [...reqs]
  const running: { r: Request; len: number }[] = []
  let peak = 0
  let wasteSum = 0
  let steps = 0
  while (waiting.length || running.length) {
    while (waiting.length && policy.admit(waiting[0])) {
      const r = waiting.shift()!
      policy.start(r)
      running.push({ r, len: r.prompt })
    }
    peak = Math.max(peak, running.length)
    for (let i = 0; i < running.length; i++) {
      const s = running[i]
      if (!policy.grow(s.r, s.len + 1)) {
        const victim = running.pop()!
        policy.finish(victim.r)
        waiting.unshift(victim.r)
        if (victim === s) break
        i--
        continue
      }
      s.len++
    }
    const used = running.reduce((n, s) => n + s.len, 0)
    const reserved = policy.reserved()
    if (reserved > 0) {
      wasteSum += (reserved - used) / reserved
      steps++
    }
    for (let i = running.length - 1; i >= 0; i--) {
      if (running[i].len >= running[i].r.prompt + running[i].r.output) {
        policy.finish(running[i].r)
        running.splice(i, 1)
      }
    }
  }
  return { waste: steps ? wasteSum / steps : 0, peak, steps }
}

/** The paged cache itself, on the device: blocks taken as sequences cross into them. */
function paged(gpu: Gpu, reqs: Request[]): Served {
  const cache = gpu.createKvCache({
    layers: 1,
    kvHeads: 1,
    headDim: 2,
    blockTokens: BLOCK,
    maxBlocks: BUDGET_TOKENS / BLOCK,
    maxSequences: 1024,
    maxSequenceLength: MAX_LEN,
    prefixCaching: false,
  })
  const seqs = new Map<Request, KvSequence>()
  const ids = (n: number) => new Uint32Array(n)
  try {
    return schedule(reqs, {
      admit: (r) => cache.stats().sequences < 1024 && (cache.stats().freeBlocks + cache.stats().cachedBlocks) * BLOCK >= r.prompt + 1,
      start: (r) => {
        const s = cache.addSequence()
        s.append(ids(r.prompt))
        seqs.set(r, s)
      },
      grow: (r) => {
        try {
          seqs.get(r)!.append(ids(1))
          return true
        } catch {
          return false
        }
      },
      finish: (r) => {
        seqs.get(r)!.free()
        seqs.delete(r)
      },
      reserved: () => cache.stats().usedBlocks * BLOCK,
    })
  } finally {
    cache.release()
  }
}

/** Each request reserves `size(r)` tokens at admission (contiguous, as pre-paging servers did). */
function reserving(reqs: Request[], size: (r: Request) => number): Served {
  let reserved = 0
  const held = new Map<Request, number>()
  return schedule(reqs, {
    admit: (r) => reserved + size(r) <= BUDGET_TOKENS,
    start: (r) => {
      held.set(r, size(r))
      reserved += size(r)
    },
    grow: (r, len) => len <= held.get(r)!,
    finish: (r) => {
      reserved -= held.get(r)!
      held.delete(r)
    },
    reserved: () => reserved,
  })
}

const pct = (x: number) => Number((100 * x).toFixed(2))

/** The cost of `n` calls of `fn`, in microseconds each (median of 5 batches). */
function micros(n: number, fn: (i: number) => void): number {
  const samples: number[] = []
  for (let b = 0; b < 5; b++) {
    const t = process.hrtime.bigint()
    for (let i = 0; i < n; i++) fn(i)
    samples.push(Number(process.hrtime.bigint() - t) / 1e3 / n)
  }
  return samples.sort((a, b) => a - b)[2]
}

function f32Block(gpu: Gpu, n: number, r: () => number): DeviceBlock {
  const data = Float32Array.from({ length: n }, () => r() * 2 - 1)
  const b = gpu.heap.malloc(data.byteLength)
  b.write(new Uint8Array(data.buffer))
  return b
}

/** A batch of decode rows over sequences of different lengths, K/V written block by block interleaved. */
async function attentionCost(gpu: Gpu, timeIt: (fn: () => unknown, o?: { runs?: number; warmup?: number }) => Promise<number>): Promise<Result> {
  const r = rng(7)
  const [batch, kvHeads, qHeads, dim, maxLen] = [16, 2, 4, 64, 512]
  const lens = Array.from({ length: batch }, (_, i) => 64 + Math.floor((i * (maxLen - 64)) / (batch - 1)))
  const cache: KvCache = gpu.createKvCache({
    layers: 1,
    kvHeads,
    headDim: dim,
    blockTokens: BLOCK,
    maxBlocks: (batch * maxLen) / BLOCK,
    maxSequenceLength: maxLen,
  })
  const seqs = lens.map(() => cache.addSequence())
  const width = kvHeads * dim
  // Contiguous K/V of the same tokens: [seq][maxLen][kvHeads][dim].
  const kFlat = new Float32Array(batch * maxLen * width)
  const vFlat = new Float32Array(batch * maxLen * width)
  const stream = gpu.createStream()
  const scratch: DeviceBlock[] = []
  for (let filled = 0; filled < maxLen; filled += BLOCK) {
    const step = seqs.map((seq, i) => ({ seq, tokens: Math.max(0, Math.min(BLOCK, lens[i] - filled)) })).filter((e) => e.tokens > 0)
    if (!step.length) break
    const rows = step.reduce((n, e) => n + e.tokens, 0)
    const k = new Float32Array(rows * width).map(() => r() * 2 - 1)
    const v = new Float32Array(rows * width).map(() => r() * 2 - 1)
    let at = 0
    for (const e of step) {
      const i = seqs.indexOf(e.seq)
      e.seq.append(new Uint32Array(e.tokens))
      kFlat.set(k.subarray(at * width, (at + e.tokens) * width), (i * maxLen + filled) * width)
      vFlat.set(v.subarray(at * width, (at + e.tokens) * width), (i * maxLen + filled) * width)
      at += e.tokens
    }
    const kb = gpu.heap.malloc(k.byteLength)
    const vb = gpu.heap.malloc(v.byteLength)
    kb.write(new Uint8Array(k.buffer))
    vb.write(new Uint8Array(v.buffer))
    cache.write(stream, 0, step, kb, vb)
    scratch.push(kb, vb)
  }
  await stream.synchronize()
  for (const b of scratch) b.free()
  const q = f32Block(gpu, batch * qHeads * dim, r)
  const out = gpu.heap.malloc(batch * qHeads * dim * 4)
  const decode = seqs.map((seq) => ({ seq, tokens: 1 }))
  const REPEAT = 4
  const paged = async () => {
    const s = gpu.createStream()
    for (let i = 0; i < REPEAT; i++) cache.attention(s, 0, decode, q, out, { queryHeads: qHeads })
    await s.synchronize()
  }
  // The same kernel reading contiguous K/V: the baseline.
  const contiguous = gpu.createKernel({
    source: KvCacheClass.kernelSource('attention', { layout: 'contiguous' }),
    bindings: 6,
    uniform: true,
    name: 'contiguous_attention',
  })
  const kb = gpu.heap.malloc(kFlat.byteLength)
  const vb = gpu.heap.malloc(vFlat.byteLength)
  kb.write(new Uint8Array(kFlat.buffer))
  vb.write(new Uint8Array(vFlat.buffer))
  const rowsBlock = gpu.heap.malloc(batch * 8)
  rowsBlock.write(new Uint8Array(new Uint32Array(lens.flatMap((len, i) => [i, len])).buffer))
  const uniform = new Uint32Array([batch, qHeads, kvHeads, dim, BLOCK, maxLen, 0, 0])
  new Float32Array(uniform.buffer, 24, 1)[0] = 1 / Math.sqrt(dim)
  const out2 = gpu.heap.malloc(batch * qHeads * dim * 4)
  const flat = async () => {
    const s = gpu.createStream()
    for (let i = 0; i < REPEAT; i++) s.dispatch(contiguous, [q, kb, vb, rowsBlock, rowsBlock, out2], [qHeads, batch, 1], uniform)
    await s.synchronize()
  }
  // Interleaved (A B B A) so that a change of machine load between them hits both alike.
  const [pagedSamples, flatSamples]: number[][] = [[], []]
  for (let round = 0; round < 3; round++) {
    pagedSamples.push(await timeIt(paged, { runs: 3, warmup: 1 }))
    flatSamples.push(await timeIt(flat, { runs: 3, warmup: 1 }))
    flatSamples.push(await timeIt(flat, { runs: 3, warmup: 0 }))
    pagedSamples.push(await timeIt(paged, { runs: 3, warmup: 0 }))
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]
  const pagedMs = median(pagedSamples)
  const contiguousMs = median(flatSamples)
  // Same data, same answer: the comparison is of one computation.
  const [a, b] = [new Float32Array((await out.read()).buffer.slice(0)), new Float32Array((await out2.read()).buffer.slice(0))]
  const maxDiff = a.reduce((m, x, i) => Math.max(m, Math.abs(x - b[i])), 0)
  if (!(maxDiff <= 1e-5)) throw new Error(`paged and contiguous attention differ by ${maxDiff}`)
  for (const blk of [q, out, kb, vb, rowsBlock, out2]) blk.free()
  cache.release()
  return {
    measured: { value: pagedMs / REPEAT, unit: `ms/decode step, ${batch} sequences of 64-512 tokens, paged` },
    baseline: { value: contiguousMs / REPEAT, unit: 'ms', what: 'the same attention over contiguous K/V' },
    ratio: pagedMs / contiguousMs,
    ratioMeaning: 'paged / contiguous time (target <= 1.25)',
    maxDiff,
  }
}

export const suites: Suite[] = [
  {
    name: 'kv-waste-capacity',
    description: 'KV bytes wasted and peak sequences served on a fixed budget: paged vs reserving the maximum length and (oracle) the exact final length',
    async run({ gpu }) {
      const seed = 20261129
      const reqs = trace(SHORT ? 200 : 600, seed)
      const p = paged(gpu, reqs)
      const max = reserving(reqs, () => MAX_LEN)
      const exact = reserving(reqs, (r) => r.prompt + r.output)
      const detail = {
        seed,
        requests: reqs.length,
        budgetTokens: BUDGET_TOKENS,
        blockTokens: BLOCK,
        wastePercent: { paged: pct(p.waste), maxLength: pct(max.waste), exactLength: pct(exact.waste) },
        peakSequences: { paged: p.peak, maxLength: max.peak, exactLength: exact.peak },
      }
      return [
        {
          measured: { value: pct(p.waste), unit: '% KV reserved but unused, paged (16-token blocks)' },
          baseline: { value: pct(max.waste), unit: '%', what: 'reserving the maximum length per request' },
          ratio: p.waste / max.waste,
          ratioMeaning: 'waste paged / max-length (target: paged <= 4%)',
          ...detail,
        },
        {
          measured: { value: p.peak, unit: 'sequences at once at peak, paged' },
          baseline: { value: max.peak, unit: 'sequences', what: 'reserving the maximum length per request' },
          ratio: p.peak / max.peak,
          ratioMeaning: 'peak sequences paged / max-length (target >= 2)',
          ...detail,
        },
      ]
    },
  },
  {
    name: 'kv-prefix-reuse',
    description: 'Requests sharing a 1,000-token system prompt: prefill tokens served from the prefix cache against the most that could be',
    async run({ gpu }) {
      const r = rng(11)
      const system = Array.from({ length: 1000 }, (_, i) => 50_000 + i)
      const cache = gpu.createKvCache({ layers: 1, kvHeads: 1, headDim: 2, blockTokens: BLOCK, maxBlocks: 4096, maxSequenceLength: MAX_LEN })
      let hits = 0
      let most = 0
      let prefill = 0
      for (let i = 0; i < (SHORT ? 20 : 200); i++) {
        const user = Array.from({ length: logNormal(r, 60, 0.8, 500) }, () => Math.floor(r() * 32000))
        const prompt = [...system, ...user]
        const seq = cache.addSequence(prompt)
        hits += seq.cachedTokens
        prefill += prompt.length
        // Once the first request wrote them, every whole block of the system prompt could be shared.
        if (i > 0) most += Math.floor(Math.min(system.length, prompt.length - 1) / BLOCK) * BLOCK
        // Prefill: the rest of the prompt appended and its K/V written (zeros: only sharing is measured).
        const rest = prompt.length - seq.length
        seq.append(prompt.slice(seq.length))
        const s = gpu.createStream()
        const kv = gpu.heap.malloc(rest * 2 * 4)
        kv.write(new Uint8Array(kv.requestedSize))
        cache.write(s, 0, [{ seq, tokens: rest }], kv, kv)
        s.submit()
        kv.free()
        seq.append(new Uint32Array(logNormal(r, 40, 0.8, 200)))
        seq.free()
      }
      const st = cache.stats()
      cache.release()
      return {
        measured: { value: hits, unit: 'prefill tokens served from the prefix cache' },
        baseline: { value: most, unit: 'tokens', what: 'whole blocks of the shared prompt after the first request' },
        ratio: hits / most,
        ratioMeaning: 'served / most that could be (1 = every shareable block)',
        prefillTokens: prefill,
        prefixQueryTokens: st.prefixQueryTokens,
        evictions: st.evictions,
      }
    },
  },
  {
    name: 'kv-attention',
    description: 'Batched paged decode attention against the same kernel over contiguous K/V, same data, same run',
    run: ({ gpu, timeIt }) => attentionCost(gpu, timeIt),
  },
  {
    name: 'kv-bookkeeping',
    description: "The cache's own work per sequence and token step through JS (block allocation, table writes, hashing) against a bare native call",
    async run({ gpu }) {
      const seqsN = 64
      const cache = gpu.createKvCache({
        layers: 1,
        kvHeads: 1,
        headDim: 2,
        blockTokens: BLOCK,
        maxBlocks: 16384,
        maxSequences: seqsN,
        maxSequenceLength: MAX_LEN,
      })
      const seqs = Array.from({ length: seqsN }, () => cache.addSequence())
      const token = [1]
      let step = 0
      const perAppend = micros(seqsN * 24, (i) => {
        const s = seqs[i % seqsN]
        if (s.length >= MAX_LEN - 1) {
          s.free()
          seqs[i % seqsN] = cache.addSequence()
        }
        token[0] = step++ & 0xffff
        s.append(token)
      })
      const bare = micros(seqsN * 24, (i) => seqs[i % seqsN].length)
      cache.release()
      return {
        measured: { value: perAppend, unit: 'us per sequence per token step (append through JS)' },
        baseline: { value: bare, unit: 'us', what: 'a bare native getter (seq.length)' },
        ratio: perAppend / bare,
        ratioMeaning: 'append / bare native call',
      }
    },
  },
]
