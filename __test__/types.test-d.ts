// Compile-only check of the public types (`npm run typecheck`), through the package's own
// name as a consumer imports it: `wgalloc` resolves to the bundled top-level index.d.ts.
import { Gpu, WgallocError, type GpuInfo, type UploadBatchItem } from 'wgalloc'

async function main(): Promise<void> {
  const gpu: Gpu = await Gpu.request({ backends: ['vulkan'], signal: AbortSignal.timeout(5000) })
  const info: GpuInfo = gpu.info
  const buf = gpu.createBuffer(16)
  gpu.writeBuffer(buf, 0, new Uint8Array(16))
  const stream = gpu.createStream()
  stream.copy(buf, gpu.createBuffer(16), { size: 16 })
  await stream.submit().wait({ signal: AbortSignal.timeout(1000) })
  const bytes: Buffer = await gpu.readBuffer(buf, 0, 16)
  buf[Symbol.dispose]()
  try {
    gpu.createBuffer(-1)
  } catch (e) {
    if (e instanceof WgallocError && e.code === 'INVALID_ARGUMENT') console.log(info.adapterName, bytes.length)
  }
}
void main

import { planMemory, type HeapEvent } from 'wgalloc'
async function heapAndPlan(gpu: Gpu): Promise<number> {
  const block = gpu.heap.malloc(1024, { usage: 'shared', shape: [16, 16] })
  const off = gpu.heap.on('FREED', (e: HeapEvent) => void e.size)
  const bytes: Buffer = await block.read(0, 16, { signal: AbortSignal.timeout(100) })
  block[Symbol.dispose]()
  off()
  const plan = await planMemory([{ id: 'a', size: 4, first: 0, last: 1 }], { strategy: 'best', onProgress: (p) => void p.best })
  return plan.toJSON().slabSize + bytes.length
}
void heapAndPlan

import type { PlannedAlias } from 'wgalloc'
/** A graph plan's aliases narrow on `region`: a constant has an offset, the others a base. */
function aliasTarget(a: PlannedAlias): string | number {
  if (a.region === 'constant') return a.offset
  // @ts-expect-error only a constant alias has an offset
  void a.offset
  return a.base
}
void aliasTarget

import type { HostBlock, HostStats } from 'wgalloc'
async function hostCache(gpu: Gpu): Promise<number> {
  const host = gpu.host
  host.configure({ maxCachedBytes: 64 << 20, roundThreshold: 32 << 20, backgroundThread: false, zeroCopy: true, pipelineBytes: 4 << 20 })
  const up: HostBlock = host.alloc(1024, { direction: 'upload' })
  up.bytes.fill(1)
  const dev = gpu.heap.malloc(1024)
  const down = host.alloc(1024, { direction: 'download' })
  const s = gpu.createStream()
  s.copy(up, dev, { size: 1024 })
  s.copy(dev, down)
  up.recordStream(s)
  await s.synchronize()
  await down.map({ signal: AbortSignal.timeout(1000) })
  const first: number = down.bytes[0] + down.read(0, 4).length
  up.free()
  down[Symbol.dispose]()
  host.beginAllocateToPool(1)
  host.endAllocateToPool(1)
  host.releasePool(1)
  await gpu.upload(dev, new Uint8Array(1024), { offset: 0 })
  const batch: UploadBatchItem[] = [
    { block: dev, data: new Uint8Array(512) },
    { block: dev, data: new Uint8Array(512), offset: 512 },
  ]
  await gpu.uploadBatch(batch, { signal: AbortSignal.timeout(1000) })
  const back: Buffer = await gpu.download(dev, { length: 16, signal: AbortSignal.timeout(1000) })
  const stats: HostStats = host.stats()
  const dir: 'upload' | 'download' = up.direction
  void dir
  return first + back.length + stats.hostAllocTime.count + stats.buckets.length + host.emptyCache()
}
void hostCache

import type { Graph } from 'wgalloc'
async function execTypes(gpu: Gpu): Promise<number> {
  const graph: Graph = {
    kernels: { k: { source: '@compute @workgroup_size(1) fn main() {}' } },
    tensors: [
      { id: 'x', size: 4, kind: 'input' },
      { id: 'y', size: 4, kind: 'output', dtype: 'f32' },
    ],
    ops: [{ kernel: 'k', inputs: ['x'], outputs: ['y'], dispatch: [1] }],
  }
  const exe = await gpu.compile(graph, { strategy: 'greedyBySize', plan: 'observe' })
  const { outputs, observation } = await exe.run({ x: new Float32Array(1) }, { observe: true })
  const eager = await gpu.runEager(graph, { x: new Float32Array(1) })
  exe[Symbol.dispose]()
  return outputs.y.length + (observation?.toUsageRecords().length ?? 0) + Object.keys(eager.outputs).length + exe.plan.slabSize
}
void execTypes

