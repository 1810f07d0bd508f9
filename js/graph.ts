// Executable graphs: their types, and the conversions between caller objects and the JSON
// and bytes the native side takes.
import { bytesOf, type TensorData } from './internal/bytes.js'
import { WgallocError, parseJson, shown, stringifyInput, invalidArgument } from './errors.js'

/** Element types of graph tensors (f16 comes back as Uint16Array). */
export type DType = 'f32' | 'u32' | 'i32' | 'u16' | 'f16' | 'i8' | 'u8'

/** A tensor of an executable graph. */
export interface GraphTensor {
  /** Unique id (the key of inputs, params and outputs). */
  id: string
  /**
   * Bytes (in a `compileShapes()` graph, may be an expression such as `'batch * 1024'`, listing
   * its factors outermost first). Give `size`, or `shape` and `dtype`, or both when they agree.
   */
  size?: number | string
  /**
   * Extents, outermost first (`[2, 64]`; in a `compileShapes()` graph dimension names or
   * expressions, `['batch', 'seq']`): the tensor holds their product of `dtype` elements. A shape
   * executor pads a shaped tensor row by row, so its buckets may be on any of its dimensions.
   */
  shape?: readonly (number | string)[]
  /**
   * Default `intermediate`. Inputs come with every run, params at compile time, outputs are
   * returned; an `external` tensor is a DeviceBlock given to every run and bound in place (never
   * planned into the slab; ops may write it).
   */
  kind?: 'input' | 'param' | 'intermediate' | 'output' | 'external'
  /** Shares the bytes of this tensor (and extends its life). */
  viewOf?: string
  /** Element type of returned outputs (and of the elements `shape` counts). */
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
  /**
   * The op's uniform: numbers of one WGSL scalar type (`{ u32: [64, 192] }`, `{ f32: [0.5, 2] }`,
   * see {@link OpParams}), or its bytes: a typed array, or a plain array of bytes (0-255 each) as
   * graph JSON files hold them.
   */
  params?: ArrayBufferView | OpParams | number[]
  /** Scratch bytes bound after the outputs. */
  workspace?: number | string
}

/**
 * Op params as numbers of one WGSL scalar type, 4 bytes each in the order given: the members of
 * the kernel's uniform struct. (A plain array of numbers is bytes, as graph JSON files hold them.)
 */
export type OpParams =
  | {
      /** 32-bit floats. */
      f32: readonly number[]
    }
  | {
      /** 32-bit unsigned integers. */
      u32: readonly number[]
    }
  | {
      /** 32-bit signed integers. */
      i32: readonly number[]
    }

/** A WGSL compute kernel of a graph. */
export interface GraphKernel {
  /** WGSL source. */
  source: string
  /** The `@compute` function to run (default `main`). */
  entryPoint?: string
}

/**
 * A graph of WGSL kernels. Given as a literal to `gpu.compile()` or `gpu.compileShapes()`, its
 * tensor ids, kinds and dtypes type the executor: `run()` takes its inputs by name, and each
 * output comes back as its dtype's array (see {@link GraphOutputs}).
 */
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

/** The array type of each dtype's outputs. */
export interface DTypeArrays {
  /** 32-bit floats. */
  f32: Float32Array
  /** 32-bit unsigned integers. */
  u32: Uint32Array
  /** 32-bit signed integers. */
  i32: Int32Array
  /** 16-bit unsigned integers. */
  u16: Uint16Array
  /** 16-bit floats, as their bits. */
  f16: Uint16Array
  /** 8-bit signed integers. */
  i8: Int8Array
  /** Bytes. */
  u8: Uint8Array
}

/** A tensor of kind `K` and id `I`: the shape a graph's tensors are matched against by kind. */
export interface TensorOfKind<K extends GraphTensor['kind'], I extends string = string> {
  /** The tensor's id. */
  id: I
  /** The tensor's kind. */
  kind: K
}

/** A tensor with an element type. */
export interface TensorWithDType<D extends DType = DType> {
  /** The tensor's dtype. */
  dtype: D
}

/** A graph that names its dimensions. */
export interface GraphWithDims<D extends string = string> {
  /** The dimension names. */
  dims: readonly D[]
}

