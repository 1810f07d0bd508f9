// Random calls across the whole public surface: any method or getter of any object
// (found on the prototypes, so new API is fuzzed without editing this file), with
// random arguments, sometimes with a wrong `this`, sometimes left running while the
// next calls go on. Every call must return, or throw a typed error (or pass through
// the error a hostile argument threw); no call may hang; after each sequence the
// allocators are back to exactly where they were.
import { planMemory, WgallocError } from 'wgalloc'
import { describe, fault, type Harness, isThenable, note, problem, settle } from './outcome.js'
import { args as argsArb, build, recipe, show } from './values.js'
import { endRun, type Fixtures, fixtures, openWorld } from './world.js'

const HANG_MS = 20_000

/** An object calls are made on: how often, where it comes from, which members to leave out. */
interface Target {
  weight: number
  get: (fx: Fixtures) => object
  skip?: string[]
  /** Call the object's own members (a class's statics), not its prototype's. */
  statics?: boolean
}
/** A method of a target, or a getter. */
type Method = (this: unknown, ...args: unknown[]) => unknown
type Member = { name: string | symbol; call: Method; getter?: undefined } | { name: string | symbol; getter: Method; call?: undefined }

// Objects calls are made on; `skip` names methods that would end an object the world
// keeps for every run (the main device, its executor).
const TARGETS: Record<string, Target> = {
  gpu: { weight: 3, get: (fx) => fx.gpu, skip: ['destroy', 'dispose'] },
  gpu2: { weight: 1, get: (fx) => fx.gpu2 }, // may be destroyed: the rest of the run sees DEVICE_LOST
  heap: { weight: 3, get: (fx) => fx.heap },
  block: { weight: 3, get: (fx) => fx.block },
  blockFreed: { weight: 1, get: (fx) => fx.blockFreed },
  host: { weight: 2, get: (fx) => fx.host },
  hostUp: { weight: 2, get: (fx) => fx.hostUp },
  hostDown: { weight: 1, get: (fx) => fx.hostDown },
  stream: { weight: 2, get: (fx) => fx.stream },
  event: { weight: 1, get: (fx) => fx.event },
  buffer: { weight: 1, get: (fx) => fx.buffer },
  plan: { weight: 1, get: (fx) => fx.plan },
  executor: { weight: 1, get: (fx) => fx.executor, skip: ['release', 'dispose', 'asyncDispose'] },
  profiler: { weight: 2, get: (fx) => fx.profiler },
  scope: { weight: 1, get: (fx) => fx.scope },
  weights: { weight: 1, get: (fx) => fx.weights },
  shapes: { weight: 1, get: (fx) => fx.shapes },
  Gpu: { weight: 0.2, get: (fx) => fx.Gpu, statics: true }, // request() opens a device: rare
  planMemory: { weight: 1, get: () => ({ planMemory }), statics: true },
}
const NAMES = Object.keys(TARGETS)

const methodCache = new Map<string, Member[]>()
/** Methods and getters of `obj`'s class (own statics for a class), sorted so indices are stable. */
function members(target: string, obj: object): Member[] {
  const cached = methodCache.get(target)
  if (cached) return cached
  const spec = TARGETS[target]
  const holder: object = spec.statics ? obj : Object.getPrototypeOf(obj)
  const list: Member[] = []
  for (const name of Reflect.ownKeys(holder)) {
    const label = typeof name === 'symbol' ? name.description!.replace(/^nodejs\./, '') : name
    if (['constructor', 'prototype', 'length', 'name'].includes(label) || (spec.skip ?? []).includes(label)) continue
    const d = Object.getOwnPropertyDescriptor(holder, name)!
    if (typeof d.value === 'function') list.push({ name, call: d.value })
    else if (typeof d.get === 'function') list.push({ name, getter: d.get })
  }
  list.sort((a, b) => String(a.name).localeCompare(String(b.name)))
  methodCache.set(target, list)
  return list
}

const call = (fc: Harness['fc']) =>
  fc.record({
    target: fc.oneof(...NAMES.map((n) => ({ weight: Math.max(1, Math.round(TARGETS[n].weight * 5)), arbitrary: fc.constant(n) }))),
    method: fc.nat(),
    args: argsArb(4),
    self: fc.oneof({ weight: 12, arbitrary: fc.constant(null) }, { weight: 1, arbitrary: recipe }), // a wrong `this`, now and then
    wait: fc.oneof({ weight: 4, arbitrary: fc.constant(true) }, { weight: 1, arbitrary: fc.constant(false) }),
  })

export async function run({ fc, check, counts, trace }: Harness): Promise<void> {
  const world = await openWorld()
  let runIndex = 0
  const property = fc.asyncProperty(fc.array(call(fc), { minLength: 1, maxLength: 30, size: 'medium' }), async (calls) => {
    counts.runs++
    trace.reset(`api run ${++runIndex}`)
    const fx = fixtures(world)
    const inFlight: Promise<void>[] = []
    const failures: string[] = []
    const judge = (err: unknown, what: string) => {
      const kind = note(counts, err)
      if (kind === 'bad') failures.push(`${what} threw ${describe(err)}`)
      if (kind === 'typed' && err instanceof WgallocError && err.code === 'INTERNAL') problem(counts, `INTERNAL from ${what}: ${err.message.split('\n')[0]}`)
    }
    const keep = (value: unknown, how: string | symbol) => {
      if (value && (typeof value === 'object' || typeof value === 'function')) fx.owned.push({ value, how })
    }
    for (const c of calls) {
      const obj = TARGETS[c.target].get(fx)
      const list = members(c.target, obj)
      const m = list[c.method % list.length]
      let self: unknown = obj
      let argv: unknown[]
      try {
        argv = c.args.map((r) => build(r, fx))
        if (c.self) self = build(c.self, fx)
      } catch (err) {
        judge(err, 'building arguments')
        continue
      }
      const what = `${c.target}.${String(m.name)}(${argv.map(show).join(', ')})${c.self ? ` this=${show(self)}` : ''}`
      trace.line(what)
      counts.operations++
      counts.badInputs++
      let result: unknown
      try {
        result = m.getter ? m.getter.call(self) : m.call.apply(self, argv)
      } catch (err) {
        judge(err, what)
        continue
      }
      if (isThenable(result)) {
        const settled = settle(Promise.resolve(result), HANG_MS).then((s) => {
          if (s.hang) {
            counts.hangs++
            failures.push(`${what} did not settle within ${HANG_MS} ms`)
          } else if ('error' in s) judge(s.error, what)
          else keep(s.value, m.name)
        })
        if (c.wait) await settled
        else inFlight.push(settled)
      } else {
        keep(result, m.name)
      }
    }
    await Promise.all(inFlight)
    const { leak, mainLost } = await endRun(world, fx)
    if (mainLost) fault(counts, 'device lost (attached handle destroyed)')
    counts.leakedBytes += leak.bytes + leak.hostBytes
    counts.leakedBlocks += leak.blocks + leak.hostRequests
    if (leak.blocks || leak.bytes || leak.hostRequests || leak.hostBytes) failures.push(`leak after the run: ${JSON.stringify(leak)}`)
    if (failures.length) throw new Error(failures.join('\n'))
  })
  await check('random API calls', property, 150)
  // Still computes correctly after all of it.
  const { outputs } = await world.executor.run({ x: Uint32Array.from({ length: 64 }, (_, i) => i) })
  counts.reads++
  if (outputs.y.some((v, i) => v !== i + 2)) counts.corruptedReads++
}
