// Model-based fuzzing of the profiler: sessions and captures started and stopped in any
// order with good and bad modes, exports to good and bad paths, flushes, CPU-fallback
// marks, scoped profile() with work that throws, and real GPU work in between. The model
// knows which calls must succeed and with which code the others fail; every trace
// written must be a Chrome trace document; fallback counts must match.
import fs from 'node:fs'
import type { Arbitrary, AsyncCommand } from 'fast-check'
import { type Profiler, type ProfilerStats, WgallocError, type WgallocErrorCode } from 'wgalloc'
import { type Counts, type Harness, describe, fault, note, settle } from './outcome.js'
import type { Trace } from './trace.js'
import { Hostile, build, recipe, show } from './values.js'
import { type World, openWorld, restore } from './world.js'

const HANG_MS = 20_000
const MODES = [
  undefined,
  'interval',
  'event',
  'interval,event',
  'event,interval',
  ' event ',
  'interval,interval',
  '',
  'bogus',
  'interval,',
  'INTERVAL',
  7,
  null,
]
const NAMES = ['trace-a', 'trace-b.json', 'sub/none/t.json', '/nonexistent-wgalloc/t.json', '', 'x\0y', 'dir']

const validMode = (m: unknown) => m === undefined || (typeof m === 'string' && m.split(',').every((p) => p.trim() === 'interval' || p.trim() === 'event'))
/** Whether writing a trace to `name` (relative to the run's directory) can succeed. */
const writable = (name: unknown) =>
  typeof name === 'string' && name !== '' && !name.includes('\0') && !name.includes('/') && !['dir', '.', '..'].includes(name) && Buffer.byteLength(name) <= 250

/** The model (`S`): what the profiler must be doing, and where the counts and the step log go. */
interface State {
  world: World
  counts: Counts
  trace: Trace
  profiler: Profiler
  session: boolean
  capture: string | null
  fallbacks: Map<string, number>
}
/** The real system is the model's device: the commands need nothing beside the model. */
type Real = object

/** How a call ended: its value, or what it threw or rejected with. */
type Attempt<T> = { ok: true; value: T } | { ok: false; error: unknown }

async function attemptAsync<T>(fn: () => T | PromiseLike<T>): Promise<Attempt<T>> {
  try {
    const s = await settle(Promise.resolve().then(fn), HANG_MS)
    if (s.hang) throw new Error(`did not settle within ${HANG_MS} ms`)
    return 'error' in s ? { ok: false, error: s.error } : { ok: true, value: s.value }
  } catch (error) {
    return { ok: false, error }
  }
}

/** `codes` null: the call must succeed (its value is returned); else it must fail with one of `codes`. */
function expect<T>(S: State, r: Attempt<T>, codes: null, what: string): T
function expect<T>(S: State, r: Attempt<T>, codes: WgallocErrorCode[] | null, what: string): T | undefined
function expect<T>(S: State, r: Attempt<T>, codes: WgallocErrorCode[] | null, what: string): T | undefined {
  if (codes === null) {
    if (!r.ok) {
      note(S.counts, r.error)
      throw new Error(`${what} failed: ${describe(r.error)}`)
    }
    return r.value
  }
  S.counts.badInputs++
  if (r.ok) throw new Error(`${what} succeeded; expected ${codes.join(' or ')}`)
  const kind = note(S.counts, r.error)
  // 'typed' is a WgallocError with a known code.
  if (kind !== 'typed' || !WgallocError.is(r.error) || !codes.includes(r.error.code))
    throw new Error(`${what}: expected ${codes.join(' or ')}, got ${describe(r.error)}`)
  return undefined
}

function checkTrace(path: string, what: string): void {
  let doc: unknown
  try {
    doc = JSON.parse(fs.readFileSync(path, 'utf8'))
  } catch (err) {
    throw new Error(`${what}: ${path} is not a readable JSON trace: ${(err as Error).message}`)
  }
  const events: unknown = Array.isArray(doc) ? doc : (doc as { traceEvents?: unknown }).traceEvents
  if (!Array.isArray(events) || events.some((e) => typeof e.ph !== 'string' || typeof e.name !== 'string'))
    throw new Error(`${what}: ${path} is not a Chrome trace`)
  fs.rmSync(path)
}

class Command<P> implements AsyncCommand<State, Real> {
  name: string
  p: P
  checkFn: (S: State) => boolean
  body: (S: State, p: P) => Promise<unknown>
  constructor(name: string, p: P, check: (S: State) => boolean, body: (S: State, p: P) => Promise<unknown>) {
    this.name = name
    this.p = p
    this.checkFn = check
    this.body = body
  }
  check(S: State): boolean {
    return this.checkFn(S)
  }
  async run(S: State): Promise<void> {
    S.counts.operations++
    S.trace.line(this.toString())
    await this.body(S, this.p)
    const i = S.profiler.info
    if (i.session !== S.session || i.capturing !== (S.capture !== null) || i.active !== (S.session || S.capture !== null)) {
      throw new Error(
        `after ${this}: info says session ${i.session} capturing ${i.capturing} active ${i.active}; the model session ${S.session} capture ${S.capture}`,
      )
    }
  }
  toString(): string {
    return `${this.name}(${show(this.p)})`
  }
}

