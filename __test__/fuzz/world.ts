// The devices a fuzz suite works on, the objects one run may name as arguments, and
// the end-of-run check that everything went back: after freeing what the run left,
// the heap's active blocks and bytes and the host cache's active requests and bytes
// are exactly what they were before the run.
import {
  DeviceBlock,
  Executor,
  Gpu,
  GpuBuffer,
  type GpuEvent,
  type Graph,
  type Heap,
  type HeapScope,
  type Host,
  HostBlock,
  type HostConfig,
  type MemoryPlan,
  type Profiler,
  ShapeExecutor,
  Stream,
  Weights,
  planMemory,
} from 'wgalloc'
import type { Counts } from './outcome.js'
import type { BuildContext } from './values.js'

/** The two devices of a world. */
export type DeviceKey = 'gpu' | 'gpu2'

/** A device's allocator usage: heap blocks and bytes, host-cache requests and bytes. */
export interface Usage {
  blocks: number
  bytes: number
  hostRequests: number
  hostBytes: number
}

/** Settings a run may change on a device (`restore()` puts them back). */
export interface Defaults {
  high: number
  low: number
  host: HostConfig
}

/** What `record()` reads: the settings and the usage each run returns to. */
interface Recorded {
  gpuDefaults: Defaults
  gpu2Defaults: Defaults
  baseline: Record<DeviceKey, Usage>
}

/** The devices a suite works on (`openWorld()`), one compiled executor and one plan. */
export interface World extends Recorded {
  gpu: Gpu
  gpu2: Gpu
  /** Devices reopened after a run destroyed them. */
  reopened: number
  executor: Executor
  plan: MemoryPlan
}

/** Something a call returned (`how`: the method's name), freed, released or destroyed after the run. */
export interface Owned {
  value: unknown
  how: string | symbol
}

/** The objects one run may name as arguments (`fixtures()`). */
export interface Fixtures extends BuildContext {
  gpu: Gpu
  gpu2: Gpu
  heap: Heap
  heap2: Heap
  host: Host
  host2: Host
  block: DeviceBlock
  blockShared: DeviceBlock
  blockLarge: DeviceBlock
  blockFreed: DeviceBlock
  blockOther: DeviceBlock
  hostUp: HostBlock
  hostDown: HostBlock
  hostFreed: HostBlock
  hostOther: HostBlock
  stream: Stream
  streamOther: Stream
  buffer: GpuBuffer
  bufferDestroyed: GpuBuffer
  bufferOther: GpuBuffer
  plan: MemoryPlan
  executor: Executor
  profiler: Profiler
  signal: AbortSignal
  signalAborted: AbortSignal
  handle2: number
  Gpu: typeof Gpu
  scope: HeapScope
  weights: Weights
  shapes: ShapeExecutor
  event: GpuEvent
  /** Every option it has frees `block` and `hostUp` when read. */
  freeingGetter: object
  /** Reading `size` frees `block` and `hostUp`. */
  freeingOptions: { srcOffset: number; dstOffset: number; readonly size: number }
  owned: Owned[]
}

export const BUDGET = 256 * 2 ** 20 // bounds what a fuzzed malloc can take
export const COPY_KERNEL =
  '@group(0) @binding(0) var<storage, read_write> a: array<u32>;\n@group(0) @binding(1) var<storage, read_write> b: array<u32>;\n@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3<u32>) { if (g.x < arrayLength(&b)) { b[g.x] = a[g.x] + 1u; } }'
export const GRAPH: Graph = {
  kernels: { k: { source: COPY_KERNEL } },
  tensors: [
    { id: 'x', size: 256, kind: 'input', dtype: 'u32' },
    { id: 't', size: 256 },
    { id: 'y', size: 256, kind: 'output', dtype: 'u32' },
  ],
  ops: [
    { kernel: 'k', inputs: ['x'], outputs: ['t'], dispatch: [1] },
    { kernel: 'k', inputs: ['t'], outputs: ['y'], dispatch: [1] },
  ],
}

