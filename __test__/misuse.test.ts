// Regression tests for misuse found by probing the public API as a careless or hostile caller
// would: signal-like objects that lack a method, graph dtypes that are no dtype, a shape cache
// released while it compiles, a heap listener that allocates from the scope being charged,
// integers the native layer would wrap, a trace nested too deep to serialise, Proxies of typed
// arrays and an options getter that throws after the block would have been allocated.
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import test from 'ava'
import { Registry } from 'prom-client'
import { Gpu, type Graph, planMemory, renderHtml, replayHistory, WgallocError } from 'wgalloc'
import { registerMetrics } from 'wgalloc/metrics'
import { runNode as node } from './helpers.js'

const DOUBLE = `
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) { if (g.x < arrayLength(&y)) { y[g.x] = x[g.x] * 2.0; } }`

// Each test opens its own device (not the file's shared one): they add listeners and destroy it.

function doubling(outputDtype: string, outputSize = 256): Graph {
  return {
    kernels: { double: { source: DOUBLE } },
    tensors: [
      { id: 'x', size: 256, kind: 'input', dtype: 'f32' },
      { id: 'y', size: outputSize, kind: 'output', dtype: outputDtype as never },
    ],
    ops: [{ kernel: 'double', inputs: ['x'], outputs: ['y'], dispatch: [1] }],
  }
}

test('a signal-like object without removeEventListener is refused, never an uncaught exception', async (t) => {
  const gpu = await Gpu.request()
  t.teardown(() => gpu.destroy())
  const signal = { aborted: false, addEventListener() {} } as never
  const block = gpu.heap.malloc(64)
  await t.throwsAsync(block.read(0, 16, { signal }), { instanceOf: WgallocError, code: 'INVALID_ARGUMENT' })
  await t.throwsAsync(planMemory([{ id: 'a', size: 4, first: 0, last: 0 }], { signal }), { code: 'INVALID_ARGUMENT' })
  // One whose removeEventListener throws: the call settles with its result.
  const throwing = {
    aborted: false,
    addEventListener() {},
    removeEventListener: () => {
      throw new Error('no')
    },
  } as never
  const bytes = await block.read(0, 16, { signal: throwing })
  t.is(bytes.byteLength, 16)
  const plan = await planMemory([{ id: 'a', size: 4, first: 0, last: 0 }], { signal: throwing })
  t.is(plan.slabSize, 4)
  // And one whose addEventListener throws: typed, and the block stays usable.
  const refusing = {
    aborted: false,
    addEventListener: () => {
      throw new Error('no')
    },
    removeEventListener() {},
  } as never
  await t.throwsAsync(block.read(0, 16, { signal: refusing }), { code: 'INVALID_ARGUMENT', message: /addEventListener threw/ })
  block.free()
})

test('a graph dtype must be one of the element types and divide its tensor', async (t) => {
  const gpu = await Gpu.request()
  t.teardown(() => gpu.destroy())
  for (const dtype of ['toString', 'constructor', '__proto__', 'f64', 'F32', 'bytes']) {
    await t.throwsAsync(gpu.compile(doubling(dtype)), { code: 'INVALID_ARGUMENT', message: /dtype: expected one of f32, .*; unknown dtype/ }, dtype)
  }
  // 258 bytes would come back as 64 floats, two bytes dropped.
  await t.throwsAsync(gpu.compile(doubling('f32', 258)), {
    code: 'INVALID_ARGUMENT',
    message: /tensors\[1\]: expected a whole number of f32 elements \(4 bytes each\), got 258 bytes/,
  })
  const exe = await gpu.compile(doubling('f32'))
  const { outputs } = await exe.run({ x: new Float32Array(64).fill(1.5) })
  t.true(outputs.y instanceof Float32Array)
  t.is(outputs.y[63], 3)
  exe.release()
})

