'use strict'
// The library's only output: messages on node:diagnostics_channel. Publishing is
// guarded by `hasSubscribers`, so without a subscriber no message object is built.
// Shapes are documented in README ("Diagnostics channels") and js/index.d.ts.
const diagnostics = require('node:diagnostics_channel')
const { WgallocError } = require('./errors.cjs')

const CHANNELS = Object.freeze({
  /** Allocator events of every device heap (HeapEvent plus `heap`). */
  heap: 'wgalloc:heap',
  /** Host staging cache: block alloc/free, upload/download completions. */
  host: 'wgalloc:host',
  /** Profiler sessions, captures, exported traces, CPU fallbacks. */
  profiler: 'wgalloc:profiler',
  /** Devices opened, destroyed and lost, every error the facade throws, warnings. */
  device: 'wgalloc:device',
})
const channels = Object.freeze(Object.fromEntries(Object.entries(CHANNELS).map(([k, name]) => [k, diagnostics.channel(name)])))

/** Publishes `make()` on `channel` only when someone listens. */
function publish(channel, make) {
  if (channel.hasSubscribers) channel.publish(make())
}

// Open devices, so the first DEVICE_LOST error seen anywhere can name the lost device(s).
const devices = new Set() // WeakRef<Gpu>
const announced = new WeakSet() // Gpus already reported destroyed or lost

function deviceOpened(gpu, how) {
  for (const ref of devices) if (ref.deref() === undefined) devices.delete(ref)
  devices.add(new WeakRef(gpu))
  publish(channels.device, () => {
    const i = gpu.info
    return { kind: 'open', gpu, how, adapter: i.adapterName, backend: i.backend, deviceType: i.deviceType, memoryBudget: gpu.memoryBudget.bytes }
  })
}

function deviceDestroyed(gpu) {
  announced.add(gpu)
  publish(channels.device, () => ({ kind: 'destroy', gpu }))
}

// Errors already published (one error can cross several facade layers).
const published = new WeakSet()

/** Reports a typed error the facade is about to throw (and a newly lost device). */
function errorThrown(err, call) {
  // Only the library's own errors: an exception from a user callback (a heap listener) is not ours to report.
  if (!channels.device.hasSubscribers || !(err instanceof WgallocError) || published.has(err)) return
  published.add(err)
  channels.device.publish({ kind: 'error', call, code: err.code, message: err.message, error: err })
  if (err.code === 'DEVICE_LOST') {
    for (const ref of devices) {
      const gpu = ref.deref()
      if (gpu === undefined) devices.delete(ref)
      else if (!announced.has(gpu) && gpu.lost) {
        announced.add(gpu)
        channels.device.publish({ kind: 'lost', gpu, message: err.message })
      }
    }
  }
}

/** A warning on `wgalloc:device` (`extra` adds fields such as `gpu`); never printed. */
function warn(message, extra) {
  publish(channels.device, () => ({ kind: 'warning', message, ...extra }))
}

module.exports = { CHANNELS, channels, publish, deviceOpened, deviceDestroyed, errorThrown, warn }
