// `npm run bench:device`: what only a GPU can judge, in one command that fits a short loan of a
// GPU machine. It runs the suites below within a time budget, judges each figure against its
// target, prints one table and writes bench/device-report.json (device, driver, machine, date),
// ready for docs/performance.md. On a software device (lavapipe) it runs as well and says which
// verdicts only a GPU can give.
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { Gpu } from 'wgalloc'
import { fmt, machineInfo, ROOT, type Result, table, timeIt } from './harness.js'
import { SUITES } from './suites/index.js'

/** A figure of a suite judged against its target. */
interface Check {
  /** The suite that measures it. */
  suite: string
  /** Which of the suite's results this check reads. */
  pick: (r: Result) => boolean
  /** The target, in words. */
  target: string
  /** Whether the result meets it; null where the suite gives no verdict (a figure to record). */
  met: (r: Result) => boolean | null
  /** Whether a software device's figure says nothing about it (its copies are memcpy, its timestamps settle the work). */
  gpuOnly: boolean
}

const unit = (r: Result) => r.measured.unit

const CHECKS: Check[] = [
  {
    suite: 'profiler-overhead',
    pick: (r) => r.variant === 'timestamps+stats',
    target: 'executor run with timestamps <= 1.03 x profiler off',
    met: (r) => r.ratio <= 1.03,
    gpuOnly: true,
  },
  {
    suite: 'profiler-overhead',
    pick: (r) => r.variant === 'stats only',
    target: 'stats only <= 1.01 x profiler off',
    met: (r) => r.ratio <= 1.01,
    gpuOnly: false,
  },
  {
    suite: 'host-staging',
    pick: (r) => unit(r).includes('upload'),
    target: 'host cache >= the best of write_buffer, StagingBelt, fresh buffer and the batched belt',
    met: (r) => r.ratio >= 1 && (r.vsBatchedBelt as number) >= 1,
    gpuOnly: true,
  },
  {
    suite: 'host-staging',
    pick: (r) => unit(r).includes('alloc+free'),
    target: 'cached host alloc + free <= 200 ns',
    met: (r) => r.ratio <= 1,
    gpuOnly: false,
  },
  { suite: 'heap-rust', pick: () => true, target: 'cached malloc + free in Rust <= 150 ns', met: (r) => r.measured.value <= 150, gpuOnly: false },
  { suite: 'heap-malloc-free', pick: () => true, target: 'cached malloc + free through JS <= 1.5 us', met: (r) => r.measured.value <= 1500, gpuOnly: false },
  { suite: 'serving-chain', pick: () => true, target: 'chained on the GPU faster than through the host', met: (r) => r.ratio < 1, gpuOnly: true },
  {
    suite: 'serving-concurrency',
    // With one client both do the same work: their ratio is the run-to-run noise.
    pick: (r) => !unit(r).includes(' 1 client'),
    target: 'queued runs lose no throughput to a JS mutex',
    met: (r) => r.ratio >= 0.95,
    gpuOnly: false,
  },
  {
    suite: 'kv-attention',
    target: 'paged decode attention <= 1.25 x the same kernel over contiguous K/V',
    pick: () => true,
    met: (r) => r.ratio <= 1.25,
    gpuOnly: true,
  },
  {
    suite: 'kv-waste-capacity',
    pick: (r) => unit(r).includes('reserved but unused'),
    target: 'paged KV cache wastes <= 4% of its bytes',
    met: (r) => r.measured.value <= 4,
    gpuOnly: false,
  },
  { suite: 'readback-16mib', pick: () => true, target: 'a figure to record', met: () => null, gpuOnly: true },
  { suite: 'copy-64mib', pick: () => true, target: 'a figure to record', met: () => null, gpuOnly: true },
]

/** Minutes the whole command may take; suites that would start later are reported as skipped. */
const BUDGET_MS = Number(process.env.WGALLOC_DEVICE_BENCH_MINUTES ?? 8) * 60_000

async function main(): Promise<number> {
  const started = Date.now()
  const gpu = await Gpu.request()
  const info = gpu.info
  const software = /cpu/i.test(info.deviceType) || /llvmpipe|lavapipe|swiftshader/i.test(info.adapterName)
  const device = { adapter: info.adapterName, backend: info.backend, deviceType: info.deviceType, driver: info.driver, driverInfo: info.driverInfo, software }
  const machine = machineInfo()
  const names = [...new Set(CHECKS.map((c) => c.suite))]
  const results = new Map<string, Result[]>()
  const skipped: string[] = []
  for (const name of names) {
    if (Date.now() - started > BUDGET_MS) {
      skipped.push(name)
      continue
    }
    const suite = SUITES.find((s) => s.name === name)
    if (!suite) throw new Error(`bench:device names an unknown suite ${name}`)
    process.stderr.write(`running ${name} ...\n`)
    results.set(name, ([] as Result[]).concat(await suite.run({ gpu, timeIt })))
  }
  gpu.destroy()
  const checks = CHECKS.flatMap((c) =>
    (results.get(c.suite) ?? []).filter(c.pick).map((r) => {
      const met = c.met(r)
      const verdict = met === null ? 'recorded' : c.gpuOnly && software ? 'only a GPU can judge' : met ? 'met' : 'missed'
      return { suite: c.suite, target: c.target, verdict, gpuOnly: c.gpuOnly, result: r }
    }),
  )
  const report = { generatedAt: new Date().toISOString(), device, machine, minutes: (Date.now() - started) / 60_000, skipped, checks }
  writeFileSync(join(ROOT, 'bench', 'device-report.json'), `${JSON.stringify(report, null, 2)}\n`)
  console.log(`device: ${device.adapter} (${device.backend}, ${device.deviceType}, driver ${device.driver} ${device.driverInfo})`)
  console.log(`machine: ${machine.cpu} x${machine.cores}, ${(machine.memoryBytes / 2 ** 30).toFixed(0)} GiB; ${report.minutes.toFixed(1)} min\n`)
  console.log(
    table(
      ['suite', 'measured', 'baseline', 'ratio', 'target', 'verdict'],
      checks.map((c) => [
        c.suite,
        `${fmt(c.result.measured.value)} ${c.result.measured.unit}`,
        `${fmt(c.result.baseline.value)} ${c.result.baseline.unit}`,
        Number(c.result.ratio.toFixed(3)),
        c.target,
        c.verdict,
      ]),
    ),
  )
  if (software) console.log('\nA software device: the verdicts marked "only a GPU can judge" need a GPU machine.')
  if (skipped.length) console.log(`\nskipped (past the ${BUDGET_MS / 60_000} min budget): ${skipped.join(', ')}`)
  console.log('\nwritten: bench/device-report.json')
  return 0
}

main().then(
  (code) => {
    process.exitCode = code
  },
  (err) => {
    console.error(err)
    process.exitCode = 1
  },
)
