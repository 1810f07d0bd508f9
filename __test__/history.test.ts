// Memory history with JS stacks (heap.recordHistory), memory snapshots that carry them, and
// the leak report, in process and at exit (WGALLOC_LEAK_REPORT).
import { spawnSync } from 'node:child_process'
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import test from 'ava'
import { type DeviceBlock, Gpu, type Heap, type HeapEvent, type HeapScope, type LeakReport, MAX_HISTORY_ENTRIES, type MemorySnapshot } from 'wgalloc'
import { collectGarbageUntil } from './helpers.js'

const ENTRY = JSON.stringify(require.resolve('..'))

function allocateForTenantA(heap: Heap, size: number): DeviceBlock {
  return heap.malloc(size)
}
function allocateInScope(scope: HeapScope, size: number): DeviceBlock {
  return scope.malloc(size)
}
function allocateForTenantB(heap: Heap, size: number): DeviceBlock {
  return heap.malloc(size)
}

test('the history records allocations with their JS stacks; the snapshot carries them', async (t) => {
  const gpu = await Gpu.request()
  const heap = gpu.heap
  const before = heap.malloc(256) // exists before recording: seeded, without a stack
  heap.recordHistory({ maxEntries: 1000 })
  t.true(heap.recordingHistory)
  const a = allocateForTenantA(heap, 4096)
  const b = allocateForTenantB(heap, 8192)
  b.free()
  const snap = heap.memorySnapshot()
  t.is(snap.format, 'wgalloc-memory-history')
  const blocks = snap.segments.flatMap((s) => s.blocks)
  const blockA = blocks.find((x) => x.blockId === a.id)!
  t.regex(blockA.stack!, /allocateForTenantA/)
  t.regex(blockA.stack!, /history\.test\.[jt]s/)
  t.notRegex(blockA.stack!, /dist[\\/]heap\.js/, 'wgalloc frames are trimmed')
  t.is(blocks.find((x) => x.blockId === before.id)!.stack, undefined)
  const actions = snap.history.map((e) => [e.action, e.blockId])
  t.deepEqual(
    actions.filter(([, id]) => id === a.id || id === b.id),
    [
      ['alloc', a.id],
      ['alloc', b.id],
      ['free', b.id],
    ],
  )
  const allocA = snap.history.find((e) => e.action === 'alloc' && e.blockId === a.id)!
  t.is(allocA.offset, a.offset)
  t.regex(allocA.stack!, /allocateForTenantA/)
  t.true(snap.history.some((e) => e.action === 'segment_alloc'))
  // Stopping returns malloc and free to their fast path; the report then has no stacks.
  heap.recordHistory(false)
  t.false(heap.recordingHistory)
  t.deepEqual(heap.memorySnapshot().history, [])
  a.free()
  before.free()
  gpu.destroy()
})

test('alloc entries carry their stack when other listeners get the events at once', async (t) => {
  const gpu = await Gpu.request()
  const heap = gpu.heap
  const seen: string[] = []
  const listener = (e: HeapEvent) => seen.push(e.kind)
  heap.on('ALLOCATED', listener)
  heap.on('RECYCLED', listener)
  heap.recordHistory({ maxEntries: 100 })
  const a = allocateForTenantA(heap, 4096)
  const scalar = heap.allocScalar(new Uint8Array(16))
  const entries = heap.memorySnapshot().history.filter((e) => e.action === 'alloc' && !e.label)
  t.regex(entries.find((e) => e.blockId === a.id)!.stack!, /allocateForTenantA/)
  t.regex(entries.find((e) => e.blockId === scalar.id)!.stack!, /history\.test\.[jt]s/)
  t.true(seen.length >= 2, 'the listener got the events')
  heap.off('ALLOCATED', listener)
  heap.off('RECYCLED', listener)
  a.free()
  scalar.free()
  gpu.destroy()
})

test('the ring keeps the newest maxEntries events; bad limits are INVALID_ARGUMENT, huge ones capped', async (t) => {
  const gpu = await Gpu.request()
  const heap = gpu.heap
  heap.recordHistory({ maxEntries: 10, stacks: false })
  const ids: number[] = []
  for (let i = 0; i < 50; i++) {
    const b = heap.malloc(64)
    ids.push(b.id)
    b.free()
  }
  const history = heap.memorySnapshot().history
  t.is(history.length, 10)
  t.is(history.at(-1)!.action, 'free')
  t.is(history.at(-1)!.blockId, ids.at(-1))
  t.is(
    history.find((e) => e.stack !== undefined),
    undefined,
    'stacks: false records none',
  )
  for (const maxEntries of [0, -1, 1.5, Number.NaN, '10', 2 ** 53]) {
    t.throws(() => heap.recordHistory({ maxEntries: maxEntries as never }), { code: 'INVALID_ARGUMENT' }, String(maxEntries))
  }
  t.throws(() => heap.recordHistory({ stacks: 'yes' as never }), { code: 'INVALID_ARGUMENT' })
  t.throws(() => heap.recordHistory(5 as never), { code: 'INVALID_ARGUMENT' })
  t.is(MAX_HISTORY_ENTRIES, 10_000_000)
  heap.recordHistory({ maxEntries: 2 ** 40 }) // capped, not allocated up front
  t.true(heap.recordingHistory)
  heap.recordHistory(false)
  gpu.destroy()
})

