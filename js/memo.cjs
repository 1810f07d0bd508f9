'use strict'

/**
 * Makes the native getter `name` on `proto` return the same object every time for
 * one receiver (napi getters wrap a new JS object on each call, so `gpu.heap !==
 * gpu.heap` otherwise, and listeners kept per object would be lost).
 */
function memoizeGetter(proto, name) {
  const cache = new WeakMap()
  const getter = Object.getOwnPropertyDescriptor(proto, name).get
  Object.defineProperty(proto, name, {
    configurable: true,
    enumerable: true,
    get() {
      let value = cache.get(this)
      if (value === undefined) {
        value = getter.call(this)
        cache.set(this, value)
      }
      return value
    },
  })
}

module.exports = { memoizeGetter }
