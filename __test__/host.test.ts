import test from 'ava'
import { Gpu, HostBlock, type UploadBatchItem } from 'wgalloc'
import { pattern } from './helpers.js'

const MiB = 2 ** 20

test('round trips upload -> device -> download, byte for byte, at many sizes', async (t) => {
  const gpu = await Gpu.request()
  const { host, heap } = gpu
  for (const [i, size] of [1, 3, 4, 5, 100, 4096, 65537, MiB, 3 * MiB + 8].entries()) {
    const data = pattern(size, i)
    const dev = heap.malloc(size)
    // Zero-copy path: write into block.bytes, copy on a stream.
    const up = host.alloc(size, { direction: 'upload' })
    t.true(up instanceof HostBlock)
    t.is(up.bytes.length, size)
    up.bytes.set(data)
    const down = host.alloc(size, { direction: 'download' })
    const s = gpu.createStream()
    s.copy(up, dev)
    s.copy(dev, down)
    s.submit()
    up.free()
    await down.map()
    t.true(Buffer.compare(Buffer.from(down.bytes), Buffer.from(data)) === 0, `size ${size} (blocks)`)
    down.free()
    // Helpers.
    await gpu.upload(dev, pattern(size, i + 50))
    const back = await gpu.download(dev)
    t.true(Buffer.compare(back, Buffer.from(pattern(size, i + 50))) === 0, `size ${size} (helpers)`)
    dev.free()
  }
  gpu.destroy()
})

test('a freed block is not reused before its copy completed', async (t) => {
  const gpu = await Gpu.request()
  const { host, heap } = gpu
  const size = MiB
  const targets = Array.from({ length: 16 }, () => heap.malloc(size))
  const s = gpu.createStream()
  for (const [i, dev] of targets.entries()) {
    const b = host.alloc(size)
    b.bytes.set(pattern(size, i))
    s.copy(b, dev)
    if (i % 4 === 0) s.submit()
    b.free()
    // Immediate reuse pressure: whatever the cache hands out next gets scribbled on.
    const scribble = host.alloc(size)
    scribble.bytes.fill(0xee)
    scribble.free()
  }
  await s.synchronize()
  for (const [i, dev] of targets.entries()) {
    const back = await gpu.download(dev)
    t.true(Buffer.compare(back, Buffer.from(pattern(size, i))) === 0, `target ${i}`)
  }
  gpu.destroy()
})

test('bytes is detached before the memory is unmapped', async (t) => {
  const gpu = await Gpu.request()
  const { host, heap } = gpu
  const b = host.alloc(4096)
  const bytes = b.bytes
  bytes.fill(1)
  b.free()
  t.is(bytes.length, 0)
  t.is(bytes.buffer.byteLength, 0)
  t.throws(() => bytes.fill(2), { instanceOf: TypeError })
  t.throws(() => new Uint8Array(bytes.buffer), { instanceOf: TypeError })
  t.is<number | undefined, undefined>(bytes[0], undefined)
  t.throws(() => b.bytes, { code: 'USE_AFTER_FREE' })
  // A copy detaches too: the upload's bytes are final once copied.
  const c = host.alloc(256)
  const view = c.bytes
  const s = gpu.createStream()
  s.copy(c, heap.malloc(256))
  t.is(view.length, 0)
  t.false(c.mapped)
  t.throws(() => c.bytes, { code: 'INVALID_ARGUMENT' })
  await s.synchronize()
  await c.map() // mapped again for writing
  t.is(c.bytes.length, 256)
  c.free()
  // Reusing the same staging buffer many times while old views are still reachable.
  const kept: Uint8Array[] = []
  for (let i = 0; i < 200; i++) {
    const r = host.alloc(4096)
    r.bytes[0] = i
    kept.push(r.bytes)
    r.free()
  }
  t.true(kept.every((v) => v.length === 0))
  t.is(host.stats().numHostAlloc, 2, 'all 200 came from the cache')
  gpu.destroy()
})

test('gpu.destroy() detaches live views first', async (t) => {
  const gpu = await Gpu.request()
  const b = gpu.host.alloc(1024)
  const bytes = b.bytes
  gpu.destroy()
  t.is(bytes.length, 0)
})

