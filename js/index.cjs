'use strict'
// The public entry point: the native classes, with typed errors, AbortSignal
// support, `Symbol.dispose` and readable `util.inspect` output added in JS.
const { inspect } = require('node:util')
const native = require('./native.cjs')
const { WgallocError, CODES, toWgallocError, abortError } = require('./errors.cjs')

const dispose = Symbol.dispose ?? Symbol.for('nodejs.dispose')
const asyncDispose = Symbol.asyncDispose ?? Symbol.for('nodejs.asyncDispose')

// Functions that wrap a native method (the native checks its own receiver).
const nativeWrappers = new WeakSet()

function mapped(fn) {
  const wrapper = function (...args) {
    let result
    try {
      result = fn.apply(this, args)
    } catch (err) {
      throw toWgallocError(err, true)
    }
    return result && typeof result.then === 'function' ? result.then(undefined, (e) => Promise.reject(toWgallocError(e, true))) : result
  }
  if (/\[native code\]\s*}$/.test(Function.prototype.toString.call(fn))) nativeWrappers.add(wrapper)
  return wrapper
}

/**
 * Methods written in JS check their receiver as native ones do: a method called on
 * something else (`const { free } = block; free()`) throws V8's 'Illegal invocation'
 * TypeError instead of failing somewhere inside the facade.
 */
function guardReceivers(cls) {
  const proto = cls.prototype
  for (const key of Reflect.ownKeys(proto)) {
    const d = Object.getOwnPropertyDescriptor(proto, key)
    const fn = d.value
    if (key === 'constructor' || typeof fn !== 'function' || nativeWrappers.has(fn)) continue
    const name = `${cls.name}.${String(key)}`
    d.value = {
      [fn.name || String(key)](...args) {
        if (!(this instanceof cls)) throw new TypeError(`Illegal invocation: ${name} called on ${this === null ? 'null' : typeof this}`)
        return fn.apply(this, args)
      },
    }[fn.name || String(key)]
    Object.defineProperty(proto, key, d)
  }
}

/** Wraps every method, getter and static method of a native class so errors are typed. */
function wrapClass(cls) {
  for (const target of [cls.prototype, cls]) {
    for (const [name, d] of Object.entries(Object.getOwnPropertyDescriptors(target))) {
      if (name === 'constructor' || name === 'prototype' || name === 'length' || name === 'name') continue
      if (typeof d.value === 'function') d.value = mapped(d.value)
      if (typeof d.get === 'function') d.get = mapped(d.get)
      if (typeof d.set === 'function') d.set = mapped(d.set)
      if (d.configurable) Object.defineProperty(target, name, d)
    }
  }
  return cls
}

/**
 * Calls an async native method with `{ signal }`; sync throws become rejections. The
 * signal is read and checked before the work starts: a promise started and then
 * dropped would end the process with an unhandled rejection if it failed later.
 */
function callWithSignal(fn, self, args, options) {
  let promise
  let signal
  try {
    signal = options.signal
    checkSignal(signal)
    promise = fn.apply(self, args)
  } catch (err) {
    return Promise.reject(err)
  }
  return withSignal(promise, signal)
}

function checkSignal(signal) {
  if (signal != null && (typeof signal.aborted !== 'boolean' || typeof signal.addEventListener !== 'function' || typeof signal.removeEventListener !== 'function')) {
    throw new WgallocError('INVALID_ARGUMENT', 'signal must be an AbortSignal')
  }
}

/** Races `promise` against `signal`: rejects with ABORTED once the signal fires. */
function withSignal(promise, signal) {
  if (signal == null) return promise
  return new Promise((resolve, reject) => {
    let onAbort = null
    const settle = (done, value) => {
      try {
        if (onAbort) signal.removeEventListener('abort', onAbort)
      } finally {
        done(value)
      }
    }
    // Handled first, whatever the signal does next: the work's own outcome is never dropped.
    promise.then((v) => settle(resolve, v), (e) => settle(reject, e))
    checkSignal(signal)
    if (signal.aborted) return reject(abortError(signal))
    onAbort = () => reject(abortError(signal))
    signal.addEventListener('abort', onAbort, { once: true })
  })
}

