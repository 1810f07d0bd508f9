'use strict'
// JS side of the host staging cache: one Host object per Gpu, `stream.copy()`
// accepting host blocks, the `upload()`/`uploadBatch()`/`download()` helpers, `{ signal }`,
// disposal and inspect output.
const { inspect } = require('node:util')
const { memoizeGetter } = require('./memo.cjs')

function installHost({ Gpu, Host, HostBlock, DeviceBlock, Stream, GpuBuffer, addSignal, callWithSignal, dispose, WgallocError }) {
  memoizeGetter(Gpu.prototype, 'host')

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
      return this.submitUpload(block, data, offset).wait({ signal })
    } catch (err) {
      return Promise.reject(err)
    }
  }
  /**
   * Uploads many `{ block, data, offset }` items with one submission through the host cache
   * (packed into few staging blocks); resolves once the GPU has them all.
   */
  Gpu.prototype.uploadBatch = function (items, options) {
    try {
      if (!Array.isArray(items)) throw new WgallocError('INVALID_ARGUMENT', 'uploadBatch: pass an array of { block, data, offset }')
      const blocks = new Array(items.length)
      const data = new Array(items.length)
      const offsets = new Array(items.length)
      for (let i = 0; i < items.length; i++) {
        const it = items[i]
        if (!(it?.block instanceof DeviceBlock) || !(it.data instanceof Uint8Array)) {
          throw new WgallocError('INVALID_ARGUMENT', `uploadBatch: item ${i} must be { block: DeviceBlock, data: Uint8Array, offset?: number }`)
        }
        blocks[i] = it.block
        data[i] = it.data
        offsets[i] = it.offset ?? 0
      }
      return this.submitUploadBatch(blocks, data, offsets).wait({ signal: options?.signal })
    } catch (err) {
      return Promise.reject(err)
    }
  }
  /** Reads a device block through the host cache: `{ offset, length, signal }`. */
  Gpu.prototype.download = function (block, options) {
    let offset, length, signal
    try {
      ;({ offset, length, signal } = options ?? {})
    } catch (err) {
      return Promise.reject(err)
    }
    return callWithSignal(this.downloadRange, this, [block, offset, length], { signal })
  }

  // napi-rs reads a required options object without checking it is one: undefined
  // would throw a bare TypeError from inside the conversion.
  const configure = Host.prototype.configure
  Host.prototype.configure = function (options) {
    if (options === null || typeof options !== 'object') throw new WgallocError('INVALID_ARGUMENT', 'host.configure: pass an options object, e.g. { maxCachedBytes }')
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
