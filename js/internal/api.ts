// The boundary of every public method: errors, thrown or rejected, leave as WgallocErrors
// and are reported on `wgalloc:device` with the call's name.
import { errorThrown } from '../diagnostics.js'
import { toWgallocError } from '../errors.js'

type Method = (this: never, ...args: never[]) => unknown
type Context = ClassMethodDecoratorContext | ClassGetterDecoratorContext

const ownerName = (self: unknown): string =>
  typeof self === 'function' ? self.name : ((self as { constructor?: { name?: string } } | null)?.constructor?.name ?? typeof self)

// A private field read on the wrong object: V8's message for what a native method calls an illegal invocation.
const FOREIGN_RECEIVER = /private (member|field|method)|object whose class did not declare it|Receiver must be an instance of class/

/** Calling a method on something that is not its class's instance, as V8 reports it for native methods. */
function illegalInvocation(self: unknown, name: string): TypeError {
  return new TypeError(`Illegal invocation: ${name} called on ${self === null ? 'null' : typeof self === 'object' ? 'another object' : typeof self}`)
}

/**
 * What public method `name` throws for `err` thrown on `self`: {@link api}'s boundary, for a
 * method that keeps its own (a TypeError from a foreign or missing receiver is an illegal invocation).
 */
export function fail(err: unknown, self: unknown, name: string): unknown {
  if (err instanceof TypeError && (self === null || self === undefined || FOREIGN_RECEIVER.test(err.message))) return illegalInvocation(self, name)
  const e = toWgallocError(err, true)
  errorThrown(e, `${ownerName(self)}.${name}`)
  return e
}

/**
 * Decorates a public method or getter: errors become WgallocErrors (napi-rs conversion
 * errors are INVALID_ARGUMENT) and are published on `wgalloc:device`; a call on a value that
 * is not an instance is a TypeError, as for native methods.
 */
export function api<F extends Method>(fn: F, context: Context): F {
  const name = typeof context.name === 'symbol' ? `[${context.name.description}]` : context.name
  const call = fn as unknown as (...args: unknown[]) => unknown
  const isMethod = context.kind === 'method'
  const wrapped = function (this: unknown, ...args: unknown[]) {
    if (this === null || (typeof this !== 'object' && typeof this !== 'function')) throw illegalInvocation(this, name)
    // A receiver that does not have this method (a plain object given to `.call`) would fail on
    // the first `this.other()` with a bare TypeError; refuse it here as a native method would.
    if (isMethod && (this as Record<string | symbol, unknown>)[context.name] !== wrapped) throw illegalInvocation(this, name)
    let result: unknown
    try {
      result = call.apply(this, args)
    } catch (err) {
      throw fail(err, this, name)
    }
    if (result instanceof Promise) return result.catch((err: unknown) => Promise.reject(fail(err, this, name)))
    return result
  }
  return wrapped as unknown as F
}

/** Runs `fn` as a public call named `call` (for functions that are not methods). */
export function reported<T>(call: string, fn: () => T): T {
  try {
    const result = fn()
    if (result instanceof Promise) {
      return result.catch((err: unknown) => {
        const e = toWgallocError(err, true)
        errorThrown(e, call)
        return Promise.reject(e)
      }) as T
    }
    return result
  } catch (err) {
    const e = toWgallocError(err, true)
    errorThrown(e, call)
    throw e
  }
}

/** The error for `new` on a class users get instances of another way. */
export const NO_CONSTRUCTOR = 'has no public constructor; use'
