// Public types of wgalloc: the generated native declarations, plus what the JS
// facade adds (typed errors, `{ signal }` options, disposal).

export type {
  CopyOptions,
  GpuInfo,
  GpuRequestOptions,
  MemoryBudget,
} from '../index.js'
export { Gpu, GpuBuffer, GpuEvent, Stream } from '../index.js'

/** Options accepted by every asynchronous call. */
export interface AsyncOptions {
  /** Aborting rejects the call with a `WgallocError` whose code is `ABORTED`. */
  signal?: AbortSignal
}

/** Stable error codes: branch on `error.code`, never on the message. */
export type WgallocErrorCode =
  | 'INVALID_ARGUMENT'
  | 'ADAPTER_NOT_FOUND'
  | 'DEVICE_REQUEST_FAILED'
  | 'DEVICE_LOST'
  | 'OUT_OF_MEMORY'
  | 'GPU_VALIDATION'
  | 'USE_AFTER_FREE'
  | 'DOUBLE_FREE'
  | 'ABORTED'
  | 'PLAN_INVALID'
  | 'PARSE_ERROR'
  | 'SIZE_OVERFLOW'
  | 'BINARY_NOT_FOUND'
  | 'INTERNAL'

/** Every error wgalloc throws (argument type errors included). */
export declare class WgallocError extends Error {
  readonly code: WgallocErrorCode
  constructor(code: WgallocErrorCode, message: string, options?: { cause?: unknown })
}

/** All codes `WgallocError.code` can take. */
export declare const ERROR_CODES: readonly WgallocErrorCode[]

declare module '../index.js' {
  interface GpuRequestOptions {
    /** Aborting rejects `Gpu.request()` with code `ABORTED`. */
    signal?: AbortSignal
  }
  interface Gpu {
    /** Reads `size` bytes at `offset` once all earlier work completed. */
    readBuffer(buffer: GpuBuffer, offset: number, size: number, options?: AsyncOptions): Promise<Buffer>
    /** Destroys the device (same as `destroy()`). */
    [Symbol.dispose](): void
  }
  interface GpuBuffer {
    /** Releases the GPU memory (same as `destroy()`). */
    [Symbol.dispose](): void
  }
  interface GpuEvent {
    /** Resolves once the GPU finished this submission. */
    wait(options?: AsyncOptions): Promise<void>
  }
  interface Stream {
    /** Submits pending work and resolves once all of this stream's work completed. */
    synchronize(options?: AsyncOptions): Promise<void>
    /** Waits for the stream's work (same as `synchronize()`). */
    [Symbol.asyncDispose](): Promise<void>
  }
}
