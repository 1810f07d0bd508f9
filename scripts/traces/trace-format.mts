// The fields of bench/data/traces/*.trace.json as generate.mts writes them: the metadata fields, one
// per line in the order generate.mts builds them, then `numEvents`, `peakLiveBytes` and the events,
// one per line (see bench/data/models/README.md, "Trace file format").

import type { Shapes } from './workloads.mjs'

/** An allocation of `size` bytes under `id`, or the free of a live `id`. */
export type TraceEvent = { op: 'alloc'; id: string; size: number } | { op: 'free'; id: string }

/** Where the model comes from and how it ran: the fields every trace starts with. */
export interface TraceSource {
  /** `<npm package>@<version>/<path>`, or `pypi:<wheel>@<version>/<path>`; a pipeline joins its models' with ` + `. */
  source: string
  license: string
  /** The model's key in MODELS, or the pipeline's name. */
  model: string
  kind: string
  modelFileBytes: number
  runtime: string
}

/** One request at one set of input shapes. */
export interface SingleTraceFields extends TraceSource {
  trace: 'single'
  inputShapes: Shapes[]
  requests: number
  /** Single traces have none (table.mts counts one). */
  distinctShapes?: undefined
}

/** Requests of one model drawn from a seeded mix; equal shapes reuse one profiled run. */
export interface MixTraceFields extends TraceSource {
  trace: 'serving-mix'
  seed: number
  /** How the requests are drawn. */
  mix: string
  requests: number
  distinctShapes: number
  inputShapes: Shapes[]
}

/** One stage of a pipeline request as `inputShapes` lists it: the model, then its input shapes. */
export interface PipelineStageShapes {
  model: string
  [input: string]: string | number[]
}

/** Requests that each run several models in turn (ids are prefixed `r<k>:<model>#<stage>:`). */
export interface PipelineTraceFields extends TraceSource {
  trace: 'pipeline'
  seed: number
  mix: string
  requests: number
  distinctShapes: number
  inputShapes: PipelineStageShapes[][]
}

export type TraceFields = SingleTraceFields | MixTraceFields | PipelineTraceFields

/** A whole trace file. */
export type TraceFile = TraceFields & {
  numEvents: number
  peakLiveBytes: number
  events: TraceEvent[]
}

/** Largest sum of live allocation sizes over an event stream; throws on inconsistent events. */
export function peakLiveBytes(events: TraceEvent[]): number {
  const live = new Map<string, number>()
  let current = 0
  let peak = 0
  events.forEach((e, i) => {
    if (e.op === 'alloc') {
      if (live.has(e.id)) throw new Error(`event ${i}: ${e.id} allocated twice`)
      live.set(e.id, e.size)
      current += e.size
      peak = Math.max(peak, current)
    } else {
      if (!live.has(e.id)) throw new Error(`event ${i}: free of ${e.id}, which is not live`)
      current -= live.get(e.id)!
      live.delete(e.id)
    }
  })
  if (live.size > 0) throw new Error(`${live.size} allocations never freed`)
  return peak
}

/**
 * A trace file's text, laid out as the committed files are: `fields` one per line, then
 * `numEvents`, `peakLiveBytes` and the events, one per line.
 */
export function traceText(fields: object, events: TraceEvent[]): string {
  const doc = { ...fields, numEvents: events.length, peakLiveBytes: peakLiveBytes(events) }
  const lines = Object.entries(doc).map(([k, v]) => ` ${JSON.stringify(k)}: ${JSON.stringify(v)}`)
  const body = events.map((e) => `  ${JSON.stringify(e)}`).join(',\n')
  return `{\n${lines.join(',\n')},\n "events": [\n${body}\n ]\n}\n`
}
