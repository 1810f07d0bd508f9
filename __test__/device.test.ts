import test from 'ava'
import { Gpu, type GpuEvent, WgallocError } from 'wgalloc'
import { gpu, pattern } from './helpers.js'

test('device opens and reports the limits wgalloc depends on', async (t) => {
  const g = await gpu()
  const info = g.info
  t.true(info.adapterName.length > 0)
  t.true(['vulkan', 'metal', 'dx12'].includes(info.backend))
  t.true(info.maxBufferSize >= 256 * 2 ** 20)
  t.true(info.maxStorageBufferBindingSize >= 128 * 2 ** 20)
  t.true(info.maxStorageBufferBindingSize <= info.maxBufferSize)
  for (const a of [info.minStorageBufferOffsetAlignment, info.minUniformBufferOffsetAlignment]) {
    t.true(a > 0 && (a & (a - 1)) === 0, `alignment ${a} is a power of two`)
  }
  t.true(Array.isArray(info.features))
  const budget = g.memoryBudget
  t.true(budget.bytes > 0)
  t.true(['user', 'vulkan-device-local-heap', 'default'].includes(budget.source))
  if (info.backend === 'vulkan') t.is(budget.source, 'vulkan-device-local-heap')
})

test('a user budget is reported as such', async (t) => {
  const g = await Gpu.request({ memoryBudget: 256 * 2 ** 20 })
  t.deepEqual(g.memoryBudget, { bytes: 256 * 2 ** 20, source: 'user' })
  g.destroy()
})

const SIZES = [4, 8, 12, 100, 4096, 65536, 1 << 20, 16 << 20, 64 << 20]
for (const size of SIZES) {
  test(`bytes written, copied and read back are identical (${size} B)`, async (t) => {
    const g = await gpu()
    const data = pattern(size, size & 0xff)
    const a = g.createBuffer(size)
    const b = g.createBuffer(size)
    g.writeBuffer(a, 0, data)
    const s = g.createStream()
    s.copy(a, b)
    await s.submit().wait()
    const back = await g.readBuffer(b, 0, size)
    t.is(back.length, size)
    t.true(Buffer.compare(back, Buffer.from(data)) === 0)
    a.destroy()
    b.destroy()
  })
}

test('copies honour offsets and leave bytes outside the range untouched', async (t) => {
  const g = await gpu()
  const src = g.createBuffer(64)
  const dst = g.createBuffer(64)
  g.writeBuffer(src, 0, pattern(64, 3))
  g.writeBuffer(dst, 0, new Uint8Array(64).fill(0xee))
  const s = g.createStream()
  s.copy(src, dst, { srcOffset: 8, dstOffset: 16, size: 24 })
  await s.synchronize()
  const back = await g.readBuffer(dst, 0, 64)
  const expected = new Uint8Array(64).fill(0xee)
  expected.set(pattern(64, 3).subarray(8, 32), 16)
  t.deepEqual(new Uint8Array(back), expected)
})

test('lengths that are not multiples of 4: padded at the buffer end, rejected inside it', async (t) => {
  const g = await gpu()
  const buf = g.createBuffer(7)
  t.is(buf.size, 7)
  g.writeBuffer(buf, 0, new Uint8Array([1, 2, 3, 4, 5, 6, 7]))
  t.deepEqual([...(await g.readBuffer(buf, 0, 7))], [1, 2, 3, 4, 5, 6, 7])
  // Reads accept any range.
  t.deepEqual([...(await g.readBuffer(buf, 1, 5))], [2, 3, 4, 5, 6])
  // A 3-byte write inside the buffer would clobber a neighbour byte: refused, data intact.
  const err = t.throws(() => g.writeBuffer(buf, 0, new Uint8Array([9, 9, 9])), { instanceOf: WgallocError })
  t.is(err.code, 'INVALID_ARGUMENT')
  t.throws(() => g.writeBuffer(buf, 2, new Uint8Array([9, 9])), { code: 'INVALID_ARGUMENT' })
  t.deepEqual([...(await g.readBuffer(buf, 0, 7))], [1, 2, 3, 4, 5, 6, 7])
  // Copies follow the same rule.
  const odd = g.createBuffer(10)
  const s = g.createStream()
  t.throws(() => s.copy(buf, odd, { size: 7 }), { code: 'INVALID_ARGUMENT' })
  s.copy(buf, odd, { dstOffset: 4, size: 6 }) // ends at odd's end: allowed
  await s.synchronize()
  t.deepEqual([...(await g.readBuffer(odd, 4, 6))], [1, 2, 3, 4, 5, 6])
})

