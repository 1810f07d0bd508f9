// planMemory fuzzing: random records (checked against an independent JS checker:
// alignment, disjointness of live records, slab and lower bound, exact integers),
// the same records mutated into malformed ones (every refusal typed; anything accepted
// must still be a correct plan of what was given), random and malformed graphs and CSV,
// hostile options, aborts mid-search. Pure CPU: no device.
import { type MemoryPlan, planMemory, STRATEGIES, WgallocError } from 'wgalloc'
import { type Counts, describe, fault, type Harness, note, type Outcome, problem, settle } from './outcome.js'
import { type BuildContext, build, Hostile, type Recipe, recipe, show } from './values.js'

const HANG_MS = 30_000
const ALIGNMENTS = [1, 2, 4, 8, 64, 256, 4096]
const SIZES = [1, 2, 3, 4, 31, 32, 100, 1000, 4096, 65536, 1 << 20, 2 ** 40, 2 ** 52, 2 ** 53 - 1, 2 ** 53, 2 ** 60, 2 ** 63]

type FastCheck = Harness['fc']
/** A usage record as the checks read it: integers as numbers, or BigInts past 2^53 - 1 (`asInts`). */
export type Rec = {
  id: string
  size: number | bigint
  first: number | bigint
  last: number | bigint
  alignment?: number | null
}
/** A value JSON.parse returns. */
type Json = null | boolean | number | string | Json[] | JsonObject
type JsonObject = { [key: string]: Json }
/** A record as a mutation sees it: any fields, of any value. */
type Loose = Record<string, unknown>

const record = (fc: FastCheck) =>
  fc.record({
    size: fc.oneof({ weight: 8, arbitrary: fc.integer({ min: 1, max: 5000 }) }, { weight: 1, arbitrary: fc.constantFrom(...SIZES) }),
    first: fc.nat(30),
    span: fc.nat(12),
    alignment: fc.option(fc.constantFrom(...ALIGNMENTS), { freq: 5 }),
  })
const records = (fc: FastCheck) =>
  fc.array(record(fc), { maxLength: 40 }).map((rs) =>
    rs.map((r, i) => {
      const out: Rec = { id: `r${i}`, size: r.size, first: r.first, last: r.first + r.span }
      if (r.alignment !== null) out.alignment = r.alignment
      return out
    }),
  )
const options = (fc: FastCheck) =>
  fc.record(
    {
      strategy: fc.constantFrom(...STRATEGIES),
      alignment: fc.constantFrom(...ALIGNMENTS),
      timeLimitMs: fc.constantFrom(0, 1, 5, 20),
    },
    { requiredKeys: ['strategy'] },
  )

/**
 * An independent check of `plan` for `rs` (as JSON sees them): exact integers,
 * alignment, disjointness of records live at once, slab size, lower bound. Returns
 * what is wrong, or null.
 */
