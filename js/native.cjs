'use strict'
// Loads the platform binary through the napi-rs loader (index.js); a failure
// becomes a BINARY_NOT_FOUND WgallocError that says what to install.
function load() {
  try {
    return require('../index.js')
  } catch (err) {
    throw require('./binding-error.cjs').bindingError(err)
  }
}

module.exports = load()
