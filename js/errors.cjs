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
  'IO_ERROR',
  'PARSE_ERROR',
  'SIZE_OVERFLOW',
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
  'InvalidArg', 'ObjectExpected', 'StringExpected', 'NameExpected', 'FunctionExpected',
  'NumberExpected', 'BooleanExpected', 'ArrayExpected', 'BigintExpected', 'DateExpected',
  'ArrayBufferExpected', 'DetachableArraybufferExpected',
])

const CODED = /^\[([A-Z_]+)\] ([\s\S]*)$/

/** Turns any error from the native layer into a WgallocError; other errors pass through. */
function toWgallocError(err) {
  if (err instanceof WgallocError || !(err instanceof Error)) return err
  const m = CODED.exec(err.message)
  if (m) return new WgallocError(m[1], m[2])
  if (NAPI_TYPE_STATUSES.has(err.code)) return new WgallocError('INVALID_ARGUMENT', err.message)
  return err
}

function abortError(signal) {
  const reason = signal && signal.reason
  return new WgallocError('ABORTED', 'the operation was aborted', reason === undefined ? undefined : { cause: reason })
}

module.exports = { WgallocError, CODES, toWgallocError, abortError }
