// Explaining an OOM: `err.details` carries the request and the heap's figures, OUT_OF_MEMORY
// listeners get them before malloc throws, and WGALLOC_OOM_SNAPSHOT writes the heap's snapshot.
import { existsSync, lstatSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { execFile } from 'node:child_process'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import test from 'ava'
import { Gpu, type Graph, type OutOfMemoryEvent, type SnapshotSegment, type WgallocError } from 'wgalloc'
import { runNode } from './helpers.js'

const execFileAsync = promisify(execFile)
/** Reports of one kind a process writes (docs/heap.md). */
const REPORTS_PER_PROCESS = 16
const COPY = `@group(0) @binding(0) var<storage, read> x: array<u32>;
@group(0) @binding(1) var<storage, read_write> y: array<u32>;
@compute @workgroup_size(1) fn main() { y[0] = x[0]; }`

// Serial: these tests set WGALLOC_OOM_SNAPSHOT for the process.
test.serial('an OOM from malloc carries structured details, tells OUT_OF_MEMORY listeners and writes a snapshot', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'wgalloc-oom-'))
  process.env.WGALLOC_OOM_SNAPSHOT = dir
  const gpu = await Gpu.request({ memoryBudget: 64 << 20 })
  try {
    const heap = gpu.heap
    heap.setHighWatermarkRatio(1)
    const seen: OutOfMemoryEvent[] = []
    heap.on('OUT_OF_MEMORY', (e) => seen.push(e))
    const held = heap.malloc(40 << 20)
    const err = t.throws<WgallocError>(() => heap.malloc(40 << 20), { code: 'OUT_OF_MEMORY' })
    const d = err.details!
    t.is(d.source, 'heap')
    t.is(d.requested, 40 << 20)
    t.is(d.budget, 64 << 20)
    t.is(d.highWatermark, 64 << 20)
    t.is(d.allocated, held.size)
    t.true(d.reserved! >= held.size)
    t.is(typeof d.largestFreeBlock, 'number')
    t.is(seen.length, 1)
    t.like(seen[0], { kind: 'OUT_OF_MEMORY', requested: 40 << 20, largestFreeBlock: d.largestFreeBlock })
    const snap = JSON.parse(readFileSync(d.snapshotPath!, 'utf8')) as { kind: string; details: { requested: number }; segments: SnapshotSegment[] }
    t.is(snap.kind, 'wgalloc-oom')
    t.deepEqual(snap.details.requested, 40 << 20)
    t.true(snap.segments.some((s) => s.blocks.some((b) => b.blockId === held.id)))
    held.free()
    t.notThrows(() => heap.malloc(40 << 20).free(), 'the heap is usable afterwards')
  } finally {
    delete process.env.WGALLOC_OOM_SNAPSHOT
    gpu.destroy()
  }
})

test.serial('an OOM snapshot folder that cannot be made (under /proc) leaves the OOM as it is, at once', async (t) => {
  // Node's recursive mkdir retried such a path forever, so the failing malloc never returned.
  process.env.WGALLOC_OOM_SNAPSHOT = '/proc/wgalloc-oom/deeper'
  const gpu = await Gpu.request({ memoryBudget: 1 << 20 })
  try {
    const started = Date.now()
    const err = t.throws<WgallocError>(() => gpu.heap.malloc(4 << 20), { code: 'OUT_OF_MEMORY' })
    t.is(err.details?.snapshotPath, null)
    t.true(Date.now() - started < 5000)
  } finally {
    delete process.env.WGALLOC_OOM_SNAPSHOT
    gpu.destroy()
  }
})

// The count is per process, so this runs in a child of its own.
test('OOM snapshots are created anew, never through a planted link, mode 0600, and bounded in number', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'wgalloc-oom-'))
  const victim = join(mkdtempSync(join(tmpdir(), 'wgalloc-victim-')), 'precious.txt')
  writeFileSync(victim, 'keep me')
  const script = `const { symlinkSync } = require('node:fs')
    const { join } = require('node:path')
    const dir = ${JSON.stringify(dir)}
    // Links at the first names this process would pick, to a file and to nowhere.
    for (let n = 1; n <= 3; n++) symlinkSync(${JSON.stringify(victim)}, join(dir, 'wgalloc-oom-' + process.pid + '-' + n + '.json'))
    symlinkSync(join(dir, 'nowhere'), join(dir, 'wgalloc-oom-' + process.pid + '-4.json'))
    const { Gpu } = require(${JSON.stringify(require.resolve('..'))})
    Gpu.request({ memoryBudget: 1 << 20 }).then((g) => {
      const paths = []
      for (let i = 0; i < 40; i++) try { g.heap.malloc(4 << 20) } catch (e) { paths.push(e.details.snapshotPath) }
      g.destroy()
      console.log(JSON.stringify(paths))
    })`
  const r = await runNode(['-e', script], { env: { WGALLOC_OOM_SNAPSHOT: dir } })
  t.is(r.code, 0, r.stderr)
  const paths = JSON.parse(r.stdout) as (string | null)[]
  t.is(paths.length, 40)
  t.is(readFileSync(victim, 'utf8'), 'keep me', 'the link target is untouched')
  t.false(existsSync(join(dir, 'nowhere')), 'a dangling link is not followed')
  const written = paths.slice(0, REPORTS_PER_PROCESS)
  t.deepEqual(paths.slice(REPORTS_PER_PROCESS), Array(40 - REPORTS_PER_PROCESS).fill(null))
  t.is(new Set(written).size, REPORTS_PER_PROCESS)
  for (const p of written) {
    t.is(typeof p, 'string')
    const st = lstatSync(p as string)
    t.true(st.isFile())
    t.is(st.mode & 0o777, 0o600)
    t.is(JSON.parse(readFileSync(p as string, 'utf8')).kind, 'wgalloc-oom')
  }
  t.is(readdirSync(dir).length, 4 + REPORTS_PER_PROCESS)
  t.regex(
    r.stderr,
    new RegExp(`WGALLOC_OOM_SNAPSHOT: ${40 - REPORTS_PER_PROCESS} more report\\(s\\) not written \\(at most ${REPORTS_PER_PROCESS} per process\\)`),
  )
})

