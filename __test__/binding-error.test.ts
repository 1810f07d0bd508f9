// Loading without a usable binary: a copy of the package's JS (dist/ and
// package.json) with no addon beside it is loaded in a child process through
// the real napi-rs loader, which must fail with a BINARY_NOT_FOUND that names
// the platform, the package to install and what the loader tried.
import { spawnSync } from 'node:child_process'
import { copyFileSync, cpSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import test, { type ExecutionContext } from 'ava'

const { targetName, currentTarget } = require('../dist/internal/binding-error.js') as {
  targetName: (triple: string) => string
  currentTarget: () => { target: string }
}

const root = join(__dirname, '..')
const pkg = require('../package.json') as { version: string; napi: { targets: string[] } }

// This machine's target, as `napi build --platform` named the addon it built
// (independent of binding-error.ts's own detection); falls back to it otherwise.
const built = readdirSync(join(root, 'dist'))
  .map((f) => /^wgalloc\.(.+)\.node$/.exec(f)?.[1])
  .find(Boolean)
const target = built ?? currentTarget().target

/** A package copy without the addon, outside any node_modules tree of this checkout. */
function packageCopy(t: ExecutionContext): string {
  const dir = mkdtempSync(join(tmpdir(), 'wgalloc-nobinary-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  copyFileSync(join(root, 'package.json'), join(dir, 'package.json'))
  cpSync(join(root, 'dist'), join(dir, 'dist'), { recursive: true, filter: (src) => !src.endsWith('.node') })
  return dir
}

/** The error a child process threw on loading the copy, as plain data. */
interface LoadError {
  name: string
  code: string
  message: string
  platform: string
  arch: string
  libc: string | null
  target: string
  packageName: string
  supported: boolean
  loadErrors: string[]
  cause: string
}

/** Loads the copy in a child process; returns the error it threw, as plain data. */
function loadError(
  dir: string,
  { preload, env = {}, entry = 'cjs' }: { preload?: string; env?: Record<string, string>; entry?: 'cjs' | 'esm' } = {},
): LoadError {
  const report =
    'const r = (e) => console.log(JSON.stringify({ name: e.name, code: e.code, message: e.message, platform: e.platform, arch: e.arch, libc: e.libc, target: e.target, packageName: e.packageName, supported: e.supported, loadErrors: e.loadErrors, cause: e.cause?.message }))'
  const load =
    entry === 'cjs'
      ? `try { require('./dist/index.js'); console.log('null') } catch (e) { r(e) }`
      : `import('./dist/index.mjs').then(() => console.log('null'), r)`
  const args = [...(preload ? ['-r', preload] : []), '-e', `${report}\n${load}`]
  const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('NAPI_RS_') && k !== 'NODE_PATH'))
  const r = spawnSync(process.execPath, args, { cwd: dir, env: { ...clean, ...env }, encoding: 'utf8' })
  if (r.status !== 0) throw new Error(`child failed: ${r.stderr}`)
  return JSON.parse(r.stdout) as LoadError
}

test('platform package not installed: names the platform and the package to install', (t) => {
  const e = loadError(packageCopy(t))
  t.is(e.name, 'WgallocError')
  t.is(e.code, 'BINARY_NOT_FOUND')
  t.is(e.platform, process.platform)
  t.is(e.arch, process.arch)
  t.is(e.target, target)
  t.is(e.packageName, `wgalloc-${target}`)
  t.true(e.supported)
  t.true(e.message.includes(`${process.platform} ${process.arch}`), e.message)
  t.true(e.message.includes(`npm install wgalloc-${target}@${pkg.version}`), e.message)
  t.true(e.message.includes('--omit=optional'))
  // the package may not be published yet (a packed tarball ships no binary): a source build is named too
  t.regex(e.message, /Or use a source build: clone \S+wgalloc\.git and run npm install there/)
  t.regex(e.message, /NAPI_RS_NATIVE_LIBRARY_PATH/)
  // the loader's own attempts, in order: the file beside the loader, then the package
  const i = e.loadErrors.findIndex((m) => m.includes(`./wgalloc.${target}.node`))
  const j = e.loadErrors.findIndex((m) => m.includes(`'wgalloc-${target}'`))
  t.true(i >= 0 && j > i, JSON.stringify(e.loadErrors))
  t.true(e.message.includes(e.loadErrors[j]))
  t.regex(e.cause, /Cannot find native binding/)
  if (process.platform === 'linux') t.is(e.libc, target.endsWith('-musl') ? 'musl' : 'glibc')
})

test('the ESM entry rejects with the same error', (t) => {
  const e = loadError(packageCopy(t), { entry: 'esm' })
  t.is(e.code, 'BINARY_NOT_FOUND')
  t.is(e.packageName, `wgalloc-${target}`)
})

test('platform package installed but its binary is broken: says so and shows the dlopen error', (t) => {
  const dir = packageCopy(t)
  const platformDir = join(dir, 'node_modules', `wgalloc-${target}`)
  mkdirSync(platformDir, { recursive: true })
  copyFileSync(join(root, 'npm', target, 'package.json'), join(platformDir, 'package.json'))
  writeFileSync(join(platformDir, `wgalloc.${target}.node`), 'not a shared library')
  const e = loadError(dir)
  t.is(e.code, 'BINARY_NOT_FOUND')
  t.true(e.message.startsWith(`wgalloc-${target}@${pkg.version} is installed`), e.message)
  t.true(
    e.loadErrors.some((m) => m.includes(join(platformDir, `wgalloc.${target}.node`))),
    JSON.stringify(e.loadErrors),
  )
})

test('platform package of another version: asks for the matching one', (t) => {
  const dir = packageCopy(t)
  const platformDir = join(dir, 'node_modules', `wgalloc-${target}`)
  mkdirSync(platformDir, { recursive: true })
  const manifest = JSON.parse(readFileSync(join(root, 'npm', target, 'package.json'), 'utf8')) as Record<string, unknown>
  writeFileSync(join(platformDir, 'package.json'), JSON.stringify({ ...manifest, version: '0.0.1', main: 'missing.node' }))
  const e = loadError(dir)
  t.true(e.message.includes(`wgalloc-${target}@0.0.1 is installed`), e.message)
  t.true(e.message.includes(`npm install wgalloc-${target}@${pkg.version}`), e.message)
})

test('a platform without a prebuilt binary: lists the prebuilt ones and says to build from source', (t) => {
  const dir = packageCopy(t)
  const preload = join(dir, 'mips.cjs')
  writeFileSync(preload, "Object.defineProperty(process, 'arch', { value: 'mips' })\n")
  const e = loadError(dir, { preload })
  t.is(e.arch, 'mips')
  t.false(e.supported)
  t.regex(e.message, /no prebuilt wgalloc binary for .* mips/)
  for (const triple of pkg.napi.targets) t.true(e.message.includes(targetName(triple)), triple)
  t.regex(e.message, /Rust toolchain/)
  t.true(
    e.loadErrors.some((m) => /Unsupported architecture/.test(m)),
    JSON.stringify(e.loadErrors),
  )
})

test('NAPI_RS_NATIVE_LIBRARY_PATH naming a missing addon: says the override failed', (t) => {
  const dir = packageCopy(t)
  const override = join(dir, 'nowhere', 'custom.node')
  const e = loadError(dir, { env: { NAPI_RS_NATIVE_LIBRARY_PATH: override } })
  t.is(e.code, 'BINARY_NOT_FOUND')
  t.true(e.message.startsWith(`The addon named by NAPI_RS_NATIVE_LIBRARY_PATH (${override}) failed to load.`), e.message)
  t.true(
    e.loadErrors.some((m) => m.includes(override)),
    JSON.stringify(e.loadErrors),
  )
})

test('a source checkout without a build: says to run npm run build', (t) => {
  const dir = packageCopy(t)
  writeFileSync(join(dir, 'Cargo.toml'), '[package]\n')
  const e = loadError(dir)
  t.regex(e.message, /source checkout has no built addon .*`npm run build`/)
})

test('the CLI reports it as a one-line-prefixed error with exit code 1, not a stack trace', (t) => {
  const dir = packageCopy(t)
  const r = spawnSync(process.execPath, [join(dir, 'dist', 'cli.js'), 'info'], { cwd: dir, encoding: 'utf8' })
  t.is(r.status, 1)
  t.true(r.stderr.startsWith('wgalloc: [BINARY_NOT_FOUND] '), r.stderr)
  t.true(r.stderr.includes(`npm install wgalloc-${target}@${pkg.version}`), r.stderr)
  t.false(r.stderr.includes('    at '), r.stderr)
})

test('targetName maps every napi target to its generated npm/ package', (t) => {
  for (const triple of pkg.napi.targets) {
    const name = targetName(triple)
    const manifest = JSON.parse(readFileSync(join(root, 'npm', name, 'package.json'), 'utf8')) as { name: string; main: string }
    t.is(manifest.name, `wgalloc-${name}`)
    t.is(manifest.main, `wgalloc.${name}.node`)
  }
  t.is(targetName('x86_64-unknown-linux-musl'), 'linux-x64-musl')
})
