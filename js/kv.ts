// The paged KV cache (`gpu.createKvCache()`): sequences over K/V block pools on the heap.
// The block manager and the kernels are native; this layer checks arguments, keeps the
// sequence handles, turns refusals into typed errors with their figures, and charges the scope.
import { inspect } from 'node:util'
import { api } from './internal/api.js'
import type { KvCacheStats } from './binding.js'
import type { Heap } from './heap.js'
import type { KvCacheLeak } from './heap-history.js'
import { type KvCacheSnapshot, kvCachesOf, registerKvCache } from './internal/kv-registry.js'
import { type DeviceBlock, blockHandle } from './device-block.js'
import { WgallocError, optionKeys, optionsObject, shown, toWgallocError, u32, invalidArgument, noConstructor } from './errors.js'
import { type HeapScope, nativeScope } from './heap-scope.js'
import type { Binding } from './internal/native.js'
import { native } from './internal/native.js'
import { ASYNC_OPTIONS, type AsyncOptions, callWithSignal } from './internal/signal.js'
import { type Stream, streamHandle } from './stream.js'

/** Element type of the K/V pools: `f16` halves the memory (packed two to a word, no `shader-f16` needed). */
export type KvDtype = 'f32' | 'f16'

/** Options of `gpu.createKvCache()`. Give `maxBlocks` or `maxBytes`. */
export interface KvCacheOptions {
  /** Transformer layers: each has a K pool and a V pool. */
  layers: number
  /** Key/value heads (fewer than query heads under grouped-query attention). */
  kvHeads: number
  /** Dimensions per head, at most 256 (even for `f16`). */
  headDim: number
  /** Pool element type (default `f32`). */
  dtype?: KvDtype
  /** Tokens per block (default 16). */
  blockTokens?: number
  /** Blocks in each pool. */
  maxBlocks?: number
  /** Device bytes for the K and V pools of every layer together; the block count follows. */
  maxBytes?: number
  /** Sequences resident at once: rows of the device block table (default 256). */
  maxSequences?: number
  /** The longest sequence in tokens: the width of the block table. */
  maxSequenceLength: number
  /** Name in metrics and snapshots, unique among the device's live caches (default `kv-<n>`). */
  name?: string
  /** Share the K/V of equal prompt prefixes between sequences (default true). */
  prefixCaching?: boolean
  /** A heap scope charged with the cache's device bytes until `release()`; also the default scope of its sequences. */
  scope?: HeapScope
  /** Let sequences of different scopes share prefixes (default false: one tenant never reads, or times, another's prompts). */
  shareAcrossScopes?: boolean
}

const KV_CACHE_OPTIONS = optionKeys<KvCacheOptions>({
  layers: true,
  kvHeads: true,
  headDim: true,
  dtype: true,
  blockTokens: true,
  maxBlocks: true,
  maxBytes: true,
  maxSequences: true,
  maxSequenceLength: true,
  name: true,
  prefixCaching: true,
  scope: true,
  shareAcrossScopes: true,
})

/** Options of `KvCache.kernelSource()`. */
export interface KvKernelSourceOptions {
  /** Pool element type (default `f32`). */
  dtype?: KvDtype
  /** `paged` (default: the cache's block table) or `contiguous`. */
  layout?: 'paged' | 'contiguous'
}

/** Options of `cache.addSequence()`. */
export interface KvSequenceOptions {
  /** Keeps prefixes apart that must not share K/V although their tokens agree (a LoRA adapter, a system variant). */
  salt?: string
  /** The tenant: prefixes are shared only among sequences of one scope (default: the cache's). */
  scope?: HeapScope
}

/** One sequence of a step and how many of its last tokens the step covers (a prefill chunk, or 1 to decode). */
export interface KvStepEntry {
  /** The sequence. */
  seq: KvSequence
  /** Its last `tokens` positions: K/V rows written, or query rows attended (causally). */
  tokens: number
}

/** Options of `cache.attention()`. */
export interface KvAttentionOptions {
  /** Query heads, a multiple of `kvHeads` (default `kvHeads`). */
  queryHeads?: number
  /** Score scale (default `1 / sqrt(headDim)`). */
  scale?: number
}

