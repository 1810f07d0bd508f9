// Quotas: a view of the heap whose allocations count against a named limit (a tenant or a
// model). The scopes, their figures and every charge live in the native heap (one tree per
// device, attached workers included); this is the facade over them.
import { inspect } from 'node:util'
import { api, fail } from './internal/api.js'
import type { DeviceBlock, MallocOptions } from './device-block.js'
import { invalidArgument, noConstructor, optionKeys, optionsObject, shown, toWgallocError } from './errors.js'
import type { Heap } from './heap.js'
import { type Holder, STACK_FRAMES } from './heap-history.js'
import type { Binding } from './internal/native.js'

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
let createScope: (heap: Heap, handle: Binding.HeapScope) => HeapScope
let handleOf: (scope: HeapScope) => Binding.HeapScope
/** The heap's malloc path, for a scope's (js/heap.ts sets it: it shares the heap's private state). */
interface ScopedMalloc {
  /** Whether the heap's history records this malloc's stack (the caller then captures it). */
  samplesStack(heap: Heap): boolean
  /** A block charged to the scope at index `scope`, with the caller's captured `stack`. */
  malloc(heap: Heap, scope: number, size: number, options: MallocOptions | undefined, stack: Holder | null): DeviceBlock
}
let scoped: ScopedMalloc

/** Throws the native error as the facade's typed error. */
function native<T>(f: () => T): T {
  try {
    return f()
  } catch (err) {
    throw toWgallocError(err, true)
  }
}

/** Checks what JS alone can see of scope options (the native tree checks the rest). */
function scopeOptions(options: unknown): HeapScopeOptions {
  if (options === null || typeof options !== 'object') throw invalidArgument(['scope', 'options'], '{ name, limit }', shown(options))
  const { name, limit } = optionsObject(options as HeapScopeOptions, 'scope', optionKeys<HeapScopeOptions>({ name: true, limit: true }))
  if (typeof name !== 'string' || name === '') throw invalidArgument(['scope', 'options.name'], 'a non-empty string', shown(name))
  if (typeof limit !== 'number' || !Number.isSafeInteger(limit) || limit <= 0)
    throw invalidArgument(['scope', 'options.limit'], 'a positive integer of bytes', shown(limit), `the limit of scope '${name}'`)
  return { name, limit }
}

