// Tensor data in: any typed array, DataView or ArrayBuffer, seen as its bytes (no copy).
import { messageOf, invalidArgument, shown } from '../errors.js'

/** Tensor bytes: any typed array, DataView or ArrayBuffer. */
export type TensorData = ArrayBufferView | ArrayBuffer

/** A typed-array class, for reads that return one (`{ as: Float32Array }`). */
export type TypedArrayClass =
  | Uint8ArrayConstructor
  | Int8ArrayConstructor
  | Uint16ArrayConstructor
  | Int16ArrayConstructor
  | Uint32ArrayConstructor
  | Int32ArrayConstructor
  | Float32ArrayConstructor
  | Float64ArrayConstructor
  | BigInt64ArrayConstructor
  | BigUint64ArrayConstructor

/** The bytes of `value` as a Uint8Array over the same memory; INVALID_ARGUMENT naming `what` otherwise. */
export function bytesOf(value: unknown, what: string): Uint8Array {
  try {
    // Non-empty: a view of a transferred (detached) buffer has length 0 and must be refused below.
    // Inside the try: a Proxy of a typed array passes instanceof, then throws on byteLength.
    if (value instanceof Uint8Array && value.byteLength > 0) return value
    if (value instanceof ArrayBuffer || value instanceof SharedArrayBuffer) {
      const bytes = new Uint8Array(value)
      // A Proxy of a buffer reads as an empty array-like; its byteLength getter throws instead.
      if (bytes.byteLength !== value.byteLength) throw new TypeError('not a plain ArrayBuffer')
      return bytes
    }
    if (ArrayBuffer.isView(value)) return new Uint8Array(value.buffer, value.byteOffset, value.byteLength)
  } catch (err) {
    // A view of a transferred (detached) buffer, or a Proxy of one, cannot be read.
    throw invalidArgument(what, 'a readable TypedArray, DataView or ArrayBuffer', 'one that cannot be read', messageOf(err), { cause: err })
  }
  throw invalidArgument(what, 'a TypedArray, DataView or ArrayBuffer', shown(value))
}

const TYPED: unknown[] = [
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
const float16 = (globalThis as { Float16Array?: unknown }).Float16Array
if (typeof float16 === 'function') TYPED.push(float16)

/** Checks a read's `as` option: undefined (bytes) or a typed-array class. */
export function checkAs(as: unknown, what: string): asserts as is TypedArrayClass | undefined {
  if (as !== undefined && !TYPED.includes(as)) {
    throw invalidArgument([what, 'as'], 'a typed-array class such as Float32Array', typeof as === 'function' ? as.name : shown(as))
  }
}

/** `bytes` as an `as` array: a view where aligned, else an aligned copy; the length must be whole elements. */
export function asTyped<T extends TypedArrayClass>(bytes: Uint8Array, as: T | undefined, what: string): InstanceType<T> | Uint8Array {
  if (as === undefined || as === Uint8Array) return bytes
  const size = as.BYTES_PER_ELEMENT
  if (bytes.byteLength % size !== 0) {
    throw invalidArgument(what, `a whole number of ${as.name} elements (${size} bytes each)`, `${bytes.byteLength} bytes`)
  }
  const aligned = bytes.byteOffset % size === 0 ? bytes : Uint8Array.prototype.slice.call(bytes)
  return new as(aligned.buffer as ArrayBuffer, aligned.byteOffset, aligned.byteLength / size) as InstanceType<T>
}