/** What `cache.lookup()` finds for a prompt. */
export interface KvLookup {
  /** Leading prompt tokens whose K/V the prefix cache holds (whole blocks; never the last token). */
  cachedTokens: number
  /** Whether `addSequence` and the appends of the rest of the prompt would succeed now. */
  fits: boolean
}

/** Which kernel `KvCache.kernelSource()` returns. */
export type KvKernel = 'append' | 'attention'

const kCreate = Symbol('KvCache.create')
let create: (gpu: Binding.Gpu, heap: Heap, options: KvCacheOptions) => KvCache
let nextCacheNumber = 0
let track: (cache: KvCache, seq: KvSequence, live: boolean) => void
const scopeKeys = new WeakMap<HeapScope, string>()
let nextScopeKey = 0
const scopeKey = (scope: HeapScope): string => {
  let key = scopeKeys.get(scope)
  if (key === undefined) scopeKeys.set(scope, (key = `scope-${nextScopeKey++}`))
  return key
}

/** `tokens` as token ids; at most `max` of them (more could never fit a sequence). */
function tokenArray(tokens: unknown, what: string, max: number): Uint32Array {
  if (tokens == null || typeof tokens !== 'object' || typeof (tokens as ArrayLike<number>).length !== 'number')
    throw invalidArgument([what, 'tokens'], 'an array of token ids', shown(tokens))
  const length = (tokens as ArrayLike<unknown>).length
  if (!Number.isSafeInteger(length) || length < 0 || length > max)
    throw invalidArgument([what, 'tokens.length'], `0 to ${max} (maxSequenceLength)`, shown(length))
  if (tokens instanceof Uint32Array) return tokens
  const list = tokens as ArrayLike<unknown>
  const out = new Uint32Array(list.length)
  for (let i = 0; i < list.length; i++) out[i] = u32(list[i], `${what}: token ${i}`)
  return out
}

/**
 * A paged KV cache (`gpu.createKvCache()`): per layer a K and a V pool of fixed-size blocks on
 * the device heap, and a device block table mapping each sequence's token positions to blocks.
 * A block is taken only when a sequence crosses into it and returns when the sequence ends;
 * full blocks are named by a chained hash of their tokens, so a later prompt that starts alike
 * takes them (prefix caching); `fork()` shares blocks and copies a shared partial block on its
 * first write.
 *
 * @example
 * ```ts
 * const cache = gpu.createKvCache({ layers: 2, kvHeads: 2, headDim: 64, maxSequenceLength: 2048, maxBytes: 64 << 20 })
 * const seq = cache.addSequence(prompt)              // seq.length: tokens found in the prefix cache
 * seq.append(prompt.slice(seq.length))               // blocks for the rest of the prompt
 * const step = [{ seq, tokens: prompt.length - seq.cachedTokens }]
 * cache.write(stream, layer, step, k, v)             // this step's K/V into the pools
 * cache.attention(stream, layer, step, q, out, { queryHeads: 8 })
 * ```
 */
export class KvCache {
  readonly #native: Binding.KvCache
  readonly #options: Required<Pick<KvCacheOptions, 'layers' | 'kvHeads' | 'headDim' | 'dtype' | 'blockTokens' | 'maxSequenceLength'>>
  readonly #scope: HeapScope | undefined
  readonly #share: boolean
  readonly #sequences = new Set<KvSequence>()
  readonly #name: string
  readonly #unregister: () => void
  #released = false

