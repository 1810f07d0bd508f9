import { Worker } from 'node:worker_threads'
import test from 'ava'
import { type BlockInfo, DeviceBlock, Gpu, type HeapEvent, WgallocError } from 'wgalloc'
import { collectGarbageUntil, pattern } from './helpers.js'

const MiB = 2 ** 20

test('blocks are aligned, never overlap while live, and hold their data', async (t) => {
  const gpu = await Gpu.request()
  const heap = gpu.heap
  const sizes = [4, 100, 1000, 4096, 70000, MiB, MiB + 4, 3 * MiB, 5]
  const live: { b: DeviceBlock; size: number; seed: number }[] = []
  for (let i = 0; i < 36; i++) {
    const size = sizes[i % sizes.length]
    const b = heap.malloc(size, { usage: i % 4 === 0 ? 'shared' : 'device' })
    t.is(b.offset % heap.alignment, 0)
    t.true(b.size >= size)
    b.write(pattern(size, i))
    live.push({ b, size, seed: i })
  }
  for (const [i, e] of live.entries()) if (i % 2 === 0) e.b.free()
  const kept = live.filter((_, i) => i % 2 === 1)
  for (let i = 0; i < sizes.length; i++) {
    const b = heap.malloc(sizes[i])
    b.write(pattern(sizes[i], 100 + i))
    kept.push({ b, size: sizes[i], seed: 100 + i })
  }
  // Ranges of live blocks in the same segment are disjoint ...
  const bySegment = new Map<number, BlockInfo[]>()
  for (const { b } of kept) {
    const info = b.info()
    const list = bySegment.get(info.segmentId) ?? []
    for (const o of list) t.true(info.offset + info.size <= o.offset || o.offset + o.size <= info.offset)
    list.push(info)
    bySegment.set(info.segmentId, list)
  }
  // ... and the data read back from the GPU proves no write landed in a neighbour.
  for (const { b, size, seed } of kept) {
    const back = await b.read()
    t.true(Buffer.compare(back, Buffer.from(pattern(size, seed))) === 0, `block ${b.id}`)
  }
  for (const { b } of kept) b.free()
  const s = heap.stats()
  t.is(s.activeBlocks.current, 0)
  t.is(s.allocatedBytes.current, 0)
  t.is(s.requestedBytes.current, 0)
  t.true(heap.emptyCache() > 0)
  t.is(heap.stats().reservedBytes.current, 0)
  t.is(heap.stats().segments.current, 0)
  gpu.destroy()
})

test('a block is a plain handle: no constructor, no reachable internals, fields kept after free, accepted wherever blocks go', async (t) => {
  const gpu = await Gpu.request()
  const heap = gpu.heap
  const b = heap.malloc(1000, { usage: 'shared', shape: [10, 100] })
  t.deepEqual(Object.keys(b), [], 'no enumerable internals (id, slot or native handle)')
  t.throws(() => new (Object.getPrototypeOf(b).constructor)(), { code: 'INVALID_ARGUMENT' })
  t.throws(() => new (DeviceBlock as unknown as new () => DeviceBlock)(), { code: 'INVALID_ARGUMENT' })
  const info = b.info()
  t.like(info, { id: b.id, size: b.size, requestedSize: 1000, offset: b.offset, pool: b.pool, isShared: b.isShared, shape: [10, 100] })
  // The same block through every kind of operation that takes one: stream copy, upload,
  // batch upload, download, kernel dispatch.
  const c = heap.malloc(1024)
  await gpu.upload(b, pattern(1000, 3))
  const s = gpu.createStream()
  s.copy(b, c)
  await s.submit().wait()
  t.deepEqual(new Uint8Array(await gpu.download(c, { length: 1000 })), pattern(1000, 3))
  await gpu.uploadBatch([{ block: c, data: pattern(16, 5) }])
  const k = gpu.createKernel({
    source: '@group(0) @binding(0) var<storage, read_write> a: array<u32>;\n@compute @workgroup_size(1) fn main() { a[0] = a[0] + 1u; }',
    bindings: 1,
  })
  s.dispatch(k, [c], 1)
  await s.submit().wait()
  const head = new Uint8Array(await c.read(0, 4))
  t.deepEqual(Array.from(head), [pattern(16, 5)[0] + 1, ...pattern(16, 5).slice(1, 4)])
  const { id, size, offset, pool } = b
  b.free()
  t.true(b.freed)
  t.like(b, { id, size, offset, pool }, 'fields stay readable after free')
  t.throws(() => s.copy(b, c), { code: 'USE_AFTER_FREE' })
  t.throws(() => s.dispatch(k, [b], 1), { code: 'USE_AFTER_FREE' })
  await t.throwsAsync(gpu.download(b), { code: 'USE_AFTER_FREE' })
  t.throws(() => heap.free({ id } as never), { code: 'INVALID_ARGUMENT' }, 'a look-alike object is not a block')
  c.free()
  t.is(heap.stats().activeBlocks.current, 0)
  gpu.destroy()
})

