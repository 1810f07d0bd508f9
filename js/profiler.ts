// `Profiler` (MPSProfiler): sessions and captures, async export that first collects
// outstanding GPU timestamps, the scoped `profile()`, `wgalloc:profiler` diagnostics, and
// the stats tables `WGALLOC_PROFILE` asks for at exit (and on SIGINT).
import { inspect } from 'node:util'
import { api } from './internal/api.js'
import type { ProfilerInfo, ProfilerStats } from './binding.js'
import { channels } from './diagnostics.js'
import { invalidArgument, noConstructor, optionKeys, optionsObject, shown } from './errors.js'
import type { Binding } from './internal/native.js'
import { ASYNC_OPTIONS, type AsyncOptions, checkSignal, withSignal } from './internal/signal.js'

/** How traced work appears in traces: one interval per op, one event per op, or both. */
export type ProfilerMode = 'interval' | 'event' | 'interval,event'

/** Options of `profiler.start()`. */
export interface ProfilerStartOptions {
  /** `'interval'` (default), `'event'` or `'interval,event'`. */
  mode?: ProfilerMode
  /** Block after each profiled submission until the GPU finished it (serialises CPU and GPU). */
  waitUntilCompleted?: boolean
  /** Counts and CPU times only, no GPU timestamps (the cheapest mode). */
  statsOnly?: boolean
}

/** Options of `profiler.flush()`. */
export interface FlushOptions extends AsyncOptions {
  /** Give up (resolve `false`) after this many ms (default 10 000). */
  timeoutMs?: number
}

/** Options of `profiler.profile()`: a session's options plus `signal`. */
export interface ProfileOptions extends ProfilerStartOptions, AsyncOptions {}

const PROFILE_OPTIONS = optionKeys<ProfileOptions>({ mode: true, waitUntilCompleted: true, statsOnly: true, signal: true })

const channel = channels.profiler
const kCreate = Symbol('Profiler.create')
let create: (handle: Binding.Profiler) => Profiler
let handleOf: (profiler: Profiler) => Binding.Profiler

/**
 * The device's profiler (`gpu.profiler`).
 *
 * @example
 * ```js
 * await gpu.profiler.profile(() => exe.run({ x }), { mode: 'interval,event' })
 * console.table(gpu.profiler.stats().operations)
 * await gpu.profiler.exportTrace('trace.json')
 * ```
 */
export class Profiler {
  readonly #native: Binding.Profiler

  private constructor(key: symbol, handle: Binding.Profiler) {
    if (key !== kCreate) throw noConstructor('Profiler', 'gpu.profiler')
    this.#native = handle
  }
  static {
    create = (handle) => new Profiler(kCreate, handle)
    handleOf = (p) => p.#native
  }