test('a shape executor released while its first shape compiles keeps nothing', async (t) => {
  const gpu = await Gpu.request()
  t.teardown(() => gpu.destroy())
  const before = gpu.heap.stats().allocatedBytes.current
  // Distinct kernels make the compile slow enough for release() to land while it runs.
  const n = 24
  const kernels: Graph['kernels'] = {}
  for (let j = 0; j < n; j++) kernels[`k${j}`] = { source: DOUBLE.replace('* 2.0', `* ${j}.0`) }
  const graph: Graph = {
    dims: ['n'],
    kernels,
    tensors: Array.from({ length: n + 1 }, (_, j) => ({
      id: `t${j}`,
      size: 'n * 256',
      kind: j === 0 ? ('input' as const) : j === n ? ('output' as const) : ('intermediate' as const),
    })),
    ops: Array.from({ length: n }, (_, j) => ({ kernel: `k${j}`, inputs: [`t${j}`], outputs: [`t${j + 1}`], dispatch: ['n'] as [string] })),
  }
  const shapes = gpu.compileShapes(graph)
  const pending = shapes.run({ n: 1 }, { t0: new Float32Array(64) }).then(
    () => 'ran',
    (e: WgallocError) => e.code,
  )
  shapes.release()
  await pending
  t.is(shapes.stats().cached, 0)
  t.is(shapes.stats().deviceBytes, 0)
  t.is(gpu.heap.stats().allocatedBytes.current, before, 'the compiled slabs went back to the heap')
})

test('a heap listener that allocates from the scope being charged cannot take it past its limit', async (t) => {
  const gpu = await Gpu.request()
  t.teardown(() => gpu.destroy())
  const scope = gpu.heap.scope({ name: 'tenant', limit: 1024 })
  let inner: unknown
  const hook = () => {
    if (inner !== undefined) return
    try {
      inner = scope.malloc(600)
    } catch (err) {
      inner = err
    }
  }
  gpu.heap.on('ALLOCATED', hook)
  gpu.heap.on('RECYCLED', hook)
  const outer = scope.malloc(600)
  t.true(inner instanceof WgallocError && inner.code === 'QUOTA_EXCEEDED', `the nested malloc gave ${String(inner)}`)
  t.is(scope.stats().allocatedBytes, outer.size)
  t.true(scope.stats().allocatedBytes <= 1024)
  outer.free()
  t.is(scope.stats().allocatedBytes, 0)
})

test('integers the native layer reads as u32 are checked, not wrapped', async (t) => {
  const gpu = await Gpu.request()
  t.teardown(() => gpu.destroy())
  const source = DOUBLE.replace('var<storage, read> x', 'var<storage, read_write> x')
  for (const bindings of [2 ** 32 + 2, 1.5, -1, Number.NaN]) {
    t.throws(() => gpu.createKernel({ source, bindings }), { code: 'INVALID_ARGUMENT', message: /bindings: expected an integer/ }, String(bindings))
  }
  const kernel = gpu.createKernel({ source, bindings: 2 })
  const x = gpu.heap.malloc(256)
  const y = gpu.heap.malloc(256)
  const stream = gpu.createStream()
  for (const wg of [2 ** 32 + 1, 1.5, 0.5, Number.NaN, Number.POSITIVE_INFINITY, [1, 1.5], '1']) {
    t.throws(() => stream.dispatch(kernel, [x, y], wg as never), { code: 'INVALID_ARGUMENT', message: /workgroups/ }, JSON.stringify(wg))
  }
  for (const capacity of [-1, 0, 1.5, 2 ** 32 + 1]) {
    t.throws(() => gpu.compileShapes(doubling('f32'), { capacity }), { code: 'INVALID_ARGUMENT', message: /capacity/ }, String(capacity))
  }
  x.free()
  y.free()
})

test('the CLI refuses a trace nested too deep to serialise, an unknown flag and a flag without its value, typed', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'wgalloc-deep-'))
  const file = join(dir, 'deep.json')
  writeFileSync(file, `{"events":[${'['.repeat(20_000)}${']'.repeat(20_000)}]}`)
  for (const args of [
    ['replay', file],
    ['replay', '--simulate', file],
    ['plan', '--bogus', file],
    ['plan', '--strategy'],
  ]) {
    const r = await node([join(__dirname, '..', 'dist', 'cli.js'), ...args])
    t.is(r.code, 1, args.join(' '))
    t.regex(r.stderr, /\[INVALID_ARGUMENT\]/, args.join(' '))
  }
})

