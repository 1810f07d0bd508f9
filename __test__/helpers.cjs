'use strict'
// Shared helpers for the ava suite. Every test runs on a real wgpu device
// (lavapipe on machines without a GPU).
const { Gpu } = require('..')

let shared
/** One device per test file: opening a device costs ~100 ms on lavapipe. */
function gpu() {
  shared ??= Gpu.request()
  return shared
}

/** Bytes that differ per position and per seed, so misplaced copies are caught. */
function pattern(size, seed = 1) {
  const out = new Uint8Array(size)
  for (let i = 0; i < size; i++) out[i] = (i * 31 + seed * 7 + (i >>> 8)) & 0xff
  return out
}

module.exports = { gpu, pattern }
