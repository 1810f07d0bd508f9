'use strict'
const { memoizeGetter } = require('./memo.cjs')
// JS side of the profiler: one Profiler per Gpu, async export/capture that first
// collect outstanding GPU timestamps, the scoped `profile()`, and the stats tables
// `WGALLOC_PROFILE` asks for at exit (and on SIGINT, before the previous handlers).

function installProfiler({ Gpu, Profiler, WgallocError }) {
  memoizeGetter(Gpu.prototype, 'profiler')

  const start = Profiler.prototype.start
  Profiler.prototype.start = function (options) {
    if (options != null && typeof options !== 'object') throw new WgallocError('INVALID_ARGUMENT', "profiler.start: options must be { mode?: 'interval' | 'event' | 'interval,event', waitUntilCompleted?: boolean }")
    if (options?.mode !== undefined && typeof options.mode !== 'string') throw new WgallocError('INVALID_ARGUMENT', "profiler.start: mode must be 'interval', 'event' or 'interval,event'")
    return start.call(this, options ?? undefined)
  }

  /** Writes the trace (after collecting outstanding timestamps) to `path`. */
  Profiler.prototype.exportTrace = async function (path) {
    if (typeof path !== 'string' || path === '') throw new WgallocError('INVALID_ARGUMENT', 'exportTrace: path must be a non-empty string')
    await this.flush()
    this.exportTraceNow(path)
  }

  /** Ends the capture and writes its trace file; resolves with the path. */
  Profiler.prototype.stopCapture = async function () {
    await this.flush()
    return this.stopCaptureNow()
  }

  /** Runs `fn` in a profiling session; stats and trace hold its work when it resolves. */
  Profiler.prototype.profile = async function (fn, options) {
    if (typeof fn !== 'function') throw new WgallocError('INVALID_ARGUMENT', 'profile: pass an async function to profile')
    this.start(options)
    try {
      return await fn()
    } finally {
      // A profiler failure must not replace the work's own result or error.
      try { await this.flush() } catch {}
      try { this.stop() } catch {}
    }
  }

  installExitReport(Gpu)
}

/** With `WGALLOC_PROFILE` asking for stats, prints every device's tables at exit and on SIGINT. */
function installExitReport(Gpu) {
  if (!process.env.WGALLOC_PROFILE) return
  const live = new Set()
  const request = Gpu.request
  Gpu.request = async function (...args) {
    const gpu = await request.apply(this, args)
    try { live.add(gpu.profiler) } catch (err) { process.emitWarning(`wgalloc profiler disabled: ${err.message}`) }
    return gpu
  }
  const attach = Gpu.attach
  Gpu.attach = function (...args) {
    const gpu = attach.apply(this, args)
    try { live.add(gpu.profiler) } catch {}
    return gpu
  }
  let printed = false
  const report = () => {
    if (printed) return
    printed = true
    for (const p of live) {
      try {
        const text = p.exitReport()
        if (text) process.stderr.write(text)
      } catch {}
    }
  }
  process.on('exit', report)
  // Our handler goes first, then whatever handled SIGINT before; with none, exit as Node would.
  const previous = process.listeners('SIGINT')
  process.removeAllListeners('SIGINT')
  process.on('SIGINT', (signal) => {
    report()
    if (previous.length === 0) process.exit(130)
    for (const h of previous) h.call(process, signal)
  })
}

module.exports = { installProfiler }
