// What the benchmark harness (run.ts) and its suites share: the result shape, the timer and
// the paths. Each suite measures wgalloc and a baseline in the same run and reports the ratio.
import os from 'node:os'
import { join } from 'node:path'
import type { Gpu } from 'wgalloc'

/** The repository root. The harness runs compiled, from dist-bench/bench/. */
export const ROOT = join(__dirname, '..', '..')
/** Benchmark data committed with the repository (see bench/data/README.md). */
export const DATA = join(ROOT, 'bench', 'data')

/** Loads a module of the built package that is not part of its public API. */
export function internal<T>(path: string): T {
  return require(join(ROOT, 'dist', path)) as T
}

/** The CLI's text table, for the commands' reports. */
export const { table } = internal<{ table: (header: string[], rows: (string | number)[][]) => string }>('cli/table.js')

/** A figure as the reports print it: whole above 1,000, four significant digits below. */
export const fmt = (v: number): string => (Math.abs(v) >= 1000 ? Math.round(v).toString() : v.toPrecision(4))

/** The machine a report's figures come from. */
export function machineInfo() {
  return {
    cpu: os.cpus()[0]?.model ?? 'unknown',
    cores: os.cpus().length,
    memoryBytes: os.totalmem(),
    platform: `${process.platform}-${process.arch}`,
    node: process.version,
  }
}

/**
 * `WGALLOC_BENCH_SHORT=1`: smaller workloads with the same checks, for the test suite (which
 * runs the serving and KV suites this way, so they cannot rot between benchmark runs).
 */
export const SHORT = process.env.WGALLOC_BENCH_SHORT === '1'

export interface Figure {
  value: number
  unit: string
}

/** One row of the report: a figure, its baseline from the same run, and their ratio. */
export interface Result {
  measured: Figure
  baseline: Figure & { what: string }
  ratio: number
  ratioMeaning: string
  /** Suite-specific detail kept in bench/report.json. */
  [detail: string]: unknown
}

export interface TimeOptions {
  runs?: number
  warmup?: number
}

/** Median wall time in ms of `fn` over `runs` runs after `warmup` runs. */
export async function timeIt(fn: () => unknown, { runs = 9, warmup = 2 }: TimeOptions = {}): Promise<number> {
  for (let i = 0; i < warmup; i++) await fn()
  const samples: number[] = []
  for (let i = 0; i < runs; i++) {
    const t0 = process.hrtime.bigint()
    await fn()
    samples.push(Number(process.hrtime.bigint() - t0) / 1e6)
  }
  samples.sort((a, b) => a - b)
  return samples[samples.length >> 1]
}

export interface Context {
  gpu: Gpu
  timeIt: typeof timeIt
}

export interface Suite {
  name: string
  description: string
  /** One result, or several each naming what it measured. */
  run(context: Context): Promise<Result | Result[]>
}