  private constructor(key: symbol, gpu: Binding.Gpu, heap: Heap, options: KvCacheOptions) {
    if (key !== kCreate) throw noConstructor('KvCache', 'gpu.createKvCache()')
    const o = optionsObject(options, 'createKvCache', KV_CACHE_OPTIONS)
    const live = kvCachesOf(heap)
    const name = o.name ?? `kv-${nextCacheNumber++}`
    if (typeof name !== 'string' || name === '') throw invalidArgument(['createKvCache', 'options.name'], 'a non-empty string', shown(name))
    if (live.some((c) => c.name === name))
      throw invalidArgument(
        ['createKvCache', 'options.name'],
        'a name no live KV cache of this device has',
        shown(name),
        `a live KV cache of this device is named ${shown(name)} already`,
      )
    this.#name = name
    const dtype = o.dtype ?? 'f32'
    if (dtype !== 'f32' && dtype !== 'f16') throw invalidArgument(['createKvCache', 'options.dtype'], "'f32' or 'f16'", shown(dtype))
    if ((o.maxBlocks === undefined) === (o.maxBytes === undefined))
      throw invalidArgument(['createKvCache', 'options.maxBlocks'], 'exactly one of maxBlocks and maxBytes', o.maxBlocks === undefined ? 'neither' : 'both')
    if (o.maxBytes !== undefined && (!Number.isSafeInteger(o.maxBytes) || o.maxBytes <= 0))
      throw invalidArgument(['createKvCache', 'options.maxBytes'], 'a positive integer', shown(o.maxBytes))
    this.#options = {
      layers: u32(o.layers, 'createKvCache: layers', 1),
      kvHeads: u32(o.kvHeads, 'createKvCache: kvHeads', 1),
      headDim: u32(o.headDim, 'createKvCache: headDim', 1),
      dtype,
      blockTokens: u32(o.blockTokens ?? 16, 'createKvCache: blockTokens', 1),
      maxSequenceLength: u32(o.maxSequenceLength, 'createKvCache: maxSequenceLength', 1),
    }
    const scopeHandle = o.scope === undefined ? undefined : nativeScope(o.scope, 'createKvCache')
    this.#scope = o.scope
    this.#share = o.shareAcrossScopes === true
    this.#native = gpu.createKvCache({
      ...this.#options,
      maxBlocks: o.maxBlocks === undefined ? undefined : u32(o.maxBlocks, 'createKvCache: maxBlocks', 1),
      maxBytes: o.maxBytes,
      maxSequences: u32(o.maxSequences ?? 256, 'createKvCache: maxSequences', 1),
      prefixCaching: o.prefixCaching !== false,
    })
    if (scopeHandle) {
      try {
        // The native cache holds the charge: returned at release() or collection.
        this.#native.chargeTo(scopeHandle)
      } catch (err) {
        this.#native.release() // over the scope's limit: the pools go back to the heap
        throw toWgallocError(err, true)
      }
    }
    this.#unregister = registerKvCache(heap, this)
  }

  /** The WGSL of a KV kernel, for a graph op (bindings as in `docs/kv-cache.md`). */
  @api static kernelSource(kernel: KvKernel, options?: KvKernelSourceOptions): string {
    const o = optionsObject(options, 'KvCache.kernelSource', optionKeys<KvKernelSourceOptions>({ dtype: true, layout: true }))
    return native.kvKernelSource(kernel, o.dtype ?? 'f32', o.layout)
  }

  /** Name in metrics and snapshots. */
  @api get name(): string {
    return this.#name
  }
  /** Layers (K and V pools each). */
  @api get layers(): number {
    return this.#options.layers
  }
  /** Key/value heads. */
  @api get kvHeads(): number {
    return this.#options.kvHeads
  }
  /** Dimensions per head. */
  @api get headDim(): number {
    return this.#options.headDim
  }
  /** Pool element type. */
  @api get dtype(): KvDtype {
    return this.#options.dtype
  }
  /** Tokens per block. */
  @api get blockTokens(): number {
    return this.#options.blockTokens
  }
  /** The longest sequence in tokens. */
  @api get maxSequenceLength(): number {
    return this.#options.maxSequenceLength
  }
  /** Blocks in each pool. */
  @api get numBlocks(): number {
    return this.#native.numBlocks
  }
  /** Device bytes of the pools and the block table (what the scope is charged). */
  @api get bytes(): number {
    return this.#native.bytes
  }
  /** Block counts, prefix-cache hits, evictions, copies and swaps. */
  @api stats(): KvCacheStats {
    return this.#native.stats()
  }
  /** The cache's heap blocks and one row per live sequence (what `heap.memorySnapshot()` includes). */
  @api snapshot(): KvCacheSnapshot {
    const scopes = new Map([...this.#sequences].map((s) => [s.id, scopeOf(s)]))
    const stats = this.#native.stats()
    return {
      name: this.#name,
      blockTokens: this.#options.blockTokens,
      totalBlocks: stats.totalBlocks,
      usedBlocks: stats.usedBlocks,
      heapBlocks: this.#native.blockIds(),
      sequences: this.#native.sequences().map((r) => ({ ...r, scope: scopes.get(r.id)?.path ?? null })),
    }
  }
  /** What the cache still holds, as `heap.leakReport()` lists it. */
  @api leak(): KvCacheLeak {
    const s = this.#native.stats()
    return { name: this.#name, bytes: this.#native.bytes, sequences: s.sequences, tokens: s.tokens }
  }
  /** Live sequences (swapped-out ones included). */
  @api sequences(): KvSequence[] {
    return [...this.#sequences]
  }

  /**
   * Starts a sequence for `prompt` (token ids). Whole blocks of the prompt found in the prefix
   * cache are taken: `seq.length` (and `seq.cachedTokens`) says how many tokens need no prefill;
   * append the rest. The last prompt token is always left to compute. KV_CACHE_FULL when every
   * table row is taken.
   */
  @api addSequence(prompt: ArrayLike<number> = [], options?: KvSequenceOptions): KvSequence {
    const { tokens, salt, scope, key } = this.#prompt(prompt, options, 'addSequence')
    const id = this.#native.addSequence(tokens, salt, key)
    const seq = wrapSequence(this, this.#native, id, scope)
    this.#sequences.add(seq)
    return seq
  }

  /**
   * What `addSequence(prompt, options)` would find in the prefix cache now (`cachedTokens`), and
   * whether a sequence for the whole prompt fits now (a table row, and blocks for the rest
   * counting evictions). Takes nothing and counts nothing in `stats()`: a scheduler asks before it
   * admits.
   */
  @api lookup(prompt: ArrayLike<number>, options?: KvSequenceOptions): KvLookup {
    const { tokens, salt, key } = this.#prompt(prompt, options, 'lookup')
    return this.#native.lookup(tokens, salt, key)
  }

  #prompt(prompt: unknown, options: KvSequenceOptions | undefined, what: string) {
    const o = optionsObject(options, what, optionKeys<KvSequenceOptions>({ salt: true, scope: true }))
    if (o.salt !== undefined && typeof o.salt !== 'string') throw invalidArgument([what, 'options.salt'], 'a string', shown(o.salt))
    if (o.scope !== undefined) this.#native.checkScope(nativeScope(o.scope, what), what)
    const scope = o.scope ?? this.#scope
    const key = this.#share || scope === undefined ? undefined : scopeKey(scope)
    return { tokens: tokenArray(prompt, what, this.#options.maxSequenceLength), salt: o.salt ?? '', scope, key }
  }

  static {
    create = (gpu, heap, options) => new KvCache(kCreate, gpu, heap, options)
    track = (cache, seq, live) => {
      if (live) cache.#sequences.add(seq)
      else cache.#sequences.delete(seq)
    }
  }

  #step(step: readonly KvStepEntry[], what: string): { ids: number[]; tokens: number[] } {
    if (!Array.isArray(step) || step.length === 0) throw invalidArgument([what, 'step'], 'a non-empty array of { seq, tokens }', shown(step))
    const ids: number[] = []
    const tokens: number[] = []
    step.forEach((entry, i) => {
      const e = optionsObject(entry, `${what}: step[${i}]`, optionKeys<KvStepEntry>({ seq: true, tokens: true }))
      ids.push(sequenceId(e.seq, this, `${what}: step[${i}].seq`))
      tokens.push(u32(e.tokens, `${what}: step[${i}].tokens`))
    })
    return { ids, tokens }
  }

  /** Whether every entry of `step` can append its `tokens` now (evictions counted); conservative for forks sharing a block. */
  @api canAppend(step: readonly KvStepEntry[]): boolean {
    const { ids, tokens } = this.#step(step, 'canAppend')
    return this.#native.canAppend(ids, tokens)
  }

  /**
   * Records on `stream` the write of the step's K and V into `layer`'s pools: `k` and `v` hold
   * `[tokens][kvHeads][headDim]` f32 for each entry's last `tokens` positions, in step order.
   * Full blocks become prefix-cache hits for later prompts once the last layer's write covers
   * them: appended tokens that no step wrote are never shared.
   */
  @api write(stream: Stream, layer: number, step: readonly KvStepEntry[], k: DeviceBlock, v: DeviceBlock): void {
    const { ids, tokens } = this.#step(step, 'kv write')
    this.#native.write(streamHandle(stream), u32(layer, 'kv write: layer'), ids, tokens, blockHandle(k, 'kv write: k'), blockHandle(v, 'kv write: v'))
  }

  /**
   * Records on `stream` attention of the step's query rows over `layer`: `q` holds
   * `[rows][queryHeads][headDim]` f32, one row per entry position (each sees its sequence up to
   * and including itself), and `out` receives the same shape. One dispatch for the whole step:
   * prefill chunks and decode rows of sequences of any lengths.
   */
  @api attention(stream: Stream, layer: number, step: readonly KvStepEntry[], q: DeviceBlock, out: DeviceBlock, options?: KvAttentionOptions): void {
    const { ids, tokens } = this.#step(step, 'kv attention')
    const o = optionsObject(options, 'kv attention', optionKeys<KvAttentionOptions>({ queryHeads: true, scale: true }))
    const heads = u32(o.queryHeads ?? this.#options.kvHeads, 'kv attention: queryHeads', 1)
    this.#native.attention(
      streamHandle(stream),
      u32(layer, 'kv attention: layer'),
      ids,
      tokens,
      heads,
      o.scale,
      blockHandle(q, 'kv attention: q'),
      blockHandle(out, 'kv attention: out'),
    )
  }

  /** Frees the pools and the table once their GPU work ran, returns the scope's charge, and ends every sequence. */
  @api release(): void {
    if (this.#released) return
    this.#released = true
    for (const s of this.#sequences) markFreed(s)
    this.#sequences.clear()
    this.#native.release()
    this.#unregister()
  }
  /** Same as `release()`. */
  @api [Symbol.dispose](): void {
    this.release()
  }
  /** Readable `console.log` output. */
  @api [inspect.custom](): string {
    if (this.#released) return 'KvCache { released }'
    const s = this.#native.stats()
    return `KvCache { blocks: ${s.usedBlocks}/${s.totalBlocks} used, cached: ${s.cachedBlocks}, sequences: ${s.sequences}, blockTokens: ${this.#options.blockTokens} }`
  }
}

const kSeq = Symbol('KvSequence.create')
let wrapSequence: (cache: KvCache, handle: Binding.KvCache, id: number, scope: HeapScope | undefined) => KvSequence
let scopeOf: (seq: KvSequence) => HeapScope | undefined
let sequenceId: (seq: unknown, cache: KvCache, what: string) => number
let markFreed: (seq: KvSequence) => void

/** One sequence of a {@link KvCache}: its tokens' K/V live in the cache's blocks. */
export class KvSequence {
  readonly #cache: KvCache
  readonly #native: Binding.KvCache
  readonly #id: number
  readonly #cached: number
  readonly #scope: HeapScope | undefined
  #freed = false

  private constructor(key: symbol, cache: KvCache, handle: Binding.KvCache, id: number, scope: HeapScope | undefined) {
    if (key !== kSeq) throw noConstructor('KvSequence', 'cache.addSequence()')
    this.#cache = cache
    this.#native = handle
    this.#id = id
    this.#cached = handle.length(id)
    this.#scope = scope
  }
  static {
    wrapSequence = (cache, handle, id, scope) => new KvSequence(kSeq, cache, handle, id, scope)
    scopeOf = (seq) => seq.#scope
    sequenceId = (seq, cache, what) => {
      if (!(seq instanceof KvSequence)) throw invalidArgument(what, 'a KvSequence', shown(seq))
      if (seq.#cache !== cache) throw invalidArgument(what, 'a sequence of this KV cache', `sequence ${seq.#id} of another KV cache`)
      return seq.#live(what)
    }
    markFreed = (seq) => {
      seq.#freed = true
    }
  }

  #live(what: string): number {
    if (this.#freed) throw new WgallocError('USE_AFTER_FREE', `${what}: sequence ${this.#id} was freed`)
    return this.#id
  }

  /** The cache it belongs to. */
  @api get cache(): KvCache {
    return this.#cache
  }
  /** Id, unique within its cache. */
  @api get id(): number {
    return this.#id
  }
  /** Tokens whose K/V the sequence holds (or will, once the step that appended them writes). */
  @api get length(): number {
    return this.#native.length(this.#live('length'))
  }
  /** Tokens it started with from the prefix cache: their prefill is skipped. */
  @api get cachedTokens(): number {
    return this.#cached
  }
  /** Whether it is swapped out to host memory. */
  @api get swapped(): boolean {
    return this.#native.isSwapped(this.#live('swapped'))
  }
  /** Whether it was freed. */
  @api get freed(): boolean {
    return this.#freed
  }

  /**
   * Appends token ids: takes the blocks the sequence crosses into (evicting cached blocks if
   * needed) and copies a shared partial block it writes into. Returns the new length; the next
   * `cache.write()` covering these tokens stores their K/V. KV_CACHE_FULL (with `details`) when
   * the blocks are not there, and nothing changes.
   */
  @api append(tokens: ArrayLike<number>): number {
    return this.#native.append(this.#live('append'), tokenArray(tokens, 'append', this.#cache.maxSequenceLength))
  }
  /**
   * Takes blocks for `tokens` more tokens now, so appending them later cannot fail for space (until a
   * `fork()` shares the partial last block: reserve after forking).
   */
  @api reserve(tokens: number): void {
    this.#native.reserve(this.#live('reserve'), u32(tokens, 'reserve: tokens'))
  }
  /** A new sequence sharing every block of this one (parallel sampling, beam search). */
  @api fork(): KvSequence {
    const id = this.#native.fork(this.#live('fork'))
    const seq = wrapSequence(this.#cache, this.#native, id, this.#scope)
    track(this.#cache, seq, true)
    return seq
  }
  /** Ends the sequence: its blocks return to the cache (full ones stay cached for prefix hits). */
  @api free(): void {
    this.#native.free(this.#live('free'))
    this.#freed = true
    track(this.#cache, this, false)
  }
  /** Copies the sequence's blocks to host memory (the staging cache) and releases them. */
  @api swapOut(): void {
    this.#native.swapOut(this.#live('swapOut'))
  }
  /**
   * Brings a swapped-out sequence back, once its copy to the host completed. KV_CACHE_FULL
   * (nothing changes) when its blocks are not there. An abort rejects at once; a swap-in already
   * under way still completes (`swapped` tells).
   */
  @api async swapIn(options?: AsyncOptions): Promise<void> {
    const { signal } = optionsObject(options, 'swapIn', ASYNC_OPTIONS)
    const id = this.#live('swapIn')
    await callWithSignal(signal, () => this.#native.swapIn(id))
  }
  /** Same as `free()`, if not freed yet. */
  @api [Symbol.dispose](): void {
    if (!this.#freed) this.free()
  }
  /** Readable `console.log` output. */
  @api [inspect.custom](): string {
    return this.#freed ? `KvSequence { id: ${this.#id}, freed }` : `KvSequence { id: ${this.#id}, length: ${this.length}${this.swapped ? ', swapped' : ''} }`
  }
}

/** `gpu.createKvCache()`. */
export const createKvCache = (gpu: Binding.Gpu, heap: Heap, options: KvCacheOptions): KvCache => create(gpu, heap, options)

/** The live KV caches of `heap`, oldest first. */
export const kvCachesOfHeap = (heap: Heap): KvCache[] => kvCachesOf(heap) as KvCache[]
