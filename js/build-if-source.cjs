'use strict'
// `prepare` hook: in a source checkout (Cargo.toml present), build the addon so
// `npx wgalloc ...` works right after `npm install`. Installs from the registry
// have no Cargo.toml and ship prebuilt binaries, so this does nothing there.
const { existsSync } = require('node:fs')
const { join } = require('node:path')
const { spawnSync } = require('node:child_process')

const root = join(__dirname, '..')
if (!existsSync(join(root, 'Cargo.toml'))) process.exit(0)
if (process.env.WGALLOC_SKIP_BUILD === '1') process.exit(0)
const cargo = spawnSync('cargo', ['--version'], { stdio: 'ignore' })
if (cargo.status !== 0) {
  console.warn('wgalloc: no Rust toolchain found; skipping the native build (install rustup, then `npm run build`).')
  process.exit(0)
}
const r = spawnSync('npm', ['run', 'build:debug'], { cwd: root, stdio: 'inherit', shell: process.platform === 'win32' })
process.exit(r.status ?? 1)
