// Plan execution on the real-model graphs (checksum kernels): planned slab vs
// lower bound, planned device memory vs the eager run's peak reserved, and
// planned vs eager run time (median of 20), all in one run.
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import type { Gpu, Graph } from 'wgalloc'
import { DATA, internal, type Result, type Suite } from '../harness.js'

interface CheckFigures {
  outputsEqual: boolean
  ratio: number
  eagerPeakReservedBytes: number
  plannedPeakBytes: number
  eagerMs: number
  plannedMs: number
}
const { checkGraph } = internal<{ checkGraph: (gpu: Gpu, graph: Graph, options: { runs: number }) => Promise<CheckFigures> }>('check.js')

const MODELS = join(DATA, 'models')

export const suites: Suite[] = [
  {
    name: 'exec-models',
    description: 'model graphs: planned vs eager memory and time (median of 20 runs each)',
    async run({ gpu }) {
      if (!existsSync(MODELS)) return []
      const out: Result[] = []
      for (const file of readdirSync(MODELS)
        .filter((f) => f.endsWith('.json'))
        .sort()) {
        const graph = JSON.parse(gpu.checksumGraph(readFileSync(join(MODELS, file), 'utf8'))) as Graph
        const f = await checkGraph(gpu, graph, { runs: 20 })
        out.push({
          model: file,
          measured: { value: f.plannedPeakBytes / f.eagerPeakReservedBytes, unit: `planned/eager bytes (${file.replace('.json', '')})` },
          baseline: { value: f.eagerPeakReservedBytes, unit: 'B', what: 'eager peak reserved' },
          ratio: f.plannedMs / f.eagerMs,
          ratioMeaning: 'planned run time / eager run time (lower is better)',
          outputsEqual: f.outputsEqual,
          slabOverLowerBound: f.ratio,
          plannedMs: f.plannedMs,
          eagerMs: f.eagerMs,
        })
      }
      return out
    },
  },
]
