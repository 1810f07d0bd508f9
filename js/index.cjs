'use strict'
// The public entry point: the native classes, with typed errors, AbortSignal
// support, `Symbol.dispose` and readable `util.inspect` output added in JS.
const { inspect } = require('node:util')
const native = require('./native.cjs')
const { WgallocError, CODES, toWgallocError } = require('./errors.cjs')
const { addSignal, callWithSignal, optionsObject } = require('./signal.cjs')
const diag = require('./diagnostics.cjs')

// Node >= 18.18 / 20.4 define both symbols (as these registered symbols); older Node
// gets the same keys, so `obj[Symbol.for('nodejs.dispose')]()` works there too.
const dispose = Symbol.dispose ?? Symbol.for('nodejs.dispose')
const asyncDispose = Symbol.asyncDispose ?? Symbol.for('nodejs.asyncDispose')

// wrapper -> { fn, call }: what `finalizeClass` rewraps with error reporting.
const mappedOf = new WeakMap()

/**
 * Wraps `fn` so errors (thrown or rejected) become WgallocErrors. With `report`,
 * they are also published on `wgalloc:device` as thrown by `call` (public entry
 * points only, so internal calls do not report a second name). `native`: `fn` is a
 * native method, so a conversion TypeError it throws is napi-rs refusing an argument.
 * `receiver`: a method written in JS checks its receiver as native ones do (`const {
 * free } = block; free()` throws V8's 'Illegal invocation' instead of failing inside
 * the facade).
 */
function mapped(fn, call, { report = false, native = false, receiver = null } = {}) {
  const fail = (err) => {
    const e = toWgallocError(err, native)
    if (report) diag.errorThrown(e, call)
    return e
  }
  const wrapper = function (...args) {
    if (receiver !== null && !(this instanceof receiver)) {
      throw new TypeError(`Illegal invocation: ${call} called on ${this === null ? 'null' : typeof this}`)
    }
    let result
    try {
      result = fn.apply(this, args)
    } catch (err) {
      throw fail(err)
    }
    return result && typeof result.then === 'function' ? result.then(undefined, (e) => Promise.reject(fail(e))) : result
  }
  mappedOf.set(wrapper, { fn, call, native })
  return wrapper
}

function eachMember(cls, visit) {
  for (const target of [cls.prototype, cls]) {
    // Symbol keys too: `[inspect.custom]` and `[Symbol.dispose]` are methods as well.
    for (const name of Reflect.ownKeys(target)) {
      if (name === 'constructor' || name === 'prototype' || name === 'length' || name === 'name') continue
      const d = Object.getOwnPropertyDescriptor(target, name)
      if (d.configurable) visit(target, name, d, `${cls.name}.${typeof name === 'symbol' ? `[${name.description}]` : name}`)
    }
  }
}

const isNative = (f) => typeof f === 'function' && /\[native code\]\s*}$/.test(Function.prototype.toString.call(f))

/** Wraps every native method, getter and static method of a class so errors are typed. */
function wrapClass(cls) {
  eachMember(cls, (target, name, d, call) => {
    // Only native members: methods the facade wrote (before this ran) are wrapped, with
    // a receiver check, by `finalizeClass`.
    if (isNative(d.value)) d.value = mapped(d.value, call, { native: true })
    if (isNative(d.get)) d.get = mapped(d.get, call, { native: true })
    if (isNative(d.set)) d.set = mapped(d.set, call, { native: true })
    Object.defineProperty(target, name, d)
  })
  return cls
}

/**
 * Last step, once the facade added its methods: every public method and getter reports
 * the errors it throws on `wgalloc:device`. Native methods stay one wrapper deep.
 */
