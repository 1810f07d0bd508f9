// Quotas: a view of the heap whose allocations count against a named limit (a tenant or a
// model). Scopes nest; a malloc is charged to its scope and every parent, and one past any
// limit fails with QUOTA_EXCEEDED naming that scope, leaving the other scopes untouched.
import { inspect } from 'node:util'
import { api } from './api.js'
import { type DeviceBlock, type MallocOptions, setBlockScope } from './device-block.js'
import { WgallocError, shown } from './errors.js'
import type { Heap } from './heap.js'

/** Options of `heap.scope()` and `scope.scope()`. */
export interface HeapScopeOptions {
  /** Name in errors, stats and metrics (unique among its siblings). */
  name: string
  /** Bytes the scope (with its children) may hold: a positive integer, at most the parent's limit. */
  limit: number
}

/** What a scope holds now and held at most. */
export interface HeapScopeStats {
  /** The limit in bytes. */
  limit: number
  /** Bytes charged now: live blocks of the scope and its children, executors and weights given to it. */
  allocatedBytes: number
  /** The most bytes charged at once. */
  peakAllocatedBytes: number
  /** Blocks live now (this scope's own mallocs). */
  activeBlocks: number
  /** Mallocs refused for this scope's limit. */
  quotaExceeded: number
}

/** Something a scope is charged for: its bytes go back when it is released. */
export interface ScopeCharge {
  /** Returns the bytes to the scope (idempotent). */
  release(): void
}

const kCreate = Symbol('HeapScope.create')
let createScope: (heap: Heap, parent: HeapScope | null, options: unknown, siblings: Map<string, HeapScope>, budget: number) => HeapScope

/**
 * A named quota over the heap (`gpu.heap.scope({ name, limit })`): `malloc` here is the heap's
 * malloc, charged to this scope and its parents. Disposing the scope ends it: later mallocs fail,
 * blocks already handed out stay valid.
 *
 * @example
 * ```js
 * const tenantA = gpu.heap.scope({ name: 'tenant-a', limit: 256 << 20 })
 * const x = tenantA.malloc(1 << 20)   // QUOTA_EXCEEDED past 256 MiB, other tenants unaffected
 * tenantA.stats().allocatedBytes
 * ```
 */
export class HeapScope {
  readonly #heap: Heap
  readonly #parent: HeapScope | null
  readonly #name: string
  readonly #limit: number
  readonly #children = new Map<string, HeapScope>()
  #allocated = 0
  #peak = 0
  #blocks = 0
  #refused = 0
  #disposed = false

  private constructor(key: symbol, heap: Heap, parent: HeapScope | null, options: unknown, siblings: Map<string, HeapScope>, budget: number) {
    if (key !== kCreate) throw new WgallocError('INVALID_ARGUMENT', 'HeapScope has no public constructor; use gpu.heap.scope()')
    if (options === null || typeof options !== 'object') throw new WgallocError('INVALID_ARGUMENT', 'scope: pass { name, limit }')
    const { name, limit } = options as Partial<HeapScopeOptions>
    if (typeof name !== 'string' || name === '') throw new WgallocError('INVALID_ARGUMENT', `scope: name must be a non-empty string, got ${shown(name)}`)
    // '/' joins the names of a scope's path ('a/b'): a name holding one would share another's path.
    if (name.includes('/')) throw new WgallocError('INVALID_ARGUMENT', `scope '${name}': a name cannot hold '/', which separates the names in a scope's path`)
    if (typeof limit !== 'number' || !Number.isSafeInteger(limit) || limit <= 0)
      throw new WgallocError('INVALID_ARGUMENT', `scope '${name}': limit must be a positive integer of bytes, got ${shown(limit)}`)
    const cap = parent ? parent.#limit : budget
    if (limit > cap)
      throw new WgallocError(
        'INVALID_ARGUMENT',
        `scope '${name}': limit ${limit} exceeds ${parent ? `the parent scope '${parent.path}' limit` : "the device's memory budget"} (${cap} bytes)`,
      )
    if (siblings.has(name)) throw new WgallocError('INVALID_ARGUMENT', `scope '${name}' exists already here; names are unique among siblings`)
    this.#heap = heap
    this.#parent = parent
    this.#name = name
    this.#limit = limit
    siblings.set(name, this)
  }
  static {
    createScope = (heap, parent, options, siblings, budget) => new HeapScope(kCreate, heap, parent, options, siblings, budget)
  }