/** y = x + 1 over `batch` rows of 64 u32s (the shape executor a run may call). */
const SHAPE_GRAPH: Graph = {
  dims: ['batch'],
  kernels: { k: { source: COPY_KERNEL } },
  tensors: [
    { id: 'x', size: 'batch * 256', kind: 'input', dtype: 'u32' },
    { id: 'y', size: 'batch * 256', kind: 'output', dtype: 'u32' },
  ],
  ops: [{ kernel: 'k', inputs: ['x'], outputs: ['y'], dispatch: ['batch'] }],
}

const tick = () => new Promise(setImmediate)
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

export function usage(gpu: Gpu): Usage {
  const h = gpu.heap.stats()
  const s = gpu.host.stats()
  return { blocks: h.activeBlocks.current, bytes: h.allocatedBytes.current, hostRequests: s.activeRequests.current, hostBytes: s.activeBytes.current }
}

export async function openDevice(): Promise<Gpu> {
  return Gpu.request({ memoryBudget: BUDGET })
}

/** Two devices (cross-device misuse needs a second), one compiled executor and one plan. */
export async function openWorld(): Promise<World> {
  const gpu = await openDevice()
  const gpu2 = await openDevice()
  const executor = await gpu.compile(GRAPH)
  const plan = await planMemory([
    { id: 'a', size: 32, first: 0, last: 1 },
    { id: 'b', size: 28, first: 1, last: 4 },
  ])
  return { gpu, gpu2, reopened: 0, executor, plan, ...(await record({ gpu, gpu2 })) }
}

/** Settings a run may change, and the usage every run must return to. */
async function record(world: Pick<World, DeviceKey>): Promise<Recorded> {
  const defaults = (gpu: Gpu): Defaults => ({ high: gpu.heap.highWatermarkRatio, low: gpu.heap.lowWatermarkRatio, host: { ...gpu.host.config } })
  const gpuDefaults = defaults(world.gpu)
  const gpu2Defaults = defaults(world.gpu2)
  return { gpuDefaults, gpu2Defaults, baseline: { gpu: await quiet(world.gpu, () => ({})), gpu2: await quiet(world.gpu2, () => ({})) } }
}

/** Frees what lingers (GC safety net included) until usage is back to `target`, or gives up. */
export async function quiet(gpu: Gpu, target: (u: Usage) => Partial<Usage>, streams: Stream[] = []): Promise<Usage> {
  let u!: Usage
  for (let i = 0; i < 40; i++) {
    for (const s of streams) {
      try {
        await s.synchronize()
      } catch {}
    }
    gpu.heap.freeInactiveBuffers()
    gpu.host.processEvents()
    u = usage(gpu)
    const want = target(u)
    if ((Object.keys(want) as (keyof Usage)[]).every((k) => u[k] === want[k]) && i > 0) return u
    if (i > 2 && globalThis.gc) globalThis.gc()
    await (i < 4 ? tick() : sleep(5))
  }
  return u
}

/** Usage once the GC and pending frees have settled (two equal readings in a row). */
export async function settled(gpu: Gpu): Promise<Usage> {
  let last: Usage | null = null
  for (let i = 0; i < 40; i++) {
    if (globalThis.gc) globalThis.gc()
    await (i < 3 ? tick() : sleep(5))
    gpu.heap.freeInactiveBuffers()
    gpu.host.processEvents()
    const u = usage(gpu)
    const prev = last
    if (i >= 2 && prev && (Object.keys(u) as (keyof Usage)[]).every((k) => u[k] === prev[k])) return u
    last = u
  }
  return last!
}

/**
 * Waits until `gpu`'s usage is back to `before` (a `settled()` reading); otherwise counts the
 * difference as leaked and throws, naming `what` ran.
 */
