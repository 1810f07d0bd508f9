// The paged KV cache through the public API: a decode loop checked against a CPU reference
// (prefill, batched decode, fork, prefix hit, swap), typed refusals with their figures,
// scope charges and tenant isolation of prefixes, and bad input.
import test from 'ava'
import { Registry } from 'prom-client'
import { type DeviceBlock, Gpu, KvCache, type KvSequence, type KvStepEntry, WgallocError, renderHtml } from 'wgalloc'
import { registerMetrics } from 'wgalloc/metrics'
import { gpu, runNode } from './helpers.js'
import { promtoolCheck, samples } from './promtool.js'

const KV_HEADS = 2
const Q_HEADS = 4
const DIM = 16
const WIDTH = KV_HEADS * DIM

let seed = 12345
const rand = (): number => {
  seed = (seed * 1103515245 + 12345) & 0x7fffffff
  return (seed / 0x7fffffff) * 2 - 1
}
const randoms = (n: number): Float32Array => Float32Array.from({ length: n }, rand)

/** A sequence's K/V per layer, one `[kvHeads * headDim]` row per token, as the CPU keeps it. */
interface Reference {
  k: Float32Array[][]
  v: Float32Array[][]
}

function block(g: Gpu, data: Float32Array): DeviceBlock {
  const b = g.heap.malloc(data.byteLength)
  b.write(new Uint8Array(data.buffer, data.byteOffset, data.byteLength))
  return b
}

class Harness {
  readonly refs = new Map<KvSequence, Reference>()
  constructor(
    readonly g: Gpu,
    readonly cache: KvCache,
  ) {}

  track(seq: KvSequence, from?: KvSequence): void {
    const src = from ? this.refs.get(from)! : undefined
    const layers = this.cache.layers
    this.refs.set(seq, {
      k: Array.from({ length: layers }, (_, l) => (src ? src.k[l].slice(0, seq.cachedTokens) : [])),
      v: Array.from({ length: layers }, (_, l) => (src ? src.v[l].slice(0, seq.cachedTokens) : [])),
    })
  }

  /** Writes fresh K/V for each entry's last `tokens` positions (already appended). */
  async write(step: KvStepEntry[]): Promise<void> {
    const s = this.g.createStream()
    const held: DeviceBlock[] = []
    for (let l = 0; l < this.cache.layers; l++) {
      const rows = step.reduce((n, e) => n + e.tokens, 0)
      const k = randoms(rows * WIDTH)
      const v = randoms(rows * WIDTH)
      let r = 0
      for (const e of step) {
        for (let i = 0; i < e.tokens; i++, r++) {
          this.refs.get(e.seq)!.k[l].push(k.subarray(r * WIDTH, (r + 1) * WIDTH))
          this.refs.get(e.seq)!.v[l].push(v.subarray(r * WIDTH, (r + 1) * WIDTH))
        }
      }
      const kb = block(this.g, k)
      const vb = block(this.g, v)
      this.cache.write(s, l, step, kb, vb)
      held.push(kb, vb)
    }
    await s.synchronize()
    for (const b of held) b.free()
  }

  /** Attention of each entry's last `tokens` positions on every layer, against the CPU. Returns the worst error. */
  async check(step: KvStepEntry[]): Promise<number> {
    let worst = 0
    const rows = step.reduce((n, e) => n + e.tokens, 0)
    for (let l = 0; l < this.cache.layers; l++) {
      const q = randoms(rows * Q_HEADS * DIM)
      const qb = block(this.g, q)
      const out = this.g.heap.malloc(q.byteLength)
      const s = this.g.createStream()
      this.cache.attention(s, l, step, qb, out, { queryHeads: Q_HEADS })
      s.submit()
      const got = new Float32Array((await out.read()).buffer.slice(0))
      qb.free()
      out.free()
      let r = 0
      for (const e of step) {
        const ref = this.refs.get(e.seq)!
        const len = ref.k[l].length
        for (let i = 0; i < e.tokens; i++, r++) {
          const visible = len - e.tokens + i + 1
          for (let h = 0; h < Q_HEADS; h++) {
            const kvh = Math.floor(h / (Q_HEADS / KV_HEADS))
            const qv = q.subarray((r * Q_HEADS + h) * DIM, (r * Q_HEADS + h + 1) * DIM)
            const scores = Array.from({ length: visible }, (_, t) => {
              let dot = 0
              for (let d = 0; d < DIM; d++) dot += qv[d] * ref.k[l][t][kvh * DIM + d]
              return dot / Math.sqrt(DIM)
            })
            const m = Math.max(...scores)
            const e2 = scores.map((x) => Math.exp(x - m))
            const sum = e2.reduce((a, b) => a + b, 0)
            for (let d = 0; d < DIM; d++) {
              let want = 0
              for (let t = 0; t < visible; t++) want += e2[t] * ref.v[l][t][kvh * DIM + d]
              worst = Math.max(worst, Math.abs(got[(r * Q_HEADS + h) * DIM + d] - want / sum))
            }
          }
        }
      }
    }
    return worst
  }
}

