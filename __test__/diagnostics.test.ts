// node:diagnostics_channel: what each wgalloc channel publishes (on a real device),
// that nothing is recorded without a subscriber, and that the library never prints.
import { execFile } from 'node:child_process'
import dc from 'node:diagnostics_channel'
import { existsSync, mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import test from 'ava'
import {
  CHANNELS,
  type DeviceChannelMessage,
  Gpu,
  type HeapChannelMessage,
  type HostBlockMessage,
  type HostChannelMessage,
  type HostTransferMessage,
  type ProfilerChannelMessage,
  WgallocError,
  planMemory,
} from 'wgalloc'
import { pattern } from './helpers.js'

/** Collects the messages of `name` while `fn` runs. */
async function collect<M>(name: string, fn: () => unknown): Promise<M[]> {
  const got: M[] = []
  // diagnostics_channel hands listeners `unknown`: the message type is the one wgalloc documents for the channel.
  const onMessage = (m: unknown) => got.push(m as M)
  dc.subscribe(name, onMessage)
  try {
    await fn()
  } finally {
    dc.unsubscribe(name, onMessage)
  }
  return got
}

test('CHANNELS names the four channels', (t) => {
  t.deepEqual({ ...CHANNELS }, { heap: 'wgalloc:heap', host: 'wgalloc:host', profiler: 'wgalloc:profiler', device: 'wgalloc:device' })
  t.true(Object.isFrozen(CHANNELS))
})

// Serial: the channels are process-wide, so tests that count messages must not overlap.
test.serial('wgalloc:heap: allocator events reach a channel subscriber with no heap.on() listener', async (t) => {
  const gpu = await Gpu.request()
  const heap = gpu.heap
  const got = await collect<HeapChannelMessage>('wgalloc:heap', () => {
    const a = heap.malloc(1000)
    a.free()
    heap.malloc(2000).free()
    heap.emptyCache()
  })
  const round = (n: number) => Math.ceil(n / heap.alignment) * heap.alignment
  t.deepEqual(
    got.map(({ heap: h, ...m }) => m),
    [
      { kind: 'ALLOCATED', size: round(1000), pool: 'device-small', blockId: got[0].blockId, segmentId: got[0].segmentId, offset: 0 },
      { kind: 'FREED', size: round(1000), pool: 'device-small', blockId: got[0].blockId, segmentId: got[0].segmentId },
      { kind: 'RECYCLED', size: round(2000), pool: 'device-small', blockId: got[2].blockId, segmentId: got[0].segmentId, offset: 0 },
      { kind: 'FREED', size: round(2000), pool: 'device-small', blockId: got[2].blockId, segmentId: got[0].segmentId },
      { kind: 'RELEASED', size: 2 << 20, pool: 'device-small', segmentId: got[0].segmentId },
    ],
  )
  t.true(
    got.every((m) => m.heap === heap),
    'each message names its heap',
  )
  t.not(got[0].blockId, got[2].blockId)
  // Unsubscribed: the native heap stops recording, so nothing is queued that a later
  // subscriber would get.
  heap.malloc(64).free()
  const again = await collect<HeapChannelMessage>('wgalloc:heap', async () => heap.malloc(128).free())
  t.deepEqual(
    again.map((m) => [m.kind, m.size]),
    [
      ['RECYCLED', round(128)],
      ['FREED', round(128)],
    ],
  )
  gpu.destroy()
})

test.serial('wgalloc:host: block alloc/free and completed transfers with their byte counts', async (t) => {
  const gpu = await Gpu.request()
  const dev = gpu.heap.malloc(4096)
  const got = await collect<HostChannelMessage>('wgalloc:host', async () => {
    const up = gpu.host.alloc(100, { direction: 'upload' })
    up.free()
    await gpu.upload(dev, pattern(4096, 5))
    await gpu.uploadBatch([
      { block: dev, data: pattern(1024, 6) },
      { block: dev, data: pattern(1024, 7), offset: 2048 },
    ])
    const back = await gpu.download(dev, { length: 512 })
    t.is(back.length, 512)
  })
  const blocks = got.filter((m): m is HostBlockMessage => m.kind === 'alloc' || m.kind === 'free')
  t.like(blocks[0], { kind: 'alloc', direction: 'upload', requestedSize: 100, size: 128, poolId: 0, host: gpu.host })
  t.like(blocks[1], { kind: 'free', id: blocks[0].id, direction: 'upload', requestedSize: 100 })
  const transfers = got.filter((m): m is HostTransferMessage => m.kind === 'upload' || m.kind === 'download')
  t.deepEqual(
    transfers.map(({ kind, bytes, items }) => ({ kind, bytes, items })),
    [
      { kind: 'upload', bytes: 4096, items: 1 },
      { kind: 'upload', bytes: 2048, items: 2 },
      { kind: 'download', bytes: 512, items: 1 },
    ],
  )
  for (const m of transfers) {
    t.is(m.gpu, gpu)
    t.true(m.ms >= 0 && Number.isFinite(m.ms))
  }
  t.deepEqual(new Uint8Array(await gpu.download(dev, { offset: 2048, length: 1024 })), pattern(1024, 7), 'the bytes arrived')
  gpu.destroy()
})

test.serial('wgalloc:profiler: sessions, captures, traces and fallbacks', async (t) => {
  const gpu = await Gpu.request()
  const p = gpu.profiler
  const dir = mkdtempSync(join(tmpdir(), 'wgalloc-diag-'))
  const got = await collect<ProfilerChannelMessage>('wgalloc:profiler', async () => {
    await p.profile(async () => p.markCpuFallback('topk', 64), { mode: 'event' })
    await p.exportTrace(join(dir, 'a.json'))
    p.startCapture(join(dir, 'cap'))
    t.is(await p.stopCapture(), join(dir, 'cap.json'))
  })
  t.deepEqual(
    got.map(({ profiler, ...m }) => m),
    [
      { kind: 'start', mode: 'event', statsOnly: false },
      { kind: 'fallback', name: 'topk', bytes: 64 },
      { kind: 'stop' },
      { kind: 'trace', path: join(dir, 'a.json') },
      { kind: 'capture', name: join(dir, 'cap') },
      { kind: 'trace', path: join(dir, 'cap.json') },
    ],
  )
  t.true(got.every((m) => m.profiler === p))
  t.true(existsSync(join(dir, 'a.json')) && existsSync(join(dir, 'cap.json')))
  gpu.destroy()
})

test.serial('wgalloc:device: open, typed errors with the call that threw, destroy, and a device lost elsewhere', async (t) => {
  let gpu!: Gpu
  let other!: Gpu
  const got = await collect<DeviceChannelMessage>('wgalloc:device', async () => {
    gpu = await Gpu.request()
    t.throws(() => gpu.heap.malloc(-1), { code: 'INVALID_ARGUMENT' })
    await t.throwsAsync(gpu.readBuffer(gpu.createBuffer(4), 0, 64), { code: 'INVALID_ARGUMENT' })
    await t.throwsAsync(planMemory('not,a,csv'), { code: 'PARSE_ERROR' })
    other = Gpu.attach(gpu.shareHandle()) // as a worker thread would
    gpu.destroy()
    t.throws(() => other.createBuffer(4), { code: 'DEVICE_LOST' })
    t.throws(() => other.createBuffer(4), { code: 'DEVICE_LOST' })
  })
  const opens = got.filter((m) => m.kind === 'open')
  t.is(opens.length, 2)
  t.like(opens[0], { gpu, how: 'request', adapter: gpu.info.adapterName, backend: gpu.info.backend, memoryBudget: gpu.memoryBudget.bytes })
  t.like(opens[1], { gpu: other, how: 'attach' })
  const errors = got.filter((m) => m.kind === 'error')
  t.deepEqual(
    errors.map((m) => [m.call, m.code]),
    [
      ['Heap.malloc', 'INVALID_ARGUMENT'],
      ['Gpu.readBuffer', 'INVALID_ARGUMENT'],
      ['planMemory', 'PARSE_ERROR'],
      ['Gpu.createBuffer', 'DEVICE_LOST'],
      ['Gpu.createBuffer', 'DEVICE_LOST'],
    ],
  )
  t.true(errors.every((m) => m.error instanceof WgallocError && m.message === m.error.message))
  t.deepEqual(
    got.filter((m) => m.kind === 'destroy').map((m) => m.gpu),
    [gpu],
  )
  const lost = got.filter((m) => m.kind === 'lost')
  t.is(lost.length, 1, 'reported once, for the handle that did not destroy it')
  t.is(lost[0]?.gpu, other)
})

test('no subscriber, no output: a busy session prints nothing; a bad WGALLOC_PROFILE is a warning on wgalloc:device', async (t) => {
  const script = `
    const dc = require('node:diagnostics_channel')
    const { Gpu } = require(${JSON.stringify(join(__dirname, '..'))})
    const warnings = []
    if (process.env.LISTEN) dc.subscribe('wgalloc:device', (m) => m.kind === 'warning' && warnings.push(m.message))
    ;(async () => {
      const gpu = await Gpu.request()
      const b = gpu.heap.malloc(4096); await gpu.upload(b, new Uint8Array(4096)); await gpu.download(b); b.free()
      try { gpu.heap.malloc(-1) } catch {}
      try { await gpu.profiler.profile(async () => gpu.heap.emptyCache()) } catch {}
      gpu.destroy()
      if (process.env.LISTEN) process.stdout.write(JSON.stringify(warnings))
    })()`
  // A private runtime dir keeps Mesa's own XDG_RUNTIME_DIR complaint out of stderr.
  const env: NodeJS.ProcessEnv = { ...process.env, XDG_RUNTIME_DIR: process.env.XDG_RUNTIME_DIR ?? mkdtempSync(join(tmpdir(), 'wgalloc-xdg-')) }
  delete env.WGALLOC_PROFILE
  delete env.WGALLOC_DEBUG_ALLOCATOR
  const quiet = await promisify(execFile)(process.execPath, ['-e', script], { env })
  t.is(quiet.stdout, '')
  t.is(quiet.stderr, '', 'the library printed nothing')
  const bad = await promisify(execFile)(process.execPath, ['-e', script], { env: { ...env, LISTEN: '1', WGALLOC_PROFILE: 'bogus' } })
  const warnings = JSON.parse(bad.stdout) as string[]
  t.is(warnings.length, 1)
  t.regex(warnings[0], /profiler disabled: .*bogus/)
})
