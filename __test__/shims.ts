// Stand-ins for the `cargo` and `npm` executables, so the `prepare` hook's
// decision (build or not) can be observed without starting a build. Each shim
// appends its name and arguments to calls.log; SHIM_<NAME>_STATUS sets its exit code.
import { type SpawnSyncReturns, spawnSync } from 'node:child_process'
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'

export interface Shims {
  bin: string
  calls: () => string[]
}

export function makeShims(dir: string, names = ['cargo', 'npm']): Shims {
  const bin = join(dir, 'bin')
  const log = join(dir, 'calls.log')
  mkdirSync(bin, { recursive: true })
  for (const name of names) {
    const status = `SHIM_${name.toUpperCase()}_STATUS`
    writeFileSync(join(bin, name), `#!/bin/sh\necho "${name} $*" >> '${log}'\nexit \${${status}:-0}\n`, { mode: 0o755 })
  }
  return {
    bin,
    calls: () => (existsSync(log) ? readFileSync(log, 'utf8').trim().split('\n') : []),
  }
}

/** Runs a script with PATH limited to the shims (no real cargo or npm reachable). */
export function runWithShims(script: string, shims: Shims, env: Record<string, string> = {}): SpawnSyncReturns<string> {
  const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('npm_') && k !== 'WGALLOC_SKIP_BUILD'))
  return spawnSync(process.execPath, [script], { env: { ...clean, PATH: shims.bin, ...env }, encoding: 'utf8' })
}
