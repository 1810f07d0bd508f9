// `wgalloc replay <trace.json> [--json]`: fragmentation and driver calls of an eager
// allocation trace through the heap, beside two simple policies. `--snapshot out.json` also
// saves the heap's recorded history (for `wgalloc view`).
import { Gpu } from '../gpu.js'
import { readJsonFile, writeOutputFile } from '../input-file.js'
import { type PolicyFigures, type Trace, checkTrace, exactSize, powerOfTwo, replayHeap } from '../replay.js'
import { replayHistory } from '../view/history.js'
import { parseCommand, str } from './command.js'
import { bytes, table } from './table.js'

export default async function replay(argv: string[]): Promise<number> {
  const { values, positionals, exit } = parseCommand(argv, {
    usage: 'usage: wgalloc replay <trace.json> [--json] [--snapshot out.json]   (format: bench/data/traces, events of { op: "alloc"|"free", id, size })',
    files: 1,
    options: { json: { type: 'boolean', default: false }, snapshot: { type: 'string' } },
  })
  if (exit !== undefined) return exit
  const trace = readJsonFile(positionals[0]) as Trace
  checkTrace(trace)
  const gpu = await Gpu.request()
  let ours: PolicyFigures
  let history: unknown
  const snapshot = str(values, 'snapshot')
  try {
    ours = replayHeap(gpu.heap, trace)
    // A second pass records every block's segment and offset: a snapshot with history.
    if (snapshot) history = replayHistory(gpu.heap, trace)
  } finally {
    gpu.destroy()
  }
  if (snapshot) writeOutputFile(snapshot, `${JSON.stringify(history)}\n`, 'memory history')
  if (values.json) {
    console.log(JSON.stringify({ ...ours, baselines: [exactSize(trace), powerOfTwo(trace)] }))
    return 0
  }
  const rows = [ours, exactSize(trace), powerOfTwo(trace)].map((f) => [
    f.policy,
    bytes(f.peakReservedBytes),
    bytes(f.peakLiveBytes),
    Number(f.fragmentation.toFixed(3)),
    f.driverAllocations,
    Number(f.driverAllocationsPer1000Requests.toFixed(1)),
  ])
  console.log(`${positionals[0]}: ${trace.events.length} events, ${trace.requests ?? 1} requests\n`)
  console.log(table(['policy', 'peak reserved', 'peak live', 'reserved/live', 'driver allocs', 'per 1000 requests'], rows))
  return 0
}
