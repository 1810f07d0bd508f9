'use strict'
// Typed errors. Native errors arrive as `[CODE] message` (napi-rs fixes `code`
// on async paths); this lifts the code into `error.code` on a WgallocError.

/** Codes wgalloc throws. Stable API: branch on `error.code`, not on messages. */
const CODES = Object.freeze([
  'INVALID_ARGUMENT',
  'ADAPTER_NOT_FOUND',
  'DEVICE_REQUEST_FAILED',
  'DEVICE_LOST',
  'OUT_OF_MEMORY',
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
  'BINARY_NOT_FOUND',
  'INTERNAL',
])

class WgallocError extends Error {
  constructor(code, message, options) {
    super(message, options)
    this.name = code === 'ABORTED' ? 'AbortError' : 'WgallocError'
    this.code = code
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

const CODED = /^\[([A-Z_]+)\] ([\s\S]*)$/
// napi-rs describes a mistyped argument with JSON.stringify, which itself throws for a
// BigInt or a cycle; that TypeError would escape in place of the conversion error.
// (The facade's own JSON.stringify of graphs and records fails the same way.)
const UNSERIALISABLE = /^(Do not know how to serialize a BigInt|Converting circular structure to JSON)/

// TypeErrors napi-rs conversions throw for a value of the wrong shape (undefined where
// an object or map is required, an object without a primitive value).
const NAPI_CONVERSION =
  /^(Cannot convert undefined or null to object|Cannot convert object to primitive value|Cannot convert a Symbol value|Cannot convert a BigInt value|Cannot perform Construct on a detached ArrayBuffer)/

/** A user value in a message, whatever it is (a Symbol or a null-prototype object cannot be interpolated). */
function shown(value) {
  if (typeof value === 'string') return `'${value.length > 60 ? `${value.slice(0, 60)}...` : value}'`
  try {
    return typeof value === 'symbol' ? value.toString() : String(value)
  } catch {
    return typeof value
  }
}

/**
 * Turns any error from the native layer into a WgallocError; other errors pass through.
 * `native`: the error came straight out of a native call, so a conversion TypeError is
 * napi-rs refusing an argument.
 */
function toWgallocError(err, native = false) {
  if (err instanceof WgallocError || !(err instanceof Error)) return err
  const m = CODED.exec(err.message)
  if (m) return new WgallocError(m[1], m[2])
  if (NAPI_TYPE_STATUSES.has(err.code)) return new WgallocError('INVALID_ARGUMENT', err.message)
  if (err instanceof TypeError && UNSERIALISABLE.test(err.message)) {
    return new WgallocError('INVALID_ARGUMENT', `an argument holds a value of the wrong type (${err.message.split('\n')[0]})`, { cause: err })
  }
  if (native && err instanceof TypeError && NAPI_CONVERSION.test(err.message)) {
    return new WgallocError('INVALID_ARGUMENT', `an argument has the wrong type (${err.message})`, { cause: err })
  }
  return err
}

function abortError(signal) {
  const reason = signal?.reason
  return new WgallocError('ABORTED', 'the operation was aborted', reason === undefined ? undefined : { cause: reason })
}

/** JSON.parse whose failure is a PARSE_ERROR naming `what`, not a bare SyntaxError. */
function parseJson(text, what) {
  try {
    return JSON.parse(text)
  } catch (err) {
    throw new WgallocError('PARSE_ERROR', `${what} is not valid JSON: ${err.message}`, { cause: err })
  }
}

/**
 * JSON.stringify of caller input: input nested past what the stack holds (or cyclic) is
 * INVALID_ARGUMENT naming `what`, not a bare RangeError or TypeError.
 */
function stringifyInput(value, what, replacer) {
  try {
    return JSON.stringify(value, replacer)
  } catch (err) {
    if (err instanceof RangeError) throw new WgallocError('INVALID_ARGUMENT', `${what}: nesting too deep to serialise (${err.message})`, { cause: err })
    if (err instanceof TypeError && /circular/i.test(err.message))
      throw new WgallocError('INVALID_ARGUMENT', `${what}: a circular reference cannot be serialised`, { cause: err })
    throw err
  }
}

module.exports = { WgallocError, CODES, toWgallocError, abortError, parseJson, shown, stringifyInput }
