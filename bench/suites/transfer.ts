// Foundation benchmarks: raw data movement and event round trips on the device.

import type { Suite } from '../harness.js'

const SIZE = 64 << 20

export const suites: Suite[] = [
  {
    name: 'copy-64mib',
    description: 'device-to-device copy of 64 MiB through a Stream (submit + wait) vs a host memcpy of 64 MiB',
    async run({ gpu, timeIt }) {
      const a = gpu.createBuffer(SIZE)
      const b = gpu.createBuffer(SIZE)
      const s = gpu.createStream()
      const gpuMs = await timeIt(async () => {
        s.copy(a, b)
        await s.submit().wait()
      })
      const src = Buffer.alloc(SIZE, 1)
      const dst = Buffer.alloc(SIZE)
      const hostMs = await timeIt(() => {
        src.copy(dst)
      })
      a.destroy()
      b.destroy()
      return {
        measured: { value: gpuMs, unit: 'ms' },
        baseline: { value: hostMs, unit: 'ms', what: 'Buffer.copy' },
        ratio: gpuMs / hostMs,
        ratioMeaning: 'device copy time / host memcpy time (lower is better)',
      }
    },
  },
  {
    name: 'readback-16mib',
    description: 'readBuffer of 16 MiB (copy to a staging buffer, map, copy out) vs a host memcpy of 16 MiB',
    async run({ gpu, timeIt }) {
      const size = 16 << 20
      const buf = gpu.createBuffer(size)
      const gpuMs = await timeIt(() => gpu.readBuffer(buf, 0, size))
      const src = Buffer.alloc(size, 1)
      const hostMs = await timeIt(() => {
        Buffer.from(src)
      })
      buf.destroy()
      return {
        measured: { value: gpuMs, unit: 'ms' },
        baseline: { value: hostMs, unit: 'ms', what: 'Buffer.from copy' },
        ratio: gpuMs / hostMs,
        ratioMeaning: 'read-back time / host copy time (lower is better)',
      }
    },
  },
  {
    name: 'event-roundtrip',
    description: 'submit of an empty-ish stream + await event.wait() vs an await of setImmediate',
    async run({ gpu, timeIt }) {
      const a = gpu.createBuffer(256)
      const b = gpu.createBuffer(256)
      const s = gpu.createStream()
      const n = 50
      const gpuMs = await timeIt(async () => {
        for (let i = 0; i < n; i++) {
          s.copy(a, b)
          await s.submit().wait()
        }
      })
      const idleMs = await timeIt(async () => {
        for (let i = 0; i < n; i++) await new Promise(setImmediate)
      })
      return {
        measured: { value: (gpuMs / n) * 1000, unit: 'us/event' },
        baseline: { value: (idleMs / n) * 1000, unit: 'us/tick', what: 'setImmediate' },
        ratio: gpuMs / idleMs,
        ratioMeaning: 'event round trip / event-loop tick (lower is better)',
      }
    },
  },
]
