'use strict'
// planMemory(): the static planner, run off the main thread, with { signal,
// onProgress } and a Plan whose toJSON() is a plain object.
const native = require('./native.cjs')
const { WgallocError, toWgallocError, stringifyInput } = require('./errors.cjs')
const { checkSignal } = require('./signal.cjs')

const { MemoryPlan } = native
const PROGRESS_POLL_MS = 50
const ABORT_GRACE_MS = 60

MemoryPlan.prototype.toJSON = function () {
  return JSON.parse(this.toJsonString())
}

/**
 * JSON text of `value` with exact integers: a BigInt is written as a decimal string (the
 * planner reads those exactly); a number past 2^53 - 1 was already rounded, so it is refused.
 */
function exactJson(value) {
  return stringifyInput(value, 'planMemory input', (key, v) => {
    if (typeof v === 'bigint') return v.toString()
    if (typeof v === 'number' && Number.isInteger(v) && !Number.isSafeInteger(v)) {
      throw new WgallocError('SIZE_OVERFLOW', `planMemory input: ${key} = ${v} is past 2^53 - 1, where JS numbers round; pass a BigInt or a decimal string`)
    }
    return v
  })
}

/** Records serialised this many at a time, yielding to the event loop in between. */
const CHUNK = 5_000

/** `exactJson` of an array, a chunk at a time: a million records must not block the thread for a second. */
async function exactJsonChunked(array, stopped) {
  const parts = []
  for (let i = 0; i < array.length; i += CHUNK) {
    if (i > 0) await new Promise((resolve) => setImmediate(resolve))
    stopped()
    const text = exactJson(array.slice(i, i + CHUNK))
    parts.push(text.slice(1, -1))
  }
  return `[${parts.filter((p) => p.length > 0).join(',')}]`
}

/** Decides the native input format of `input` and serialises it. */
async function encodeInput(input, stopped) {
  if (typeof input === 'string') {
    const trimmed = input.trimStart()
    // JSON text goes to the planner as written, so integers past 2^53 stay exact.
    if (trimmed.startsWith('{') || trimmed.startsWith('[')) return ['json', input]
    return ['csv', input]
  }
  if (Array.isArray(input)) return ['records', await exactJsonChunked(input, stopped)]
  if (input && typeof input === 'object') {
    if (Array.isArray(input.tensors)) return ['graph', exactJson(input)]
    // The whole object: a written plan (with slabSize) is read back with its constraints.
    if (Array.isArray(input.records)) {
      const { records, ...rest } = input
      const head = exactJson(rest)
      const body = await exactJsonChunked(records, stopped)
      return ['records', head === '{}' ? `{"records":${body}}` : `${head.slice(0, -1)},"records":${body}}`]
    }
  }
  throw new WgallocError(
    'INVALID_ARGUMENT',
    'planMemory input must be an array of usage records, { records }, a graph ({ ops, tensors }), or MiniMalloc CSV text',
  )
}

/**
 * Plans offsets for tensor usage records (or a graph) in one slab.
 * @param {Array|object|string} input records `[{ id, size, first, last, alignment?, offset?, preferredOffset?,
 *   sharesWith?, space? }]` (integers may be BigInt or decimal strings), a graph, a written plan, or CSV/JSON text
 * @param {{ strategy?: string, alignment?: number, timeLimitMs?: number, workspace?: string,
 *           multistream?: boolean, capacity?: number, capacities?: Record<string, number>, strict?: boolean,
 *           inPlace?: boolean, signal?: AbortSignal,
 *           onProgress?: (p: { best: number, lowerBound: number, elapsedMs: number }) => void }} [options]
 * @returns {Promise<MemoryPlan>} aborting resolves with the best plan found so far, or rejects
 *   with ABORTED when none existed yet (within 100 ms either way); a signal aborted before the
 *   call rejects with ABORTED (no search ran).
 */
async function planMemory(input, options = {}) {
  if (options === null || typeof options !== 'object') throw new WgallocError('INVALID_ARGUMENT', 'planMemory options must be an object')
  const { signal, onProgress, ...rest } = options
  if (onProgress != null && typeof onProgress !== 'function') throw new WgallocError('INVALID_ARGUMENT', 'onProgress must be a function')
  checkSignal(signal)
  let job
  // Objects are sent as JSON, which is ours: a bad field in them is the caller's argument, not a parse error.
  const fromObjects = typeof input !== 'string'
  const typed = (err) => {
    const e = toWgallocError(err)
    return fromObjects && e.code === 'PARSE_ERROR' ? new WgallocError('INVALID_ARGUMENT', e.message.replace(/^\[PARSE_ERROR\] /, ''), { cause: e }) : e
  }
  try {
    const [format, text] = await encodeInput(input, () => checkSignal(signal))
    job = native.startPlan(format, text, rest)
  } catch (err) {
    throw typed(err)
  }
  // Abort settles within ABORT_GRACE_MS: the search stops at its next check and resolves
  // with its best plan; a phase that cannot stop that fast (parsing a huge input) rejects.
  let abandon
  const abandoned = new Promise((_resolve, reject) => {
    abandon = () => {
      job.cancel()
      setTimeout(() => reject(new WgallocError('ABORTED', 'planMemory was aborted before any plan existed')), ABORT_GRACE_MS).unref?.()
    }
  })
  abandoned.catch(() => {})
  const onAbort = () => abandon()
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
    const plan = await Promise.race([job.wait(), abandoned])
    if (onProgress) report()
    if (failed) throw failed.err
    // The planner works in u64; JS numbers are exact only up to 2^53 - 1, so a larger
    // slab would come back with rounded offsets.
    if (!(plan.slabSize <= Number.MAX_SAFE_INTEGER)) {
      throw new WgallocError('SIZE_OVERFLOW', `the plan's slab (${plan.slabSize} bytes) exceeds 2^53 - 1, beyond what JS numbers hold exactly`)
    }
    return plan
  } catch (err) {
    throw typed(err)
  } finally {
    if (timer) clearInterval(timer)
    signal?.removeEventListener('abort', onAbort)
  }
}

const STRATEGIES = Object.freeze(['naive', 'linearScan', 'greedyBySize', 'greedyByBreadth', 'greedyInputsFirst', 'portfolio', 'exact', 'best'])

module.exports = { planMemory, MemoryPlan, STRATEGIES }
