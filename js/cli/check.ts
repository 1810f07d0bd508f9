// `wgalloc check <graph.json> [--strategy s] [--runs N] [--verify] [--json]`: eager and
// planned runs of a graph (model graphs run with checksum kernels).
import { type Difference, checkGraph } from '../check.js'
import { parseJson } from '../errors.js'
import { Gpu } from '../gpu.js'
import type { Graph } from '../graph.js'
import { readInputFile } from '../internal/input-file.js'
import type { Strategy } from '../plan.js'
import { namingFile, parseCommand, positiveInt, str } from './command.js'
import { bytes, table } from './table.js'

const USAGE =
  'usage: wgalloc check <graph.json> [--strategy NAME] [--runs N] [--verify] [--json]\n' +
  '  graph.json: an executable graph (tensors, ops, kernels) or a model graph (bench/data/models format, run with checksum kernels)\n' +
  '  --verify: also poison and check every tensor on the device after each op'

/** The first difference in words: output, element, both values and the op that wrote it. */
function describeDifference(d: Difference | null): string {
  if (!d) return 'the outputs differ'
  const where = d.index === null ? `output '${d.output}'` : `output '${d.output}' element ${d.index} (${d.dtype})`
  return `${where}: eager ${d.eager}, planned ${d.planned}${d.op ? `, last written by op '${d.op}'` : ''}`
}

export default async function check(argv: string[]): Promise<number> {
  const { values, positionals, exit } = parseCommand(argv, {
    usage: USAGE,
    files: 1,
    options: {
      strategy: { type: 'string', default: 'best' },
      runs: { type: 'string', default: '5' },
      verify: { type: 'boolean', default: false },
      json: { type: 'boolean', default: false },
    },
  })
  if (exit !== undefined) return exit
  const file = positionals[0]
  const text = readInputFile(file)
  const parsed = parseJson(text, file) as Partial<Graph>
  const gpu = await Gpu.request()
  let f: Awaited<ReturnType<typeof checkGraph>>
  try {
    const graph = (parsed?.kernels ? parsed : JSON.parse(gpu.checksumGraph(text))) as Graph
    f = await checkGraph(gpu, graph, { strategy: str(values, 'strategy') as Strategy, runs: positiveInt(values, 'runs'), checkPlan: values.verify === true })
  } catch (err) {
    throw namingFile(err, file)
  } finally {
    gpu.destroy()
  }
  const { svg: _svg, stats: _stats, ...figures } = f
  if (values.json) {
    console.log(JSON.stringify(figures))
  } else {
    console.log(
      table(
        ['figure', 'value'],
        [
          ['outputs equal (eager vs planned)', f.outputsEqual ? 'yes, bit for bit' : `NO: ${describeDifference(f.firstDifference)}`],
          ['plan verified on the device', f.planCheckedOnDevice ? 'yes' : 'no (add --verify)'],
          ['slab / lower bound', `${bytes(f.slabSize)} / ${bytes(f.lowerBound)} = ${f.ratio.toFixed(4)}${f.optimal ? ' (optimal)' : ''}`],
          ['eager peak reserved', bytes(f.eagerPeakReservedBytes)],
          ['planned device bytes', `${bytes(f.plannedPeakBytes)} (${f.memoryRatio.toFixed(3)} x eager)`],
          ['eager / planned run (median)', `${f.eagerMs.toFixed(2)} ms / ${f.plannedMs.toFixed(2)} ms`],
        ],
      ),
    )
  }
  return f.outputsEqual ? 0 : 1
}
