// Builds the ava suite into dist-test/ with tsc (type errors fail the build). dist-test/ is
// rebuilt from scratch, so a deleted test never runs from a stale output. `--out DIR` builds into
// another folder one level below the root (the tests find the root as their parent folder).
import { spawnSync } from 'node:child_process'
import { rmSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'

const root = join(dirname(fileURLToPath(import.meta.url)), '..')
const at = process.argv.indexOf('--out')
const out = join(root, at > 0 ? process.argv[at + 1] : 'dist-test')
if (dirname(out) !== root) throw new Error(`build-tests: ${out} must be a folder directly under ${root}`)

rmSync(out, { recursive: true, force: true })
const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc')
const built = spawnSync(process.execPath, [tsc, '-p', join(root, '__test__', 'tsconfig.build.json'), '--outDir', out], { stdio: 'inherit' })
if (built.status !== 0) {
  console.error('build-tests: tsc reported errors in __test__ (above)')
  process.exit(built.status ?? 1)
}
