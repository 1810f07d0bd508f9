'use strict'
// JS side of plan execution: graphs as objects, typed-array inputs and outputs,
// profile-guided planning (`plan: 'observe'`), disposal and inspect output.
const { inspect } = require('node:util')
const { WgallocError, parseJson, shown, stringifyInput } = require('./errors.cjs')
const { checkSignal, withSignal } = require('./signal.cjs')
const { DeviceBlock, adoptBlock, blockRef } = require('./device-block.cjs')
const { bytesOf } = require('./bytes.cjs')
const { tableOf } = require('./heap.cjs')

const TYPED = { f32: Float32Array, u32: Uint32Array, i32: Int32Array, u16: Uint16Array, f16: Uint16Array, i8: Int8Array, u8: Uint8Array }

function graphJson(graph) {
  if (typeof graph === 'string') return graph
  if (!graph || typeof graph !== 'object') throw new WgallocError('INVALID_ARGUMENT', 'a graph is an object with tensors, ops and kernels (or its JSON text)')
  // Typed-array params become byte arrays.
  return stringifyInput(graph, 'the graph', (key, value) => (ArrayBuffer.isView(value) ? Array.from(bytesOf(value, `graph field '${key}'`)) : value))
}

function byteMap(obj, what) {
  if (obj == null) return {}
  if (typeof obj !== 'object') throw new WgallocError('INVALID_ARGUMENT', `${what} must be an object of { id: TypedArray }`)
  return Object.fromEntries(Object.entries(obj).map(([k, v]) => [k, bytesOf(v, `${what}.${k}`)]))
}

/** Output bytes as the typed array the tensor's dtype names (Uint8Array without one). */
function typed(buffer, dtype) {
  const T = TYPED[dtype] ?? Uint8Array
  const usable = buffer.byteLength - (buffer.byteLength % T.BYTES_PER_ELEMENT)
  const aligned = buffer.byteOffset % T.BYTES_PER_ELEMENT === 0 ? buffer : Uint8Array.prototype.slice.call(buffer)
  return new T(aligned.buffer, aligned.byteOffset, usable / T.BYTES_PER_ELEMENT)
}

/** The graph's tensors, whatever shape the (not yet validated) graph has. */
function tensorsOf(graph) {
  return Array.isArray(graph?.tensors) ? graph.tensors.filter((t) => t && typeof t === 'object') : []
}

function dtypes(graph) {
  return new Map(tensorsOf(typeof graph === 'string' ? parseJson(graph, 'the graph') : graph).map((t) => [t.id, t.dtype]))
}

/** Zero bytes for every input, to observe a run with; a size that is no size is refused here. */
function zeroInputs(graph) {
  return Object.fromEntries(
    tensorsOf(graph)
      .filter((t) => t.kind === 'input')
      .map((t) => {
        if (!Number.isSafeInteger(t.size) || t.size < 0)
          throw new WgallocError('INVALID_ARGUMENT', `tensor ${shown(t.id)}: size must be a non-negative integer, got ${shown(t.size)}`)
        try {
          return [t.id, new Uint8Array(t.size)]
        } catch (err) {
          throw new WgallocError('OUT_OF_MEMORY', `plan: 'observe' cannot make ${t.size} zero bytes for input ${shown(t.id)}: ${err.message}`, { cause: err })
        }
      }),
  )
}

function shapeResult(r, types, table) {
  const outputs = {}
  for (const id of r.outputOrder) outputs[id] = typed(r.outputs[id], types.get(id))
  const observation = r.observation
    ? {
        ...r.observation,
        toUsageRecords() {
          return this.usageRecords.map((x) => ({ ...x }))
        },
      }
    : undefined
  const result = observation ? { outputs, observation } : { outputs }
  if (r.deviceOutputs?.length) result.blocks = Object.fromEntries(r.deviceOutputs.map((o) => [o.tensor, adoptBlock(table, o)]))
  return result
}

/**
 * Splits run inputs into host bytes and device blocks, and turns `outputsInto` / `outputs` into the
 * native options. Every block must come from one heap object (`gpu.heap`): its table holds them.
 */
