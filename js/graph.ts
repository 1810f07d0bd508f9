// Executable graphs: their types, and the conversions between caller objects and the JSON
// and bytes the native side takes.
import { bytesOf, type TensorData } from './bytes.js'
import { WgallocError, parseJson, shown, stringifyInput } from './errors.js'

/** Element types of graph tensors (f16 comes back as Uint16Array). */
export type DType = 'f32' | 'u32' | 'i32' | 'u16' | 'f16' | 'i8' | 'u8'

/** A tensor of an executable graph. */
export interface GraphTensor {
  /** Unique id (the key of inputs, params and outputs). */
  id: string
  /** Bytes (in a `compileShapes()` graph, may be an expression such as `'batch * 1024'`). */
  size: number | string
  /**
   * Default `intermediate`. Inputs come with every run, params at compile time, outputs are
   * returned; an `external` tensor is a DeviceBlock given to every run and bound in place (never
   * planned into the slab; ops may write it).
   */
  kind?: 'input' | 'param' | 'intermediate' | 'output' | 'external'
  /** Shares the bytes of this tensor (and extends its life). */
  viewOf?: string
  /** Element type of returned outputs. */
  dtype?: DType
}

/** Workgroup counts of an op: numbers, or expressions over the graph's `dims`. */
export type Dispatch = [number | string] | [number | string, number | string] | [number | string, number | string, number | string]

/** An op: its storage bindings are inputs, then outputs, then workspace (`var<storage, read>` for inputs is fine); params bind next as a uniform. */
export interface GraphOp {
  /** Name in profiles, observations and errors (default: the op's index). */
  name?: string
  /** Kernel id; omit for an op that only creates views. */
  kernel?: string
  /** Tensor ids bound first, in order. */
  inputs: string[]
  /** Tensor ids bound after the inputs, in order. */
  outputs: string[]
  /** Workgroup counts (missing dimensions are 1). */
  dispatch?: Dispatch
  /** Bytes of the op's uniform. */
  params?: ArrayBufferView | number[]
  /** Scratch bytes bound after the outputs. */
  workspace?: number | string
}

/** A WGSL compute kernel of a graph. */
export interface GraphKernel {
  /** WGSL source. */
  source: string
  /** The `@compute` function to run (default `main`). */
  entryPoint?: string
}

/** A graph of WGSL kernels. */
export interface Graph {
  /** Kernels by id. */
  kernels: Record<string, GraphKernel>
  /** Every tensor, with its size and kind. */
  tensors: GraphTensor[]
  /** Ops in execution order. */
  ops: GraphOp[]
  /** Dimension names for `gpu.compileShapes()`: sizes and dispatch counts may then be expressions over them. */
  dims?: string[]
}

/** An output tensor, typed by its dtype (Uint8Array without one). */
export type OutputArray = Float32Array | Uint32Array | Int32Array | Uint16Array | Int8Array | Uint8Array

const TYPED: Record<DType, new (buffer: ArrayBuffer, byteOffset: number, length: number) => OutputArray> = {
  f32: Float32Array,
  u32: Uint32Array,
  i32: Int32Array,
  u16: Uint16Array,
  f16: Uint16Array,
  i8: Int8Array,
  u8: Uint8Array,
}

/** The graph as JSON text (typed-array params become byte arrays). */
export function graphJson(graph: unknown): string {
  if (typeof graph === 'string') return graph
  if (!graph || typeof graph !== 'object') throw new WgallocError('INVALID_ARGUMENT', 'a graph is an object with tensors, ops and kernels (or its JSON text)')
  return stringifyInput(graph, 'the graph', (key, value) => (ArrayBuffer.isView(value) ? Array.from(bytesOf(value, `graph field '${key}'`)) : value))
}