test('copy fallback (zeroCopy: false) writes back and is reported', async (t) => {
  const gpu = await Gpu.request()
  const { host, heap } = gpu
  host.configure({ zeroCopy: false })
  const dev = heap.malloc(512)
  const b = host.alloc(512)
  b.bytes.set(pattern(512, 9))
  const s = gpu.createStream()
  s.copy(b, dev)
  await s.synchronize()
  b.free()
  t.true(Buffer.compare(await gpu.download(dev), Buffer.from(pattern(512, 9))) === 0)
  const st = host.stats()
  t.true(st.copyFallbacks >= 1)
  t.is(st.zeroCopyViews, 0)
  gpu.destroy()
})

test('private pools', async (t) => {
  const gpu = await Gpu.request()
  const { host } = gpu
  host.beginAllocateToPool(1)
  const p = host.alloc(1000)
  t.is(p.poolId, 1)
  host.endAllocateToPool(1)
  p.free()
  const d = host.alloc(1000)
  t.is(d.poolId, 0)
  d.free()
  t.is(host.stats().numHostAlloc, 2, 'the default pool did not get the private block')
  host.emptyCache()
  t.is(host.stats().allocations.current, 1, 'held pools survive emptyCache')
  t.deepEqual(host.privatePools, [{ id: 1, useCount: 1 }])
  host.releasePool(1)
  host.emptyCache()
  t.is(host.stats().allocations.current, 0)
  t.deepEqual(host.privatePools, [])
  t.throws(() => host.endAllocateToPool(5), { code: 'INVALID_ARGUMENT' })
  t.throws(() => host.releasePool(1), { code: 'INVALID_ARGUMENT' })
  host.beginAllocateToPool(2)
  t.throws(() => host.beginAllocateToPool(2), { code: 'INVALID_ARGUMENT' })
  host.endAllocateToPool(2)
  host.releasePool(2)
  t.throws(() => host.releasePool(2), { code: 'INVALID_ARGUMENT' })
  gpu.destroy()
})

test('caps: rounding threshold and maxCachedBytes', async (t) => {
  const gpu = await Gpu.request()
  const { host } = gpu
  t.is(host.config.maxCachedBytes, Infinity)
  host.configure({ roundThreshold: 4 * MiB, maxCachedBytes: 8 * MiB })
  const big = host.alloc(5 * MiB + 1)
  t.is(big.size, 6 * MiB)
  const small = host.alloc(3 * MiB)
  t.is(small.size, 4 * MiB)
  big.free()
  small.free()
  const s = host.stats()
  t.true(s.cachedBytes <= 8 * MiB)
  t.is(s.numHostFree, 1)
  host.configure({ maxCachedBytes: 0 })
  t.is(host.stats().cachedBytes, 0)
  t.throws(() => host.configure({ maxCachedBytes: -1 }), { code: 'INVALID_ARGUMENT' })
  gpu.destroy()
})

test('stats are exact', async (t) => {
  const gpu = await Gpu.request()
  const { host } = gpu
  const a = host.alloc(1000)
  let s = host.stats()
  t.like(s, { numHostAlloc: 1, cacheMisses: 1, cachedBytes: 0 })
  t.like(s.allocations, { current: 1, peak: 1, allocated: 1, freed: 0 })
  t.like(s.allocatedBytes, { current: 1024 })
  t.like(s.activeRequests, { current: 1 })
  t.like(s.activeBytes, { current: 1024 })
  t.like(s.requestedBytes, { current: 1000 })
  t.deepEqual(
    s.buckets.map((b) => [b.index, b.size, b.allocations.current]),
    [[10, 1024, 1]],
  )
  t.is(s.hostAllocTime.count, 1)
  a.free()
  for (let i = 0; i < 50; i++) host.alloc(900).free()
  s = host.stats()
  t.like(s, { numHostAlloc: 1, cacheHits: 50, cachedBytes: 1024, pendingBlocks: 0 })
  t.like(s.activeRequests, { current: 0, peak: 1, allocated: 51, freed: 51 })
  host.resetAccumulatedStats()
  host.resetPeakStats()
  s = host.stats()
  t.like(s, { numHostAlloc: 0, cacheHits: 0 })
  t.like(s.activeRequests, { peak: 0, allocated: 0 })
  t.is(host.emptyCache(), 1024)
  t.like(host.stats().allocations, { current: 0 })
  gpu.destroy()
})

