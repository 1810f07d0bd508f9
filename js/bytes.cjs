'use strict'
// Tensor data in: any typed array, DataView or ArrayBuffer, seen as its bytes (no copy).
const { WgallocError } = require('./errors.cjs')

/** The bytes of `value` as a Uint8Array over the same memory; INVALID_ARGUMENT naming `what` otherwise. */
function bytesOf(value, what) {
  // Non-empty: a view of a transferred (detached) buffer has length 0 and must be refused below.
  if (value instanceof Uint8Array && value.byteLength > 0) return value
  try {
    if (value instanceof ArrayBuffer || value instanceof SharedArrayBuffer) return new Uint8Array(value)
    if (ArrayBuffer.isView(value)) return new Uint8Array(value.buffer, value.byteOffset, value.byteLength)
  } catch (err) {
    // A view of a transferred (detached) buffer cannot be read.
    throw new WgallocError('INVALID_ARGUMENT', `${what}: ${err.message}`, { cause: err })
  }
  throw new WgallocError('INVALID_ARGUMENT', `${what} must be a TypedArray, DataView or ArrayBuffer`)
}

const TYPED = [
  Uint8Array,
  Int8Array,
  Uint16Array,
  Int16Array,
  Uint32Array,
  Int32Array,
  Float32Array,
  Float64Array,
  BigInt64Array,
  BigUint64Array,
  Uint8ClampedArray,
]
if (typeof Float16Array === 'function') TYPED.push(Float16Array)

/** Checks a read's `as` option: undefined (bytes) or a typed-array class. */
function checkAs(as, what) {
  if (as !== undefined && !TYPED.includes(as)) {
    throw new WgallocError(
      'INVALID_ARGUMENT',
      `${what}: as must be a typed-array class such as Float32Array, got ${typeof as === 'function' ? as.name : typeof as}`,
    )
  }
}

/** `bytes` as an `as` array: a view where aligned, else an aligned copy; the length must be whole elements. */
function asTyped(bytes, as, what) {
  if (as === undefined || as === Uint8Array) return bytes
  const size = as.BYTES_PER_ELEMENT
  if (bytes.byteLength % size !== 0) {
    throw new WgallocError('INVALID_ARGUMENT', `${what}: ${bytes.byteLength} bytes is not a whole number of ${as.name} elements (${size} bytes each)`)
  }
  const aligned = bytes.byteOffset % size === 0 ? bytes : Uint8Array.prototype.slice.call(bytes)
  return new as(aligned.buffer, aligned.byteOffset, aligned.byteLength / size)
}

module.exports = { bytesOf, checkAs, asTyped }
