// The serving-concurrency and KV benchmarks, short (`WGALLOC_BENCH_SHORT=1`), so they run with
// every test run: they build, their checks hold (every concurrent answer compared), and the KV
// targets, which do not depend on timing, are met.
import { spawnSync } from 'node:child_process'
import { mkdtempSync, readFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import test from 'ava'

const ROOT = join(__dirname, '..')
const TSC = require.resolve('typescript/bin/tsc')

interface Figure {
  value: number
}
interface Result {
  name: string
  measured: Figure
  baseline: Figure
  ratio: number
}

test('serving-concurrency and the KV suites run short and meet the KV targets', (t) => {
  const built = spawnSync(process.execPath, [TSC, '-p', join(ROOT, 'bench', 'tsconfig.json')], { encoding: 'utf8' })
  t.is(built.status, 0, built.stdout + built.stderr)
  const report = join(mkdtempSync(join(tmpdir(), 'wgalloc-bench-')), 'report.json')
  const suites = ['serving-concurrency', 'kv-waste-capacity', 'kv-prefix-reuse']
  const run = spawnSync(process.execPath, [join(ROOT, 'dist-bench', 'bench', 'run.js'), ...suites], {
    encoding: 'utf8',
    env: { ...process.env, WGALLOC_BENCH_SHORT: '1', WGALLOC_BENCH_REPORT: report },
    timeout: 240_000,
  })
  t.is(run.status, 0, run.stdout + run.stderr)
  const results = (JSON.parse(readFileSync(report, 'utf8')) as { results: Result[] }).results
  const of = (name: string) => results.filter((r) => r.name === name)
  const concurrency = of('serving-concurrency')
  t.is(concurrency.length, 3, '1, 4 and 16 clients')
  for (const r of concurrency) t.true(r.measured.value > 0 && r.baseline.value > 0)
  const [waste, peak] = of('kv-waste-capacity')
  t.true(waste.measured.value <= 4, `paged waste ${waste.measured.value}% (target <= 4%)`)
  t.true(waste.baseline.value > 50, `max-length waste ${waste.baseline.value}%`)
  t.true(peak.ratio >= 2, `peak sequences ${peak.ratio}x max-length (target >= 2x)`)
  const [prefix] = of('kv-prefix-reuse')
  t.is(prefix.ratio, 1, 'every shareable block of the system prompt served from the prefix cache')
})
