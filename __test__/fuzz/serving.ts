// Serving fuzzing: executors fed with DeviceBlocks (device inputs, external state bound in
// place, `outputsInto`, `outputs: 'device'`), shared weights and shape executors, with blocks
// freed, reused, too small or of another device around the runs. A shadow model holds every
// live block's u32 contents: a run the model accepts must give exact results and leave every
// other block as it was; a run it refuses must fail typed and write nothing. Blocks freed right
// after a run is called (not awaited) still serve that run, and memory reused at once is not
// touched by it. After each sequence the heap and the host cache are back where they were.
import type { Arbitrary } from 'fast-check'
import { type DeviceBlock, type Graph, type OutputArray, type RunOptions, WgallocError, type WgallocErrorCode } from 'wgalloc'
import { type Harness, fault, note, problem, within } from './outcome.js'
import { expectNoLeak, openWorld, restore, settled } from './world.js'

const HANG_MS = 30_000
const N = 64 // u32 elements per tensor
const BYTES = N * 4
const ROW = 16 // elements per batch row of the shape graph

const ADD2 = `@group(0) @binding(0) var<storage, read> a: array<u32>;
@group(0) @binding(1) var<storage, read> b: array<u32>;
@group(0) @binding(2) var<storage, read_write> c: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) { if (g.x < arrayLength(&c)) { c[g.x] = a[g.x] + b[g.x]; } }`
const INC = `@group(0) @binding(0) var<storage, read> a: array<u32>;
@group(0) @binding(1) var<storage, read_write> b: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) { if (g.x < arrayLength(&b)) { b[g.x] = a[g.x] + 1u; } }`

/** h = x + s; s = h + w (in place); y = h + h. */
const STATE_GRAPH: Graph = {
  kernels: { add: { source: ADD2 } },
  tensors: [
    { id: 'x', size: BYTES, kind: 'input', dtype: 'u32' },
    { id: 's', size: BYTES, kind: 'external', dtype: 'u32' },
    { id: 'w', size: BYTES, kind: 'param', dtype: 'u32' },
    { id: 'h', size: BYTES, dtype: 'u32' },
    { id: 'y', size: BYTES, kind: 'output', dtype: 'u32' },
  ],
  ops: [
    { name: 'mix', kernel: 'add', inputs: ['x', 's'], outputs: ['h'], dispatch: [1] },
    { name: 'keep', kernel: 'add', inputs: ['h', 'w'], outputs: ['s'], dispatch: [1] },
    { name: 'emit', kernel: 'add', inputs: ['h', 'h'], outputs: ['y'], dispatch: [1] },
  ],
}
/** y = x + 1 over `batch` rows. */
const SHAPE_GRAPH: Graph = {
  dims: ['batch'],
  kernels: { inc: { source: INC } },
  tensors: [
    { id: 'x', size: `batch * ${ROW * 4}`, kind: 'input', dtype: 'u32' },
    { id: 'y', size: `batch * ${ROW * 4}`, kind: 'output', dtype: 'u32' },
  ],
  ops: [{ name: 'inc', kernel: 'inc', inputs: ['x'], outputs: ['y'], dispatch: [1] }],
}
const BUCKETS = [1, 2, 4]

const add = (a: Uint32Array, b: Uint32Array) => a.map((v, i) => (v + b[i]) >>> 0)
const same = (a: OutputArray, b: Uint32Array) => a.length === b.length && a.every((v: number, i: number) => v === b[i])

/** What failure messages read of a thrown value: anything may be thrown, and WgallocErrors have both. */
const codeOf = (err: unknown): unknown => (typeof err === 'object' && err !== null && 'code' in err ? err.code : undefined)
const messageOf = (err: unknown): unknown => (typeof err === 'object' && err !== null && 'message' in err ? err.message : undefined)

