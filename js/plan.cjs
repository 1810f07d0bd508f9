'use strict'
// planMemory(): the static planner, run off the main thread, with { signal,
// onProgress } and a Plan whose toJSON() is a plain object.
const native = require('./native.cjs')
const { WgallocError, toWgallocError, parseJson } = require('./errors.cjs')
const { checkSignal } = require('./signal.cjs')

const { MemoryPlan } = native
const PROGRESS_POLL_MS = 50

MemoryPlan.prototype.toJSON = function () {
  return JSON.parse(this.toJsonString())
}

/** Decides the native input format of `input` and serialises it. */
function encodeInput(input) {
  if (typeof input === 'string') {
    const trimmed = input.trimStart()
    if (trimmed.startsWith('{') || trimmed.startsWith('[')) return encodeInput(parseJson(input, 'planMemory input text'))
    return ['csv', input]
  }
  if (Array.isArray(input)) return ['records', JSON.stringify(input)]
  if (input && typeof input === 'object') {
    if (Array.isArray(input.tensors)) return ['graph', JSON.stringify(input)]
    if (Array.isArray(input.records)) return ['records', JSON.stringify(input.records)]
  }
  throw new WgallocError(
    'INVALID_ARGUMENT',
    'planMemory input must be an array of usage records, { records }, a graph ({ ops, tensors }), or MiniMalloc CSV text',
  )
}

/**
 * Plans offsets for tensor usage records (or a graph) in one slab.
 * @param {Array|object|string} input records `[{ id, size, first, last, alignment? }]`, a graph, or CSV text
 * @param {{ strategy?: string, alignment?: number, timeLimitMs?: number, workspace?: string,
 *           multistream?: boolean, signal?: AbortSignal,
 *           onProgress?: (p: { best: number, lowerBound: number, elapsedMs: number }) => void }} [options]
 * @returns {Promise<MemoryPlan>} aborting resolves with the best plan found so far; a
 *   signal aborted before the call rejects with ABORTED (no search ran).
 */
async function planMemory(input, options = {}) {
  if (options === null || typeof options !== 'object') throw new WgallocError('INVALID_ARGUMENT', 'planMemory options must be an object')
  const { signal, onProgress, ...rest } = options
  if (onProgress != null && typeof onProgress !== 'function') throw new WgallocError('INVALID_ARGUMENT', 'onProgress must be a function')
  checkSignal(signal)
  let job
  try {
    const [format, text] = encodeInput(input)
    job = native.startPlan(format, text, rest)
  } catch (err) {
    throw toWgallocError(err)
  }
  const onAbort = () => job.cancel()
  try {
    signal?.addEventListener('abort', onAbort, { once: true })
  } catch (err) {
    job.cancel() // a signal that throws: stop the search rather than leave it running
    throw err
  }
  let last
  let failed // { err } once onProgress threw: the search stops and planMemory rejects with it
  const report = () => {
    const p = job.progress()
    if (p && !failed && (!last || p.best !== last.best || p.lowerBound !== last.lowerBound)) {
      last = p
      try {
        onProgress(p)
      } catch (err) {
        // Thrown from a timer, it would be an uncaught exception that ends the process.
        failed = { err }
        job.cancel()
      }
    }
  }
  const timer = onProgress ? setInterval(report, PROGRESS_POLL_MS) : null
  timer?.unref?.()
  try {
    const plan = await job.wait()
    if (onProgress) report()
    if (failed) throw failed.err
    // The planner works in u64; JS numbers are exact only up to 2^53 - 1, so a larger
    // slab would come back with rounded offsets.
    if (!(plan.slabSize <= Number.MAX_SAFE_INTEGER)) {
      throw new WgallocError('SIZE_OVERFLOW', `the plan's slab (${plan.slabSize} bytes) exceeds 2^53 - 1, beyond what JS numbers hold exactly`)
    }
    return plan
  } catch (err) {
    throw toWgallocError(err)
  } finally {
    if (timer) clearInterval(timer)
    signal?.removeEventListener('abort', onAbort)
  }
}

const STRATEGIES = Object.freeze(['naive', 'linearScan', 'greedyBySize', 'greedyByBreadth', 'portfolio', 'exact', 'best'])

module.exports = { planMemory, MemoryPlan, STRATEGIES }
