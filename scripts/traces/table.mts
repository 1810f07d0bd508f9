// Rewrites the trace table in bench/data/traces/README.md (between its BEGIN/END markers) from
// the trace files this generator writes, so the figures there always match the data. Usage:
//   cd scripts/traces && npm run table   (npm run build, then node dist/table.mjs)
import fs from 'node:fs'
import path from 'node:path'
import type { TraceFile } from './trace-format.mjs'
import { MODELS, PACKAGE_DIR, PIPELINES } from './workloads.mjs'

const here = PACKAGE_DIR
const dir = path.resolve(here, '../../bench/data/traces')
const readme = path.join(dir, 'README.md')
const names = [...Object.keys(MODELS), ...Object.keys(PIPELINES)]
const files = fs
  .readdirSync(dir)
  .filter((f) => f.endsWith('.trace.json') && names.some((n) => f.startsWith(`${n}.`)))
  .sort((a, b) => a.localeCompare(b, 'en', { numeric: true }))
const n = (x: number) => x.toLocaleString('en-US')
const rows = files.map((f) => {
  const t = JSON.parse(fs.readFileSync(path.join(dir, f), 'utf8')) as TraceFile
  return (
    `| ${t.model} | ${t.trace} | ${t.requests} | ${t.distinctShapes ?? 1} | ${n(t.numEvents)} | ` +
    `${n(t.peakLiveBytes)} | ${(t.peakLiveBytes / 2 ** 20).toFixed(1)} | ${n(fs.statSync(path.join(dir, f)).size)} | \`${f}\` |`
  )
})
const table = [
  '| model | trace | requests | distinct shapes | events | peak live bytes | peak live MiB | file bytes | file |',
  '| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |',
  ...rows,
].join('\n')
const begin = '<!-- BEGIN GENERATED TABLE (scripts/traces/table.mts) -->'
const end = '<!-- END GENERATED TABLE -->'
const text = fs.readFileSync(readme, 'utf8')
const at = text.indexOf(begin)
const to = text.indexOf(end)
if (at < 0 || to < at) throw new Error(`${readme} has no ${begin} ... ${end} section`)
fs.writeFileSync(readme, `${text.slice(0, at + begin.length)}\n${table}\n${text.slice(to)}`)
console.log(table)
