// `promtool check metrics` on exposition text: Prometheus's own linter (Debian's
// `prometheus` package; .ci/run installs it). Missing, it fails the test rather than skip.
import { spawnSync } from 'node:child_process'

/** { ok, output } of promtool on `text`; throws when promtool is not installed. */
export function promtoolCheck(text: string): { ok: boolean; output: string } {
  const r = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' })
  if (r.error) throw new Error(`promtool is not installed (apt-get install prometheus): ${r.error.message}`)
  return { ok: r.status === 0, output: `${r.stdout}${r.stderr}` }
}

/** `{ 'name{labels}': value }` of exposition text. */
export function samples(text: string): Record<string, number> {
  const out: Record<string, number> = {}
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue
    const at = line.lastIndexOf(' ')
    out[line.slice(0, at)] = Number(line.slice(at + 1))
  }
  return out
}

/** One sample line of exposition text: its metric name, its `{labels}` as written, its value. */
export interface ExpositionSample {
  name: string
  labels: string
  value: number
}

/** The families of exposition text (`# TYPE` lines, name to type) and every sample, repeats kept. */
export function exposition(text: string): { types: Map<string, string>; samples: ExpositionSample[] } {
  const types = new Map<string, string>()
  const out: ExpositionSample[] = []
  for (const line of text.split('\n')) {
    const type = /^# TYPE (\S+) (\S+)$/.exec(line)
    if (type) types.set(type[1], type[2])
    if (line === '' || line.startsWith('#')) continue
    const at = line.lastIndexOf(' ')
    const series = line.slice(0, at)
    const brace = series.indexOf('{')
    out.push({
      name: brace < 0 ? series : series.slice(0, brace),
      labels: brace < 0 ? '' : series.slice(brace),
      value: Number(line.slice(at + 1)),
    })
  }
  return { types, samples: out }
}
