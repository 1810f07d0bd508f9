// Argument values for API fuzzing. fast-check generates *recipes* (plain data that
// shrinks and prints well); `build(recipe, ctx)` turns one into a value at call time,
// so it can name live objects of the run: blocks of this device or of another, freed
// ones, streams, plans, and hostile objects (throwing getters and proxies, a getter
// that frees a block in the middle of the call that reads it).
import fc from 'fast-check'

/** Thrown by hostile values; a call may pass it through unchanged. */
export class Hostile extends Error {
  constructor(where: string) {
    super(`hostile value: ${where}`)
    this.name = 'Hostile'
  }
}

// Sizes stay below 64 MiB where they are valid: lavapipe allocates (and zeroes) for
// real, and a fuzzer that takes the machine's memory proves nothing. Invalid ones go
// far beyond every limit.
export const NUMBERS: number[] = [
  0,
  -0,
  1,
  2,
  3,
  4,
  7,
  8,
  12,
  16,
  64,
  100,
  255,
  256,
  257,
  1024,
  4096,
  65536,
  1 << 20,
  (1 << 20) + 4,
  10 << 20,
  2 ** 31,
  2 ** 32,
  2 ** 32 + 4,
  2 ** 53 - 1,
  2 ** 53,
  2 ** 60,
  1e308,
  -1,
  -4,
  -(2 ** 53),
  0.5,
  1.5,
  4.25,
  Number.MIN_VALUE,
  Number.EPSILON,
  NaN,
  Infinity,
  -Infinity,
]
// No absolute path except one whose parent does not exist, nothing that climbs out of
// the run's directory: profiler exports write files.
export const STRINGS: string[] = [
  '',
  ' ',
  'x',
  'trace',
  'trace.json',
  'sub/none/t.json',
  '/nonexistent-wgalloc/t.json',
  '16',
  '0x10',
  '-1',
  'device',
  'shared',
  'upload',
  'download',
  'interval',
  'event',
  'interval,event',
  'event,interval',
  'static',
  'observe',
  'best',
  'exact',
  'naive',
  'greedyBySize',
  'ALLOCATED',
  'FREED',
  'ALLOCATION_FAILED',
  'bogus',
  '\0',
  'a\0b',
  '\u{1F600}',
  '{',
  '[',
  '{"tensors":[]}',
  '[{"id":"a","size":4,"first":0,"last":0}]',
  'id,lower,upper,size\na,0,1,4',
  'x'.repeat(5000),
]
const SPECIAL = [
  'undefined',
  'null',
  'true',
  'false',
  'symbol',
  'bigint',
  'bigneg',
  'bighuge',
  'fn',
  'throwingFn',
  'asyncFn',
  'date',
  'regexp',
  'map',
  'set',
  'promise',
  'rejected',
  'emptyObject',
  'emptyArray',
  'sparseArray',
  'hugeSparseArray',
  'nestedArray',
  'cyclic',
  'proxyThrowing',
  'getterThrowing',
  'valueOfThrowing',
  'nullProto',
  'frozen',
  'error',
  'weakmap',
] as const
const TYPED = ['u8', 'u8odd', 'i8', 'u16', 'f32', 'u32', 'f64', 'bigint64', 'dataview', 'arraybuffer', 'shared', 'detached', 'buffer', 'clamped'] as const
const REFS = [
  'gpu',
  'gpu2',
  'heap',
  'heap2',
  'host',
  'host2',
  'block',
  'blockShared',
  'blockLarge',
  'blockFreed',
  'blockOther',
  'hostUp',
  'hostDown',
  'hostFreed',
  'hostOther',
  'stream',
  'streamOther',
  'buffer',
  'bufferDestroyed',
  'bufferOther',
  'event',
  'plan',
  'executor',
  'profiler',
  'signal',
  'signalAborted',
  'freeingGetter',
  'freeingOptions',
  'handle2',
  'Gpu',
] as const
const OPTION_KEYS = [
  'size',
  'offset',
  'length',
  'usage',
  'shape',
  'direction',
  'srcOffset',
  'dstOffset',
  'mode',
  'statsOnly',
  'waitUntilCompleted',
  'signal',
  'strategy',
  'alignment',
  'timeLimitMs',
  'workspace',
  'multistream',
  'onProgress',
  'params',
  'plan',
  'sampleInputs',
  'maxSlabSize',
  'observe',
  'checkPlan',
  'maxCachedBytes',
  'roundThreshold',
  'backgroundThread',
  'zeroCopy',
  'memoryBudget',
  'backends',
  'powerPreference',
  'requiredFeatures',
  'forceFallbackAdapter',
  'records',
  'tensors',
  'ops',
  'kernels',
  'block',
  'data',
  'x',
  'w',
  '__proto__',
  'constructor',
] as const

