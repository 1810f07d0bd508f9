// Builds the published JS from js/: tsc into dist/ (CommonJS, plus the .mjs ESM entry), the
// generated napi loader copied beside it, the viewer's page scripts (tsc, as classic browser
// scripts) with their other assets, and the public declarations bundled into the one
// top-level index.d.ts.
import { execFileSync } from 'node:child_process'
import { cpSync, existsSync, mkdirSync, readdirSync, rmSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'

const root = join(dirname(fileURLToPath(import.meta.url)), '..')
const require = createRequire(import.meta.url)
const run = (script, args) => execFileSync(process.execPath, [require.resolve(script), ...args], { cwd: root, stdio: 'inherit' })

const dist = join(root, 'dist')
mkdirSync(dist, { recursive: true })
// After `napi build`: its loader and declarations become the committed js/binding.* (tsc reads
// the declarations; the loader is copied back below). Generated there, they are byte-stable.
if (process.argv.includes('--binding-from-dist')) {
  for (const f of ['binding.js', 'binding.d.ts']) cpSync(join(dist, f), join(root, 'js', f))
}
// Stale output of a removed source must not linger in the package; the addon (`*.node`) stays.
for (const entry of readdirSync(dist)) if (!entry.endsWith('.node')) rmSync(join(dist, entry), { recursive: true, force: true })

run('typescript/bin/tsc', ['-p', 'tsconfig.json'])
cpSync(join(root, 'js/binding.js'), join(dist, 'binding.js'))
// The viewer's page scripts: js/view/client/*.ts -> dist/view/client/*.js (its tsconfig sets outDir);
// everything else there but the TypeScript sources and the tsconfig (page.css, vendor/) is copied as is.
const client = join(root, 'js/view/client')
if (existsSync(client)) {
  run('typescript/bin/tsc', ['-p', 'js/view/client/tsconfig.json'])
  for (const entry of readdirSync(client)) {
    if (entry.endsWith('.ts') || entry === 'tsconfig.json') continue
    cpSync(join(client, entry), join(dist, 'view/client', entry), { recursive: true })
  }
}
run('dts-bundle-generator/dist/bin/dts-bundle-generator.js', [
  '--silent',
  '--project',
  'tsconfig.json',
  '--no-banner',
  '--export-referenced-types=false',
  '-o',
  'index.d.ts',
  'js/index.ts',
])