/** One block the sequence made: its DeviceBlock, whether it is live, and its u32s when known. */
class Slot {
  block: DeviceBlock
  gpu: 'gpu' | 'gpu2'
  live: boolean
  data: Uint32Array | null
  constructor(block: DeviceBlock, gpuName: 'gpu' | 'gpu2') {
    this.block = block
    this.gpu = gpuName
    this.live = true
    this.data = null // unknown until written (malloc returns reused memory)
  }
}

const command = (fc: Harness['fc']) =>
  fc.oneof(
    {
      weight: 2,
      arbitrary: fc.record({ op: fc.constant('malloc'), size: fc.constantFrom(BYTES, BYTES, BYTES, 2 * BYTES, BYTES - 4, 128, 4), other: fc.boolean() }),
    },
    { weight: 2, arbitrary: fc.record({ op: fc.constant('write'), at: fc.nat(), seed: fc.nat() }) },
    { weight: 1, arbitrary: fc.record({ op: fc.constant('free'), at: fc.nat() }) },
    {
      weight: 5,
      arbitrary: fc.record({
        op: fc.constant('run'),
        x: fc.constantFrom('host', 'host', 'host', 'good', 'good', 'block', 'missing', 'short', 'sameAsS'),
        s: fc.constantFrom('good', 'good', 'good', 'good', 'block', 'block', 'missing', 'host', 'null'),
        out: fc.constantFrom('host', 'host', 'device', 'device', 'intoGood', 'into', 'intoS', 'intoX'),
        at: fc.array(fc.nat(), { minLength: 3, maxLength: 3 }),
        freeAfter: fc.subarray(['x', 's', 'into']),
        checkPlan: fc.boolean(),
        observe: fc.boolean(),
        keep: fc.boolean(),
        reuse: fc.boolean(),
        seed: fc.nat(),
      }),
    },
    {
      weight: 2,
      arbitrary: fc.record({
        op: fc.constant('shape'),
        batch: fc.constantFrom(1, 2, 3, 4, 0, 5, 1.5, -1),
        block: fc.boolean(),
        freeAfter: fc.boolean(),
        seed: fc.nat(),
      }),
    },
    { weight: 1, arbitrary: fc.record({ op: fc.constant('release'), what: fc.constantFrom('executor', 'weights', 'shapes') }) },
  )

/** One step of a sequence. */
type Command = ReturnType<typeof command> extends Arbitrary<infer C> ? C : never

