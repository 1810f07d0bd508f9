'use strict'
// `prepare` hook. npm runs it for the project itself (`npm install` / `npm ci`), for git
// dependencies and linked folders, and before `npm pack` / `npm publish`; never for a registry
// or tarball install, which brings compiled JS and gets its binary from the platform package.
// In a source checkout it builds what the clone needs: the debug addon and the compiled JS;
// for pack and publish, only the JS (the tarball ships no binary).
const { existsSync } = require('node:fs')
const { join } = require('node:path')
const { spawnSync } = require('node:child_process')

const root = join(__dirname, '..')
const npm = (script) => {
  const r = spawnSync('npm', ['run', script], { cwd: root, stdio: 'inherit', shell: process.platform === 'win32' })
  process.exit(r.status ?? 1)
}

if (!existsSync(join(root, 'Cargo.toml'))) process.exit(0)
if (process.env.WGALLOC_SKIP_BUILD === '1') process.exit(0)
if (process.env.npm_command === 'pack' || process.env.npm_command === 'publish') npm('build:js')
const cargo = spawnSync('cargo', ['--version'], { stdio: 'ignore' })
if (cargo.status !== 0) {
  console.warn('wgalloc: no Rust toolchain found; building the JS only (install rustup, then `npm run build`).')
  npm('build:js')
}
npm('build:debug')
