// Staging benchmarks: the Rust example `host_bench` measures uploads through
// queue.write_buffer, wgpu's StagingBelt, a fresh mapped buffer per chunk and the
// host cache (bytes verified afterwards), downloads, and cached alloc+free.
import { spawnSync } from 'node:child_process'
import { ROOT, type Result, type Suite } from '../harness.js'

const NAMES: Record<string, string> = { a: 'write_buffer', b: 'StagingBelt', c: 'fresh mapped buffer', d: 'host cache', e: 'StagingBelt, batched' }

/** A row of `host_bench --json`. */
interface HostRow {
  kind: 'upload' | 'download' | 'alloc-free'
  method: string
  chunk: number
  mibPerS: number
  driverCreations?: number
  p50Ms?: number
  p99Ms?: number
  nsPerPair?: number
}

/** Runs a Rust example of wgalloc-core in release mode and parses its JSON. */
function example<T>(name: string): T {
  const r = spawnSync('cargo', ['run', '--release', '-q', '-p', 'wgalloc-core', '--example', name, '--', '--json'], {
    cwd: ROOT,
    encoding: 'utf8',
    maxBuffer: 1 << 24,
  })
  if (r.status !== 0) throw new Error(`${name} failed: ${r.stderr}`)
  return JSON.parse(r.stdout.trim().split('\n').pop()!) as T
}

export const suites: Suite[] = [
  {
    name: 'heap-rust',
    description: 'cached heap malloc + free in Rust vs create_buffer + destroy of the same sizes',
    async run() {
      const r = example<{ cachedNs: number; driverNs: number; speedup: number }>('heap_bench')
      return {
        measured: { value: r.cachedNs, unit: 'ns/round trip (Rust)' },
        baseline: { value: r.driverNs, unit: 'ns', what: 'create_buffer+destroy' },
        ratio: r.speedup,
        ratioMeaning: 'speed-up over driver allocation (higher is better)',
      }
    },
  },
  {
    name: 'host-staging',
    description: 'upload/download 256 MiB in 64 KiB, 1 MiB and 16 MiB chunks; host cache vs the best baseline',
    async run() {
      const rows = example<HostRow[]>('host_bench')
      const out: Result[] = []
      for (const chunk of [...new Set(rows.filter((x) => x.kind === 'upload').map((x) => x.chunk))]) {
        const ups = rows.filter((x) => x.kind === 'upload' && x.chunk === chunk)
        const ours = ups.find((x) => x.method === 'd')!
        // The target is against (a)-(c); the batched belt (e) is our own reference, reported beside it.
        const best = ups.filter((x) => 'abc'.includes(x.method)).reduce((a, b) => (b.mibPerS > a.mibPerS ? b : a))
        const batched = ups.find((x) => x.method === 'e')!
        out.push({
          measured: { value: ours.mibPerS, unit: `MiB/s upload, ${chunk >> 10} KiB chunks` },
          baseline: { value: best.mibPerS, unit: 'MiB/s', what: NAMES[best.method] },
          ratio: ours.mibPerS / best.mibPerS,
          ratioMeaning: 'host cache / best of write_buffer, StagingBelt, fresh buffer (target >= 1)',
          vsBatchedBelt: ours.mibPerS / batched.mibPerS,
          driverCreationsSteadyState: ours.driverCreations,
          rows: ups,
        })
        const downs = rows.filter((x) => x.kind === 'download' && x.chunk === chunk)
        const dc = downs.find((x) => x.method === 'd')!
        const fresh = downs.find((x) => x.method === 'c')!
        out.push({
          measured: { value: dc.mibPerS, unit: `MiB/s download, ${chunk >> 10} KiB chunks (p50 ${dc.p50Ms} ms, p99 ${dc.p99Ms} ms)` },
          baseline: { value: fresh.mibPerS, unit: 'MiB/s', what: 'fresh mapped buffer' },
          ratio: dc.mibPerS / fresh.mibPerS,
          ratioMeaning: 'host cache / fresh buffer throughput (higher is better)',
          rows: downs,
        })
      }
      const af = rows.find((x) => x.kind === 'alloc-free')!
      out.push({
        measured: { value: af.nsPerPair!, unit: 'ns per cached alloc+free (Rust)' },
        baseline: { value: 200, unit: 'ns', what: 'target' },
        ratio: af.nsPerPair! / 200,
        ratioMeaning: 'vs the 200 ns target (<= 1 meets it)',
      })
      return out
    },
  },
]