/** `{ id: TensorData }` as `{ id: bytes }`; INVALID_ARGUMENT naming `what`. */
export function byteMap(obj: unknown, what: string): Record<string, Uint8Array> {
  if (obj == null) return {}
  if (typeof obj !== 'object') throw new WgallocError('INVALID_ARGUMENT', `${what} must be an object of { id: TypedArray }`)
  return Object.fromEntries(Object.entries(obj).map(([k, v]) => [k, bytesOf(v, `${what}.${k}`)]))
}

/**
 * Note [Inputs match their dtype]: a typed array carries an element type, and one that differs
 * from the tensor's `dtype` (a Float32Array for a `u32` input of the same byte length) would run
 * with its bits read as the other type: a silent wrong answer. Such an array is refused, naming
 * the input, the dtype and the array's type. Raw bytes stay possible, spelled as such: a
 * `Uint8Array` (or Buffer), a DataView or an ArrayBuffer passes for any dtype.
 */
export function checkDtype(value: unknown, dtype: string | undefined, what: string): void {
  if (dtype === undefined || !Object.hasOwn(TYPED, dtype) || !ArrayBuffer.isView(value) || value instanceof DataView || value instanceof Uint8Array) return
  const want = TYPED[dtype as DType]
  if (value instanceof want) return
  const got = value.constructor?.name ?? 'typed array'
  throw new WgallocError('INVALID_ARGUMENT', `${what} is ${dtype}, got a ${got}: pass a ${want.name}, or the raw bytes as a Uint8Array`)
}

/** {@link checkDtype} for each entry of `{ id: TensorData }` (what `byteMap` then converts). */
export function checkDtypes(obj: unknown, types: Map<string, string | undefined>, what: string): void {
  if (obj == null || typeof obj !== 'object') return
  for (const [id, value] of Object.entries(obj)) checkDtype(value, types.get(id), `${what} '${id}'`)
}

/** Output bytes as the typed array the tensor's dtype names (Uint8Array without one). */
export function typed(buffer: Uint8Array, dtype: string | undefined): OutputArray {
  // Own keys only: a dtype such as 'constructor' must not reach Object.prototype.
  const T = dtype !== undefined && Object.hasOwn(TYPED, dtype) ? TYPED[dtype as DType] : Uint8Array
  const size = (T as unknown as { BYTES_PER_ELEMENT: number }).BYTES_PER_ELEMENT
  const usable = buffer.byteLength - (buffer.byteLength % size)
  const aligned = buffer.byteOffset % size === 0 ? buffer : Uint8Array.prototype.slice.call(buffer)
  return new T(aligned.buffer as ArrayBuffer, aligned.byteOffset, usable / size)
}

/** The graph's tensors, whatever shape the (not yet validated) graph has. */
function tensorsOf(graph: unknown): GraphTensor[] {
  const tensors = (graph as { tensors?: unknown } | null)?.tensors
  return Array.isArray(tensors) ? tensors.filter((t): t is GraphTensor => t !== null && typeof t === 'object') : []
}

/** Tensor id -> dtype. */
export function dtypes(json: string): Map<string, string | undefined> {
  return new Map(tensorsOf(parseJson(json, 'the graph')).map((t) => [t.id, t.dtype]))
}

/** Zero bytes for every input, to observe a run with; a size that is no size is refused here. */
export function zeroInputs(graph: unknown): Record<string, Uint8Array> {
  return Object.fromEntries(
    tensorsOf(graph)
      .filter((t) => t.kind === 'input')
      .map((t) => {
        if (!Number.isSafeInteger(t.size) || (t.size as number) < 0)
          throw new WgallocError('INVALID_ARGUMENT', `tensor ${shown(t.id)}: size must be a non-negative integer, got ${shown(t.size)}`)
        try {
          return [t.id, new Uint8Array(t.size as number)]
        } catch (err) {
          throw new WgallocError('OUT_OF_MEMORY', `plan: 'observe' cannot make ${t.size} zero bytes for input ${shown(t.id)}: ${(err as Error).message}`, {
            cause: err,
          })
        }
      }),
  )
}

export type { TensorData }