export type Special = (typeof SPECIAL)[number]
export type Typed = (typeof TYPED)[number]
/** Live objects of the run (world.ts `fixtures()` supplies them). */
export type Ref = (typeof REFS)[number]
export type OptionKey = (typeof OPTION_KEYS)[number]

/** Plain data that describes an argument value; `build()` makes the value. */
export type Recipe =
  | { k: 'num'; v: number }
  | { k: 'str'; v: string }
  | { k: 'special'; v: Special }
  | { k: 'typed'; v: Typed; len: number }
  | { k: 'ref'; v: Ref }
  | { k: 'array'; items: Recipe[] }
  | { k: 'object'; entries: [OptionKey, Recipe][] }

/** What `build()` needs to name the run's live objects. */
export interface BuildContext {
  ref(name: Ref): unknown
}

/** A recipe: `{ k: kind, ... }`, nested up to `depth` levels of arrays and option objects. */
export const recipe: fc.Arbitrary<Recipe> = fc.letrec<{ value: Recipe }>((tie) => ({
  value: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    { weight: 4, arbitrary: fc.constantFrom(...NUMBERS).map((v): Recipe => ({ k: 'num', v })) },
    { weight: 1, arbitrary: fc.oneof(fc.integer(), fc.double()).map((v): Recipe => ({ k: 'num', v })) },
    { weight: 3, arbitrary: fc.constantFrom(...STRINGS).map((v): Recipe => ({ k: 'str', v })) },
    // No slash: a random string may become a file path (profiler exports), and must stay
    // inside the run's scratch directory.
    { weight: 1, arbitrary: fc.string({ maxLength: 12 }).map((v): Recipe => ({ k: 'str', v: v.replace(/[/\\]/g, '_') })) },
    { weight: 3, arbitrary: fc.constantFrom(...SPECIAL).map((v): Recipe => ({ k: 'special', v })) },
    { weight: 2, arbitrary: fc.record({ k: fc.constant('typed'), v: fc.constantFrom(...TYPED), len: fc.nat(70) }) },
    { weight: 4, arbitrary: fc.constantFrom(...REFS).map((v): Recipe => ({ k: 'ref', v })) },
    { weight: 2, arbitrary: fc.record({ k: fc.constant('array'), items: fc.array(tie('value'), { maxLength: 4 }) }) },
    {
      weight: 3,
      arbitrary: fc.record({ k: fc.constant('object'), entries: fc.array(fc.tuple(fc.constantFrom(...OPTION_KEYS), tie('value')), { maxLength: 4 }) }),
    },
  ),
})).value

/** Up to `max` argument recipes. */
export const args = (max = 4): fc.Arbitrary<Recipe[]> => fc.array(recipe, { maxLength: max })

function typedArray(kind: Typed, len: number): ArrayBufferView | ArrayBuffer {
  switch (kind) {
    case 'u8':
      return Uint8Array.from({ length: len }, (_, i) => (i * 37 + 11) & 0xff)
    case 'u8odd':
      return new Uint8Array(len + 3).subarray(1, 1 + len) // byteOffset not word-aligned
    case 'i8':
      return new Int8Array(len)
    case 'u16':
      return new Uint16Array(len)
    case 'f32':
      return new Float32Array(len).fill(1.5)
    case 'u32':
      return new Uint32Array(len)
    case 'f64':
      return new Float64Array(len)
    case 'bigint64':
      return new BigInt64Array(len)
    case 'dataview':
      return new DataView(new ArrayBuffer(len))
    case 'arraybuffer':
      return new ArrayBuffer(len)
    case 'shared':
      return new Uint8Array(new SharedArrayBuffer(len))
    case 'detached': {
      const buf = new ArrayBuffer(len)
      const view = new Uint8Array(buf)
      structuredClone(buf, { transfer: [buf] })
      return view
    }
    case 'buffer':
      return Buffer.alloc(len, 7)
    case 'clamped':
      return new Uint8ClampedArray(len)
    default:
      throw new Error(`unknown typed kind ${kind}`)
  }
}

