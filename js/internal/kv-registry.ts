// The live KV caches of each heap (memory snapshots and metrics list them), and what a memory
// snapshot shows of each.
import type { KvCacheLeak } from '../heap-history.js'
import { LiveObjects } from './live-objects.js'

/** One live sequence in a {@link KvCacheSnapshot}. */
export interface KvSequenceSnapshot {
  /** Sequence id, unique within its cache. */
  id: number
  /** Tokens it holds. */
  tokens: number
  /** Blocks it refers to (none while swapped out). */
  blocks: number
  /** Of those, blocks other sequences refer to as well (prefix hits, forks). */
  sharedBlocks: number
  /** Whether it is swapped out to host memory. */
  swapped: boolean
  /** Path of its heap scope (the tenant), or null. */
  scope: string | null
}

/** A KV cache in `heap.memorySnapshot()` (`kvCaches`): its blocks on the heap and one row per sequence. */
export interface KvCacheSnapshot {
  /** The cache's name (`createKvCache({ name })`). */
  name: string
  /** Tokens per block. */
  blockTokens: number
  /** Blocks in each pool. */
  totalBlocks: number
  /** Blocks some sequence refers to. */
  usedBlocks: number
  /** Heap block ids of its pools (K then V of each layer), then of its block table. */
  heapBlocks: number[]
  /** Live sequences by id. */
  sequences: KvSequenceSnapshot[]
}

/** What the registry needs of a cache. */
export interface RegisteredKvCache {
  /** Name, unique among the heap's live caches. */
  readonly name: string
  /** Its rows for a memory snapshot. */
  snapshot(): KvCacheSnapshot
  /** What it still holds, for a leak report. */
  leak(): KvCacheLeak
}

const caches = new LiveObjects<RegisteredKvCache>()

/** The live caches of `heap`, oldest first. */
export const kvCachesOf = (heap: object): RegisteredKvCache[] => caches.of(heap)

/** Registers `cache` under `heap`; returns what unregisters it. */
export const registerKvCache = (heap: object, cache: RegisteredKvCache): (() => void) => caches.add(heap, cache)
