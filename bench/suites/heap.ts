// Heap allocator benchmarks: cached malloc/free speed through JS, and
// fragmentation on the real-model eager traces against PyTorch's CUDA caching allocator
// policy and two simple policies (simulated on the same events).
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { Gpu, type Heap, type Trace } from 'wgalloc'
import { DATA, internal, type Result, type Suite } from '../harness.js'

interface PolicyFigures {
  policy: string
  peakReservedBytes: number
  fragmentation: number
  driverAllocations: number
  bytesMoved?: number
}
const { replayHeap } = internal<{ replayHeap: (heap: Heap, trace: Trace) => PolicyFigures & { baselines: PolicyFigures[] } }>('replay.js')

const TRACES = join(DATA, 'traces')
const SIZES = [256, 4096, 65536, 1 << 20]

export const suites: Suite[] = [
  {
    name: 'heap-malloc-free',
    description: 'cached heap.malloc + block.free round trip through JS vs gpu.createBuffer + destroy of the same sizes',
    async run({ gpu, timeIt }) {
      const heap = gpu.heap
      const n = 20000
      const heapMs = await timeIt(() => {
        for (let i = 0; i < n; i++) heap.malloc(SIZES[i & 3]).free()
      })
      const m = 500
      const driverMs = await timeIt(
        () => {
          for (let i = 0; i < m; i++) gpu.createBuffer(SIZES[i & 3]).destroy()
        },
        { runs: 5, warmup: 1 },
      )
      const ours = (heapMs / n) * 1e6
      const base = (driverMs / m) * 1e6
      return {
        measured: { value: ours, unit: 'ns/round trip' },
        baseline: { value: base, unit: 'ns/round trip', what: 'createBuffer+destroy' },
        ratio: base / ours,
        ratioMeaning: 'speed-up over driver allocation (higher is better; target >= 50)',
      }
    },
  },
  {
    name: 'heap-history',
    description:
      'cost per cached malloc + free of heap.recordHistory (steady state: a full ring), with and without JS stacks (every malloc, one in 8, one in 64), against the same loop with history off, alternated in one process; with stacks also against a bare 8-frame Error.captureStackTrace (target: capture + 1 us)',
    async run({ gpu }) {
      const heap = gpu.heap
      const n = 10000
      const perOp = (fn: () => void) => {
        const t0 = process.hrtime.bigint()
        fn()
        return Number(process.hrtime.bigint() - t0) / n
      }
      const loop = () => {
        for (let i = 0; i < n; i++) heap.malloc(SIZES[i & 3]).free()
      }
      const median = (xs: number[]) => xs.slice().sort((a, b) => a - b)[xs.length >> 1]
      // Chunks alternate on/off (in ABBA order) so machine drift cancels; the median of the
      // pairwise differences is the cost. A ring of 4096 entries is full after the first chunk.
      const added = (stacks: boolean | { every: number }, rounds: number) => {
        const diffs: number[] = []
        const offs: number[] = []
        for (let r = 0; r < rounds; r++) {
          const on = () => {
            heap.recordHistory({ stacks, maxEntries: 4096 })
            const ns = perOp(loop)
            heap.recordHistory(false)
            return ns
          }
          const first = r & 1 ? perOp(loop) : on()
          const second = r & 1 ? on() : perOp(loop)
          const [off, onNs] = r & 1 ? [first, second] : [second, first]
          if (r >= 4) {
            diffs.push(onNs - off)
            offs.push(off)
          }
        }
        return { added: median(diffs), off: median(offs) }
      }
      const plain = added(false, 60)
      const withStacks = added(true, 24)
      // Sampled stacks (one malloc in N), the setting a service leaves on.
      const sampled = Object.fromEntries([8, 64].map((every) => [`every${every}`, added({ every }, 24).added]))
      // What V8 charges for the capture itself on this machine (the floor for `stacks: true`):
      // the same frames as a malloc called from `loop`.
      const captureHere = () => {
        const limit = Error.stackTraceLimit
        Error.stackTraceLimit = 8
        Error.captureStackTrace({}, captureHere)
        Error.stackTraceLimit = limit
      }
      const captureLoop = () => {
        for (let i = 0; i < n; i++) captureHere()
      }
      const capture = median([0, 1, 2, 3, 4].map(() => perOp(captureLoop)))
      return {
        measured: { value: plain.added, unit: 'ns added per alloc+free, without stacks' },
        baseline: { value: plain.off, unit: 'ns/round trip', what: 'history off' },
        ratio: (plain.off + plain.added) / plain.off,
        ratioMeaning: 'round trip with history (no stacks) vs off (target: +200 ns at most)',
        withStacks: {
          addedNs: withStacks.added,
          captureNs: capture,
          addedOverCapture: withStacks.added / capture,
          beyondCaptureNs: withStacks.added - capture,
          sampledAddedNs: sampled,
        },
      }
    },
  },
  {
    name: 'heap-fragmentation',
    description:
      'eager traces of real models replayed through the heap: peak reserved / peak live (and the bytes compaction moved), vs PyTorch CUDA caching allocator policy, power-of-two buckets and an exact-size free list',
    async run() {
      if (!existsSync(TRACES)) throw new Error(`${TRACES} is missing`)
      const out: Result[] = []
      for (const file of readdirSync(TRACES)
        .filter((f) => f.endsWith('.trace.json'))
        .sort()) {
        const trace = JSON.parse(readFileSync(join(TRACES, file), 'utf8')) as Trace
        // A device of its own, so nothing else's memory counts in the peak.
        const gpu = await Gpu.request()
        const { baselines, ...ours } = replayHeap(gpu.heap, trace)
        gpu.destroy()
        const [pytorch, ...others] = baselines
        // Every policy on one line: reserved/live and driver allocations.
        const otherPolicies = others.map((b) => `${b.policy} ${b.fragmentation.toFixed(3)}, ${b.driverAllocations} allocs`).join('; ')
        out.push({
          trace: file,
          measured: {
            value: ours.fragmentation,
            unit: `reserved/live, ${ours.driverAllocations} allocs, ${((ours.bytesMoved ?? 0) / 2 ** 20).toFixed(1)} MiB moved (${file.replace('.trace.json', '')})`,
          },
          baseline: { value: pytorch.fragmentation, unit: `reserved/live, ${pytorch.driverAllocations} allocs`, what: `${pytorch.policy}; ${otherPolicies}` },
          ratio: ours.peakReservedBytes / pytorch.peakReservedBytes,
          ratioMeaning: 'peak reserved vs the PyTorch CUDA caching allocator policy (lower is better; target <= 1)',
          driverAllocations: { wgalloc: ours.driverAllocations, ...Object.fromEntries(baselines.map((b) => [b.policy, b.driverAllocations])) },
          ours,
          baselines,
        })
      }
      return out
    },
  },
]
