// Turns one profiled run into the alloc/free events an eager runtime with no planner issues:
// graph inputs are allocated first; then, op by op, each op allocates its non-view outputs and
// every tensor whose last use was that op is freed right after it; graph outputs are freed when
// the request ends (they live to the last op). Views alias their input and allocate nothing;
// uses through a view extend the life of the tensor it aliases.

import type { ProfiledRun } from './profile-run.mjs'
import type { TraceEvent } from './trace-format.mjs'

/** A tensor that takes memory: its trace id, its size, and the ops where it is made and last used. */
interface TensorLife {
  id: string
  size: number
  /** The op that allocates it (-1: a graph input, allocated first). */
  first: number
  /** The op after which it is freed. */
  last: number
  /** Allocation order, which orders the frees after one op. */
  order: number
}

export const VIEW_OPS = new Set(['Reshape', 'Squeeze', 'Unsqueeze', 'Flatten', 'Identity'])

/** `prefix` is put in front of every id (e.g. `r3:`); graph inputs are named `input:<name>`. */
export function eagerEvents(run: ProfiledRun, prefix = ''): TraceEvent[] {
  const tensors = new Map<string, TensorLife>() // id -> { id, size, last, order }
  const baseOf = new Map<string, string>() // view id -> id of the non-view tensor it aliases
  let order = 0
  for (const g of run.graphInputs) {
    tensors.set(g.id, { id: `input:${g.id}`, size: g.size, first: -1, last: -1, order: order++ })
  }
  const root = (name: string) => (baseOf.has(name) ? baseOf.get(name)! : name)
  const allocsAt = run.ops.map((): TensorLife[] => [])
  run.ops.forEach((op, i) => {
    for (const input of op.inputs) {
      const t = tensors.get(root(input))
      if (t) t.last = Math.max(t.last, i) // weights are not in `tensors`
    }
    op.outputs.forEach((out, k) => {
      if (VIEW_OPS.has(op.type) && k === 0 && tensors.has(root(op.inputs[0]))) {
        baseOf.set(out.id, root(op.inputs[0]))
        return
      }
      if (tensors.has(out.id)) throw new Error(`tensor ${out.id} produced twice`)
      const t: TensorLife = { id: out.id, size: out.size, first: i, last: i, order: order++ }
      tensors.set(out.id, t)
      allocsAt[i].push(t)
    })
  })
  const lastOp = run.ops.length - 1
  for (const out of run.graphOutputs) tensors.get(root(out))!.last = lastOp

  const freesAt = run.ops.map((): TensorLife[] => [])
  for (const t of tensors.values()) freesAt[Math.max(t.last, 0)].push(t)
  for (const list of freesAt) list.sort((a, b) => a.order - b.order)

  const events: TraceEvent[] = []
  for (const g of run.graphInputs) {
    const t = tensors.get(g.id)!
    if (t.size > 0) events.push({ op: 'alloc', id: prefix + t.id, size: t.size })
  }
  run.ops.forEach((_, i) => {
    for (const t of allocsAt[i]) if (t.size > 0) events.push({ op: 'alloc', id: prefix + t.id, size: t.size })
    for (const t of freesAt[i]) if (t.size > 0) events.push({ op: 'free', id: prefix + t.id })
  })
  return events
}