export function checkPlan(plan: MemoryPlan, rs: readonly Rec[], alignment = 1): string | null {
  const offsets = plan.offsets
  if (offsets.length !== rs.length) return `${offsets.length} offsets for ${rs.length} records`
  const big = (v: number | bigint) => BigInt(v)
  let end = 0n
  const ends: bigint[] = []
  for (const [k, r] of rs.entries()) {
    const o = offsets[k]
    if (!Number.isSafeInteger(o) || o < 0) return `offset ${o} of ${r.id} is not an exact non-negative integer`
    const align = BigInt(Math.max(alignment, r.alignment ?? 1))
    if (big(o) % align !== 0n) return `offset ${o} of ${r.id} is not a multiple of ${align}`
    if (plan.offsetOf(r.id) !== o) return `offsetOf(${r.id}) = ${plan.offsetOf(r.id)}, offsets[${k}] = ${o}`
    ends.push(big(o) + big(r.size))
    if (ends[k] > end) end = ends[k]
  }
  for (let a = 0; a < rs.length; a++) {
    for (let b = a + 1; b < rs.length; b++) {
      const live = rs[a].first <= rs[b].last && rs[b].first <= rs[a].last
      if (live && big(offsets[a]) < ends[b] && big(offsets[b]) < ends[a]) return `${rs[a].id} and ${rs[b].id} are live together and overlap`
    }
  }
  if (!Number.isSafeInteger(plan.slabSize) || big(plan.slabSize) < end) return `slabSize ${plan.slabSize} < end of the last record ${end}`
  // Lower bound: most bytes live at one step (sizes as given; alignment only adds).
  let lb = 0n
  for (let t = 0; t <= 50; t++) {
    let sum = 0n
    for (const r of rs) if (r.first <= t && t <= r.last) sum += big(r.size)
    if (sum > lb) lb = sum
  }
  if (big(plan.lowerBound) < lb || plan.lowerBound > plan.slabSize) return `lowerBound ${plan.lowerBound} is not in [${lb}, ${plan.slabSize}]`
  if (plan.optimal && plan.slabSize > plan.lowerBound && plan.strategy !== 'exact' && plan.strategy !== 'best')
    return `${plan.strategy} claims optimal above the lower bound`
  const json = plan.toJSON()
  if (JSON.stringify(json.offsets ?? offsets) !== JSON.stringify(offsets) && Array.isArray(json.offsets)) return 'toJSON offsets differ'
  return null
}

/** A non-negative integer as the planner reads it: a JSON integer, or a decimal string below 2^64 (exact). */
const exactInt = (v: unknown): boolean =>
  (typeof v === 'number' && Number.isInteger(v) && v >= 0) || (typeof v === 'string' && /^\d+$/.test(v) && BigInt(v) < 2n ** 64n)
/** Decimal-string integers as numbers (BigInt past 2^53 - 1), so the checks compare them as integers. */
const asInts = (rs: readonly JsonObject[]): Rec[] =>
  rs.map(
    (r) =>
      // `invalid()` accepted these records: id a string, size, first and last exact integers.
      Object.fromEntries(
        Object.entries(r).map(([k, v]) => [
          k,
          typeof v === 'string' && k !== 'id' && /^\d+$/.test(v) ? (BigInt(v) <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : BigInt(v)) : v,
        ]),
      ) as Rec,
  )

/** Why `rs` (as JSON sees them) is not a valid record list, or null. */
function invalid(rs: Json): string | null {
  if (!Array.isArray(rs)) return 'not an array'
  const ids = new Set<string>()
  for (const r of rs) {
    if (r === null || typeof r !== 'object' || Array.isArray(r)) return 'a record is not an object'
    if (typeof r.id !== 'string') return 'id is not a string'
    if (ids.has(r.id)) return 'duplicate id'
    ids.add(r.id)
    for (const k of ['size', 'first', 'last']) if (!exactInt(r[k])) return `${k} is not a non-negative integer`
    if (BigInt(r.first as number | string) > BigInt(r.last as number | string)) return 'first > last' // exact integers (checked just above)
    if (r.alignment != null && !exactInt(r.alignment)) return 'alignment is not a non-negative integer'
  }
  return null
}

const MUTATIONS = ['setField', 'deleteField', 'duplicateId', 'swapLifetime', 'notObject', 'wrapRecords', 'asText', 'truncateText', 'extraField'] as const
const mutation = (fc: FastCheck) =>
  fc.record({
    kind: fc.constantFrom(...MUTATIONS),
    at: fc.nat(),
    field: fc.constantFrom('id', 'size', 'first', 'last', 'alignment'),
    value: recipe,
    cut: fc.nat(),
  })
interface Mutation {
  kind: (typeof MUTATIONS)[number]
  at: number
  field: 'id' | 'size' | 'first' | 'last' | 'alignment'
  value: Recipe
  cut: number
}

