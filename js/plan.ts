// planMemory(): the static planner, run off the main thread, with { signal, onProgress }, and
// MemoryPlan, whose toJSON() is a plain object.
import { inspect } from 'node:util'
import { reported, api } from './internal/api.js'
import type { PlanProgress, PlanSpace } from './binding.js'
import { WgallocError, stringifyInput, toWgallocError, optionKeys, optionsObject, invalidArgument, noConstructor, shown } from './errors.js'
import { type Binding, native } from './internal/native.js'
import { type AsyncOptions, checkSignal, detach } from './internal/signal.js'
import { graphField } from './graph.js'

/** Planner strategies, in `STRATEGIES` order. */
export type Strategy = 'naive' | 'linearScan' | 'greedyBySize' | 'greedyByBreadth' | 'greedyInputsFirst' | 'portfolio' | 'exact' | 'best'

/** Every planner strategy, fastest first (`best` runs the portfolio, then `exact`). */
export const STRATEGIES: readonly Strategy[] = Object.freeze([
  'naive',
  'linearScan',
  'greedyBySize',
  'greedyByBreadth',
  'greedyInputsFirst',
  'portfolio',
  'exact',
  'best',
] as const)

/** One usage record: `size` bytes live from op `first` to op `last` (inclusive). */
export interface UsageRecord {
  /** Unique id of the tensor or buffer. */
  id: string
  /** Bytes (a BigInt or a decimal string past 2^53 - 1). */
  size: number | bigint | string
  /** Index of the first op that uses it. */
  first: number | bigint | string
  /** Index of the last op that uses it (inclusive). */
  last: number | bigint | string
  /**
   * Offset alignment for this record in bytes: any positive integer. The plan's alignment applies too: the
   * offset is a multiple of both (the larger of the two, for powers of two).
   */
  alignment?: number
  /** Fixed offset: kept by every strategy; fixed records overlapping while alive are INVALID_ARGUMENT. */
  offset?: number | bigint | string
  /** Offset kept where its bytes are free over the record's lifetime; otherwise placed as usual. */
  preferredOffset?: number | bigint | string
  /** Id of a record whose range this one reuses in place (lifetimes may touch at one op, not overlap). */
  sharesWith?: string
  /** Alias of `sharesWith`. */
  inPlaceOf?: string
  /** Memory space (planned as its own slab; default `"default"`). */
  space?: string
}

/** Options of `planMemory()`. */
export interface PlanMemoryCallOptions extends AsyncOptions {
  /** Planner strategy (default `best`). */
  strategy?: Strategy
  /**
   * Offset alignment in bytes: any positive integer; default 1, or the device's storage alignment when planning for
   * wgpu. A record's own `alignment` applies too: its offset is a multiple of both (the larger, for powers of two).
   */
  alignment?: number
  /**
   * Capacity in bytes of the default memory space (records without `space`): a plan that cannot fit fails with
   * `INFEASIBLE` (proven, naming the op index whose live bytes exceed it) or `CAPACITY_NOT_MET`.
   */
  capacity?: number
  /** Capacities of named memory spaces (`space` of the records; `default` for records without one). */
  capacities?: Record<string, number>
  /** Refuse unknown record fields and CSV columns (default true); false ignores them. A graph's unknown fields are always refused. */
  strict?: boolean
  /** Graph inputs: let elementwise ops write their output over a same-sized input that dies there. */
  inPlace?: boolean
  /** Graphs: plan inputs into the slab as `gpu.compile()` does (default false: they stay in the caller's buffers). */
  inputsInSlab?: boolean
  /** Search budget of `exact`/`best` in ms (default 1000); the greedy plans they start from always complete (abort to stop them). */
  timeLimitMs?: number
  /** Graph inputs: `shared` (default), `unique` or `inSlab` workspaces. */
  workspace?: 'shared' | 'unique' | 'inSlab'
  /** Graph inputs: widen lifetimes to the graph's parallel `steps`. */
  multistream?: boolean
  /** Called when the search improves its best height or lower bound (polled every 50 ms). */
  onProgress?: (progress: PlanProgress) => void
}

const PLAN_MEMORY_OPTIONS = optionKeys<PlanMemoryCallOptions>({
  strategy: true,
  alignment: true,
  capacity: true,
  capacities: true,
  strict: true,
  inPlace: true,
  inputsInSlab: true,
  timeLimitMs: true,
  workspace: true,
  multistream: true,
  onProgress: true,
  signal: true,
})

/**
 * A record of `MemoryPlan.toJSON()`: a usage record and where it was placed. Integers past 2^53 - 1 are
 * decimal strings (exact); planning a written plan again keeps every constraint.
 */
