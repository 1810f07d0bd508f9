'use strict'
// Benchmark harness: `npm run bench [-- name...]`. Each suite measures wgalloc and a
// baseline in the same run and reports the ratio; bench/report.json keeps the
// figures with the machine and adapter they came from.
const { readdirSync, writeFileSync } = require('node:fs')
const { join } = require('node:path')
const os = require('node:os')
const { Gpu } = require('..')
const { table } = require('../dist/cli/table.js')

function loadSuites() {
  const dir = join(__dirname, 'suites')
  return readdirSync(dir)
    .filter((f) => f.endsWith('.cjs'))
    .sort()
    .flatMap((f) => require(join(dir, f)))
}

/** Median wall time in ms of `fn` over `runs` runs after `warmup` runs. */
async function timeIt(fn, { runs = 9, warmup = 2 } = {}) {
  for (let i = 0; i < warmup; i++) await fn()
  const samples = []
  for (let i = 0; i < runs; i++) {
    const t0 = process.hrtime.bigint()
    await fn()
    samples.push(Number(process.hrtime.bigint() - t0) / 1e6)
  }
  samples.sort((a, b) => a - b)
  return samples[samples.length >> 1]
}

const fmt = (v) => (Math.abs(v) >= 1000 ? Math.round(v).toString() : v.toPrecision(4))

async function main(names) {
  const suites = loadSuites()
  const unknown = names.filter((n) => !suites.some((s) => s.name === n))
  if (unknown.length) {
    console.error(`unknown benchmark(s): ${unknown.join(', ')}; available: ${suites.map((s) => s.name).join(', ')}`)
    return 2
  }
  const selected = names.length ? suites.filter((s) => names.includes(s.name)) : suites
  const gpu = await Gpu.request()
  const machine = {
    cpu: os.cpus()[0]?.model ?? 'unknown',
    cores: os.cpus().length,
    memoryBytes: os.totalmem(),
    platform: `${process.platform}-${process.arch}`,
    node: process.version,
  }
  const adapter = { name: gpu.info.adapterName, backend: gpu.info.backend, deviceType: gpu.info.deviceType }
  const results = []
  for (const suite of selected) {
    process.stderr.write(`running ${suite.name} ...\n`)
    const r = await suite.run({ gpu, timeIt })
    // A suite returns one result, or several each with its own name.
    for (const one of [].concat(r)) results.push({ name: suite.name, description: suite.description, ...one, machine, adapter })
  }
  const report = { generatedAt: new Date().toISOString(), machine, adapter, results }
  writeFileSync(join(__dirname, 'report.json'), JSON.stringify(report, null, 2) + '\n')
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
  console.log('\nwritten: bench/report.json')
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