test('a Proxy of a typed array or buffer is refused typed, never written as nothing', async (t) => {
  const gpu = await Gpu.request()
  t.teardown(() => gpu.destroy())
  const block = gpu.heap.malloc(16)
  for (const data of [new Proxy(new Uint8Array(4), {}), new Proxy(new ArrayBuffer(4), {}), new Proxy(new Float32Array(2), {})]) {
    t.throws(() => block.write(data), { instanceOf: WgallocError, code: 'INVALID_ARGUMENT' }, Object.prototype.toString.call(data))
  }
  block.write(new Float32Array([1, 2]))
  t.deepEqual(Array.from(await block.read(0, 8, { as: Float32Array })), [1, 2])
  block.free()
})

test('a malloc option getter that throws leaves no block behind', async (t) => {
  const gpu = await Gpu.request()
  t.teardown(() => gpu.destroy())
  const before = gpu.heap.stats().activeBlocks.current
  const options = {
    get shape(): number[] {
      throw new Error('no shape')
    },
  }
  t.throws(() => gpu.heap.malloc(64, options), { message: 'no shape' })
  t.is(gpu.heap.stats().activeBlocks.current, before)
})

test('the native-only options (records, raw heap slots and block ids) cannot be passed through compile or run', async (t) => {
  const gpu = await Gpu.request()
  t.teardown(() => gpu.destroy())
  const add = `
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) { if (g.x < arrayLength(&y)) { y[g.x] = a[g.x] + b[g.x]; } }`
  // y = 2x + x: records that put x, h and y at one offset would give 4x.
  const graph: Graph = {
    kernels: { double: { source: DOUBLE }, add: { source: add } },
    tensors: [
      { id: 'x', size: 256, kind: 'input', dtype: 'f32' },
      { id: 'h', size: 256, dtype: 'f32' },
      { id: 'y', size: 256, kind: 'output', dtype: 'f32' },
    ],
    ops: [
      { kernel: 'double', inputs: ['x'], outputs: ['h'], dispatch: [1] },
      { kernel: 'add', inputs: ['h', 'x'], outputs: ['y'], dispatch: [1] },
    ],
  }
  const records = JSON.stringify(['x', 'h', 'y'].map((id, i) => ({ id, size: 256, first: i, last: i })))
  // Not options of the public API: refused by name, so none reaches the native call.
  await t.throwsAsync(gpu.compile(graph, { recordsJson: records } as never), { code: 'INVALID_ARGUMENT', message: /options\.recordsJson/ })
  const exe = await gpu.compile(graph)
  const x = new Float32Array(64).map((_, i) => i)
  for (const options of [{ heapSlot: 2 ** 32 }, { deviceInputs: { x: 1 } }]) {
    await t.throwsAsync(exe.run({ x }, options as never), { code: 'INVALID_ARGUMENT', message: /options\.(heapSlot|deviceInputs)/ })
  }
  const { outputs } = await exe.run({ x })
  t.deepEqual(
    Array.from(outputs.y as Float32Array),
    Array.from(x, (v) => v * 3),
  )
  exe.release()
})

test('a panic in a native call comes back as an INTERNAL error, and the process goes on', (t) => {
  const binding = require('../dist/binding.js') as { panicForTests: (message: string) => void }
  const { toWgallocError } = require('../dist/errors.js') as { toWgallocError: (err: unknown, native?: boolean) => unknown }
  const err = t.throws(() => binding.panicForTests('boom'))
  const typed = toWgallocError(err, true)
  t.true(typed instanceof WgallocError, String(typed))
  t.is((typed as WgallocError).code, 'INTERNAL')
  t.regex((typed as WgallocError).message, /panicked in a native call \(boom\)/)
})

