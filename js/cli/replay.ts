// `wgalloc replay <trace.json> [--json] [--simulate [--alignment N]]`: fragmentation and driver
// calls of an eager allocation trace through the heap, beside PyTorch's CUDA caching allocator
// policy and two simple policies simulated on the same events. `--simulate` runs the heap's
// policy on host storage (no GPU); without it the heap runs on the device. `--snapshot out.json`
// also saves the heap's recorded history (for `wgalloc view`). `--save-profile FILE` writes the
// heap's profile at the end (`heap.profile()`); `--profile FILE` starts the heap warm from one.
import { WgallocError, invalidArgument } from '../errors.js'
import { Gpu } from '../gpu.js'
import { readInputFile } from '../internal/input-file.js'
import { refuseInputAsOutput, writeOutputFile } from '../internal/output-file.js'
import { type ReplayFigures, type Trace, replayHeap, simulate } from '../replay.js'
import { replayHistory } from '../view/history.js'
import { parseCommand, str } from './command.js'
import { bytes, table } from './table.js'

const USAGE =
  'usage: wgalloc replay <trace.json> [--json] [--simulate [--alignment N]] [--snapshot out.json] [--profile in.json] [--save-profile out.json]   (format: bench/data/traces, events of { op: "alloc"|"free", id, size })\n' +
  '  --simulate      run the heap policy on host storage, no GPU (a device with N-byte offset alignment, default 256)\n' +
  '  --profile       start the heap warm from a profile (heap.profile() of an earlier run, or --save-profile)\n' +
  '  --save-profile  write the profile the heap ends the replay with'

export default async function replay(argv: string[]): Promise<number> {
  const { values, positionals, exit } = parseCommand(argv, {
    usage: USAGE,
    files: 1,
    options: {
      json: { type: 'boolean', default: false },
      simulate: { type: 'boolean', default: false },
      alignment: { type: 'string' },
      snapshot: { type: 'string' },
      profile: { type: 'string' },
      'save-profile': { type: 'string' },
    },
  })
  if (exit !== undefined) return exit
  const snapshot = str(values, 'snapshot')
  if (values.simulate && snapshot)
    throw invalidArgument('--snapshot', 'no --snapshot with --simulate', `'${snapshot}'`, '--snapshot records the device heap; leave out --simulate')
  const alignmentText = str(values, 'alignment')
  if (alignmentText !== undefined && !values.simulate)
    throw invalidArgument(
      '--alignment',
      'no --alignment without --simulate',
      `'${alignmentText}'`,
      '--alignment applies to --simulate (the device has its own)',
    )
  const alignment = alignmentText === undefined ? undefined : Number(alignmentText)
  const saveProfile = str(values, 'save-profile')
  const profileFile = str(values, 'profile')
  // The profile's text goes to the Rust checker as written (fields named on INVALID_ARGUMENT).
  const profile = profileFile === undefined ? undefined : readInputFile(profileFile)
  if (profile !== undefined) {
    try {
      JSON.parse(profile)
    } catch (err) {
      throw new WgallocError('PARSE_ERROR', `${profileFile} is not valid JSON: ${(err as Error).message}`, { cause: err })
    }
  }
  const file = positionals[0]
  // Writing the profile over the one read (--profile) is a restart's loop; over the trace, a loss.
  if (snapshot) refuseInputAsOutput(snapshot, file, '--snapshot')
  if (saveProfile) refuseInputAsOutput(saveProfile, file, '--save-profile')
  // The text goes to the Rust checker as written (bad JSON is a PARSE_ERROR naming the file).
  const text = readInputFile(file)
  let trace: Trace
  try {
    trace = JSON.parse(text)
  } catch (err) {
    throw new WgallocError('PARSE_ERROR', `${file} is not valid JSON: ${(err as Error).message}`, { cause: err })
  }
  let ours: ReplayFigures
  let history: unknown
  if (values.simulate) {
    ours = simulate(text, { ...(alignment === undefined ? {} : { alignment }), profile })
  } else {
    const gpu = await Gpu.request()
    try {
      ours = replayHeap(gpu.heap, trace, { profile })
      // A second pass records every block's segment and offset: a snapshot with history.
      if (snapshot) history = replayHistory(gpu.heap, trace)
    } finally {
      gpu.destroy()
    }
  }
  if (snapshot) writeOutputFile(snapshot, `${JSON.stringify(history)}\n`, 'memory history', values.json === true)
  if (saveProfile) writeOutputFile(saveProfile, `${JSON.stringify(ours.profile, null, 1)}\n`, 'heap profile', values.json === true)
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
    f.driverFrees ?? '',
    f.bytesMoved === undefined ? '' : bytes(f.bytesMoved),
  ])
  console.log(`${file}: ${ours.events} events, ${trace.requests ?? 1} requests, ${bytes(ours.bytesAllocated ?? 0)} allocated\n`)
  console.log(table(['policy', 'peak reserved', 'peak live', 'reserved/live', 'driver allocs', 'per 1000 requests', 'driver frees', 'bytes moved'], rows))
  const verdict = ours.target
  if (verdict)
    console.log(
      `\ntarget (1.15 x live + 8 MiB, pytorch-cuda's bytes, 2 x its driver allocs + 2, moves <= 10% of allocated): ${verdict.met ? 'met' : `missed: ${verdict.missed.join(', ')}`}`,
    )
  const w = ours.warmStart
  if (w) {
    console.log(
      `\nwarm start: ${w.segments} segment${w.segments === 1 ? '' : 's'}, ${bytes(w.reservedBytes)} reserved up front; ` +
        `${w.driverAllocationsAfter} driver allocation${w.driverAllocationsAfter === 1 ? '' : 's'} after it; ` +
        `peak reserved ${w.fragmentation.toFixed(3)} x live (target 1.05 x live + 2 MiB: ${w.withinTarget ? 'met' : 'not met'})`,
    )
  }
  return 0
}