test('stats: requested vs allocated, peaks, cache hits and driver calls', async (t) => {
  const gpu = await Gpu.request()
  const heap = gpu.heap
  const a = heap.malloc(1000)
  let s = heap.stats()
  t.is(s.requestedBytes.current, 1000)
  t.is(s.allocatedBytes.current, a.size)
  t.is(s.driverAllocations, 1)
  a.free()
  for (let i = 0; i < 50; i++) heap.malloc(900).free()
  s = heap.stats()
  t.is(s.driverAllocations, 1, 'all later blocks came from the cache')
  t.true(s.cacheHits >= 50)
  t.is(s.activeBlocks.peak, 1)
  const small = s.pools.find((p) => p.pool === 'device-small')
  t.is(small!.segments.current, 1)
  heap.resetAccumulatedStats()
  t.is(heap.stats().cacheHits, 0)
  heap.resetPeakStats()
  t.is(heap.stats().activeBlocks.peak, 0)
  gpu.destroy()
})

test('bad input gets typed errors and leaves stats exact', async (t) => {
  const gpu = await Gpu.request({ memoryBudget: 256 * MiB })
  const other = await Gpu.request()
  const heap = gpu.heap
  const keep = heap.malloc(4096)
  const before = heap.stats()
  for (const bad of [0, -1, 1.5, NaN, Infinity, 2 ** 53, '64', null]) {
    t.throws(() => heap.malloc(bad as never), { code: 'INVALID_ARGUMENT', instanceOf: WgallocError }, String(bad))
  }
  t.throws(() => heap.malloc(gpu.info.maxBufferSize + 256), { code: 'INVALID_ARGUMENT', message: /maxBufferSize/ })
  t.throws(() => heap.malloc(16, { usage: 'texture' as never }), { code: 'INVALID_ARGUMENT' })
  t.throws(() => heap.malloc(16, { shape: [-1] }), { code: 'INVALID_ARGUMENT' })
  const b = heap.malloc(64)
  b.free()
  t.throws(() => b.free(), { code: 'DOUBLE_FREE' })
  t.throws(() => b.write(new Uint8Array(4)), { code: 'USE_AFTER_FREE' })
  await t.throwsAsync(b.read(), { code: 'USE_AFTER_FREE' })
  t.throws(() => b.info(), { code: 'USE_AFTER_FREE' })
  t.throws(() => b.setShape([1]), { code: 'USE_AFTER_FREE' })
  t.throws(() => keep.copyFrom(b), { code: 'USE_AFTER_FREE' })
  const foreign = other.heap.malloc(64)
  t.throws(() => heap.free(foreign), { code: 'INVALID_ARGUMENT' })
  t.throws(() => keep.copyFrom(foreign), { code: 'INVALID_ARGUMENT' })
  for (const r of [-0.1, 2.5, NaN]) t.throws(() => heap.setHighWatermarkRatio(r), { code: 'INVALID_ARGUMENT' })
  t.throws(() => heap.setLowWatermarkRatio(heap.highWatermarkRatio + 0.1), { code: 'INVALID_ARGUMENT' })
  t.throws(() => keep.write(new Uint8Array(3), 2), { code: 'INVALID_ARGUMENT' })
  t.throws(() => heap.allocScalar(new Uint8Array(0)), { code: 'INVALID_ARGUMENT' })
  const after = heap.stats()
  t.is(after.activeBlocks.current, before.activeBlocks.current)
  t.is(after.allocatedBytes.current, before.allocatedBytes.current)
  t.is(after.requestedBytes.current, before.requestedBytes.current)
  foreign.free()
  keep.free()
  gpu.destroy()
  other.destroy()
})

