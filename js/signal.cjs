'use strict'
// `{ signal }` on every async call: an already-aborted signal rejects before any
// work starts; aborting later rejects at once (work already submitted to the GPU
// still completes). Rejections are WgallocErrors with code ABORTED (name AbortError).
const { WgallocError, abortError } = require('./errors.cjs')

/** Throws INVALID_ARGUMENT for a non-signal, ABORTED for an aborted one; returns the signal. */
function checkSignal(signal) {
  if (signal == null) return undefined
  if (typeof signal !== 'object' || typeof signal.aborted !== 'boolean' || typeof signal.addEventListener !== 'function') {
    throw new WgallocError('INVALID_ARGUMENT', 'signal must be an AbortSignal')
  }
  if (signal.aborted) throw abortError(signal)
  return signal
}

/**
 * Races `promise` against `signal`: rejects with ABORTED once the signal fires.
 * `onLate(value)` receives a result that arrives after the abort (to release it).
 */
function withSignal(promise, signal, onLate) {
  if (signal == null) return promise
  try {
    checkSignal(signal)
  } catch (err) {
    promise.then(onLate, () => {})
    return Promise.reject(err)
  }
  return new Promise((resolve, reject) => {
    let aborted = false
    const onAbort = () => {
      aborted = true
      reject(abortError(signal))
    }
    signal.addEventListener('abort', onAbort, { once: true })
    promise.then(
      (v) => {
        signal.removeEventListener('abort', onAbort)
        if (aborted) onLate?.(v)
        else resolve(v)
      },
      (e) => {
        signal.removeEventListener('abort', onAbort)
        reject(e)
      },
    )
  })
}

/** Calls `fn` (async) unless `options.signal` already fired; sync throws become rejections. */
function callWithSignal(fn, self, args, options, onLate) {
  let promise
  try {
    checkSignal(options.signal)
    promise = fn.apply(self, args)
  } catch (err) {
    return Promise.reject(err)
  }
  return withSignal(promise, options.signal, onLate)
}

function optionsObject(options, what) {
  if (options == null) return {}
  if (typeof options !== 'object') throw new WgallocError('INVALID_ARGUMENT', `${what}: options must be an object`)
  return options
}

/** Replaces an async method with one taking trailing `options` ({ signal }) after `arity` arguments. */
function addSignal(target, name, arity) {
  const original = target[name]
  Object.defineProperty(target, name, {
    configurable: true,
    writable: true,
    value: function (...args) {
      let options
      try {
        options = optionsObject(args[arity], name)
      } catch (err) {
        return Promise.reject(err)
      }
      return callWithSignal(original, this, args.slice(0, arity), options)
    },
  })
}

module.exports = { checkSignal, withSignal, callWithSignal, optionsObject, addSignal }
