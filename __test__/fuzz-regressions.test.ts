// Defects the fuzzers (__test__/fuzz/) found in the JS facade, each pinned by a direct
// test: every one used to end in an untyped error, an uncaught exception or a silently
// rounded result.
import test from 'ava'
import { DeviceBlock, Gpu, type Graph, Heap, type UsageRecord, WgallocError, planMemory } from 'wgalloc'
import { chain } from './fuzz/graph.js'
import { gpu } from './helpers.js'

const ADD =
  '@group(0) @binding(0) var<storage, read_write> a: array<u32>;\n@group(0) @binding(1) var<storage, read_write> b: array<u32>;\n@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3<u32>) { if (g.x < arrayLength(&b)) { b[g.x] = a[g.x] + 1u; } }'
const GRAPH: Graph = {
  kernels: { k: { source: ADD } },
  tensors: [
    { id: 'x', size: 256, kind: 'input', dtype: 'u32' },
    { id: 'y', size: 256, kind: 'output', dtype: 'u32' },
  ],
  ops: [{ kernel: 'k', inputs: ['x'], outputs: ['y'], dispatch: [1] }],
}

test('a facade method called on something else is a TypeError, as a native one is', async (t) => {
  const g = await gpu()
  for (const fn of [Heap.prototype.on, Heap.prototype.off, Heap.prototype.malloc, DeviceBlock.prototype.free, Gpu.prototype.upload, Gpu.prototype.download]) {
    t.throws(() => Reflect.apply(fn, 0, ['FREED', () => {}]), { instanceOf: TypeError, message: /Illegal invocation/ }, fn.name)
  }
  const { free } = g.heap.malloc(64)
  t.throws(() => free(), { instanceOf: TypeError })
  // Getters too: they read private fields, which only instances have.
  for (const name of ['freed', 'id', 'size', 'pool', 'shape']) {
    const { get } = Object.getOwnPropertyDescriptor(DeviceBlock.prototype, name)!
    for (const self of [undefined, null, {}, g.heap]) t.throws(() => get!.call(self), { instanceOf: TypeError }, `${name} on ${typeof self}`)
  }
})

test("the heap's native block-table helpers are not reachable (calling one leaked a block)", async (t) => {
  const g = await Gpu.request() // its own: the counts below must see no other test's blocks
  const before = g.heap.stats()
  for (const name of ['slot', 'allocScalarId', 'blockHandle', 'releaseBlock']) {
    t.false(name in g.heap, name)
    t.false(name in Heap.prototype, name)
  }
  // What they served still works: scalars, handles for operations, and the GC net.
  const b = g.heap.allocScalar(new Uint8Array([1, 2, 3, 4]))
  t.deepEqual([...(await b.read(0, 4))], [1, 2, 3, 4])
  b.free()
  t.is(g.heap.stats().activeBlocks.current, before.activeBlocks.current)
  g.destroy()
})

test('a BigInt or a cycle where napi-rs expects another type is INVALID_ARGUMENT, not a JSON TypeError', async (t) => {
  const g = await gpu()
  const cyclic: { self?: unknown } = {}
  cyclic.self = cyclic
  for (const v of [new BigInt64Array(1), [1n], { a: 1n }, cyclic]) {
    t.throws(() => g.profiler.startCapture(v as never), { instanceOf: WgallocError, code: 'INVALID_ARGUMENT' })
  }
  await t.throwsAsync(g.compile({ ...GRAPH, extra: 1n } as never), { code: 'INVALID_ARGUMENT' })
})

test('a missing required options object or map is INVALID_ARGUMENT', async (t) => {
  const g = await gpu()
  t.throws(() => (g.host.configure as (options?: unknown) => void)(), { code: 'INVALID_ARGUMENT' })
  t.throws(() => g.host.configure(null as never), { code: 'INVALID_ARGUMENT' })
  // The native layer is internal: its positional forms are not reachable from the public objects.
  for (const name of ['runEagerGraph', 'compileGraph', 'downloadRange', 'submitUploadBatch']) t.false(name in g, name)
})

test('values that cannot be printed still get a typed error', async (t) => {
  const g = await gpu()
  const nullProto = Object.create(null)
  for (const kind of [Symbol('k'), nullProto, [nullProto]]) {
    t.throws(() => g.heap.on(kind as never, () => {}), { code: 'INVALID_ARGUMENT' })
    t.throws(() => g.heap.off(kind as never, () => {}), { code: 'INVALID_ARGUMENT' })
  }
  await t.throwsAsync(g.compile(GRAPH, { plan: Symbol('p') as never }), { code: 'INVALID_ARGUMENT', message: /Symbol\(p\)/ })
})

test('JSON text that does not parse is PARSE_ERROR', async (t) => {
  const g = await gpu()
  await t.throwsAsync(planMemory('['), { instanceOf: WgallocError, code: 'PARSE_ERROR' })
  await t.throwsAsync(planMemory('{"records": ['), { code: 'PARSE_ERROR' })
  await t.throwsAsync(g.compile('{"tensors": [', { plan: 'observe' }), { code: 'PARSE_ERROR' })
})

