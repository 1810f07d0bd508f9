// Shared helpers for the ava suite. Every test runs on a real wgpu device
// (lavapipe on machines without a GPU).
import { Gpu } from 'wgalloc'

let shared: Promise<Gpu> | undefined
/** One device per test file: opening a device costs ~100 ms on lavapipe. */
export function gpu(): Promise<Gpu> {
  shared ??= Gpu.request()
  return shared
}

/** Bytes that differ per position and per seed, so misplaced copies are caught. */
export function pattern(size: number, seed = 1): Uint8Array {
  const out = new Uint8Array(size)
  for (let i = 0; i < size; i++) out[i] = (i * 31 + seed * 7 + (i >>> 8)) & 0xff
  return out
}
