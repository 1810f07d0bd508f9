// Plan view data: `plan.toJSON()` records (id, size, first, last, offset) as
// columns, the slab and lower bound lines, and views/constants for hover text.
import { type Loose, type SummaryRow, array, count, fail, id, object } from './check.js'

export function fromPlan(json: Loose) {
  const records = array(json.records, 'records')
  const cols = { id: [] as string[], size: [] as number[], first: [] as number[], last: [] as number[], offset: [] as number[] }
  let steps = 0
  for (const [i, r] of records.entries()) {
    const at = `records[${i}]`
    object(r, at)
    cols.id.push(id(r.id, `${at}.id`))
    cols.size.push(count(r.size, `${at}.size`))
    const first = count(r.first, `${at}.first`)
    const last = count(r.last, `${at}.last`)
    if (last < first) fail(`${at}.last`, `at least first (${first})`, String(last), 'last is before first')
    cols.first.push(first)
    cols.last.push(last)
    cols.offset.push(count(r.offset, `${at}.offset`))
    steps = Math.max(steps, last + 1)
  }
  const slabSize = count(json.slabSize, 'slabSize')
  const lowerBound = json.lowerBound == null ? null : count(json.lowerBound, 'lowerBound')
  const graph = json.graph && typeof json.graph === 'object' ? json.graph : null
  if (graph && typeof graph.steps === 'number') steps = Math.max(steps, graph.steps)
  // Views share their base's storage: list them on the base's tooltip.
  // No prototype: a tensor may be named `constructor` or `__proto__`.
  const views: Record<string, string[]> = Object.create(null)
  for (const a of Array.isArray(graph?.aliases) ? graph.aliases : []) {
    if (a && a.base != null && a.id != null) (views[a.base] ??= []).push(String(a.id))
  }
  const strategy = typeof json.strategy === 'string' ? json.strategy : 'plan'
  return {
    kind: 'plan',
    title: `memory plan: ${strategy}`,
    subtitle: `${records.length} buffers over ${steps} steps${json.method && json.method !== strategy ? `, method ${json.method}` : ''}`,
    records: cols,
    steps: Math.max(steps, 1),
    slabSize,
    lowerBound,
    views,
    summary: [
      ['slab', slabSize, 'bytes'] as SummaryRow,
      ...(lowerBound != null
        ? [
            ['lower bound', lowerBound, 'bytes'],
            ['slab / lower bound', lowerBound > 0 ? slabSize / lowerBound : 1, 'ratio'],
          ]
        : []),
      ['buffers', records.length, 'count'],
      ...(typeof json.optimal === 'boolean' ? [['proved optimal', json.optimal ? 'yes' : 'no', 'text']] : []),
      ...(typeof json.timeMs === 'number' ? [['planning time', json.timeMs, 'ms']] : []),
      ...(graph && typeof graph.constantSize === 'number' && graph.constantSize > 0 ? [['constant region', graph.constantSize, 'bytes']] : []),
      ...(typeof json.alignment === 'number' ? [['alignment', json.alignment, 'count']] : []),
    ],
  }
}
