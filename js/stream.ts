// `Stream`: an ordered lane of GPU work, recorded then submitted together.
import { inspect } from 'node:util'
import { api } from './internal/api.js'
import type { CopyOptions } from './binding.js'
import { GpuBuffer, bufferHandle } from './buffer.js'
import { DeviceBlock, blockHandle } from './device-block.js'
import { shown, u32, optionKeys, optionsObject, invalidArgument, noConstructor } from './errors.js'
import { type GpuEvent, wrapEvent } from './event.js'
import { HostBlock, hostBlockHandle } from './host-block.js'
import { type ComputeKernel, kernelHandle } from './kernel.js'
import type { Binding } from './internal/native.js'
import { ASYNC_OPTIONS, type AsyncOptions, callWithSignal } from './internal/signal.js'

const COPY_OPTIONS = optionKeys<CopyOptions>({ srcOffset: true, dstOffset: true, size: true })

const kCreate = Symbol('Stream.create')
let create: (handle: Binding.Stream) => Stream
let handleOf: (stream: Stream) => Binding.Stream

/**
 * An ordered lane of GPU work: commands are recorded, then `submit()`ted together.
 *
 * @example
 * ```ts
 * const axpy = gpu.createKernel({ source, bindings: 2, uniform: true })
 * const stream = gpu.createStream()
 * stream.dispatch(axpy, [x, y], Math.ceil(n / 64), new Float32Array([alpha, 0, 0, 0]))
 * await stream.synchronize()
 * ```
 */
export class Stream {
  readonly #native: Binding.Stream

  private constructor(key: symbol, handle: Binding.Stream) {
    if (key !== kCreate) throw noConstructor('Stream', 'gpu.createStream()')
    this.#native = handle
  }
  static {
    create = (handle) => new Stream(kCreate, handle)
    handleOf = (stream) => stream.#native
  }

  /**
   * Records one dispatch of `kernel` (from `gpu.createKernel`) over `blocks` (binding i =
   * blocks[i], all `var<storage, read_write>`), with `workgroups` (a count or [x, y?, z?]) and,
   * if the kernel takes one, `uniform` bytes (any typed array). Each block is recorded as used
   * by this stream, so freeing it waits for the dispatch. `INVALID_ARGUMENT` on a wrong block
   * count, a missing or unexpected uniform, or workgroups above the device limit;
   * `USE_AFTER_FREE` for a freed block.
   */
  @api dispatch(kernel: ComputeKernel, blocks: DeviceBlock[], workgroups: number | number[], uniform?: ArrayBufferView): void {
    if (!Array.isArray(blocks)) throw invalidArgument(['dispatch', 'blocks'], 'an array of DeviceBlocks', shown(blocks))
    const handles = blocks.map((b, i) => blockHandle(b, `dispatch: blocks[${i}]`))
    const counts: unknown[] = Array.isArray(workgroups) ? workgroups : [workgroups]
    const wg = counts.map((n, i) => u32(n, `dispatch: workgroups${Array.isArray(workgroups) ? `[${i}]` : ''}`))
    const bytes =
      ArrayBuffer.isView(uniform) && !(uniform instanceof Uint8Array) ? new Uint8Array(uniform.buffer, uniform.byteOffset, uniform.byteLength) : uniform
    this.#native.dispatch(kernelHandle(kernel), handles, wg, bytes as Uint8Array | undefined)
  }

  /** Records a copy from an upload block into a device block (detaches and unmaps the upload block's `bytes`). */
  copy(src: HostBlock, dst: DeviceBlock, options?: CopyOptions): void
  /** Records a copy from a device block into a download block (`await dst.map()` after submitting). */
  copy(src: DeviceBlock, dst: HostBlock, options?: CopyOptions): void
  /** Records a copy between heap blocks; freeing either waits until the copy ran. */
  copy(src: DeviceBlock, dst: DeviceBlock, options?: CopyOptions): void
  /** Records a buffer-to-buffer copy; it runs when the stream is submitted. */
  copy(src: GpuBuffer, dst: GpuBuffer, options?: CopyOptions): void
  @api copy(src: HostBlock | DeviceBlock | GpuBuffer, dst: HostBlock | DeviceBlock | GpuBuffer, options?: CopyOptions): void {
    const n = this.#native
    optionsObject(options, 'copy', COPY_OPTIONS)
    if (src instanceof HostBlock && dst instanceof DeviceBlock) n.copyToDevice(hostBlockHandle(src, 'copy: src'), blockHandle(dst, 'copy: dst'), options)
    else if (src instanceof DeviceBlock && dst instanceof HostBlock) n.copyToHost(blockHandle(src, 'copy: src'), hostBlockHandle(dst, 'copy: dst'), options)
    else if (src instanceof DeviceBlock && dst instanceof DeviceBlock) n.copyBlocks(blockHandle(src, 'copy: src'), blockHandle(dst, 'copy: dst'), options)
    else if (src instanceof GpuBuffer && dst instanceof GpuBuffer) n.copy(bufferHandle(src, 'copy: src'), bufferHandle(dst, 'copy: dst'), options)
    else
      throw invalidArgument(
        ['copy', 'src, dst'],
        '(GpuBuffer, GpuBuffer), (DeviceBlock, DeviceBlock), (upload HostBlock, DeviceBlock) or (DeviceBlock, download HostBlock)',
        `(${shown(src)}, ${shown(dst)})`,
      )
  }

  /** Commands recorded since the last submit. */
  @api get pendingCommands(): number {
    return this.#native.pendingCommands
  }
  /** Submits recorded work; the event completes when the GPU finished it. */
  @api submit(): GpuEvent {
    return wrapEvent(this.#native.submit())
  }
  /** Submits pending work and resolves once all of this stream's work completed. */
  @api async synchronize(options?: AsyncOptions): Promise<void> {
    const { signal } = optionsObject(options, 'synchronize', ASYNC_OPTIONS)
    return callWithSignal(signal, () => this.#native.synchronize())
  }
  /** Submits recorded work that was never submitted (without waiting). */
  @api [Symbol.dispose](): void {
    if (this.#native.pendingCommands > 0) this.#native.submit()
  }
  /** Waits for the stream's work (same as `synchronize()`). */
  @api [Symbol.asyncDispose](): Promise<void> {
    return this.#native.synchronize()
  }
  /** Readable `console.log` output. */
  @api [inspect.custom](): string {
    return `Stream { pendingCommands: ${this.#native.pendingCommands} }`
  }
}

export const wrapStream = (handle: Binding.Stream): Stream => create(handle)

/** The native stream of `stream`; INVALID_ARGUMENT for anything else. */
export function streamHandle(stream: unknown): Binding.Stream {
  if (!(stream instanceof Stream)) throw invalidArgument(['recordStream', 'stream'], 'a Stream from gpu.createStream()', shown(stream))
  return handleOf(stream)
}
