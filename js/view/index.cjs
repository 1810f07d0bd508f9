'use strict'
// `renderHtml(json)`: one self-contained HTML page (inline CSS, JS and data; no
// network) for a heap snapshot, an alloc/free trace, a memory plan or a profiler
// trace. The kind is read from the JSON's shape; each kind has a module that
// checks its input and reduces it to the compact data its page script draws.
const { readJsonFile } = require('../input-file.cjs')
const { WgallocError } = require('../errors.cjs')
const { page } = require('./shell.cjs')
const memory = require('./memory.cjs')
const plan = require('./plan.cjs')
const profile = require('./profile.cjs')
const { recordMemoryHistory, replayHistory } = require('./history.cjs')

const KINDS = Object.freeze({
  snapshot: 'heap snapshot (gpu.heap.snapshot(), or { segments, history } from recordMemoryHistory / `wgalloc replay --snapshot`)',
  trace: 'alloc/free trace ({ events: [{ op: "alloc", id, size } | { op: "free", id }] })',
  plan: 'memory plan (plan.toJSON(), `wgalloc plan --json out.json`)',
  profile: 'profiler trace (Chrome Trace Event JSON from gpu.profiler.exportTrace)',
})

const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v)
const isSegment = (s) => isObject(s) && Array.isArray(s.blocks) && 'pool' in s && 'size' in s

/** 'snapshot' | 'trace' | 'plan' | 'profile', or throws INVALID_ARGUMENT naming the accepted kinds. */
function detectKind(json) {
  if (Array.isArray(json)) {
    // An empty array is what an empty heap's snapshot() returns.
    if (json.length === 0 || isSegment(json[0])) return 'snapshot'
    if (isObject(json[0]) && typeof json[0].ph === 'string') return 'profile'
  } else if (isObject(json)) {
    if (Array.isArray(json.segments) && (json.segments.length === 0 || isSegment(json.segments[0]))) return 'snapshot'
    if (Array.isArray(json.traceEvents)) return 'profile'
    if (Array.isArray(json.records) && 'slabSize' in json) return 'plan'
    if (Array.isArray(json.events)) return 'trace'
  }
  const accepted = Object.values(KINDS)
    .map((k) => `  - ${k}`)
    .join('\n')
  throw new WgallocError('INVALID_ARGUMENT', `cannot tell what this JSON is; wgalloc view accepts:\n${accepted}`)
}

const MODULES = { snapshot: memory.fromSnapshot, trace: memory.fromTrace, plan: plan.fromPlan, profile: profile.fromTrace }

/**
 * The HTML page for `json` (any kind `detectKind` accepts).
 * @param {unknown} json parsed JSON
 * @param {{ title?: string, kind?: string }} [options] `kind` skips detection
 */
function renderHtml(json, options = {}) {
  if (!isObject(options)) throw new WgallocError('INVALID_ARGUMENT', 'renderHtml: options must be an object')
  const kind = options.kind ?? detectKind(json)
  if (!MODULES[kind]) throw new WgallocError('INVALID_ARGUMENT', `renderHtml: unknown kind '${kind}'; use one of ${Object.keys(KINDS).join(', ')}`)
  const view = MODULES[kind](json)
  return page({ ...view, title: options.title ?? view.title })
}

module.exports = { renderHtml, detectKind, readJsonFile, recordMemoryHistory, replayHistory, VIEW_KINDS: KINDS }