test('a typed array over a transferred buffer is INVALID_ARGUMENT', async (t) => {
  const g = await gpu()
  const buffer = new ArrayBuffer(256)
  const x = new Uint32Array(buffer)
  structuredClone(buffer, { transfer: [buffer] })
  await t.throwsAsync(g.runEager(x as never, {}), { code: 'INVALID_ARGUMENT' })
  await t.throwsAsync(g.runEager(GRAPH, { x }), { code: 'INVALID_ARGUMENT', message: /detached/ })
  const exe = await g.compile(GRAPH)
  await t.throwsAsync(exe.run({ x }), { code: 'INVALID_ARGUMENT' })
  exe.release()
})

test('a plan whose slab JS numbers cannot hold exactly is SIZE_OVERFLOW, not rounded offsets', async (t) => {
  const records: UsageRecord[] = [
    { id: 'a', size: 2 ** 52, first: 0, last: 0 },
    { id: 'b', size: 2 ** 52, first: 0, last: 0 },
    { id: 'c', size: 12, first: 0, last: 0 },
  ]
  await t.throwsAsync(planMemory(records, { strategy: 'naive' }), { code: 'SIZE_OVERFLOW' })
  const ok = await planMemory(records.slice(0, 1), { strategy: 'naive' })
  t.is(ok.slabSize, 2 ** 52)
})

test('an onProgress that throws rejects planMemory with its error instead of ending the process', async (t) => {
  // Hard enough that the search runs past the first progress poll (50 ms).
  const records = Array.from({ length: 400 }, (_, i) => ({ id: `r${i}`, size: 1 + ((i * 7919) % 5000), first: i % 37, last: (i % 37) + (i % 11) }))
  const boom = new Error('boom in onProgress')
  let calls = 0
  const started = Date.now()
  const err = await t.throwsAsync(
    planMemory(records, {
      strategy: 'exact',
      timeLimitMs: 5000,
      onProgress: () => {
        calls++
        throw boom
      },
    }),
  )
  t.is(err, boom)
  t.is(calls, 1, 'no progress after the callback threw')
  t.true(Date.now() - started < 4000, 'the search stopped')
})

test('profiler.start({ mode: null }) is refused by the facade, as the types say', async (t) => {
  const g = await gpu()
  t.throws(() => g.profiler.start({ mode: null as never }), {
    code: 'INVALID_ARGUMENT',
    message: /options\.mode: expected 'interval', 'event' or 'interval,event', got null/,
  })
  t.false(g.profiler.active)
})

test('a bad or hostile signal is refused before the work starts, so no promise is left to reject unhandled', async (t) => {
  const g = await gpu()
  const unhandled: unknown[] = []
  const onUnhandled = (reason: unknown) => unhandled.push(reason)
  process.on('unhandledRejection', onUnhandled)
  const hostile = new Proxy(
    {},
    {
      get: () => {
        throw new Error('hostile signal')
      },
    },
  )
  const host = g.host.alloc(64, { direction: 'download' })
  const block = g.heap.malloc(64)
  await t.throwsAsync(host.map(hostile as never), { message: 'hostile signal' })
  await t.throwsAsync(block.read(0, 4, { signal: {} as never }), { code: 'INVALID_ARGUMENT' })
  await t.throwsAsync(g.download(block, { signal: { aborted: false } as never }), { code: 'INVALID_ARGUMENT' })
  await t.throwsAsync(g.download(block, hostile as never), { message: 'hostile signal' })
  host.free() // a map() left running would now fail with USE_AFTER_FREE
  block.free()
  await new Promise((r) => setTimeout(r, 50))
  process.off('unhandledRejection', onUnhandled)
  t.deepEqual(unhandled, [])
})

test('runEager with null options, and plan: observe with a size that is no size, fail typed', async (t) => {
  const g = await gpu()
  const x = new Uint32Array(64)
  const { outputs } = await g.runEager(GRAPH, { x }, null as never)
  t.deepEqual(Array.from(outputs.y.slice(0, 2)), [1, 1])
  await t.throwsAsync(g.runEager(GRAPH, { x }, 5 as never), { code: 'INVALID_ARGUMENT' })
  const bad: Graph = { ...GRAPH, tensors: [{ ...GRAPH.tensors[0], size: -1 }, GRAPH.tensors[1]] }
  await t.throwsAsync(g.compile(bad, { plan: 'observe' }), { code: 'INVALID_ARGUMENT', message: /size/ })
  await t.throwsAsync(g.compile({ ...GRAPH, tensors: {} } as never, { plan: 'observe' }), { instanceOf: WgallocError })
})