test('out-of-range and wrongly typed arguments give typed errors', async (t) => {
  const g = await gpu()
  const buf = g.createBuffer(16)
  for (const bad of [-1, 0.5, NaN, Infinity, 2 ** 53, 0]) {
    t.throws(() => g.createBuffer(bad), { code: 'INVALID_ARGUMENT' }, `size ${bad}`)
  }
  t.throws(() => g.createBuffer(g.info.maxBufferSize + 4), { code: 'INVALID_ARGUMENT' })
  t.throws(() => g.createBuffer('16' as never), { code: 'INVALID_ARGUMENT' })
  t.throws(() => g.writeBuffer(buf, 12, new Uint8Array(8)), { code: 'INVALID_ARGUMENT' })
  t.throws(() => g.writeBuffer(buf, 0, 'not bytes' as never), { code: 'INVALID_ARGUMENT' })
  await t.throwsAsync(g.readBuffer(buf, 8, 16), { code: 'INVALID_ARGUMENT' })
  buf.destroy()
  t.throws(() => g.writeBuffer(buf, 0, new Uint8Array(4)), { code: 'USE_AFTER_FREE' })
  await t.throwsAsync(g.readBuffer(buf, 0, 4), { code: 'USE_AFTER_FREE' })
})

test('events complete in submission order and query() flips to true', async (t) => {
  const g = await gpu()
  const size = 8 << 20
  const a = g.createBuffer(size)
  const b = g.createBuffer(size)
  const s = g.createStream()
  const events: GpuEvent[] = []
  for (let i = 0; i < 6; i++) {
    s.copy(a, b)
    events.push(s.submit())
  }
  for (let i = 1; i < events.length; i++) t.true(events[i].seq > events[i - 1].seq)
  // In order: when an event's wait resolves, every earlier one has completed too. (Waits that
  // complete together may resolve their promises in any order.)
  const earlierDone: boolean[] = []
  await Promise.all(events.map((e, i) => e.wait().then(() => (earlierDone[i] = events.slice(0, i).every((p) => p.query())))))
  t.deepEqual(earlierDone, [true, true, true, true, true, true])
  t.true(events.every((e) => e.query() === true))
  // A submit with nothing recorded returns an event that is already satisfied by earlier work.
  const idle = s.submit()
  await idle.wait()
  t.true(idle.query())
})

test('query() is false while work is in flight, then true', async (t) => {
  const g = await gpu()
  const size = 64 << 20
  const a = g.createBuffer(size)
  const b = g.createBuffer(size)
  const s = g.createStream()
  for (let i = 0; i < 4; i++) s.copy(a, b)
  const e = s.submit()
  const before = e.query()
  await e.wait()
  t.true(e.query())
  t.log(`query() right after submit: ${before}`)
  t.true(e.waitSync(0), 'waitSync on a completed event returns true')
})

test('wait() honours an AbortSignal', async (t) => {
  const g = await gpu()
  const s = g.createStream()
  s.copy(g.createBuffer(16), g.createBuffer(16))
  const e = s.submit()
  const ac = new AbortController()
  ac.abort(new Error('user gave up'))
  const err = await t.throwsAsync(e.wait({ signal: ac.signal }), { code: 'ABORTED' })
  t.is(err.name, 'AbortError')
  await e.wait({ signal: AbortSignal.timeout(10_000) })
  await t.throwsAsync(e.wait({ signal: 'nope' as never }), { code: 'INVALID_ARGUMENT' })
})

test('bad request options give typed errors', async (t) => {
  await t.throwsAsync(Gpu.request({ backends: ['quantum' as never] }), { code: 'INVALID_ARGUMENT', instanceOf: WgallocError })
  await t.throwsAsync(Gpu.request({ backends: [] }), { code: 'INVALID_ARGUMENT' })
  await t.throwsAsync(Gpu.request({ memoryBudget: -1 }), { code: 'INVALID_ARGUMENT' })
  await t.throwsAsync(Gpu.request({ memoryBudget: 2 ** 53 + 2 }), { code: 'INVALID_ARGUMENT' })
  await t.throwsAsync(Gpu.request({ memoryBudget: 1.5 }), { code: 'INVALID_ARGUMENT' })
  await t.throwsAsync(Gpu.request({ memoryBudget: '1GB' as never }), { code: 'INVALID_ARGUMENT' })
  await t.throwsAsync(Gpu.request({ powerPreference: 'turbo' as never }), { code: 'INVALID_ARGUMENT' })
  await t.throwsAsync(Gpu.request({ requiredFeatures: ['NOT_A_FEATURE'] }), { code: 'INVALID_ARGUMENT' })
  await t.throwsAsync(Gpu.request({ adapterName: 'no such adapter xyz' }), { code: 'ADAPTER_NOT_FOUND' })
  await t.throwsAsync(Gpu.request(42 as never), { code: 'INVALID_ARGUMENT' })
})

test('a destroyed device turns every later call into DEVICE_LOST', async (t) => {
  const g = await Gpu.request()
  const buf = g.createBuffer(16)
  const s = g.createStream()
  g.destroy()
  t.true(g.lost)
  t.throws(() => g.createBuffer(16), { code: 'DEVICE_LOST' })
  t.throws(() => g.writeBuffer(buf, 0, new Uint8Array(16)), { code: 'DEVICE_LOST' })
  t.throws(() => g.createStream(), { code: 'DEVICE_LOST' })
  t.throws(() => s.copy(buf, buf), { code: 'DEVICE_LOST' })
  await t.throwsAsync(g.readBuffer(buf, 0, 16), { code: 'DEVICE_LOST' })
})