function runArguments(inputs, options, defaultTable) {
  if (inputs == null || typeof inputs !== 'object') throw new WgallocError('INVALID_ARGUMENT', 'inputs must be an object of { id: TypedArray | DeviceBlock }')
  const { signal, outputsInto, outputs, ...rest } = options
  const host = {}
  const deviceInputs = {}
  const into = {}
  let table = null
  const take = (block, what) => {
    const ref = blockRef(block, what)
    if (table && ref.table !== table) throw new WgallocError('INVALID_ARGUMENT', `${what}: every block of one run must come from the same gpu.heap object`)
    table = ref.table
    return ref.id
  }
  for (const [id, value] of Object.entries(inputs)) {
    if (value instanceof DeviceBlock) deviceInputs[id] = take(value, `inputs.${id}`)
    else host[id] = bytesOf(value, `inputs.${id}`)
  }
  if (outputsInto != null) {
    if (typeof outputsInto !== 'object') throw new WgallocError('INVALID_ARGUMENT', 'outputsInto must be an object of { id: DeviceBlock }')
    for (const [id, block] of Object.entries(outputsInto)) into[id] = take(block, `outputsInto.${id}`)
  }
  if (outputs !== undefined && outputs !== 'host' && outputs !== 'device')
    throw new WgallocError('INVALID_ARGUMENT', `outputs must be 'host' or 'device', got ${shown(outputs)}`)
  const device = table !== null || outputs === 'device'
  table ??= device ? defaultTable() : null
  const native = device ? { ...rest, heapSlot: table.slot, deviceInputs, outputsInto: into, outputs } : rest
  return { host, native, signal, table }
}

