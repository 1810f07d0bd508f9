// What a block should hold: its bytes and which of them are known (a fresh block
// holds whatever its last user left). Reads are compared on the known bytes only.

/** A block's expected bytes; `known[i]` is 1 where `data[i]` is known. */
export interface Mem {
  data: Uint8Array
  known: Uint8Array
}

export function shadow(n: number): Mem {
  return { data: new Uint8Array(n), known: new Uint8Array(n) }
}

/** Deterministic bytes that differ per position and per seed. */
export function pattern(len: number, seed: number): Uint8Array {
  const out = new Uint8Array(len)
  for (let i = 0; i < len; i++) out[i] = (i * 31 + seed * 97 + (i >>> 8) * 7 + 1) & 0xff
  return out
}

export function put(mem: Mem, off: number, bytes: Uint8Array): void {
  mem.data.set(bytes, off)
  mem.known.fill(1, off, off + bytes.length)
}

export function copy(dst: Mem, dOff: number, src: Mem, sOff: number, len: number): void {
  dst.data.set(src.data.subarray(sOff, sOff + len), dOff)
  dst.known.set(src.known.subarray(sOff, sOff + len), dOff)
}

export function snapshot(mem: Mem, off: number, len: number): Mem {
  return { data: mem.data.slice(off, off + len), known: mem.known.slice(off, off + len) }
}

/** Index of the first known byte of `mem` at `off` that `got` contradicts, or -1. */
export function mismatch(mem: Mem, off: number, got: Uint8Array): number {
  for (let i = 0; i < got.length; i++) {
    if (mem.known[off + i] && mem.data[off + i] !== got[i]) return i
  }
  return -1
}
