// Profiler view data from Chrome Trace Event JSON (gpu.profiler.exportTrace, or
// any trace in the object or array form): one track per thread (the profiler
// writes one per GPU stream, plus CPU encode/submit), complete (X) and B/E
// slices packed into lanes, counters (C) as series, instants (i) as markers.
import { type Loose, type SummaryRow, array, count, fail, number, object } from './check.js'
import { shown } from '../errors.js'

interface Slice {
  ts: number
  dur: number
  name: string
  cat: unknown
  args: Loose | null
  lane?: number
}

interface Counter {
  name: string
  keys: string[]
  samples: [number, Loose][]
}

interface Instant {
  key: string
  ts: number
  name: string
  cat: unknown
  args: Loose | null
}

const BYTE_COUNTER = /bytes|allocated|reserved|active|memory|cached/i

/** Packs slices (sorted by start) into the fewest lanes with no overlap in a lane. */
function assignLanes(slices: Slice[]): number {
  const laneEnds: number[] = []
  for (const s of slices) {
    let lane = laneEnds.findIndex((end) => end <= s.ts)
    if (lane < 0) lane = laneEnds.push(0) - 1
    laneEnds[lane] = s.ts + s.dur
    s.lane = lane
  }
  return Math.max(laneEnds.length, 1)
}