export interface PlannedRecord extends Omit<UsageRecord, 'size' | 'first' | 'last' | 'offset' | 'preferredOffset'> {
  /** Bytes (a decimal string past 2^53 - 1). */
  size: number | string
  /** Index of the first op that uses it (a decimal string past 2^53 - 1). */
  first: number | string
  /** Index of the last op that uses it, inclusive (a decimal string past 2^53 - 1). */
  last: number | string
  /** Byte offset in the record's memory space. */
  offset: number
  /** Offset kept where its bytes were free. */
  preferredOffset?: number | string
  /** The record was fixed at `offset`. */
  fixed?: true
}

/** `MemoryPlan.toJSON()`: the plan as a plain object. */
export interface MemoryPlanJSON {
  /** The strategy asked for. */
  strategy: Strategy
  /** The algorithm that produced the layout. */
  method: string
  /** Bytes of the slab. */
  slabSize: number
  /** Proven lower bound in bytes. */
  lowerBound: number
  /** `slabSize / lowerBound`. */
  ratio: number
  /** `slabSize === lowerBound`. */
  optimal: boolean
  /** What proves it: the aligned lower bound itself, or the exact search (which raised the bound). */
  optimalBy: 'lowerBound' | 'search' | null
  /** Memory spaces, each its own slab (`slabSize` is their sum). */
  spaces: PlanSpace[]
  /** Planning time, ms. */
  timeMs: number
  /** Offset alignment in bytes. */
  alignment: number
  /** Offsets in record order. */
  offsets: number[]
  /** Records with their offsets. */
  records: PlannedRecord[]
  /** For graph input: the constant region, views and workspaces. */
  graph?: PlannedGraph
}

/** Where the bytes of a tensor that is not a slab record of its own live (views, params, inputs). */
export type PlannedAlias = {
  /** The tensor. */
  id: string
} & (
  | {
      /** In the slab, at the planned offset of record `base`. */
      region: 'slab'
      /** The slab record whose bytes it uses. */
      base: string
    }
  | {
      /** In the constant region (the params). */
      region: 'constant'
      /** Its offset in the constant region. */
      offset: number
    }
  | {
      /** In a graph input (the caller's own buffer), or an external tensor (the caller's block, bound at run time). */
      region: 'input' | 'external'
      /** The input or external tensor. */
      base: string
    }
)

/** What a plan of a graph adds to its records: the constant region, aliases and workspaces. */
export interface PlannedGraph {
  /** Bytes of the constant region. */
  constantSize: number
  /** The params in the constant region. */
  constants: {
    /** The param. */
    id: string
    /** Its offset in the constant region. */
    offset: number
  }[]
  /** Every view and non-slab tensor, with where its bytes live. */
  aliases: PlannedAlias[]
  /** Op workspaces. */
  workspace: {
    /** The largest op's workspace (shared mode). */
    sharedSize: number
    /** All ops' workspaces together (unique mode). */
    uniqueSize: number
  }
  /** Time steps the records' lifetimes count in (ops, or parallel steps). */
  steps: number
  /** Records written in place over another. */
  inPlace: {
    /** The record written in place. */
    id: string
    /** The record whose bytes it takes. */
    base: string
  }[]
}

const kCreate = Symbol('MemoryPlan.create')
let create: (handle: Binding.MemoryPlan) => MemoryPlan

/** A validated memory plan: an offset in one slab for every usage record. */
export class MemoryPlan {
  readonly #native: Binding.MemoryPlan

  private constructor(key: symbol, handle: Binding.MemoryPlan) {
    if (key !== kCreate) throw noConstructor('MemoryPlan', 'await planMemory()')
    this.#native = handle
  }
  static {
    create = (handle) => new MemoryPlan(kCreate, handle)
  }