const tokens = (seq: number, from: number, n: number): number[] => Array.from({ length: n }, (_, i) => seq * 1000 + from + i)

/** Appends `ids` and writes zero K/V for them on every layer: what a step does, without a model. */
function step(g: Gpu, cache: KvCache, seq: KvSequence, ids: number[]): void {
  seq.append(ids)
  const s = g.createStream()
  const kv = g.heap.malloc(ids.length * cache.kvHeads * cache.headDim * 4)
  kv.write(new Uint8Array(kv.requestedSize))
  for (let l = 0; l < cache.layers; l++) cache.write(s, l, [{ seq, tokens: ids.length }], kv, kv)
  s.submit()
  kv.free()
}

for (const dtype of ['f32', 'f16'] as const) {
  test(`decode loop on ${dtype} pools equals the CPU reference`, async (t) => {
    const g = await gpu()
    const cache = g.createKvCache({ layers: 2, kvHeads: KV_HEADS, headDim: DIM, dtype, blockTokens: 4, maxBlocks: 48, maxSequenceLength: 128 })
    const tol = dtype === 'f32' ? 1e-5 : 2e-3
    const h = new Harness(g, cache)
    const a = cache.addSequence()
    const b = cache.addSequence()
    h.track(a)
    h.track(b)
    t.is(a.append(tokens(1, 0, 10)), 10)
    b.append(tokens(2, 0, 3))
    await h.write([
      { seq: a, tokens: 10 },
      { seq: b, tokens: 3 },
    ])
    t.true(
      (await h.check([
        { seq: a, tokens: 10 },
        { seq: b, tokens: 3 },
      ])) <= tol,
      'prefill rows',
    )
    for (let step = 0; step < 4; step++) {
      a.append(tokens(1, a.length, 1))
      b.append(tokens(2, b.length, 1))
      const decode = [
        { seq: a, tokens: 1 },
        { seq: b, tokens: 1 },
      ]
      await h.write(decode)
      t.true((await h.check(decode)) <= tol, `decode step ${step}`)
    }
    // Fork: a's partial block is copied on the first write of the fork.
    const f = a.fork()
    h.refs.set(f, { k: h.refs.get(a)!.k.map((r) => [...r]), v: h.refs.get(a)!.v.map((r) => [...r]) })
    f.append([7])
    await h.write([{ seq: f, tokens: 1 }])
    a.append([8])
    await h.write([{ seq: a, tokens: 1 }])
    t.is(cache.stats().copiesOnWrite, 1)
    t.true(
      (await h.check([
        { seq: a, tokens: 2 },
        { seq: f, tokens: 2 },
      ])) <= tol,
      'fork and original',
    )
    // A prompt starting with a's first 8 tokens takes their two blocks.
    const p = cache.addSequence([...tokens(1, 0, 8), 99, 98])
    t.is(p.cachedTokens, 8)
    t.is(p.length, 8)
    h.track(p, a)
    p.append([99, 98])
    await h.write([{ seq: p, tokens: 2 }])
    t.true((await h.check([{ seq: p, tokens: 10 }])) <= tol, 'prefix hit')
    // Swap b out, let another sequence take blocks, swap it back.
    b.swapOut()
    t.true(b.swapped)
    t.throws(() => b.append([1]), { code: 'INVALID_ARGUMENT', message: /swapped out/ })
    const x = cache.addSequence()
    h.track(x)
    x.append(tokens(3, 0, 30))
    await h.write([{ seq: x, tokens: 30 }])
    await b.swapIn()
    t.false(b.swapped)
    t.true(
      (await h.check([
        { seq: b, tokens: 7 },
        { seq: x, tokens: 1 },
      ])) <= tol,
      'after swap in',
    )
    const st = cache.stats()
    t.is(st.sequences, 5)
    t.is(st.prefixHitTokens, 8)
    t.true(st.swappedOutBlocks >= 2)
    cache.release()
    t.throws(() => a.length, { code: 'USE_AFTER_FREE' })
  })
}

