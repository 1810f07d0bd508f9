// The library's only output: messages on node:diagnostics_channel. Publishing is guarded by
// `hasSubscribers`, so without a subscriber no message object is built.
import diagnostics from 'node:diagnostics_channel'
import type { HeapEvent } from './binding.js'
import { WgallocError, type WgallocErrorCode } from './errors.js'
import type { Gpu } from './gpu.js'
import type { Heap } from './heap.js'
import type { Host } from './host.js'
import type { Profiler } from './profiler.js'

/**
 * Names of the `node:diagnostics_channel` channels wgalloc publishes on. Messages are built
 * only while a channel has subscribers; the library itself never prints.
 *
 * @example
 * ```js
 * const dc = require('node:diagnostics_channel')
 * dc.subscribe('wgalloc:heap', (m) => console.log(m.kind, m.size, m.pool))
 * dc.subscribe('wgalloc:device', (m) => { if (m.kind === 'error') console.error(m.call, m.code) })
 * ```
 */
export const CHANNELS = Object.freeze({
  /** `wgalloc:heap`: {@link HeapChannelMessage}. */
  heap: 'wgalloc:heap',
  /** `wgalloc:host`: {@link HostChannelMessage}. */
  host: 'wgalloc:host',
  /** `wgalloc:profiler`: {@link ProfilerChannelMessage}. */
  profiler: 'wgalloc:profiler',
  /** `wgalloc:device`: {@link DeviceChannelMessage}. */
  device: 'wgalloc:device',
} as const)

/** A message on `wgalloc:heap`: an allocator event (as `heap.on()` gets it) and its heap. */
export interface HeapChannelMessage extends HeapEvent {
  /** The heap the event happened in. */
  heap: Heap
}

/** `wgalloc:host`: a staging block was allocated (`alloc`) or freed (`free`: `block.free()`, `host.free()` or disposal; not a block dropped to the GC). */
export interface HostBlockMessage {
  /** What happened. */
  kind: 'alloc' | 'free'
  /** The block's id. */
  id: number
  /** Its direction. */
  direction: 'upload' | 'download'
  /** Bytes asked for. */
  requestedSize: number
  /** Bytes of its size class. */
  size: number
  /** Private pool id, 0 for the default pool. */
  poolId: number
  /** The host cache (on `alloc`). */
  host?: Host
}

/** `wgalloc:host`: an `upload()` / `uploadBatch()` (`upload`) or `download()` completed. */
export interface HostTransferMessage {
  /** Which transfer. */
  kind: 'upload' | 'download'
  /** The device. */
  gpu: Gpu
  /** Bytes moved. */
  bytes: number
  /** Ranges moved (`uploadBatch` items; 1 otherwise). */
  items: number
  /** Wall time from the call to completion, ms. */
  ms: number
}

/** A message on `wgalloc:host`. */
export type HostChannelMessage = HostBlockMessage | HostTransferMessage

/** `wgalloc:profiler`: a session started or stopped, a capture started, a trace was written, a CPU fallback was counted. */
export interface ProfilerChannelMessage {
  /** What happened. */
  kind: 'start' | 'stop' | 'capture' | 'trace' | 'fallback'
  /** The profiler. */
  profiler: Profiler
  /** `start`: the trace mode in effect, or null. */
  mode?: string | null
  /** `start`: counts and CPU times only. */
  statsOnly?: boolean
  /** `capture`: the capture name; `fallback`: the op name. */
  name?: string
  /** `trace`: the file written. */
  path?: string
  /** `fallback`: bytes copied between host and device. */
  bytes?: number
}

/** `wgalloc:device`: a device was opened by `Gpu.request()` or `Gpu.attach()`. */
export interface DeviceOpenMessage {
  /** What happened. */
  kind: 'open'
  /** The device. */
  gpu: Gpu
  /** `request` or `attach` (a worker thread sharing a device). */
  how: 'request' | 'attach'
  /** `gpu.info.adapterName`. */
  adapter: string
  /** `gpu.info.backend`. */
  backend: string
  /** `gpu.info.deviceType`. */
  deviceType: string
  /** `gpu.memoryBudget.bytes`. */
  memoryBudget: number
}