test('background thread returns blocks without an alloc', async (t) => {
  const gpu = await Gpu.request()
  const { host, heap } = gpu
  host.configure({ backgroundThread: true })
  t.true(host.config.backgroundThread)
  const dev = heap.malloc(4096)
  await gpu.upload(dev, pattern(4096, 1))
  for (let i = 0; i < 200 && host.stats().activeRequests.current > 0; i++) await new Promise((r) => setTimeout(r, 5))
  t.is(host.stats().activeRequests.current, 0)
  host.configure({ backgroundThread: false })
  gpu.destroy()
})

test('bad input: typed errors, nothing corrupted, stats exact', async (t) => {
  const gpu = await Gpu.request()
  const other = await Gpu.request()
  const { host, heap } = gpu
  for (const size of [0, -1, 1.5, NaN, 2 ** 60]) t.throws(() => host.alloc(size), { code: 'INVALID_ARGUMENT' })
  t.throws(() => host.alloc(16, { direction: 'sideways' as never }), { code: 'INVALID_ARGUMENT' })
  const b = host.alloc(100)
  t.throws(() => b.write(new Uint8Array(101)), { code: 'INVALID_ARGUMENT' })
  t.throws(() => b.bytes.set(new Uint8Array(101)), { instanceOf: RangeError }, 'writing past bytes.length')
  const dev = heap.malloc(256)
  const s = gpu.createStream()
  t.throws(() => s.copy(b, other.heap.malloc(256)), { code: 'INVALID_ARGUMENT' }, 'another device')
  t.throws(() => s.copy(b, dev, { srcOffset: 2, size: 4 }), { code: 'INVALID_ARGUMENT' })
  t.throws(() => s.copy(b, dev, { dstOffset: 2, size: 4 }), { code: 'INVALID_ARGUMENT' })
  t.throws(() => s.copy(b, dev, { size: 104 }), { code: 'INVALID_ARGUMENT' })
  t.throws(() => s.copy(b, dev, { dstOffset: 252, size: 8 }), { code: 'INVALID_ARGUMENT' })
  t.throws(() => s.copy(dev, b), { code: 'INVALID_ARGUMENT' }, 'upload block as a download target')
  t.throws(() => s.copy(b, {} as never), { code: 'INVALID_ARGUMENT' })
  t.true(b.mapped, 'refused copies leave the block mapped')
  t.throws(() => other.host.free(b), { code: 'INVALID_ARGUMENT' }, 'freeing a block from another device')
  b.free()
  t.throws(() => b.free(), { code: 'DOUBLE_FREE' })
  t.throws(() => host.free(b), { code: 'DOUBLE_FREE' })
  t.throws(() => b.write(new Uint8Array(1)), { code: 'USE_AFTER_FREE' })
  t.throws(() => s.copy(b, dev), { code: 'USE_AFTER_FREE' })
  const d = host.alloc(64, { direction: 'download' })
  t.throws(() => d.bytes, { code: 'INVALID_ARGUMENT' }, 'not mapped yet')
  s.copy(dev, d, { size: 64 })
  await t.throwsAsync(d.map(), { code: 'INVALID_ARGUMENT' }, 'stream not submitted')
  s.submit()
  await d.map()
  d.free()
  t.throws(() => host.beginAllocateToPool(0), { code: 'INVALID_ARGUMENT' })
  t.throws(() => host.endAllocateToPool(3), { code: 'INVALID_ARGUMENT' })
  t.throws(() => host.releasePool(3), { code: 'INVALID_ARGUMENT' })
  const st = host.stats()
  t.like(st.activeRequests, { current: 0 })
  t.like(st.requestedBytes, { current: 0 })
  t.is(st.allocations.current, 2)
  // Nothing corrupted: the cache still round-trips.
  await gpu.upload(dev, pattern(256, 4))
  t.true(Buffer.compare(await gpu.download(dev), Buffer.from(pattern(256, 4))) === 0)
  other.destroy()
  gpu.destroy()
})