function installExec({ Gpu, Executor, Weights, ShapeExecutor, dispose, asyncDispose, toWgallocError }) {
  const executorTypes = new WeakMap()
  const executorGpu = new WeakMap()
  const gpuTable = (gpu) => () => tableOf(gpu.heap)
  const compileNative = (rest, params, weights) => {
    if (weights != null && !(weights instanceof Weights)) throw new WgallocError('INVALID_ARGUMENT', 'weights must come from gpu.createWeights()')
    return { ...rest, params: byteMap(params, 'params'), ...(weights != null ? { weightsHandle: weights.shareHandle() } : {}) }
  }
  const compileGraph = Gpu.prototype.compileGraph
  const runEagerGraph = Gpu.prototype.runEagerGraph

  /**
   * Plans and compiles `graph`. Options: strategy, timeLimitMs, maxSlabSize, params
   * ({ id: TypedArray }), plan: 'static' (default) | 'observe' (run eagerly once with
   * `sampleInputs` or zeros, observe, and plan from what was seen), signal.
   */
  Gpu.prototype.compile = async function (graph, options = {}) {
    try {
      if (options === null || typeof options !== 'object') throw new WgallocError('INVALID_ARGUMENT', 'compile options must be an object')
      const { plan = 'static', sampleInputs, signal, params, weights, ...rest } = options
      checkSignal(signal)
      const json = graphJson(graph)
      const native = compileNative(rest, params, weights)
      if (plan === 'observe') {
        const inputs = sampleInputs ? byteMap(sampleInputs, 'sampleInputs') : zeroInputs(parseJson(json, 'the graph'))
        const seen = await withSignal(runEagerGraph.call(this, json, inputs, native.params, true), signal)
        native.recordsJson = JSON.stringify(seen.observation.usageRecords.map((r) => ({ ...r, size: Math.ceil(r.size / 4) * 4 })))
      } else if (plan !== 'static') {
        throw new WgallocError('INVALID_ARGUMENT', `plan must be 'static' or 'observe', got ${shown(plan)}`)
      }
      checkSignal(signal)
      // An executor finished after an abort is released at once (its slabs go back to the heap).
      const exe = await withSignal(compileGraph.call(this, json, native), signal, (late) => late.release())
      executorTypes.set(exe, dtypes(json))
      executorGpu.set(exe, this)
      return exe
    } catch (err) {
      throw toWgallocError(err)
    }
  }

  /** Runs `graph` eagerly: outputs come from the heap at each op and return after their last use. */
  Gpu.prototype.runEager = async function (graph, inputs, options) {
    try {
      options ??= {}
      if (typeof options !== 'object') throw new WgallocError('INVALID_ARGUMENT', 'runEager options must be an object')
      checkSignal(options.signal)
      const json = graphJson(graph)
      const r = await withSignal(
        runEagerGraph.call(this, json, byteMap(inputs, 'inputs'), byteMap(options.params, 'params'), Boolean(options.observe)),
        options.signal,
      )
      return shapeResult(r, dtypes(json))
    } catch (err) {
      throw toWgallocError(err)
    }
  }

  const run = Executor.prototype.run
  Executor.prototype.run = async function (inputs, options) {
    try {
      options ??= {}
      if (typeof options !== 'object') throw new WgallocError('INVALID_ARGUMENT', 'run options must be an object')
      const { host, native, signal, table } = runArguments(inputs, options, gpuTable(executorGpu.get(this)))
      checkSignal(signal)
      const r = await withSignal(run.call(this, host, native), signal)
      return shapeResult(r, executorTypes.get(this) ?? new Map(), table)
    } catch (err) {
      throw toWgallocError(err)
    }
  }
  /**
   * Uploads `params` ({ id: TypedArray }) once, for any number of executors (`compile(graph,
   * { weights })`, here or on workers through `Weights.attach(weights.shareHandle())`) to bind
   * without copying.
   */
  Gpu.prototype.createWeights = function (params) {
    try {
      if (params == null || typeof params !== 'object') throw new WgallocError('INVALID_ARGUMENT', 'createWeights takes { id: TypedArray } of param bytes')
      return this.createWeightsNative(byteMap(params, 'params'))
    } catch (err) {
      throw toWgallocError(err)
    }
  }
  Weights.prototype[dispose] = function () {
    this.release()
  }

  /**
   * A graph with symbolic dimensions (`dims: ['batch']`, sizes and dispatch counts as
   * expressions such as `'batch * 1024'`), compiled once per shape. Options: `buckets`
   * ({ batch: [1, 2, 4, 8, 16] }: dimensions round up to a bucket), `capacity` (executors
   * kept, least recently used released first; default 8), and every `compile()` option.
   */
  Gpu.prototype.compileShapes = function (graph, options = {}) {
    try {
      if (options === null || typeof options !== 'object') throw new WgallocError('INVALID_ARGUMENT', 'compileShapes options must be an object')
      const { buckets, capacity, params, weights, ...rest } = options
      const json = graphJson(graph)
      const se = this.compileShapesNative(json, { buckets, capacity }, compileNative(rest, params, weights))
      executorTypes.set(se, dtypes(json))
      executorGpu.set(se, this)
      return se
    } catch (err) {
      throw toWgallocError(err)
    }
  }
  /** Runs at `dims` ({ batch: 3 }): inputs and outputs sized for those dims; run() options as an executor's. */
  ShapeExecutor.prototype.run = async function (dims, inputs, options) {
    try {
      options ??= {}
      if (typeof options !== 'object') throw new WgallocError('INVALID_ARGUMENT', 'run options must be an object')
      if (dims == null || typeof dims !== 'object') throw new WgallocError('INVALID_ARGUMENT', 'dims must be an object such as { batch: 4 }')
      const { host, native, signal, table } = runArguments(inputs, options, gpuTable(executorGpu.get(this)))
      checkSignal(signal)
      const r = await withSignal(this.runNative(dims, host, native), signal)
      return shapeResult(r, executorTypes.get(this) ?? new Map(), table)
    } catch (err) {
      throw toWgallocError(err)
    }
  }
  ShapeExecutor.prototype[dispose] = function () {
    this.clear()
  }
  ShapeExecutor.prototype[inspect.custom] = function () {
    const s = this.stats()
    return `ShapeExecutor { dims: [${this.dims.map((d) => `'${d}'`).join(', ')}], cached: ${s.cached}, hits: ${s.hits}, misses: ${s.misses} }`
  }
  Weights.prototype[inspect.custom] = function () {
    return this.released ? 'Weights { released }' : `Weights { ids: [${this.ids.map((d) => `'${d}'`).join(', ')}], deviceBytes: ${this.deviceBytes} }`
  }

  Executor.prototype[dispose] = function () {
    this.release()
  }
  Executor.prototype[asyncDispose] = async function () {
    this.release()
  }
  Executor.prototype[inspect.custom] = function () {
    if (this.released) return 'Executor { released }'
    const p = this.plan
    return `Executor { slabSize: ${p.slabSize}, lowerBound: ${p.lowerBound}, strategy: '${p.strategy}', deviceBytes: ${this.deviceBytes}, runs: ${this.stats().runs} }`
  }
}

module.exports = { installExec, typed }