/** `rs` mutated by `m` (after a `notObject`, an element may be any value: spreading it copies what it has). */
function mutate(rs: readonly Loose[], m: Mutation, ctx: BuildContext): unknown {
  const out = rs.map((r): Loose => ({ ...r }))
  const r = out.length ? out[m.at % out.length] : null
  switch (m.kind) {
    case 'setField':
      if (r) r[m.field] = build(m.value, ctx)
      return out
    case 'deleteField':
      if (r) delete r[m.field]
      return out
    case 'duplicateId':
      if (out.length > 1) out[(m.at + 1) % out.length].id = r!.id
      return out
    case 'swapLifetime':
      if (r && r.first !== r.last) [r.first, r.last] = [r.last, r.first]
      return out
    case 'notObject':
      if (r) (out as unknown[])[m.at % out.length] = build(m.value, ctx) // a record that is not an object
      return out
    case 'wrapRecords':
      return { records: out }
    case 'asText':
      try {
        return JSON.stringify(out)
      } catch {
        return out
      } // a BigInt field cannot be text
    case 'truncateText':
      try {
        const t = JSON.stringify(out)
        return t.slice(0, m.cut % (t.length + 1))
      } catch {
        return out
      }
    default:
      if (r) r.extra = build(m.value, ctx)
      return out
  }
}

/** planMemory with any input and options (hostile ones included); a hang counts and throws. */
async function plan(counts: Counts, input: unknown, opts: unknown): Promise<Outcome<MemoryPlan>> {
  const s = await settle(planMemory(input as never, opts as never), HANG_MS)
  if (s.hang) {
    counts.hangs++
    throw new Error(`planMemory(${show(input)}, ${show(opts)}) did not settle within ${HANG_MS} ms`)
  }
  return s
}

function judge(counts: Counts, s: Outcome<MemoryPlan>, what: string): MemoryPlan | null {
  if (!('error' in s)) return s.value
  const kind = note(counts, s.error)
  if (kind !== 'typed' && kind !== 'hostile') throw new Error(`${what} threw ${describe(s.error)}`)
  if (WgallocError.is(s.error, 'INTERNAL')) problem(counts, `INTERNAL from ${what}: ${s.error.message}`)
  return null
}

const ctx: BuildContext = { ref: () => undefined }

