// Explains why the native addon did not load: which platform this is, which package carries
// its prebuilt binary, and what to install or build. Runs only on the failure path of
// js/internal/native.ts.
import { existsSync, readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { join } from 'node:path'
import { WgallocError } from '../errors.js'

const ROOT = join(__dirname, '../..')
const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as {
  name: string
  version: string
  repository?: { url?: string }
  napi?: { targets?: string[] }
}

const ARCH: Record<string, string> = { x86_64: 'x64', aarch64: 'arm64', i686: 'ia32', armv7: 'arm' }

/** napi-rs names a Rust target by `platform-arch[-abi]`, e.g. x86_64-unknown-linux-gnu -> linux-x64-gnu. */
export function targetName(triple: string): string {
  const [cpu, ...rest] = triple.split('-')
  const arch = ARCH[cpu] ?? cpu
  const abi = rest[rest.length - 1]
  if (rest.includes('darwin')) return `darwin-${arch}`
  if (rest.includes('windows')) return `win32-${arch}-${abi}`
  if (rest.includes('linux')) return `linux-${arch}-${abi}`
  return `${abi}-${arch}`
}

/** The C library Node runs on, as the napi-rs loader decides gnu vs musl. */
function libc(): 'glibc' | 'musl' | null {
  if (process.platform !== 'linux') return null
  const report = typeof process.report?.getReport === 'function' ? (process.report.getReport() as { header?: { glibcVersionRuntime?: string } }) : null
  return report?.header?.glibcVersionRuntime ? 'glibc' : 'musl'
}

/** This process's platform in napi-rs naming, the suffix of its binary package. */
export function currentTarget(): { platform: string; arch: string; libc: string | null; target: string } {
  const { platform, arch } = process
  const c = libc()
  if (platform === 'linux') return { platform, arch, libc: c, target: `linux-${arch}-${c === 'glibc' ? 'gnu' : 'musl'}` }
  if (platform === 'win32') return { platform, arch, libc: c, target: `win32-${arch}-msvc` }
  return { platform, arch, libc: c, target: `${platform}-${arch}` }
}

/** Targets a release publishes a binary package for (package.json `napi.targets`). */
export function prebuiltTargets(): string[] {
  return (pkg.napi?.targets ?? []).map(targetName)
}

/** First lines of the napi-rs loader's attempts, oldest first (it chains them through `cause`). */
function loaderErrors(err: unknown): string[] {
  const out: string[] = []
  const text = (e: unknown) => String((e as { message?: unknown })?.message ?? e).split('\n')[0]
  for (let e = (err as { cause?: unknown })?.cause; e && out.length < 32; e = (e as { cause?: unknown }).cause) out.unshift(text(e))
  if (!out.length && err) out.push(text(err))
  return out
}

/** The installed binary package's manifest, or null when Node cannot find it. */
function installedPackage(name: string): { path: string; version: string } | null {
  try {
    const req = createRequire(join(ROOT, 'package.json'))
    const path = req.resolve(`${name}/package.json`)
    return { path, version: (JSON.parse(readFileSync(path, 'utf8')) as { version: string }).version }
  } catch {
    return null
  }
}

/** The BINARY_NOT_FOUND error for a loader failure `err`, saying what to install or build. */
export function bindingError(err: unknown): WgallocError {
  const here = currentTarget()
  const packageName = `${pkg.name}-${here.target}`
  const prebuilt = prebuiltTargets()
  const supported = prebuilt.includes(here.target)
  const installed = installedPackage(packageName)
  const checkout = existsSync(join(ROOT, 'Cargo.toml'))
  const where = `${here.platform} ${here.arch}${here.libc ? ` (${here.libc})` : ''}`
  const tried = loaderErrors(err)

  const lines: string[] = []
  if (process.env.NAPI_RS_NATIVE_LIBRARY_PATH) {
    lines.push(`The addon named by NAPI_RS_NATIVE_LIBRARY_PATH (${process.env.NAPI_RS_NATIVE_LIBRARY_PATH}) failed to load.`)
  } else if (installed) {
    lines.push(`${packageName}@${installed.version} is installed for ${where}, but its binary failed to load.`)
    lines.push(
      installed.version === pkg.version
        ? 'Reinstall it (remove node_modules and the lockfile, then npm install); the loader errors below say why it failed.'
        : `It does not match wgalloc@${pkg.version}: npm install ${packageName}@${pkg.version}`,
    )
  } else if (checkout) {
    lines.push(`This source checkout has no built addon for ${where}: run \`npm run build\` (needs a Rust toolchain).`)
  } else if (supported) {
    lines.push(`The native addon for ${where} comes from the package ${packageName}, which is not installed.`)
    lines.push(`Install it: npm install ${packageName}@${pkg.version}`)
    lines.push(
      'It is an optional dependency of wgalloc: npm skips it under --omit=optional, and a lockfile written on ' +
        'another platform can leave it out (https://github.com/npm/cli/issues/4828); then remove node_modules ' +
        'and the lockfile and install again.',
    )
    lines.push(
      `Or use a source build: clone ${pkg.repository?.url?.replace(/^git\+/, '') ?? 'the repository'} and run npm install there ` +
        '(needs a Rust toolchain; it builds the addon), then depend on that folder (npm install <path>) or point ' +
        'NAPI_RS_NATIVE_LIBRARY_PATH at its dist/*.node.',
    )
  } else {
    lines.push(`There is no prebuilt wgalloc binary for ${where}, target ${here.target}; prebuilt: ${prebuilt.join(', ')}.`)
    lines.push('Build it from a source checkout with a Rust toolchain: clone the repository, then npm install (builds the addon).')
  }
  if (tried.length) lines.push('Loader tried:', ...tried.map((m) => `  - ${m}`))

  const error = new WgallocError('BINARY_NOT_FOUND', lines.join('\n'), { cause: err })
  Object.assign(error, { ...here, packageName, supported, loadErrors: tried })
  return error
}