test('the high watermark is a hard limit; the OOM message names the figures; the heap stays usable', async (t) => {
  const gpu = await Gpu.request({ memoryBudget: 64 * MiB })
  const heap = gpu.heap
  heap.setHighWatermarkRatio(1)
  const a = heap.malloc(40 * MiB)
  const err = t.throws(() => heap.malloc(40 * MiB), { code: 'OUT_OF_MEMORY' })
  for (const word of ['41943040', 'allocated', 'cached', 'pending free', 'budget 67108864', 'largest free block']) {
    t.true(err.message.includes(word), `message names ${word}: ${err.message}`)
  }
  a.free()
  const b = heap.malloc(40 * MiB)
  t.is(heap.stats().ooms, 1)
  b.free()
  heap.setHighWatermarkRatio(0) // disabled: the driver is the limit
  const c = heap.malloc(100 * MiB)
  c.free()
  gpu.destroy()
})

test("the driver's own out-of-memory becomes OUT_OF_MEMORY and the heap stays usable", async (t) => {
  const gpu = await Gpu.request()
  const heap = gpu.heap
  heap.setHighWatermarkRatio(0)
  const held: DeviceBlock[] = []
  let err: WgallocError | undefined
  // lavapipe has one 2 GiB heap; keep allocating 1 GiB blocks until the driver refuses.
  for (let i = 0; i < 16 && !err; i++) {
    try {
      held.push(heap.malloc(Math.min(gpu.info.maxBufferSize, 2 ** 30)))
    } catch (e) {
      err = e as WgallocError
    }
  }
  if (!err) {
    t.log('the driver never refused (a GPU with more memory); nothing to check')
    t.pass()
  } else {
    t.is(err.code, 'OUT_OF_MEMORY')
    t.regex(err.message, /driver/)
  }
  for (const b of held) b.free()
  const ok = heap.malloc(MiB)
  ok.write(pattern(MiB, 9))
  t.true(Buffer.compare(await ok.read(), Buffer.from(pattern(MiB, 9))) === 0)
  ok.free()
  gpu.destroy()
})

test('ALLOCATION_FAILED listeners may free memory and the retry succeeds; events are reported', async (t) => {
  const gpu = await Gpu.request({ memoryBudget: 64 * MiB })
  const heap = gpu.heap
  heap.setHighWatermarkRatio(1)
  const kinds: string[] = []
  for (const k of ['ALLOCATED', 'RECYCLED', 'FREED', 'RELEASED'] as const) heap.on(k, (e) => kinds.push(e.kind))
  const big = heap.malloc(40 * MiB)
  let freedInListener = false
  const off = heap.on('ALLOCATION_FAILED', (e) => {
    t.is(e.size, 40 * MiB)
    if (!big.freed) {
      big.free()
      freedInListener = true
    }
  })
  const again = heap.malloc(40 * MiB)
  t.true(freedInListener)
  off()
  again.free()
  heap.emptyCache()
  t.true(kinds.includes('ALLOCATED'))
  t.true(kinds.includes('RECYCLED'))
  t.true(kinds.includes('FREED'))
  t.true(kinds.includes('RELEASED'))
  t.throws(() => heap.on('SOMETHING' as never, () => {}), { code: 'INVALID_ARGUMENT' })
  gpu.destroy()
})