function optionsObject(options, what) {
  if (options == null) return {}
  if (typeof options !== 'object') throw new WgallocError('INVALID_ARGUMENT', `${what}: options must be an object`)
  return options
}

/** Replaces an async method with one taking trailing `options` ({ signal }). */
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

const { Gpu, GpuBuffer, GpuEvent, Stream, Heap, DeviceBlock, Executor, Host, HostBlock, Profiler } = native
for (const cls of [Gpu, GpuBuffer, GpuEvent, Stream, Heap, DeviceBlock, Executor, Host, HostBlock, Profiler]) wrapClass(cls)
const { installHeap } = require('./heap.cjs')
installHeap({ Gpu, Heap, DeviceBlock, addSignal, dispose, toWgallocError })
const { installHost } = require('./host.cjs')
installHost({ Gpu, Host, HostBlock, DeviceBlock, Stream, GpuBuffer, addSignal, callWithSignal, dispose, WgallocError })
require('./exec.cjs').installExec({ Gpu, Executor, dispose, asyncDispose, toWgallocError })

// Async calls take { signal }.
const request = Gpu.request
Gpu.request = function (options) {
  let rest, signal
  try {
    ;({ signal, ...rest } = optionsObject(options, 'Gpu.request'))
  } catch (err) {
    return Promise.reject(err)
  }
  return callWithSignal(request, Gpu, [rest], { signal })
}
// After the request wrapper: with WGALLOC_PROFILE set, every opened device reports at exit.
require('./profiler.cjs').installProfiler({ Gpu, Profiler, WgallocError })
Profiler.prototype[inspect.custom] = function () {
  const i = this.info
  return `Profiler { active: ${i.active}, timing: '${i.timing}'${i.mode ? `, mode: '${i.mode}'` : ''} }`
}
addSignal(Gpu.prototype, 'readBuffer', 3)
addSignal(GpuEvent.prototype, 'wait', 0)
addSignal(Stream.prototype, 'synchronize', 0)

// Disposal: `using gpu = await Gpu.request()` destroys the device at scope end.
Gpu.prototype[dispose] = function () { this.destroy() }
GpuBuffer.prototype[dispose] = function () { this.destroy() }
Stream.prototype[asyncDispose] = function () { return this.synchronize() }

// Readable `console.log` output instead of an empty object.
Gpu.prototype[inspect.custom] = function () {
  if (this.lost) return 'Gpu { lost }'
  const i = this.info
  return `Gpu { adapter: '${i.adapterName}', backend: '${i.backend}', type: '${i.deviceType}', budget: ${this.memoryBudget.bytes} }`
}
GpuBuffer.prototype[inspect.custom] = function () {
  return `GpuBuffer { size: ${this.size}${this.destroyed ? ', destroyed' : ''} }`
}
GpuEvent.prototype[inspect.custom] = function () {
  let state
  try { state = this.query() ? 'complete' : 'pending' } catch (e) { state = e.code ?? 'error' }
  return `GpuEvent { seq: ${this.seq}, ${state} }`
}
Stream.prototype[inspect.custom] = function () {
  return `Stream { pendingCommands: ${this.pendingCommands} }`
}

const { planMemory, MemoryPlan, STRATEGIES } = require('./plan.cjs')
wrapClass(MemoryPlan)
MemoryPlan.prototype[inspect.custom] = function () {
  return `MemoryPlan { strategy: '${this.strategy}', slabSize: ${this.slabSize}, lowerBound: ${this.lowerBound}, ratio: ${this.ratio.toFixed(4)}, optimal: ${this.optimal} }`
}

for (const cls of [Gpu, GpuBuffer, GpuEvent, Stream, Heap, DeviceBlock, Executor, Host, HostBlock, Profiler, MemoryPlan]) guardReceivers(cls)

module.exports = { Gpu, GpuBuffer, GpuEvent, Stream, Heap, DeviceBlock, Executor, Host, HostBlock, Profiler, MemoryPlan, planMemory, STRATEGIES, WgallocError, ERROR_CODES: CODES }