test('uploadBatch packs many ranges into few blocks, and the cache stays warm', async (t) => {
  const gpu = await Gpu.request()
  const { host, heap } = gpu
  const chunk = 64 * 1024
  const dev = heap.malloc(64 * chunk)
  const odd = heap.malloc(7)
  const items: UploadBatchItem[] = Array.from({ length: 64 }, (_, i) => ({ block: dev, data: pattern(chunk, i), offset: i * chunk }))
  items.push({ block: odd, data: pattern(7, 99) })
  await gpu.uploadBatch(items)
  const back = await gpu.download(dev)
  for (let i = 0; i < 64; i++) {
    t.true(Buffer.compare(back.subarray(i * chunk, (i + 1) * chunk), Buffer.from(pattern(chunk, i))) === 0, `chunk ${i}`)
  }
  t.true(Buffer.compare(await gpu.download(odd), Buffer.from(pattern(7, 99))) === 0, 'odd length at the end of its block')
  // Packed: 64 x 64 KiB + 8 bytes needs one 4 MiB block plus a small one, not 65 blocks.
  let s = host.stats()
  const created = s.numHostAlloc
  t.true(created <= 4, `staging buffers created: ${created}`)
  for (let k = 0; k < 3; k++) {
    await gpu.uploadBatch(items)
    for (let n = 0; n < 1000 && host.stats().pendingBlocks > 0; n++) await new Promise((r) => setTimeout(r, 1))
  }
  s = host.stats()
  t.is(s.numHostAlloc, created, 'steady state takes no driver call')
  t.is(s.activeRequests.current, 0)
  // Bad input: typed errors, and nothing is recorded.
  await t.throwsAsync(gpu.uploadBatch('nope' as never), { code: 'INVALID_ARGUMENT' })
  await t.throwsAsync(gpu.uploadBatch([]), { code: 'INVALID_ARGUMENT' })
  await t.throwsAsync(gpu.uploadBatch([{ block: dev, data: 'x' as never }]), { code: 'INVALID_ARGUMENT' })
  await t.throwsAsync(gpu.uploadBatch([{ block: dev, data: pattern(8, 1), offset: 2 }]), { code: 'INVALID_ARGUMENT' })
  await t.throwsAsync(gpu.uploadBatch([{ block: dev, data: pattern(8, 1), offset: 64 * chunk }]), { code: 'INVALID_ARGUMENT' })
  const ac = new AbortController()
  ac.abort()
  await t.throwsAsync(gpu.uploadBatch(items, { signal: ac.signal }), { code: 'ABORTED' })
  dev.free()
  odd.free()
  gpu.destroy()
})

test('large uploads go in pipelined pieces of pipelineBytes', async (t) => {
  const gpu = await Gpu.request()
  const { host, heap } = gpu
  t.is(host.config.pipelineBytes, 4 * MiB)
  const piece = 64 * 1024
  host.configure({ pipelineBytes: piece })
  t.is(host.config.pipelineBytes, piece)
  // 16 full pieces and a 6-byte tail that ends at the block's end.
  const size = 16 * piece + 6
  const dev = heap.malloc(size)
  const data = pattern(size, 5)
  await gpu.upload(dev, data)
  const largest = Math.max(...host.stats().buckets.map((b) => b.size))
  t.is(largest, piece, 'no upload block larger than a piece')
  t.true(Buffer.compare(await gpu.download(dev), Buffer.from(data)) === 0)
  // Bad settings: typed errors, and the setting in force stays.
  for (const bad of [0, 4, 6, 65532, 65538, 2 ** 30 + 4, -4, 1.5, NaN]) {
    t.throws(() => host.configure({ pipelineBytes: bad }), { code: 'INVALID_ARGUMENT' }, `pipelineBytes ${bad}`)
  }
  t.is(host.config.pipelineBytes, piece)
  dev.free()
  gpu.destroy()
})
