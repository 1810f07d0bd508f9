// The inference server's load-test client, forked as a child process so the
// server's RSS is the server's alone. It sends deterministic requests on loopback,
// tells the server when the timed phase starts, then checks every reply against
// the float64 CPU reference (off the clock) and reports back over IPC.

import { classifierWeights, classifyRow, type ClassifierShape } from './classifier'
import { drive, percentile, type Reply } from './load-test'
import { mulberry32, uniform } from './random'

/** Probabilities from the GPU may differ from the float64 reference by f32 rounding only. */
export const TOLERANCE = 1e-5

export interface ClientConfig {
  port: number
  shape: ClassifierShape
  seed: number
  requests: number
  concurrency: number
  warmup: number
}

export interface ClientReport {
  requests: number
  rows: number
  ok: number
  failed: number
  failures: Array<{ index: number; status: number; body: string }>
  mismatched: number
  maxAbsError: number
  wallMs: number
  requestsPerSecond: number
  latencyMs: { p50: number; p99: number; max: number }
}

export type FromClient = { type: 'timed' } | { type: 'done'; report: ClientReport } | { type: 'error'; message: string }

/** Deterministic rows of request `i` (1..batch rows, so batches are partly padding). */
export function requestRows(s: ClassifierShape, seed: number, i: number): Float32Array[] {
  const next = mulberry32(seed * 100_003 + i)
  return Array.from({ length: 1 + (i % s.batch) }, () => uniform(next, s.inputs, 1))
}

function argmax(row: ArrayLike<number>): number {
  let best = 0
  for (let i = 1; i < row.length; i++) if (row[i] > row[best]) best = i
  return best
}

/** Largest error of a reply against the reference (Infinity for a malformed reply). */
function replyError(s: ClassifierShape, weights: ReturnType<typeof classifierWeights>, rows: Float32Array[], body: string): number {
  const { output, argmax: classes } = JSON.parse(body) as { output?: number[][]; argmax?: number[] }
  if (!Array.isArray(output) || !Array.isArray(classes) || output.length !== rows.length) return Infinity
  let error = 0
  rows.forEach((row, k) => {
    const expected = classifyRow(s, weights, row)
    for (let c = 0; c < s.classes; c++) error = Math.max(error, Math.abs((output[k]?.[c] ?? NaN) - expected[c]))
    if (classes[k] !== argmax(output[k])) error = Infinity
  })
  return Number.isNaN(error) ? Infinity : error
}

async function run(c: ClientConfig): Promise<ClientReport> {
  const s = c.shape
  const body = (offset: number) => (i: number) => JSON.stringify({ input: requestRows(s, c.seed, offset + i).map((r) => Array.from(r)) })
  // Warm-up (other inputs): pipelines, host-cache blocks and the JIT reach their steady state.
  if (c.warmup > 0) await drive({ port: c.port, path: '/infer', count: c.warmup, concurrency: c.concurrency, body: body(c.requests) })
  // The server starts sampling memory, then answers; only then does the timed phase start.
  await new Promise((resolve) => {
    process.once('message', resolve)
    process.send!({ type: 'timed' } satisfies FromClient)
  })
  const { replies, wallMs } = await drive({ port: c.port, path: '/infer', count: c.requests, concurrency: c.concurrency, body: body(0) })

  const weights = classifierWeights(s, c.seed)
  let ok = 0
  let mismatched = 0
  let maxAbsError = 0
  const failures: ClientReport['failures'] = []
  for (const r of replies as Reply[]) {
    if (r.status !== 200) {
      if (failures.length < 5) failures.push({ index: r.index, status: r.status, body: r.body.slice(0, 200) })
      continue
    }
    ok++
    const error = replyError(s, weights, requestRows(s, c.seed, r.index), r.body)
    if (!(error <= TOLERANCE)) mismatched++
    if (Number.isFinite(error)) maxAbsError = Math.max(maxAbsError, error)
  }
  const latencies = replies.map((r) => r.ms).sort((a, b) => a - b)
  return {
    requests: c.requests,
    rows: replies.reduce((n, r) => n + 1 + (r.index % s.batch), 0),
    ok,
    failed: c.requests - ok,
    failures,
    mismatched,
    maxAbsError,
    wallMs,
    requestsPerSecond: (c.requests / wallMs) * 1000,
    latencyMs: { p50: percentile(latencies, 50), p99: percentile(latencies, 99), max: latencies[latencies.length - 1] },
  }
}

// Forked by the server: one config in, one report out.
if (require.main === module && process.send) {
  process.once('message', (config: ClientConfig) => {
    run(config).then(
      (report) => process.send!({ type: 'done', report } satisfies FromClient, () => process.disconnect()),
      (err: unknown) => process.send!({ type: 'error', message: String((err as Error)?.stack ?? err) } satisfies FromClient, () => process.disconnect()),
    )
  })
}
