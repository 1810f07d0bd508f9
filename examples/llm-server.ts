// An LLM decode server on WGSL kernels and the paged KV cache. A small GPT-style decoder
// (random weights from --seed; learned positions, RMSNorm, grouped-query attention, a GELU
// MLP, greedy argmax) runs on heap blocks; its K/V live in `gpu.createKvCache()`. One loop
// batches continuously: each step decodes a token for every running sequence, continues or
// starts prefills (chunked to --step-tokens), and runs all of it as one forward pass with one
// `cache.attention` dispatch per layer. A prompt that starts with a system prompt another
// request of its tenant sent takes that prefix's K/V from the prefix cache and skips its
// prefill. When the cache cannot grow the running sequences, the newest is preempted:
// freed and requeued, then recomputed (its full blocks are usually still cached).
// Tenants are heap scopes: prefixes are shared only within one; with --tenant-kv-bytes each
// request charges its tenant for the KV blocks it may hold (past it, 429 QUOTA_EXCEEDED).
//
//   npm run examples:build
//   node examples/build/llm-server.js --port 8080
//   curl -s localhost:8080/generate -d '{"prompt": [1, 2, 3], "maxTokens": 8, "tenant": "a"}'
//   node examples/build/llm-server.js --check --requests 24 --concurrency 8 [--json]
//
// Routes: POST /generate {"prompt": [token ids], "maxTokens": n, "tenant"?: "a", "logits"?: true}
// -> {"tokens": [...], "cachedTokens": n, "preemptions": n, "logits"?: [[...vocab floats]]};
// GET /stats; GET /metrics (Prometheus: wgalloc's heap and KV cache metrics, the cache's blocks,
// prefix hits, evictions and swaps under cache="llm", and the batcher's llm_*); GET /healthz.
// Options: --port 8080 --host 127.0.0.1 --seed 1 --layers 2 --block-tokens 16 --kv-blocks 128
// --max-batch 16 --step-tokens 128 --max-sequence 256 --max-tenants 16 --tenant-kv-bytes (none);
// check: --check --requests 24 --concurrency 8 --system-tokens 32 --tenants a,b
// --tolerance 1e-3 --json. The check fires the requests at the server in-process and verifies
// every generated token and its logits against a CPU reference without a cache.

import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import { parseArgs } from 'node:util'
import { Registry } from 'prom-client'
import { Gpu, type HeapScope, WgallocError } from 'wgalloc'
import { registerMetrics } from 'wgalloc/metrics'
import { formatBytes, intOption, numberOption, runMain } from './lib/cli'
import { Batcher } from './lib/batcher'
import { DEFAULT_SHAPE, type DecoderShape, decoderWeights } from './lib/decoder'
import { DeviceDecoder } from './lib/device-decoder'
import { HttpError, readJson, send } from './lib/http'
import { type CheckRequest, checkRequests, type Verdict, verify } from './lib/llm-check'
import { registerLlmMetrics } from './lib/llm-metrics'

const MAX_BODY = 1 << 20
const TENANT = /^[A-Za-z0-9_-]{1,32}$/

interface Service {
  shape: DecoderShape
  batcher: Batcher
  /** The heap scope of a tenant, created on its first request. */
  tenant: (name: string) => HeapScope
  /** Device bytes of the KV blocks a request of `tokens` tokens may hold (0: no tenant quota). */
  kvBytes: (tokens: number) => number
  maxSequence: number
  metrics: Registry
  stats: () => unknown
}

interface GenerateBody {
  prompt: number[]
  maxTokens: number
  tenant?: string
  logits: boolean
}

function parseGenerate(body: unknown, svc: Service): GenerateBody {
  const b = (body ?? {}) as Record<string, unknown>
  const { prompt, maxTokens, tenant } = b
  const V = svc.shape.vocab
  if (!Array.isArray(prompt) || prompt.length < 1 || !prompt.every((t) => Number.isInteger(t) && t >= 0 && t < V))
    throw new HttpError(400, 'INVALID_ARGUMENT', `"prompt" must be a non-empty array of token ids in [0, ${V})`)
  if (!Number.isInteger(maxTokens) || (maxTokens as number) < 1) throw new HttpError(400, 'INVALID_ARGUMENT', '"maxTokens" must be a positive integer')
  // The last generated token is never fed back: prompt + maxTokens - 1 positions.
  if (prompt.length + (maxTokens as number) - 1 > svc.maxSequence)
    throw new HttpError(400, 'INVALID_ARGUMENT', `prompt length + maxTokens - 1 must be at most ${svc.maxSequence}`)
  if (tenant !== undefined && (typeof tenant !== 'string' || !TENANT.test(tenant)))
    throw new HttpError(400, 'INVALID_ARGUMENT', '"tenant" must be 1 to 32 letters, digits, "_" or "-"')
  return { prompt: prompt as number[], maxTokens: maxTokens as number, tenant: tenant as string | undefined, logits: b.logits === true }
}

