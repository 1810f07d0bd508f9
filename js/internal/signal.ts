// `{ signal }` on every async call: an already-aborted signal rejects before any work
// starts; aborting later rejects at once (work already submitted to the GPU still
// completes). Rejections are WgallocErrors with code ABORTED (name AbortError).
import { abortError, invalidArgument, optionKeys, shown } from '../errors.js'

/**
 * Options accepted by every asynchronous call. An already-aborted signal rejects before
 * any work starts; aborting later rejects at once, while GPU work already submitted
 * still completes (results that arrive after the abort are released).
 */
export interface AsyncOptions {
  /** Aborting rejects the call with a `WgallocError` whose code is `ABORTED` (name `AbortError`, `cause` = the signal's reason). */
  signal?: AbortSignal
}

/** The keys of {@link AsyncOptions}, for calls that take nothing else. */
export const ASYNC_OPTIONS = optionKeys<AsyncOptions>({ signal: true })

/** Throws INVALID_ARGUMENT for a non-signal, ABORTED for an aborted one; returns the signal. */
export function checkSignal(signal: unknown): AbortSignal | undefined {
  if (signal == null) return undefined
  const s = signal as Partial<AbortSignal>
  if (typeof signal !== 'object' || typeof s.aborted !== 'boolean' || typeof s.addEventListener !== 'function' || typeof s.removeEventListener !== 'function') {
    throw invalidArgument('signal', 'an AbortSignal', shown(signal))
  }
  if (s.aborted) throw abortError(signal as AbortSignal)
  return signal as AbortSignal
}

/**
 * Races `promise` against `signal`: rejects with ABORTED once the signal fires.
 * `onLate(value)` receives a result that arrives after the abort (to release it).
 */
export function withSignal<T>(promise: Promise<T>, signal: AbortSignal | undefined | null, onLate?: (value: T) => void): Promise<T> {
  if (signal == null) return promise
  // Nobody awaits a late result: releasing it must not throw (a lost device fails the release).
  const late = (v: T) => {
    try {
      onLate?.(v)
    } catch {}
  }
  try {
    checkSignal(signal)
  } catch (err) {
    promise.then(late, () => {})
    return Promise.reject(err)
  }
  return new Promise<T>((resolve, reject) => {
    let aborted = false
    const onAbort = () => {
      aborted = true
      reject(abortError(signal))
    }
    try {
      signal.addEventListener('abort', onAbort, { once: true })
    } catch (err) {
      // A signal-like object that throws: the call fails typed, and what it started is released.
      promise.then(late, () => {})
      reject(invalidArgument('signal', 'an AbortSignal whose addEventListener works', 'one whose addEventListener threw', undefined, { cause: err }))
      return
    }
    promise.then(
      (v) => {
        detach(signal, onAbort)
        if (aborted) late(v)
        else resolve(v)
      },
      (e) => {
        detach(signal, onAbort)
        reject(e)
      },
    )
  })
}

/**
 * Removes `onAbort` from `signal`. A signal-like object whose method throws must not turn a
 * settled call into an uncaught exception, which would end the process.
 */
export function detach(signal: AbortSignal | undefined | null, onAbort: () => void): void {
  try {
    signal?.removeEventListener('abort', onAbort)
  } catch {
    // nothing to undo: the call has settled
  }
}

/** Calls `start` (async) unless `signal` already fired, then races it against the signal; sync throws become rejections. */
export function callWithSignal<T>(signal: AbortSignal | undefined, start: () => Promise<T>, onLate?: (value: T) => void): Promise<T> {
  let promise: Promise<T>
  try {
    checkSignal(signal)
    promise = start()
  } catch (err) {
    return Promise.reject(err)
  }
  return withSignal(promise, signal, onLate)
}