/** The facade objects of each heap's scopes, by native id: one object per scope. */
const wrappers = new WeakMap<Heap, Map<number, HeapScope>>()

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
  readonly #native: Binding.HeapScope
  /** The scope's index in its device's tree, as the native malloc takes it. */
  readonly #index: number
  readonly #name: string
  #path: string | undefined
  readonly #limit: number

  private constructor(key: symbol, heap: Heap, handle: Binding.HeapScope) {
    if (key !== kCreate) throw noConstructor('HeapScope', 'gpu.heap.scope()')
    this.#heap = heap
    this.#native = handle
    this.#index = handle.id
    this.#name = handle.name
    this.#limit = handle.stats().limit
  }
  static {
    createScope = (heap, handle) => {
      let byId = wrappers.get(heap)
      if (!byId) wrappers.set(heap, (byId = new Map()))
      let scope = byId.get(handle.id)
      if (!scope) byId.set(handle.id, (scope = new HeapScope(kCreate, heap, handle)))
      return scope
    }
    handleOf = (scope) => scope.#native
  }

  /** The scope's name. */
  @api get name(): string {
    return this.#name
  }
  /** Names from the outermost scope down, joined with `/`. */
  @api get path(): string {
    // Read once, when asked: a path is as long as the scope is deep.
    this.#path ??= this.#native.path
    return this.#path
  }
  /** The limit in bytes. */
  @api get limit(): number {
    return this.#limit
  }
  /** True once disposed. */
  @api get disposed(): boolean {
    return this.#native.disposed
  }

  /**
   * The heap's malloc, charged to this scope and its parents: QUOTA_EXCEEDED (naming the scope
   * over its limit) when the block's bytes would take any of them past its limit. The block
   * holds its charge until it is freed, by `free()` or when collected; its bytes then return.
   */
  malloc(size: number, options?: MallocOptions): DeviceBlock {
    // Its own API boundary and stack capture, as heap.malloc's (Note [malloc's own API boundary]).
    try {
      const heap = this.#heap
      let stack: Holder | null = null
      if (scoped.samplesStack(heap)) {
        stack = {}
        const limit = Error.stackTraceLimit
        Error.stackTraceLimit = STACK_FRAMES
        Error.captureStackTrace(stack, HeapScope.prototype.malloc)
        Error.stackTraceLimit = limit
      }
      return scoped.malloc(heap, this.#index, size, options, stack)
    } catch (err) {
      throw fail(err, this, 'malloc')
    }
  }

  /**
   * Charges `bytes` held elsewhere to this scope until the returned charge is released (or
   * collected); QUOTA_EXCEEDED when they do not fit. `gpu.compile(graph, { scope })` and
   * `gpu.createWeights(params, { scope })` charge their device bytes the same way.
   */
  @api charge(bytes: number): ScopeCharge {
    if (!Number.isSafeInteger(bytes) || bytes < 0) throw invalidArgument(['scope.charge', 'bytes'], 'a non-negative integer', shown(bytes))
    return native(() => this.#native.charge(bytes))
  }

  /** A child scope: its allocations count against it and against this scope. */
  @api scope(options: HeapScopeOptions): HeapScope {
    const { name, limit } = scopeOptions(options)
    return createScope(
      this.#heap,
      native(() => this.#native.child(name, limit)),
    )
  }

  /** What the scope holds now and held at most. */
  @api stats(): HeapScopeStats {
    return this.#native.stats()
  }

  /** The scope and its live children, depth first (for metrics). */
  *walk(): Generator<HeapScope> {
    const inside = `${this.path}/`
    if (!this.disposed) yield this
    for (const s of this.#heap.scopes()) if (s.path.startsWith(inside)) yield s
  }

  /** Ends the scope (and its children): later mallocs fail; live blocks stay valid and are still returned when freed. */
  @api dispose(): void {
    this.#native.dispose()
  }
  /** Same as `dispose()`. */
  @api [Symbol.dispose](): void {
    if (!this.disposed) this.dispose()
  }
  /** Readable `console.log` output. */
  @api [inspect.custom](): string {
    const { allocatedBytes } = this.stats()
    return `HeapScope { path: '${this.path}', allocated: ${allocatedBytes}, limit: ${this.#limit}${this.disposed ? ', disposed' : ''} }`
  }
}

/** The native scope behind `scope` (INVALID_ARGUMENT naming `what` for anything else). */
export function nativeScope(scope: unknown, what: string): Binding.HeapScope {
  if (!(scope instanceof HeapScope)) throw invalidArgument([what, 'options.scope'], 'a scope from gpu.heap.scope()', shown(scope))
  return handleOf(scope)
}

/** A top-level scope of `heap` (its limit at most the device's budget). */
export const topScope = (heap: Heap, handle: Binding.Heap, options: unknown): HeapScope => {
  const { name, limit } = scopeOptions(options)
  return createScope(
    heap,
    native(() => handle.createScope(name, limit)),
  )
}

/** The facade objects of every live scope of `heap`'s device, depth first. */
export const listScopes = (heap: Heap, handle: Binding.Heap): HeapScope[] => handle.listScopes().map((s) => createScope(heap, s))

/** The live scope at `path` of `heap`'s device, if any. */
export const findScope = (heap: Heap, handle: Binding.Heap, path: string): HeapScope | undefined => {
  const s = handle.findScope(path)
  return s ? createScope(heap, s) : undefined
}

/** Sets the heap's scoped malloc (js/heap.ts: it shares the heap's malloc path). */
export function setScopedMalloc(f: ScopedMalloc): void {
  scoped = f
}
