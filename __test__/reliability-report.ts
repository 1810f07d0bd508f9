// The figures behind the README's Reliability table. Every reliability test records
// its counts under the run's mode ('short' for `npm test`, 'stress' for `npm run
// stress`) in bench/reliability-report.json (or WGALLOC_RELIABILITY_REPORT);
// `npm run reliability-table` prints the table from it. Tests of one file run in
// one process, so plain synchronous read-modify-write is enough.
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import type { Gpu } from 'wgalloc'

export const FILE = process.env.WGALLOC_RELIABILITY_REPORT ?? path.join(__dirname, '..', 'bench', 'reliability-report.json')
export const STRESS = process.env.WGALLOC_STRESS === '1'
export const MODE = process.env.WGALLOC_RELIABILITY_MODE ?? (STRESS ? 'stress' : 'short')

/** A knob: its env value, else the short or the stress default. */
export function knob(name: string, short: number, stress: number): number {
  return Number(process.env[name] ?? (STRESS ? stress : short))
}

/** What one reliability test records: the counts the README's table sums, and its own figures. */
export interface TestCounts {
  operations?: number
  threads?: number
  badInputs?: number
  crashes?: number
  hangs?: number
  reads?: number
  corruptedReads?: number
  leakedBytes?: number
  runs?: number
  /** Faults injected, by kind. */
  faults?: Record<string, number>
  [figure: string]: unknown
}

/** The report file: per mode, each test's counts, with the machine and adapter of the last run. */
export interface Report {
  machine?: { cpu: string; cores: number; memoryBytes: number; platform: string; node: string }
  adapter?: { name: string; backend: string; driver: string }
  modes: Record<string, { tests: Record<string, TestCounts> }>
}

function read(): Report {
  try {
    return JSON.parse(fs.readFileSync(FILE, 'utf8')) as Report
  } catch {
    return { modes: {} }
  }
}

/** Records `counts` for `test` under the current mode, with the machine it ran on. */
export function record(test: string, counts: TestCounts, gpu?: Gpu): void {
  const report = read()
  const cpus = os.cpus()
  report.machine = {
    cpu: cpus[0]?.model ?? 'unknown',
    cores: cpus.length,
    memoryBytes: os.totalmem(),
    platform: `${process.platform}-${process.arch}`,
    node: process.version,
  }
  if (gpu) report.adapter = { name: gpu.info.adapterName, backend: gpu.info.backend, driver: gpu.info.driverInfo }
  const mode = (report.modes[MODE] ??= { tests: {} })
  mode.tests[test] = { ...counts, at: new Date().toISOString() }
  fs.mkdirSync(path.dirname(FILE), { recursive: true })
  fs.writeFileSync(FILE, JSON.stringify(report, null, 2) + '\n')
}