export async function expectNoLeak(gpu: Gpu, before: Usage, counts: Counts, what: string): Promise<void> {
  const u = await quiet(gpu, () => ({ blocks: before.blocks, bytes: before.bytes, hostRequests: before.hostRequests, hostBytes: before.hostBytes }))
  const leak = {
    blocks: u.blocks - before.blocks,
    bytes: u.bytes - before.bytes,
    hostRequests: u.hostRequests - before.hostRequests,
    hostBytes: u.hostBytes - before.hostBytes,
  }
  if (Object.values(leak).some((v) => v !== 0)) {
    counts.leakedBytes += Math.max(0, leak.bytes) + Math.max(0, leak.hostBytes)
    counts.leakedBlocks += Math.max(0, leak.blocks) + Math.max(0, leak.hostRequests)
    throw new Error(`leak after ${what}: ${JSON.stringify(leak)}`)
  }
}

/** Restores every setting a run may have changed on `gpu`. */
export function restore(gpu: Gpu, defaults: Defaults): void {
  const h = gpu.heap
  try {
    h.setLogger(null)
  } catch {}
  try {
    h.setHighWatermarkRatio(defaults.high)
  } catch {}
  try {
    h.setLowWatermarkRatio(defaults.low)
  } catch {}
  try {
    h.setHighWatermarkRatio(defaults.high)
  } catch {}
  try {
    gpu.host.configure(defaults.host)
  } catch {}
  for (const { id } of gpu.host.privatePools) {
    for (let i = 0; i < 64; i++) {
      try {
        gpu.host.endAllocateToPool(id)
      } catch {
        break
      }
    }
    for (let i = 0; i < 64; i++) {
      try {
        gpu.host.releasePool(id)
      } catch {
        break
      }
    }
  }
  const p = gpu.profiler
  try {
    if (p.info.session) p.stop()
  } catch {}
  try {
    if (p.info.capturing) p.stopCaptureNow()
  } catch {}
}

/** The objects a run may pass as arguments (recipe `{ k: 'ref' }`), made fresh per run. */
export function fixtures(world: World): Fixtures {
  const { gpu, gpu2 } = world
  const heap = gpu.heap
  const made = {
    gpu,
    gpu2,
    heap,
    heap2: gpu2.heap,
    host: gpu.host,
    host2: gpu2.host,
    block: heap.malloc(256),
    blockShared: heap.malloc(256, { usage: 'shared' }),
    blockLarge: heap.malloc(2 << 20),
    blockFreed: heap.malloc(64),
    blockOther: gpu2.heap.malloc(256),
    hostUp: gpu.host.alloc(256, { direction: 'upload' }),
    hostDown: gpu.host.alloc(256, { direction: 'download' }),
    hostFreed: gpu.host.alloc(64),
    hostOther: gpu2.host.alloc(256),
    stream: gpu.createStream(),
    streamOther: gpu2.createStream(),
    buffer: gpu.createBuffer(256),
    bufferDestroyed: gpu.createBuffer(64),
    bufferOther: gpu2.createBuffer(256),
    plan: world.plan,
    executor: world.executor,
    profiler: gpu.profiler,
    signal: new AbortController().signal,
    signalAborted: AbortSignal.abort(new Error('fuzz abort')),
    handle2: gpu2.shareHandle(),
    Gpu,
    // Serving objects, made fresh per run so a call may release or clear them.
    scope: heap.scope({ name: 'fuzz', limit: 4 << 20 }),
    weights: gpu.createWeights({ w: new Uint32Array(64) }),
    shapes: gpu.compileShapes(SHAPE_GRAPH, { buckets: { batch: [1, 4] }, capacity: 2 }),
  }
  made.blockFreed.free()
  made.hostFreed.free()
  made.bufferDestroyed.destroy()
  const event = made.stream.submit()
  // Reading any option frees the fixture block first: the call must notice, not use freed memory.
  const freeing = () => {
    try {
      fx.block.free()
    } catch {}
    try {
      fx.hostUp.free()
    } catch {}
    return 64
  }
  const freeingGetter = {}
  for (const key of ['size', 'offset', 'length', 'srcOffset', 'dstOffset', 'usage', 'shape', 'direction', 'mode', 'strategy', 'alignment']) {
    Object.defineProperty(freeingGetter, key, { enumerable: true, get: freeing })
  }
  const fx: Fixtures = {
    ...made,
    event,
    freeingGetter,
    freeingOptions: {
      srcOffset: 0,
      dstOffset: 0,
      get size() {
        return freeing()
      },
    },
    ref: (name) => fx[name],
    owned: [], // what calls returned: freed, released or destroyed after the run
  }
  return fx
}