function finalizeClass(cls) {
  const rewrap = (f, call, receiver = null) => {
    if (typeof f !== 'function') return f
    const m = mappedOf.get(f)
    return m ? mapped(m.fn, m.call, { report: true, native: m.native }) : mapped(f, call, { report: true, receiver })
  }
  eachMember(cls, (target, name, d, call) => {
    // Instance members written in JS check their receiver; static ones have none to check.
    const receiver = target === cls.prototype ? cls : null
    if ('value' in d) d.value = rewrap(d.value, call, receiver)
    else {
      d.get = rewrap(d.get, call, receiver)
      d.set = rewrap(d.set, call, receiver)
    }
    Object.defineProperty(target, name, d)
  })
}

const { Gpu, GpuBuffer, GpuEvent, Stream, Heap, Executor, Host, HostBlock, Profiler, ComputeKernel, Weights, ShapeExecutor } = native
const { planMemory, MemoryPlan, STRATEGIES } = require('./plan.cjs')
// The public DeviceBlock is a JS object (js/device-block.cjs); the native class is the
// handle its operations use, wrapped for typed errors but never handed out.
const { DeviceBlock, handleOf } = require('./device-block.cjs')
const CLASSES = [Gpu, GpuBuffer, GpuEvent, Stream, Heap, DeviceBlock, Executor, Host, HostBlock, Profiler, ComputeKernel, MemoryPlan, Weights, ShapeExecutor]
for (const cls of [...CLASSES, native.DeviceBlock]) wrapClass(cls)
// Native methods that take blocks get their handles.
const withHandles = (cls, name, convert) => {
  const original = cls.prototype[name]
  cls.prototype[name] = function (...args) {
    return original.apply(this, convert(args))
  }
}
const handles = (list) => (Array.isArray(list) ? list.map(handleOf) : list)
withHandles(Gpu, 'submitUpload', ([b, ...rest]) => [handleOf(b), ...rest])
withHandles(Gpu, 'submitUploadBatch', ([bs, ...rest]) => [handles(bs), ...rest])
withHandles(Gpu, 'downloadRange', ([b, ...rest]) => [handleOf(b), ...rest])
withHandles(Stream, 'copyBlocks', ([src, dst, ...rest]) => [handleOf(src), handleOf(dst), ...rest])
withHandles(Stream, 'copyToDevice', ([src, dst, ...rest]) => [src, handleOf(dst), ...rest])
withHandles(Stream, 'copyToHost', ([src, ...rest]) => [handleOf(src), ...rest])
withHandles(Stream, 'dispatch', ([kernel, blocks, ...rest]) => [kernel, handles(blocks), ...rest])
const facade = {
  Gpu,
  GpuBuffer,
  GpuEvent,
  Stream,
  Heap,
  DeviceBlock,
  Executor,
  Weights,
  ShapeExecutor,
  Host,
  HostBlock,
  Profiler,
  MemoryPlan,
  WgallocError,
  dispose,
  asyncDispose,
  toWgallocError,
  diag,
}
require('./heap.cjs').installHeap(facade)
require('./host.cjs').installHost(facade)
require('./exec.cjs').installExec(facade)

// Async calls take { signal }. A device that opens after an abort is destroyed.
const request = Gpu.request
Gpu.request = (options) => {
  let rest, signal
  try {
    ;({ signal, ...rest } = optionsObject(options, 'Gpu.request'))
  } catch (err) {
    return Promise.reject(err)
  }
  return callWithSignal(request, Gpu, [rest], { signal }, (gpu) => gpu.destroy()).then((gpu) => {
    diag.deviceOpened(gpu, 'request')
    return gpu
  })
}
const enumerate = Gpu.enumerate
Gpu.enumerate = (options) => {
  let rest, signal
  try {
    ;({ signal, ...rest } = optionsObject(options, 'Gpu.enumerate'))
  } catch (err) {
    return Promise.reject(err)
  }
  return callWithSignal(enumerate, Gpu, [rest], { signal })
}
const attach = Gpu.attach
Gpu.attach = function (handle) {
  const gpu = attach.call(this, handle)
  diag.deviceOpened(gpu, 'attach')
  return gpu
}
const destroy = Gpu.prototype.destroy
Gpu.prototype.destroy = function () {
  const was = this.lost
  destroy.call(this)
  if (!was) diag.deviceDestroyed(this)
}
// After the request wrapper: with WGALLOC_PROFILE set, every opened device reports at exit.
require('./profiler.cjs').installProfiler(facade)
addSignal(Gpu.prototype, 'readBuffer', 3)
addSignal(GpuEvent.prototype, 'wait', 0)
addSignal(Stream.prototype, 'synchronize', 0)