function commands(fc: Harness['fc']): Arbitrary<AsyncCommand<State, Real>>[] {
  const c = <P>(name: string, arb: Arbitrary<P>, body: (S: State, p: P) => Promise<unknown>): Arbitrary<AsyncCommand<State, Real>> =>
    arb.map((p) => new Command(name, p, () => true, body))
  return [
    c(
      'start',
      fc.record({
        mode: fc.constantFrom(...MODES),
        statsOnly: fc.boolean(),
        wait: fc.boolean(),
        shape: fc.constantFrom('object', 'object', 'object', 'none', 'number'),
      }),
      async (S, p) => {
        const options = { object: { mode: p.mode, statsOnly: p.statsOnly, waitUntilCompleted: p.wait }, none: undefined, number: 5 }[p.shape]
        const r = await attemptAsync(() => S.profiler.start(options as never))
        const bad = p.shape === 'number' || (p.shape === 'object' && !validMode(p.mode))
        expect(S, r, bad ? ['INVALID_ARGUMENT'] : S.session ? ['PROFILER_STATE'] : null, `start(${show(options)})`)
        if (!bad && !S.session) S.session = true
        else fault(S.counts, 'profiler misuse')
      },
    ),
    c('stop', fc.constant({}), async (S) => {
      expect(S, await attemptAsync(() => S.profiler.stop()), S.session ? null : ['PROFILER_STATE'], 'stop()')
      if (!S.session) fault(S.counts, 'profiler misuse')
      S.session = false
    }),
    c('startCapture', fc.record({ name: fc.oneof(fc.constantFrom(...NAMES), recipe) }), async (S, p) => {
      const name = typeof p.name === 'string' ? p.name : build(p.name, { ref: () => undefined })
      const r = await attemptAsync(() => S.profiler.startCapture(name as never))
      if (!r.ok && r.error instanceof Hostile) return note(S.counts, r.error) // a hostile value's own error, passed through
      const bad = typeof name !== 'string' || name === ''
      expect(S, r, bad ? ['INVALID_ARGUMENT'] : S.capture !== null ? ['PROFILER_STATE'] : null, `startCapture(${show(name)})`)
      if (!bad && S.capture === null) S.capture = name
      else fault(S.counts, 'profiler misuse')
    }),
    c('stopCapture', fc.constant({}), async (S) => {
      const name = S.capture
      const r = await attemptAsync(() => S.profiler.stopCapture())
      S.capture = null
      if (name === null) return expect(S, r, ['PROFILER_STATE'], 'stopCapture() without a capture')
      if (!writable(name)) {
        // The capture ends either way; writing it where no file can go fails typed.
        if (!r.ok) expect(S, r, ['IO_ERROR', 'INVALID_ARGUMENT'], `stopCapture() to ${show(name)}`)
        return
      }
      const path = expect(S, r, null, `stopCapture() of ${show(name)}`)
      checkTrace(path, 'stopCapture')
    }),
    c('exportTrace', fc.record({ name: fc.oneof(fc.constantFrom(...NAMES), recipe) }), async (S, p) => {
      const name = typeof p.name === 'string' ? p.name : build(p.name, { ref: () => undefined })
      const r = await attemptAsync(() => S.profiler.exportTrace(name as never))
      if (!r.ok && r.error instanceof Hostile) return note(S.counts, r.error)
      if (typeof name !== 'string' || name === '') return expect(S, r, ['INVALID_ARGUMENT'], `exportTrace(${show(name)})`)
      if (!writable(name)) return expect(S, r, ['IO_ERROR', 'INVALID_ARGUMENT'], `exportTrace(${show(name)})`)
      expect(S, r, null, `exportTrace(${show(name)})`)
      checkTrace(name, 'exportTrace')
    }),
    c('flush', fc.constantFrom(undefined, 0, 10, 5000, -1, Number.NaN, 'x'), async (S, t) => {
      const bad = t !== undefined && !(typeof t === 'number' && Number.isInteger(t) && t >= 0)
      const r = await attemptAsync(() => S.profiler.flush(t as never))
      const done = expect(S, r, bad ? ['INVALID_ARGUMENT'] : null, `flush(${t})`)
      if (!bad && typeof done !== 'boolean') throw new Error(`flush resolved ${done}`)
    }),
    c('fallback', fc.record({ name: fc.constantFrom('topk', 'nms', '', 5), bytes: fc.constantFrom(undefined, 0, 64, -1, 1.5) }), async (S, p) => {
      const bad = typeof p.name !== 'string' || p.name === '' || (p.bytes !== undefined && !(Number.isInteger(p.bytes) && p.bytes >= 0))
      expect(
        S,
        await attemptAsync(() => S.profiler.markCpuFallback(p.name as never, p.bytes)),
        bad ? ['INVALID_ARGUMENT'] : null,
        `markCpuFallback(${show(p.name)}, ${p.bytes})`,
      )
      if (!bad && typeof p.name === 'string') S.fallbacks.set(p.name, (S.fallbacks.get(p.name) ?? 0) + 1)
      const seen = new Map(S.profiler.stats().fallbacks.map((f): [string, number] => [f.name, f.runs]))
      for (const [name, runs] of S.fallbacks)
        if (seen.get(name) !== runs) throw new Error(`fallback '${name}': stats say ${seen.get(name)} runs, the model ${runs}`)
    }),
    c('resetStats', fc.constant({}), async (S) => {
      S.profiler.resetStats()
      S.fallbacks.clear()
      if (S.profiler.stats().fallbacks.length) throw new Error('resetStats left fallbacks')
    }),
    c('work', fc.constantFrom('copy', 'run', 'upload', 'download'), async (S, kind) => {
      const { gpu, executor } = S.world
      const before = S.profiler.stats()
      if (kind === 'copy') {
        const a = gpu.heap.malloc(1 << 16, { usage: 'shared' })
        const b = gpu.heap.malloc(1 << 16)
        const s = gpu.createStream()
        s.copy(a, b)
        expect(S, await attemptAsync(() => s.synchronize()), null, 'profiled copy')
        a.free()
        b.free()
      } else if (kind === 'run') {
        const r = expect(S, await attemptAsync(() => executor.run({ x: new Uint32Array(64).fill(1) })), null, 'profiled run')
        S.counts.reads++
        if (r.outputs.y.some((v: number) => v !== 3)) {
          S.counts.corruptedReads++
          throw new Error('a profiled run computed the wrong numbers')
        }
      } else {
        const b = gpu.heap.malloc(4096)
        const data = Uint8Array.from({ length: 4096 }, (_, i) => i & 0xff)
        expect(S, await attemptAsync(() => gpu.upload(b, data)), null, 'profiled upload')
        if (kind === 'download') {
          const got = expect(S, await attemptAsync(() => gpu.download(b)), null, 'profiled download')
          S.counts.reads++
          if (Buffer.compare(Buffer.from(got), Buffer.from(data)) !== 0) {
            S.counts.corruptedReads++
            throw new Error('a profiled download returned the wrong bytes')
          }
        }
        b.free()
      }
      await S.profiler.flush()
      const after = S.profiler.stats()
      const total = (st: ProfilerStats) => st.operations.reduce((n, o) => n + o.runs, 0) + st.copies.reduce((n, o) => n + o.count, 0)
      if ((S.session || S.capture !== null) && total(after) <= total(before)) throw new Error(`profiled ${kind} was not counted`)
      if (!(S.session || S.capture !== null) && total(after) !== total(before)) throw new Error(`unprofiled ${kind} was counted`)
    }),
    c(
      'profile',
      fc.record({ outcome: fc.constantFrom('value', 'throws', 'rejects', 'notFunction'), mode: fc.constantFrom(undefined, 'event', 'bogus') }),
      async (S, p) => {
        const fn = {
          value: async () => 42,
          throws: () => {
            throw new Hostile('profile body')
          },
          rejects: async () => {
            throw new Hostile('profile body')
          },
          notFunction: 42,
        }[p.outcome]
        const r = await attemptAsync(() => S.profiler.profile(fn as never, p.mode ? { mode: p.mode as never } : undefined))
        if (p.outcome === 'notFunction' || p.mode === 'bogus') return expect(S, r, ['INVALID_ARGUMENT'], 'profile() with bad arguments')
        if (S.session) return expect(S, r, ['PROFILER_STATE'], 'profile() inside a session')
        if (p.outcome === 'value') {
          if (expect(S, r, null, 'profile()') !== 42) throw new Error('profile() lost the result')
        } else if (r.ok || !(r.error instanceof Hostile)) {
          throw new Error(`profile() of a throwing body: ${r.ok ? 'resolved' : describe(r.error)}`)
        } else {
          note(S.counts, r.error)
        }
      },
    ),
  ]
}

export async function run({ fc, check, counts, trace }: Harness): Promise<void> {
  const world = await openWorld()
  fs.mkdirSync('dir', { recursive: true }) // a directory where a trace file was asked for
  let n = 0
  const property = fc.asyncProperty(fc.commands(commands(fc), { maxCommands: 40, size: 'max' }), async (cmds) => {
    counts.runs++
    trace.reset(`profiler run ${++n}`)
    const S: State = { world, counts, trace, profiler: world.gpu.profiler, session: false, capture: null, fallbacks: new Map() }
    S.profiler.resetStats()
    try {
      await fc.asyncModelRun(() => ({ model: S, real: {} }), cmds)
    } finally {
      restore(world.gpu, world.gpuDefaults)
      S.profiler.resetStats()
    }
    if (world.gpu.lost) throw new Error('the device was lost')
  })
  await check('profiler sessions, captures and exports', property, 40)
}
