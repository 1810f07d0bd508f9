'use strict'
// Plan execution on the real-model graphs (checksum kernels): planned slab vs
// lower bound, planned device memory vs the eager run's peak reserved, and
// planned vs eager run time (median of 20), all in one run.
const { readFileSync, readdirSync, existsSync } = require('node:fs')
const { join } = require('node:path')
const { checkGraph } = require('../../dist/check.js')

const MODELS = join(__dirname, '../data/models')

module.exports = [
  {
    name: 'exec-models',
    description: 'model graphs: planned vs eager memory and time (median of 20 runs each)',
    async run({ gpu }) {
      if (!existsSync(MODELS)) return []
      const out = []
      for (const file of readdirSync(MODELS)
        .filter((f) => f.endsWith('.json'))
        .sort()) {
        const graph = JSON.parse(gpu.checksumGraph(readFileSync(join(MODELS, file), 'utf8')))
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
