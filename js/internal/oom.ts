// Out-of-memory reports: with WGALLOC_OOM_SNAPSHOT=<dir>, the heap's snapshot written there for
// later study (the figures come with the error as data: Note [Errors carry their data]).
import type { HeapStats, SnapshotSegment } from '../binding.js'
import type { OutOfMemoryDetails } from '../errors.js'
import { ReportFiles } from './report-file.js'

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
