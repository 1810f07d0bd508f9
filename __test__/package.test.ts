// The published package as a user gets it: `npm pack` of this checkout, plus
// this platform's binary package (npm/<target>/ holding the addon built here,
// as `napi artifacts` fills it for a release), installed offline into a fresh
// project. There: require, import, a TypeScript consumer under tsc, and
// `npx wgalloc info`. The tarball itself must hold only what users need.
import { spawnSync } from 'node:child_process'
import { copyFileSync, existsSync, linkSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, posix } from 'node:path'
import test from 'ava'
import * as wgalloc from 'wgalloc'
import { planMemory } from 'wgalloc'

const { currentTarget } = require('../dist/internal/binding-error.js') as { currentTarget: () => { target: string } }

const root = join(__dirname, '..')
const pkg = require('../package.json') as {
  version: string
  main: string
  types: string
  bin: Record<string, string>
  exports: Record<string, string | Record<string, string>>
}
const { target } = currentTarget()
const win = process.platform === 'win32'

function run(cmd: string, args: string[], cwd: string, env: Record<string, string> = {}): string {
  const r = spawnSync(cmd, args, {
    cwd,
    encoding: 'utf8',
    shell: win,
    env: { ...process.env, npm_config_audit: 'false', npm_config_fund: 'false', npm_config_update_notifier: 'false', ...env },
  })
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')} (exit ${r.status}):\n${r.stderr}\n${r.stdout}`)
  return r.stdout
}

const node = (args: string[], cwd: string, env?: Record<string, string>) => run(process.execPath, args, cwd, env)

/** The addon file goes into the platform package without copying 70 MB when a hard link works. */
function placeAddon(from: string, to: string): void {
  for (const place of [linkSync, symlinkSync, copyFileSync]) {
    try {
      place(from, to)
      return
    } catch {}
  }
}

/** What `npm pack --json` reports for one tarball. */
interface Packed {
  filename: string
  size: number
  unpackedSize: number
  files: { path: string }[]
}

interface Setup {
  dir: string
  packed: Packed
  project: string
  installMs: number
}

let setup: Setup | undefined
function install(): Setup {
  setup ??= (() => {
    const dir = mkdtempSync(join(tmpdir(), 'wgalloc-pack-'))
    // `--ignore-scripts`: pack exactly what `npm publish` would, without the prepare hook.
    const [packed] = JSON.parse(run('npm', ['pack', '--json', '--ignore-scripts', '--pack-destination', dir], root)) as Packed[]
    const tarball = join(dir, packed.filename)

    const addon = join(root, 'dist', `wgalloc.${target}.node`)
    if (!existsSync(addon)) throw new Error(`no built addon ${addon}: run \`npm run build:debug\` first`)
    const platformPkg = join(dir, `platform-${target}`)
    mkdirSync(platformPkg)
    copyFileSync(join(root, 'npm', target, 'package.json'), join(platformPkg, 'package.json'))
    placeAddon(addon, join(platformPkg, `wgalloc.${target}.node`))

    const project = join(dir, 'project')
    mkdirSync(project)
    writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'consumer', version: '1.0.0', private: true }))
    const started = Date.now()
    run('npm', ['install', '--offline', '--no-audit', '--no-fund', tarball, platformPkg], project)
    return { dir, packed, project, installMs: Date.now() - started }
  })()
  return setup
}

test.after.always(() => {
  if (setup) rmSync(setup.dir, { recursive: true, force: true })
})