test('a full cache refuses with its figures and changes nothing', async (t) => {
  const g = await gpu()
  const cache = g.createKvCache({ layers: 1, kvHeads: 1, headDim: 8, blockTokens: 4, maxBlocks: 3, maxSequences: 2, maxSequenceLength: 64 })
  const a = cache.addSequence()
  a.append(tokens(1, 0, 10))
  t.false(cache.canAppend([{ seq: a, tokens: 3 }]))
  t.true(cache.canAppend([{ seq: a, tokens: 2 }]))
  const before = cache.stats()
  const err = t.throws(() => a.append([1, 2, 3]), { instanceOf: WgallocError, code: 'KV_CACHE_FULL' })
  if (WgallocError.is(err, 'KV_CACHE_FULL')) t.deepEqual(err.details, { needed: 1, free: 0, evictable: 0, total: 3 })
  t.regex(err!.message, /needs 1 blocks; 0 are free/)
  t.deepEqual(cache.stats(), before)
  t.is(a.length, 10)
  cache.addSequence()
  const rows = t.throws(() => cache.addSequence(), { code: 'KV_CACHE_FULL' })
  if (WgallocError.is(rows, 'KV_CACHE_FULL')) t.is(rows.details?.maxSequences, 2)
  t.throws(() => a.append(new Array(60).fill(0)), { code: 'INVALID_ARGUMENT', message: /exceeds maxSequenceLength 64/ })
  cache.release()
})

test('the cache is charged to its scope, and prefixes stay within a scope unless shared', async (t) => {
  const g = await gpu()
  const tenants = g.heap.scope({ name: 'kv-tenants', limit: 1 << 20 })
  const options = { layers: 1, kvHeads: 1, headDim: 8, blockTokens: 4, maxBlocks: 64, maxSequenceLength: 64 }
  const cache = g.createKvCache({ ...options, scope: tenants })
  t.is(tenants.stats().allocatedBytes, cache.bytes)
  t.throws(() => g.createKvCache({ ...options, maxBlocks: 8000, scope: tenants }), { code: 'QUOTA_EXCEEDED' })
  const a = tenants.scope({ name: 'a', limit: 1024 })
  const b = tenants.scope({ name: 'b', limit: 1024 })
  const prompt = tokens(5, 0, 9)
  const first = cache.addSequence(prompt, { scope: a })
  first.append(prompt)
  t.is(cache.addSequence(prompt, { scope: a }).cachedTokens, 0, 'appended but not written: nothing to share')
  const lookups = cache.stats().prefixQueryTokens
  t.deepEqual(cache.lookup(prompt, { scope: a }), { cachedTokens: 0, fits: true })
  first.free()
  step(g, cache, cache.addSequence(prompt, { scope: a }), prompt)
  t.deepEqual(cache.lookup(prompt, { scope: a }), { cachedTokens: 8, fits: true })
  t.deepEqual(cache.lookup(prompt, { scope: b }), { cachedTokens: 0, fits: true })
  t.is(cache.stats().prefixQueryTokens, lookups + 8, 'lookups count nothing; the addSequence counted 8')
  t.is(cache.addSequence(prompt, { scope: a }).cachedTokens, 8, 'same tenant, written: hit')
  t.is(cache.addSequence(prompt, { scope: b }).cachedTokens, 0, 'another tenant: no hit')
  t.is(cache.addSequence(prompt, { scope: a, salt: 'lora-2' }).cachedTokens, 0, 'another salt: no hit')
  cache.release()
  t.is(tenants.stats().allocatedBytes, 0)
  const shared = g.createKvCache({ ...options, shareAcrossScopes: true })
  step(g, shared, shared.addSequence(prompt, { scope: a }), prompt)
  t.is(shared.addSequence(prompt, { scope: b }).cachedTokens, 8, 'shared across scopes on request')
  shared.release()
})

