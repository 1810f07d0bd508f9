// `GpuEvent`: one queue submission, to query or wait on.
import { inspect } from 'node:util'
import { api } from './internal/api.js'
import { optionsObject, noConstructor } from './errors.js'
import type { Binding } from './internal/native.js'
import { ASYNC_OPTIONS, type AsyncOptions, callWithSignal } from './internal/signal.js'

const kCreate = Symbol('GpuEvent.create')
let create: (handle: Binding.GpuEvent) => GpuEvent

/** A queue submission (from `stream.submit()`, `block.copyFrom()`): query it or wait for it. */
export class GpuEvent {
  readonly #native: Binding.GpuEvent

  private constructor(key: symbol, handle: Binding.GpuEvent) {
    if (key !== kCreate) throw noConstructor('GpuEvent', 'stream.submit()')
    this.#native = handle
  }
  static {
    create = (handle) => new GpuEvent(kCreate, handle)
  }

  /** Submission sequence number (increasing per device). */
  @api get seq(): number {
    return this.#native.seq
  }
  /** Whether the GPU finished this submission (without blocking). */
  @api query(): boolean {
    return this.#native.query()
  }
  /** Resolves once the GPU finished this submission. `DEVICE_LOST` if the device goes first. */
  @api async wait(options?: AsyncOptions): Promise<void> {
    const { signal } = optionsObject(options, 'wait', ASYNC_OPTIONS)
    return callWithSignal(signal, () => this.#native.wait())
  }
  /** Blocks up to `timeoutMs` for this submission; true once it completed. */
  @api waitSync(timeoutMs: number): boolean {
    return this.#native.waitSync(timeoutMs)
  }
  /** Readable `console.log` output. */
  @api [inspect.custom](): string {
    let state: string
    try {
      state = this.#native.query() ? 'complete' : 'pending'
    } catch (e) {
      state = (e as { code?: string }).code ?? 'error'
    }
    return `GpuEvent { seq: ${this.#native.seq}, ${state} }`
  }
}

/** The public event for a native one. */
export const wrapEvent = (handle: Binding.GpuEvent): GpuEvent => create(handle)