test('the tarball holds the entry points and their modules, and nothing else', (t) => {
  const { packed } = install()
  const files = packed.files.map((f) => f.path)
  t.log(`${files.length} files, ${packed.size} bytes packed, ${packed.unpackedSize} unpacked`)
  for (const f of files) {
    t.false(/^(__test__|dist-test[^/]*|src|crates|target|bench|npm|\.github|\.ci|artifacts)\//.test(f), `${f} must not be published`)
    t.false(/\.(node|rs|tgz)$|^(Cargo\.(toml|lock)|build\.rs|tsconfig\.json|package-lock\.json)$/.test(f), `${f} must not be published`)
    t.false(/^(js|scripts)\//.test(f), `${f}: sources and build scripts are not published`)
  }
  // one public type file: the bundled index.d.ts (the generated native declarations stay
  // internal); the metrics entry's declarations only re-export from it
  t.deepEqual(files.filter((f) => f.endsWith('.d.ts')).sort(), ['index.d.ts', 'metrics.d.ts'])
  const metricsTypes = readFileSync(join(root, 'metrics.d.ts'), 'utf8')
  t.deepEqual(
    metricsTypes.split('\n').filter((l) => l.trim() !== '' && !l.startsWith('//')),
    [`export { type MetricsHandle, type MetricsOptions, type MetricsRegistry, registerMetrics } from './index.js'`],
  )
  // everything package.json points at is inside
  const entries = [
    pkg.main,
    pkg.types,
    ...Object.values(pkg.bin),
    ...Object.values(pkg.exports).flatMap((e) => (typeof e === 'string' ? [e] : Object.values(e))),
  ]
  for (const e of ['package.json', 'README.md', ...entries]) t.true(files.includes(posix.normalize(e)), `${e} missing from the tarball`)
  // every relative require/import in a published module resolves to a published file
  const published = new Set(files)
  // (dist/binding.js, napi-rs's loader, only probes for optional per-platform files)
  for (const f of files.filter((x) => /\.(c?js|mjs|d\.ts)$/.test(x) && x !== 'dist/binding.js')) {
    const src = readFileSync(join(root, f), 'utf8')
    for (const [, spec] of src.matchAll(/(?:require\(|from |import\()\s*'(\.{1,2}\/[^']+)'/g)) {
      const p = posix.join(posix.dirname(f), spec)
      t.true(published.has(p) || published.has(p.replace(/\.js$/, '.d.ts')), `${f} needs ${spec}, which is not published`)
    }
  }
  // no runtime dependencies: the only ones a release adds are the optional platform packages
  const manifest = JSON.parse(readFileSync(join(install().project, 'node_modules', 'wgalloc', 'package.json'), 'utf8')) as {
    dependencies?: Record<string, string>
  }
  t.deepEqual(Object.keys(manifest.dependencies ?? {}), [])
})

test('installing the tarball builds nothing: no build script or Rust source comes with it', (t) => {
  const { project, installMs } = install()
  t.log(`npm install of the tarball + platform package: ${installMs} ms`)
  const installed = join(project, 'node_modules', 'wgalloc')
  t.false(existsSync(join(installed, 'Cargo.toml')))
  t.deepEqual(
    readdirSync(installed).filter((f) => f.endsWith('.node') || f === 'target'),
    [],
  )
  t.true(
    lstatSync(join(project, 'node_modules', `wgalloc-${target}`)).isSymbolicLink() ||
      existsSync(join(project, 'node_modules', `wgalloc-${target}`, 'package.json')),
  )
  // The compiled JS came in the tarball: nothing to build, and nothing that could build.
  t.true(existsSync(join(installed, 'dist', 'index.js')))
  t.false(existsSync(join(installed, 'scripts')))
})

test('require("wgalloc") loads the addon from the platform package and plans like this checkout', async (t) => {
  const { project } = install()
  const records = [
    { id: 'a', size: 32, first: 0, last: 1 },
    { id: 'b', size: 28, first: 1, last: 4 },
    { id: 'c', size: 36, first: 2, last: 5 },
  ]
  writeFileSync(
    join(project, 'consumer.cjs'),
    `
const w = require('wgalloc')
const addon = Object.keys(require.cache).filter((k) => k.endsWith('.node'))
w.planMemory(${JSON.stringify(records)}, { strategy: 'greedyBySize' }).then((plan) =>
  console.log(JSON.stringify({ exports: Object.keys(w).sort(), addon, version: require('wgalloc/package.json').version, slabSize: plan.slabSize, offsets: ['a', 'b', 'c'].map((id) => plan.offsetOf(id)) })))
`,
  )
  const out = JSON.parse(node(['consumer.cjs'], project)) as { exports: string[]; addon: string[]; version: string; slabSize: number; offsets: number[] }
  t.is(out.version, pkg.version)
  t.deepEqual(out.exports, Object.keys(wgalloc).sort())
  t.is(out.addon.length, 1)
  t.true(out.addon[0].includes(`platform-${target}`), `loaded ${out.addon[0]}`)
  const here = await planMemory(records, { strategy: 'greedyBySize' })
  t.is(out.slabSize, here.slabSize)
  t.deepEqual(
    out.offsets,
    ['a', 'b', 'c'].map((id) => here.offsetOf(id)),
  )
})

test('import("wgalloc") gives the same objects as require, named and default', (t) => {
  const { project } = install()
  writeFileSync(
    join(project, 'consumer.mjs'),
    `
import { Gpu, planMemory, WgallocError, ERROR_CODES } from 'wgalloc'
import wgalloc from 'wgalloc'
import { createRequire } from 'node:module'
const cjs = createRequire(import.meta.url)('wgalloc')
const dynamic = await import('wgalloc')
console.log(JSON.stringify({
  named: Gpu === cjs.Gpu && planMemory === cjs.planMemory && WgallocError === cjs.WgallocError,
  default: wgalloc === cjs,
  dynamic: dynamic.Gpu === cjs.Gpu,
  codes: ERROR_CODES.includes('BINARY_NOT_FOUND'),
}))
`,
  )
  t.deepEqual(JSON.parse(node(['consumer.mjs'], project)), { named: true, default: true, dynamic: true, codes: true })
})

test('TypeScript consumers (ESM and CommonJS) type-check against the published types', (t) => {
  const { project } = install()
  writeFileSync(
    join(project, 'consumer.mts'),
    `
import { Gpu, planMemory, WgallocError, type MemoryPlan, type WgallocErrorCode } from 'wgalloc'
export async function main(): Promise<number> {
  const gpu: Gpu = await Gpu.request({ powerPreference: 'low-power', signal: AbortSignal.timeout(5000) })
  const block = gpu.heap.malloc(1024, { usage: 'device' })
  const bytes: Buffer = await block.read(0, 16)
  block.free()
  const plan: MemoryPlan = await planMemory([{ id: 'a', size: 4, first: 0, last: 1 }], { strategy: 'best' })
  // @ts-expect-error slabSize is a number: proves the types are real, not any
  const wrong: string = plan.slabSize
  // @ts-expect-error a misspelled option value fails to compile
  await Gpu.request({ powerPreference: 'fastest' })
  const code: WgallocErrorCode = 'BINARY_NOT_FOUND'
  try {
    gpu.createBuffer(-1)
  } catch (e) {
    if (e instanceof WgallocError && e.code === code) return 0
  }
  return plan.slabSize + bytes.length + wrong.length
}
`,
  )
  writeFileSync(
    join(project, 'consumer.cts'),
    `
import wgalloc = require('wgalloc')
export const strategies: readonly wgalloc.Strategy[] = wgalloc.STRATEGIES
export const request: (options?: wgalloc.GpuRequestOptions) => Promise<wgalloc.Gpu> = (o) => wgalloc.Gpu.request(o)
`,
  )
  writeFileSync(
    join(project, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: {
        // skipLibCheck as most projects set it (`npm run typecheck` checks the .d.ts files themselves);
        // an unresolvable declaration still fails here: its types turn into any
        // and the @ts-expect-error above becomes unused
        module: 'nodenext',
        moduleResolution: 'nodenext',
        target: 'es2022',
        strict: true,
        noEmit: true,
        skipLibCheck: true,
        // a Node project has @types/node; borrow this checkout's (the install is offline)
        types: ['node'],
        typeRoots: [join(root, 'node_modules', '@types')],
      },
      files: ['consumer.mts', 'consumer.cts'],
    }),
  )
  const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc')
  const r = spawnSync(process.execPath, [tsc, '-p', project], { cwd: project, encoding: 'utf8' })
  t.is(r.status, 0, r.stdout + r.stderr)
})

test("'wgalloc/metrics' has its own types, right under every module resolution", (t) => {
  const { project } = install()
  const consumer = `import { registerMetrics, type MetricsHandle } from 'wgalloc/metrics'
// @ts-expect-error the metrics entry exports registerMetrics and its types only
import { Gpu } from 'wgalloc/metrics'
export const register: typeof registerMetrics = registerMetrics
export type Handle = MetricsHandle
export const gpu: unknown = Gpu
`
  const settings: Record<string, Record<string, string>> = {
    node10: { module: 'commonjs', moduleResolution: 'node10' },
    node16: { module: 'node16', moduleResolution: 'node16' },
    nodenext: { module: 'nodenext', moduleResolution: 'nodenext' },
    bundler: { module: 'esnext', moduleResolution: 'bundler' },
  }
  const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc')
  for (const [name, modules] of Object.entries(settings)) {
    const dir = join(project, `metrics-${name}`)
    mkdirSync(dir, { recursive: true })
    writeFileSync(join(dir, 'consumer.ts'), consumer)
    const compilerOptions = {
      ...modules,
      target: 'es2022',
      strict: true,
      noEmit: true,
      skipLibCheck: true,
      types: ['node'],
      typeRoots: [join(root, 'node_modules', '@types')],
    }
    writeFileSync(join(dir, 'tsconfig.json'), JSON.stringify({ compilerOptions, files: ['consumer.ts'] }))
    const r = spawnSync(process.execPath, [tsc, '-p', dir], { cwd: project, encoding: 'utf8' })
    t.is(r.status, 0, `${name}: ${r.stdout}${r.stderr}`)
  }
})

test('npx wgalloc info runs the installed CLI on the device', (t) => {
  const { project } = install()
  const info = JSON.parse(run('npx', ['--offline', 'wgalloc', 'info', '--json'], project)) as { adapterName: string; backend: string; maxBufferSize: number }
  t.is(typeof info.adapterName, 'string')
  t.true(info.adapterName.length > 0)
  t.true(['vulkan', 'metal', 'dx12'].includes(info.backend), info.backend)
  t.true(info.maxBufferSize > 0)
})