test('a memory snapshot whose history ring wrapped still renders; a free twice in the window is still refused', async (t) => {
  const gpu = await Gpu.request()
  t.teardown(() => gpu.destroy())
  const heap = gpu.heap
  heap.recordHistory({ maxEntries: 100 })
  const kept = []
  for (let i = 0; i < 300; i++) {
    const b = heap.malloc(256 + i)
    if (i % 7 === 0) kept.push(b)
    else b.free()
  }
  const snapshot = JSON.parse(JSON.stringify(heap.memorySnapshot())) as { history: { action: string; blockId?: number }[] }
  t.true(snapshot.history.length <= 100)
  const html = renderHtml(snapshot)
  t.regex(html, /begins mid-run/)
  // Every block still live is drawn, those allocated before the window too.
  for (const b of kept) t.true(html.includes(`block ${b.id}`), `block ${b.id}`)
  const allocated = new Set(snapshot.history.filter((e) => e.action === 'alloc').map((e) => e.blockId))
  const freed = snapshot.history.find((e) => e.action === 'free' && allocated.has(e.blockId))!
  const twice = { ...snapshot, history: [...snapshot.history, freed] }
  t.throws(() => renderHtml(twice), { code: 'INVALID_ARGUMENT', message: /freed twice/ })
  for (const b of kept) b.free()
})

test('replayHistory refuses an id allocated twice (no leak) and a heap that is recording (its recording goes on)', async (t) => {
  const gpu = await Gpu.request()
  t.teardown(() => gpu.destroy())
  const heap = gpu.heap
  const trace = {
    events: [
      { op: 'alloc' as const, id: 'a', size: 100 },
      { op: 'alloc' as const, id: 'a', size: 300 },
    ],
  }
  t.throws(() => replayHistory(heap, trace), { code: 'INVALID_ARGUMENT', message: /trace event 1\.id: expected an id not live/ })
  t.is(heap.stats().activeBlocks.current, 0)
  heap.recordHistory({ maxEntries: 50 })
  heap.malloc(128).free()
  t.throws(
    () =>
      replayHistory(heap, {
        events: [
          { op: 'alloc', id: 1, size: 8 },
          { op: 'free', id: 1 },
        ],
      }),
    { code: 'INVALID_ARGUMENT', message: /recording/ },
  )
  t.true(heap.recordingHistory)
  t.is(heap.memorySnapshot().history.filter((e) => e.action === 'alloc').length, 1)
})

test('registerMetrics takes a device named heap as a device, and refuses what is no Gpu', async (t) => {
  const gpu = await Gpu.request()
  t.teardown(() => gpu.destroy())
  const registry = new Registry()
  registerMetrics({ heap: gpu }, { registry })
  const block = gpu.heap.malloc(4096)
  t.regex(await registry.metrics(), /wgalloc_heap_allocated_bytes\{[^}]*device="heap"[^}]*\} 4096/)
  block.free()
  t.throws(() => registerMetrics({ heap: {} } as never, { registry: new Registry() }), { code: 'INVALID_ARGUMENT' })
})

test('heap scopes nested deeper than the JS stack still name, list and dispose', async (t) => {
  const gpu = await Gpu.request()
  t.teardown(() => gpu.destroy())
  const root = gpu.heap.scope({ name: 'root', limit: 1 << 30 })
  let leaf = root
  for (let i = 0; i < 20_000; i++) leaf = leaf.scope({ name: 'n', limit: 1 << 30 })
  t.true(leaf.path.startsWith('root/n/n/'))
  t.is(leaf.path.split('/').length, 20_001)
  t.is(gpu.heap.scopes().length, 20_001)
  root.dispose()
  t.true(leaf.disposed)
  t.throws(() => root.malloc(64), { code: 'INVALID_ARGUMENT' })
})

test('the viewer refuses BigInt input typed', (t) => {
  t.throws(() => renderHtml({ events: [{ op: 'alloc', id: 1n, size: 5 }] }), { instanceOf: WgallocError, code: 'INVALID_ARGUMENT' })
  t.throws(() => renderHtml({ events: [] }, { title: 1n as never }), { instanceOf: WgallocError, code: 'INVALID_ARGUMENT' })
})

test('profiler counters in the metrics never go down when the profiler stats start again', async (t) => {
  const gpu = await Gpu.request()
  t.teardown(() => gpu.destroy())
  const registry = new Registry()
  registerMetrics(gpu, { registry })
  const exe = await gpu.compile(doubling('f32'))
  const x = new Float32Array(64)
  const runs = async () => {
    const line = (await registry.metrics()).split('\n').find((l) => l.startsWith('wgalloc_profiler_kernel_runs_total{'))
    return Number(line?.split(' ').pop() ?? 0)
  }
  await gpu.profiler.profile(() => exe.run({ x }))
  await gpu.profiler.profile(() => exe.run({ x }))
  const before = await runs()
  t.true(before >= 2, `runs ${before}`)
  gpu.profiler.resetStats()
  await gpu.profiler.profile(() => exe.run({ x }))
  t.is(await runs(), before + 1)
  exe.release()
})

