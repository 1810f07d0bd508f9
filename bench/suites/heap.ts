// Heap allocator benchmarks: cached malloc/free speed through JS, and
// fragmentation on the real-model eager traces against PyTorch's CUDA caching allocator
// policy and two simple policies (simulated on the same events).
import { spawnSync } from 'node:child_process'
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Gpu, type Heap, type HeapProfile, type Trace } from 'wgalloc'
import { DATA, internal, ROOT, type Result, SHORT, type Suite } from '../harness.js'

interface PolicyFigures {
  policy: string
  peakReservedBytes: number
  peakLiveBytes: number
  fragmentation: number
  driverAllocations: number
  bytesMoved?: number
}
type ReplayFigures = PolicyFigures & { baselines: PolicyFigures[]; profile: HeapProfile; warmStart?: { segments: number; reservedBytes: number } }
const { replayHeap } = internal<{ replayHeap: (heap: Heap, trace: Trace, options?: { profile?: HeapProfile }) => ReplayFigures }>('replay.js')

const MIB = 2 ** 20

/** Replays `trace` on a device of its own (nothing else's memory counts in the peak). */
async function replayAlone(trace: Trace, profile?: HeapProfile): Promise<ReplayFigures> {
  const gpu = await Gpu.request()
  try {
    return replayHeap(gpu.heap, trace, { profile })
  } finally {
    gpu.destroy()
  }
}

/** Requests `[from, to)` of a mix or pipeline (ids `r<k>:...`), as a trace of their own. */
function requestsOf(trace: Trace & { requests: number }, from: number, to: number): Trace {
  const request = (id: string | number) => Number(/^r(\d+):/.exec(String(id))?.[1])
  return { requests: to - from, events: trace.events.filter((e) => request(e.id) >= from && request(e.id) < to) }
}

