// Loads the platform binary through the napi-rs loader (binding.js, generated); a failure
// becomes a BINARY_NOT_FOUND WgallocError that says what to install. The binding is internal:
// the public classes hold its objects and call them.
import { chmodSync, lstatSync, mkdirSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type * as Binding from '../binding.js'
import { bindingError } from './binding-error.js'

/** The heap's by-id block helpers, left out of the generated types (src/heap.rs). */
export interface NativeHeapTable {
  readonly slot: number
  allocScalarId(value: Uint8Array): number
  blockHandle(id: number): Binding.DeviceBlock
  /** Frees a block collected without `free()`; its size, 0 if it was gone already. */
  releaseBlock(id: number): number
  /** `[id, size]` pairs of the blocks this heap object holds (handed out, not freed). */
  tableBlocks(): Float64Array
  sameHeapAs(other: Binding.Heap): boolean
}

/** Raw N-API functions on numbers (src/block_ids.rs): the malloc/free fast path. */
interface RawHeapFunctions {
  heapMalloc(slot: number, size: number, usage: number, scratch: Float64Array): number
  /** `heapMalloc` charged to the scope at index `scope` of the heap's tree (and its ancestors). */
  heapMallocIn(slot: number, scope: number, size: number, usage: number, scratch: Float64Array): number
  heapFree(slot: number, id: number): void
  /**
   * Moves the oldest recorded allocator events into `out`, six numbers each (kind, block id,
   * segment id, offset, size, pool; -1 for none), as many as fit; returns how many.
   */
  heapTakeEvents(slot: number, out: Float64Array): number
}

/**
 * Mesa prints `error: XDG_RUNTIME_DIR is invalid or not set` on every device open when the
 * variable is unset (headless boxes, containers): point it at a private folder first.
 *
 * Note [One runtime folder per user]: every process and worker of one user shares
 * `$TMPDIR/wgalloc-xdg-<uid>`, so loading wgalloc leaves at most one folder behind, however
 * many processes ran. The name is predictable, so the folder is used only when it is a real
 * directory (not a symlink) owned by this user; its mode is forced to 0700. Otherwise the
 * variable stays unset: only Mesa's warning is at stake.
 */
function quietMesa(): void {
  if (process.platform !== 'linux' || process.env.XDG_RUNTIME_DIR) return
  const uid = process.getuid?.()
  if (uid === undefined) return
  const dir = join(tmpdir(), `wgalloc-xdg-${uid}`)
  try {
    try {
      mkdirSync(dir, { mode: 0o700 })
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') return
    }
    const st = lstatSync(dir)
    if (!st.isDirectory() || st.uid !== uid) return
    if ((st.mode & 0o777) !== 0o700) chmodSync(dir, 0o700)
    process.env.XDG_RUNTIME_DIR = dir
  } catch {
    // Only a warning is at stake; leave the variable unset.
  }
}

function load(): typeof Binding & RawHeapFunctions {
  quietMesa()
  try {
    return require('../binding.js')
  } catch (err) {
    throw bindingError(err)
  }
}

export const native = load()
export type { Binding }