export async function run({ fc, check, counts, trace }: Harness): Promise<void> {
  // Valid records: the plan must pass the independent checker; `best` never loses to the portfolio.
  await check(
    'valid records',
    fc.asyncProperty(records(fc), options(fc), fc.boolean(), async (rs, opts, compare) => {
      counts.runs++
      counts.operations++
      trace.line(`plan ${JSON.stringify(opts)} ${JSON.stringify(rs)}`)
      const s = await plan(counts, rs, opts)
      // A slab past 2^53 - 1 cannot come back exactly: refusing it (typed) is right.
      const total = rs.reduce((a, r) => a + BigInt(r.size) + BigInt(Math.max(opts.alignment ?? 1, r.alignment ?? 1)), 0n)
      if ('error' in s) {
        const kind = note(counts, s.error)
        if (kind === 'typed' && WgallocError.is(s.error, 'SIZE_OVERFLOW') && total > BigInt(Number.MAX_SAFE_INTEGER)) return
        throw new Error(`valid records refused: ${describe(s.error)}`)
      }
      const wrong = checkPlan(s.value, rs, opts.alignment ?? 1)
      counts.reads++ // a result checked against the independent checker
      if (wrong) {
        counts.corruptedReads++
        throw new Error(`${opts.strategy}: ${wrong}`)
      }
      if (compare && (opts.strategy === 'best' || opts.strategy === 'portfolio')) {
        const other = await plan(counts, rs, { ...opts, strategy: opts.strategy === 'best' ? 'portfolio' : 'best' })
        if (!('error' in other)) {
          const [best, portfolio] = opts.strategy === 'best' ? [s.value, other.value] : [other.value, s.value]
          if (best.slabSize > portfolio.slabSize) throw new Error(`best ${best.slabSize} > portfolio ${portfolio.slabSize}`)
        }
      }
    }),
    200,
  )

  // Malformed records, hostile options: typed refusals, or a correct plan of what was given.
  await check(
    'malformed records',
    fc.asyncProperty(
      records(fc),
      fc.array(mutation(fc), { minLength: 1, maxLength: 3 }),
      fc.option(
        fc.array(fc.tuple(fc.constantFrom('strategy', 'alignment', 'timeLimitMs', 'workspace', 'multistream', 'signal', 'onProgress'), recipe), {
          maxLength: 3,
        }),
        { freq: 3 },
      ),
      async (rs, ms, optRecipes) => {
        counts.runs++
        counts.operations++
        counts.badInputs++
        let input: unknown = rs
        for (const m of ms) {
          try {
            input = Array.isArray(input) ? mutate(input, m, ctx) : input
          } catch (err) {
            if (err instanceof Hostile) break // copying a hostile record here, not in wgalloc
            throw err
          }
        }
        const opts: Record<string, unknown> = optRecipes ? Object.fromEntries(optRecipes.map(([k, r]) => [k, build(r, ctx)])) : { strategy: 'greedyBySize' }
        if (typeof opts.timeLimitMs !== 'number' || !(opts.timeLimitMs <= 50)) opts.timeLimitMs = 20
        trace.line(`malformed ${show(input)} ${show(opts)}`)
        const s = await plan(counts, input, opts)
        const value = judge(counts, s, `planMemory(${show(input)}, ${show(opts)})`)
        if (!value) return
        if (typeof input === 'string' && !/^\s*[[{]/.test(input)) return value.validate() // read as MiniMalloc CSV
        // JSON text is planned exactly, but JSON.parse here would round integers past 2^53: not checked.
        if (typeof input === 'string' && /\d{16,}/.test(input)) return
        const given: unknown = typeof input === 'string' ? JSON.parse(input) : input
        const list = Array.isArray(given) ? given : typeof given === 'object' && given !== null && 'records' in given ? given.records : undefined
        // What the planner saw: BigInt fields go as decimal strings.
        const json: Json = JSON.parse(JSON.stringify(list ?? null, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v)))
        const why = invalid(json)
        if (why) throw new Error(`accepted invalid records (${why}): ${show(json)}`)
        // invalid() found an array of record objects.
        const wrong = checkPlan(
          value,
          asInts(json as JsonObject[]),
          typeof opts.alignment === 'number' && Number.isInteger(opts.alignment) ? opts.alignment : 1,
        )
        counts.reads++
        if (wrong) throw new Error(`plan of accepted input is wrong: ${wrong}`)
      },
    ),
    300,
  )

  // Graphs and CSV: random structure, typed refusals; accepted graphs give valid plans.
  const graph = fc.record({
    tensors: fc.array(
      fc.record({
        size: fc.oneof(fc.nat(5000), fc.constantFrom(-1, 1.5, 2 ** 53, '8')),
        kind: fc.constantFrom(undefined, 'input', 'output', 'param', 'intermediate', 'bogus'),
        view: fc.option(fc.nat(), { freq: 4 }),
      }),
      { maxLength: 12 },
    ),
    ops: fc.array(
      fc.record({
        inputs: fc.array(fc.nat(), { maxLength: 3 }),
        outputs: fc.array(fc.nat(), { maxLength: 2 }),
        workspace: fc.option(fc.nat(4096), { freq: 4 }),
      }),
      { maxLength: 10 },
    ),
    steps: fc.option(fc.array(fc.array(fc.nat(), { maxLength: 3 }), { maxLength: 5 }), { freq: 4 }),
    workspace: fc.constantFrom(undefined, 'shared', 'unique', 'inSlab', 'bogus'),
    multistream: fc.boolean(),
    ghost: fc.boolean(), // reference a tensor that does not exist
  })
  await check(
    'random graphs',
    fc.asyncProperty(graph, async (g) => {
      counts.runs++
      counts.operations++
      counts.badInputs++
      const n = g.tensors.length
      const id = (k: number) => (g.ghost && k % 7 === 3 ? 'ghost' : `t${n ? k % n : 0}`)
      const input = {
        tensors: g.tensors.map((t, k) => ({
          id: `t${k}`,
          size: t.size,
          ...(t.kind ? { kind: t.kind } : {}),
          ...(t.view !== null && n ? { viewOf: id(t.view) } : {}),
        })),
        ops: g.ops.map((o, k) => ({
          name: `op${k}`,
          inputs: o.inputs.map(id),
          outputs: o.outputs.map(id),
          ...(o.workspace !== null ? { workspace: o.workspace } : {}),
        })),
        ...(g.steps ? { steps: g.steps.map((s) => s.map((k) => `op${k}`)) } : {}),
      }
      trace.line(`graph ${JSON.stringify(input)}`)
      const s = await plan(counts, input, { strategy: 'greedyBySize', workspace: g.workspace, multistream: g.multistream })
      const value = judge(counts, s, `planMemory(graph ${JSON.stringify(input).slice(0, 300)})`)
      if (value) {
        const r = (() => {
          try {
            value.validate()
            return null
          } catch (e) {
            return e
          }
        })()
        if (r) throw new Error(`accepted graph gives a plan that fails validate(): ${describe(r)}`)
        if (!Number.isSafeInteger(value.slabSize)) throw new Error(`graph plan slab ${value.slabSize}`)
      }
    }),
    200,
  )

  const csvLine = fc
    .array(fc.oneof(fc.nat(100).map(String), fc.constantFrom('', ' ', 'x', '-1', '1.5', '18446744073709551616', '9007199254740993', 'a,b')), {
      minLength: 1,
      maxLength: 6,
    })
    .map((f) => f.join(','))
  const csv = fc.tuple(
    fc.constantFrom('id,lower,upper,size', 'id,start,end,size', 'id,lower,upper,size,alignment', 'id,size', 'lower,upper,size', '', 'id,lower,upper,size,size'),
    fc.array(csvLine, { maxLength: 8 }),
  )
  await check(
    'random CSV',
    fc.asyncProperty(csv, async ([header, lines]) => {
      counts.runs++
      counts.operations++
      counts.badInputs++
      const text = [header, ...lines].join('\n')
      trace.line(`csv ${JSON.stringify(text)}`)
      const s = await plan(counts, text, { strategy: 'greedyBySize' })
      const value = judge(counts, s, `planMemory(csv ${JSON.stringify(text)})`)
      if (value) value.validate()
    }),
    200,
  )

  // Aborts mid-search and progress callbacks that throw: a plan (the best so far) or a typed error, never a hang or a crash.
  const many = fc
    .array(record(fc), { minLength: 20, maxLength: 160 })
    .map((rs) => rs.map((r, i): Rec => ({ id: `r${i}`, size: (r.size % 5000) + 1, first: r.first, last: r.first + r.span })))
  await check(
    'abort and progress',
    fc.asyncProperty(many, fc.nat(120), fc.constantFrom('none', 'ok', 'throws'), async (rs, abortAfter, progress) => {
      counts.runs++
      counts.operations++
      const controller = new AbortController()
      const onProgress =
        progress === 'none'
          ? undefined
          : () => {
              if (progress === 'throws') throw new Hostile('onProgress')
            }
      const timer = setTimeout(() => controller.abort(), abortAfter)
      const s = await plan(counts, rs, { strategy: 'exact', timeLimitMs: 200, signal: controller.signal, onProgress })
      clearTimeout(timer)
      if (controller.signal.aborted) fault(counts, 'plan aborted')
      const value = judge(counts, s, 'aborted planMemory')
      if (value) {
        const wrong = checkPlan(value, rs)
        if (wrong) throw new Error(`aborted plan is wrong: ${wrong}`)
      }
    }),
    40,
  )
}
