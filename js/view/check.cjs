'use strict'
// Input checks shared by the view kinds: a malformed field is an INVALID_ARGUMENT
// naming where it is, never a page that draws garbage.
const { WgallocError } = require('../errors.cjs')

function fail(where, what) {
  throw new WgallocError('INVALID_ARGUMENT', `${where}: ${what}`)
}

/** A finite number >= 0. */
function count(value, where) {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) fail(where, `expected a number >= 0, got ${JSON.stringify(value)}`)
  return value
}

/** A finite number (time stamps may be negative in hand-made traces). */
function number(value, where) {
  if (typeof value !== 'number' || !Number.isFinite(value)) fail(where, `expected a number, got ${JSON.stringify(value)}`)
  return value
}

/** An id: a string or a number, returned as a string. */
function id(value, where) {
  if (typeof value === 'string') return value
  if (typeof value === 'number' && Number.isFinite(value)) return String(value)
  return fail(where, `expected a string or number id, got ${JSON.stringify(value)}`)
}

function array(value, where) {
  if (!Array.isArray(value)) fail(where, 'expected an array')
  return value
}

function object(value, where) {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) fail(where, 'expected an object')
  return value
}

module.exports = { fail, count, number, id, array, object }