// Core defects the fuzzers found (their flags in __test__/fuzz/known.ts are now off).
test('core: no public constructors; cross-device recordStream refused; release frees uniforms; idle stream after loss', async (t) => {
  t.throws(() => new (Gpu as unknown as new () => Gpu)(), { instanceOf: WgallocError, code: 'INVALID_ARGUMENT', message: /Gpu\.request\(\)/ })
  t.throws(() => new (DeviceBlock as unknown as new () => DeviceBlock)(), { instanceOf: WgallocError, code: 'INVALID_ARGUMENT', message: /heap\.malloc\(\)/ })
  t.throws(() => (DeviceBlock as unknown as () => DeviceBlock)(), { instanceOf: TypeError }, 'a class called without new, as JS refuses it')
  const g = await gpu()
  const other = await Gpu.request()
  const block = g.heap.malloc(256)
  t.throws(() => block.recordStream(other.createStream()), { instanceOf: WgallocError, code: 'INVALID_ARGUMENT' })
  block.free()
  // A device of its own: tests of this file run concurrently on the shared one.
  const mine = await Gpu.request()
  const before = mine.heap.stats().activeBlocks.current
  // The op's uniform needs a kernel that declares one.
  const withUniform = ADD.replace('b[g.x] = a[g.x] + 1u;', 'b[g.x] = a[g.x] + u.add;') + '\nstruct U { add: u32 }\n@group(0) @binding(2) var<uniform> u: U;'
  const exe = await mine.compile({ ...GRAPH, kernels: { k: { source: withUniform } }, ops: [{ ...GRAPH.ops[0], params: new Uint8Array(16) }] })
  t.true(mine.heap.stats().activeBlocks.current > before)
  exe.release()
  t.is(mine.heap.stats().activeBlocks.current, before, 'slabs, constants and uniforms all go back')
  mine.destroy()
  const idle = other.createStream()
  other.destroy()
  await t.throwsAsync(idle.synchronize(), { instanceOf: WgallocError, code: 'DEVICE_LOST' })
})

test('core: checkPlan accepts an op that writes a view of a live tensor', async (t) => {
  const graph = chain(2)
  const y = graph.tensors.find((x) => x.id === 'y')!
  y.viewOf = 't0'
  const g = await gpu()
  const exe = await g.compile(graph, {
    params: Object.fromEntries(graph.tensors.filter((x) => x.kind === 'param').map((x) => [x.id, new Uint8Array(x.size as number)])),
  })
  const inputs = Object.fromEntries(graph.tensors.filter((x) => x.kind === 'input').map((x) => [x.id, new Uint8Array(x.size as number).fill(1)]))
  const checked = await exe.run(inputs, { checkPlan: true })
  const plain = await exe.run(inputs)
  t.deepEqual(Buffer.from(checked.outputs.y.buffer), Buffer.from(plain.outputs.y.buffer))
  exe.release()
})

test('core: an input, param or external tensor that is a view is refused at compile (a run panicked on it)', async (t) => {
  const g = await gpu()
  const w = new Float32Array(64).fill(0.25)
  const x = Float32Array.from({ length: 64 }, (_, i) => i)
  for (const [id, base] of [
    ['x', 'w'],
    ['w', 'x'],
  ]) {
    const graph = chain(1)
    graph.tensors.find((d) => d.id === id)!.viewOf = base
    const kind = graph.tensors.find((d) => d.id === id)!.kind
    const refusal = { instanceOf: WgallocError, code: 'INVALID_ARGUMENT', message: new RegExp(`${kind} tensor '${id}' cannot be a view`) }
    await t.throwsAsync(g.compile(graph, { params: { w } }), refusal)
    await t.throwsAsync(g.runEager(graph, { x }, { params: { w } }), refusal)
  }
})

test('a panic napi-rs caught in a background task reaches the caller as INTERNAL, typed', (t) => {
  // The facade's error mapping (internal module): napi-rs rejects with GenericFailure.
  const { toWgallocError } = require('../dist/errors.js') as { toWgallocError: (err: unknown, native?: boolean) => unknown }
  const caught = Object.assign(new Error('Panic in async function'), { code: 'GenericFailure' })
  const mapped = toWgallocError(caught, true) as WgallocError
  t.true(mapped instanceof WgallocError)
  t.is(mapped.code, 'INTERNAL')
  t.is(mapped.cause, caught)
  // Every wgalloc error carries a code, so an uncoded failure out of a native call is a caught
  // panic too; one that did not come out of a native call is left as it is.
  const other = Object.assign(new Error('something else'), { code: 'GenericFailure' })
  t.is((toWgallocError(other, true) as WgallocError).code, 'INTERNAL')
  t.is(toWgallocError(other, false), other, 'failures from elsewhere are left as they are')
})

test('stress: a detached typed array inside a graph is INVALID_ARGUMENT, not a TypeError', async (t) => {
  const g = await gpu()
  const empty = new Uint8Array(0)
  structuredClone(empty.buffer, { transfer: [empty.buffer] })
  await t.throwsAsync(g.compile([empty] as never), { instanceOf: WgallocError, code: 'INVALID_ARGUMENT' })
  t.throws(() => g.heap.malloc(16).write(empty), { instanceOf: WgallocError, code: 'INVALID_ARGUMENT' })
})

test('stress: a copy into a freed download block is USE_AFTER_FREE before any range check', async (t) => {
  const g = await gpu()
  const down = g.host.alloc(1, { direction: 'download' })
  const block = g.heap.malloc(1)
  down.free()
  t.throws(() => g.createStream().copy(block, down, { size: 4 }), { instanceOf: WgallocError, code: 'USE_AFTER_FREE' })
  block.free()
})
