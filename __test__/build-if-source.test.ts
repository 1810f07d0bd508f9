// The `prepare` hook (scripts/build-if-source.cjs) builds the addon and the JS in a
// source checkout on `npm install` / `npm ci`, only the JS while npm packs or
// publishes, and nothing in an installed copy. Run against cargo/npm shims that
// record calls.
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import test, { type ExecutionContext } from 'ava'
import { makeShims, runWithShims, type Shims } from './shims.js'

const unixTest = process.platform === 'win32' ? test.skip : test

/** A package root holding the hook, with or without Cargo.toml (a checkout vs an installed copy). */
function packageRoot(t: ExecutionContext, { checkout, shims = ['cargo', 'npm'] }: { checkout: boolean; shims?: string[] }): { script: string; shims: Shims } {
  const dir = mkdtempSync(join(tmpdir(), 'wgalloc-prepare-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  mkdirSync(join(dir, 'scripts'))
  copyFileSync(join(__dirname, '..', 'scripts', 'build-if-source.cjs'), join(dir, 'scripts', 'build-if-source.cjs'))
  if (checkout) writeFileSync(join(dir, 'Cargo.toml'), '[package]\n')
  return { script: join(dir, 'scripts', 'build-if-source.cjs'), shims: makeShims(dir, shims) }
}

unixTest('source checkout under npm ci / npm install: builds the debug addon', (t) => {
  for (const command of ['ci', 'install']) {
    const { script, shims } = packageRoot(t, { checkout: true })
    const r = runWithShims(script, shims, { npm_command: command })
    t.is(r.status, 0, r.stderr)
    t.deepEqual(shims.calls(), ['cargo --version', 'npm run build:debug'], command)
  }
})

unixTest('source checkout: a failed build fails the install', (t) => {
  const { script, shims } = packageRoot(t, { checkout: true })
  const r = runWithShims(script, shims, { npm_command: 'ci', SHIM_NPM_STATUS: '3' })
  t.is(r.status, 3)
  t.deepEqual(shims.calls(), ['cargo --version', 'npm run build:debug'])
})

unixTest('installed copy (no Cargo.toml): never builds', (t) => {
  const { script, shims } = packageRoot(t, { checkout: false })
  const r = runWithShims(script, shims, { npm_command: 'install' })
  t.is(r.status, 0, r.stderr)
  t.deepEqual(shims.calls(), [])
})

unixTest('npm pack / npm publish in a checkout: the JS only (the tarball ships no binary)', (t) => {
  for (const command of ['pack', 'publish']) {
    const { script, shims } = packageRoot(t, { checkout: true })
    const r = runWithShims(script, shims, { npm_command: command })
    t.is(r.status, 0, r.stderr)
    t.deepEqual(shims.calls(), ['npm run build:js'], command)
  }
})

unixTest('WGALLOC_SKIP_BUILD=1: no build', (t) => {
  const { script, shims } = packageRoot(t, { checkout: true })
  const r = runWithShims(script, shims, { npm_command: 'ci', WGALLOC_SKIP_BUILD: '1' })
  t.is(r.status, 0, r.stderr)
  t.deepEqual(shims.calls(), [])
})

unixTest('no Rust toolchain: warns, builds the JS and lets the install finish', (t) => {
  const { script, shims } = packageRoot(t, { checkout: true, shims: ['npm'] })
  const r = runWithShims(script, shims, { npm_command: 'ci' })
  t.is(r.status, 0)
  t.regex(r.stderr, /no Rust toolchain found/)
  t.deepEqual(shims.calls(), ['npm run build:js'])
})
