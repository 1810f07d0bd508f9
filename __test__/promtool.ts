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
