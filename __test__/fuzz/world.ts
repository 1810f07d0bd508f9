'use strict'
// The devices a fuzz suite works on, the objects one run may name as arguments, and
// the end-of-run check that everything went back: after freeing what the run left,
// the heap's active blocks and bytes and the host cache's active requests and bytes
// are exactly what they were before the run.
const { Gpu, DeviceBlock, HostBlock, GpuBuffer, Executor, Stream, Weights, ShapeExecutor, planMemory } = require('../..')

const BUDGET = 256 * 2 ** 20 // bounds what a fuzzed malloc can take
const COPY_KERNEL =
  '@group(0) @binding(0) var<storage, read_write> a: array<u32>;\n@group(0) @binding(1) var<storage, read_write> b: array<u32>;\n@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3<u32>) { if (g.x < arrayLength(&b)) { b[g.x] = a[g.x] + 1u; } }'
const GRAPH = {
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
const SHAPE_GRAPH = {
  dims: ['batch'],
  kernels: { k: { source: COPY_KERNEL } },
  tensors: [
    { id: 'x', size: 'batch * 256', kind: 'input', dtype: 'u32' },
    { id: 'y', size: 'batch * 256', kind: 'output', dtype: 'u32' },
  ],
  ops: [{ kernel: 'k', inputs: ['x'], outputs: ['y'], dispatch: ['batch'] }],
}

const tick = () => new Promise(setImmediate)
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

function usage(gpu) {
  const h = gpu.heap.stats()
  const s = gpu.host.stats()
  return { blocks: h.activeBlocks.current, bytes: h.allocatedBytes.current, hostRequests: s.activeRequests.current, hostBytes: s.activeBytes.current }
}

async function openDevice() {
  return Gpu.request({ memoryBudget: BUDGET })
}

/** Two devices (cross-device misuse needs a second), one compiled executor and one plan. */
async function openWorld() {
  const world = { gpu: await openDevice(), gpu2: await openDevice(), reopened: 0 }
  world.executor = await world.gpu.compile(GRAPH)
  world.plan = await planMemory([
    { id: 'a', size: 32, first: 0, last: 1 },
    { id: 'b', size: 28, first: 1, last: 4 },
  ])
  await record(world)
  return world
}

/** Settings a run may change, and the usage every run must return to. */
async function record(world) {
  for (const key of ['gpu', 'gpu2']) {
    const gpu = world[key]
    world[key + 'Defaults'] = { high: gpu.heap.highWatermarkRatio, low: gpu.heap.lowWatermarkRatio, host: { ...gpu.host.config } }
  }
  world.baseline = { gpu: await quiet(world.gpu, () => ({})), gpu2: await quiet(world.gpu2, () => ({})) }
}

/** Frees what lingers (GC safety net included) until usage is back to `target`, or gives up. */
async function quiet(gpu, target, streams = []) {
  let u
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
    if (Object.keys(want).every((k) => u[k] === want[k]) && i > 0) return u
    if (i > 2 && global.gc) global.gc()
    await (i < 4 ? tick() : sleep(5))
  }
  return u
}

/** Usage once the GC and pending frees have settled (two equal readings in a row). */
async function settled(gpu) {
  let last = null
  for (let i = 0; i < 40; i++) {
    if (global.gc) global.gc()
    await (i < 3 ? tick() : sleep(5))
    gpu.heap.freeInactiveBuffers()
    gpu.host.processEvents()
    const u = usage(gpu)
    if (i >= 2 && last && Object.keys(u).every((k) => u[k] === last[k])) return u
    last = u
  }
  return last
}

/**
 * Waits until `gpu`'s usage is back to `before` (a `settled()` reading); otherwise counts the
 * difference as leaked and throws, naming `what` ran.
 */
async function expectNoLeak(gpu, before, counts, what) {
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
function restore(gpu, defaults) {
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
function fixtures(world) {
  const { gpu, gpu2 } = world
  const heap = gpu.heap
  const fx = {
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
  }
  // Serving objects, made fresh per run so a call may release or clear them.
  fx.scope = heap.scope({ name: 'fuzz', limit: 4 << 20 })
  fx.weights = gpu.createWeights({ w: new Uint32Array(64) })
  fx.shapes = gpu.compileShapes(SHAPE_GRAPH, { buckets: { batch: [1, 4] }, capacity: 2 })
  fx.blockFreed.free()
  fx.hostFreed.free()
  fx.bufferDestroyed.destroy()
  fx.event = fx.stream.submit()
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
  fx.freeingGetter = {}
  for (const key of ['size', 'offset', 'length', 'srcOffset', 'dstOffset', 'usage', 'shape', 'direction', 'mode', 'strategy', 'alignment']) {
    Object.defineProperty(fx.freeingGetter, key, { enumerable: true, get: freeing })
  }
  fx.freeingOptions = {
    srcOffset: 0,
    dstOffset: 0,
    get size() {
      return freeing()
    },
  }
  fx.ref = (name) => fx[name]
  fx.owned = [] // what calls returned: freed, released or destroyed after the run
  return fx
}

/** Frees, releases or destroys everything a run made; returns the streams to drain. */
function release(fx) {
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
    } else if (o?.blocks && typeof o.blocks === 'object' && !(o instanceof Gpu)) {
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
async function endRun(world, fx) {
  const streams = release(fx)
  const leak = { blocks: 0, bytes: 0, hostRequests: 0, hostBytes: 0 }
  for (const key of ['gpu', 'gpu2']) {
    const gpu = world[key]
    if (gpu.lost) continue
    restore(gpu, world[key + 'Defaults'])
    const base = world.baseline[key]
    const u = await quiet(gpu, () => ({ blocks: base.blocks, bytes: base.bytes, hostRequests: base.hostRequests, hostBytes: base.hostBytes }), streams)
    for (const k of Object.keys(leak)) leak[k] += Math.max(0, u[k] - base[k])
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
    await record(world)
  }
  return { leak, mainLost }
}

module.exports = { openWorld, openDevice, fixtures, endRun, restore, usage, quiet, settled, expectNoLeak, GRAPH, COPY_KERNEL, BUDGET }
