'use strict'
const { memoizeGetter } = require('./memo.cjs')
const { checkSignal, withSignal } = require('./signal.cjs')
// JS side of the profiler: one Profiler per Gpu, async export/capture that first
// collect outstanding GPU timestamps, the scoped `profile()`, `{ signal }`,
// `wgalloc:profiler` diagnostics, and the stats tables `WGALLOC_PROFILE` asks for at
// exit (and on SIGINT, before the previous handlers).

function installProfiler({ Gpu, Profiler, WgallocError, diag }) {
  memoizeGetter(Gpu.prototype, 'profiler')
  const channel = diag.channels.profiler

  const start = Profiler.prototype.start
  Profiler.prototype.start = function (options) {
    if (options != null && typeof options !== 'object')
      throw new WgallocError(
        'INVALID_ARGUMENT',
        "profiler.start: options must be { mode?: 'interval' | 'event' | 'interval,event', waitUntilCompleted?: boolean, statsOnly?: boolean }",
      )
    if (options?.mode !== undefined && typeof options.mode !== 'string')
      throw new WgallocError('INVALID_ARGUMENT', "profiler.start: mode must be 'interval', 'event' or 'interval,event'")
    let native
    if (options != null) {
      const { signal, ...rest } = options // profile() passes its options through
      native = rest
    }
    start.call(this, native)
    if (channel.hasSubscribers) channel.publish({ kind: 'start', profiler: this, mode: this.info.mode ?? null, statsOnly: Boolean(options?.statsOnly) })
  }
  const stop = Profiler.prototype.stop
  Profiler.prototype.stop = function () {
    stop.call(this)
    if (channel.hasSubscribers) channel.publish({ kind: 'stop', profiler: this })
  }
  const startCapture = Profiler.prototype.startCapture
  Profiler.prototype.startCapture = function (name) {
    startCapture.call(this, name)
    if (channel.hasSubscribers) channel.publish({ kind: 'capture', profiler: this, name })
  }
  const markCpuFallback = Profiler.prototype.markCpuFallback
  Profiler.prototype.markCpuFallback = function (name, bytes) {
    markCpuFallback.call(this, name, bytes)
    if (channel.hasSubscribers) channel.publish({ kind: 'fallback', profiler: this, name, bytes: bytes ?? 0 })
  }

  /**
   * Resolves `true` once every submitted timestamp was read back, `false` after
   * `timeoutMs` (default 10 s). Takes `{ timeoutMs, signal }` or the timeout as a number.
   */
  const flush = Profiler.prototype.flush
  Profiler.prototype.flush = function (options) {
    try {
      if (options != null && typeof options !== 'object' && typeof options !== 'number') {
        throw new WgallocError('INVALID_ARGUMENT', 'flush: pass { timeoutMs?, signal? } or a timeout in ms')
      }
      const { timeoutMs, signal } = typeof options === 'number' ? { timeoutMs: options } : (options ?? {})
      checkSignal(signal)
      return withSignal(flush.call(this, timeoutMs), signal)
    } catch (err) {
      return Promise.reject(err)
    }
  }

  /** Writes the trace (after collecting outstanding timestamps) to `path`. */
  Profiler.prototype.exportTrace = async function (path, options) {
    if (typeof path !== 'string' || path === '') throw new WgallocError('INVALID_ARGUMENT', 'exportTrace: path must be a non-empty string')
    await this.flush({ signal: options?.signal })
    this.exportTraceNow(path)
    if (channel.hasSubscribers) channel.publish({ kind: 'trace', profiler: this, path })
  }

  /** Ends the capture and writes its trace file; resolves with the path. */
  Profiler.prototype.stopCapture = async function (options) {
    await this.flush({ signal: options?.signal })
    const path = this.stopCaptureNow()
    if (channel.hasSubscribers) channel.publish({ kind: 'trace', profiler: this, path })
    return path
  }

  /** Runs `fn` in a profiling session; stats and trace hold its work when it resolves. */
  Profiler.prototype.profile = async function (fn, options) {
    if (typeof fn !== 'function') throw new WgallocError('INVALID_ARGUMENT', 'profile: pass an async function to profile')
    const signal = checkSignal(options?.signal)
    this.start(options)
    try {
      // Aborting ends the session and rejects; `fn` itself runs on (hand it the signal to stop it).
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

  installExitReport(Gpu, diag)
}

/** With `WGALLOC_PROFILE` asking for stats, prints every device's tables at exit and on SIGINT. */
function installExitReport(Gpu, diag) {
  if (!process.env.WGALLOC_PROFILE) return
  // Weak: the report must not keep dropped devices (and their threads) alive until exit.
  const live = new Set() // WeakRef<Profiler>
  const forget = new FinalizationRegistry((ref) => live.delete(ref))
  const track = (gpu) => {
    const p = gpu.profiler
    const ref = new WeakRef(p)
    live.add(ref)
    forget.register(p, ref)
  }
  const request = Gpu.request
  Gpu.request = async function (...args) {
    const gpu = await request.apply(this, args)
    // WGALLOC_PROFILE asked for stderr output, so this warning is printed as well as published.
    try {
      track(gpu)
    } catch (err) {
      diag.warn(`wgalloc profiler disabled: ${err.message}`, { gpu, code: err.code })
      process.emitWarning(`wgalloc profiler disabled: ${err.message}`)
    }
    return gpu
  }
  const attach = Gpu.attach
  Gpu.attach = function (...args) {
    const gpu = attach.apply(this, args)
    try {
      track(gpu)
    } catch {}
    return gpu
  }
  let printed = false
  const report = () => {
    if (printed) return
    printed = true
    for (const ref of live) {
      const p = ref.deref()
      if (!p) continue
      try {
        const text = p.exitReport()
        if (text) process.stderr.write(text)
      } catch {}
    }
  }
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

module.exports = { installProfiler }