/** The tensors of graph `G`, as a union. */
export type GraphTensorOf<G extends Graph> = G['tensors'][number]
/** Whether `G`'s tensor ids are known (a literal), not just `string`. */
export type GraphIsLiteral<G extends Graph> = string extends GraphTensorOf<G>['id'] ? false : true
/** The ids of `G`'s tensors of kind `K`. */
export type GraphTensorIds<G extends Graph, K extends GraphTensor['kind']> =
  GraphTensorOf<G> extends infer T ? (T extends TensorOfKind<K, infer I> ? I : never) : never

/** Output ids of a graph (`string` when the graph is not a literal). */
export type GraphOutputIds<G extends Graph> = GraphIsLiteral<G> extends true ? GraphTensorIds<G, 'output'> : string
/** A graph's outputs by id, each as its dtype's array (Uint8Array without one); any id and array for a graph that is not a literal. */
export type GraphOutputs<G extends Graph> =
  GraphIsLiteral<G> extends true
    ? { [T in GraphTensorOf<G> as T extends TensorOfKind<'output', infer I> ? I : never]: T extends TensorWithDType<infer D> ? DTypeArrays[D] : Uint8Array }
    : Record<string, OutputArray>
/**
 * What a run of a graph takes: every input by id (host data or a device block) and every
 * external tensor (a device block); any id for a graph that is not a literal.
 */
export type GraphInputs<G extends Graph, Block> =
  GraphIsLiteral<G> extends true
    ? { [I in GraphTensorIds<G, 'input'>]: TensorData | Block } & { [I in GraphTensorIds<G, 'external'>]: Block }
    : Record<string, TensorData | Block>
/** A graph's dimension names (`string` when not a literal). */
export type GraphDims<G extends Graph> = G extends GraphWithDims<infer D> ? (string extends D ? string : D) : string

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

/** The graph as JSON text (typed-array params become byte arrays, {@link OpParams} their bytes). */
export function graphJson(graph: unknown): string {
  if (typeof graph === 'string') return graph
  if (!graph || typeof graph !== 'object') throw invalidArgument('graph', 'an object with tensors, ops and kernels (or its JSON text)', shown(graph))
  return stringifyInput(graph, 'the graph', graphField)
}

/** A graph field as its JSON holds it: typed arrays and {@link OpParams} as byte arrays. */
export function graphField(key: string, value: unknown): unknown {
  if (ArrayBuffer.isView(value)) return Array.from(bytesOf(value, `graph field '${key}'`))
  if (key === 'params' && value !== null && typeof value === 'object') return Array.from(paramBytes(value))
  return value
}

/** What each scalar type of {@link OpParams} takes, and its array. */
const PARAM_TYPES = {
  f32: { array: Float32Array, ok: (v: number) => Number.isFinite(v), range: 'a finite number' },
  u32: { array: Uint32Array, ok: (v: number) => Number.isInteger(v) && v >= 0 && v <= 0xffff_ffff, range: 'an integer from 0 to 4294967295' },
  i32: {
    array: Int32Array,
    ok: (v: number) => Number.isInteger(v) && v >= -0x8000_0000 && v <= 0x7fff_ffff,
    range: 'an integer from -2147483648 to 2147483647',
  },
} as const

/**
 * The bytes of an op's params. Note [Op params say their type]: a plain array of numbers is
 * bytes (graph JSON files hold them so, and parsed files are passed as objects), so
 * `params: [64, 192, 0, 0]` meant as two `u32`s is 4 bytes. Values are given their type with
 * {@link OpParams} (`{ u32: [64, 192] }`), each checked to fit it. A plain array that cannot be
 * bytes (a value past 255, negative or fractional) is refused with that hint rather than
 * wrapped, and params shorter than the kernel's uniform are refused at compile (bind.rs), so
 * values mistaken for bytes fail instead of running.
 */
