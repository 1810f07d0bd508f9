// Builds the ava suite into dist-test/ with tsc (type errors fail the build). dist-test/ is
// rebuilt from scratch, so a deleted test never runs from a stale output. It sits one level below
// the root, as __test__/ does, so the tests find the root as their parent folder.
import { spawnSync } from 'node:child_process'
import { rmSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'

const root = join(dirname(fileURLToPath(import.meta.url)), '..')
const out = join(root, 'dist-test')

rmSync(out, { recursive: true, force: true })
const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc')
const built = spawnSync(process.execPath, [tsc, '-p', join(root, '__test__', 'tsconfig.build.json')], { stdio: 'inherit' })
if (built.status !== 0) {
  console.error('build-tests: tsc reported errors in __test__ (above)')
  process.exit(built.status ?? 1)
}