import type { Profiler, ProfilerStats } from 'wgalloc'
async function profilerTypes(gpu: Gpu): Promise<number> {
  const p: Profiler = gpu.profiler
  const n: number = await p.profile(async () => 1, { mode: 'interval,event', waitUntilCompleted: false })
  p.markCpuFallback('topk', 64)
  const s: ProfilerStats = p.stats()
  await p.exportTrace('/tmp/t.json')
  p.startCapture('cap')
  const path: string = await p.stopCapture()
  return n + s.operations.length + path.length + (p.info.passTimestamps ? 1 : 0)
}
void profilerTypes

import { CHANNELS, type DeviceChannelMessage, type HeapChannelMessage, type HostChannelMessage, type ProfilerChannelMessage } from 'wgalloc'
import { subscribe } from 'node:diagnostics_channel'
async function ergonomics(gpu: Gpu, graph: Graph): Promise<number> {
  const signal = AbortSignal.timeout(1000)
  subscribe(CHANNELS.device, (m) => {
    const msg = m as DeviceChannelMessage
    if (msg.kind === 'error') void msg.code.length
    if (msg.kind === 'open') void msg.gpu.info
  })
  subscribe(CHANNELS.heap, (m) => void (m as HeapChannelMessage).heap.stats())
  subscribe(CHANNELS.host, (m) => void (m as HostChannelMessage).kind)
  subscribe(CHANNELS.profiler, (m) => void (m as ProfilerChannelMessage).profiler)
  const eager = await gpu.runEager(graph, {}, { observe: true, signal })
  const flushed: boolean = await gpu.profiler.flush({ timeoutMs: 100, signal })
  await gpu.profiler.flush(100)
  await gpu.profiler.profile(() => 1, { statsOnly: true, signal })
  const s = gpu.createStream()
  s[Symbol.dispose]()
  await s[Symbol.asyncDispose]()
  const exe = await gpu.compile(graph, { signal })
  await exe[Symbol.asyncDispose]()
  return Number(flushed) + Object.keys(eager.outputs).length + (eager.observation?.toUsageRecords().length ?? 0)
}
void ergonomics
import { renderHtml, detectKind, recordMemoryHistory, type ViewKind, type MemoryHistorySnapshot } from 'wgalloc'
function viewTypes(gpu: Gpu): string {
  const rec = recordMemoryHistory(gpu.heap)
  gpu.heap.malloc(256).free()
  const snap: MemoryHistorySnapshot = rec.snapshot()
  rec.stop()
  const kind: ViewKind = detectKind(snap)
  return renderHtml(snap, { title: `heap (${kind})` })
}
void viewTypes

// Misspelled options, modes and codes fail to compile: each line below must be an error.
import type { WgallocErrorCode } from 'wgalloc'
async function misspelled(gpu: Gpu, graph: Graph): Promise<void> {
  // @ts-expect-error unknown power preference
  await Gpu.request({ powerPreference: 'fastest' })
  // @ts-expect-error unknown backend
  await Gpu.request({ backends: ['vulkn'] })
  // @ts-expect-error unknown backend in enumerate
  await Gpu.enumerate({ backends: ['opengl'] })
  // @ts-expect-error unknown profiler mode
  gpu.profiler.start({ mode: 'everything' })
  // @ts-expect-error unknown workspace mode
  await planMemory([], { workspace: 'huge' })
  // @ts-expect-error unknown strategy
  await planMemory([], { strategy: 'bestest' })
  // @ts-expect-error unknown usage
  gpu.heap.malloc(64, { usage: 'host' })
  // @ts-expect-error unknown heap event
  gpu.heap.on('FREE', () => {})
  // @ts-expect-error unknown host direction
  gpu.host.alloc(64, { direction: 'both' })
  // @ts-expect-error unknown compile plan
  await gpu.compile(graph, { plan: 'dynamic' })
  const exe = await gpu.compile(graph)
  // @ts-expect-error unknown output placement
  await exe.run({}, { outputs: 'gpu' })
  // @ts-expect-error unknown dtype
  const t: Graph['tensors'][number] = { id: 'x', size: 4, dtype: 'f64' }
  void t
  // @ts-expect-error unknown error code
  const code: WgallocErrorCode = 'OUT_OF_MEMROY'
  void code
  try {
    gpu.heap.malloc(1 << 40)
  } catch (e) {
    if (e instanceof WgallocError) {
      // @ts-expect-error comparing with a misspelled code: the types have no overlap
      if (e.code === 'USE_AFTER_FRE') return
    }
    // WgallocError.is narrows: details is typed for OUT_OF_MEMORY
    if (WgallocError.is(e, 'OUT_OF_MEMORY')) {
      const largest: number | undefined = e.details?.largestFreeBlock
      void largest
    }
  }
}
void misspelled