test('after a burst of blocks the tables shrink; stale handles stay freed and new blocks work', async (t) => {
  // 20,000 blocks: past the size at which the heap's slot table and the native id table give
  // memory back once most of their entries are gone.
  const gpu = await Gpu.request()
  t.teardown(() => gpu.destroy())
  const heap = gpu.heap
  const burst = Array.from({ length: 20_000 }, () => heap.malloc(256))
  const keep = burst[19_000]
  keep.write(pattern(256, 7))
  for (const b of burst) if (b !== keep) b.free()
  t.is(heap.stats().activeBlocks.current, 1)
  // A stale handle and its id name nothing, however the slots were reused or dropped since.
  t.throws(() => burst[5].write(new Uint8Array(4)), { code: 'USE_AFTER_FREE' })
  t.is(heap.getBlockInfo(burst[19_999].id), null)
  const fresh = Array.from({ length: 3_000 }, () => heap.malloc(256))
  const ids = new Set(burst.map((b) => b.id))
  t.false(
    fresh.some((b) => ids.has(b.id)),
    'a new block reuses no id of the burst',
  )
  fresh[2_999].write(pattern(256, 9))
  t.deepEqual([...(await keep.read())], [...pattern(256, 7)])
  t.deepEqual([...(await fresh[2_999].read())], [...pattern(256, 9)])
  keep.free()
  for (const b of fresh) b.free()
  t.is(heap.stats().activeBlocks.current, 0)
  t.true(heap.emptyCache() > 0)
})

test('scalar blocks hold their value; shape metadata round-trips; lookup by id', async (t) => {
  const gpu = await Gpu.request()
  const heap = gpu.heap
  const value = new Uint8Array(new Float32Array([1.5, -2]).buffer)
  const s = heap.allocScalar(value)
  t.is(s.pool, 'scalar')
  t.deepEqual([...(await s.read())], [...value])
  const b = heap.malloc(24, { shape: [2, 3] })
  t.deepEqual(b.shape, [2, 3])
  b.setShape([6])
  t.deepEqual(heap.getBlockInfo(b.id)!.shape, [6])
  t.is(heap.getBlockInfo(b.id)!.state, 'active')
  b.free()
  t.is(heap.getBlockInfo(b.id), null)
  const snap = heap.snapshot()
  t.true(snap.some((seg) => seg.pool === 'scalar' && seg.blocks.some((x) => x.blockId === s.id && x.state === 'active')))
  t.true(
    snap.every((seg) => seg.blocks.reduce((n, x) => n + x.size, 0) === seg.size),
    'snapshot ranges tile each segment',
  )
  gpu.destroy()
})

test('copyFrom and stream-recorded frees defer reuse until the GPU work completed', async (t) => {
  const gpu = await Gpu.request()
  const heap = gpu.heap
  const src = heap.malloc(32 * MiB)
  const dst = heap.malloc(32 * MiB)
  src.write(pattern(32 * MiB, 5))
  await dst.copyFrom(src).wait()
  t.true(Buffer.compare(await dst.read(0, 4096), Buffer.from(pattern(32 * MiB, 5).subarray(0, 4096))) === 0)
  const stream = gpu.createStream()
  for (let i = 0; i < 4; i++) stream.copy(src, dst)
  const srcSegment = src.info().segmentId
  src.free() // the copies are recorded but unsubmitted: the block must wait
  t.is(heap.stats().pendingFreeBlocks, 1)
  const reuse = heap.malloc(32 * MiB)
  t.not(reuse.info().segmentId, srcSegment, 'pending memory is not handed out again')
  await stream.submit().wait()
  heap.freeInactiveBuffers()
  t.is(heap.stats().pendingFreeBlocks, 0)
  reuse.free()
  dst.free()
  gpu.destroy()
})

