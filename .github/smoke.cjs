'use strict'
// Release smoke test for a platform where CI has no GPU to run the ava suite
// on (macOS, Windows, Node 18): the downloaded binary loads, the planner runs,
// and a device, when the runner offers one, round-trips bytes. A runner
// without an adapter must give a typed ADAPTER_NOT_FOUND, never a crash.
const assert = require('node:assert/strict')
const { Gpu, planMemory } = require('..')

async function main() {
  const records = [
    { id: 'a', size: 32, first: 0, last: 1 },
    { id: 'b', size: 28, first: 1, last: 4 },
    { id: 'c', size: 36, first: 2, last: 5 },
  ]
  const plan = await planMemory(records, { strategy: 'best' })
  // b overlaps both a and c in time: the slab holds at least b + max(a, c)
  assert.ok(plan.slabSize >= 28 + 36, `slab ${plan.slabSize}`)
  console.log(`planner: slab ${plan.slabSize} bytes, lower bound ${plan.lowerBound}`)

  let gpu
  try {
    gpu = await Gpu.request({ signal: AbortSignal.timeout(30_000) })
  } catch (err) {
    if (err.code !== 'ADAPTER_NOT_FOUND') throw err
    console.log(`device: none on this runner (${err.code}); skipped the device check`)
    return
  }
  const data = Uint8Array.from({ length: 256 }, (_, i) => (i * 7 + 3) & 0xff)
  const buffer = gpu.createBuffer(data.length)
  gpu.writeBuffer(buffer, 0, data)
  const back = await gpu.readBuffer(buffer, 0, data.length)
  assert.deepEqual(new Uint8Array(back), data)
  console.log(`device: ${gpu.info.adapterName} (${gpu.info.backend}), 256 bytes round-tripped`)
}

main().catch((err) => {
  console.error(err)
  process.exit(1)
})