// Executors typed from their graph: a literal's input, output and dim names and output dtypes.
import type { DeviceBlock, OutputArray } from 'wgalloc'
async function typedFromGraph(gpu: Gpu, kv: DeviceBlock): Promise<number> {
  const exe = await gpu.compile({
    kernels: { k: { source: '' } },
    tensors: [
      { id: 'tokens', size: 64, kind: 'input', dtype: 'u32' },
      { id: 'cache', size: 64, kind: 'external' },
      { id: 'logits', size: 64, kind: 'output', dtype: 'f32' },
      { id: 'raw', size: 64, kind: 'output' },
    ],
    ops: [{ kernel: 'k', inputs: ['tokens', 'cache'], outputs: ['logits', 'raw'], dispatch: [1] }],
  })
  const r = await exe.run({ tokens: new Uint32Array(16), cache: kv })
  const logits: Float32Array = r.outputs.logits
  const raw: Uint8Array = r.outputs.raw
  const sum = logits.reduce((a, b) => a + b, 0)
  // @ts-expect-error no such output
  void r.outputs.probs
  // @ts-expect-error a misspelled input
  await exe.run({ tokenz: new Uint32Array(16), cache: kv })
  // @ts-expect-error an external tensor is a device block
  await exe.run({ tokens: new Uint32Array(16), cache: new Uint8Array(64) })
  // With outputs on the device, `blocks` holds every output not sent into a block of the caller's.
  const d = await exe.run({ tokens: new Uint32Array(16), cache: kv }, { outputs: 'device', outputsInto: { raw: kv } })
  d.blocks.logits.free()
  // @ts-expect-error raw went into the caller's block
  d.blocks.raw.free()
  const shapes = gpu.compileShapes({
    dims: ['batch'],
    kernels: { k: { source: '' } },
    tensors: [
      { id: 'x', size: 'batch * 64', kind: 'input', dtype: 'f32' },
      { id: 'y', size: 'batch * 64', kind: 'output', dtype: 'i32' },
    ],
    ops: [{ kernel: 'k', inputs: ['x'], outputs: ['y'], dispatch: ['batch'] }],
  })
  const y: Int32Array = (await shapes.run({ batch: 2 }, { x: new Float32Array(32) })).outputs.y
  // @ts-expect-error not a dimension of the graph
  await shapes.run({ batches: 2 }, { x: new Float32Array(32) })
  // Tensors with a shape (and no size) type the executor as sized ones do.
  const shaped = gpu.compileShapes({
    dims: ['b', 's'],
    kernels: { k: { source: '' } },
    tensors: [
      { id: 'rows', shape: ['b', 's', 4], kind: 'input', dtype: 'f32' },
      { id: 'sums', shape: ['b'], kind: 'output', dtype: 'u32' },
    ],
    ops: [{ kernel: 'k', inputs: ['rows'], outputs: ['sums'], dispatch: ['b'] }],
  })
  const sums: Uint32Array = (await shaped.run({ b: 2, s: 3 }, { rows: new Float32Array(24) })).outputs.sums
  // @ts-expect-error every dimension is named
  await shaped.run({ b: 2 }, { rows: new Float32Array(8) })
  // @ts-expect-error no such output
  void (await shaped.run({ b: 2, s: 3 }, { rows: new Float32Array(24) })).outputs.rows
  // A graph that is not a literal keeps string keys.
  const loose: Graph = JSON.parse('{}')
  const any: Record<string, OutputArray> = (await (await gpu.compile(loose)).run({ whatever: new Uint8Array(4) })).outputs
  return sum + raw.length + y.length + sums.length + Object.keys(any).length
}
void typedFromGraph

// Op params: numbers of a WGSL scalar type, or bytes.
async function opParams(gpu: Gpu): Promise<void> {
  const op = { kernel: 'k', inputs: [], outputs: ['y'] }
  const kernels = { k: { source: '' } }
  const tensors = [{ id: 'y', size: 4, kind: 'output' as const }]
  await gpu.compile({ kernels, tensors, ops: [{ ...op, params: { u32: [64, 192] } }] })
  await gpu.compile({ kernels, tensors, ops: [{ ...op, params: new Float32Array([0.5]) }] })
  // @ts-expect-error a scalar type params do not have
  await gpu.compile({ kernels, tensors, ops: [{ ...op, params: { u64: [64, 192] } }] })
}
void opParams