// Third probe: serving execution and the host cache.

test('an aborted run with outputs on the device leaves no output block behind', async (t) => {
  const gpu = await Gpu.request()
  t.teardown(() => gpu.destroy())
  const exe = await gpu.compile(doubling('f32'))
  const shapes = gpu.compileShapes({ ...doubling('f32'), dims: ['n'], tensors: doubling('f32').tensors.map((x) => ({ ...x, size: 'n * 256' })) })
  const x = new Float32Array(64).fill(1)
  await shapes.run({ n: 1 }, { x }) // compiled, so the aborted runs below allocate only their outputs
  const before = gpu.heap.stats().allocatedBytes.current
  let aborted = 0
  for (let i = 0; i < 6; i++) {
    const ac = new AbortController()
    const runs = [exe.run({ x }, { signal: ac.signal, outputs: 'device' }), shapes.run({ n: 1 }, { x }, { signal: ac.signal, outputs: 'device' })]
    ac.abort()
    for (const r of await Promise.allSettled(runs)) if (r.status === 'rejected' && WgallocError.is(r.reason, 'ABORTED')) aborted++
    // The runs end after their callers gave up (the next runs queue behind them); their output
    // blocks then go back.
    await exe.run({ x })
    await shapes.run({ n: 1 }, { x })
    t.is(gpu.heap.stats().allocatedBytes.current, before, `try ${i}`)
  }
  t.is(aborted, 12)
  // A block the caller gave in outputsInto stays the caller's.
  const mine = gpu.heap.malloc(256)
  const ac = new AbortController()
  const late = exe.run({ x }, { signal: ac.signal, outputsInto: { y: mine } })
  ac.abort()
  await t.throwsAsync(late, { code: 'ABORTED' })
  await new Promise((r) => setTimeout(r, 100))
  t.false(mine.freed)
  t.deepEqual(Array.from(new Float32Array((await mine.read()).buffer)), Array(64).fill(2))
})

test('release() right after run() lets that run complete; runs after it are USE_AFTER_FREE', async (t) => {
  const gpu = await Gpu.request()
  t.teardown(() => gpu.destroy())
  const before = gpu.heap.stats().allocatedBytes.current
  const x = new Float32Array(64).map((_, i) => i)
  for (let i = 0; i < 10; i++) {
    const exe = await gpu.compile(doubling('f32'))
    const run = exe.run({ x })
    exe.release()
    t.is(exe.deviceBytes, 0)
    t.deepEqual(
      Array.from((await run).outputs.y as Float32Array),
      Array.from(x, (v) => v * 2),
      `try ${i}`,
    )
    await t.throwsAsync(exe.run({ x }), { code: 'USE_AFTER_FREE' })
  }
  t.is(gpu.heap.stats().allocatedBytes.current, before, 'each executor gave its slabs back once its run ended')
})

test("a tensor named '__proto__' is refused, and ids are never looked up on a prototype", async (t) => {
  const gpu = await Gpu.request()
  t.teardown(() => gpu.destroy())
  const graph = doubling('f32')
  graph.tensors[1].id = '__proto__'
  graph.ops[0].outputs = ['__proto__']
  await t.throwsAsync(gpu.compile(graph), { code: 'INVALID_ARGUMENT', message: /'__proto__' cannot name a tensor/ })
  // An input id the graph lacks that names a prototype member is refused as unknown, not found.
  const exe = await gpu.compile(doubling('f32'))
  t.teardown(() => exe.release())
  await t.throwsAsync(exe.run({ x: new Float32Array(64), constructor: new Float32Array(64) }), { code: 'INVALID_ARGUMENT', message: /constructor/ })
})

