'use strict'
// The public entry point: the native classes, with typed errors, AbortSignal
// support, `Symbol.dispose` and readable `util.inspect` output added in JS.
const { inspect } = require('node:util')
const native = require('./native.cjs')
const { WgallocError, CODES, toWgallocError, abortError } = require('./errors.cjs')

const dispose = Symbol.dispose ?? Symbol.for('nodejs.dispose')
const asyncDispose = Symbol.asyncDispose ?? Symbol.for('nodejs.asyncDispose')

function mapped(fn) {
  return function (...args) {
    let result
    try {
      result = fn.apply(this, args)
    } catch (err) {
      throw toWgallocError(err)
    }
    return result && typeof result.then === 'function' ? result.then(undefined, (e) => Promise.reject(toWgallocError(e))) : result
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

/** Calls an async native method with `{ signal }`; sync throws become rejections. */
function callWithSignal(fn, self, args, options) {
  let promise
  try {
    promise = fn.apply(self, args)
  } catch (err) {
    return Promise.reject(err)
  }
  return withSignal(promise, options.signal)
}

/** Races `promise` against `signal`: rejects with ABORTED once the signal fires. */
function withSignal(promise, signal) {
  if (signal == null) return promise
  if (typeof signal.aborted !== 'boolean' || typeof signal.addEventListener !== 'function') {
    return Promise.reject(new WgallocError('INVALID_ARGUMENT', 'signal must be an AbortSignal'))
  }
  if (signal.aborted) {
    promise.catch(() => {})
    return Promise.reject(abortError(signal))
  }
  return new Promise((resolve, reject) => {
    const onAbort = () => reject(abortError(signal))
    signal.addEventListener('abort', onAbort, { once: true })
    promise.then(
      (v) => { signal.removeEventListener('abort', onAbort); resolve(v) },
      (e) => { signal.removeEventListener('abort', onAbort); reject(e) },
    )
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

const { Gpu, GpuBuffer, GpuEvent, Stream, Heap, DeviceBlock, Executor, Host, HostBlock, Profiler, ComputeKernel } = native
for (const cls of [Gpu, GpuBuffer, GpuEvent, Stream, Heap, DeviceBlock, Executor, Host, HostBlock, Profiler, ComputeKernel]) wrapClass(cls)
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
ComputeKernel.prototype[inspect.custom] = function () {
  return `ComputeKernel { name: '${this.name}', bindings: ${this.bindings}, uniform: ${this.uniform} }`
}
// `workgroups` may be a plain count; `uniform` any typed array (viewed as bytes).
const dispatch = Stream.prototype.dispatch
Stream.prototype.dispatch = function (kernel, blocks, workgroups, uniform) {
  const wg = typeof workgroups === 'number' ? [workgroups] : workgroups
  const bytes = ArrayBuffer.isView(uniform) && !(uniform instanceof Uint8Array)
    ? new Uint8Array(uniform.buffer, uniform.byteOffset, uniform.byteLength)
    : uniform
  return dispatch.call(this, kernel, blocks, wg, bytes)
}
Stream.prototype[inspect.custom] = function () {
  return `Stream { pendingCommands: ${this.pendingCommands} }`
}

const { planMemory, MemoryPlan, STRATEGIES } = require('./plan.cjs')
wrapClass(MemoryPlan)
MemoryPlan.prototype[inspect.custom] = function () {
  return `MemoryPlan { strategy: '${this.strategy}', slabSize: ${this.slabSize}, lowerBound: ${this.lowerBound}, ratio: ${this.ratio.toFixed(4)}, optimal: ${this.optimal} }`
}

module.exports = { Gpu, GpuBuffer, GpuEvent, Stream, Heap, DeviceBlock, Executor, Host, HostBlock, Profiler, ComputeKernel, MemoryPlan, planMemory, STRATEGIES, WgallocError, ERROR_CODES: CODES }
