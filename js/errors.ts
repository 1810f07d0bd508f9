// Typed errors. Native errors arrive as their message, then their code and figures as data
// (Note [Errors carry their data] in src/error.rs); this builds the WgallocError from them.

/** Every code `WgallocError.code` can take. Stable API: branch on `error.code`, not on messages. */
export const ERROR_CODES = Object.freeze([
  'INVALID_ARGUMENT',
  'ADAPTER_NOT_FOUND',
  'DEVICE_REQUEST_FAILED',
  'DEVICE_LOST',
  'OUT_OF_MEMORY',
  'QUOTA_EXCEEDED',
  'GPU_VALIDATION',
  'USE_AFTER_FREE',
  'DOUBLE_FREE',
  'EXECUTOR_BUSY',
  'ABORTED',
  'PLAN_INVALID',
  'PROFILER_STATE',
  'SHADER_ERROR',
  'IO_ERROR',
  'PARSE_ERROR',
  'SIZE_OVERFLOW',
  'INFEASIBLE',
  'CAPACITY_NOT_MET',
  'KV_CACHE_FULL',
  'BINARY_NOT_FOUND',
  'INTERNAL',
] as const)

/** Stable error codes: branch on `error.code`, never on the message. */
export type WgallocErrorCode = (typeof ERROR_CODES)[number]

/**
 * What ran out: `'heap'` (the heap's ladder gave up; its figures follow), `'driver'` (the driver
 * refused memory), `'max-buffer-size'` (one buffer past the device's limit), `'live-blocks'` (the
 * most blocks one heap holds live), `'high-watermark'` (a reservation made up front, as a warm
 * start's), `'store-capacity'` (a simulated store's capacity), `'owner-tags'` (the heap objects one
 * device heap serves over its life) or `'block-leases'` (the leases one block holds at once).
 */
export type OutOfMemorySource = 'heap' | 'driver' | 'max-buffer-size' | 'live-blocks' | 'high-watermark' | 'store-capacity' | 'owner-tags' | 'block-leases'

/**
 * The figures of an OUT_OF_MEMORY: `err.details`, and (for the heap's) what OUT_OF_MEMORY listeners
 * get. The heap's carry the request and the heap's figures; the others carry `operation` and,
 * where there is one, the `limit` and what was `inUse`.
 */
export interface OutOfMemoryDetails {
  /** What ran out. */
  source: OutOfMemorySource
  /** Bytes asked for (blocks, for `'live-blocks'`); absent where the call does not know them (a driver refusal in a submit). */
  requested?: number
  /** What was being done, e.g. `'creating a staging buffer'` (all but the heap's). */
  operation?: string
  /** The limit that refused the request, where there is one (bytes; blocks for `'live-blocks'`). */
  limit?: number
  /** What was in use when it was refused, where known. */
  inUse?: number
  /** The driver's or the store's own words. */
  cause?: string
  /** The request rounded up to the heap's alignment. */
  aligned?: number
  /** The pool the request went to. */
  pool?: string
  /** Bytes in live blocks. */
  allocated?: number
  /** Bytes cached in free ranges, ready for reuse. */
  cached?: number
  /** Bytes freed but waiting for their GPU work. */
  pendingFree?: number
  /** Bytes the heap holds from the driver. */
  reserved?: number
  /** The high watermark in bytes (null when disabled). */
  highWatermark?: number | null
  /** The memory budget in bytes. */
  budget?: number
  /** The largest cached free range. */
  largestFreeBlock?: number
  /** Where the heap's snapshot was written (`WGALLOC_OOM_SNAPSHOT=dir`), or null. */
  snapshotPath?: string | null
}

/** `err.details` of a KV_CACHE_FULL: what the call needed and what the cache had. */
export interface KvCacheFullDetails {
  /** Blocks the call needed. */
  needed?: number
  /** Unreferenced blocks with no cached content. */
  free?: number
  /** Cached blocks eviction could have freed. */
  evictable?: number
  /** Blocks in each pool. */
  total?: number
  /** The table's row count, when every row was taken. */
  maxSequences?: number
}