  /** The scope's name. */
  @api get name(): string {
    return this.#name
  }
  /** Names from the outermost scope down, joined with `/`. */
  @api get path(): string {
    // Iterative, as are walk() and dispose(): scopes may nest deeper than the JS stack.
    const names: string[] = []
    for (let s: HeapScope | null = this; s !== null; s = s.#parent) names.push(s.#name)
    return names.reverse().join('/')
  }
  /** The limit in bytes. */
  @api get limit(): number {
    return this.#limit
  }
  /** True once disposed. */
  @api get disposed(): boolean {
    return this.#disposed
  }

  /** Throws QUOTA_EXCEEDED naming the first scope (this or a parent) that `bytes` more would overrun. */
  #check(bytes: number): void {
    if (this.#disposed) throw new WgallocError('INVALID_ARGUMENT', `scope '${this.path}' was disposed; allocate from a live scope`)
    for (let s: HeapScope | null = this; s !== null; s = s.#parent) {
      if (s.#allocated + bytes > s.#limit) {
        s.#refused++
        const err = new WgallocError(
          'QUOTA_EXCEEDED',
          `scope '${s.path}' is over its limit: ${bytes} more bytes on ${s.#allocated} allocated would exceed ${s.#limit}; free blocks of this scope or raise its limit`,
        )
        err.details = { scope: s.path, limit: s.#limit, allocated: s.#allocated, requested: bytes }
        throw err
      }
    }
  }

  /** Charges `bytes` to this scope and its parents (after #check); `peak`: they count towards the peaks now. */
  #charge(bytes: number, block: boolean, peak = true): void {
    for (let s: HeapScope | null = this; s !== null; s = s.#parent) s.#allocated += bytes
    if (block) this.#blocks++
    if (peak) this.#notePeak()
  }

  /** Raises the peaks of this scope and its parents to what they hold now. */
  #notePeak(): void {
    for (let s: HeapScope | null = this; s !== null; s = s.#parent) if (s.#allocated > s.#peak) s.#peak = s.#allocated
  }

  /** Returns `bytes` to this scope and its parents. */
  #uncharge(bytes: number, block: boolean): void {
    for (let s: HeapScope | null = this; s !== null; s = s.#parent) s.#allocated -= bytes
    if (block) this.#blocks--
  }

  /**
   * The heap's malloc, charged to this scope and its parents: QUOTA_EXCEEDED (naming the scope
   * over its limit) when the block's bytes would take any of them past its limit. The block
   * is freed as any other; its bytes then return to the scope.
   */
  @api malloc(size: number, options?: MallocOptions): DeviceBlock {
    const alignment = this.#heap.alignment
    // The heap rounds the request up to its alignment: charge what the block will hold.
    const bytes = Number.isSafeInteger(size) && size > 0 ? Math.ceil(size / alignment) * alignment : 0
    this.#check(bytes)
    // Charged before the heap's malloc: its event listeners may malloc from this scope too, and
    // must see these bytes as taken. They count towards the peak once the block exists.
    this.#charge(bytes, true, false)
    let block: DeviceBlock
    try {
      block = this.#heap.malloc(size, options)
    } catch (err) {
      this.#uncharge(bytes, true)
      throw err
    }
    if (block.size !== bytes) this.#charge(block.size - bytes, false, false)
    this.#notePeak()
    setBlockScope(block, (freed) => this.#uncharge(freed, true))
    return block
  }

  /**
   * Charges `bytes` held elsewhere (an executor's `deviceBytes`, weights) to this scope until
   * the returned charge is released; QUOTA_EXCEEDED when they do not fit. `gpu.compile(graph,
   * { scope })` and `gpu.createWeights(params, { scope })` use it.
   */
  @api charge(bytes: number): ScopeCharge {
    if (!Number.isSafeInteger(bytes) || bytes < 0)
      throw new WgallocError('INVALID_ARGUMENT', `scope.charge: bytes must be a non-negative integer, got ${shown(bytes)}`)
    this.#check(bytes)
    this.#charge(bytes, false)
    let held = true
    return {
      release: () => {
        if (!held) return
        held = false
        this.#uncharge(bytes, false)
      },
    }
  }

  /** A child scope: its allocations count against it and against this scope. */
  @api scope(options: HeapScopeOptions): HeapScope {
    if (this.#disposed) throw new WgallocError('INVALID_ARGUMENT', `scope '${this.path}' was disposed`)
    return createScope(this.#heap, this, options, this.#children, 0)
  }

  /** What the scope holds now and held at most. */
  @api stats(): HeapScopeStats {
    return {
      limit: this.#limit,
      allocatedBytes: this.#allocated,
      peakAllocatedBytes: this.#peak,
      activeBlocks: this.#blocks,
      quotaExceeded: this.#refused,
    }
  }

  /** The scope and its children, depth first (for metrics). */
  *walk(): Generator<HeapScope> {
    const stack: HeapScope[] = [this]
    for (let s = stack.pop(); s !== undefined; s = stack.pop()) {
      yield s
      const children = [...s.#children.values()]
      for (let i = children.length - 1; i >= 0; i--) stack.push(children[i])
    }
  }

  /** Ends the scope (and its children): later mallocs fail; live blocks stay valid and are still returned when freed. */
  @api dispose(): void {
    for (const s of this.walk()) s.#disposed = true
  }
  /** Same as `dispose()`. */
  @api [Symbol.dispose](): void {
    if (!this.#disposed) this.dispose()
  }
  /** Readable `console.log` output. */
  @api [inspect.custom](): string {
    return `HeapScope { path: '${this.path}', allocated: ${this.#allocated}, limit: ${this.#limit}${this.#disposed ? ', disposed' : ''} }`
  }
}

/** A top-level scope of `heap` (its limit at most the device's budget). */
export const topScope = (heap: Heap, options: unknown, siblings: Map<string, HeapScope>, budget: number): HeapScope =>
  createScope(heap, null, options, siblings, budget)

/**
 * Note [Charges follow their holder]: an executor, weights or a KV cache given a scope hold its charge
 * until `release()`; one dropped without `release()` has its device memory freed by the
 * garbage collector (the native object's drop), so its charge must go back then too, or the
 * scope stays charged for memory nobody holds and its tenant is locked out. The charge is
 * registered here with the object as the key, and unregistered by `release()`.
 */
const heldCharges = new FinalizationRegistry<ScopeCharge>((charge) => charge.release())

/** Holds `charge` for `holder` until `release` (or the holder's collection) returns it. */
export function holdCharge(holder: object, charge: ScopeCharge): ScopeCharge {
  heldCharges.register(holder, charge, holder)
  return {
    release: () => {
      heldCharges.unregister(holder)
      charge.release()
    },
  }
}