  /** The strategy asked for (`best`, `exact`, ...). */
  @api get strategy(): Strategy {
    return this.#native.strategy as Strategy
  }
  /** Which algorithm produced the winning layout (e.g. the portfolio member). */
  @api get method(): string {
    return this.#native.method
  }
  /** Bytes of the slab: the highest offset + size over all records. */
  @api get slabSize(): number {
    return this.#native.slabSize
  }
  /**
   * Lower bound on the slab: the largest total size live at one time, strengthened for alignment and raised by
   * the exact search; the same figure `onProgress` ends on. No plan is smaller.
   */
  @api get lowerBound(): number {
    return this.#native.lowerBound
  }
  /** slabSize / lowerBound (1 is optimal). */
  @api get ratio(): number {
    return this.#native.ratio
  }
  /** Optimal: `slabSize === lowerBound` (see `optimalBy`). */
  @api get optimal(): boolean {
    return this.#native.optimal
  }
  /**
   * What proves it optimal: `lowerBound` (the slab meets the aligned lower bound) or `search` (the exact
   * search proved no smaller slab exists and raised the bound to it); null when not optimal.
   */
  @api get optimalBy(): 'lowerBound' | 'search' | null {
    return this.#native.optimalBy as 'lowerBound' | 'search' | null
  }
  /**
   * Memory spaces, in order of first appearance: each planned on its own, with its slab, lower bound and
   * capacity. Offsets are within the record's space; `slabSize` is their sum.
   */
  @api get spaces(): PlanSpace[] {
    return this.#native.spaces
  }
  /** Planning time, ms. */
  @api get timeMs(): number {
    return this.#native.timeMs
  }
  /** Every offset is a multiple of this many bytes. */
  @api get alignment(): number {
    return this.#native.alignment
  }
  /** Offsets in record order. */
  @api get offsets(): number[] {
    return this.#native.offsets
  }
  /** Offset of the record `id`, or null. */
  @api offsetOf(id: string): number | null {
    return this.#native.offsetOf(id)
  }
  /** Re-checks the plan with the independent checker; throws `PLAN_INVALID` if it fails. */
  @api validate(): void {
    this.#native.validate()
  }
  /** SVG picture of the layout (op index on x, offset on y). */
  @api toSVG(): string {
    return this.#native.toSVG()
  }
  /** The plan as JSON text (`toJSON()` returns it parsed). */
  @api toJsonString(): string {
    return this.#native.toJsonString()
  }
  /** The plan as a plain object (offsets, records, and for graphs the constant region and aliases). */
  @api toJSON(): MemoryPlanJSON {
    return JSON.parse(this.#native.toJsonString()) as MemoryPlanJSON
  }
  /** Readable `console.log` output. */
  @api [inspect.custom](): string {
    const p = this.#native
    return `MemoryPlan { strategy: '${p.strategy}', slabSize: ${p.slabSize}, lowerBound: ${p.lowerBound}, ratio: ${p.ratio.toFixed(4)}, optimal: ${p.optimal} }`
  }
}

export const wrapPlan = (handle: Binding.MemoryPlan): MemoryPlan => create(handle)

const PROGRESS_POLL_MS = 50
const ABORT_GRACE_MS = 60
/** Records serialised this many at a time, yielding to the event loop in between. */
const CHUNK = 5_000

/**
 * JSON text of `value` with exact integers: a BigInt is written as a decimal string (the
 * planner reads those exactly); a number past 2^53 - 1 was already rounded, so it is refused.
 */
function exactJson(value: unknown, field: (key: string, value: unknown) => unknown = (_, v) => v): string {
  return stringifyInput(value, 'planMemory input', (key, v) => {
    if (typeof v === 'bigint') return v.toString()
    // JSON would write NaN and Infinity as null, and the planner would say it got null.
    if (typeof v === 'number' && !Number.isFinite(v)) throw invalidArgument(['planMemory', key], 'a finite number', String(v))
    if (typeof v === 'number' && Number.isInteger(v) && !Number.isSafeInteger(v)) {
      throw new WgallocError('SIZE_OVERFLOW', `planMemory input: ${key} = ${v} is past 2^53 - 1, where JS numbers round; pass a BigInt or a decimal string`)
    }
    return field(key, v)
  })
}

/** `exactJson` of an array, a chunk at a time: a million records must not block the thread for a second. */
async function exactJsonChunked(array: unknown[], stopped: () => void): Promise<string> {
  const parts: string[] = []
  for (let i = 0; i < array.length; i += CHUNK) {
    if (i > 0) await new Promise((resolve) => setImmediate(resolve))
    stopped()
    parts.push(exactJson(array.slice(i, i + CHUNK)).slice(1, -1))
  }
  return `[${parts.filter((p) => p.length > 0).join(',')}]`
}

/** `text` without a leading byte-order mark (spreadsheets write one; it is not part of the first column's name). */
const withoutBom = (text: string) => text.replace(/^\uFEFF/, '')

/** Whether planner input text is JSON (an array or an object), not MiniMalloc CSV. */
export function isJsonText(text: string): boolean {
  return /^\s*[[{]/.test(withoutBom(text))
}

/** Decides the native input format of `input` and serialises it. */
async function encodeInput(input: unknown, stopped: () => void): Promise<[string, string]> {
  if (typeof input === 'string') {
    // JSON text goes to the planner as written, so integers past 2^53 stay exact.
    return [isJsonText(input) ? 'json' : 'csv', withoutBom(input)]
  }
  if (Array.isArray(input)) return ['records', await exactJsonChunked(input, stopped)]
  if (input && typeof input === 'object') {
    if (Array.isArray((input as { tensors?: unknown }).tensors)) return ['graph', exactJson(input, graphField)]
    // The whole object: a written plan (with slabSize) is read back with its constraints.
    const { records, ...rest } = input as { records?: unknown }
    if (Array.isArray(records)) {
      const head = exactJson(rest)
      const body = await exactJsonChunked(records, stopped)
      return ['records', head === '{}' ? `{"records":${body}}` : `${head.slice(0, -1)},"records":${body}}`]
    }
  }
  throw invalidArgument('input', 'an array of usage records, { records }, a graph ({ ops, tensors }), or MiniMalloc CSV text', shown(input), 'planMemory input')
}

async function plan(input: unknown, options?: PlanMemoryCallOptions | null): Promise<MemoryPlan> {
  const { signal, onProgress, ...rest } = optionsObject(options, 'planMemory', PLAN_MEMORY_OPTIONS)
  if (onProgress != null && typeof onProgress !== 'function') throw invalidArgument('options.onProgress', 'a function', shown(onProgress))
  checkSignal(signal)
  let job: Binding.PlanJob
  // Objects are sent as JSON, which is ours: a bad field in them is the caller's argument, not a parse error.
  const fromObjects = typeof input !== 'string'
  const typed = (err: unknown) => {
    const e = toWgallocError(err)
    if (!fromObjects || !WgallocError.is(e, 'PARSE_ERROR')) return e
    // A bad field carries its path, expectation and value (PlanError::Field), as an INVALID_ARGUMENT does.
    const d = e.details
    const invalid = new WgallocError('INVALID_ARGUMENT', e.message, { cause: e })
    invalid.details = { path: d?.path ?? 'input', expected: d?.expected ?? 'records or a graph the planner reads', got: d?.got ?? 'input it cannot read' }
    return invalid
  }
  try {
    const [format, text] = await encodeInput(input, () => checkSignal(signal))
    job = native.startPlan(format, text, rest)
  } catch (err) {
    throw typed(err)
  }
  // Abort settles within ABORT_GRACE_MS: the search stops at its next check and resolves
  // with its best plan; a phase that cannot stop that fast (parsing a huge input) rejects.
  // Before the first progress report there is no plan to wait for, so it rejects at once.
  let abandon = () => {}
  const abandoned = new Promise<never>((_resolve, reject) => {
    abandon = () => {
      job.cancel()
      const aborted = () => reject(new WgallocError('ABORTED', 'planMemory was aborted before any plan existed'))
      if (job.progress() == null) aborted()
      else setTimeout(aborted, ABORT_GRACE_MS).unref?.()
    }
  })
  abandoned.catch(() => {})
  const onAbort = () => abandon()
  try {
    signal?.addEventListener('abort', onAbort, { once: true })
  } catch (err) {
    job.cancel() // a signal that throws: stop the search rather than leave it running
    throw invalidArgument('options.signal', 'an AbortSignal whose addEventListener works', 'one whose addEventListener threw', undefined, { cause: err })
  }
  let last: PlanProgress | undefined
  let failed: { err: unknown } | undefined // once onProgress threw: the search stops and planMemory rejects with it
  const report = () => {
    const p = job.progress()
    if (p && !failed && (!last || p.best !== last.best || p.lowerBound !== last.lowerBound)) {
      last = p
      try {
        onProgress?.(p)
      } catch (err) {
        // Thrown from a timer, it would be an uncaught exception that ends the process.
        failed = { err }
        job.cancel()
      }
    }
  }
  const timer = onProgress ? setInterval(report, PROGRESS_POLL_MS) : null
  timer?.unref?.()
  try {
    const result = await Promise.race([job.wait(), abandoned])
    if (onProgress) report()
    if (failed) throw failed.err
    // The planner works in u64; JS numbers are exact only up to 2^53 - 1, so a larger slab
    // would come back with rounded offsets.
    if (!(result.slabSize <= Number.MAX_SAFE_INTEGER)) {
      throw new WgallocError('SIZE_OVERFLOW', `the plan's slab (${result.slabSize} bytes) exceeds 2^53 - 1, beyond what JS numbers hold exactly`)
    }
    return wrapPlan(result)
  } catch (err) {
    throw typed(err)
  } finally {
    if (timer) clearInterval(timer)
    detach(signal, onAbort)
  }
}

/**
 * Plans an offset in one slab for every record (or every tensor of a graph, or MiniMalloc
 * CSV text), off the main thread; every plan is checked by an independent validator.
 * Aborting during the search resolves with the best plan found so far, or rejects with
 * `ABORTED` when none existed yet (within 100 ms either way); a signal already aborted at the
 * call rejects with `ABORTED`. Bad input rejects with `INVALID_ARGUMENT` or `PARSE_ERROR`.
 *
 * @example
 * ```js
 * const plan = await planMemory([{ id: 'a', size: 32, first: 0, last: 1 }, { id: 'b', size: 28, first: 1, last: 4 }])
 * plan.slabSize      // 60
 * plan.offsetOf('b') // 32
 * ```
 */
export function planMemory(input: UsageRecord[] | { records: UsageRecord[] } | object | string, options?: PlanMemoryCallOptions | null): Promise<MemoryPlan> {
  return reported('planMemory', () => plan(input, options))
}
