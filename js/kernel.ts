// `ComputeKernel`: a WGSL compute pipeline with a fixed binding signature.
import { inspect } from 'node:util'
import { api } from './internal/api.js'
import { shown, invalidArgument, noConstructor } from './errors.js'
import type { Binding } from './internal/native.js'

const kCreate = Symbol('ComputeKernel.create')
let create: (handle: Binding.ComputeKernel) => ComputeKernel
let handleOf: (kernel: ComputeKernel) => Binding.ComputeKernel

/** A compiled compute kernel with a fixed binding signature (`gpu.createKernel()`). */
export class ComputeKernel {
  readonly #native: Binding.ComputeKernel

  private constructor(key: symbol, handle: Binding.ComputeKernel) {
    if (key !== kCreate) throw noConstructor('ComputeKernel', 'gpu.createKernel()')
    this.#native = handle
  }
  static {
    create = (handle) => new ComputeKernel(kCreate, handle)
    handleOf = (kernel) => kernel.#native
  }

  /** Name in errors and profiles. */
  @api get name(): string {
    return this.#native.name
  }
  /** Storage bindings the kernel takes (blocks per dispatch). */
  @api get bindings(): number {
    return this.#native.bindings
  }
  /** Whether dispatches pass uniform bytes. */
  @api get uniform(): boolean {
    return this.#native.uniform
  }
  /** Readable `console.log` output. */
  @api [inspect.custom](): string {
    return `ComputeKernel { name: '${this.#native.name}', bindings: ${this.#native.bindings}, uniform: ${this.#native.uniform} }`
  }
}

export const wrapKernel = (handle: Binding.ComputeKernel): ComputeKernel => create(handle)

/** The native kernel of `kernel`; INVALID_ARGUMENT for anything else. */
export function kernelHandle(kernel: unknown): Binding.ComputeKernel {
  if (!(kernel instanceof ComputeKernel)) throw invalidArgument(['dispatch', 'kernel'], 'a kernel from gpu.createKernel()', shown(kernel))
  return handleOf(kernel)
}
