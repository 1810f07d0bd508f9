'use strict'
// JS side of the host staging cache: one Host object per Gpu, `stream.copy()`
// accepting host blocks, the `upload()`/`uploadBatch()`/`download()` helpers, `{ signal }`,
// `wgalloc:host` diagnostics, disposal and inspect output.
const { inspect } = require('node:util')
const { memoizeGetter } = require('./memo.cjs')
const { addSignal, callWithSignal, checkSignal } = require('./signal.cjs')
const { bytesOf, checkAs, asTyped } = require('./bytes.cjs')

function installHost({ Gpu, Host, HostBlock, DeviceBlock, Stream, GpuBuffer, dispose, WgallocError, diag }) {
  memoizeGetter(Gpu.prototype, 'host')
  const channel = diag.channels.host
  // Any typed array, DataView or ArrayBuffer, as its bytes.
  const hostWrite = HostBlock.prototype.write
  HostBlock.prototype.write = function (data, offset) {
    return hostWrite.call(this, bytesOf(data, 'write: data'), offset)
  }
  const blockMessage = (kind, b) => ({ kind, id: b.id, direction: b.direction, requestedSize: b.requestedSize, size: b.size, poolId: b.poolId })

  // Block allocations and frees, published only while `wgalloc:host` has subscribers.
  const alloc = Host.prototype.alloc
  Host.prototype.alloc = function (size, options) {
    const block = alloc.call(this, size, options)
    if (channel.hasSubscribers) channel.publish({ ...blockMessage('alloc', block), host: this })
    return block
  }
  for (const [cls, name] of [
    [Host, 'free'],
    [HostBlock, 'free'],
  ]) {
    const free = cls.prototype[name]
    cls.prototype[name] = function (...args) {
      const b = cls === Host ? args[0] : this
      const message = channel.hasSubscribers && b instanceof HostBlock && !b.freed ? blockMessage('free', b) : null
      const r = free.apply(this, args)
      if (message) channel.publish(message)
      return r
    }
  }
  /** Publishes a completed transfer: `{ kind, bytes, items, ms }`. */
  const transferred = (promise, kind, gpu, bytes, items, started) =>
    channel.hasSubscribers
      ? promise.then((v) => {
          channel.publish({ kind, gpu, bytes: bytes ?? v.length, items, ms: Number(process.hrtime.bigint() - started) / 1e6 })
          return v
        })
      : promise

  // One `copy()` for every pair: host -> device (upload), device -> host (download),
  // device -> device, buffer -> buffer.
  const copyBuffers = Stream.prototype.copy
  Stream.prototype.copy = function (src, dst, options) {
    if (src instanceof HostBlock && dst instanceof DeviceBlock) return this.copyToDevice(src, dst, options)
    if (src instanceof DeviceBlock && dst instanceof HostBlock) return this.copyToHost(src, dst, options)
    if (src instanceof DeviceBlock && dst instanceof DeviceBlock) return this.copyBlocks(src, dst, options)
    if (src instanceof GpuBuffer && dst instanceof GpuBuffer) return copyBuffers.call(this, src, dst, options)
    throw new WgallocError(
      'INVALID_ARGUMENT',
      'copy: pass (GpuBuffer, GpuBuffer), (DeviceBlock, DeviceBlock), (upload HostBlock, DeviceBlock) or (DeviceBlock, download HostBlock)',
    )
  }

  /** Copies `data` into `block` through the host cache; resolves once the GPU has it. */
  Gpu.prototype.upload = function (block, data, options) {
    try {
      const { offset, signal } = options ?? {}
      checkSignal(signal)
      const started = process.hrtime.bigint()
      const bytes = bytesOf(data, 'upload: data')
      return transferred(this.submitUpload(block, bytes, offset).wait({ signal }), 'upload', this, bytes.byteLength, 1, started)
    } catch (err) {
      return Promise.reject(err)
    }
  }
  /**
   * Uploads many `{ block, data, offset }` items through the host cache, packed into (or split
   * into) staging blocks of `pipelineBytes`, each submitted as it is written; resolves once the
   * GPU has them all.
   */
  Gpu.prototype.uploadBatch = function (items, options) {
    try {
      checkSignal(options?.signal)
      const started = process.hrtime.bigint()
      if (!Array.isArray(items)) throw new WgallocError('INVALID_ARGUMENT', 'uploadBatch: pass an array of { block, data, offset }')
      const blocks = new Array(items.length)
      const data = new Array(items.length)
      const offsets = new Array(items.length)
      for (let i = 0; i < items.length; i++) {
        const it = items[i]
        if (!(it?.block instanceof DeviceBlock)) {
          throw new WgallocError('INVALID_ARGUMENT', `uploadBatch: item ${i} must be { block: DeviceBlock, data: TypedArray, offset?: number }`)
        }
        blocks[i] = it.block
        data[i] = bytesOf(it.data, `uploadBatch: item ${i} data`)
        offsets[i] = it.offset ?? 0
      }
      const bytes = data.reduce((n, d) => n + d.byteLength, 0)
      return transferred(this.submitUploadBatch(blocks, data, offsets).wait({ signal: options?.signal }), 'upload', this, bytes, items.length, started)
    } catch (err) {
      return Promise.reject(err)
    }
  }
  /** Reads a device block through the host cache: `{ offset, length, signal, as }` (`as: Float32Array` returns that type). */
  Gpu.prototype.download = function (block, options) {
    let offset, length, signal, as
    try {
      ;({ offset, length, signal, as } = options ?? {})
      checkAs(as, 'download')
    } catch (err) {
      return Promise.reject(err)
    }
    const started = process.hrtime.bigint()
    const bytes = transferred(callWithSignal(this.downloadRange, this, [block, offset, length], { signal }), 'download', this, undefined, 1, started)
    return as === undefined ? bytes : bytes.then((b) => asTyped(b, as, 'download'))
  }

  // napi-rs reads a required options object without checking it is one: undefined
  // would throw a bare TypeError from inside the conversion.
  const configure = Host.prototype.configure
  Host.prototype.configure = function (options) {
    if (options === null || typeof options !== 'object')
      throw new WgallocError('INVALID_ARGUMENT', 'host.configure: pass an options object, e.g. { maxCachedBytes }')
    return configure.call(this, options)
  }

  addSignal(HostBlock.prototype, 'map', 0)
  HostBlock.prototype[dispose] = function () {
    if (!this.freed) this.free()
  }

  Host.prototype[inspect.custom] = function () {
    const s = this.stats()
    return `Host { allocated: ${s.allocatedBytes.current}, active: ${s.activeBytes.current}, cached: ${s.cachedBytes}, pending: ${s.pendingBlocks} }`
  }
  HostBlock.prototype[inspect.custom] = function () {
    if (this.freed) return `HostBlock { id: ${this.id}, freed }`
    return `HostBlock { id: ${this.id}, direction: '${this.direction}', requestedSize: ${this.requestedSize}, size: ${this.size}, mapped: ${this.mapped}${this.poolId ? `, pool: ${this.poolId}` : ''} }`
  }
}

module.exports = { installHost }