test.serial('blocks dropped without free() are reclaimed by the garbage collector', async (t) => {
  const gpu = await Gpu.request()
  const heap = gpu.heap
  ;(() => {
    for (let i = 0; i < 20; i++) heap.malloc(MiB)
  })()
  await collectGarbageUntil(() => heap.stats().activeBlocks.current === 0)
  t.is(heap.stats().activeBlocks.current, 0)
  const reserved = heap.stats().reservedBytes.current
  heap.malloc(MiB).free()
  t.is(heap.stats().reservedBytes.current, reserved, 'their memory is reused')
  gpu.destroy()
})

test.serial('the GC net holds for blocks freed or dropped in the turn that allocated them', async (t) => {
  const gpu = await Gpu.request()
  const heap = gpu.heap
  // One synchronous turn: more blocks than wait for registration at once, freed out of order
  // (every third one) or dropped, and a block kept live in a freed block's place.
  const kept = (() => {
    const blocks = Array.from({ length: 700 }, () => heap.malloc(4096))
    const places = new Set<string>()
    for (let i = 0; i < blocks.length; i += 3) {
      const { segmentId, offset } = blocks[i].info()
      places.add(`${segmentId}:${offset}`)
      blocks[i].free()
    }
    const again = heap.malloc(4096)
    const { segmentId, offset } = again.info()
    t.true(places.has(`${segmentId}:${offset}`), 'it takes a freed block’s place')
    return again
  })()
  await collectGarbageUntil(() => heap.stats().activeBlocks.current === 1)
  t.is(heap.stats().activeBlocks.current, 1, 'every dropped block was reclaimed, the kept one was not')
  kept.write(new Uint8Array(4096).fill(7))
  t.true((await kept.read()).every((x) => x === 7))
  kept.free()
  t.is(heap.stats().activeBlocks.current, 0)
  gpu.destroy()
})

test('worker threads share one device heap through a handle', async (t) => {
  const gpu = await Gpu.request()
  const handle = gpu.shareHandle()
  const code = `
    const { parentPort, workerData } = require('node:worker_threads')
    const { Gpu } = require(${JSON.stringify(require.resolve('..'))})
    ;(async () => {
      const gpu = Gpu.attach(workerData.handle)
      const ids = []
      for (let i = 0; i < 50; i++) {
        const b = gpu.heap.malloc(4096 + i * 64)
        const bytes = new Uint8Array(b.requestedSize).fill(workerData.seed)
        b.write(bytes)
        const back = await b.read()
        if (!back.every((x) => x === workerData.seed)) throw new Error('corrupted')
        ids.push(b.id)
        b.free()
      }
      parentPort.postMessage(ids.length)
    })().catch((e) => { parentPort.postMessage(String(e)) })
  `
  const run = (seed: number) =>
    new Promise<unknown>((resolve, reject) => {
      const w = new Worker(code, { eval: true, workerData: { handle, seed } })
      w.once('message', resolve)
      w.once('error', reject)
    })
  const results = await Promise.all([run(1), run(2), run(3), run(4)])
  t.deepEqual(results, [50, 50, 50, 50])
  const s = gpu.heap.stats()
  t.is(s.activeBlocks.current, 0)
  t.is(s.activeBlocks.allocated, 200)
  t.throws(() => Gpu.attach(123456), { code: 'INVALID_ARGUMENT' })
  gpu.destroy()
})