// A file size limit (a disk filling up alike) takes part of a write: the report must not stay
// behind truncated, with its path handed out as if it were whole.
test('an OOM snapshot that cannot be written whole is removed, and the OOM keeps no path', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'wgalloc-oom-'))
  const script = `const { Gpu } = require(${JSON.stringify(require.resolve('..'))})
    Gpu.request({ memoryBudget: 1 << 20 }).then((g) => {
      try { g.heap.malloc(4 << 20) } catch (e) { console.log(JSON.stringify({ code: e.code, path: e.details.snapshotPath })) }
      g.destroy()
    })`
  // ulimit -f counts 1024-byte blocks; a snapshot of a heap is larger than one.
  const { stdout } = await execFileAsync('bash', ['-c', 'ulimit -f 1; exec "$0" -e "$1"', process.execPath, script], {
    env: { ...process.env, WGALLOC_OOM_SNAPSHOT: dir },
  })
  t.deepEqual(JSON.parse(stdout), { code: 'OUT_OF_MEMORY', path: null })
  t.deepEqual(readdirSync(dir), [], 'no truncated report stays behind')
})

test.serial('an OOM in compile, a shape cache miss, createWeights or a device output reaches the listener, details and the snapshot', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'wgalloc-oom-'))
  process.env.WGALLOC_OOM_SNAPSHOT = dir
  const gpu = await Gpu.request({ memoryBudget: 64 << 20 })
  try {
    const heap = gpu.heap
    heap.setHighWatermarkRatio(1)
    const seen: OutOfMemoryEvent[] = []
    heap.on('OUT_OF_MEMORY', (e) => seen.push(e))
    const big = 48 << 20
    const graph = (size: number | string, dims?: string[]): Graph => ({
      ...(dims ? { dims } : {}),
      kernels: { k: { source: COPY } },
      tensors: [
        { id: 'x', size, kind: 'input' },
        { id: 'y', size, kind: 'output' },
      ],
      ops: [{ kernel: 'k', inputs: ['x'], outputs: ['y'], dispatch: [1] }],
    })
    const expectOom = (err: WgallocError | undefined, what: string) => {
      t.is(err?.code, 'OUT_OF_MEMORY', what)
      t.is(typeof err?.details?.reserved, 'number', `${what}: details`)
      t.is(typeof err?.details?.snapshotPath, 'string', `${what}: snapshot`)
      t.is(seen.at(-1)?.reserved, err?.details?.reserved, `${what}: listener`)
    }
    const before = seen.length
    expectOom(await t.throwsAsync<WgallocError>(gpu.compile(graph(big))), 'compile')
    const shapes = gpu.compileShapes(graph('b * 1048576', ['b']))
    expectOom(await t.throwsAsync<WgallocError>(shapes.run({ b: 48 }, { x: new Uint8Array(48 << 20) })), 'shape cache miss')
    expectOom(
      t.throws<WgallocError>(() => gpu.createWeights({ w: new Uint8Array(80 << 20) })),
      'createWeights',
    )
    const exe = await gpu.compile(graph(8 << 20))
    // Fill what the cached segments have free, then cap the heap at what it reserves: the run's
    // output block (8 MiB) finds no room.
    heap.emptyCache()
    const largestFree = () => Math.max(0, ...heap.snapshot().flatMap((seg) => seg.blocks.filter((b) => b.state === 'free').map((b) => b.size)))
    const fillers = []
    for (let free = largestFree(); free > 0; free = largestFree()) fillers.push(heap.malloc(free))
    heap.setHighWatermarkRatio(heap.stats().reservedBytes.current / (64 << 20))
    expectOom(await t.throwsAsync<WgallocError>(exe.run({ x: new Uint8Array(8 << 20) }, { outputs: 'device' })), 'device output')
    t.is(seen.length, before + 4, 'one report per OOM')
    for (const f of fillers) f.free()
    exe.release()
    shapes.release()
  } finally {
    delete process.env.WGALLOC_OOM_SNAPSHOT
    gpu.destroy()
  }
})

test('an OOM outside the heap carries its source and figures as data too', async (t) => {
  const gpu = await Gpu.request()
  try {
    const max = gpu.info.maxBufferSize
    const err = t.throws<WgallocError>(() => gpu.host.alloc(max + 1), { code: 'OUT_OF_MEMORY' })
    t.like(err.details, { source: 'max-buffer-size', operation: 'allocating a staging buffer', requested: max + 1, limit: max })
    t.regex(err.message, /split the transfer/)
    t.is(gpu.host.stats().activeBytes.current, 0, 'nothing was allocated')
  } finally {
    gpu.destroy()
  }
})
