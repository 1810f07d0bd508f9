'use strict'
// Heap allocator benchmarks: cached malloc/free speed through JS, and
// fragmentation on the real-model eager traces against PyTorch's CUDA caching allocator
// policy and two simple policies (simulated on the same events).
const { readFileSync, readdirSync, existsSync } = require('node:fs')
const { join } = require('node:path')
const { replayHeap } = require('../../dist/replay.js')
const { Gpu } = require('../..')

const TRACES = join(__dirname, '../data/traces')
const SIZES = [256, 4096, 65536, 1 << 20]

module.exports = [
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
    description: 'cost per cached malloc + free of heap.recordHistory, with and without JS stacks, over the same loop with history off',
    async run({ gpu, timeIt }) {
      const heap = gpu.heap
      const n = 20000
      const loop = () => {
        for (let i = 0; i < n; i++) heap.malloc(SIZES[i & 3]).free()
      }
      const perOp = (ms) => (ms / n) * 1e6
      const off = perOp(await timeIt(loop))
      heap.recordHistory({ stacks: false, maxEntries: 4 * n })
      const noStacks = perOp(await timeIt(loop))
      heap.recordHistory({ stacks: true, maxEntries: 4 * n })
      const stacks = perOp(await timeIt(loop))
      heap.recordHistory(false)
      return {
        measured: { value: stacks - off, unit: 'ns added per alloc+free, with stacks' },
        baseline: { value: off, unit: 'ns/round trip', what: 'history off' },
        ratio: stacks / off,
        ratioMeaning: 'round trip with stacks vs history off (targets: +2 us with stacks, +200 ns without)',
        withoutStacks: { addedNs: noStacks - off, ratio: noStacks / off },
      }
    },
  },
  {
    name: 'heap-fragmentation',
    description:
      'eager traces of real models replayed through the heap: peak reserved / peak live, vs PyTorch CUDA caching allocator policy, power-of-two buckets and an exact-size free list',
    async run() {
      if (!existsSync(TRACES)) throw new Error(`${TRACES} is missing`)
      const out = []
      for (const file of readdirSync(TRACES)
        .filter((f) => f.endsWith('.trace.json'))
        .sort()) {
        const trace = JSON.parse(readFileSync(join(TRACES, file), 'utf8'))
        // A device of its own, so nothing else's memory counts in the peak.
        const gpu = await Gpu.request()
        const { baselines, ...ours } = replayHeap(gpu.heap, trace)
        gpu.destroy()
        const [pytorch, ...others] = baselines
        // Every policy on one line: reserved/live and driver allocations.
        const otherPolicies = others.map((b) => `${b.policy} ${b.fragmentation.toFixed(3)}, ${b.driverAllocations} allocs`).join('; ')
        out.push({
          trace: file,
          measured: { value: ours.fragmentation, unit: `reserved/live, ${ours.driverAllocations} allocs (${file.replace('.trace.json', '')})` },
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
