// Serving-grade execution from JS: inputs and outputs kept on the GPU (chained executors,
// state in one block across runs), weights shared by executors and workers, and graphs with
// changing shapes, each bit for bit against the plain host path.
import { Worker } from 'node:worker_threads'
import test from 'ava'
import { type Dispatch, type ExecResult, type Graph, type GraphOp, type GraphTensor, type OutputArray, Weights, planMemory } from 'wgalloc'
import { ADD, chain, params } from './graphs.js'
import { gpu } from './helpers.js'

const bytes = (a: ArrayBufferView) => new Uint8Array(a.buffer, a.byteOffset, a.byteLength)
const graphOf = (n: number) => chain(n)
const rowOf = (g: Graph) => Number(g.tensors.find((t) => t.id === 'x')!.size)
const paramsOf = (g: Graph, value: number) => ({ w: new Float32Array(rowOf(g) / 4).fill(value) })

test('two executors chain through a device block: no host round trip, same bytes', async (t) => {
  const dev = await gpu()
  const ga = graphOf(3)
  const gb = graphOf(2)
  const a = await dev.compile(ga, { params: paramsOf(ga, 0.5) })
  const b = await dev.compile(gb, { params: paramsOf(gb, 1.25) })
  const x = new Float32Array(rowOf(ga) / 4).map((_, i) => i * 0.37 - 11)
  const viaHost = (await b.run({ x: Object.values((await a.run({ x })).outputs)[0] })).outputs
  const first = await a.run({ x }, { outputs: 'device' })
  t.deepEqual(Object.keys(first.outputs), [], 'nothing was read back')
  const [name, block] = Object.entries(first.blocks!)[0]
  t.is(block.constructor.name, 'DeviceBlock')
  const chained = (await b.run({ x: block })).outputs
  t.deepEqual(bytes(Object.values(chained)[0]), bytes(Object.values(viaHost)[0]))
  block.free()
  t.true(typeof name === 'string')
  // A freed block is refused, typed, before anything runs.
  await t.throwsAsync(b.run({ x: block }), { code: 'USE_AFTER_FREE' })
  await t.throwsAsync(b.run({ x: {} } as never), { code: 'INVALID_ARGUMENT' })
  await t.throwsAsync(b.run({ x }, { outputs: 'gpu' } as never), { code: 'INVALID_ARGUMENT' })
  a.release()
  b.release()
})

test('decoder-style state stays in one block across 100 runs, equal to the host loop', async (t) => {
  const dev = await gpu()
  const g = graphOf(1)
  const step = await dev.compile(g, { params: paramsOf(g, 1) })
  const x0 = new Float32Array(rowOf(g) / 4).map((_, i) => i * 0.25)
  let host: OutputArray = x0
  for (let i = 0; i < 100; i++) host = Object.values((await step.run({ x: host })).outputs)[0]
  const out = Object.keys((await step.run({ x: x0 })).outputs)[0]
  const state = dev.heap.malloc(x0.byteLength)
  state.write(bytes(x0))
  for (let i = 0; i < 100; i++) {
    const r = await step.run({ x: state }, { outputsInto: { [out]: state } })
    t.is(Object.keys(r.outputs).length, 0)
  }
  t.deepEqual(new Uint8Array(await state.read(0, x0.byteLength)), bytes(host))
  state.free()
  step.release()
})

/** h = x + s; s updated to h + x (external, in place, or a second output fed back); y = h + x. */
function recurrent(external: boolean): Graph {
  const len = 256
  const n = len * 4
  const op = (name: string, inputs: string[], out: string): GraphOp => ({
    name,
    kernel: 'add',
    inputs,
    outputs: [out],
    dispatch: [len / 64],
    params: params(1, len),
  })
  return {
    kernels: { add: { source: ADD } },
    tensors: [
      { id: 'x', size: n, kind: 'input' },
      { id: 's', size: n, kind: external ? 'external' : 'input' },
      ...(external ? [] : ([{ id: 's2', size: n, kind: 'output' }] satisfies GraphTensor[])),
      { id: 'h', size: n },
      { id: 'y', size: n, kind: 'output', dtype: 'f32' },
    ],
    ops: [op('mix', ['x', 's'], 'h'), op('keep', ['h', 'x'], external ? 's' : 's2'), op('emit', ['h', 'x'], 'y')],
  }
}

