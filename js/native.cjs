'use strict'
// Loads the platform binary through the napi-rs loader and explains a failure.
const { WgallocError } = require('./errors.cjs')

function platformTriple() {
  const { platform, arch } = process
  if (platform === 'linux') {
    const report = typeof process.report?.getReport === 'function' ? process.report.getReport() : null
    const glibc = report?.header?.glibcVersionRuntime
    return `${platform}-${arch}-${glibc ? 'gnu' : 'musl'}`
  }
  if (platform === 'win32') return `${platform}-${arch}-msvc`
  return `${platform}-${arch}`
}

function load() {
  try {
    return require('../index.js')
  } catch (err) {
    const triple = platformTriple()
    throw new WgallocError(
      'BINARY_NOT_FOUND',
      `wgalloc has no native binary for ${triple}. Install the platform package ` +
        `(npm install wgalloc-${triple}), or build from a source checkout with ` +
        `\`npm run build\` (needs a Rust toolchain). Loader said: ${err.message}`,
      { cause: err },
    )
  }
}

module.exports = load()
