// `GpuBuffer`: a plain device buffer outside the heap, for data movement.
import { inspect } from 'node:util'
import { api } from './internal/api.js'
import { shown, invalidArgument, noConstructor } from './errors.js'
import type { Binding } from './internal/native.js'

const kCreate = Symbol('GpuBuffer.create')
let create: (handle: Binding.GpuBuffer) => GpuBuffer
let handleOf: (buffer: GpuBuffer) => Binding.GpuBuffer

/** A plain device-local buffer outside the heap (`gpu.createBuffer()`), for data movement. */
export class GpuBuffer {
  readonly #native: Binding.GpuBuffer

  private constructor(key: symbol, handle: Binding.GpuBuffer) {
    if (key !== kCreate) throw noConstructor('GpuBuffer', 'gpu.createBuffer()')
    this.#native = handle
  }
  static {
    create = (handle) => new GpuBuffer(kCreate, handle)
    handleOf = (buffer) => buffer.#native
  }

  /** Bytes requested at creation. */
  @api get size(): number {
    return this.#native.size
  }
  /** True once `destroy()` ran. */
  @api get destroyed(): boolean {
    return this.#native.destroyed
  }
  /** Releases the GPU memory (work already submitted still completes). Idempotent. */
  @api destroy(): void {
    this.#native.destroy()
  }
  /** Releases the GPU memory (same as `destroy()`). */
  @api [Symbol.dispose](): void {
    this.#native.destroy()
  }
  /** Readable `console.log` output. */
  @api [inspect.custom](): string {
    return `GpuBuffer { size: ${this.#native.size}${this.#native.destroyed ? ', destroyed' : ''} }`
  }
}

export const wrapBuffer = (handle: Binding.GpuBuffer): GpuBuffer => create(handle)

/** The native buffer of `buffer`; INVALID_ARGUMENT naming `what` for anything else. */
export function bufferHandle(buffer: unknown, what: string): Binding.GpuBuffer {
  if (!(buffer instanceof GpuBuffer)) throw invalidArgument(what, 'a GpuBuffer from gpu.createBuffer()', shown(buffer))
  return handleOf(buffer)
}
