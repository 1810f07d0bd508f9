// What a fuzzed call may end in, and the counters every suite keeps.
import type fc from 'fast-check'
import { ERROR_CODES, WgallocError } from 'wgalloc'
import { KNOWN } from './known.js'
import type { Trace } from './trace.js'
import { Hostile } from './values.js'

const CODES = new Set<string>(ERROR_CODES)
// TypeErrors and RangeErrors thrown by JS code tripping over a value (a facade bug),
// as opposed to ones that validate an argument on purpose.
const ACCIDENTAL =
  /Cannot (read|set) propert|Cannot destructure|is not a function|is not iterable|is not a constructor|Cannot convert|circular structure|serialize a BigInt|Invalid typed array length|Maximum call stack|Invalid array length|Cannot create property|Cannot mix BigInt|Cannot access|before initialization|undefined is not|detached/

/** How an error counts (see `classify`). */
export type ErrorKind = 'typed' | 'standard' | 'hostile' | 'known' | 'bad'

/**
 * 'typed': a WgallocError with a known code; 'standard': a deliberate TypeError or
 * RangeError; 'hostile': the error a hostile argument threw, passed through; 'bad':
 * anything else (an untyped error, an unknown code, a facade crash); 'known': an
 * untyped error listed in known.ts.
 */
export function classify(err: unknown): ErrorKind {
  if (err instanceof Hostile) return 'hostile'
  if (KNOWN.classConstructorUntyped && err instanceof Error && /^Class contains no `constructor`/.test(err.message)) return 'known'
  if (err instanceof WgallocError) return CODES.has(err.code) ? 'typed' : 'bad'
  if ((err instanceof TypeError || err instanceof RangeError) && !ACCIDENTAL.test(err.message)) return 'standard'
  return 'bad'
}

export function describe(err: unknown): string {
  if (err instanceof Error)
    return `${err.constructor.name}${'code' in err && err.code ? ` [${err.code}]` : ''}: ${String(err.message).split('\n')[0].slice(0, 300)}`
  return `non-Error thrown: ${typeof err} ${String(err).slice(0, 100)}`
}

/** Whether `v` is a promise or another thenable (what a call returned may be awaited). */
export function isThenable(v: unknown): v is PromiseLike<unknown> {
  return (typeof v === 'object' && v !== null) || typeof v === 'function' ? typeof Reflect.get(v, 'then') === 'function' : false
}

/** How a promise ended: its value or its rejection. */
export type Outcome<T> = { value: T; hang?: undefined } | { error: unknown; hang?: undefined }
/** How a promise ended, or that it was still pending (`settle`). */
export type Settled<T> = Outcome<T> | { hang: true }

/** Resolves with `{ value }` or `{ error }`, or `{ hang: true }` after `ms`. */
export function settle<T>(promise: Promise<T>, ms: number): Promise<Settled<T>> {
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<Settled<T>>((resolve) => {
    timer = setTimeout(() => resolve({ hang: true }), ms)
  })
  return Promise.race([
    promise.then(
      (value): Settled<T> => ({ value }),
      (error: unknown): Settled<T> => ({ error }),
    ),
    timeout,
  ]).finally(() => clearTimeout(timer))
}

/** `{ value }` or `{ error }` of `promise`; a promise still pending after `ms` counts a hang and throws, naming `what`. */
export async function within<T>(counts: Counts, promise: T | PromiseLike<T>, ms: number, what: string): Promise<Outcome<Awaited<T>>> {
  const s = await settle(Promise.resolve(promise), ms)
  if (s.hang) {
    counts.hangs++
    throw new Error(`${what} did not settle within ${ms} ms`)
  }
  return s
}

/** Counters a suite fills and the parent test reads. */
export interface Counts {
  runs: number
  operations: number
  badInputs: number
  errors: Record<ErrorKind, number>
  codes: Record<string, number>
  faults: Record<string, number>
  reads: number
  corruptedReads: number
  leakedBytes: number
  leakedBlocks: number
  hangs: number
  standard: Record<string, number>
  problems: string[]
}

/** Counters a suite fills and the parent test reads. */
export function newCounts(): Counts {
  return {
    runs: 0,
    operations: 0, // calls or commands executed
    badInputs: 0, // calls whose arguments were random or deliberately invalid
    errors: { typed: 0, standard: 0, hostile: 0, known: 0, bad: 0 }, // known: a defect listed in known.ts
    codes: {}, // typed errors by code
    faults: {}, // injected faults by kind (double free, use after free, foreign free, device loss, OOM, abort, ...)
    reads: 0, // read-backs checked against expected bytes
    corruptedReads: 0,
    leakedBytes: 0,
    leakedBlocks: 0,
    hangs: 0,
    standard: {}, // deliberate TypeError/RangeError messages (digits folded), to review
    problems: [], // first few distinct findings, for the report
  }
}

export function note(counts: Counts, err: unknown): ErrorKind {
  const kind = classify(err)
  counts.errors[kind]++
  if (kind === 'typed' && err instanceof WgallocError) counts.codes[err.code] = (counts.codes[err.code] ?? 0) + 1
  if (kind === 'standard' && err instanceof Error) {
    const text = `${err.constructor.name}: ${err.message
      .replace(/\d+/g, 'N')
      .replace(/^Illegal invocation.*/, 'Illegal invocation')
      .slice(0, 120)}`
    counts.standard[text] = (counts.standard[text] ?? 0) + 1
  }
  return kind
}

export function fault(counts: Counts, kind: string, n = 1): void {
  counts.faults[kind] = (counts.faults[kind] ?? 0) + n
}

export function problem(counts: Counts, text: string): void {
  if (counts.problems.length < 20 && !counts.problems.includes(text)) counts.problems.push(text)
}

/** What run.ts hands a suite's `run()`. */
export interface Harness {
  fc: typeof fc
  /** Checks one property: a failure is recorded, not thrown. */
  check: <Ts>(label: string, property: fc.IRawProperty<Ts>, runs: number) => Promise<void>
  counts: Counts
  trace: Trace
}

/** A fuzz suite module (fuzz/<name>.ts): run.ts calls its `run()`. */
export interface Suite {
  run(harness: Harness): Promise<void>
}
