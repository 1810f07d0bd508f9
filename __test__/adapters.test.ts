// Choosing among GPUs: Gpu.enumerate() lists every adapter with an index and a stable id,
// and Gpu.request({ adapterIndex | adapterId }) or WGALLOC_ADAPTER picks one.
import { spawnSync } from 'node:child_process'
import test from 'ava'
import { Gpu } from 'wgalloc'

const ENTRY = JSON.stringify(require.resolve('..'))

test('enumerate lists every adapter with index, id, name, ids, backend, type and budget', async (t) => {
  const list = await Gpu.enumerate()
  t.true(list.length >= 1)
  list.forEach((a, i) => {
    t.is(a.index, i)
    t.is(a.id, `${a.backend}:${a.vendorId.toString(16).padStart(4, '0')}:${a.deviceId.toString(16).padStart(4, '0')}:${a.name}`)
    t.true(a.memoryBudget.bytes > 0)
    t.true(['vulkan-device-local-heap', 'default'].includes(a.memoryBudget.source))
  })
  t.deepEqual(
    (await Gpu.enumerate({ backends: ['vulkan'] })).map((a) => a.id),
    list.filter((a) => a.backend === 'vulkan').map((a) => a.id),
  )
})

test('adapterIndex and adapterId open the listed adapter; each Gpu has its own heap and budget', async (t) => {
  const [first] = await Gpu.enumerate()
  const a = await Gpu.request({ adapterIndex: first.index })
  const b = await Gpu.request({ adapterId: first.id, memoryBudget: 64 << 20 })
  t.is(a.info.adapterName, first.name)
  t.is(b.info.adapterName, first.name)
  t.is(a.memoryBudget.bytes, first.memoryBudget.bytes)
  t.is(b.memoryBudget.bytes, 64 << 20)
  const block = a.heap.malloc(1 << 20)
  t.is(b.heap.stats().allocatedBytes.current, 0, 'two devices, two heaps')
  block.free()
  a.destroy()
  b.destroy()
})

test('a missing adapter is ADAPTER_NOT_FOUND listing the adapters; a bad index, or an index with an id, is INVALID_ARGUMENT', async (t) => {
  const list = await Gpu.enumerate()
  const err = await t.throwsAsync(Gpu.request({ adapterIndex: list.length }), { code: 'ADAPTER_NOT_FOUND' })
  t.true(err.message.includes(`adapterIndex ${list.length} is out of range`))
  t.true(err.message.includes(`0: ${list[0].id}`), err.message)
  await t.throwsAsync(Gpu.request({ adapterId: 'vulkan:0000:0000:no such GPU' }), { code: 'ADAPTER_NOT_FOUND', message: /no adapter has id/ })
  for (const bad of [-1, 1.5, NaN]) await t.throwsAsync(Gpu.request({ adapterIndex: bad }), { code: 'INVALID_ARGUMENT' })
  // Both could name different adapters: neither silently wins.
  await t.throwsAsync(Gpu.request({ adapterIndex: 0, adapterId: 'nope' }), { code: 'INVALID_ARGUMENT', message: /adapterIndex or adapterId, not both/ })
})

test('WGALLOC_ADAPTER picks by index or id, over the options', (t) => {
  const script = `require(${ENTRY}).Gpu.request({ adapterIndex: 99 }).then((g) => { console.log('opened ' + g.info.adapterName); g.destroy() }, (e) => { console.log(e.code); process.exitCode = 1 })`
  const byIndex = spawnSync(process.execPath, ['-e', script], { encoding: 'utf8', env: { ...process.env, WGALLOC_ADAPTER: '0' } })
  t.is(byIndex.status, 0, byIndex.stdout + byIndex.stderr)
  t.regex(byIndex.stdout, /^opened /)
  const missing = spawnSync(process.execPath, ['-e', script], { encoding: 'utf8', env: { ...process.env, WGALLOC_ADAPTER: 'dx12:0000:0000:nothing' } })
  t.regex(missing.stdout, /ADAPTER_NOT_FOUND/)
})