function special(kind: Special): unknown {
  switch (kind) {
    case 'undefined':
      return undefined
    case 'null':
      return null
    case 'true':
      return true
    case 'false':
      return false
    case 'symbol':
      return Symbol('fuzz')
    case 'bigint':
      return 16n
    case 'bigneg':
      return -1n
    case 'bighuge':
      return 2n ** 70n
    case 'fn':
      return () => 1
    case 'throwingFn':
      return () => {
        throw new Hostile('function')
      }
    case 'asyncFn':
      return async () => 1
    case 'date':
      return new Date(0)
    case 'regexp':
      return /x/
    case 'map':
      return new Map([['a', 1]])
    case 'set':
      return new Set([1])
    case 'promise':
      return Promise.resolve(1)
    case 'rejected': {
      const p = Promise.reject(new Hostile('rejected promise'))
      p.catch(() => {})
      return p
    }
    case 'emptyObject':
      return {}
    case 'emptyArray':
      return []
    case 'sparseArray':
      return [, 4, , 8] // eslint-disable-line no-sparse-arrays
    case 'hugeSparseArray':
      return new Array(1 << 20)
    case 'nestedArray':
      return [[[[[[1]]]]]]
    case 'cyclic': {
      const o: { size: number; self?: unknown; tensors?: unknown[] } = { size: 4 }
      o.self = o
      o.tensors = [o]
      return o
    }
    case 'proxyThrowing':
      return new Proxy(
        {},
        {
          get: () => {
            throw new Hostile('proxy get')
          },
          has: () => {
            throw new Hostile('proxy has')
          },
          ownKeys: () => {
            throw new Hostile('proxy ownKeys')
          },
          getOwnPropertyDescriptor: () => {
            throw new Hostile('proxy descriptor')
          },
          getPrototypeOf: () => {
            throw new Hostile('proxy prototype')
          },
        },
      )
    case 'getterThrowing': {
      const o = {}
      for (const key of OPTION_KEYS)
        if (key !== '__proto__')
          Object.defineProperty(o, key, {
            enumerable: true,
            get: () => {
              throw new Hostile(`getter ${key}`)
            },
          })
      return o
    }
    case 'valueOfThrowing':
      return {
        valueOf: () => {
          throw new Hostile('valueOf')
        },
        toString: () => {
          throw new Hostile('toString')
        },
      }
    case 'nullProto':
      return Object.assign(Object.create(null), { size: 4, offset: 0 })
    case 'frozen':
      return Object.freeze({ size: 8, offset: 0, mode: 'interval' })
    case 'error':
      return new Error('not an input')
    case 'weakmap':
      return new WeakMap()
    default:
      throw new Error(`unknown special ${kind}`)
  }
}

/** Builds the value a recipe describes; `ctx.ref(name)` supplies live objects. */
export function build(r: Recipe, ctx: BuildContext): unknown {
  switch (r.k) {
    case 'num':
      return r.v
    case 'str':
      return r.v
    case 'special':
      return special(r.v)
    case 'typed':
      return typedArray(r.v, r.len)
    case 'ref':
      return ctx.ref(r.v)
    case 'array':
      return r.items.map((x) => build(x, ctx))
    case 'object': {
      const o = {}
      for (const [key, v] of r.entries) Object.defineProperty(o, key, { value: build(v, ctx), enumerable: true, writable: true, configurable: true })
      return o
    }
    default:
      throw new Error(`unknown recipe ${JSON.stringify(r)}`)
  }
}

/** A short printable form of a value, for traces and failure messages. */
export function show(v: unknown): string {
  try {
    return showInner(v, 0)
  } catch {
    return '<hostile>'
  }
}

function showInner(v: unknown, depth: number): string {
  if (typeof v === 'string') return JSON.stringify(v.length > 40 ? `${v.slice(0, 40)}...(${v.length})` : v)
  if (typeof v === 'bigint') return `${v}n`
  if (typeof v === 'symbol' || typeof v === 'function') return String(v).slice(0, 30)
  if (v === null || typeof v !== 'object') return Object.is(v, -0) ? '-0' : String(v)
  if (ArrayBuffer.isView(v)) return `${v.constructor.name}(${v.byteLength})`
  if (v instanceof ArrayBuffer) return `ArrayBuffer(${v.byteLength})`
  const name: string | undefined = Object.getPrototypeOf(v)?.constructor?.name
  if (name && name !== 'Object' && name !== 'Array') return name
  if (depth > 1) return Array.isArray(v) ? '[..]' : '{..}'
  if (Array.isArray(v))
    return `[${v
      .slice(0, 6)
      .map((x) => showInner(x, depth + 1))
      .join(', ')}${v.length > 6 ? ', ...' : ''}]`
  return `{ ${Object.keys(v)
    .slice(0, 6)
    .map((k) => `${k}: ${showInner(Object.getOwnPropertyDescriptor(v, k)?.value, depth + 1)}`)
    .join(', ')} }`
}