/** Frees, releases or destroys everything a run made; returns the streams to drain. */
function release(fx: Fixtures): Stream[] {
  const streams = [fx.stream, fx.streamOther]
  for (const o of [fx.block, fx.blockShared, fx.blockLarge, fx.blockOther, fx.hostUp, fx.hostDown, fx.hostOther, ...fx.owned.map((x) => x.value)]) {
    if (o instanceof DeviceBlock || o instanceof HostBlock) {
      try {
        if (!o.freed) o.free()
      } catch {}
    } else if (o instanceof GpuBuffer) {
      try {
        o.destroy()
      } catch {}
    } else if (o instanceof Executor && o !== fx.executor) {
      try {
        o.release()
      } catch {}
    } else if (
      o !== null &&
      (typeof o === 'object' || typeof o === 'function') &&
      'blocks' in o &&
      o.blocks &&
      typeof o.blocks === 'object' &&
      !(o instanceof Gpu)
    ) {
      // A run's outputs left on the device (`outputs: 'device'`).
      for (const b of Object.values(o.blocks)) {
        try {
          if (b instanceof DeviceBlock && !b.freed) b.free()
        } catch {}
      }
    } else if (o instanceof Weights) {
      try {
        o.release()
      } catch {}
    } else if (o instanceof ShapeExecutor) {
      try {
        o.clear()
      } catch {}
    } else if (o instanceof Stream) {
      streams.push(o)
    } else if (typeof o === 'function') {
      try {
        o()
      } catch {} // a heap.on() unsubscriber
    }
  }
  for (const { value, how } of fx.owned) {
    if (value instanceof Gpu && how === 'request')
      try {
        value.destroy()
      } catch {}
  }
  for (const b of [fx.buffer, fx.bufferOther]) b.destroy()
  for (const end of [() => fx.weights.release(), () => fx.shapes.clear(), () => fx.scope.dispose()]) {
    try {
      end()
    } catch {}
  }
  return streams
}

/**
 * Ends a run: releases its objects, restores settings, waits until usage is back to the
 * baseline. Returns what did not come back (all zeros when nothing leaked). A device the
 * run destroyed is reopened; the main device must survive (only gpu2 may be destroyed).
 */
export async function endRun(world: World, fx: Fixtures): Promise<{ leak: Usage; mainLost: boolean }> {
  const streams = release(fx)
  const leak: Usage = { blocks: 0, bytes: 0, hostRequests: 0, hostBytes: 0 }
  for (const key of ['gpu', 'gpu2'] as const) {
    const gpu = world[key]
    if (gpu.lost) continue
    restore(gpu, world[`${key}Defaults`])
    const base = world.baseline[key]
    const u = await quiet(gpu, () => ({ blocks: base.blocks, bytes: base.bytes, hostRequests: base.hostRequests, hostBytes: base.hostBytes }), streams)
    for (const k of Object.keys(leak) as (keyof Usage)[]) leak[k] += Math.max(0, u[k] - base[k])
  }
  const mainLost = world.gpu.lost
  if (mainLost) {
    world.reopened++
    try {
      world.gpu2.destroy()
    } catch {}
    Object.assign(world, await openWorld(), { reopened: world.reopened })
  } else if (world.gpu2.lost) {
    world.reopened++
    world.gpu2 = await openDevice()
    Object.assign(world, await record(world))
  }
  return { leak, mainLost }
}