/** `err.details` of a QUOTA_EXCEEDED: the scope that refused, and the figures. */
export interface QuotaExceededDetails {
  /** Path of the scope whose limit the request would pass (this one or a parent). */
  scope: string
  /** Its limit in bytes. */
  limit: number
  /** Bytes charged to it when the request came. */
  allocated: number
  /** Bytes the request asked for. */
  requested: number
}

/**
 * `err.details` of an INVALID_ARGUMENT: what was wrong, what would have been accepted, and what came.
 * Every INVALID_ARGUMENT carries them, whichever layer raised it.
 */
export interface InvalidArgumentDetails {
  /** The argument or field, as the caller names it: `size`, `options.limit`, `tensors[3].shape`, `WGALLOC_HIGH_WATERMARK_RATIO`. */
  path: string
  /** The call that refused it, where the path alone does not say (`'recordHistory'`, `'createKvCache'`). */
  call?: string
  /** What would have been accepted, e.g. `a positive integer of bytes`. */
  expected: string
  /** The value received, shown briefly: `-1`, `'abc'`, `undefined`. */
  got: string
}

/** The `details` each code carries, where it has them. */
export interface ErrorDetails {
  /** The argument at fault, what it should have been, and what it was. */
  INVALID_ARGUMENT: InvalidArgumentDetails
  /** A field of JSON input (its path in the input) of the wrong type or value; absent for text that does not parse. */
  PARSE_ERROR: Partial<InvalidArgumentDetails>
  /** A scope's refusal. */
  QUOTA_EXCEEDED: QuotaExceededDetails
  /** A failed allocation's figures. */
  OUT_OF_MEMORY: OutOfMemoryDetails
  /** A KV cache's shortfall. */
  KV_CACHE_FULL: KvCacheFullDetails
}

/** A WgallocError narrowed to one code (what {@link WgallocError.is} proves). */
export interface CodedError<C extends WgallocErrorCode> {
  /** The code it was checked for. */
  readonly code: C
  /** The figures of that code, where it has them. */
  details?: C extends keyof ErrorDetails ? ErrorDetails[C] : undefined
}

/**
 * Every error wgalloc throws (argument type errors included). Aborts are WgallocErrors with
 * code `ABORTED` and name `AbortError`. `code` is a literal union, so comparing it with a
 * misspelled code fails to compile; {@link WgallocError.is} narrows an unknown value.
 *
 * @example
 * ```ts
 * try {
 *   gpu.heap.malloc(size)
 * } catch (err) {
 *   if (WgallocError.is(err, 'OUT_OF_MEMORY')) console.error(err.details?.largestFreeBlock)
 *   else throw err
 * }
 * ```
 */
export class WgallocError extends Error {
  /** Stable code: branch on it, not on the message. */
  readonly code: WgallocErrorCode
  /**
   * Structured figures, where the error has them (OUT_OF_MEMORY, KV_CACHE_FULL, QUOTA_EXCEEDED, INVALID_ARGUMENT).
   * Typed as the fields any code may carry; {@link WgallocError.is} narrows them to one code's.
   */
  details?: Partial<OutOfMemoryDetails> & KvCacheFullDetails & Partial<QuotaExceededDetails> & Partial<InvalidArgumentDetails>

  /** Creates an error with `code` (`options.cause` as for `Error`). */
  constructor(code: WgallocErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options)
    this.name = code === 'ABORTED' ? 'AbortError' : 'WgallocError'
    this.code = code
  }

  /** Whether `value` is a WgallocError, with `code` when given: narrows it for TypeScript. */
  static is<C extends WgallocErrorCode = WgallocErrorCode>(value: unknown, code?: C): value is WgallocError & CodedError<C> {
    return value instanceof WgallocError && (code === undefined || value.code === code)
  }
}

// napi-rs argument-conversion statuses: the caller passed a value of the wrong type.
const NAPI_TYPE_STATUSES = new Set([
  'InvalidArg',
  'ObjectExpected',
  'StringExpected',
  'NameExpected',
  'FunctionExpected',
  'NumberExpected',
  'BooleanExpected',
  'ArrayExpected',
  'BigintExpected',
  'DateExpected',
  'ArrayBufferExpected',
  'DetachableArraybufferExpected',
])

