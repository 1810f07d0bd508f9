// Seeded PRNG (mulberry32) so weights, inputs and therefore every figure the
// demo prints are the same on every run and machine.

/** A seeded uniform generator in [0, 1). */
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

/** Float32Array of `n` values uniform in [center - scale, center + scale). */
export function uniform(next: () => number, n: number, scale: number, center = 0): Float32Array {
  const out = new Float32Array(n)
  for (let i = 0; i < n; i++) out[i] = center + scale * (2 * next() - 1)
  return out
}
