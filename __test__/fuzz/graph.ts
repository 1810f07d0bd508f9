// compile / run / runEager fuzzing: a small valid graph (a chain of adds with a param,
// a view and a uniform) broken by random mutations: bad sizes, kinds, dtypes, ids,
// dangling and cyclic references, dispatches beyond the limits, kernels that do not
// compile or do not match their bindings, params of the wrong size, hostile options and
// inputs. Every refusal must be typed. A graph that compiles must run to the same bytes
// as its eager run (and, unmutated, to the CPU's numbers); `checkPlan` must find the
// plan sound; after release, the heap is back where it was.
import type { Arbitrary } from 'fast-check'
import { type Executor, type Graph, WgallocError } from 'wgalloc'
import { ADD, chain as addChain } from '../graphs.js'
import { KNOWN } from './known.js'
import { type Harness, describe, fault, note, problem, within } from './outcome.js'
import { type Recipe, build, recipe, show } from './values.js'
import { type Usage, expectNoLeak, openWorld, quiet, restore, settled } from './world.js'

const HANG_MS = 30_000
const LEN = 64 // elements per tensor
/** x -> t0 -> ... -> y over LEN elements; op 1 reads its input through a view. */
export const chain = (n: number): Graph => addChain(n, { len: LEN, viewAt: 1 })

// Kernels that must fail their own compile (or validation), never the process. No
// kernel loops: lavapipe runs shaders on the CPU, and an endless one would hang it.
const BAD_KERNELS = [
  '',
  'fn main( {',
  ADD.replace('fn main', 'fn other'),
  ADD.replace('@binding(2)', '@binding(1)'),
  ADD.replace('var<uniform> p: P', 'var<storage, read_write> p: P'),
  ADD.replace('array<f32>;\n@group(0) @binding(1)', 'array<f32>;\n@group(1) @binding(1)'),
  ADD.replace('struct P { scale: f32, n: u32 }', 'struct P { scale: f32, n: u32, pad: array<vec4<f32>, 64> }'),
  ADD.replace('@workgroup_size(64)', '@workgroup_size(1024)'),
]

const TENSOR_FIELDS = ['id', 'size', 'kind', 'dtype', 'viewOf']
const OP_FIELDS = ['kernel', 'inputs', 'outputs', 'dispatch', 'params', 'workspace', 'name']
const VALUES = [
  -1,
  0,
  1,
  3,
  4,
  1.5,
  256,
  257,
  2 ** 31,
  2 ** 53,
  'x',
  'y',
  'w',
  't0',
  'ghost',
  '',
  'f64',
  'bogus',
  'input',
  'output',
  'param',
  null,
  true,
  [],
  ['x'],
  ['y'],
  ['ghost'],
  ['x', 'x'],
  [0],
  [65536],
  [1, 1, 1, 1],
  [-1],
  [1.5],
  [70000, 1],
  [1, 65536],
  [2, 2, 2],
]

/** One change to the valid graph (`mutate()` applies it). */
type Mutation =
  | { kind: 'tensor' | 'op'; at: number; field: string; value: unknown }
  | { kind: 'kernel'; source: number }
  | { kind: 'dropTensor' | 'dupTensor' | 'cycle' | 'dropOp' | 'dropKernel' | 'noOps' | 'shortParams' | 'random'; at: number; value: Recipe }

const mutation = (fc: Harness['fc']): Arbitrary<Mutation> =>
  fc.oneof(
    fc.record({ kind: fc.constant('tensor'), at: fc.nat(), field: fc.constantFrom(...TENSOR_FIELDS), value: fc.constantFrom(...VALUES) }),
    fc.record({ kind: fc.constant('op'), at: fc.nat(), field: fc.constantFrom(...OP_FIELDS), value: fc.constantFrom(...VALUES) }),
    fc.record({ kind: fc.constant('kernel'), source: fc.nat(BAD_KERNELS.length - 1) }),
    fc.record({
      kind: fc.constantFrom('dropTensor', 'dupTensor', 'cycle', 'dropOp', 'dropKernel', 'noOps', 'shortParams', 'random'),
      at: fc.nat(),
      value: recipe,
    }),
  )

