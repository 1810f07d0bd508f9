// `renderHtml(json)`: one self-contained HTML page (inline CSS, JS and data; no network) for
// a heap snapshot, an alloc/free trace, a memory plan or a profiler trace. The kind is read
// from the JSON's shape; each kind has a module that checks its input and reduces it to the
// compact data its page script draws.
import { shown, optionsObject, invalidArgument } from '../errors.js'
import { type Loose, object } from './check.js'
import type { HostReplay } from './history.js'
import * as memory from './memory.js'
import * as plan from './plan.js'
import * as profile from './profile.js'
import { page } from './shell.js'

/** What `wgalloc view` draws: a heap snapshot (with or without history), an alloc/free trace, a plan, a profiler trace. */
export type ViewKind = 'snapshot' | 'trace' | 'plan' | 'profile'

/** Every view kind, with the inputs it accepts. */
export const VIEW_KINDS: Readonly<Record<ViewKind, string>> = Object.freeze({
  snapshot: 'heap snapshot (gpu.heap.snapshot() or gpu.heap.memorySnapshot(), or `wgalloc replay --snapshot`)',
  trace: 'alloc/free trace ({ events: [{ op: "alloc", id, size } | { op: "free", id }] })',
  plan: 'memory plan (plan.toJSON(), `wgalloc plan --json out.json`)',
  profile: 'profiler trace (Chrome Trace Event JSON from gpu.profiler.exportTrace)',
})

/** Options of `renderHtml()`. */
export interface RenderHtmlOptions {
  /** Page title (default: from the input). */
  title?: string
  /** Skips detection. */
  kind?: ViewKind
}

const isObject = (v: unknown): v is Loose => v !== null && typeof v === 'object' && !Array.isArray(v)
const isSegment = (s: unknown) => isObject(s) && Array.isArray(s.blocks) && 'pool' in s && 'size' in s

/** The kind of `json`, or INVALID_ARGUMENT naming the accepted kinds. */
export function detectKind(json: unknown): ViewKind {
  if (Array.isArray(json)) {
    // An empty array is what an empty heap's snapshot() returns.
    if (json.length === 0 || isSegment(json[0])) return 'snapshot'
    if (isObject(json[0]) && typeof json[0].ph === 'string') return 'profile'
    // `wgalloc plan --strategy all --json`: one plan per strategy.
    if (json.every((p) => isObject(p) && Array.isArray(p.records) && 'slabSize' in p)) return 'plan'
  } else if (isObject(json)) {
    if (Array.isArray(json.segments) && (json.segments.length === 0 || isSegment(json.segments[0]))) return 'snapshot'
    if (Array.isArray(json.traceEvents)) return 'profile'
    if (Array.isArray(json.records) && 'slabSize' in json) return 'plan'
    if (Array.isArray(json.events)) return 'trace'
  }
  const accepted = Object.values(VIEW_KINDS)
    .map((k) => `  - ${k}`)
    .join('\n')
  throw invalidArgument('json', 'a kind wgalloc view accepts', shown(json), `cannot tell what this JSON is; wgalloc view accepts:\n${accepted}`)
}

/** Of the plans `wgalloc plan --strategy all` wrote, the one with the smallest slab (the first of equals). */
function smallestPlan(plans: unknown[]): unknown {
  const size = (p: unknown) => Number((p as { slabSize?: unknown }).slabSize)
  return plans.reduce((best, p) => (size(p) < size(best) ? p : best))
}

const MODULES: Record<ViewKind, (json: Loose) => { kind: string; title: string; subtitle?: string }> = {
  snapshot: memory.fromSnapshot,
  trace: memory.fromTrace,
  plan: plan.fromPlan,
  profile: profile.fromTrace,
}

/**
 * The HTML page for `json` (any kind `detectKind` accepts): one file with no network access.
 * `INVALID_ARGUMENT` names a malformed field.
 */
export function renderHtml(json: unknown, opts?: RenderHtmlOptions | null): string {
  const options = optionsObject(opts, 'renderHtml')
  if (options.title !== undefined && typeof options.title !== 'string') throw invalidArgument(['renderHtml', 'options.title'], 'a string', shown(options.title))
  const kind = options.kind ?? detectKind(json)
  if (!Object.hasOwn(MODULES, kind))
    throw invalidArgument(['renderHtml', 'options.kind'], `one of ${Object.keys(VIEW_KINDS).join(', ')}`, shown(kind), 'unknown kind')
  if (json === null || typeof json !== 'object') throw invalidArgument(['renderHtml', 'json'], 'an object or an array', shown(json))
  const view = MODULES[kind]((kind === 'plan' && Array.isArray(json) && json.length > 0 ? smallestPlan(json) : json) as Loose)
  return page({ ...view, title: options.title ?? view.title })
}

/**
 * The memory page of an alloc/free trace replayed on host storage (`replayOnHost`): the
 * timeline of live requests with out-of-memory markers where the budget could not hold one.
 * @internal
 */
export function renderTraceReplay(trace: unknown, replay: HostReplay, opts?: { title?: string }): string {
  const view = memory.fromTrace(object(trace, 'the trace'), replay)
  return page({ ...view, title: opts?.title ?? view.title })
}

export { type MemoryHistorySnapshot, type MemoryRecorder, type ReplayedTrace, recordMemoryHistory, replayHistory } from './history.js'
export { readJsonFile } from '../internal/input-file.js'
