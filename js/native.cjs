'use strict'
// Loads the platform binary through the napi-rs loader (index.js); a failure
// becomes a BINARY_NOT_FOUND WgallocError that says what to install.

/**
 * Mesa prints `error: XDG_RUNTIME_DIR is invalid or not set` on every device open when the
 * variable is unset (headless boxes, containers): point it at a private folder first.
 */
function quietMesa() {
  if (process.platform !== 'linux' || process.env.XDG_RUNTIME_DIR) return
  try {
    const { mkdtempSync } = require('node:fs')
    const { join } = require('node:path')
    process.env.XDG_RUNTIME_DIR = mkdtempSync(join(require('node:os').tmpdir(), 'wgalloc-xdg-'))
  } catch {
    // Only a warning is at stake; leave the variable unset.
  }
}

function load() {
  quietMesa()
  try {
    return require('../index.js')
  } catch (err) {
    throw require('./binding-error.cjs').bindingError(err)
  }
}

module.exports = load()
