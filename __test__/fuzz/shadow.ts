'use strict'
// What a block should hold: its bytes and which of them are known (a fresh block
// holds whatever its last user left). Reads are compared on the known bytes only.

function shadow(n) {
  return { data: new Uint8Array(n), known: new Uint8Array(n) }
}

/** Deterministic bytes that differ per position and per seed. */
function pattern(len, seed) {
  const out = new Uint8Array(len)
  for (let i = 0; i < len; i++) out[i] = (i * 31 + seed * 97 + (i >>> 8) * 7 + 1) & 0xff
  return out
}

function put(mem, off, bytes) {
  mem.data.set(bytes, off)
  mem.known.fill(1, off, off + bytes.length)
}

function copy(dst, dOff, src, sOff, len) {
  dst.data.set(src.data.subarray(sOff, sOff + len), dOff)
  dst.known.set(src.known.subarray(sOff, sOff + len), dOff)
}

function snapshot(mem, off, len) {
  return { data: mem.data.slice(off, off + len), known: mem.known.slice(off, off + len) }
}

/** Index of the first known byte of `mem` at `off` that `got` contradicts, or -1. */
function mismatch(mem, off, got) {
  for (let i = 0; i < got.length; i++) {
    if (mem.known[off + i] && mem.data[off + i] !== got[i]) return i
  }
  return -1
}

module.exports = { shadow, pattern, put, copy, snapshot, mismatch }
