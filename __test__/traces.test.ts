// Every eager trace in bench/data/traces is a consistent alloc/free stream whose stated totals
// match its events. No GPU: this checks the data the heap benchmarks and `replay` read.
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import test from 'ava'

const TRACES = join(__dirname, '../bench/data/traces')
const REQUIRED_FIELDS = ['source', 'license', 'model', 'kind', 'modelFileBytes', 'runtime', 'trace', 'requests', 'inputShapes']

/** One event as a trace file holds it. */
interface TraceEventData {
  op: string
  id: string
  size?: number
}

/** A trace file: its metadata fields and its events. */
interface TraceFile {
  [field: string]: unknown
  inputShapes: unknown[]
  requests: number
  events: TraceEventData[]
  numEvents: number
  peakLiveBytes: number
}

interface Replayed {
  numEvents: number
  peakLiveBytes: number
  leftLive: number
}

/** Replays a trace's events; returns { numEvents, peakLiveBytes } or throws naming the bad event. */
function checkEvents(events: TraceEventData[]): Replayed {
  if (!Array.isArray(events) || events.length === 0) throw new Error('no events')
  const live = new Map<string, number>()
  let current = 0
  let peak = 0
  events.forEach((e, i) => {
    if (typeof e.id !== 'string' || e.id === '') throw new Error(`event ${i}: id must be a non-empty string`)
    if (e.op === 'alloc') {
      if (!Number.isSafeInteger(e.size) || e.size! <= 0) throw new Error(`event ${i}: size ${e.size} is not a positive integer`)
      if (live.has(e.id)) throw new Error(`event ${i}: ${e.id} allocated while already live`)
      live.set(e.id, e.size!)
      current += e.size!
      peak = Math.max(peak, current)
    } else if (e.op === 'free') {
      if (!live.has(e.id)) throw new Error(`event ${i}: free of ${e.id}, which is not live`)
      current -= live.get(e.id)!
      live.delete(e.id)
    } else {
      throw new Error(`event ${i}: unknown op ${JSON.stringify(e.op)}`)
    }
  })
  return { numEvents: events.length, peakLiveBytes: peak, leftLive: live.size }
}

function traceFiles(): string[] {
  if (!existsSync(TRACES)) throw new Error(`${TRACES} is missing`)
  return readdirSync(TRACES)
    .filter((f) => f.endsWith('.trace.json'))
    .sort()
}

test('bench/data/traces holds trace files', (t) => {
  const files = traceFiles()
  t.true(files.length > 0, `no *.trace.json in ${TRACES}`)
})

test('every trace is a consistent alloc/free stream whose numEvents and peakLiveBytes match its events', (t) => {
  const files = traceFiles()
  t.true(files.length > 0, `no *.trace.json in ${TRACES}`)
  for (const file of files) {
    const trace = JSON.parse(readFileSync(join(TRACES, file), 'utf8')) as TraceFile
    for (const field of REQUIRED_FIELDS) t.not(trace[field], undefined, `${file}: ${field} missing`)
    t.is(trace.inputShapes.length, trace.requests, `${file}: one inputShapes entry per request`)
    let replayed: Replayed | undefined
    t.notThrows(() => {
      replayed = checkEvents(trace.events)
    }, file)
    if (!replayed) continue
    t.is(trace.numEvents, replayed.numEvents, `${file}: numEvents`)
    t.is(trace.peakLiveBytes, replayed.peakLiveBytes, `${file}: peakLiveBytes`)
    t.is(replayed.leftLive, 0, `${file}: allocations still live at the end`)
  }
})

test('the event check rejects double allocs, unknown frees and bad sizes', (t) => {
  const ok = [
    { op: 'alloc', id: 'a', size: 8 },
    { op: 'alloc', id: 'b', size: 4 },
    { op: 'free', id: 'a' },
    { op: 'free', id: 'b' },
  ]
  t.deepEqual(checkEvents(ok), { numEvents: 4, peakLiveBytes: 12, leftLive: 0 })
  t.throws(() => checkEvents([ok[0], ok[0]]), { message: /event 1: a allocated while already live/ })
  t.throws(() => checkEvents([ok[0], { op: 'free', id: 'x' }]), { message: /event 1: free of x/ })
  t.throws(() => checkEvents([ok[0], ok[2], ok[2]]), { message: /event 2: free of a/ })
  for (const size of [0, -8, 1.5, 2 ** 53, '8', undefined]) {
    t.throws(() => checkEvents([{ op: 'alloc', id: 'a', size: size as never }]), { message: /not a positive integer/ })
  }
  t.throws(() => checkEvents([]), { message: /no events/ })
})