export function fromTrace(json: Loose | Loose[]) {
  const events = array(Array.isArray(json) ? json : json.traceEvents, 'traceEvents')
  const threadNames = new Map<string, string>() // "pid:tid" -> name
  const processNames = new Map<string, string>()
  const slices = new Map<string, Slice[]>() // "pid:tid" -> [slice]
  const open = new Map<string, Loose[]>() // "pid:tid" -> stack of B events
  const counters = new Map<string, Counter>() // "pid:name" -> { name, keys, samples: [[ts, {k: v}]] }
  const instants: Instant[] = []
  let t0 = Infinity
  let t1 = -Infinity
  let ignored = 0
  const addSlice = (key: string, s: Slice) => {
    let list = slices.get(key)
    if (!list) slices.set(key, (list = []))
    list.push(s)
    t0 = Math.min(t0, s.ts)
    t1 = Math.max(t1, s.ts + s.dur)
  }
  for (const [i, e] of events.entries()) {
    const at = `traceEvents[${i}]`
    object(e, at)
    if (typeof e.ph !== 'string') fail(`${at}.ph`, 'a phase string', shown(e.ph))
    const key = `${e.pid ?? 0}:${e.tid ?? 0}`
    const name = e.name == null ? '' : String(e.name)
    switch (e.ph) {
      case 'M':
        if (e.name === 'thread_name' && e.args?.name != null) threadNames.set(key, String(e.args.name))
        if (e.name === 'process_name' && e.args?.name != null) processNames.set(String(e.pid ?? 0), String(e.args.name))
        break
      case 'X':
        addSlice(key, { ts: number(e.ts, `${at}.ts`), dur: count(e.dur ?? 0, `${at}.dur`), name, cat: e.cat ?? '', args: e.args ?? null })
        break
      case 'B': {
        let stack = open.get(key)
        if (!stack) open.set(key, (stack = []))
        stack.push(e)
        break
      }
      case 'E': {
        const b = open.get(key)?.pop()
        if (!b) fail(`${at}.ph`, "a B event before this 'E'", "'E' without one", 'E event without a matching B')
        const ts = number(b.ts, `${at} (its B).ts`)
        addSlice(key, { ts, dur: Math.max(0, number(e.ts, `${at}.ts`) - ts), name: String(b.name ?? ''), cat: b.cat ?? '', args: { ...b.args, ...e.args } })
        break
      }
      case 'C': {
        const ckey = `${e.pid ?? 0}:${name}`
        let c = counters.get(ckey)
        if (!c) counters.set(ckey, (c = { name, keys: [], samples: [] }))
        const values = object(e.args, `${at}.args`)
        for (const k of Object.keys(values)) {
          number(values[k], `${at}.args.${k}`)
          if (!c.keys.includes(k)) c.keys.push(k)
        }
        const ts = number(e.ts, `${at}.ts`)
        c.samples.push([ts, values])
        t0 = Math.min(t0, ts)
        t1 = Math.max(t1, ts)
        break
      }
      case 'i':
      case 'I':
      case 'R': {
        const ts = number(e.ts, `${at}.ts`)
        instants.push({ key, ts, name, cat: e.cat ?? '', args: e.args ?? null })
        t0 = Math.min(t0, ts)
        t1 = Math.max(t1, ts)
        break
      }
      default:
        ignored++
    }
  }
  if (!Number.isFinite(t0)) {
    t0 = 0
    t1 = 1
  }
  if (t1 <= t0) t1 = t0 + 1

  const keys = [...new Set([...slices.keys(), ...instants.map((x) => x.key)])].sort((a, b) => {
    const [pa, ta] = a.split(':').map(Number)
    const [pb, tb] = b.split(':').map(Number)
    return pa - pb || ta - tb
  })
  const names: string[] = [] // string table for slice names
  const nameIndex = new Map<string, number>()
  const intern = (s: string) => {
    let k = nameIndex.get(s)
    if (k === undefined) nameIndex.set(s, (k = names.push(s) - 1))
    return k
  }
  let sliceCount = 0
  const tracks = keys.map((key) => {
    const list = (slices.get(key) ?? []).sort((a, b) => a.ts - b.ts || b.dur - a.dur)
    const lanes = assignLanes(list)
    sliceCount += list.length
    const [pid, tid] = key.split(':')
    const process = processNames.get(pid)
    return {
      name: threadNames.get(key) ?? `thread ${tid}`,
      process: process ?? `process ${pid}`,
      lanes,
      ts: list.map((s) => s.ts - t0),
      dur: list.map((s) => s.dur),
      name_: list.map((s) => intern(s.name)),
      cat: list.map((s) => intern(String(s.cat))),
      lane: list.map((s) => s.lane),
      args: list.map((s) => (s.args && Object.keys(s.args).length ? s.args : null)),
    }
  })
  // The profiler writes an instant beside every timed slice; draw only the others (OOM, gc, ...).
  const sliceAt = new Set<string>()
  for (const [key, list] of slices) for (const s of list) sliceAt.add(`${key}|${s.ts}|${s.name}`)
  const marks = instants
    .filter((x) => !sliceAt.has(`${x.key}|${x.ts}|${x.name}`))
    .map((x) => ({ track: keys.indexOf(x.key), ts: x.ts - t0, name: x.name, cat: x.cat, args: x.args }))
  const counterList = [...counters.values()].map((c) => {
    c.samples.sort((a, b) => a[0] - b[0])
    return {
      name: c.name,
      bytes: BYTE_COUNTER.test(c.name) || c.keys.some((k) => BYTE_COUNTER.test(k)),
      keys: c.keys,
      ts: c.samples.map((s) => s[0] - t0),
      // A key missing from a sample keeps its previous value (Chrome's behaviour).
      values: c.keys.map((k) => {
        let last = 0
        return c.samples.map((s) => (last = k in s[1] ? s[1][k] : last))
      }),
    }
  })
  const other = Array.isArray(json) ? {} : (json.otherData ?? {})
  const device = [other.adapter, other.backend].filter((x): x is string => typeof x === 'string').join(' · ')
  const samples = counterList.reduce((a, c) => a + c.ts.length, 0)
  return {
    kind: 'profile',
    title: 'wgalloc profile',
    subtitle: `${sliceCount} slices on ${tracks.length} tracks, ${counterList.length} counters${device ? `, ${device}` : ''}`,
    duration: t1 - t0,
    tracks,
    names,
    counters: counterList,
    marks,
    sliceCount,
    summary: [
      ['span', (t1 - t0) / 1000, 'ms'] as SummaryRow,
      ['slices', sliceCount, 'count'],
      ['tracks', tracks.length, 'count'],
      ['counter samples', samples, 'count'],
      ['markers', marks.length, 'count'],
      ...(ignored ? [['events not drawn', ignored, 'count']] : []),
      ...(typeof other.droppedEvents === 'number' ? [['dropped by profiler', other.droppedEvents, 'count']] : []),
    ],
  }
}