test.serial('the leak report groups unfreed blocks by stack, and counts blocks the GC reclaimed', async (t) => {
  const gpu = await Gpu.request()
  const heap = gpu.heap
  heap.recordHistory()
  const kept: DeviceBlock[] = []
  for (let i = 0; i < 2; i++) kept.push(allocateForTenantA(heap, 1024)) // one call site: one group
  kept.push(allocateForTenantB(heap, 4096))
  allocateForTenantA(heap, 1024).free()
  ;(() => {
    allocateForTenantB(heap, 65536) // dropped without free()
  })()
  await collectGarbageUntil(() => heap.leakReport().groups.some((g) => g.reclaimed > 0))
  const report = heap.leakReport()
  const a = report.groups.find((g) => /allocateForTenantA/.test(g.stack))
  const b = report.groups.filter((g) => /allocateForTenantB/.test(g.stack))
  t.like(a, { count: 2, bytes: 2048, reclaimed: 0 })
  t.is(
    b.reduce((n, g) => n + g.count, 0),
    2,
  )
  t.is(
    b.reduce((n, g) => n + g.reclaimed, 0),
    1,
    'the block dropped without free() is a leak',
  )
  t.is(report.count, 4)
  t.is(report.bytes, 2048 + 4096 + 65536)
  t.is(report.groups[0].bytes, Math.max(...report.groups.map((g) => g.bytes)), 'most bytes first')
  for (const blk of kept) blk.free()
  t.is(heap.leakReport().count, 1, 'only the reclaimed block is left')
  heap.recordHistory(false)
  t.like(heap.leakReport(), { count: 0, bytes: 0 })
  gpu.destroy()
})

