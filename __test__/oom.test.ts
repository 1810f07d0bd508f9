// Explaining an OOM: `err.details` carries the request and the heap's figures, OUT_OF_MEMORY
// listeners get them before malloc throws, and WGALLOC_OOM_SNAPSHOT writes the heap's snapshot.
import { mkdtempSync, readFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import test from 'ava'
import { Gpu, type OutOfMemoryEvent, type SnapshotSegment, type WgallocError } from 'wgalloc'

// Serial: both tests set WGALLOC_OOM_SNAPSHOT for the process.
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
