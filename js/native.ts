// Loads the platform binary through the napi-rs loader (binding.js, generated); a failure
// becomes a BINARY_NOT_FOUND WgallocError that says what to install. The binding is internal:
// the public classes hold its objects and call them.
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type * as Binding from './binding.js'
import { bindingError } from './binding-error.js'

/** The heap's block-table helpers, left out of the generated types (src/heap.rs). */
export interface NativeHeapTable {
  readonly slot: number
  allocScalarId(value: Uint8Array): number
  blockHandle(id: number): Binding.DeviceBlock
  releaseBlock(id: number): void
  sameHeapAs(other: Binding.Heap): boolean
  /** Events since the last call, five numbers each (kind, block id, segment id, size, pool; -1 for none). */
  takeEventNumbers(): Float64Array
}

/** Raw N-API functions on numbers (src/block_table.rs): the malloc/free fast path. */
interface RawHeapFunctions {
  heapMalloc(slot: number, size: number, usage: number, scratch: Float64Array): number
  heapFree(slot: number, id: number): void
}

/**
 * Mesa prints `error: XDG_RUNTIME_DIR is invalid or not set` on every device open when the
 * variable is unset (headless boxes, containers): point it at a private folder first.
 */
function quietMesa(): void {
  if (process.platform !== 'linux' || process.env.XDG_RUNTIME_DIR) return
  try {
    process.env.XDG_RUNTIME_DIR = mkdtempSync(join(tmpdir(), 'wgalloc-xdg-'))
  } catch {
    // Only a warning is at stake; leave the variable unset.
  }
}

function load(): typeof Binding & RawHeapFunctions {
  quietMesa()
  try {
    return require('./binding.js')
  } catch (err) {
    throw bindingError(err)
  }
}

export const native = load()
export type { Binding }
