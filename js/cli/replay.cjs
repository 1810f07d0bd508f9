'use strict'
// `wgalloc replay <trace.json> [--json] [--simulate [--alignment N]]`: fragmentation and driver
// calls of an eager allocation trace through the heap, beside PyTorch's CUDA caching allocator
// policy and two simple policies simulated on the same events. `--simulate` runs the heap's
// policy on host storage (no GPU); without it the heap runs on the device.
// `--snapshot out.json` also saves the heap's recorded history (for `wgalloc view`).
const { writeFileSync } = require('node:fs')
const { Gpu } = require('../index.cjs')
const { WgallocError } = require('../errors.cjs')
const { replayHeap, simulate } = require('../replay.cjs')
const { replayHistory } = require('../view/history.cjs')
const { readJsonFile } = require('../view/index.cjs')
const { table, bytes } = require('./table.cjs')

module.exports = async function replay(argv, { parseCommand }) {
  const { values, positionals, exit } = parseCommand(argv, {
    usage:
      'usage: wgalloc replay <trace.json> [--json] [--simulate [--alignment N]] [--snapshot out.json]   (format: bench/data/traces, events of { op: "alloc"|"free", id, size })\n' +
      '  --simulate     run the heap policy on host storage, no GPU (a device with N-byte offset alignment, default 256)',
    files: 1,
    options: {
      json: { type: 'boolean', default: false },
      simulate: { type: 'boolean', default: false },
      alignment: { type: 'string' },
      snapshot: { type: 'string' },
    },
  })
  if (exit !== undefined) return exit
  if (values.simulate && values.snapshot) throw new WgallocError('INVALID_ARGUMENT', '--snapshot records the device heap; leave out --simulate')
  if (values.alignment !== undefined && !values.simulate)
    throw new WgallocError('INVALID_ARGUMENT', '--alignment applies to --simulate (the device has its own)')
  const alignment = values.alignment === undefined ? undefined : Number(values.alignment)
  const trace = readJsonFile(positionals[0])
  let ours
  if (values.simulate) {
    ours = simulate(trace, alignment === undefined ? undefined : { alignment })
  } else {
    const gpu = await Gpu.request()
    try {
      ours = replayHeap(gpu.heap, trace)
      // A second pass records every block's segment and offset: a snapshot with history.
      if (values.snapshot) writeFileSync(values.snapshot, JSON.stringify(replayHistory(gpu.heap, trace)) + '\n')
    } finally {
      gpu.destroy()
    }
  }
  if (values.json) {
    console.log(JSON.stringify(ours))
    return 0
  }
  const rows = [ours, ...ours.baselines].map((f) => [
    f === ours && ours.simulated ? `${f.policy} (simulated)` : f.policy,
    bytes(f.peakReservedBytes),
    bytes(f.peakLiveBytes),
    Number(f.fragmentation.toFixed(3)),
    f.driverAllocations,
    Number(f.driverAllocationsPer1000Requests.toFixed(1)),
  ])
  console.log(`${positionals[0]}: ${ours.events} events, ${trace.requests ?? 1} requests\n`)
  console.log(table(['policy', 'peak reserved', 'peak live', 'reserved/live', 'driver allocs', 'per 1000 requests'], rows))
  return 0
}