async function generate(svc: Service, body: GenerateBody) {
  const scope = body.tenant === undefined ? undefined : svc.tenant(body.tenant)
  // The tenant's quota covers the blocks the request may hold at its longest.
  let charge: { release(): void } | undefined
  try {
    const bytes = svc.kvBytes(body.prompt.length + body.maxTokens - 1)
    if (bytes > 0) charge = scope?.charge(bytes)
  } catch (err) {
    if (err instanceof WgallocError && err.code === 'QUOTA_EXCEEDED') throw new HttpError(429, err.code, err.message)
    throw err
  }
  try {
    const g = await svc.batcher.generate({ prompt: body.prompt, maxTokens: body.maxTokens, scope, keepLogits: body.logits })
    return { tokens: g.tokens, cachedTokens: g.cachedTokens, preemptions: g.preemptions, ...(g.logits ? { logits: g.logits.map((l) => Array.from(l)) } : {}) }
  } finally {
    charge?.release()
  }
}

async function route(svc: Service, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const path = (req.url ?? '/').split('?')[0]
  if (path === '/healthz' && req.method === 'GET') return send(res, 200, { ok: true })
  if (path === '/stats' && req.method === 'GET') return send(res, 200, svc.stats())
  if (path === '/metrics' && req.method === 'GET') {
    const text = await svc.metrics.metrics()
    res.writeHead(200, { 'content-type': svc.metrics.contentType, 'content-length': Buffer.byteLength(text) })
    res.end(text)
    return
  }
  if (path !== '/generate') throw new HttpError(404, 'NOT_FOUND', `no route ${path}`)
  if (req.method !== 'POST') throw new HttpError(405, 'METHOD_NOT_ALLOWED', 'POST a JSON body to /generate')
  send(res, 200, await generate(svc, parseGenerate(await readJson(req, MAX_BODY), svc)))
}

function serve(svc: Service): Server {
  return createServer((req, res) => {
    route(svc, req, res).catch((err: unknown) => {
      const status = err instanceof HttpError ? err.status : 500
      const code = err instanceof HttpError || err instanceof WgallocError ? err.code : 'INTERNAL'
      if (!res.headersSent) send(res, status, { error: { code, message: (err as Error).message } })
    })
  })
}

interface GenerateReply {
  tokens: number[]
  cachedTokens: number
  logits: number[][]
}