test('a worker that ends with blocks live gives them back, scope charges too', async (t) => {
  // The worker's heap object holds its blocks by id in the shared heap; when the worker goes,
  // so does that object, and every block it still held returns (Note [Block lifetime]).
  const gpu = await Gpu.request()
  const code = `
    const { parentPort, workerData } = require('node:worker_threads')
    const { Gpu } = require(${JSON.stringify(require.resolve('..'))})
    const gpu = Gpu.attach(workerData.handle)
    const scope = gpu.heap.scope({ name: 'worker', limit: 1 << 20 })
    globalThis.kept = [...Array.from({ length: 10 }, () => gpu.heap.malloc(4096)), scope.malloc(4096)]
    parentPort.postMessage(gpu.heap.stats().activeBlocks.current)
  `
  const worker = new Worker(code, { eval: true, workerData: { handle: gpu.shareHandle() } })
  // Listened for at once: a worker that ends right after its message emits both in one tick.
  const exited = new Promise((resolve) => worker.once('exit', resolve))
  const live = await new Promise((resolve, reject) => {
    worker.once('message', resolve)
    worker.once('error', reject)
  })
  t.is(live, 11, 'the worker held its blocks')
  await exited
  t.is(gpu.heap.stats().activeBlocks.current, 0, 'every block came back with the worker')
  t.is(gpu.heap.findScope('worker')?.stats().allocatedBytes, 0, 'and its scope charge')
  gpu.destroy()
})

test('a fragmented miss moves a live block: MOVED event, offset follows, bytes intact, history shows it', async (t) => {
  const gpu = await Gpu.request()
  const heap = gpu.heap
  heap.recordHistory({ maxEntries: 1000 })
  const moved: HeapEvent[] = []
  heap.on('MOVED', (e) => moved.push(e))
  // Six 4 MiB blocks, three to a segment (each segment the budget of the bytes live then).
  const blocks = Array.from({ length: 6 }, () => heap.malloc(4 * MiB))
  const data = blocks.map((_, i) => pattern(4 * MiB, 20 + i))
  for (const [i, b] of blocks.entries()) b.write(data[i])
  const [a, b, c, f, e, x] = blocks
  t.is(a.info().segmentId, c.info().segmentId)
  t.not(a.info().segmentId, e.info().segmentId)
  t.is(f.info().segmentId, x.info().segmentId)
  for (const freed of [b, f]) freed.free()
  // Churn in the holes: a tenth of the bytes requested then covers one 4 MiB move.
  for (let i = 0; i < 3; i++) heap.malloc(4 * MiB).free()
  const driverCalls = heap.stats().driverAllocations
  // 8 MiB free, no 8 MiB range: c moves into f's old range, and the request takes the one it leaves.
  const big = heap.malloc(8 * MiB)
  t.is(heap.stats().driverAllocations, driverCalls, 'no new segment')
  t.like(heap.stats(), { blocksMoved: 1, bytesMoved: 4 * MiB })
  t.is(moved.length, 1)
  t.like(moved[0], { kind: 'MOVED', blockId: c.id, segmentId: e.info().segmentId, offset: 0, size: 4 * MiB })
  t.is(c.info().segmentId, e.info().segmentId, 'c now lives in the second segment')
  t.is(c.offset, 0, "in f's old range")
  t.is(big.info().segmentId, a.info().segmentId)
  t.is(big.offset, 4 * MiB)
  // (Buffer.compare: a deep equality of 4 MiB arrays takes ava seconds.)
  for (const [block, bytes] of [
    [c, data[2]],
    [a, data[0]],
    [e, data[4]],
    [x, data[5]],
  ] as const)
    t.is(Buffer.compare(await block.read(), bytes), 0, `block ${block.id} changed`)
  // The history: c leaves its old place and takes the new one.
  const history = heap.memorySnapshot().history.filter((h) => h.blockId === c.id)
  t.deepEqual(
    history.map((h) => h.action),
    ['alloc', 'free', 'alloc'],
  )
  t.is(history[2].offset, c.offset)
  const offset = c.offset
  c.free()
  t.is(c.offset, offset, 'the offset last read stays readable after free')
  for (const kept of [a, e, x, big]) kept.free()
  heap.recordHistory(false)
  gpu.destroy()
})