test('bad input is typed and changes nothing', async (t) => {
  const g = await gpu()
  const opts = { layers: 1, kvHeads: 2, headDim: 8, blockTokens: 4, maxBlocks: 8, maxSequenceLength: 32 }
  const cache = g.createKvCache(opts)
  const other = g.createKvCache(opts)
  const seq = cache.addSequence()
  seq.append([1, 2, 3])
  const foreign = other.addSequence()
  const s = g.createStream()
  const k = g.heap.malloc(3 * 2 * 8 * 4)
  const small = g.heap.malloc(16)
  t.throws(() => cache.write(s, 0, [{ seq: foreign, tokens: 1 }], k, k), { code: 'INVALID_ARGUMENT', message: /another KV cache/ })
  t.throws(() => cache.write(s, 0, [{ seq, tokens: 4 }], k, k), { code: 'INVALID_ARGUMENT', message: /1 to its length 3/ })
  t.throws(() => cache.write(s, 0, [{ seq, tokens: 3 }], small, k), {
    code: 'INVALID_ARGUMENT',
    message: /^write: k: expected a block of at least 192 bytes, got 16 bytes$/,
  })
  t.throws(() => cache.write(s, 1, [{ seq, tokens: 3 }], k, k), {
    code: 'INVALID_ARGUMENT',
    message: /^layer: expected below 1 \(the cache's layers\), got 1$/,
  })
  t.throws(() => cache.attention(s, 0, [{ seq, tokens: 1 }], k, k, { queryHeads: 3 }), { code: 'INVALID_ARGUMENT', message: /multiple of kvHeads/ })
  t.throws(() => cache.write(s, 0, [], k, k), { code: 'INVALID_ARGUMENT' })
  t.throws(() => seq.append([-1]), { code: 'INVALID_ARGUMENT', message: /token 0/ })
  t.throws(() => g.createKvCache({ ...opts, headDim: 300 }), { code: 'INVALID_ARGUMENT', message: /headDim/ })
  t.throws(() => g.createKvCache({ ...opts, maxBytes: 1 << 20 }), { code: 'INVALID_ARGUMENT', message: /exactly one/ })
  t.throws(() => g.createKvCache({ ...opts, dtype: 'f64' as 'f32' }), { code: 'INVALID_ARGUMENT' })
  t.is(seq.length, 3)
  seq.free()
  t.throws(() => seq.append([1]), { code: 'USE_AFTER_FREE' })
  t.throws(() => seq.free(), { code: 'USE_AFTER_FREE' })
  t.is(cache.stats().usedBlocks, 0)
  t.regex(KvCache.kernelSource('attention', { dtype: 'f16' }), /unpack2x16float/)
  k.free()
  small.free()
  cache.release()
  other.release()
})

test('attention softmaxes any finite f32 scale exactly, and refuses one past it', async (t) => {
  const g = await gpu()
  const cache = g.createKvCache({ layers: 1, kvHeads: 1, headDim: 4, blockTokens: 4, maxSequenceLength: 16, maxBlocks: 4 })
  const seq = cache.addSequence()
  seq.append([1, 2])
  const s = g.createStream()
  // Token 0 scores 1 x scale, token 1 scores 2 x scale; their values are 1s and 3s.
  const k = block(g, new Float32Array([1, 0, 0, 0, 2, 0, 0, 0]))
  const v = block(g, new Float32Array([1, 1, 1, 1, 3, 3, 3, 3]))
  const q = block(g, new Float32Array([1, 0, 0, 0]))
  const out = g.heap.malloc(16)
  cache.write(s, 0, [{ seq, tokens: 2 }], k, v)
  const attend = async (scale: number): Promise<number> => {
    cache.attention(s, 0, [{ seq, tokens: 1 }], q, out, { scale })
    await s.synchronize()
    return (await out.read(0, 16, { as: Float32Array }))[0]
  }
  const softmax = (scale: number): number => (1 + 3 * Math.exp(scale)) / (1 + Math.exp(scale))
  t.true(Math.abs((await attend(1)) - softmax(1)) < 1e-5)
  t.is(await attend(0), 2, 'a zero scale averages')
  // 2 x 3e38 is past f32: the largest score wins, as in exact arithmetic.
  t.is(await attend(3e38), 3)
  t.is(await attend(-3e38), 1)
  for (const scale of [1e308, -1e308, Number.NaN, Number.POSITIVE_INFINITY]) {
    t.throws(() => cache.attention(s, 0, [{ seq, tokens: 1 }], q, out, { scale }), { code: 'INVALID_ARGUMENT', message: /options\.scale/ }, String(scale))
  }
  for (const b of [k, v, q, out]) b.free()
  cache.release()
})

test("work recorded on a stream keeps its blocks and rows: a freed sequence's late write lands nowhere else", async (t) => {
  const g = await gpu()
  // One kv head of 4 dims: attention over a sequence whose V rows are all c returns c.
  const cache = g.createKvCache({ layers: 1, kvHeads: 1, headDim: 4, blockTokens: 4, maxSequenceLength: 16, maxBlocks: 2 })
  const rows = (n: number, c: number) => block(g, new Float32Array(n * 4).fill(c))
  const attend = async (seq: KvSequence): Promise<number[]> => {
    const s = g.createStream()
    const q = rows(1, 1)
    const out = g.heap.malloc(16)
    cache.attention(s, 0, [{ seq, tokens: 1 }], q, out)
    s.submit()
    const got = Array.from(await out.read(0, 16, { as: Float32Array }))
    q.free()
    out.free()
    return got
  }
  const s = g.createStream()
  const b = cache.addSequence()
  b.append([5, 6, 7])
  cache.write(s, 0, [{ seq: b, tokens: 3 }], rows(3, 1), rows(3, 7))
  await s.submit().wait()
  b.swapOut()
  // A step for a is recorded, not submitted; the request is cancelled and a freed.
  const a = cache.addSequence()
  a.append([1, 2, 3])
  cache.write(s, 0, [{ seq: a, tokens: 3 }], rows(3, 1), rows(3, 1))
  a.free()
  await b.swapIn() // takes a block, but not the one a's write names
  await s.submit().wait()
  t.deepEqual(await attend(b), [7, 7, 7, 7])

  // A swap-out or a copy-on-write would copy before a recorded write lands: refused until it submits.
  cache.write(s, 0, [{ seq: b, tokens: 1 }], rows(1, 1), rows(1, 7)) // b's last token again, not submitted
  t.throws(() => b.swapOut(), { code: 'INVALID_ARGUMENT', message: /swapOut would copy K\/V that a write recorded on a stream has not submitted yet/ })
  const child = b.fork()
  // The child's first token goes into the block it shares with b: a copy of it, refused for now.
  t.throws(() => child.append([9]), { code: 'INVALID_ARGUMENT', message: /append would copy/ })
  t.is(child.length, 3)
  await s.submit().wait()
  child.append([9])
  cache.write(s, 0, [{ seq: child, tokens: 1 }], rows(1, 1), rows(1, 7))
  await s.submit().wait()
  t.deepEqual(await attend(child), [7, 7, 7, 7])
  b.swapOut()
  await b.swapIn()
  t.deepEqual(await attend(b), [7, 7, 7, 7])
  cache.release()
})

test('admitting and cancelling sequences with no GPU work between keeps memory flat', async (t) => {
  // Block-table writes go through the queue; with no submission they were staged without end
  // (about 2 KB a cycle). Note [Queue writes are flushed] in wgalloc-core's lane.rs.
  const script = `const { Gpu } = require(${JSON.stringify(require.resolve('..'))})
    Gpu.request().then((g) => {
      const cache = g.createKvCache({ layers: 1, kvHeads: 2, headDim: 8, blockTokens: 4, maxBlocks: 32, maxSequenceLength: 64 })
      const cycles = (n) => { for (let i = 0; i < n; i++) { const s = cache.addSequence(); s.append([1, 2, 3, 4, 5, 6]); s.free() } }
      const rss = () => { global.gc(); return process.memoryUsage().rss }
      cycles(5000)
      const before = rss()
      cycles(25000)
      console.log(JSON.stringify({ perCycle: (rss() - before) / 25000 }))
      g.destroy()
    })`
  const r = await runNode(['--expose-gc', '-e', script], { timeoutMs: 120_000 })
  t.is(r.code, 0, r.stderr)
  const { perCycle } = JSON.parse(r.stdout) as { perCycle: number }
  t.true(perCycle < 400, `${perCycle.toFixed(0)} bytes of RSS per admitted and cancelled sequence`)
})

test('operations: metrics per cache, snapshot rows per sequence, the viewer labels its blocks', async (t) => {
  const g = await Gpu.request()
  const registry = new Registry()
  registerMetrics({ main: g }, { registry })
  const tenant = g.heap.scope({ name: 'tenant-x', limit: 1 << 20 })
  const cache = g.createKvCache({ name: 'chat', layers: 2, kvHeads: 1, headDim: 4, blockTokens: 4, maxBlocks: 16, maxSequenceLength: 64 })
  t.throws(() => g.createKvCache({ name: 'chat', layers: 1, kvHeads: 1, headDim: 4, maxBlocks: 1, maxSequenceLength: 4 }), {
    code: 'INVALID_ARGUMENT',
    message: /named 'chat' already/,
  })
  t.deepEqual(
    g.kvCaches().map((c) => c.name),
    ['chat'],
  )
  const prompt = tokens(9, 0, 9)
  const a = cache.addSequence(prompt, { scope: tenant })
  step(g, cache, a, prompt)
  const b = cache.addSequence(prompt, { scope: tenant })
  step(g, cache, b, prompt.slice(b.length))
  const f = a.fork()
  f.swapOut()
  const got = samples(await registry.metrics())
  const s = cache.stats()
  const l = (more = '') => `{device="main",cache="chat"${more}}`
  t.is(got[`wgalloc_kv_cache_blocks${l(',state="used"')}`], s.usedBlocks)
  t.is(got[`wgalloc_kv_cache_blocks${l(',state="free"')}`], s.freeBlocks)
  t.is(got[`wgalloc_kv_cache_usage_ratio${l()}`], s.usedBlocks / 16)
  t.is(got[`wgalloc_kv_cache_sequences${l()}`], 3)
  t.is(got[`wgalloc_kv_cache_swapped_sequences${l()}`], 1)
  t.is(got[`wgalloc_kv_cache_prefix_hit_tokens_total${l()}`], 8)
  t.is(got[`wgalloc_kv_cache_prefix_hit_ratio${l()}`], 0.5)
  t.is(got[`wgalloc_kv_cache_swapped_out_blocks_total${l()}`], 3)
  const check = promtoolCheck(await registry.metrics())
  t.true(check.ok, check.output)
  // The snapshot: which heap blocks are the cache's, and one row per sequence.
  const doc = g.heap.memorySnapshot()
  const kv = doc.kvCaches?.[0]
  t.is(kv?.name, 'chat')
  t.is(kv?.heapBlocks.length, 5, 'K and V of two layers, then the table')
  const live = new Set(doc.segments.flatMap((seg) => seg.blocks.filter((bl) => bl.state === 'active').map((bl) => bl.blockId)))
  for (const id of kv!.heapBlocks) t.true(live.has(id), `heap block ${id} of the cache is live in the snapshot`)
  t.deepEqual(
    kv?.sequences.map((q) => [q.id, q.tokens, q.blocks, q.sharedBlocks, q.swapped, q.scope]),
    [
      [a.id, 9, 3, 2, false, 'tenant-x'],
      [b.id, 9, 3, 2, false, 'tenant-x'],
      [f.id, 9, 0, 0, true, 'tenant-x'],
    ],
  )
  const html = renderHtml(JSON.parse(JSON.stringify(doc)))
  t.true(html.includes("kv 'chat' layer 1 V"), 'pool blocks are labelled')
  t.true(html.includes(`kv 'chat' sequence ${b.id} (tenant-x)`), 'a row per sequence')
  // The leak report names a cache never released and what its sequences still hold.
  t.deepEqual(g.heap.leakReport().kvCaches, [{ name: 'chat', bytes: cache.bytes, sequences: 3, tokens: 18 }])
  cache.release()
  t.is(g.heap.leakReport().kvCaches, undefined)
  t.deepEqual(g.kvCaches(), [])
  t.false((await registry.metrics()).includes('cache="chat"'), 'a released cache leaves the metrics')
  g.destroy()
})