function mutate(g: Graph, m: Mutation): Graph {
  const at = 'at' in m ? m.at : 0
  const t = g.tensors.length ? g.tensors[at % g.tensors.length] : null
  const o = g.ops.length ? g.ops[at % g.ops.length] : null
  switch (m.kind) {
    case 'tensor':
      if (t) Reflect.set(t, m.field, m.value)
      break
    case 'op':
      if (o) Reflect.set(o, m.field, m.value)
      break
    case 'kernel':
      if (g.kernels.add) g.kernels.add.source = BAD_KERNELS[m.source]
      break
    case 'dropTensor':
      if (t) g.tensors.splice(m.at % g.tensors.length, 1)
      break
    case 'dupTensor':
      if (t) g.tensors.push({ ...t })
      break
    case 'cycle':
      if (o) o.inputs = [...(Array.isArray(o.outputs) ? o.outputs : []), 'w']
      break
    case 'dropOp':
      if (o) g.ops.splice(m.at % g.ops.length, 1)
      break
    case 'dropKernel':
      delete g.kernels.add
      break
    case 'noOps':
      g.ops = []
      break
    case 'shortParams':
      if (o) o.params = new Uint8Array(m.at % 8)
      break
    default: {
      const v = build(m.value, { ref: () => undefined })
      if (o) Reflect.set(o, OP_FIELDS[m.at % OP_FIELDS.length], v)
    }
  }
  return g
}

/** Whether some op writes a view (the graph itself aliases that output with its base). */
function writesView(g: Graph): boolean {
  const views = new Set(g.tensors.filter((t) => t && t.viewOf != null).map((t) => t.id))
  return g.ops.some((o) => Array.isArray(o?.outputs) && o.outputs.some((id) => views.has(id)))
}

const CPU = (n: number, x: Float32Array, w: Float32Array) => x.map((v, i) => v + n * w[i])

/**
 * Whether every op still writes all of its outputs, so a planned run and an eager run
 * must agree byte for byte. Mutated dispatches, params (too short: the uniform is
 * zero-padded, see known.ts), sizes, or an op reading its own output leave bytes
 * unwritten, and unwritten bytes differ between runs.
 */
function comparable(ms: Mutation[]): boolean {
  return ms.every(
    (m) =>
      m.kind === 'kernel' ||
      m.kind === 'dropKernel' ||
      m.kind === 'noOps' ||
      m.kind === 'dupTensor' ||
      m.kind === 'dropTensor' ||
      (m.kind === 'tensor' && m.field !== 'size'),
  )
}

/** The `code` of a thrown value (undefined when it has none). */
const codeOf = (err: unknown): unknown => (typeof err === 'object' && err !== null && 'code' in err ? err.code : undefined)