function paramBytes(value: object): Uint8Array {
  if (Array.isArray(value)) {
    const bad = value.findIndex((v) => typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > 255)
    if (bad >= 0)
      throw invalidArgument(
        `op params[${bad}]`,
        'a byte (0-255): a plain array holds bytes',
        shown(value[bad]),
        'for numbers pass { u32: [...] }, { i32: [...] } or { f32: [...] } (4 bytes each)',
      )
    return Uint8Array.from(value)
  }
  const keys = Object.keys(value)
  const type = keys[0] as keyof typeof PARAM_TYPES
  if (keys.length !== 1 || !Object.hasOwn(PARAM_TYPES, type))
    throw invalidArgument('op params', '{ u32: [...] }, { i32: [...] } or { f32: [...] }, or a typed array', shown(value))
  const values = (value as Record<string, unknown>)[type]
  const { array, ok, range } = PARAM_TYPES[type]
  if (!Array.isArray(values) || values.length === 0) throw invalidArgument(`op params.${type}`, 'a non-empty array of numbers', shown(values))
  values.forEach((v, i) => {
    if (typeof v !== 'number' || !ok(v)) throw invalidArgument(`op params.${type}[${i}]`, range, shown(v))
  })
  const typed = array.from(values as number[])
  return new Uint8Array(typed.buffer, typed.byteOffset, typed.byteLength)
}

/** `{ id: TensorData }` as `{ id: bytes }`; INVALID_ARGUMENT naming `what`. */
export function byteMap(obj: unknown, what: string): Record<string, Uint8Array> {
  if (obj == null) return {}
  if (typeof obj !== 'object') throw invalidArgument(what, 'an object of { id: TypedArray }', shown(obj))
  return Object.fromEntries(Object.entries(obj).map(([k, v]) => [k, bytesOf(v, `${what}.${k}`)]))
}

/**
 * Note [Inputs match their dtype]: a typed array carries an element type, and one that differs
 * from the tensor's `dtype` (a Float32Array for a `u32` input or param of the same byte length)
 * would run with its bits read as the other type: a silent wrong answer. Such an array is
 * refused, naming the input or param, the dtype and the array's type. Raw bytes stay possible, spelled as such: a
 * `Uint8Array` (or Buffer), a DataView or an ArrayBuffer passes for any dtype.
 */
export function checkDtype(value: unknown, dtype: string | undefined, what: string): void {
  if (dtype === undefined || !Object.hasOwn(TYPED, dtype) || !ArrayBuffer.isView(value) || value instanceof DataView || value instanceof Uint8Array) return
  const want = TYPED[dtype as DType]
  if (value instanceof want) return
  const got = value.constructor?.name ?? 'typed array'
  throw invalidArgument(what, `a ${want.name} (the tensor is ${dtype}), or the raw bytes as a Uint8Array`, `a ${got}`)
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

/**
 * A plain graph tensor's bytes: its `size`, or the product of its `shape` (integers) times its
 * dtype's bytes; whatever is not such a number comes back as it is, for the caller to refuse.
 */
export function tensorBytes(t: GraphTensor): unknown {
  if (t.size !== undefined || !Array.isArray(t.shape) || t.dtype === undefined || !Object.hasOwn(TYPED, t.dtype)) return t.size
  if (!t.shape.every((n) => Number.isSafeInteger(n) && (n as number) >= 0)) return t.shape
  const element = (TYPED[t.dtype] as unknown as { BYTES_PER_ELEMENT: number }).BYTES_PER_ELEMENT
  return t.shape.reduce((a: number, n) => a * (n as number), element)
}

/** Zero bytes for every input, to observe a run with; a size that is no size is refused here. */
export function zeroInputs(graph: unknown): Record<string, Uint8Array> {
  return Object.fromEntries(
    tensorsOf(graph)
      .filter((t) => t.kind === 'input')
      .map((t) => {
        const size = tensorBytes(t)
        if (!Number.isSafeInteger(size) || (size as number) < 0) throw invalidArgument(`tensor ${shown(t.id)}.size`, 'a non-negative integer', shown(size))
        try {
          return [t.id, new Uint8Array(size as number)]
        } catch (err) {
          throw new WgallocError('OUT_OF_MEMORY', `plan: 'observe' cannot make ${t.size} zero bytes for input ${shown(t.id)}: ${(err as Error).message}`, {
            cause: err,
          })
        }
      }),
  )
}

export type { TensorData }