test('external tensors: state read and written in place across 100 runs, equal to the host loop', async (t) => {
  const dev = await gpu()
  const x = new Float32Array(256).map((_, i) => Math.sin(i) * 3)
  const s0 = new Float32Array(256).map((_, i) => i * 0.125)
  const host = await dev.compile(recurrent(false))
  let s: OutputArray = s0
  const ys: Uint8Array[] = []
  for (let i = 0; i < 100; i++) {
    // Annotated: `s` is narrowed by what the loop assigns it, so its type and the result's depend on each other.
    const { outputs }: ExecResult = await host.run({ x, s })
    s = outputs.s2
    ys.push(bytes(outputs.y))
  }
  host.release()
  const step = await dev.compile(recurrent(true))
  t.true(step.stats().slabBytes < 3 * 1024 + 64, 'x, h and y are planned, the state is not')
  const state = dev.heap.malloc(1024)
  state.write(s0)
  for (let i = 0; i < 100; i++) t.deepEqual(bytes((await step.run({ x, s: state })).outputs.y), ys[i], `run ${i}`)
  t.deepEqual(new Uint8Array(await state.read(0, 1024)), bytes(s))
  t.is(step.stats().bindGroupsCreated, 3, 'the ops binding the state got their bind groups once')
  const plan = (await planMemory(recurrent(true))).toJSON()
  t.false(
    plan.records.some((r) => r.id === 's'),
    'not a slab record',
  )
  t.deepEqual(
    plan.graph!.aliases.find((a) => a.id === 's'),
    { id: 's', region: 'external', base: 's' },
  )
  await t.throwsAsync(step.run({ x }), { code: 'INVALID_ARGUMENT', message: /external tensor 's' needs a DeviceBlock/ })
  await t.throwsAsync(step.run({ x, s: s0 }), { code: 'INVALID_ARGUMENT', message: /host bytes cannot be bound in place/ })
  await t.throwsAsync(dev.runEager(recurrent(true), { x }), { code: 'INVALID_ARGUMENT', message: /compile the graph/ })
  state.free()
  await t.throwsAsync(step.run({ x, s: state }), { code: 'USE_AFTER_FREE' })
  step.release()
})

test('a block freed right after run(), before awaiting it, serves the run; its memory is reused after', async (t) => {
  const dev = await gpu()
  const g = graphOf(1)
  const exe = await dev.compile(g, { params: paramsOf(g, 1) })
  const step = await dev.compile(recurrent(true))
  const n = rowOf(g)
  for (let i = 0; i < 20; i++) {
    const x = dev.heap.malloc(n)
    x.write(new Float32Array(n / 4).fill(2))
    const s = dev.heap.malloc(1024)
    s.write(new Float32Array(256).fill(5))
    const runs = [exe.run({ x }), step.run({ x: new Float32Array(256).fill(1), s })]
    x.free() // both runs still read these: the frees take effect once the runs recorded their work
    s.free()
    t.throws(() => x.write(new Float32Array(1)), { code: 'USE_AFTER_FREE' }, 'freed for the caller at once')
    const other = [dev.heap.malloc(n), dev.heap.malloc(1024)]
    for (const o of other) o.write(new Float32Array(o.requestedSize / 4).fill(100))
    const [a, b] = await Promise.all(runs)
    t.is(a.outputs.y[0], 3)
    t.is(b.outputs.y[0], 7) // h = x + s = 6, y = h + x
    for (const o of other) {
      t.is(new Float32Array((await o.read(0, 16)).buffer)[0], 100, 'reused memory was not written by the runs')
      o.free()
    }
  }
  exe.release()
  step.release()
})

/** What a worker of the shared-weights test posts back. */
interface WorkerReply {
  out?: OutputArray
  constant?: number
  error?: string
}

