// The live KV caches of each heap, for what reports on the heap as a whole (memory snapshots,
// metrics). Weak: a cache collected without `release()` drops out by itself.

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
}

const byHeap = new WeakMap<object, Set<WeakRef<RegisteredKvCache>>>()

/** The live caches of `heap`, oldest first. */
export function kvCachesOf(heap: object): RegisteredKvCache[] {
  const set = byHeap.get(heap)
  if (!set) return []
  const out: RegisteredKvCache[] = []
  for (const ref of set) {
    const c = ref.deref()
    if (c) out.push(c)
    else set.delete(ref)
  }
  return out
}

/** Registers `cache` under `heap`; returns what unregisters it. */
export function registerKvCache(heap: object, cache: RegisteredKvCache): () => void {
  let set = byHeap.get(heap)
  if (!set) byHeap.set(heap, (set = new Set()))
  const ref = new WeakRef(cache)
  set.add(ref)
  return () => set.delete(ref)
}