export async function run({ fc, check, counts, trace }: Harness): Promise<void> {
  const world = await openWorld()
  const gpu = world.gpu
  let runIndex = 0
  const timed = <T>(p: Promise<T>, what: string) => within(counts, p, HANG_MS, what)
  const refused = (err: unknown, what: string) => {
    const kind = note(counts, err)
    if (kind !== 'typed' && kind !== 'hostile') throw new Error(`${what} threw ${describe(err)}`)
    if (err instanceof WgallocError && err.code === 'INTERNAL') problem(counts, `INTERNAL from ${what}: ${err.message.split('\n')[0]}`)
  }

  const property = fc.asyncProperty(
    fc.integer({ min: 1, max: 5 }),
    fc.oneof({ weight: 2, arbitrary: fc.constant<Mutation[]>([]) }, { weight: 3, arbitrary: fc.array(mutation(fc), { minLength: 1, maxLength: 2 }) }),
    fc.record({
      strategy: fc.constantFrom(undefined, undefined, undefined, 'best', 'greedyBySize', 'naive', 'exact', 'bogus'),
      maxSlabSize: fc.constantFrom(undefined, undefined, undefined, undefined, undefined, 256, 1024, 2 ** 20, 1, -1),
      plan: fc.constantFrom(undefined, undefined, undefined, 'static', 'observe', 'observe', 'bogus'),
    }),
    fc.constantFrom('good', 'good', 'good', 'missing', 'extra', 'short', 'notTyped', 'u8'),
    fc.boolean(),
    async (n, ms, opts, inputKind, checkPlan) => {
      counts.runs++
      trace.reset(`graph run ${++runIndex}`)
      const g = ms.reduce(mutate, chain(n))
      const w = new Float32Array(LEN).fill(0.25)
      const x = Float32Array.from({ length: LEN }, (_, i) => i)
      const inputs: Record<string, unknown> = {
        good: { x },
        missing: {},
        extra: { x, ghost: x },
        short: { x: x.subarray(0, 7) },
        notTyped: { x: [1, 2] },
        u8: { x: new Uint8Array(x.buffer) },
      }[inputKind]
      const options: Record<string, unknown> = { timeLimitMs: 20, params: { w } }
      for (const [k, v] of Object.entries(opts)) if (v !== undefined) options[k] = v
      const what = `graph(${n} ops, ${JSON.stringify(ms)}) ${show(opts)}`
      const before = await settled(gpu)
      // In a function of its own: once it returns, nothing of the run (results, errors
      // whose stack frames hold the executor) is reachable for the leak check below.
      await exercise(g, inputs, options, what, ms, n, inputKind, checkPlan, x, w, before)
      restore(gpu, world.gpuDefaults)
      await expectNoLeak(gpu, before, counts, what)
      if (gpu.lost) throw new Error(`the device was lost by ${what}`)
    },
  )

  async function exercise(
    g: Graph,
    inputs: Record<string, unknown>,
    options: Record<string, unknown>,
    what: string,
    ms: Mutation[],
    n: number,
    inputKind: string,
    checkPlan: boolean,
    x: Float32Array,
    w: Float32Array,
    before: Usage,
  ) {
    trace.line(`compile ${what}`)
    counts.operations++
    if (ms.length) counts.badInputs++
    const compiled = await timed(gpu.compile(g, options as never), `compile ${what}`)
    let exe: Executor | null = null
    if ('error' in compiled) refused(compiled.error, `compile ${what}`)
    else exe = compiled.value
    Reflect.deleteProperty(compiled, 'value')
    try {
      if (exe) {
        trace.line(`run ${inputKind} checkPlan=${checkPlan}`)
        counts.operations++
        if (inputKind !== 'good') counts.badInputs++
        const planned = await timed(exe.run(inputs as never, { checkPlan }), `run ${what}`)
        counts.operations++
        const eager = await timed(gpu.runEager(g, inputs as never, { params: { w } }), `runEager ${what}`)
        if ('error' in planned) refused(planned.error, `run ${what}`)
        if ('error' in eager) refused(eager.error, `runEager ${what}`)
        // refused() let only typed (WgallocError) and hostile errors through.
        if (checkPlan && 'error' in planned && WgallocError.is(planned.error, 'PLAN_INVALID')) {
          if (KNOWN.checkPlanBlamesDeclaredViews && writesView(g)) fault(counts, 'known defect: checkPlan blames a declared view')
          else throw new Error(`checkPlan found the plan unsound: ${planned.error.message}`)
        }
        if (!('error' in planned) && !('error' in eager) && comparable(ms)) {
          counts.reads++
          for (const id of Object.keys(planned.value.outputs)) {
            const a = Buffer.from(planned.value.outputs[id].buffer, planned.value.outputs[id].byteOffset, planned.value.outputs[id].byteLength)
            const b = Buffer.from(eager.value.outputs[id].buffer, eager.value.outputs[id].byteOffset, eager.value.outputs[id].byteLength)
            if (!a.equals(b)) {
              counts.corruptedReads++
              throw new Error(`output ${id}: planned and eager runs differ`)
            }
          }
          if (!ms.length && inputKind === 'good') {
            const want = CPU(n, x, w)
            if (planned.value.outputs.y.some((v: number, i: number) => v !== want[i])) {
              counts.corruptedReads++
              throw new Error(`y differs from the CPU reference: ${planned.value.outputs.y.slice(0, 4)} vs ${want.slice(0, 4)}`)
            }
          }
        }
      } else {
        // A graph that does not compile may still run eagerly, or fail typed.
        counts.operations++
        const eager = await timed(gpu.runEager(g, inputs as never, { params: { w } }), `runEager ${what}`)
        if ('error' in eager) refused(eager.error, `runEager ${what}`)
      }
    } finally {
      if (exe) exe.release()
    }
    if (exe) {
      const again = await timed(exe.run({ x }), 'run after release')
      if (!('error' in again) || codeOf(again.error) !== 'USE_AFTER_FREE')
        throw new Error(`run after release: ${'error' in again ? describe(again.error) : 'succeeded'}`)
      note(counts, again.error)
      fault(counts, 'use after free')
      if (!KNOWN.releaseKeepsUniforms) {
        const u = await quiet(gpu, () => ({}))
        if (u.blocks !== before.blocks) throw new Error(`release() left ${u.blocks - before.blocks} blocks active`)
      }
    }
  }
  await check('compile / run / runEager with malformed graphs', property, 60)
}
