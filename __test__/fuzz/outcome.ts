'use strict'
// What a fuzzed call may end in, and the counters every suite keeps.
const { WgallocError, ERROR_CODES } = require('../..')
const { Hostile } = require('./values.cjs')
const KNOWN = require('./known.cjs')

const CODES = new Set(ERROR_CODES)
// TypeErrors and RangeErrors thrown by JS code tripping over a value (a facade bug),
// as opposed to ones that validate an argument on purpose.
const ACCIDENTAL =
  /Cannot (read|set) propert|Cannot destructure|is not a function|is not iterable|is not a constructor|Cannot convert|circular structure|serialize a BigInt|Invalid typed array length|Maximum call stack|Invalid array length|Cannot create property|Cannot mix BigInt|Cannot access|before initialization|undefined is not|detached/

/**
 * 'typed': a WgallocError with a known code; 'standard': a deliberate TypeError or
 * RangeError; 'hostile': the error a hostile argument threw, passed through; 'bad':
 * anything else (an untyped error, an unknown code, a facade crash); 'known': an
 * untyped error listed in known.cjs.
 */
function classify(err) {
  if (err instanceof Hostile) return 'hostile'
  if (KNOWN.classConstructorUntyped && err instanceof Error && /^Class contains no `constructor`/.test(err.message)) return 'known'
  if (err instanceof WgallocError) return CODES.has(err.code) ? 'typed' : 'bad'
  if ((err instanceof TypeError || err instanceof RangeError) && !ACCIDENTAL.test(err.message)) return 'standard'
  return 'bad'
}

function describe(err) {
  if (err instanceof Error) return `${err.constructor.name}${err.code ? ` [${err.code}]` : ''}: ${String(err.message).split('\n')[0].slice(0, 300)}`
  return `non-Error thrown: ${typeof err} ${String(err).slice(0, 100)}`
}

/** Resolves with `{ value }` or `{ error }`, or `{ hang: true }` after `ms`. */
function settle(promise, ms) {
  let timer
  const timeout = new Promise((resolve) => {
    timer = setTimeout(() => resolve({ hang: true }), ms)
  })
  return Promise.race([
    promise.then(
      (value) => ({ value }),
      (error) => ({ error }),
    ),
    timeout,
  ]).finally(() => clearTimeout(timer))
}

/** `{ value }` or `{ error }` of `promise`; a promise still pending after `ms` counts a hang and throws, naming `what`. */
async function within(counts, promise, ms, what) {
  const s = await settle(Promise.resolve(promise), ms)
  if (s.hang) {
    counts.hangs++
    throw new Error(`${what} did not settle within ${ms} ms`)
  }
  return s
}

/** Counters a suite fills and the parent test reads. */
function newCounts() {
  return {
    runs: 0,
    operations: 0, // calls or commands executed
    badInputs: 0, // calls whose arguments were random or deliberately invalid
    errors: { typed: 0, standard: 0, hostile: 0, known: 0, bad: 0 }, // known: a defect listed in known.cjs
    codes: {}, // typed errors by code
    faults: {}, // injected faults by kind (double free, use after free, foreign free, device loss, OOM, abort, ...)
    reads: 0, // read-backs checked against expected bytes
    corruptedReads: 0,
    leakedBytes: 0,
    leakedBlocks: 0,
    hangs: 0,
    standard: {}, // deliberate TypeError/RangeError messages (digits folded), to review
    problems: [], // first few distinct findings, for the report
  }
}

function note(counts, err) {
  const kind = classify(err)
  counts.errors[kind]++
  if (kind === 'typed') counts.codes[err.code] = (counts.codes[err.code] ?? 0) + 1
  if (kind === 'standard') {
    const text = `${err.constructor.name}: ${err.message
      .replace(/\d+/g, 'N')
      .replace(/^Illegal invocation.*/, 'Illegal invocation')
      .slice(0, 120)}`
    counts.standard[text] = (counts.standard[text] ?? 0) + 1
  }
  return kind
}

function fault(counts, kind, n = 1) {
  counts.faults[kind] = (counts.faults[kind] ?? 0) + n
}

function problem(counts, text) {
  if (counts.problems.length < 20 && !counts.problems.includes(text)) counts.problems.push(text)
}

module.exports = { classify, describe, settle, within, newCounts, note, fault, problem }
