// Out-of-memory reports: the figures of a failed malloc as `err.details`, and, with
// WGALLOC_OOM_SNAPSHOT=<dir>, the heap's snapshot written there for later study.
import type { HeapStats, SnapshotSegment } from './binding.js'
import type { OutOfMemoryDetails } from './errors.js'
import { ReportFiles } from './report-file.js'

// The native heap's message names every figure (crates/wgalloc-core/src/heap/mod.rs `fail`).
const FIGURES =
  /Tried to allocate (\d+) bytes \((\d+) aligned, pool ([\w-]+)\); allocated (\d+), cached (\d+), pending free (\d+), reserved (\d+), high watermark (\d+|disabled)[^,]*, budget (\d+); largest free block (\d+)/

/** `err.details` of an OUT_OF_MEMORY from `malloc(size)`: the request and the heap's figures. */
export function oomDetails(message: string, requested: number): OutOfMemoryDetails {
  const m = FIGURES.exec(message)
  if (!m) return { requested }
  const n = (i: number) => Number(m[i])
  return {
    requested: n(1),
    aligned: n(2),
    pool: m[3],
    allocated: n(4),
    cached: n(5),
    pendingFree: n(6),
    reserved: n(7),
    highWatermark: m[8] === 'disabled' ? null : n(8),
    budget: n(9),
    largestFreeBlock: n(10),
  }
}

const snapshots = new ReportFiles('wgalloc-oom', 'WGALLOC_OOM_SNAPSHOT')

/**
 * Writes the heap's snapshot into WGALLOC_OOM_SNAPSHOT when set (see Note [Report files]);
 * returns its path, or null when unset, over the count, or when the file could not be made.
 */
export function writeOomSnapshot(heap: { stats(): HeapStats; snapshot(): SnapshotSegment[] }, details: OutOfMemoryDetails): string | null {
  const dir = process.env.WGALLOC_OOM_SNAPSHOT
  if (!dir || !snapshots.take()) return null
  try {
    return snapshots.write(dir, `${JSON.stringify({ kind: 'wgalloc-oom', details, stats: heap.stats(), segments: heap.snapshot() })}\n`)
  } catch {
    // A report must not turn an OOM into another error.
    return null
  }
}