export async function run({ fc, check, counts, trace }: Harness): Promise<void> {
  const world = await openWorld()
  const { gpu, gpu2 } = world
  let index = 0
  const timed = <T>(p: Promise<T>, what: string) => within(counts, p, HANG_MS, what)
  const refusedTyped = (err: unknown, what: string): WgallocErrorCode => {
    const kind = note(counts, err)
    // 'typed' is a WgallocError with a known code.
    if (kind !== 'typed' || !(err instanceof WgallocError))
      throw new Error(`${what} threw ${err == null ? undefined : err.constructor?.name}: ${messageOf(err)}`)
    if (err.code === 'INTERNAL') problem(counts, `INTERNAL from ${what}: ${err.message.split('\n')[0]}`)
    return err.code
  }

  const property = fc.asyncProperty(fc.array(command(fc), { minLength: 1, maxLength: 14 }), fc.nat(), async (cmds, wSeed) => {
    counts.runs++
    trace.reset(`serving run ${++index}`)
    const before = await settled(gpu)
    const before2 = await settled(gpu2)
    await sequence(cmds, wSeed)
    restore(gpu, world.gpuDefaults)
    await expectNoLeak(gpu, before, counts, JSON.stringify(cmds))
    await expectNoLeak(gpu2, before2, counts, JSON.stringify(cmds))
    if (gpu.lost) throw new Error(`the device was lost by ${JSON.stringify(cmds)}`)
  })

  /** Runs one command sequence; everything it made is freed or released before it returns. */
  async function sequence(cmds: Command[], wSeed: number) {
    const w = Uint32Array.from({ length: N }, (_, i) => (wSeed * 7 + i * 3) >>> 0)
    const slots: Slot[] = []
    const weights = gpu.createWeights({ w })
    let weightsReleased = false
    let exe = await gpu.compile(STATE_GRAPH, wSeed % 2 ? { weights } : { params: { w } })
    let exeReleased = false
    let shapes = gpu.compileShapes(SHAPE_GRAPH, { buckets: { batch: BUCKETS }, capacity: 2 })
    const pick = (at: number, pred: (s: Slot) => unknown = () => true) => {
      const c = slots.filter(pred)
      return c.length ? c[at % c.length] : null
    }
    const fill = (seed: number, n = N) => Uint32Array.from({ length: n }, (_, i) => (seed * 2654435761 + i * 40503) >>> 0)
    const malloc = (size: number, other = false) => {
      const s = new Slot((other ? gpu2 : gpu).heap.malloc(size), other ? 'gpu2' : 'gpu')
      slots.push(s)
      return s
    }
    /** A live block of the executor's device, big enough, with known contents (made if none). */
    const good = (at: number, seed: number) => {
      const s = pick(at, (s) => s.live && s.gpu === 'gpu' && s.data && s.block.requestedSize >= BYTES)
      if (s) return s
      const made = malloc(BYTES)
      made.data = fill(seed)
      made.block.write(made.data)
      return made
    }
    const free = (s: Slot) => {
      s.block.free()
      s.live = false
      s.data = null
    }
    /** Every live block with known contents still holds them. */
    const verify = async (what: string) => {
      for (const s of slots) {
        if (!s.live || !s.data) continue
        counts.reads++
        const got = await s.block.read(0, s.data.length * 4, { as: Uint32Array })
        if (!same(got, s.data)) {
          counts.corruptedReads++
          throw new Error(`${what}: block ${s.block.id} changed (${got.slice(0, 4)} vs ${s.data.slice(0, 4)})`)
        }
      }
    }
    try {
      for (const c of cmds) {
        counts.operations++
        trace.line(JSON.stringify(c))
        switch (c.op) {
          case 'malloc':
            malloc(c.size, c.other)
            break
          case 'write': {
            const s = pick(c.at, (s) => s.live)
            if (!s) break
            const data = fill(c.seed, Math.floor(s.block.requestedSize / 4))
            s.block.write(data)
            s.data = data
            break
          }
          case 'free': {
            const s = pick(c.at)
            if (!s) break
            if (s.live) free(s)
            else {
              counts.badInputs++
              fault(counts, 'double free')
              try {
                s.block.free()
                throw new Error('a second free() succeeded')
              } catch (err) {
                if (refusedTyped(err, 'second free') !== 'DOUBLE_FREE') throw new Error(`second free: ${codeOf(err)}`)
              }
            }
            break
          }
          case 'run':
            await runState(c)
            break
          case 'shape':
            await runShape(c)
            break
          case 'release':
            if (c.what === 'executor' && !exeReleased) {
              exe.release()
              exeReleased = true
              const again = await timed(exe.run({ x: fill(1) }, {}), 'run after release')
              if (!('error' in again) || codeOf(again.error) !== 'USE_AFTER_FREE')
                throw new Error(`run after release: ${'error' in again ? codeOf(again.error) : 'succeeded'}`)
              note(counts, again.error)
              fault(counts, 'use after release')
              exe = await gpu.compile(STATE_GRAPH, { params: { w } })
              exeReleased = false
            } else if (c.what === 'weights' && !weightsReleased) {
              // Executors compiled with the weights keep them until their own release().
              weights.release()
              weightsReleased = true
            } else if (c.what === 'shapes') {
              shapes.clear()
              shapes = gpu.compileShapes(SHAPE_GRAPH, { buckets: { batch: BUCKETS }, capacity: 2 })
            }
            break
        }
        await verify(`after ${JSON.stringify(c)}`)
      }
    } finally {
      for (const s of slots) if (s.live) free(s)
      if (!exeReleased) exe.release()
      if (!weightsReleased) weights.release()
      shapes.clear()
    }

    /** The state graph's run: what the model expects, what it got. */
    async function runState(c: Extract<Command, { op: 'run' }>) {
      const [ax, as, ao] = c.at
      const xHost = fill(c.seed)
      // The codes a refusal may carry, when the model expects one (any of them when several
      // arguments are wrong: which one is reported first is the executor's choice).
      // Set by why(), in a closure: typed so that the checks below do not narrow it to null.
      let refuse = null as string[] | null
      const why = (codes: string[]) => {
        refuse = [...new Set([...(refuse ?? []), ...codes])]
      }
      const inputs: Record<string, unknown> = {}
      let xSlot: Slot | null = null
      let sSlot: Slot | null = null
      // The external state block.
      if (c.s === 'block' || c.s === 'good') {
        sSlot = c.s === 'good' ? good(as, c.seed + 2) : (pick(as) ?? malloc(BYTES))
        inputs.s = sSlot.block
        if (!sSlot.live) why(['USE_AFTER_FREE', 'INVALID_ARGUMENT'])
        else if (sSlot.gpu !== 'gpu' || sSlot.block.requestedSize < BYTES) why(['INVALID_ARGUMENT'])
      } else if (c.s === 'host') {
        inputs.s = fill(c.seed + 1)
        why(['INVALID_ARGUMENT'])
      } else if (c.s === 'null') {
        inputs.s = null
        why(['INVALID_ARGUMENT'])
      } else why(['INVALID_ARGUMENT'])
      // The input.
      if (c.x === 'host') inputs.x = xHost
      else if (c.x === 'short') {
        inputs.x = xHost.subarray(0, 7)
        why(['INVALID_ARGUMENT'])
      } else if (c.x === 'block' || c.x === 'good' || c.x === 'sameAsS') {
        xSlot = c.x === 'sameAsS' && sSlot ? sSlot : c.x === 'good' ? good(ax, c.seed + 3) : (pick(ax) ?? malloc(BYTES))
        inputs.x = xSlot.block
        if (!xSlot.live) why(['USE_AFTER_FREE', 'INVALID_ARGUMENT'])
        else if (xSlot.gpu !== 'gpu' || xSlot.block.requestedSize < BYTES) why(['INVALID_ARGUMENT'])
      } else why(['INVALID_ARGUMENT'])
      // Where y goes.
      const options: RunOptions = { checkPlan: c.checkPlan, observe: c.observe }
      let intoSlot: Slot | null = null
      if (c.out === 'device') options.outputs = 'device'
      else if (c.out.startsWith('into')) {
        if (c.out === 'intoS' && sSlot) intoSlot = sSlot
        else if (c.out === 'intoX' && xSlot) intoSlot = xSlot
        else if (c.out === 'intoGood') intoSlot = good(ao, c.seed + 4)
        else intoSlot = pick(ao) ?? malloc(BYTES)
        options.outputsInto = { y: intoSlot.block }
        if (!intoSlot.live) why(['USE_AFTER_FREE', 'INVALID_ARGUMENT'])
        else if (intoSlot.gpu !== 'gpu' || intoSlot.block.requestedSize < BYTES) why(['INVALID_ARGUMENT'])
      }
      if (refuse) counts.badInputs++
      // Values, where the model knows every operand.
      const x = c.x === 'host' ? xHost : xSlot?.live && xSlot.data ? xSlot.data.subarray(0, N) : null
      const s0 = sSlot?.live && sSlot.data ? sSlot.data.subarray(0, N) : null
      const h = x && s0 ? add(x, s0) : null
      const want = h ? { y: add(h, h), s: add(h, w) } : null

      // Call, then free (and maybe reuse) before awaiting: the run holds what it was given.
      const p = exe.run(inputs as never, options)
      const freedNow: Slot[] = []
      for (const role of c.freeAfter) {
        const s = role === 'x' ? xSlot : role === 's' ? sSlot : intoSlot
        if (s?.live && !freedNow.includes(s)) {
          free(s)
          freedNow.push(s)
          fault(counts, 'free before await')
        }
      }
      if (freedNow.length && c.reuse) {
        const r = malloc(BYTES)
        r.data = fill(c.seed + 99)
        r.block.write(r.data)
      }
      const got = await timed(p, `run ${JSON.stringify(c)}`)
      if (refuse) {
        if (!('error' in got)) throw new Error(`run ${JSON.stringify(c)} should be refused (${refuse.join(' or ')}) but succeeded`)
        const code = refusedTyped(got.error, `run ${JSON.stringify(c)}`)
        if (!refuse.includes(code)) throw new Error(`run ${JSON.stringify(c)}: ${code} (${messageOf(got.error)}), expected ${refuse.join(' or ')}`)
        return
      }
      if ('error' in got) throw new Error(`run ${JSON.stringify(c)} failed: ${codeOf(got.error) ?? ''} ${messageOf(got.error)}`)
      const result = got.value
      // The state block was updated in place; y landed where it was sent (after the ops, so a
      // y written into the state block or the input block is what that block holds).
      if (sSlot?.live) sSlot.data = want ? Uint32Array.from(want.s) : null
      let y: OutputArray | null = null
      if (c.out === 'host') y = result.outputs.y
      else if (c.out === 'device') {
        const blk = result.blocks?.y
        if (!blk) throw new Error(`outputs: 'device' returned no block for y`)
        y = await blk.read(0, BYTES, { as: Uint32Array })
        if (c.keep) {
          // Kept: later runs may take it as their input or state (a chain without the host).
          const kept = new Slot(blk, 'gpu')
          kept.data = want ? Uint32Array.from(want.y) : null
          slots.push(kept)
        } else blk.free()
      } else if (intoSlot?.live) {
        intoSlot.data = want ? Uint32Array.from(want.y) : null
        if (xSlot === intoSlot && !want) intoSlot.data = null
      }
      if (want && y) {
        counts.reads++
        if (!same(y, want.y)) {
          counts.corruptedReads++
          throw new Error(`run ${JSON.stringify(c)}: y = ${y.slice(0, 4)}..., want ${want.y.slice(0, 4)}...`)
        }
      }
    }

    /** The shape executor's run at `batch` rows. */
    async function runShape(c: Extract<Command, { op: 'shape' }>) {
      const valid = Number.isInteger(c.batch) && c.batch >= 1 && c.batch <= BUCKETS[BUCKETS.length - 1]
      const x = fill(c.seed, Math.max(0, Math.floor(c.batch)) * ROW || ROW)
      let xs: Slot | null = null
      let input: Uint32Array | DeviceBlock = x
      if (c.block && valid) {
        xs = malloc(x.byteLength)
        xs.block.write(x)
        xs.data = x
        input = xs.block
      }
      if (!valid) counts.badInputs++
      const p = shapes.run({ batch: c.batch }, { x: input })
      if (xs && c.freeAfter) {
        free(xs)
        fault(counts, 'free before await')
      }
      const got = await timed(p, `shape run ${JSON.stringify(c)}`)
      if (!valid) {
        if (!('error' in got)) throw new Error(`shape run at batch ${c.batch} should be refused`)
        if (refusedTyped(got.error, 'shape run') !== 'INVALID_ARGUMENT') throw new Error(`shape run at batch ${c.batch}: ${codeOf(got.error)}`)
        return
      }
      if ('error' in got) throw new Error(`shape run ${JSON.stringify(c)} failed: ${codeOf(got.error) ?? ''} ${messageOf(got.error)}`)
      counts.reads++
      const y = got.value.outputs.y
      const want = x.map((v) => (v + 1) >>> 0)
      if (!same(y, want)) {
        counts.corruptedReads++
        throw new Error(`shape run at batch ${c.batch}: y = ${y.slice(0, 4)} (${y.length}), want ${want.slice(0, 4)} (${want.length})`)
      }
    }
  }

  await check('executors with device blocks, external state, shared weights and shapes', property, 40)
}
