'use strict'
// The figures behind the README's Reliability table. Every reliability test records
// its counts under the run's mode ('short' for `npm test`, 'stress' for `npm run
// stress`) in bench/reliability-report.json (or WGALLOC_RELIABILITY_REPORT);
// `node bench/reliability-table.cjs` prints the table from it. Tests of one file run in
// one process, so plain synchronous read-modify-write is enough.
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')

const FILE = process.env.WGALLOC_RELIABILITY_REPORT ?? path.join(__dirname, '..', 'bench', 'reliability-report.json')
const STRESS = process.env.WGALLOC_STRESS === '1'
const MODE = process.env.WGALLOC_RELIABILITY_MODE ?? (STRESS ? 'stress' : 'short')

/** A knob: its env value, else the short or the stress default. */
function knob(name, short, stress) {
  return Number(process.env[name] ?? (STRESS ? stress : short))
}

function read() {
  try {
    return JSON.parse(fs.readFileSync(FILE, 'utf8'))
  } catch {
    return { modes: {} }
  }
}

/** Records `counts` for `test` under the current mode, with the machine it ran on. */
function record(test, counts, gpu) {
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

module.exports = { record, knob, MODE, STRESS, FILE }