/** Fires `requests` at the server, `concurrency` at a time, and verifies every reply against the CPU. */
async function check(port: number, requests: CheckRequest[], concurrency: number, verdict: (r: CheckRequest, reply: GenerateReply) => Verdict) {
  const replies: (GenerateReply | { error: string })[] = new Array(requests.length)
  let next = 0
  const started = performance.now()
  await Promise.all(
    Array.from({ length: Math.min(concurrency, requests.length) }, async () => {
      while (next < requests.length) {
        const i = next++
        const res = await fetch(`http://127.0.0.1:${port}/generate`, { method: 'POST', body: JSON.stringify({ ...requests[i], logits: true }) })
        replies[i] = res.ok ? ((await res.json()) as GenerateReply) : { error: `${res.status} ${await res.text()}` }
      }
    }),
  )
  const wallMs = performance.now() - started
  const total: Verdict & { tokens: number; failed: string[] } = { mismatches: 0, nearTies: 0, maxLogitError: 0, tokens: 0, failed: [] }
  replies.forEach((reply, i) => {
    if ('error' in reply) {
      total.failed.push(`request ${i}: ${reply.error}`)
      return
    }
    const v = verdict(requests[i], reply)
    total.mismatches += v.mismatches
    total.nearTies += v.nearTies
    total.maxLogitError = Math.max(total.maxLogitError, v.maxLogitError)
    total.tokens += reply.tokens.length
  })
  return { wallMs, ...total }
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      port: { type: 'string' },
      host: { type: 'string', default: '127.0.0.1' },
      seed: { type: 'string' },
      layers: { type: 'string' },
      'block-tokens': { type: 'string' },
      'kv-blocks': { type: 'string' },
      'max-batch': { type: 'string' },
      'step-tokens': { type: 'string' },
      'max-sequence': { type: 'string' },
      'max-tenants': { type: 'string' },
      'tenant-kv-bytes': { type: 'string' },
      check: { type: 'boolean', default: false },
      requests: { type: 'string' },
      concurrency: { type: 'string' },
      'system-tokens': { type: 'string' },
      tenants: { type: 'string', default: 'a,b' },
      tolerance: { type: 'string' },
      json: { type: 'boolean', default: false },
    },
  })
  const seed = intOption('seed', values.seed, 1, 0)
  const maxSequence = intOption('max-sequence', values['max-sequence'], 256, 2, 4096)
  const shape: DecoderShape = { ...DEFAULT_SHAPE, layers: intOption('layers', values.layers, DEFAULT_SHAPE.layers, 1, 64), maxPositions: maxSequence }
  const blockTokens = intOption('block-tokens', values['block-tokens'], 16, 1, 1024)
  const kvBlocks = intOption('kv-blocks', values['kv-blocks'], 128, 1)
  const maxBatch = intOption('max-batch', values['max-batch'], 16, 1, 1024)
  const stepTokens = intOption('step-tokens', values['step-tokens'], 128, 1)
  const maxTenants = intOption('max-tenants', values['max-tenants'], 16, 0)
  const log = values.json ? () => {} : console.log
  // A request must fit the cache on its own, or preemption could never make room for it.
  const maxSeq = Math.min(maxSequence, kvBlocks * blockTokens)

  const gpu = await Gpu.request()
  let server: Server | undefined
  let batcher: Batcher | undefined
  try {
    // The model's weights and the KV pools each under a scope of their own (heap metrics name them).
    const weights = decoderWeights(shape, seed)
    const model = new DeviceDecoder(gpu, shape, weights, gpu.heap.scope({ name: 'model', limit: 64 << 20 }))
    const cache = gpu.createKvCache({
      layers: shape.layers,
      kvHeads: shape.kvHeads,
      headDim: shape.headDim,
      blockTokens,
      maxBlocks: kvBlocks,
      maxSequences: maxBatch,
      maxSequenceLength: maxSequence,
      scope: gpu.heap.scope({ name: 'kv-cache', limit: 1 << 30 }),
      name: 'llm', // the `cache` label of wgalloc_kv_cache_* metrics
    })
    const blockBytes = shape.layers * 2 * blockTokens * shape.kvHeads * shape.headDim * 4
    // A tenant quota, when given, is charged per request queued or running (shared prefixes counted in each).
    const tenantKvBytes = values['tenant-kv-bytes'] === undefined ? undefined : intOption('tenant-kv-bytes', values['tenant-kv-bytes'], 0)
    const tenants = new Map<string, HeapScope>()
    const tenant = (name: string): HeapScope => {
      let scope = tenants.get(name)
      if (!scope) {
        if (tenants.size >= maxTenants) throw new HttpError(429, 'TOO_MANY_TENANTS', `at most ${maxTenants} tenants`)
        scope = gpu.heap.scope({ name: `tenant-${name}`, limit: tenantKvBytes ?? 1 << 30 })
        tenants.set(name, scope)
      }
      return scope
    }
    batcher = new Batcher(model, cache, { maxBatch, stepTokens })
    const b = batcher
    const metrics = new Registry()
    registerMetrics({ main: gpu }, { registry: metrics })
    registerLlmMetrics(metrics, batcher)
    const svc: Service = {
      shape,
      batcher,
      tenant,
      kvBytes: (tokens) => (tenantKvBytes === undefined ? 0 : Math.ceil(tokens / blockTokens) * blockBytes),
      maxSequence: maxSeq,
      metrics,
      stats: () => ({ batcher: b.stats(), kv: cache.stats(), tenants: Object.fromEntries([...tenants].map(([n, s]) => [n, s.stats()])) }),
    }
    const adapter = gpu.info.adapterName
    log(
      `device: ${adapter}; decoder: vocab ${shape.vocab}, d_model ${shape.dModel}, ${shape.layers} layers, ${shape.queryHeads} query / ${shape.kvHeads} kv heads of ${shape.headDim}, MLP ${shape.hidden}; weights ${formatBytes(model.weightBytes)}`,
    )
    log(
      `KV cache: ${cache.numBlocks} blocks of ${blockTokens} tokens (${formatBytes(cache.bytes)}); batch up to ${maxBatch} sequences, ${stepTokens} rows a step`,
    )

    server = serve(svc)
    const s = server
    const port = values.check ? 0 : intOption('port', values.port, 8080, 0, 65535)
    await new Promise<void>((resolve, reject) => {
      s.once('error', reject)
      s.listen(port, values.check ? '127.0.0.1' : values.host, resolve)
    })
    const address = server.address()
    const bound = typeof address === 'object' && address ? address.port : port

    if (!values.check) {
      log(`listening on http://${values.host}:${bound} (POST /generate, GET /stats, GET /metrics, GET /healthz); Ctrl-C stops`)
      await new Promise<void>((resolve) => {
        process.once('SIGINT', resolve)
        process.once('SIGTERM', resolve)
      })
      log('stopping')
      return
    }

    const count = intOption('requests', values.requests, 24)
    const concurrency = intOption('concurrency', values.concurrency, 8, 1, 1024)
    const systemTokens = intOption('system-tokens', values['system-tokens'], 32, 0, maxSeq - 41)
    const tolerance = numberOption('tolerance', values.tolerance, 1e-3)
    const names = values.tenants.split(',').filter((t) => t !== '')
    const requests = checkRequests(shape, count, systemTokens, names, seed)
    const r = await check(bound, requests, concurrency, (req, reply) => verify(shape, weights, req.prompt, reply.tokens, reply.logits, tolerance))
    const scrape = await (await fetch(`http://127.0.0.1:${bound}/metrics`)).text()
    const healthz = (await fetch(`http://127.0.0.1:${bound}/healthz`)).status
    const kv = cache.stats()
    const bs = batcher.stats()
    const summary = {
      device: adapter,
      shape,
      kv: { blockTokens, blocks: cache.numBlocks, bytes: cache.bytes, ...kv },
      requests: count,
      concurrency,
      failed: r.failed,
      promptTokens: requests.reduce((n, q) => n + q.prompt.length, 0),
      tokens: r.tokens,
      wallMs: r.wallMs,
      tokensPerSecond: (r.tokens / r.wallMs) * 1000,
      mismatches: r.mismatches,
      nearTies: r.nearTies,
      maxLogitError: r.maxLogitError,
      tolerance,
      prefixHitRatio: kv.prefixQueryTokens > 0 ? kv.prefixHitTokens / kv.prefixQueryTokens : 0,
      // Of the tokens of admitted sequences, those taken from the prefix cache (not computed).
      admittedTokens: bs.admittedTokens,
      cachedTokens: bs.cachedTokens,
      steps: bs.steps,
      peakBatch: bs.peakBatch,
      peakDecodeBatch: bs.peakDecodeBatch,
      preemptions: bs.preemptions,
      prefillTokens: bs.prefillTokens,
      healthz,
      metricsHaveKv: /^wgalloc_kv_cache_blocks\{[^}]*cache="llm"[^}]*state="used"[^}]*\} \d+$/m.test(scrape) && /^llm_steps_total \d+$/m.test(scrape),
    }
    if (values.json) console.log(JSON.stringify(summary))
    else {
      log(`check: ${count} requests, ${concurrency} in flight, system prompt ${systemTokens} tokens, tenants ${names.join(', ') || '(none)'}`)
      log(`  generated   ${r.tokens} tokens in ${r.wallMs.toFixed(0)} ms (${summary.tokensPerSecond.toFixed(1)} tokens/s), ${bs.steps} steps`)
      log(`  correct     ${r.mismatches} mismatches against the CPU reference, ${r.nearTies} near-ties; max logit error ${r.maxLogitError.toExponential(1)}`)
      log(
        `  prefix      ${kv.prefixHitTokens} of ${kv.prefixQueryTokens} looked-up prompt tokens from the cache (${(summary.prefixHitRatio * 100).toFixed(0)}%); ${bs.cachedTokens} of ${bs.admittedTokens} tokens of admitted sequences needed no prefill`,
      )
      log(`  batching    up to ${bs.peakBatch} sequences a step (${bs.peakDecodeBatch} decoding), ${bs.preemptions} preemptions, ${kv.evictions} evictions`)
      for (const f of r.failed) log(`  failed ${f}`)
    }
    if (r.failed.length > 0 || r.mismatches > 0) process.exitCode = 1
  } finally {
    if (server?.listening) {
      const closed = new Promise((resolve) => server!.close(resolve))
      server.closeAllConnections() // idle keep-alive sockets would hold close() open
      await closed
    }
    await batcher?.close()
    gpu.destroy()
  }
}

runMain(main)