/** Between a native error's message and its data (src/error.rs `DATA_SEPARATOR`). */
const DATA_SEPARATOR = '\u001e'

/** The WgallocError a native error's data describes, or undefined when it carries none. */
function fromData(message: string): WgallocError | undefined {
  const at = message.lastIndexOf(DATA_SEPARATOR)
  if (at < 0) return undefined
  let data: { code?: unknown; details?: unknown }
  try {
    data = JSON.parse(message.slice(at + 1)) as typeof data
  } catch {
    return undefined
  }
  if (typeof data.code !== 'string' || !isCode(data.code)) return undefined
  const err = new WgallocError(data.code, message.slice(0, at))
  if (data.details !== null && typeof data.details === 'object') err.details = data.details as WgallocError['details']
  return err
}
// napi-rs describes a mistyped argument with JSON.stringify, which itself throws for a
// BigInt or a cycle; that TypeError would escape in place of the conversion error.
const UNSERIALISABLE = /^(Do not know how to serialize a BigInt|Converting circular structure to JSON)/

// TypeErrors napi-rs conversions throw for a value of the wrong shape (undefined where an
// object or map is required, an object without a primitive value).
const NAPI_CONVERSION =
  /^(Cannot convert undefined or null to object|Cannot convert object to primitive value|Cannot convert a Symbol value|Cannot convert a BigInt value|Cannot perform Construct on a detached ArrayBuffer)/