test('two outputs written into one block are refused before anything runs', async (t) => {
  const gpu = await Gpu.request()
  t.teardown(() => gpu.destroy())
  const graph: Graph = {
    kernels: { double: { source: DOUBLE } },
    tensors: [
      { id: 'x', size: 256, kind: 'input', dtype: 'f32' },
      { id: 'a', size: 256, kind: 'output', dtype: 'f32' },
      { id: 'b', size: 256, kind: 'output', dtype: 'f32' },
    ],
    ops: [
      { kernel: 'double', inputs: ['x'], outputs: ['a'], dispatch: [1] },
      { kernel: 'double', inputs: ['a'], outputs: ['b'], dispatch: [1] },
    ],
  }
  const exe = await gpu.compile(graph)
  t.teardown(() => exe.release())
  const block = gpu.heap.malloc(256)
  block.write(new Uint8Array(256).fill(5))
  await t.throwsAsync(exe.run({ x: new Float32Array(64) }, { outputsInto: { a: block, b: block } }), {
    code: 'INVALID_ARGUMENT',
    message: /outputs 'a' and 'b' are given the same block/,
  })
  t.deepEqual(new Uint8Array(await block.read()), new Uint8Array(256).fill(5), 'nothing was written')
})

test('a mistyped argument says what was expected', async (t) => {
  const gpu = await Gpu.request()
  t.teardown(() => gpu.destroy())
  t.throws(() => gpu.host.alloc('64' as never), {
    code: 'INVALID_ARGUMENT',
    message: /^argument: expected a number, got a string; an argument has the wrong type/,
  })
  t.throws(() => gpu.host.alloc(64, { direction: 7 } as never), { code: 'INVALID_ARGUMENT', message: /direction: expected a string, got 7/ })
})

test('a bad WGALLOC_* setting fails Gpu.request, naming the variable', async (t) => {
  const entry = JSON.stringify(require.resolve('..'))
  const script = `
    const { Gpu } = require(${entry})
    Gpu.request().then(
      (gpu) => { console.log('opened ' + gpu.heap.lowWatermarkRatio); gpu.destroy() },
      (e) => console.log(e.code + ': ' + e.message),
    )`
  const open = async (env: Record<string, string>) => (await node(['-e', script], { env })).stdout.trim()
  t.regex(await open({ WGALLOC_HIGH_WATERMARK_RATIO: 'abc' }), /^INVALID_ARGUMENT: WGALLOC_HIGH_WATERMARK_RATIO: expected a number, got "abc"/)
  // Both given, low above high: refused (it was lowered to the high ratio without a word).
  t.regex(
    await open({ WGALLOC_HIGH_WATERMARK_RATIO: '1.0', WGALLOC_LOW_WATERMARK_RATIO: '1.9' }),
    /^INVALID_ARGUMENT: WGALLOC_LOW_WATERMARK_RATIO: expected a low watermark ratio between 0/,
  )
  // Only the high one lowered: the default low one follows it down.
  t.is(await open({ WGALLOC_HIGH_WATERMARK_RATIO: '0.5' }), 'opened 0.5')
  t.regex(await open({ WGALLOC_DEBUG_ALLOCATOR: 'abc' }), /^INVALID_ARGUMENT: WGALLOC_DEBUG_ALLOCATOR: expected a bit mask such as 3 or 0x1f, got "abc"/)
  t.regex(await open({ WGALLOC_HOST_ZERO_COPY: 'maybe' }), /^INVALID_ARGUMENT: WGALLOC_HOST_ZERO_COPY: expected a flag: 1 or 0, got 'maybe'/)
})

// Fourth probe: the heap, the planner, the CLI and the entry points.

test('the CLI refuses a run count that is no positive integer, and a .json plan input that is no records', async (t) => {
  const cli = join(__dirname, '..', 'dist', 'cli.js')
  const dir = mkdtempSync(join(tmpdir(), 'wgalloc-cli-'))
  const graph = join(dir, 'g.json')
  writeFileSync(graph, JSON.stringify(doubling('f32')))
  for (const runs of ['0', 'abc', 'NaN', 'Infinity', '1.5']) {
    const r = await node([cli, 'check', graph, '--runs', runs])
    t.is(r.code, 1, runs)
    t.regex(r.stderr, /\[INVALID_ARGUMENT\] --runs: expected a positive integer/, runs)
  }
  for (const text of ['', 'null', '5', '"str"']) {
    const file = join(dir, 'records.json')
    writeFileSync(file, text)
    const r = await node([cli, 'plan', file])
    t.is(r.code, 1, `'${text}'`)
    t.regex(r.stderr, /\[PARSE_ERROR\] .*records\.json: expected a JSON array of usage records/, `'${text}'`)
  }
})