// Serial: it compares the shared device's allocated bytes before and after, which the other tests
// of this file would move if they ran at the same time.
test.serial('shared weights: one copy for several executors and four workers', async (t) => {
  const dev = await gpu()
  const g = graphOf(3)
  const w = paramsOf(g, 0.75)
  const x = new Float32Array(rowOf(g) / 4).map((_, i) => i)
  const own = await dev.compile(g, { params: w })
  const want = bytes(Object.values((await own.run({ x })).outputs)[0])
  own.release()
  const weights = dev.createWeights(w)
  t.is(weights.deviceBytes, w.w.byteLength)
  const exes = await Promise.all([1, 2].map(() => dev.compile(g, { weights })))
  for (const exe of exes) {
    t.is(exe.stats().constantBytes, 0)
    t.is(exe.stats().sharedWeightBytes, w.w.byteLength)
    t.deepEqual(bytes(Object.values((await exe.run({ x })).outputs)[0]), want)
  }
  const script = `
    const { parentPort, workerData } = require('node:worker_threads')
    const { Gpu, Weights } = require(${JSON.stringify(require.resolve('..'))})
    ;(async () => {
      const gpu = Gpu.attach(workerData.device)
      const exe = await gpu.compile(workerData.graph, { weights: Weights.attach(workerData.weights) })
      const r = await exe.run({ x: workerData.x })
      const constant = exe.stats().constantBytes
      // Released before the message: the parent terminates the worker when it arrives.
      exe.release()
      parentPort.postMessage({ out: Object.values(r.outputs)[0], constant })
    })().catch((e) => parentPort.postMessage({ error: e.code + ' ' + e.message }))`
  const before = dev.heap.stats().allocatedBytes.current
  const results = await Promise.all(
    [0, 1, 2, 3].map(
      () =>
        new Promise<WorkerReply>((resolve, reject) => {
          const worker = new Worker(script, { eval: true, workerData: { device: dev.shareHandle(), weights: weights.shareHandle(), graph: g, x } })
          worker.once('message', (m: WorkerReply) => {
            worker.terminate()
            resolve(m)
          })
          worker.once('error', reject)
        }),
    ),
  )
  for (const r of results) {
    t.is(r.error, undefined)
    t.is(r.constant, 0, 'the worker bound the shared copy')
    t.deepEqual(bytes(r.out!), want)
  }
  t.true(dev.heap.stats().allocatedBytes.current <= before, 'workers added no weight copies that stayed')
  weights.release()
  t.is(weights.deviceBytes, 0)
  t.throws(() => Weights.attach(-1), { code: 'INVALID_ARGUMENT' })
  for (const exe of exes) exe.release()
  // On this thread alone: the last user's release() lets the copy go, without waiting for the
  // garbage collector.
  const solo = dev.createWeights(w)
  const soloHandle = solo.shareHandle()
  const user = await dev.compile(g, { weights: solo })
  solo.release()
  const held = Weights.attach(soloHandle) // the executor still holds the store
  t.is(held.deviceBytes, w.w.byteLength)
  held.release()
  user.release()
  t.throws(() => Weights.attach(soloHandle), { code: 'INVALID_ARGUMENT' })
})

test('changing shapes: one graph, executors per bucket, outputs cut to the asked shape', async (t) => {
  const dev = await gpu()
  const g = graphOf(2)
  const row = rowOf(g)
  const symbolic = structuredClone(g)
  for (const x of symbolic.tensors) if (x.kind !== 'param') x.size = `batch * ${row}`
  for (const op of symbolic.ops) op.dispatch = op.dispatch!.map((d) => `batch * ${d}`) as Dispatch
  symbolic.dims = ['batch']
  const params = paramsOf(g, 0.5)
  const shapes = dev.compileShapes(symbolic, { params, buckets: { batch: [2, 4, 8] }, capacity: 2 })
  t.deepEqual(shapes.dims, ['batch'])
  for (const batch of [1, 3, 3, 8, 2, 5]) {
    const x = new Float32Array((batch * row) / 4).map((_, i) => i % 97)
    const got = Object.values((await shapes.run({ batch }, { x })).outputs)[0]
    const concrete = structuredClone(g)
    for (const t2 of concrete.tensors) if (t2.kind !== 'param') t2.size = batch * row
    for (const op of concrete.ops) op.dispatch = op.dispatch!.map((d) => batch * Number(d)) as Dispatch
    const exe = await dev.compile(concrete, { params })
    t.deepEqual(bytes(got), bytes(Object.values((await exe.run({ x })).outputs)[0]), `batch ${batch}`)
    exe.release()
  }
  t.deepEqual(shapes.shapeOf({ batch: 3 }), { batch: 4 })
  const s = shapes.stats()
  t.is(s.hits + s.misses, 6)
  t.true(s.cached <= 2)
  await t.throwsAsync(shapes.run({ batch: 9 }, { x: new Float32Array((9 * row) / 4) }), { code: 'INVALID_ARGUMENT' })
  await t.throwsAsync(shapes.run({ rows: 1 }, { x: new Float32Array(row / 4) }), { code: 'INVALID_ARGUMENT' })
  t.throws(() => dev.compileShapes(g), { code: 'INVALID_ARGUMENT' }, 'a graph without dims')
  shapes.clear()
  t.is(shapes.stats().deviceBytes, 0)
  // clear() keeps it usable; release() ends it, as executor.release() does.
  await shapes.run({ batch: 1 }, { x: new Float32Array(row / 4) })
  t.false(shapes.released)
  shapes.release()
  t.true(shapes.released)
  t.is(shapes.stats().deviceBytes, 0)
  await t.throwsAsync(shapes.run({ batch: 1 }, { x: new Float32Array(row / 4) }), { code: 'USE_AFTER_FREE' })
  shapes.release()
})

