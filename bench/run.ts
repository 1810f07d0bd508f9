// Benchmark harness: `npm run bench [-- name...]`. Each suite measures wgalloc and a
// baseline in the same run and reports the ratio; bench/report.json keeps the
// figures with the machine and adapter they came from.
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { Gpu } from 'wgalloc'
import { fmt, machineInfo, ROOT, type Result, table, timeIt } from './harness.js'
import { SUITES } from './suites/index.js'

async function main(names: string[]): Promise<number> {
  const unknown = names.filter((n) => !SUITES.some((s) => s.name === n))
  if (unknown.length) {
    console.error(`unknown benchmark(s): ${unknown.join(', ')}; available: ${SUITES.map((s) => s.name).join(', ')}`)
    return 2
  }
  const selected = names.length ? SUITES.filter((s) => names.includes(s.name)) : SUITES
  const gpu = await Gpu.request()
  const machine = machineInfo()
  const adapter = { name: gpu.info.adapterName, backend: gpu.info.backend, deviceType: gpu.info.deviceType }
  const results: (Result & { name: string; description: string })[] = []
  for (const suite of selected) {
    process.stderr.write(`running ${suite.name} ...\n`)
    const r = await suite.run({ gpu, timeIt })
    // A suite returns one result, or several each with its own name.
    for (const one of ([] as Result[]).concat(r)) results.push({ name: suite.name, description: suite.description, ...one, machine, adapter })
  }
  const report = { generatedAt: new Date().toISOString(), machine, adapter, results }
  const reportPath = process.env.WGALLOC_BENCH_REPORT ?? join(ROOT, 'bench', 'report.json')
  writeFileSync(reportPath, JSON.stringify(report, null, 2) + '\n')
  console.log(`machine: ${machine.cpu} x${machine.cores}; adapter: ${adapter.name} (${adapter.backend})\n`)
  console.log(
    table(
      ['benchmark', 'measured', 'baseline', 'ratio', 'meaning of ratio'],
      results.map((r) => [
        r.name,
        `${fmt(r.measured.value)} ${r.measured.unit}`,
        `${fmt(r.baseline.value)} ${r.baseline.unit} (${r.baseline.what})`,
        Number(r.ratio.toFixed(3)),
        r.ratioMeaning,
      ]),
    ),
  )
  console.log(`\nwritten: ${reportPath}`)
  gpu.destroy()
  return 0
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code
  },
  (err) => {
    console.error(err)
    process.exitCode = 1
  },
)
