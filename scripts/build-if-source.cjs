'use strict'
// `prepare` hook: in a source checkout (Cargo.toml present), build the addon so
// `npx wgalloc ...` works right after `npm install` / `npm ci`. npm runs
// `prepare` for the project itself, for git dependencies and for linked
// folders, never for a registry or tarball install, which has no Cargo.toml
// anyway and gets its binary from the platform package.
const { existsSync } = require('node:fs')
const { join } = require('node:path')
const { spawnSync } = require('node:child_process')

const root = join(__dirname, '..')
if (!existsSync(join(root, 'Cargo.toml'))) process.exit(0)
if (process.env.WGALLOC_SKIP_BUILD === '1') process.exit(0)
// npm also runs `prepare` before `npm pack` / `npm publish`: the tarball ships
// no binary (release binaries live in the platform packages), so don't build one.
if (process.env.npm_command === 'pack' || process.env.npm_command === 'publish') process.exit(0)
const cargo = spawnSync('cargo', ['--version'], { stdio: 'ignore' })
if (cargo.status !== 0) {
  console.warn('wgalloc: no Rust toolchain found; skipping the native build (install rustup, then `npm run build`).')
  process.exit(0)
}
const r = spawnSync('npm', ['run', 'build:debug'], { cwd: root, stdio: 'inherit', shell: process.platform === 'win32' })
process.exit(r.status ?? 1)
