// A bounded HTTP load generator (keep-alive sockets, a fixed number of requests in
// flight) and the statistics the inference server's load test reports.

import { Agent, request } from 'node:http'

export interface Reply {
  index: number
  status: number
  body: string
  ms: number
}

export interface DriveOptions {
  port: number
  path: string
  /** Requests to send, indexed 0..count-1. */
  count: number
  /** Requests in flight at once. */
  concurrency: number
  body: (index: number) => string
  /** Called as each reply completes, with how many have completed so far. */
  onReply?: (reply: Reply, completed: number) => void
}

function post(agent: Agent, port: number, path: string, body: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(
      { host: '127.0.0.1', port, path, method: 'POST', agent, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } },
      (res) => {
        const chunks: Buffer[] = []
        res.on('data', (c: Buffer) => chunks.push(c))
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }))
        res.on('error', reject)
      },
    )
    req.on('error', reject)
    req.end(body)
  })
}

/** Sends `count` POST requests on loopback, `concurrency` at a time; resolves with every reply. */
export async function drive(o: DriveOptions): Promise<{ replies: Reply[]; wallMs: number }> {
  const agent = new Agent({ keepAlive: true, maxSockets: o.concurrency })
  const replies: Reply[] = new Array(o.count)
  let next = 0
  let completed = 0
  const t0 = performance.now()
  const lane = async () => {
    while (next < o.count) {
      const index = next++
      const start = performance.now()
      const r = await post(agent, o.port, o.path, o.body(index))
      const reply = { index, status: r.status, body: r.body, ms: performance.now() - start }
      replies[index] = reply
      o.onReply?.(reply, ++completed)
    }
  }
  try {
    await Promise.all(Array.from({ length: Math.min(o.concurrency, o.count) }, lane))
  } finally {
    agent.destroy()
  }
  return { replies, wallMs: performance.now() - t0 }
}

/** The `p`-th percentile (0..100) of ascending `sorted`, nearest rank. */
export function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]
}

/** Least-squares slope of y over x. */
export function slope(xs: number[], ys: number[]): number {
  const n = xs.length
  if (n < 2) return 0
  const mx = xs.reduce((a, b) => a + b, 0) / n
  const my = ys.reduce((a, b) => a + b, 0) / n
  let num = 0
  let den = 0
  for (let i = 0; i < n; i++) {
    num += (xs[i] - mx) * (ys[i] - my)
    den += (xs[i] - mx) ** 2
  }
  return den === 0 ? 0 : num / den
}

export interface SeriesSummary {
  first: number
  last: number
  min: number
  max: number
  /** Least-squares growth in bytes per completed request. */
  slopePerRequest: number
}

/** First, last, range and slope of a quantity sampled at `completed` request counts. */
export function summarize(completed: number[], values: number[]): SeriesSummary {
  return {
    first: values[0],
    last: values[values.length - 1],
    min: Math.min(...values),
    max: Math.max(...values),
    slopePerRequest: slope(completed, values),
  }
}