// napi-rs's words for a mistyped argument, e.g. "Failed to convert napi value String into rust type `f64`".
const NAPI_MISTYPED = /^Failed to convert (?:napi|JavaScript) value `?(\w+)[^`]*`? into rust type `([^`]+)`/
const JS_KIND: Record<string, string> = {
  f64: 'a number',
  f32: 'a number',
  i32: 'a number',
  u32: 'a number',
  i64: 'a number',
  u64: 'a number',
  bool: 'a boolean',
  String: 'a string',
}

// What each napi-rs type status expects.
const STATUS_EXPECTS: Record<string, string> = {
  ObjectExpected: 'an object',
  StringExpected: 'a string',
  NameExpected: 'a string or a Symbol',
  FunctionExpected: 'a function',
  NumberExpected: 'a number',
  BooleanExpected: 'a boolean',
  ArrayExpected: 'an array',
  BigintExpected: 'a BigInt',
  DateExpected: 'a Date',
  ArrayBufferExpected: 'an ArrayBuffer',
  DetachableArraybufferExpected: 'a detachable ArrayBuffer',
}

// napi-rs names the field of an options object it could not convert: "... on PlanMemoryOptions.alignment".
const NAPI_FIELD = / on \w+\.(\w+)$/

// napi-rs's kind names, as a value of that kind reads in an error.
const KIND_SHOWN: Record<string, string> = {
  Undefined: 'undefined',
  Null: 'null',
  Boolean: 'a boolean',
  Number: 'a number',
  String: 'a string',
  Object: 'an object',
  Function: 'a function',
  Symbol: 'a Symbol',
  BigInt: 'a BigInt',
  External: 'an external value',
}

/**
 * The INVALID_ARGUMENT for napi-rs refusing an argument's type (`status` one of NAPI_TYPE_STATUSES).
 * Its message names the value's kind (sometimes the value) and, for an options field, the field.
 */
function conversionError(status: string, message: string, cause: Error): WgallocError {
  const m = NAPI_MISTYPED.exec(message)
  const kind = m?.[1]
  const value = /value `\w+ (.+?) ?`/.exec(message)?.[1]
  const expected = (m && Object.hasOwn(JS_KIND, m[2]) ? JS_KIND[m[2]] : undefined) ?? STATUS_EXPECTS[status] ?? 'a value of another type'
  const got = kind === 'Number' && value !== undefined ? value : kind && Object.hasOwn(KIND_SHOWN, kind) ? KIND_SHOWN[kind] : 'a value of another type'
  const path = NAPI_FIELD.exec(message)?.[1] ?? 'argument'
  return invalidArgument(path, expected, got, `an argument has the wrong type (${message})`, { cause })
}

// What each TypeError of a napi-rs conversion (NAPI_CONVERSION, UNSERIALISABLE) says was expected and came.
const CONVERSION_FIELDS: [RegExp, string, string][] = [
  [/^Cannot convert undefined or null to object/, 'an object', 'undefined or null'],
  [/^Cannot convert object to primitive value/, 'a primitive value', 'an object without one'],
  [/^Cannot convert a Symbol value/, 'a value other than a Symbol', 'a Symbol'],
  [/^Cannot convert a BigInt value/, 'a number', 'a BigInt'],
  [/^Cannot perform Construct on a detached ArrayBuffer/, 'an attached ArrayBuffer', 'a detached ArrayBuffer'],
  [/^Do not know how to serialize a BigInt/, 'a value JSON can hold', 'a BigInt'],
  [/^Converting circular structure to JSON/, 'a value JSON can hold', 'a circular structure'],
]

/** The INVALID_ARGUMENT for a conversion TypeError; `message` as the caller reads it. */
function typeErrorConversion(err: TypeError, message: string): WgallocError {
  const [, expected, got] = CONVERSION_FIELDS.find(([re]) => re.test(err.message)) ?? [undefined, 'a value of another type', 'a value of the wrong type']
  return invalidArgument('argument', expected, got, message, { cause: err })
}

const isCode = (code: string): code is WgallocErrorCode => (ERROR_CODES as readonly string[]).includes(code)

/** A user value in a message, whatever it is (a Symbol or a null-prototype object cannot be interpolated). */
export function shown(value: unknown): string {
  if (typeof value === 'string') return `'${value.length > 60 ? `${value.slice(0, 60)}...` : value}'`
  if (typeof value === 'function') return 'a function'
  if (Array.isArray(value)) return `an array of ${value.length}`
  try {
    if (typeof value === 'object' && value !== null && String(value).startsWith('[object ')) return 'an object'
    return typeof value === 'symbol' ? value.toString() : String(value)
  } catch {
    return typeof value
  }
}

/**
 * Turns any error from the native layer into a WgallocError; other values pass through.
 * `native`: the error came straight out of a native call, so a conversion TypeError is
 * napi-rs refusing an argument.
 */
export function toWgallocError(err: unknown, native = false): unknown {
  if (err instanceof WgallocError || !(err instanceof Error)) return err
  const coded = fromData(err.message)
  if (coded) return coded
  const status = (err as { code?: string }).code ?? ''
  if (NAPI_TYPE_STATUSES.has(status)) return conversionError(status, err.message, err)
  if (err instanceof TypeError && UNSERIALISABLE.test(err.message)) {
    return typeErrorConversion(err, `an argument holds a value of the wrong type (${err.message.split('\n')[0]})`)
  }
  // napi-rs catches a panic in a background task and rejects with this: a wgalloc defect, but
  // still a typed error the caller can handle (the process and the device stay usable).
  if ((err as { code?: string }).code === 'GenericFailure' && /^Panic in async function/.test(err.message)) {
    return new WgallocError('INTERNAL', 'wgalloc panicked in a background call; please report it with the steps that led here', { cause: err })
  }
  // Every native error of ours carries a code, so an uncoded failure out of a native call is a
  // panic the binding caught (`#[napi(catch_unwind)]`), with the panic's message.
  if (native && (err as { code?: string }).code === 'GenericFailure') {
    return new WgallocError('INTERNAL', `wgalloc panicked in a native call (${err.message}); please report it with the steps that led here`, { cause: err })
  }
  if (native && err instanceof TypeError && NAPI_CONVERSION.test(err.message)) {
    return typeErrorConversion(err, `an argument has the wrong type (${err.message})`)
  }
  return err
}

/** The ABORTED error for `signal` (its reason as the cause). */
export function abortError(signal: AbortSignal | undefined): WgallocError {
  const reason: unknown = signal?.reason
  return new WgallocError('ABORTED', 'the operation was aborted', reason === undefined ? undefined : { cause: reason })
}

/**
 * The INVALID_ARGUMENT for `path` (as the caller names it; `[call, path]` names the call too),
 * which should have been `expected` but was `got` (a value shown with {@link shown}, or a
 * description such as `an object`); `hint` says what to do.
 */
export function invalidArgument(
  where: string | readonly [call: string, path: string],
  expected: string,
  got: string,
  hint?: string,
  options?: { cause?: unknown },
): WgallocError {
  const [call, path] = typeof where === 'string' ? [undefined, where] : where
  const message = `${call ? `${call}: ` : ''}${path}: expected ${expected}, got ${got}${hint ? `; ${hint}` : ''}`
  const err = new WgallocError('INVALID_ARGUMENT', message, options)
  err.details = call ? { call, path, expected, got } : { path, expected, got }
  return err
}

/** The INVALID_ARGUMENT for `new` on class `name`, whose instances come from `use`. */
export function noConstructor(name: string, use: string): WgallocError {
  return invalidArgument(`new ${name}()`, use, 'a direct call', `${name} has no public constructor`)
}

/** JSON.parse whose failure is a PARSE_ERROR naming `what`, not a bare SyntaxError. */
export function parseJson(text: string, what: string): unknown {
  try {
    return JSON.parse(text)
  } catch (err) {
    throw new WgallocError('PARSE_ERROR', `${what} is not valid JSON: ${(err as Error).message}`, { cause: err })
  }
}

/**
 * JSON.stringify of caller input: input nested past what the stack holds (or cyclic) is
 * INVALID_ARGUMENT naming `what`, not a bare RangeError or TypeError.
 */
export function stringifyInput(value: unknown, what: string, replacer?: (key: string, value: unknown) => unknown): string {
  try {
    return JSON.stringify(value, replacer as (key: string, value: unknown) => unknown)
  } catch (err) {
    if (err instanceof RangeError)
      throw invalidArgument(what, 'a value nested no deeper than the stack holds', 'one nested deeper', `nesting too deep to serialise (${err.message})`, {
        cause: err,
      })
    if (err instanceof TypeError && /circular/i.test(err.message))
      throw invalidArgument(what, 'a value without cycles', 'a circular reference', 'a circular reference cannot be serialised', { cause: err })
    if (err instanceof TypeError && /BigInt/.test(err.message))
      throw invalidArgument(what, 'a number or a decimal string', 'a BigInt', 'a BigInt cannot be serialised here', { cause: err })
    throw err
  }
}

/** `message` of any thrown value. */
export const messageOf = (err: unknown): string => (err instanceof Error ? err.message : String(err))

/**
 * `value` as a 32-bit unsigned integer from `min` up; INVALID_ARGUMENT naming `what` otherwise.
 * The native layer would wrap or truncate anything else (2^32 + 1 to 1, 1.5 to 1, NaN to 0).
 */
export function u32(value: unknown, what: string, min = 0): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > 0xffff_ffff) {
    throw invalidArgument(what, `an integer from ${min} to 4294967295`, shown(value))
  }
  return value
}

/**
 * Every key of options type `T`, listed once: the compiler refuses a list that misses a key or
 * names one `T` lacks, so the list cannot drift from the type.
 */
export const optionKeys = <T extends object>(keys: { [K in keyof Required<T>]: true }): readonly string[] => Object.freeze(Object.keys(keys))

/**
 * `options` as an object ({} for none); INVALID_ARGUMENT naming `what` for anything else, and,
 * given the type's `known` keys ({@link optionKeys}), for a key outside them: a misspelt option
 * would otherwise change nothing, silently.
 */
export function optionsObject<T extends object>(options: T | null | undefined, what: string, known?: readonly string[]): Partial<T> {
  if (options == null) return {}
  if (typeof options !== 'object') throw invalidArgument([what, 'options'], 'an object', shown(options))
  if (known !== undefined) {
    const unknown = Object.keys(options).find((k) => !known.includes(k))
    if (unknown !== undefined)
      throw invalidArgument([what, `options.${unknown}`], `a known option (${known.join(', ')})`, shown(unknown), `unknown option ${shown(unknown)}`)
  }
  return options
}