test('a CSV of records may start with a byte-order mark', async (t) => {
  const plan = await planMemory('\uFEFFid,lower,upper,size\na,0,2,8\nb,1,3,8\n')
  t.is(plan.slabSize, 16)
})

test('an OUT_OF_MEMORY or ALLOCATION_FAILED listener that mallocs from a full heap is not called again for its own failure', async (t) => {
  const gpu = await Gpu.request({ memoryBudget: 8 << 20 })
  t.teardown(() => gpu.destroy())
  const heap = gpu.heap
  heap.setHighWatermarkRatio(1)
  const held = heap.malloc(6 << 20)
  const calls = { oom: 0, failed: 0 }
  const codes: string[] = []
  const tryMalloc = () => {
    try {
      heap.malloc(4 << 20).free()
    } catch (e) {
      codes.push((e as WgallocError).code)
    }
  }
  const offOom = heap.on('OUT_OF_MEMORY', () => {
    calls.oom++
    tryMalloc()
  })
  const offFailed = heap.on('ALLOCATION_FAILED', () => {
    calls.failed++
    tryMalloc()
  })
  const oomsBefore = heap.stats().ooms
  t.throws(() => heap.malloc(4 << 20), { code: 'OUT_OF_MEMORY' })
  // Each is called for the user's malloc and for the other listener's (never for its own): it
  // was called without end, 1,343 OOMs deep, until the stack overflowed.
  t.true(calls.oom >= 1 && calls.oom <= 4, `OUT_OF_MEMORY listener called ${calls.oom} times`)
  t.true(calls.failed >= 1 && calls.failed <= 4, `ALLOCATION_FAILED listener called ${calls.failed} times`)
  t.true(
    codes.every((c) => c === 'OUT_OF_MEMORY'),
    codes.join(),
  )
  t.true(heap.stats().ooms - oomsBefore <= 32, `${heap.stats().ooms - oomsBefore} OOMs`)
  offOom()
  offFailed()
  held.free()
  t.notThrows(() => heap.malloc(4 << 20).free())
})

test("scope names cannot hold '/', a failed malloc does not raise a scope's peak, and a disabled low watermark leaves Infinity headroom", async (t) => {
  const gpu = await Gpu.request({ memoryBudget: 8 << 20 })
  t.teardown(() => gpu.destroy())
  const heap = gpu.heap
  t.throws(() => heap.scope({ name: 'a/b', limit: 1 << 20 }), { code: 'INVALID_ARGUMENT', message: /a name without '\/'/ })
  heap.setHighWatermarkRatio(0.5)
  const scope = heap.scope({ name: 'jobs', limit: 8 << 20 })
  t.throws(() => scope.malloc(6 << 20), { code: 'OUT_OF_MEMORY' })
  t.is(scope.stats().peakAllocatedBytes, 0)
  scope.malloc(1 << 20).free()
  t.is(scope.stats().peakAllocatedBytes, 1 << 20)
  heap.setLowWatermarkRatio(0)
  t.is(heap.lowWatermarkHeadroom, Number.POSITIVE_INFINITY)
  heap.setLowWatermarkRatio(0.25)
  t.true(Number.isSafeInteger(heap.lowWatermarkHeadroom))
})

test('capacity and capacities for the default space together are refused, not one silently kept', async (t) => {
  const records = [
    { id: 'a', size: 4, first: 0, last: 1 },
    { id: 'b', size: 4, first: 1, last: 2 },
  ]
  await t.throwsAsync(planMemory(records, { capacity: 100, capacities: { default: 4 } }), {
    code: 'INVALID_ARGUMENT',
    message: /capacity and capacities.default/,
  })
  t.is((await planMemory(records, { capacity: 100 })).slabSize, 8)
})