  /** What the device can time and what the profiler is doing now. */
  @api get info(): ProfilerInfo {
    return this.#native.info
  }
  /** True while recording (session, capture or `WGALLOC_PROFILE`). */
  @api get active(): boolean {
    return this.#native.active
  }
  /**
   * Starts a session. `PROFILER_STATE` if one is running; `INVALID_ARGUMENT` for an unknown mode.
   * @example
   * ```js
   * gpu.profiler.start({ mode: 'interval' })
   * await exe.run({ x })
   * await gpu.profiler.flush()
   * gpu.profiler.stop()
   * console.log(gpu.profiler.stats().operations)
   * ```
   */
  @api start(options?: ProfilerStartOptions): void {
    if (options != null && typeof options !== 'object')
      throw invalidArgument(
        ['profiler.start', 'options'],
        "{ mode?: 'interval' | 'event' | 'interval,event', waitUntilCompleted?: boolean, statsOnly?: boolean }",
        shown(options),
      )
    // profile() passes its own options through, signal included.
    optionsObject(options as ProfileOptions, 'profiler.start', PROFILE_OPTIONS)
    if (options?.mode !== undefined && typeof options.mode !== 'string')
      throw invalidArgument(['profiler.start', 'options.mode'], "'interval', 'event' or 'interval,event'", shown(options.mode))
    let nativeOptions: ProfilerStartOptions | undefined
    if (options != null) {
      const { signal: _signal, ...rest } = options as ProfileOptions // profile() passes its options through
      nativeOptions = rest
    }
    this.#native.start(nativeOptions)
    if (channel.hasSubscribers) channel.publish({ kind: 'start', profiler: this, mode: this.#native.info.mode ?? null, statsOnly: Boolean(options?.statsOnly) })
  }
  /** Ends the session. `PROFILER_STATE` without one. */
  @api stop(): void {
    this.#native.stop()
    if (channel.hasSubscribers) channel.publish({ kind: 'stop', profiler: this })
  }
  /** Per-op and per-copy statistics (`await flush()` first for every GPU time). */
  @api stats(): ProfilerStats {
    return this.#native.stats()
  }
  /** Clears the statistics (not the trace). */
  @api resetStats(): void {
    this.#native.resetStats()
  }
  /**
   * Counts a CPU fallback of op `name` that copied `bytes` between host and device.
   * `INVALID_ARGUMENT` for an empty name.
   */
  @api markCpuFallback(name: string, bytes?: number): void {
    this.#native.markCpuFallback(name, bytes)
    if (channel.hasSubscribers) channel.publish({ kind: 'fallback', profiler: this, name, bytes: bytes ?? 0 })
  }
  /**
   * Resolves `true` once every submitted timestamp was read back, `false` after `timeoutMs`
   * (default 10 s). Takes `{ timeoutMs, signal }` or the timeout as a number.
   */
  @api async flush(options?: FlushOptions | number): Promise<boolean> {
    if (options != null && typeof options !== 'object' && typeof options !== 'number') {
      throw invalidArgument(['flush', 'options'], '{ timeoutMs?, signal? } or a timeout in ms', shown(options))
    }
    const { timeoutMs, signal } =
      typeof options === 'number'
        ? { timeoutMs: options, signal: undefined }
        : optionsObject(options, 'flush', optionKeys<FlushOptions>({ timeoutMs: true, signal: true }))
    checkSignal(signal)
    return withSignal(this.#native.flush(timeoutMs), signal)
  }
  /**
   * Writes the trace recorded so far to `path` without waiting for outstanding timestamps
   * (`exportTrace()` flushes first). `IO_ERROR` if the file cannot be written.
   */
  @api exportTraceNow(path: string): void {
    this.#native.exportTraceNow(path)
  }
  /** Collects outstanding GPU timestamps, then writes Trace Event JSON (chrome://tracing, ui.perfetto.dev). `IO_ERROR` if unwritable. */
  @api async exportTrace(path: string, options?: AsyncOptions): Promise<void> {
    if (typeof path !== 'string' || path === '') throw invalidArgument(['exportTrace', 'path'], 'a non-empty string', shown(path))
    await this.flush({ signal: optionsObject(options, 'exportTrace', ASYNC_OPTIONS).signal })
    this.#native.exportTraceNow(path)
    if (channel.hasSubscribers) channel.publish({ kind: 'trace', profiler: this, path })
  }
  /**
   * Starts recording everything into one trace, written by `stopCapture()` to `name`
   * (`.json` appended without an extension). `PROFILER_STATE` if a capture is running.
   */
  @api startCapture(name: string): void {
    this.#native.startCapture(name)
    if (channel.hasSubscribers) channel.publish({ kind: 'capture', profiler: this, name })
  }
  /**
   * Ends the capture and writes its trace file without waiting for outstanding timestamps
   * (`stopCapture()` flushes first); returns its path. `PROFILER_STATE` without a capture.
   */
  @api stopCaptureNow(): string {
    return this.#native.stopCaptureNow()
  }
  /** Ends the capture started by `startCapture(name)` and resolves with the trace file's path. `PROFILER_STATE` without a capture. */
  @api async stopCapture(options?: AsyncOptions): Promise<string> {
    await this.flush({ signal: optionsObject(options, 'stopCapture', ASYNC_OPTIONS).signal })
    const path = this.#native.stopCaptureNow()
    if (channel.hasSubscribers) channel.publish({ kind: 'trace', profiler: this, path })
    return path
  }
  /** All stats tables as text. */
  @api formatStats(): string {
    return this.#native.formatStats()
  }
  /**
   * Runs `fn` in a profiling session (start, await, flush, stop) and resolves with its result.
   * Aborting ends the session and rejects; `fn` itself is not cancelled (hand it the signal).
   */
  @api async profile<T>(fn: () => T | Promise<T>, options?: ProfileOptions): Promise<T> {
    if (typeof fn !== 'function') throw invalidArgument(['profile', 'fn'], 'an async function to profile', shown(fn))
    const signal = checkSignal(options?.signal)
    this.start(options)
    try {
      return await withSignal(Promise.resolve().then(fn), signal)
    } finally {
      // A profiler failure must not replace the work's own result or error.
      try {
        await this.flush()
      } catch {}
      try {
        this.stop()
      } catch {}
    }
  }
  /** Readable `console.log` output. */
  @api [inspect.custom](): string {
    const i = this.#native.info
    return `Profiler { active: ${i.active}, timing: '${i.timing}'${i.mode ? `, mode: '${i.mode}'` : ''} }`
  }
}

export const wrapProfiler = (handle: Binding.Profiler): Profiler => create(handle)

// With `WGALLOC_PROFILE` asking for stats, every opened device's profiler reports at exit.
// Weak: the report must not keep dropped devices (and their threads) alive until exit.
const live = new Set<WeakRef<Profiler>>()
const forget = new FinalizationRegistry<WeakRef<Profiler>>((ref) => live.delete(ref))
let installed = false

/** Prints every tracked profiler's tables once (at exit or SIGINT). */
let printed = false
function report(): void {
  if (printed) return
  printed = true
  for (const ref of live) {
    const p = ref.deref()
    if (!p) continue
    try {
      const text = handleOf(p).exitReport()
      if (text) process.stderr.write(text)
    } catch {}
  }
}

function installExitReport(): void {
  if (installed) return
  installed = true
  process.on('exit', report)
  // A library never ends the process: the report goes first, the application's own SIGINT
  // handlers (added before or after this) then run as usual. With none, the signal is raised
  // again without this handler, so Node ends the process as it would have.
  const onSigint = () => {
    report()
    if (process.listenerCount('SIGINT') > 1) return
    process.removeListener('SIGINT', onSigint)
    process.kill(process.pid, 'SIGINT')
  }
  process.prependListener('SIGINT', onSigint)
}

/** Tracks `profiler` for the `WGALLOC_PROFILE` exit report (nothing without the variable). */
export function trackForExitReport(profiler: Profiler): void {
  if (!process.env.WGALLOC_PROFILE) return
  installExitReport()
  const ref = new WeakRef(profiler)
  live.add(ref)
  forget.register(profiler, ref)
}