// Disposal: `using gpu = await Gpu.request()` destroys the device at scope end.
Gpu.prototype[dispose] = function () {
  this.destroy()
}
GpuBuffer.prototype[dispose] = function () {
  this.destroy()
}
// A stream owns only recorded work: sync disposal submits it (without waiting),
// async disposal submits it and waits for the stream's work.
Stream.prototype[dispose] = function () {
  if (this.pendingCommands > 0) this.submit()
}
Stream.prototype[asyncDispose] = function () {
  return this.synchronize()
}

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
  try {
    state = this.query() ? 'complete' : 'pending'
  } catch (e) {
    state = e.code ?? 'error'
  }
  return `GpuEvent { seq: ${this.seq}, ${state} }`
}
ComputeKernel.prototype[inspect.custom] = function () {
  return `ComputeKernel { name: '${this.name}', bindings: ${this.bindings}, uniform: ${this.uniform} }`
}
// `workgroups` may be a plain count; `uniform` any typed array (viewed as bytes).
const dispatch = Stream.prototype.dispatch
Stream.prototype.dispatch = function (kernel, blocks, workgroups, uniform) {
  const wg = typeof workgroups === 'number' ? [workgroups] : workgroups
  const bytes =
    ArrayBuffer.isView(uniform) && !(uniform instanceof Uint8Array) ? new Uint8Array(uniform.buffer, uniform.byteOffset, uniform.byteLength) : uniform
  return dispatch.call(this, kernel, blocks, wg, bytes)
}
Stream.prototype[inspect.custom] = function () {
  return `Stream { pendingCommands: ${this.pendingCommands} }`
}
Profiler.prototype[inspect.custom] = function () {
  const i = this.info
  return `Profiler { active: ${i.active}, timing: '${i.timing}'${i.mode ? `, mode: '${i.mode}'` : ''} }`
}
MemoryPlan.prototype[inspect.custom] = function () {
  return `MemoryPlan { strategy: '${this.strategy}', slabSize: ${this.slabSize}, lowerBound: ${this.lowerBound}, ratio: ${this.ratio.toFixed(4)}, optimal: ${this.optimal} }`
}

for (const cls of CLASSES) finalizeClass(cls)

// napi-rs answers `new Gpu()` (or a class called as a function) with an untyped Error;
// the exported classes say how to get an instance instead.
const HOW = {
  Gpu: 'await Gpu.request()',
  GpuBuffer: 'gpu.createBuffer()',
  GpuEvent: 'stream.submit()',
  Stream: 'gpu.createStream()',
  Heap: 'gpu.heap',
  DeviceBlock: 'gpu.heap.malloc()',
  Executor: 'await gpu.compile()',
  Host: 'gpu.host',
  HostBlock: 'gpu.host.alloc()',
  Profiler: 'gpu.profiler',
  ComputeKernel: 'gpu.createKernel()',
  MemoryPlan: 'await planMemory()',
  Weights: 'gpu.createWeights()',
  ShapeExecutor: 'gpu.compileShapes()',
}
const exported = Object.fromEntries(
  CLASSES.map((cls) => {
    const refuse = () => {
      throw new WgallocError('INVALID_ARGUMENT', `${cls.name} has no public constructor; use ${HOW[cls.name]}`)
    }
    return [cls.name, new Proxy(cls, { construct: refuse, apply: refuse })]
  }),
)
module.exports = {
  ...exported,
  planMemory: mapped(planMemory, 'planMemory', { report: true }),
  STRATEGIES,
  WgallocError,
  ERROR_CODES: CODES,
  CHANNELS: diag.CHANNELS,
}