/** Seeded draws of the generated serving mixes (`scripts/traces/synthetic.mts --seed N`), in a temporary folder. */
function syntheticDraws(seeds: number[]): { dir: string; mixes: string[] } {
  const scripts = join(ROOT, 'scripts', 'traces')
  const tsc = spawnSync(process.execPath, [join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', join(scripts, 'tsconfig.synthetic.json')], {
    stdio: 'inherit',
  })
  if (tsc.status !== 0) throw new Error('compiling scripts/traces/synthetic.mts failed')
  const dir = mkdtempSync(join(tmpdir(), 'wgalloc-draws-'))
  for (const seed of seeds) {
    const r = spawnSync(process.execPath, [join(scripts, 'dist', 'synthetic.mjs'), '--seed', String(seed), '--out', join(dir, `seed${seed}`)], {
      encoding: 'utf8',
    })
    if (r.status !== 0) throw new Error(`synthetic draw ${seed}: ${r.stderr}`)
  }
  const mixes = readdirSync(join(dir, `seed${seeds[0]}`)).filter((f) => f.endsWith('.mix.trace.json'))
  return { dir, mixes: mixes.sort() }
}

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
      'cost per cached malloc + free of heap.recordHistory (steady state: a full ring of 4096 entries) without stacks, with every stack, and sampled one malloc in 8 and in 64, each against the same loop with history off, alternated in one process; with stacks also against a bare 8-frame Error.captureStackTrace timed in the same rounds (target: stacks <= capture + 1 us)',
    async run({ gpu }) {
      const heap = gpu.heap
      const n = SHORT ? 2000 : 10000
      const perOp = (fn: () => void) => {
        const t0 = process.hrtime.bigint()
        fn()
        return Number(process.hrtime.bigint() - t0) / n
      }
      const loop = () => {
        for (let i = 0; i < n; i++) heap.malloc(SIZES[i & 3]).free()
      }
      // What V8 charges for the capture itself (the floor for `stacks: true`): the same depth as
      // a malloc called from `loop`, the frames above the caller left out as `recordHistory` does.
      const captureHere = () => {
        const limit = Error.stackTraceLimit
        Error.stackTraceLimit = 8
        Error.captureStackTrace({}, captureHere)
        Error.stackTraceLimit = limit
      }
      const captureLoop = () => {
        for (let i = 0; i < n; i++) captureHere()
      }
      const median = (xs: number[]) => xs.slice().sort((a, b) => a - b)[xs.length >> 1]
      // Chunks alternate on/off (in ABBA order) so machine drift cancels; the median of the
      // pairwise differences is the cost. A ring of 4096 entries is full after the first chunk.
      // The bare capture is timed in the same rounds.
      const added = (stacks: boolean | { every: number }, rounds: number) => {
        const diffs: number[] = []
        const offs: number[] = []
        const captures: number[] = []
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
          const capture = perOp(captureLoop)
          if (r >= 4) {
            diffs.push(onNs - off)
            offs.push(off)
            captures.push(capture)
          }
        }
        return { added: median(diffs), off: median(offs), capture: median(captures) }
      }
      const rounds = SHORT ? 8 : 24
      const plain = added(false, SHORT ? 12 : 60)
      const every = added(true, rounds)
      // Sampled stacks (one malloc in N), the setting a service leaves on.
      const sampled = Object.fromEntries([8, 64].map((n) => [`every${n}`, added({ every: n }, rounds).added]))
      const targetNs = every.capture + 1000
      const figures = {
        offNs: plain.off,
        noStacksAddedNs: plain.added,
        stacksAddedNs: every.added,
        every8AddedNs: sampled.every8,
        every64AddedNs: sampled.every64,
        captureNs: every.capture,
        stacksTargetNs: targetNs,
        stacksTargetMet: every.added <= targetNs,
      }
      return [
        {
          name: 'heap-history',
          measured: { value: plain.added, unit: 'ns added per alloc+free, without stacks' },
          baseline: { value: plain.off, unit: 'ns/round trip', what: 'history off' },
          ratio: (plain.off + plain.added) / plain.off,
          ratioMeaning: 'round trip with history (no stacks) vs off (target: +200 ns at most)',
          ...figures,
        },
        {
          name: 'heap-history-stacks',
          measured: {
            value: every.added,
            unit: `ns added per alloc+free with stacks: true (every 8: ${Math.round(sampled.every8)}, every 64: ${Math.round(sampled.every64)})`,
          },
          baseline: { value: every.capture, unit: 'ns/capture', what: 'bare 8-frame Error.captureStackTrace' },
          ratio: every.added / every.capture,
          ratioMeaning: `stacks vs V8's capture (target: capture + 1 us = ${Math.round(targetNs)} ns: ${figures.stacksTargetMet ? 'met' : 'not met'})`,
          ...figures,
        },
      ]
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
  {
    name: 'heap-warm-start',
    description:
      'a heap profile recorded on one draw of each serving mix, another draw replayed from it on the device: peak reserved / live and driver allocations after the warm start, vs the same draw from a cold start',
    async run() {
      const read = (file: string) => JSON.parse(readFileSync(file, 'utf8')) as Trace & { requests: number }
      // Draws: generated mixes at seeds 1 -> 2 and 2 -> 3; recorded mixes and pipelines, whose
      // models are not in the repository, split into their first and last halves of requests
      // (consecutive draws of the mix's seeded generator).
      const pairs: { name: string; record: Trace; replay: Trace }[] = []
      const SEEDS = [1, 2, 3]
      const { dir, mixes } = syntheticDraws(SEEDS)
      try {
        for (const mix of mixes) {
          for (let i = 0; i + 1 < SEEDS.length; i++) {
            const [a, b] = [SEEDS[i], SEEDS[i + 1]]
            pairs.push({
              name: `${mix.replace('.trace.json', '')} seed ${a} -> ${b}`,
              record: read(join(dir, `seed${a}`, mix)),
              replay: read(join(dir, `seed${b}`, mix)),
            })
          }
        }
      } finally {
        rmSync(dir, { recursive: true, force: true })
      }
      const TRACES_DIR = join(DATA, 'traces')
      for (const file of readdirSync(TRACES_DIR)
        .filter((f) => f.endsWith('.mix.trace.json') || f.endsWith('.pipeline.trace.json'))
        .sort()) {
        const trace = read(join(TRACES_DIR, file))
        const half = Math.floor(trace.requests / 2)
        pairs.push({
          name: `${file.replace('.trace.json', '')} requests 1-${half} -> ${half + 1}-${trace.requests}`,
          record: requestsOf(trace, 0, half),
          replay: requestsOf(trace, half, trace.requests),
        })
      }
      const out: Result[] = []
      let [noDriver, tight, bytesTarget] = [0, 0, 0]
      for (const { name, record, replay } of pairs) {
        const { profile, peakLiveBytes: recordedLive } = await replayAlone(record)
        const cold = await replayAlone(replay)
        const warm = await replayAlone(replay, profile)
        const pytorch = warm.baselines.find((b) => b.policy === 'pytorch-cuda')!
        const live = warm.peakLiveBytes
        const withinTight = warm.peakReservedBytes <= 1.05 * live + 2 * MIB
        const withinBytes = warm.peakReservedBytes <= 1.15 * live + 8 * MIB && warm.peakReservedBytes <= pytorch.peakReservedBytes
        noDriver += warm.driverAllocations === 0 ? 1 : 0
        tight += withinTight ? 1 : 0
        bytesTarget += withinBytes ? 1 : 0
        out.push({
          pair: name,
          measured: { value: warm.fragmentation, unit: `reserved/live warm, ${warm.driverAllocations} driver allocs after the warm start (${name})` },
          baseline: {
            value: cold.fragmentation,
            unit: `reserved/live, ${cold.driverAllocations} driver allocs`,
            what: `cold start; pytorch-cuda ${pytorch.fragmentation.toFixed(3)}, ${pytorch.driverAllocations} allocs`,
          },
          ratio: warm.peakReservedBytes / cold.peakReservedBytes,
          ratioMeaning: 'peak reserved, warm vs cold start (lower is better)',
          recordedPeakLiveBytes: recordedLive,
          peakLiveBytes: live,
          warm: { peakReservedBytes: warm.peakReservedBytes, driverAllocations: warm.driverAllocations, warmStart: warm.warmStart },
          cold: { peakReservedBytes: cold.peakReservedBytes, driverAllocations: cold.driverAllocations },
          pytorch: { peakReservedBytes: pytorch.peakReservedBytes, driverAllocations: pytorch.driverAllocations },
          withinTight,
          withinBytes,
        })
      }
      const n = pairs.length
      out.push({
        pair: 'all',
        measured: {
          value: noDriver / n,
          unit: `of ${n} pairs with no driver allocation after the warm start; ${tight} within 1.05 x live + 2 MiB; ${bytesTarget} within 1.15 x live + 8 MiB and pytorch-cuda`,
        },
        baseline: { value: 0.9, unit: 'share of pairs', what: 'target' },
        ratio: noDriver / n / 0.9,
        ratioMeaning: 'pairs without driver allocations vs the 90% target (>= 1 met)',
      })
      return out
    },
  },
]