test('changing shapes: a device input below its bucket is padded with zeros, as host bytes are', async (t) => {
  const dev = await gpu()
  // y = x row by row; `last` = the bucket's last row, which a run below the bucket must see as zeros.
  const source = `@group(0) @binding(0) var<storage, read> x: array<u32>;
@group(0) @binding(1) var<storage, read_write> y: array<u32>;
@group(0) @binding(2) var<storage, read_write> last: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  let n = arrayLength(&x);
  if (g.x < n) { y[g.x] = x[g.x]; }
  if (g.x < 16u) { last[g.x] = x[n - 16u + g.x]; }
}`
  const graph: Graph = {
    dims: ['batch'],
    kernels: { k: { source } },
    tensors: [
      { id: 'x', size: 'batch * 64', kind: 'input', dtype: 'u32' },
      { id: 'y', size: 'batch * 64', kind: 'output', dtype: 'u32' },
      { id: 'last', size: 64, kind: 'output', dtype: 'u32' },
    ],
    ops: [{ kernel: 'k', inputs: ['x'], outputs: ['y', 'last'], dispatch: ['batch'] }],
  }
  const shapes = dev.compileShapes(graph, { buckets: { batch: [4] } })
  const full = await shapes.run({ batch: 4 }, { x: new Uint32Array(64).fill(7) })
  t.deepEqual([...full.outputs.last], new Array(16).fill(7), 'the slab now holds non-zero rows')
  const rows = new Uint32Array(48).fill(5)
  const block = dev.heap.malloc(rows.byteLength)
  block.write(rows)
  // Right after the full run: the padding row still holds 7s unless the run clears it.
  const fromDevice = await shapes.run({ batch: 3 }, { x: block })
  await shapes.run({ batch: 4 }, { x: new Uint32Array(64).fill(7) })
  const fromHost = await shapes.run({ batch: 3 }, { x: rows })
  for (const r of [fromDevice, fromHost]) {
    t.deepEqual([...r.outputs.y], [...rows], 'cut to the asked rows')
    t.deepEqual([...r.outputs.last], new Array(16).fill(0), 'the padding row is zero')
  }
  block.free()
  shapes.release()
})

test('typed data in and out: any typed array, DataView or ArrayBuffer; reads as the asked type', async (t) => {
  const dev = await gpu()
  const block = dev.heap.malloc(64)
  const f = Float32Array.from({ length: 16 }, (_, i) => i * 1.5 - 4)
  block.write(f)
  t.deepEqual(await block.read(0, 64, { as: Float32Array }), f)
  block.write(new DataView(new Int32Array([7, -8]).buffer), 8)
  t.deepEqual(await block.read(8, 8, { as: Int32Array }), new Int32Array([7, -8]))
  block.write(new Uint16Array([1, 2, 3, 4]).buffer, 16)
  t.deepEqual(await dev.download(block, { offset: 16, length: 8, as: Uint16Array }), new Uint16Array([1, 2, 3, 4]))
  await dev.upload(block, new Float64Array([Math.PI]), { offset: 32 })
  await dev.uploadBatch([{ block, data: new Float32Array([2.5]), offset: 40 }])
  t.is((await block.read(32, 8, { as: Float64Array }))[0], Math.PI)
  t.is((await block.read(40, 4, { as: Float32Array }))[0], 2.5)
  // A read at an odd offset still gives an aligned array (copied where it must be).
  const odd = await block.read(1, 8, { as: Float32Array })
  t.is(odd.length, 2)
  const host = dev.host.alloc(16)
  host.write(new Float32Array([1, 2, 3, 4]))
  t.deepEqual(new Float32Array(host.bytes.buffer.slice(host.bytes.byteOffset, host.bytes.byteOffset + 16)), new Float32Array([1, 2, 3, 4]))
  host.free()
  await t.throwsAsync(block.read(0, 6, { as: Float32Array }), { code: 'INVALID_ARGUMENT', message: /whole number of Float32Array/ })
  await t.throwsAsync(block.read(0, 8, { as: Object } as never), { code: 'INVALID_ARGUMENT' })
  t.throws(() => block.write('text' as never), { code: 'INVALID_ARGUMENT' })
  block.free()
})