/** `wgalloc:device`: `gpu.destroy()` (or disposal) destroyed a device. */
export interface DeviceDestroyMessage {
  /** What happened. */
  kind: 'destroy'
  /** The device. */
  gpu: Gpu
}

/** `wgalloc:device`: a device was found lost (reported with the first `DEVICE_LOST` error a call throws). */
export interface DeviceLostMessage {
  /** What happened. */
  kind: 'lost'
  /** The device. */
  gpu: Gpu
  /** The error's message. */
  message: string
}

/** `wgalloc:device`: a public call is throwing (or rejecting with) a typed error. */
export interface DeviceErrorMessage {
  /** What happened. */
  kind: 'error'
  /** The call, e.g. `Heap.malloc`, `Gpu.compile`, `planMemory`. */
  call: string
  /** The error's code. */
  code: WgallocErrorCode
  /** The error's message. */
  message: string
  /** The error itself. */
  error: WgallocError
}

/** `wgalloc:device`: something the library would otherwise have printed (e.g. the profiler disabled by a bad `WGALLOC_PROFILE`). */
export interface DeviceWarningMessage {
  /** What happened. */
  kind: 'warning'
  /** The warning. */
  message: string
  /** The device concerned, if any. */
  gpu?: Gpu
  /** The code of the error behind the warning, if any. */
  code?: WgallocErrorCode
  /** What a user callback threw (a heap listener), when that is the warning. */
  error?: unknown
}

/** A message on `wgalloc:device`. */
export type DeviceChannelMessage = DeviceOpenMessage | DeviceDestroyMessage | DeviceLostMessage | DeviceErrorMessage | DeviceWarningMessage

/** The channel objects, by name. */
export const channels = Object.freeze({
  heap: diagnostics.channel(CHANNELS.heap),
  host: diagnostics.channel(CHANNELS.host),
  profiler: diagnostics.channel(CHANNELS.profiler),
  device: diagnostics.channel(CHANNELS.device),
})

/** Publishes `make()` on `channel` only when someone listens. */
export function publish(channel: diagnostics.Channel, make: () => unknown): void {
  if (channel.hasSubscribers) channel.publish(make())
}

// Open devices, so the first DEVICE_LOST error seen anywhere can name the lost device(s).
const devices = new Set<WeakRef<Gpu>>()
const announced = new WeakSet<Gpu>() // Gpus already reported destroyed or lost

export function deviceOpened(gpu: Gpu, how: 'request' | 'attach'): void {
  for (const ref of devices) if (ref.deref() === undefined) devices.delete(ref)
  devices.add(new WeakRef(gpu))
  publish(channels.device, (): DeviceOpenMessage => {
    const i = gpu.info
    return { kind: 'open', gpu, how, adapter: i.adapterName, backend: i.backend, deviceType: i.deviceType, memoryBudget: gpu.memoryBudget.bytes }
  })
}

export function deviceDestroyed(gpu: Gpu): void {
  announced.add(gpu)
  publish(channels.device, (): DeviceDestroyMessage => ({ kind: 'destroy', gpu }))
}

// Errors already published (one error can cross several facade layers).
const published = new WeakSet<Error>()

/** Reports a typed error the facade is about to throw (and a newly lost device). */
export function errorThrown(err: unknown, call: string): void {
  // Only the library's own errors: an exception from a user callback (a heap listener) is not ours to report.
  if (!channels.device.hasSubscribers || !(err instanceof WgallocError) || published.has(err)) return
  published.add(err)
  channels.device.publish({ kind: 'error', call, code: err.code, message: err.message, error: err } satisfies DeviceErrorMessage)
  if (err.code === 'DEVICE_LOST') {
    for (const ref of devices) {
      const gpu = ref.deref()
      if (gpu === undefined) devices.delete(ref)
      else if (!announced.has(gpu) && gpu.lost) {
        announced.add(gpu)
        channels.device.publish({ kind: 'lost', gpu, message: err.message } satisfies DeviceLostMessage)
      }
    }
  }
}

/** A warning on `wgalloc:device` (`extra` adds fields such as `gpu`); never printed. */
export function warn(message: string, extra?: Omit<DeviceWarningMessage, 'kind' | 'message'>): void {
  publish(channels.device, (): DeviceWarningMessage => ({ kind: 'warning', message, ...extra }))
}
