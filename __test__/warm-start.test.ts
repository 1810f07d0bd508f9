// Warm starts on the device: `heap.profile()` survives a trip through JSON, a fresh device
// reserves its segments (`heap.warmStart()` or `Gpu.request({ heap: { profile } })`) and
// serves the same workload without a driver allocation; bad profiles are refused naming the
// field, and one above the high watermark reserves nothing.
import test from 'ava'
import { Gpu, type HeapProfile, type WgallocError } from 'wgalloc'

const MiB = 2 ** 20

/** A few serving requests: each allocates its tensors, freeing every other one as it goes. */
function serve(gpu: Gpu, requests: number[][]): void {
  for (const sizes of requests) {
    const live = []
    for (const [i, size] of sizes.entries()) {
      live.push(gpu.heap.malloc(size))
      if (i % 2 === 1) live.shift()?.free()
    }
    for (const b of live) b.free()
  }
}

const REQUESTS = [
  [3 * MiB, 12 * MiB, 4096, 6 * MiB, 20 * MiB, 700_000],
  [2 * MiB, 8 * MiB, 8192, 9 * MiB, 16 * MiB],
  [5 * MiB, 18 * MiB, 100_000, 7 * MiB, 10 * MiB, 24 * MiB],
]

test('a profile round-trips through JSON and a warm device serves its workload without driver allocations', async (t) => {
  const cold = await Gpu.request()
  serve(cold, REQUESTS)
  const coldStats = cold.heap.stats()
  const profile = JSON.parse(JSON.stringify(cold.heap.profile())) as HeapProfile
  cold.destroy()
  t.is(profile.format, 'wgalloc-heap-profile')
  t.is(profile.version, 1)
  const large = profile.pools.find((p) => p.pool === 'device-large')
  t.truthy(large)
  t.is(large!.segments.length, 1)
  t.is(
    profile.pools.reduce((a, p) => a + p.peakLiveBytes, 0),
    coldStats.allocatedBytes.peak,
  )

  const warm = await Gpu.request({ heap: { profile } })
  t.teardown(() => warm.destroy())
  const s = warm.heap.stats()
  const reserved = large!.segments[0]
  t.is(s.reservedBytes.current, reserved, 'the segment is reserved before request() returns')
  t.is(s.pools.find((p) => p.pool === 'device-large')!.reservedBytes.current, reserved)
  t.deepEqual(
    warm.heap.snapshot().map((seg) => [seg.pool, seg.size]),
    [['device-large', reserved]],
  )
  warm.heap.resetAccumulatedStats()
  serve(warm, [REQUESTS[2], REQUESTS[0], REQUESTS[1]])
  const after = warm.heap.stats()
  t.is(after.driverAllocations, 0)
  t.is(after.reservedBytes.peak, reserved)
  t.true(reserved < coldStats.reservedBytes.peak, `${reserved} vs cold ${coldStats.reservedBytes.peak}`)
  // The same workload: the same profile next time.
  t.deepEqual(warm.heap.profile(), profile)

  // heap.warmStart() on a used heap releases its idle segments first, and takes JSON text too.
  const again = warm.heap.warmStart(JSON.stringify(profile))
  t.deepEqual(again, { segments: 1, reservedBytes: reserved, releasedBytes: reserved })
})

test('bad profiles are INVALID_ARGUMENT naming the field; one above the high watermark reserves nothing', async (t) => {
  const gpu = await Gpu.request({ memoryBudget: 64 * MiB })
  t.teardown(() => gpu.destroy())
  const ok = (pools: unknown) => ({ format: 'wgalloc-heap-profile', version: 1, pools })
  const cases: [unknown, RegExp][] = [
    [{ ...ok([]), format: 'torch' }, /heap profile\.format: expected "wgalloc-heap-profile", got "torch"/],
    [{ ...ok([]), version: 9 }, /heap profile\.version: expected 1/],
    [ok([{ pool: 'gpu', peakLiveBytes: 1 }]), /heap profile\.pools\[0\]\.pool: expected one of device-small, device-large/],
    [ok([{ pool: 'device-large', peakLiveBytes: 1, segments: [-4096] }]), /pools\[0\]\.segments\[0\]: expected an integer from 1 to 2\^53-1 bytes, got -4096/],
    [ok([{ pool: 'device-large', peakLiveBytes: -1 }]), /pools\[0\]\.peakLiveBytes: expected an integer/],
    [
      ok([{ pool: 'device-large', peakLiveBytes: 1, segments: [2 ** 52] }]),
      /^heap profile\.pools\[0\]\.segments\[0\]: expected at most \d+ bytes \(maxBufferSize\), got 4503599627370496$/,
    ],
    ['not json', /heap profile: expected JSON text, .*not valid JSON/],
  ]
  for (const [profile, message] of cases) {
    t.throws(() => gpu.heap.warmStart(profile as HeapProfile), { code: 'INVALID_ARGUMENT', message }, String(message))
  }
  await t.throwsAsync(Gpu.request({ heap: { profile: cases[0][0] as HeapProfile } }), { code: 'INVALID_ARGUMENT', message: /format: expected/ })
  // 2 x 64 MiB of segments against a high watermark of 1.7 x 64 MiB: all or nothing.
  const big = ok([{ pool: 'device-large', peakLiveBytes: 100 * MiB, segments: [64 * MiB, 64 * MiB] }]) as HeapProfile
  const err = t.throws<WgallocError>(() => gpu.heap.warmStart(big), { code: 'OUT_OF_MEMORY', message: /the profile's 2 segments.*nothing was reserved/ })
  t.like(err.details, { source: 'high-watermark', requested: 128 * MiB, limit: Math.floor(1.7 * 64 * MiB), inUse: 0 })
  t.is(gpu.heap.stats().reservedBytes.current, 0)
  t.is(gpu.heap.stats().driverAllocations, 0)
})
