// `HostBlock`: a mapped staging block of the host cache.
import { inspect } from 'node:util'
import { api } from './internal/api.js'
import { bytesOf, type TensorData } from './internal/bytes.js'
import { channels } from './diagnostics.js'
import { shown, optionsObject, invalidArgument, noConstructor } from './errors.js'
import type { Binding } from './internal/native.js'
import { ASYNC_OPTIONS, type AsyncOptions, callWithSignal } from './internal/signal.js'
import { type Stream, streamHandle } from './stream.js'

/** Transfer direction of a host block. */
export type HostDirection = 'upload' | 'download'

const kCreate = Symbol('HostBlock.create')
let create: (handle: Binding.HostBlock) => HostBlock
let handleOf: (block: HostBlock) => Binding.HostBlock

/** What `wgalloc:host` says of a block. */
export const blockMessage = (kind: 'alloc' | 'free', b: Binding.HostBlock) => ({
  kind,
  id: b.id,
  direction: b.direction,
  requestedSize: b.requestedSize,
  size: b.size,
  poolId: b.poolId,
})

/** Frees `b`, publishing on `wgalloc:host` while it has subscribers. */
export function freeHostBlock(b: Binding.HostBlock, free: () => void): void {
  const message = channels.host.hasSubscribers && !b.freed ? blockMessage('free', b) : null
  free()
  if (message) channels.host.publish(message)
}

/** A staging block of the host cache (`gpu.host.alloc()`). */
export class HostBlock {
  readonly #native: Binding.HostBlock

  private constructor(key: symbol, handle: Binding.HostBlock) {
    if (key !== kCreate) throw noConstructor('HostBlock', 'gpu.host.alloc()')
    this.#native = handle
  }
  static {
    create = (handle) => new HostBlock(kCreate, handle)
    handleOf = (block) => block.#native
  }

  /** Block id (as in `wgalloc:host` messages). */
  @api get id(): number {
    return this.#native.id
  }
  /** Bytes asked for: the length of `bytes`. */
  @api get requestedSize(): number {
    return this.#native.requestedSize
  }
  /** Bytes of the staging buffer (the size class). */
  @api get size(): number {
    return this.#native.size
  }
  /** `'upload'` or `'download'`. */
  @api get direction(): HostDirection {
    return this.#native.direction
  }
  /** 0 for the default pool, else the private pool the block came from. */
  @api get poolId(): number {
    return this.#native.poolId
  }
  /** True once `free()` ran (reuse still waits for the block's GPU work). */
  @api get freed(): boolean {
    return this.#native.freed
  }
  /** True while `bytes` is available. */
  @api get mapped(): boolean {
    return this.#native.mapped
  }
  /**
   * The mapped bytes (`requestedSize` long), without a copy where the runtime allows.
   * A view taken earlier is detached (length 0) once the block is copied, unmapped or
   * freed; reading `bytes` then throws `INVALID_ARGUMENT` (map it again) or, once freed,
   * `USE_AFTER_FREE`. `DEVICE_LOST` once the device is lost.
   */
  @api get bytes(): Uint8Array {
    return this.#native.bytes
  }
  /** Writes `data` (any typed array, DataView or ArrayBuffer) at `offset` (default 0) into the mapped upload block. */
  @api write(data: TensorData, offset?: number): void {
    this.#native.write(bytesOf(data, 'write: data'), offset)
  }
  /** Copies `length` bytes (default: to the end) at `offset` out of a mapped download block. */
  @api read(offset?: number, length?: number): Buffer {
    return this.#native.read(offset, length)
  }
  /**
   * Resolves once mapped, after the work recorded on the block was submitted and ran: a
   * download block to read what was copied in, an upload block to write it again.
   * `USE_AFTER_FREE` once freed, `DEVICE_LOST`, `ABORTED`.
   */
  @api async map(options?: AsyncOptions): Promise<void> {
    const { signal } = optionsObject(options, 'map', ASYNC_OPTIONS)
    return callWithSignal(signal, () => this.#native.map())
  }
  /** Unmaps the block (detaching `bytes`). */
  @api unmap(): void {
    this.#native.unmap()
  }
  /**
   * Marks the block as used by `stream`: a later `free()` of the unmapped block waits for that
   * stream's work. A block freed while mapped is reused at once: WebGPU lets no GPU work use mapped memory.
   */
  @api recordStream(stream: Stream): void {
    this.#native.recordStream(streamHandle(stream))
  }
  /**
   * Returns the block to the cache (reused once its GPU work ran); detaches `bytes`.
   * A second call fails with `DOUBLE_FREE`.
   */
  @api free(): void {
    const n = this.#native
    freeHostBlock(n, () => n.free())
  }
  /** Frees the block unless already freed. */
  @api [Symbol.dispose](): void {
    if (!this.#native.freed) this.free()
  }
  /** Readable `console.log` output. */
  @api [inspect.custom](): string {
    const b = this.#native
    if (b.freed) return `HostBlock { id: ${b.id}, freed }`
    return `HostBlock { id: ${b.id}, direction: '${b.direction}', requestedSize: ${b.requestedSize}, size: ${b.size}, mapped: ${b.mapped}${b.poolId ? `, pool: ${b.poolId}` : ''} }`
  }
}

export const wrapHostBlock = (handle: Binding.HostBlock): HostBlock => create(handle)

/** The native block of `block`; INVALID_ARGUMENT naming `what` for anything else. */
export function hostBlockHandle(block: unknown, what: string): Binding.HostBlock {
  if (!(block instanceof HostBlock)) throw invalidArgument(what, 'a HostBlock from gpu.host.alloc()', shown(block))
  return handleOf(block)
}
