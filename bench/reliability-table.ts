// Prints the README's Reliability table from what the reliability tests recorded
// (bench/reliability-report.json, or the path in WGALLOC_RELIABILITY_REPORT):
// `npx ava dist-test/reliability.test.js` fills the short row, `npm run stress` the
// stress row, then `npm run reliability-table [-- --json]`.
import fs from 'node:fs'
import path from 'node:path'
import type { Report, TestCounts } from '../__test__/reliability-report.js'
import { ROOT } from './harness.js'

const FILE = process.env.WGALLOC_RELIABILITY_REPORT ?? path.join(ROOT, 'bench', 'reliability-report.json')
const n = (v: number) => Math.round(v).toLocaleString('en-US')
const sum = (tests: (TestCounts | undefined)[], key: keyof TestCounts) => tests.reduce((a, t) => a + (Number(t?.[key]) || 0), 0)

/** One table row (and its figures) from one mode's tests. */
function row(mode: string, tests: Record<string, TestCounts>) {
  const fuzz = Object.entries(tests)
    .filter(([k]) => k.startsWith('fuzz-'))
    .map(([, v]) => v)
  const { workers, cycles, misuse, exit, gc } = tests
  const fuzzOps = sum(fuzz, 'operations')
  const faults: Record<string, number> = {}
  for (const t of [exit, gc, ...fuzz]) for (const [k, v] of Object.entries(t?.faults ?? {})) faults[k] = (faults[k] ?? 0) + v
  const figures = {
    operations: (workers?.operations ?? 0) + (cycles?.operations ?? 0) + fuzzOps,
    threads: workers?.threads ?? 0,
    faults,
    badInputs: (misuse?.badInputs ?? 0) + sum(fuzz, 'badInputs'),
    crashes: sum([exit, ...fuzz], 'crashes'),
    hangs: sum(fuzz, 'hangs'),
    reads: sum([workers, ...fuzz], 'reads'),
    corruptedReads: sum([workers, ...fuzz], 'corruptedReads'),
    leakedBytes: sum([workers, gc, cycles, ...fuzz], 'leakedBytes'),
  }
  const parts: string[] = []
  if (workers) parts.push(`${n(workers.operations ?? 0)} mixed heap / host / executor ops`)
  if (cycles) parts.push(`${n(cycles.operations ?? 0)} alloc/free cycles`)
  if (fuzz.length) parts.push(`${n(fuzzOps)} fuzzed calls and commands in ${n(sum(fuzz, 'runs'))} sequences`)
  const faultText = Object.entries(faults)
    .sort((a, b) => b[1] - a[1])
    .map(([k, v]) => `${k} (${n(v)})`)
    .join(', ')
  const bad = [misuse ? `${n(misuse.badInputs ?? 0)} random calls` : null, fuzz.length ? `${n(sum(fuzz, 'badInputs'))} fuzzed` : null]
    .filter(Boolean)
    .join(' + ')
  const threads = `${figures.threads} workers${fuzz.length ? ` + ${fuzz.length} fuzz processes` : ''}`
  const cells = [
    mode,
    parts.join(' + '),
    threads,
    faultText || '-',
    `${n(figures.badInputs)} (${bad})`,
    n(figures.crashes + figures.hangs),
    `${n(figures.corruptedReads)} of ${n(figures.reads)}`,
    n(figures.leakedBytes),
  ]
  return { cells, figures }
}

function main(): number {
  let report: Report
  try {
    report = JSON.parse(fs.readFileSync(FILE, 'utf8')) as Report
  } catch (err) {
    const e = err as NodeJS.ErrnoException
    console.error(`no reliability report at ${FILE} (${e.code ?? e.message}); run \`npx ava dist-test/reliability.test.js\` or \`npm run stress\` first`)
    return 1
  }
  const order = (mode: string) => ['short', 'stress'].indexOf(mode) >>> 0 // the known modes first, in this order
  const rows = Object.entries(report.modes)
    .sort(([a], [b]) => order(a) - order(b))
    .map(([mode, m]) => ({ mode, ...row(mode, m.tests) }))
  if (process.argv.includes('--json')) {
    console.log(JSON.stringify({ machine: report.machine, adapter: report.adapter, rows: rows.map(({ mode, figures }) => ({ mode, ...figures })) }, null, 2))
    return 0
  }
  const m = report.machine
  console.log(
    `Machine: ${m?.cpu} x${m?.cores}, ${m ? Math.round(m.memoryBytes / 2 ** 30) : '?'} GiB; adapter: ${report.adapter?.name ?? '?'} (${report.adapter?.backend ?? '?'})\n`,
  )
  console.log('| mode | operations | threads | faults injected | bad inputs tried | crashes / hangs | corrupted reads | leaked bytes |')
  console.log('| --- | --- | --- | --- | --- | ---: | ---: | ---: |')
  for (const r of rows) console.log(`| ${r.cells.join(' | ')} |`)
  return 0
}

process.exitCode = main()
