// API ergonomics, checked over the whole public surface as the types declare it
// (__test__/api-surface.ts): every async call takes { signal } and rejects with a
// typed ABORTED error before doing any work when the signal already fired; every
// handle has [Symbol.dispose]; every class prints its key fields; every stats()
// is a plain object of numbers. A new class or async method without a fixture
// below fails these tests, so the list cannot silently fall behind.
import dc from 'node:diagnostics_channel'
import { existsSync, mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { inspect } from 'node:util'
import test, { type ExecutionContext } from 'ava'
import * as wgalloc from 'wgalloc'
import {
  type DeviceBlock,
  type Executor,
  Gpu,
  type GpuBuffer,
  type HeapScope,
  type HostBlock,
  type KvCache,
  type KvCacheOptions,
  type KvSequence,
  type MemoryPlan,
  type OutputArray,
  type ShapeExecutor,
  type Stream,
  type Weights,
  WgallocError,
  planMemory,
} from 'wgalloc'
import { type Member, apiSurface } from './api-surface.js'
import { DOUBLE_GRAPH, DOUBLE_SHAPES, DOUBLE_X } from './graphs.js'
import { pattern } from './helpers.js'

/** The package's classes by the names the types give them (the tests look them up by name). */
const exported = wgalloc as unknown as Record<string, (abstract new (...args: never[]) => object) & { prototype: Partial<Disposable> }>

const GRAPH = DOUBLE_GRAPH
const X = DOUBLE_X
const KV_OPTIONS: KvCacheOptions = { layers: 1, kvHeads: 1, headDim: 4, blockTokens: 4, maxBlocks: 16, maxSequenceLength: 64 }
/** Whether `f` throws (a released handle's getters do). */
const throwsOn = (f: () => unknown): boolean => {
  try {
    f()
    return false
  } catch {
    return true
  }
}
const SHAPES = DOUBLE_SHAPES

interface Context {
  gpu: Gpu
  exe: Executor
  block: DeviceBlock
  buffer: GpuBuffer
  stream: Stream
  down: HostBlock
  plan: MemoryPlan
  shapes: ShapeExecutor
  weights: Weights
  scope: HeapScope
  kv: KvCache
  seq: KvSequence
  profiled: number
  dir: string
}

let shared: Promise<Context> | undefined
/** One device and one of everything, for the fixtures. */
function context(): Promise<Context> {
  shared ??= (async () => {
    const gpu = await Gpu.request()
    const exe = await gpu.compile(GRAPH)
    const block = gpu.heap.malloc(256)
    block.write(pattern(256, 3))
    const buffer = gpu.createBuffer(16)
    const stream = gpu.createStream()
    const down = gpu.host.alloc(256, { direction: 'download' })
    const plan = await planMemory([
      { id: 'a', size: 32, first: 0, last: 1 },
      { id: 'b', size: 28, first: 1, last: 4 },
    ])
    const shapes = gpu.compileShapes(SHAPES)
    const weights = gpu.createWeights({ w: new Float32Array(4) })
    const scope = gpu.heap.scope({ name: 'tenant', limit: 1 << 20 })
    const kv = gpu.createKvCache(KV_OPTIONS)
    const seq = kv.addSequence()
    seq.append([1, 2, 3])
    seq.swapOut()
    return { gpu, exe, block, buffer, stream, down, plan, shapes, weights, scope, kv, seq, profiled: 0, dir: mkdtempSync(join(tmpdir(), 'wgalloc-api-')) }
  })()
  return shared
}

/** Every public async call, given a signal (keys: `Class.method` as the types name them). */
const ASYNC_CALLS: Record<string, (c: Context, signal: AbortSignal) => Promise<unknown>> = {
  'Gpu.request': (_c, signal) => Gpu.request({ signal }),
  'Gpu.enumerate': (_c, signal) => Gpu.enumerate({ signal }),
  'Gpu.readBuffer': (c, signal) => c.gpu.readBuffer(c.buffer, 0, 16, { signal }),
  'Gpu.upload': (c, signal) => c.gpu.upload(c.block, new Uint8Array(256), { signal }),
  'Gpu.uploadBatch': (c, signal) => c.gpu.uploadBatch([{ block: c.block, data: new Uint8Array(64) }], { signal }),
  'Gpu.download': (c, signal) => c.gpu.download(c.block, { signal }),
  'Gpu.compile': (c, signal) => c.gpu.compile(GRAPH, { signal }),
  'Gpu.runEager': (c, signal) => c.gpu.runEager(GRAPH, { x: X }, { signal }),
  'Executor.run': (c, signal) => c.exe.run({ x: X }, { signal }),
  'ShapeExecutor.run': (c, signal) => c.shapes.run({ batch: 1 }, { x: X }, { signal }),
  'ShapeExecutor.warmup': (c, signal) => c.shapes.warmup([{ batch: 2 }], { signal }),
  'DeviceBlock.read': (c, signal) => c.block.read(0, 16, { signal }),
  'HostBlock.map': (c, signal) => c.down.map({ signal }),
  'KvSequence.swapIn': (c, signal) => c.seq.swapIn({ signal }),
  'GpuEvent.wait': (c, signal) => c.stream.submit().wait({ signal }),
  'Stream.synchronize': (c, signal) => c.stream.synchronize({ signal }),
  'Profiler.flush': (c, signal) => c.gpu.profiler.flush({ signal }),
  'Profiler.exportTrace': (c, signal) => c.gpu.profiler.exportTrace(join(c.dir, 'aborted.json'), { signal }),
  'Profiler.stopCapture': (c, signal) => c.gpu.profiler.stopCapture({ signal }),
  'Profiler.profile': (c, signal) => c.gpu.profiler.profile(async () => ++c.profiled, { signal }),
  planMemory: (_c, signal) => planMemory([{ id: 'a', size: 4, first: 0, last: 1 }], { signal }),
}

/** What the types call async, by `Class.method` (dispose symbols take no options). */
function typedAsyncCalls(): (Member & { key: string })[] {
  const { classes, functions } = apiSurface()
  const calls = functions.filter((f) => f.async)
  for (const [name, ms] of classes) if (name !== 'WgallocError') calls.push(...ms.filter((m) => m.async && !m.internal && !m.isSymbol))
  return calls.map((m) => ({ ...m, key: m.owner ? `${m.owner}.${m.name}` : m.name }))
}

/** Everything an aborted call could have started: allocations, transfers, runs, opened devices. */
function footprint(c: Context, opened: unknown[]) {
  const h = c.gpu.heap.stats()
  const s = c.gpu.host.stats()
  return {
    heapAllocations: h.activeBlocks.allocated,
    hostAllocations: s.activeRequests.allocated,
    runs: c.exe.stats().runs,
    profiling: c.gpu.profiler.active,
    pendingCommands: c.stream.pendingCommands,
    opened: opened.length,
    profiled: c.profiled,
    traceWritten: existsSync(join(c.dir, 'aborted.json')),
  }
}

test.serial('every async call in the types takes { signal } (types and runtime agree)', (t) => {
  const typed = typedAsyncCalls()
  t.true(typed.length >= 15, `found ${typed.length} async calls`)
  for (const m of typed) t.true(m.takesSignal, `${m.key}: its last parameter should accept { signal }`)
  t.deepEqual(typed.map((m) => m.key).sort(), Object.keys(ASYNC_CALLS).sort(), 'ASYNC_CALLS lists every public async call')
})

test.serial('an already-aborted signal rejects every async call with ABORTED before any work starts', async (t) => {
  const c = await context()
  const opened: unknown[] = []
  const onDevice = (m: unknown) => typeof m === 'object' && m !== null && 'kind' in m && (m.kind === 'open' || m.kind === 'destroy') && opened.push(m)
  dc.subscribe('wgalloc:device', onDevice)
  const start = footprint(c, opened)
  try {
    for (const [key, call] of Object.entries(ASYNC_CALLS)) {
      const reason = new Error(`stop ${key}`)
      const ac = new AbortController()
      ac.abort(reason)
      const before = footprint(c, opened)
      const err = await t.throwsAsync(() => call(c, ac.signal), { instanceOf: WgallocError, code: 'ABORTED' }, key)
      t.is(err?.name, 'AbortError', key)
      t.is(err?.cause, reason, `${key}: the signal's reason is the cause`)
      t.deepEqual(footprint(c, opened), before, `${key} started nothing`)
    }
    // Work started in the background would show by now (a device opens in ~100 ms here).
    await new Promise((r) => setTimeout(r, 500))
    await c.gpu.createStream().synchronize()
    c.gpu.host.processEvents()
    t.deepEqual(footprint(c, opened), start, 'nothing started later either')
  } finally {
    dc.unsubscribe('wgalloc:device', onDevice)
  }
})

test.serial('a signal that is not an AbortSignal is INVALID_ARGUMENT for every async call', async (t) => {
  const c = await context()
  for (const [key, call] of Object.entries(ASYNC_CALLS)) {
    await t.throwsAsync(() => call(c, { aborted: 'no' } as never), { instanceOf: WgallocError, code: 'INVALID_ARGUMENT' }, key)
  }
})

test.serial('aborting in flight rejects at once and releases what arrives late', async (t) => {
  const c = await context()
  const heap = c.gpu.heap
  const base = heap.stats().activeBlocks
  const ac = new AbortController()
  const pending = c.gpu.compile(GRAPH, { signal: ac.signal })
  ac.abort()
  await t.throwsAsync(pending, { code: 'ABORTED' })
  // The native compile still finishes; its executor must go straight back to the heap.
  const deadline = Date.now() + 10_000
  let now = heap.stats().activeBlocks
  while (Date.now() < deadline && !(now.allocated > base.allocated && now.current === base.current)) {
    await new Promise((r) => setTimeout(r, 20))
    heap.freeInactiveBuffers()
    now = heap.stats().activeBlocks
  }
  t.true(now.allocated > base.allocated, 'the compile allocated its slab')
  t.is(now.current, base.current, 'and the late executor released it')
  // A run aborted in flight rejects; the next run waits for it and is right.
  const ac2 = new AbortController()
  const run = c.exe.run({ x: X }, { signal: ac2.signal })
  ac2.abort()
  await t.throwsAsync(run, { code: 'ABORTED' })
  const out: OutputArray = (await c.exe.run({ x: X })).outputs.y
  t.deepEqual(
    Array.from(out),
    Array.from(X, (v) => v * 2),
  )
})

/** How to make a handle `H` for a test, and how to tell it was released (methods: a fixture of any handle fits). */
interface Handle<H extends Disposable = Disposable & Partial<AsyncDisposable>> {
  make(c: Context): H | Promise<H>
  released(h: H): boolean
}

/** A fresh instance of every handle class, and how to tell it was released. */
const HANDLES: Record<string, Handle> = {
  Gpu: { make: () => Gpu.request(), released: (g: Gpu) => g.lost },
  GpuBuffer: { make: (c) => c.gpu.createBuffer(8), released: (b: GpuBuffer) => b.destroyed },
  DeviceBlock: { make: (c) => c.gpu.heap.malloc(64), released: (b: DeviceBlock) => b.freed },
  HostBlock: { make: (c) => c.gpu.host.alloc(64), released: (b: HostBlock) => b.freed },
  Executor: { make: (c) => c.gpu.compile(GRAPH), released: (e: Executor) => e.released },
  Weights: { make: (c) => c.gpu.createWeights({ w: new Float32Array(4) }), released: (w: Weights) => w.released },
  HeapScope: {
    make: (() => {
      let n = 0
      return (c: Context) => c.gpu.heap.scope({ name: `dispose-${n++}`, limit: 1 << 20 })
    })(),
    released: (s: HeapScope) => s.disposed,
  },
  ShapeExecutor: {
    make: async (c) => {
      const s = c.gpu.compileShapes(SHAPES)
      await s.run({ batch: 2 }, { x: new Float32Array(128) })
      return s
    },
    released: (s: ShapeExecutor) => s.stats().cached === 0,
  },
  KvCache: { make: (c) => c.gpu.createKvCache(KV_OPTIONS), released: (k: KvCache) => k.sequences().length === 0 && throwsOn(() => k.bytes) },
  KvSequence: { make: (c) => c.kv.addSequence(), released: (s: KvSequence) => s.freed },
  Stream: {
    // A stream owns recorded work: disposal submits it.
    make: (c) => {
      const s = c.gpu.createStream()
      s.copy(c.buffer, c.gpu.createBuffer(16))
      return s
    },
    released: (s: Stream) => s.pendingCommands === 0,
  },
}

test.serial('every handle class has [Symbol.dispose] that releases it, idempotently', async (t) => {
  const c = await context()
  t.is<symbol, symbol>(Symbol.dispose, Symbol.for('nodejs.dispose'), 'Node defines (or the facade uses) the registered symbol')
  const { classes } = apiSurface()
  // A handle: a class that releases itself (`x.free()`, `x.destroy()`, `x.release()`), or declares disposal.
  const releases = (m: Member) => (['free', 'destroy', 'release'].includes(m.name) && m.arity === 0) || m.name === '[Symbol.dispose]'
  const typed = [...classes].filter(([name, ms]) => name !== 'WgallocError' && ms.some(releases))
  t.deepEqual(typed.map(([n]) => n).sort(), Object.keys(HANDLES).sort(), 'HANDLES lists every handle class')
  for (const [name, ms] of typed) {
    t.true(
      ms.some((m) => m.name === '[Symbol.dispose]'),
      `${name} declares [Symbol.dispose] in the types`,
    )
    const { make, released } = HANDLES[name]
    t.is(typeof exported[name].prototype[Symbol.dispose], 'function', `${name}.prototype[Symbol.dispose]`)
    const h = await make(c)
    t.false(released(h), `${name} starts live`)
    h[Symbol.dispose]()
    t.true(released(h), `${name} is released by [Symbol.dispose]`)
    t.notThrows(() => h[Symbol.dispose](), `${name}: a second disposal is harmless`)
    if (ms.some((m) => m.name === '[Symbol.asyncDispose]')) {
      const h2 = await make(c)
      await h2[Symbol.asyncDispose]!()
      t.true(released(h2), `${name} is released by [Symbol.asyncDispose]`)
    }
  }
})

test.serial('a disposed stream ran its recorded copy', async (t) => {
  const c = await context()
  const src = c.gpu.createBuffer(16)
  const dst = c.gpu.createBuffer(16)
  c.gpu.writeBuffer(src, 0, pattern(16, 9))
  const s = c.gpu.createStream()
  s.copy(src, dst)
  s[Symbol.dispose]()
  t.deepEqual(new Uint8Array(await c.gpu.readBuffer(dst, 0, 16)), pattern(16, 9))
})

/** One instance of every exported class, and fields its inspect output must show. */
const KERNEL = '@group(0) @binding(0) var<storage, read_write> a: array<u32>;\n@compute @workgroup_size(1) fn main() { a[0] = 1u; }'

const PRINTS: Record<string, (c: Context) => [unknown, RegExp]> = {
  Gpu: (c) => [c.gpu, /^Gpu \{ adapter: '.+', backend: '\w+', type: '\w+', budget: \d+ \}$/],
  GpuBuffer: (c) => [c.buffer, /^GpuBuffer \{ size: 16 \}$/],
  GpuEvent: (c) => [c.stream.submit(), /^GpuEvent \{ seq: \d+, (pending|complete) \}$/],
  Stream: (c) => [c.stream, /^Stream \{ pendingCommands: 0 \}$/],
  Heap: (c) => [c.gpu.heap, /^Heap \{ allocated: \d+, reserved: [1-9]\d*, activeBlocks: [1-9]\d*, segments: [1-9]\d* \}$/],
  DeviceBlock: (c) => [c.block, /^DeviceBlock \{ id: \d+, size: 256, requestedSize: 256, offset: \d+, pool: 'device-small' \}$/],
  Executor: (c) => [c.exe, /^Executor \{ slabSize: \d+, lowerBound: \d+, strategy: 'best', deviceBytes: \d+, runs: \d+ \}$/],
  Host: (c) => [c.gpu.host, /^Host \{ allocated: [1-9]\d*, active: \d+, cached: \d+, pending: \d+ \}$/],
  HostBlock: (c) => [c.down, /^HostBlock \{ id: \d+, direction: 'download', requestedSize: 256, size: 256, mapped: (true|false) \}$/],
  Profiler: (c) => [c.gpu.profiler, /^Profiler \{ active: false, timing: '.+' \}$/],
  ComputeKernel: (c) => [c.gpu.createKernel({ source: KERNEL, bindings: 1, name: 'fill' }), /^ComputeKernel \{ name: 'fill', bindings: 1, uniform: false \}$/],
  Weights: (c) => [c.weights, /^Weights \{ ids: \['w'\], deviceBytes: [1-9]\d* \}$/],
  ShapeExecutor: (c) => [c.shapes, /^ShapeExecutor \{ dims: \['batch'\], cached: \d+, hits: \d+, misses: \d+ \}$/],
  HeapScope: (c) => [c.scope, /^HeapScope \{ path: 'tenant', allocated: 0, limit: 1048576 \}$/],
  KvCache: (c) => [c.kv, /^KvCache \{ blocks: \d+\/16 used, cached: \d+, sequences: \d+, blockTokens: 4 \}$/],
  KvSequence: (c) => [c.seq, /^KvSequence \{ id: \d+, length: 3(, swapped)? \}$/],
  MemoryPlan: (c) => [c.plan, /^MemoryPlan \{ strategy: 'best', slabSize: 60, lowerBound: 60, ratio: 1\.0000, optimal: true \}$/],
}

test.serial('every class prints its key fields with util.inspect', async (t) => {
  const c = await context()
  const { classes } = apiSurface()
  const printed = [...classes.keys()].filter((n) => n !== 'WgallocError')
  t.deepEqual(printed.sort(), Object.keys(PRINTS).sort(), 'PRINTS lists every class')
  for (const name of printed) {
    const [obj, shape] = PRINTS[name](c)
    t.true(obj instanceof exported[name], name)
    t.regex(inspect(obj), shape, name)
    t.regex(inspect({ nested: [obj] }), new RegExp(`${name} \\{ \\w`), `${name} prints inside other values`)
  }
  const err = new WgallocError('OUT_OF_MEMORY', 'no room')
  t.regex(inspect(err), /WgallocError: no room[\s\S]*code: 'OUT_OF_MEMORY'/)
})

/** Checks that `value` is a plain object tree whose leaves are finite numbers (strings only as entry labels). */
function plainNumbers(t: ExecutionContext, value: object, path: string): void {
  const LABELS = new Set(['pool', 'name', 'pipeline', 'kind'])
  if (Array.isArray(value)) {
    for (const [i, v] of value.entries()) plainNumbers(t, v, `${path}[${i}]`)
    return
  }
  t.is(Object.getPrototypeOf(value), Object.prototype, `${path} is a plain object`)
  for (const [k, v] of Object.entries(value)) {
    if (typeof v === 'number') t.true(Number.isFinite(v), `${path}.${k} is finite`)
    else if (typeof v === 'string') t.true(LABELS.has(k) && /\[\d+\]$/.test(path), `${path}.${k}: strings only label array entries`)
    else if (v !== null && typeof v === 'object') plainNumbers(t, v, `${path}.${k}`)
    else t.fail(`${path}.${k} is ${typeof v}`)
  }
}

test.serial('every stats() returns a plain object of numbers that survives JSON and structuredClone', async (t) => {
  const c = await context()
  const owners = { Heap: c.gpu.heap, Host: c.gpu.host, Executor: c.exe, Profiler: c.gpu.profiler, ShapeExecutor: c.shapes, HeapScope: c.scope, KvCache: c.kv }
  const byName: Record<string, { stats(): object }> = owners
  await c.gpu.profiler.profile(() => c.exe.run({ x: X }))
  c.gpu.profiler.markCpuFallback('topk', 64)
  const { classes } = apiSurface()
  const withStats = [...classes].filter(([, ms]) => ms.some((m) => m.name === 'stats' && m.isMethod)).map(([n]) => n)
  t.deepEqual(withStats.sort(), Object.keys(owners).sort(), 'every class with stats() is covered')
  for (const name of withStats) {
    const s = byName[name].stats()
    plainNumbers(t, s, `${name}.stats()`)
    t.deepEqual(JSON.parse(JSON.stringify(s)), s, `${name}.stats() round-trips through JSON`)
    t.deepEqual(structuredClone(s), s, `${name}.stats() is structured-cloneable`)
  }
  t.true(owners.Profiler.stats().operations.length > 0, 'the profiled run shows up')
})