// Fifth probe: kernels, buffers, the viewer, types against the runtime.

test('graph text that does not parse is PARSE_ERROR, as in planMemory', async (t) => {
  const gpu = await Gpu.request()
  t.teardown(() => gpu.destroy())
  await t.throwsAsync(gpu.compile('{' as never), { code: 'PARSE_ERROR', message: /graph is not valid JSON/ })
  await t.throwsAsync(gpu.runEager('{' as never, {}), { code: 'PARSE_ERROR' })
})

test('a buffer destroyed while a stream holds unsubmitted work on it lets the rest of that work run', async (t) => {
  const gpu = await Gpu.request()
  t.teardown(() => gpu.destroy())
  const s = gpu.createStream()
  const [src, kept, gone] = [gpu.createBuffer(16), gpu.createBuffer(16), gpu.createBuffer(16)]
  gpu.writeBuffer(src, 0, new Uint32Array([1, 2, 3, 4]))
  s.copy(src, kept)
  s.copy(src, gone)
  gone.destroy()
  t.throws(() => s.copy(src, gone), { code: 'USE_AFTER_FREE' })
  // wgpu refused the whole submission (GPU_VALIDATION), so the copy into `kept` never ran.
  await s.synchronize()
  t.deepEqual(Array.from(new Uint32Array((await gpu.readBuffer(kept, 0, 16)).buffer.slice(0))), [1, 2, 3, 4])
})

test('host.configure refuses a setting it does not know; view refuses to write over its input', async (t) => {
  const gpu = await Gpu.request()
  t.teardown(() => gpu.destroy())
  t.throws(() => gpu.host.configure({ maxCacheBytes: 0 } as never), { code: 'INVALID_ARGUMENT', message: /unknown setting 'maxCacheBytes'/ })
  t.notThrows(() => gpu.host.configure({ maxCachedBytes: 1 << 20 }))
  const dir = mkdtempSync(join(tmpdir(), 'wgalloc-view-'))
  const file = join(dir, 't.json')
  const trace = JSON.stringify({
    events: [
      { action: 'alloc', addr: 1, size: 64 },
      { action: 'free', addr: 1 },
    ],
  })
  writeFileSync(file, trace)
  const r = await node([join(__dirname, '..', 'dist', 'cli.js'), 'view', file, '-o', file])
  t.is(r.code, 1)
  t.regex(r.stderr, /\[INVALID_ARGUMENT\] -o: .* names the input/)
  t.is(readFileSync(file, 'utf8'), trace, 'the input is unchanged')
})

test("a memory history's free entries carry the block's bytes and pool, as PyTorch's do", async (t) => {
  const gpu = await Gpu.request()
  t.teardown(() => gpu.destroy())
  gpu.heap.recordHistory({ stacks: false })
  const block = gpu.heap.malloc(1000)
  const { size, pool } = block
  block.free()
  const history = gpu.heap.memorySnapshot().history ?? []
  const free = history.find((e) => e.action === 'free' && e.blockId === block.id)
  t.like(free, { size, pool })
  gpu.heap.recordHistory(false)
})

test('null options mean no options on every call that takes optional options, and a non-object is refused', async (t) => {
  const gpu = await Gpu.request()
  t.teardown(() => gpu.destroy())
  const plan = await planMemory([{ id: 'a', size: 4, first: 0, last: 0 }], null)
  t.is(plan.slabSize, 4)
  t.regex(renderHtml(plan.toJSON(), null), /<html/i)
  const registry = new Registry()
  registerMetrics({ main: gpu }, { registry }).unregister()
  t.notThrows(() => registerMetrics({ main: gpu }, null).unregister())
  t.true(gpu.heap.malloc(64, null as never).size >= 64)
  await t.throwsAsync(planMemory([{ id: 'a', size: 4, first: 0, last: 0 }], 5 as never), { code: 'INVALID_ARGUMENT' })
  t.throws(() => renderHtml(plan.toJSON(), 'dark' as never), { code: 'INVALID_ARGUMENT' })
  t.throws(() => registerMetrics({ main: gpu }, 5 as never), { code: 'INVALID_ARGUMENT' })
})
