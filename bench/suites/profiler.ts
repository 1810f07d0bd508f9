// Profiler benchmarks: what profiling costs (executor runs of the demo graph, and a
// loop of small dispatch-sized copies, off vs stats-only vs traced), and whether GPU
// copy time reported by timestamps scales linearly with bytes.
import type { Graph } from 'wgalloc'
import { type Context, internal, type Result, type Suite, type TimeOptions } from '../harness.js'

interface DemoShapes {
  seq: number
  dim: number
  heads: number
}
interface DemoModel {
  shapes: (options: Partial<DemoShapes>) => DemoShapes
  graph: (s: DemoShapes) => Graph
  weights: (s: DemoShapes, seed: number) => { params: Record<string, Float32Array>; inputs: Record<string, Float32Array> }
}
const { shapes, graph, weights } = internal<DemoModel>('demo/model.js')

type ProfilerStart = Parameters<Context['gpu']['profiler']['start']>[0]

/** Least-squares fit y = a + b x and its R^2. */
function linearFit(xs: number[], ys: number[]): { slope: number; intercept: number; r2: number } {
  const n = xs.length
  const mx = xs.reduce((a, b) => a + b, 0) / n
  const my = ys.reduce((a, b) => a + b, 0) / n
  let sxy = 0,
    sxx = 0,
    syy = 0
  for (let i = 0; i < n; i++) {
    sxy += (xs[i] - mx) * (ys[i] - my)
    sxx += (xs[i] - mx) ** 2
    syy += (ys[i] - my) ** 2
  }
  const slope = sxy / sxx
  return { slope, intercept: my - slope * mx, r2: syy === 0 ? 1 : (sxy * sxy) / (sxx * syy) }
}

/** Median over interleaved rounds so drift hits every variant alike. */
async function compare(
  variants: (() => Promise<void>)[],
  rounds: number,
  timeIt: (fn: () => unknown, opts?: TimeOptions) => Promise<number>,
): Promise<number[]> {
  const samples: number[][] = variants.map(() => [])
  for (let r = 0; r < rounds; r++) {
    for (const [i, v] of variants.entries()) samples[i].push(await timeIt(v, { runs: 3, warmup: 1 }))
  }
  return samples.map((s) => s.sort((a, b) => a - b)[s.length >> 1])
}

export const suites: Suite[] = [
  {
    name: 'profiler-overhead',
    description:
      'executor runs of the demo graph (seq 64, dim 128) with the profiler off, on with stats only (interval mode, no trace export), and on with timestamps + trace events',
    async run({ gpu, timeIt }: Context): Promise<Result[]> {
      const s = shapes({ seq: 64, dim: 128, heads: 4 })
      const data = weights(s, 1)
      const exe = await gpu.compile(graph(s), { params: data.params })
      const p = gpu.profiler
      const runs = 20
      const loop = async () => {
        for (let i = 0; i < runs; i++) await exe.run(data.inputs)
      }
      const profiled = (opts: ProfilerStart) => async () => {
        p.start(opts)
        await loop()
        await p.flush()
        p.stop()
        p.resetStats()
      }
      const [off, statsOnly, on, traced] = await compare(
        [loop, profiled({ statsOnly: true }), profiled({ mode: 'interval' }), profiled({ mode: 'interval,event' })],
        15,
        timeIt,
      )
      exe.release()
      return [
        {
          variant: 'stats only',
          measured: { value: statsOnly / runs, unit: 'ms/run' },
          baseline: { value: off / runs, unit: 'ms/run', what: 'profiler off' },
          ratio: statsOnly / off,
          ratioMeaning: 'run time profiled (stats only) / off (target <= 1.01)',
        },
        {
          variant: 'timestamps+stats',
          measured: { value: on / runs, unit: 'ms/run' },
          baseline: { value: off / runs, unit: 'ms/run', what: 'profiler off' },
          ratio: on / off,
          ratioMeaning: 'run time profiled / off (target <= 1.03)',
        },
        {
          variant: 'timestamps+trace(interval,event)',
          measured: { value: traced / runs, unit: 'ms/run' },
          baseline: { value: off / runs, unit: 'ms/run', what: 'profiler off' },
          ratio: traced / off,
          ratioMeaning: 'run time traced / off',
        },
      ]
    },
  },
  {
    name: 'profiler-small-dispatch-loop',
    description: '2,000 submissions of a 256-byte copy (submit + wait each) with the profiler off vs on',
    async run({ gpu, timeIt }) {
      // Plain buffers: two small heap blocks may share one segment buffer, and wgpu refuses same-buffer copies.
      const a = gpu.createBuffer(256)
      const b = gpu.createBuffer(256)
      const st = gpu.createStream()
      const p = gpu.profiler
      const n = 2000
      const loop = async () => {
        for (let i = 0; i < n; i++) {
          st.copy(a, b)
          if (i % 50 === 49) await st.submit().wait()
        }
        await st.submit().wait()
      }
      const profiled = (opts?: ProfilerStart) => async () => {
        p.start(opts)
        await loop()
        await p.flush()
        p.stop()
        p.resetStats()
      }
      const [off, on, statsOnly] = await compare([loop, profiled(), profiled({ statsOnly: true })], 5, timeIt)
      a.destroy()
      b.destroy()
      return [
        {
          variant: 'timestamps',
          measured: { value: (on / n) * 1000, unit: 'us/copy' },
          baseline: { value: (off / n) * 1000, unit: 'us/copy', what: 'profiler off' },
          ratio: on / off,
          ratioMeaning: 'loop time profiled / off',
        },
        {
          variant: 'stats only',
          measured: { value: (statsOnly / n) * 1000, unit: 'us/copy (stats only)' },
          baseline: { value: (off / n) * 1000, unit: 'us/copy', what: 'profiler off' },
          ratio: statsOnly / off,
          ratioMeaning: 'loop time profiled (stats only) / off',
        },
      ]
    },
  },
  {
    name: 'profiler-copy-linearity',
    description: 'GPU time of device-to-device copies from timestamps at 5 sizes (1-16 MiB): R^2 of a linear fit',
    async run({ gpu }) {
      const MiB = 1 << 20
      const sizes = [1, 2, 4, 8, 16].map((m) => m * MiB)
      const src = gpu.createBuffer(16 * MiB)
      const dst = gpu.createBuffer(16 * MiB)
      const p = gpu.profiler
      const ms: number[] = []
      for (const size of sizes) {
        p.resetStats()
        await p.profile(async () => {
          const st = gpu.createStream()
          for (let i = 0; i < 10; i++) {
            st.copy(src, dst, { size })
            await st.submit().wait()
          }
        })
        const c = p.stats().copies.find((x) => x.kind === 'device-to-device')!
        ms.push(c.totalGpuMs / c.gpuTimed)
      }
      src.destroy()
      dst.destroy()
      const fit = linearFit(sizes, ms)
      return {
        measured: { value: fit.r2, unit: 'R^2' },
        baseline: { value: 0.98, unit: 'R^2', what: 'target' },
        ratio: fit.r2 / 0.98,
        ratioMeaning: `R^2 / 0.98 (>= 1 meets the target); ms per size: ${ms.map((m) => m.toFixed(3)).join(', ')}; ${(1 / fit.slope / 1e6).toFixed(2)} GB/s`,
      }
    },
  },
]
