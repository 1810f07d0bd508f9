// `Host`: the device's host staging cache (CachingHostAllocator).
import { inspect } from 'node:util'
import { api } from './internal/api.js'
import type { HostAllocOptions, HostConfig, HostStats, PrivatePoolInfo } from './binding.js'
import { channels } from './diagnostics.js'
import { invalidArgument, noConstructor, optionKeys, optionsObject, shown } from './errors.js'
import { type HostBlock, blockMessage, freeHostBlock, hostBlockHandle, wrapHostBlock } from './host-block.js'
import type { Binding } from './internal/native.js'

/** The settings `host.configure` takes: every key of HostConfig (the type checks both ways). */
const HOST_SETTINGS: readonly string[] = Object.keys({
  maxCachedBytes: true,
  roundThreshold: true,
  backgroundThread: true,
  zeroCopy: true,
  pipelineBytes: true,
} satisfies Record<keyof HostConfig, true>)

const kCreate = Symbol('Host.create')
let create: (handle: Binding.Host) => Host

/** The device's host staging cache (`gpu.host`). */
export class Host {
  readonly #native: Binding.Host

  private constructor(key: symbol, handle: Binding.Host) {
    if (key !== kCreate) throw noConstructor('Host', 'gpu.host')
    this.#native = handle
  }
  static {
    create = (handle) => new Host(kCreate, handle)
  }

  /**
   * A staging block of at least `size` bytes (a power-of-two size class, or a multiple of 2 MiB
   * above `roundThreshold`). Upload blocks come mapped: write `block.bytes`. Fails with
   * `INVALID_ARGUMENT` for a bad size or direction, `OUT_OF_MEMORY` when the driver refuses.
   * @example
   * ```js
   * const up = gpu.host.alloc(data.byteLength, { direction: 'upload' })
   * up.bytes.set(data)
   * const s = gpu.createStream()
   * s.copy(up, deviceBlock) // detaches up.bytes
   * await s.synchronize()
   * up.free()
   * ```
   */
  @api alloc(size: number, options?: HostAllocOptions): HostBlock {
    const block = this.#native.alloc(size, optionsObject(options, 'host.alloc', optionKeys<HostAllocOptions>({ direction: true })))
    if (channels.host.hasSubscribers) channels.host.publish({ ...blockMessage('alloc', block), host: this })
    return wrapHostBlock(block)
  }
  /** Frees `block` (same as `block.free()`), checking that it belongs to this device. */
  @api free(block: HostBlock): void {
    const b = hostBlockHandle(block, 'host.free: block')
    freeHostBlock(b, () => this.#native.free(b))
  }
  /** Returns freed blocks whose GPU work completed to the cache (also done on every alloc). */
  @api processEvents(): void {
    this.#native.processEvents()
  }
  /** Releases idle cached blocks (and those of released private pools); returns the bytes released. */
  @api emptyCache(): number {
    return this.#native.emptyCache()
  }
  /** Allocations until `endAllocateToPool(poolId)` come from private pool `poolId` (an integer >= 1). */
  @api beginAllocateToPool(pool: number): void {
    this.#native.beginAllocateToPool(pool)
  }
  /** Ends `beginAllocateToPool(pool)`: later allocations come from the default pool again. */
  @api endAllocateToPool(pool: number): void {
    this.#native.endAllocateToPool(pool)
  }
  /** Drops one hold on the pool; once none is left, `emptyCache()` frees its idle blocks. */
  @api releasePool(pool: number): void {
    this.#native.releasePool(pool)
  }
  /** Private pools still held. */
  @api get privatePools(): PrivatePoolInfo[] {
    return this.#native.privatePools
  }
  /** Host-cache statistics (PyTorch HostStats): a plain object of numbers. */
  @api stats(): HostStats {
    return this.#native.stats()
  }
  /** Sets every `peak` to its `current` value. */
  @api resetPeakStats(): void {
    this.#native.resetPeakStats()
  }
  /** Zeroes the cumulative figures and counters. */
  @api resetAccumulatedStats(): void {
    this.#native.resetAccumulatedStats()
  }
  /** The settings in force. */
  @api get config(): HostConfig {
    return this.#native.config
  }
  /** Changes settings; lowering `maxCachedBytes` releases idle blocks above it. */
  @api configure(options: HostConfig): void {
    // napi-rs reads a required options object without checking it is one.
    if (options === null || typeof options !== 'object')
      throw invalidArgument(['host.configure', 'options'], 'an options object, e.g. { maxCachedBytes }', shown(options))
    // A misspelt setting would otherwise change nothing, silently.
    const unknown = Object.keys(options).find((k) => !HOST_SETTINGS.includes(k))
    if (unknown !== undefined)
      throw invalidArgument(
        ['host.configure', `options.${unknown}`],
        `a known setting (${HOST_SETTINGS.join(', ')})`,
        shown(unknown),
        `unknown setting ${shown(unknown)}`,
      )
    this.#native.configure(options)
  }
  /** Readable `console.log` output. */
  @api [inspect.custom](): string {
    const s = this.#native.stats()
    return `Host { allocated: ${s.allocatedBytes.current}, active: ${s.activeBytes.current}, cached: ${s.cachedBytes}, pending: ${s.pendingBlocks} }`
  }
}

export const wrapHost = (handle: Binding.Host): Host => create(handle)