test('WGALLOC_LEAK_REPORT prints unfreed blocks with their stacks at exit, and writes a report to a folder', (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'wgalloc-leaks-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const script = `
    const { Gpu } = require(${ENTRY})
    function loadModelWeights(gpu) { return gpu.heap.malloc(1 << 20) }
    Gpu.request().then((gpu) => { globalThis.keep = loadModelWeights(gpu); gpu.heap.malloc(64).free() })`
  for (const value of ['1', dir]) {
    const r = spawnSync(process.execPath, ['-e', script], { env: { ...process.env, WGALLOC_LEAK_REPORT: value }, encoding: 'utf8' })
    t.is(r.status, 0, r.stderr)
    t.regex(r.stderr, /1 block\(s\), 1048576 bytes never freed/)
    t.regex(r.stderr, /loadModelWeights/)
  }
  const [file] = readdirSync(dir)
  const written = JSON.parse(readFileSync(join(dir, file), 'utf8')) as { kind: string; report: LeakReport; snapshot: MemorySnapshot }
  t.is(written.kind, 'wgalloc-leaks')
  t.is(written.report.count, 1)
  t.regex(written.report.groups[0].stack, /loadModelWeights/)
  t.is(written.snapshot.format, 'wgalloc-memory-history')
  // Unset: nothing is printed.
  const quiet = spawnSync(process.execPath, ['-e', script], { env: { ...process.env, WGALLOC_LEAK_REPORT: '' }, encoding: 'utf8' })
  t.is(quiet.stderr, '')
})

test.serial('what a history holds for blocks the GC reclaimed is bounded by maxEntries; the counts stay exact', async (t) => {
  const gpu = await Gpu.request()
  const heap = gpu.heap
  heap.recordHistory({ maxEntries: 100 })
  const n = 60_000
  const drop = () => {
    for (let i = 0; i < n; i++) allocateForTenantA(heap, 256)
  }
  global.gc?.()
  const before = process.memoryUsage().heapUsed
  drop()
  const reclaimed = () => heap.leakReport().groups.reduce((sum, g) => sum + g.reclaimed, 0)
  await collectGarbageUntil(() => reclaimed() === n)
  global.gc?.()
  const grown = process.memoryUsage().heapUsed - before
  const report = heap.leakReport()
  t.is(report.count, n)
  t.is(report.bytes, n * 256)
  const group = report.groups.find((g) => /allocateForTenantA/.test(g.stack))
  t.is(group?.reclaimed, n, 'folded blocks keep their stack group')
  // Unbounded, the history held every reclaimed block's stack holder (about 400 B each: 23 MiB here).
  t.true(grown < 8 << 20, `the JS heap grew ${grown} bytes`)
  heap.recordHistory(false)
  gpu.destroy()
})

test.serial("an application's Error.prepareStackTrace does not change the history's stacks", async (t) => {
  const gpu = await Gpu.request()
  const heap = gpu.heap
  const errorClass = Error as { prepareStackTrace?: unknown }
  const hook = errorClass.prepareStackTrace
  // Returns call sites instead of text, as source-map and tracing libraries do.
  errorClass.prepareStackTrace = (_err: Error, sites: unknown[]) => sites
  try {
    heap.recordHistory()
    const kept = allocateForTenantB(heap, 4096)
    const snapshot = heap.memorySnapshot()
    const block = snapshot.segments.flatMap((s) => s.blocks).find((b) => b.blockId === kept.id)
    t.regex(block?.stack ?? '', /allocateForTenantB/)
    const report = heap.leakReport()
    t.regex(report.groups[0].stack, /allocateForTenantB/)
    t.is(typeof snapshot.history.find((e) => e.action === 'alloc' && e.blockId === kept.id)?.stack, 'string')
    t.is(typeof errorClass.prepareStackTrace, 'function', 'the hook is back in place')
    kept.free()
  } finally {
    errorClass.prepareStackTrace = hook
    heap.recordHistory(false)
    gpu.destroy()
  }
})

test('the leak report at exit is written with a custom Error.prepareStackTrace in force', (t) => {
  const script = `
    Error.prepareStackTrace = (_e, sites) => sites
    const { Gpu } = require(${ENTRY})
    function loadModelWeights(gpu) { return gpu.heap.malloc(1 << 20) }
    Gpu.request().then((gpu) => { globalThis.keep = loadModelWeights(gpu) })`
  const r = spawnSync(process.execPath, ['-e', script], { env: { ...process.env, WGALLOC_LEAK_REPORT: '1' }, encoding: 'utf8' })
  t.is(r.status, 0, r.stderr)
  t.regex(r.stderr, /1 block\(s\), 1048576 bytes never freed/)
  t.regex(r.stderr, /loadModelWeights/)
})

test('stacks: { every: N } records the stack of one malloc in N, the rest by size and time', async (t) => {
  const gpu = await Gpu.request()
  const heap = gpu.heap
  heap.recordHistory({ stacks: { every: 4 } })
  const blocks: DeviceBlock[] = []
  for (let i = 0; i < 12; i++) blocks.push(allocateForTenantA(heap, 256))
  const allocs = heap.memorySnapshot().history.filter((e) => e.action === 'alloc')
  t.is(allocs.length, 12)
  t.deepEqual(
    allocs.map((e) => e.stack !== undefined),
    [true, false, false, false, true, false, false, false, true, false, false, false],
  )
  for (const e of allocs) if (e.stack) t.regex(e.stack, /allocateForTenantA/)
  const report = heap.leakReport()
  t.is(report.count, 12)
  t.is(report.groups.find((g) => /allocateForTenantA/.test(g.stack))?.count, 3)
  t.is(report.groups.find((g) => g.stack === '(not recorded)')?.count, 9)
  for (const b of blocks) b.free()
  for (const stacks of [{ every: 0 }, { every: 1.5 }, { every: '2' }, {}, null, 'yes'])
    t.throws(() => heap.recordHistory({ stacks: stacks as never }), { code: 'INVALID_ARGUMENT', message: /every: N/ }, JSON.stringify(stacks))
  heap.recordHistory(false)
  gpu.destroy()
})

test('malloc keeps its own API boundary: a foreign receiver is an illegal invocation, and a stack starts at its caller', async (t) => {
  const gpu = await Gpu.request()
  const heap = gpu.heap
  for (const self of [undefined, null, 0, {}, gpu])
    t.throws(() => Reflect.apply(heap.malloc, self, [64]), { instanceOf: TypeError, message: /^Illegal invocation: malloc called on/ }, String(self))
  t.throws(() => heap.malloc(0), { code: 'INVALID_ARGUMENT' })
  heap.recordHistory({ stacks: true })
  const a = allocateForTenantA(heap, 256)
  const stack = heap.memorySnapshot().history.find((e) => e.action === 'alloc' && e.blockId === a.id)?.stack ?? ''
  // wgalloc's frames are skipped at capture, so the caller is the first of at most 8 frames.
  t.regex(stack.split('\n')[0], /^at allocateForTenantA /)
  t.true(stack.split('\n').length <= 8)
  a.free()
  heap.recordHistory(false)
  gpu.destroy()
})

test("a scope's malloc records its caller's stack too", async (t) => {
  const gpu = await Gpu.request()
  const heap = gpu.heap
  const tenant = heap.scope({ name: 'tenant', limit: 1 << 20 })
  heap.recordHistory({ stacks: true })
  const a = allocateInScope(tenant, 256)
  const stack = heap.memorySnapshot().history.find((e) => e.action === 'alloc' && e.blockId === a.id)?.stack ?? ''
  t.regex(stack.split('\n')[0], /^at allocateInScope /)
  a.free()
  heap.recordHistory(false)
  gpu.destroy()
})
