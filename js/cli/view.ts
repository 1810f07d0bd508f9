// `wgalloc view <file.json> [-o out.html] [--no-replay] [--budget BYTES] [--device] [--title T]`:
// one self-contained HTML page for a heap snapshot, alloc/free trace, plan or profile.
import { basename } from 'node:path'
import { invalidArgument } from '../errors.js'
import { Gpu } from '../gpu.js'
import { readJsonFile } from '../internal/input-file.js'
import { refuseInputAsOutput, writeOutputFile } from '../internal/output-file.js'
import type { Trace } from '../replay.js'
import { VIEW_REPLAY_BUDGET, replayOnHeap, replayOnHost } from '../view/history.js'
import { type ViewKind, detectKind, renderHtml, renderTraceReplay } from '../view/index.js'
import { parseCommand, positiveInt, str } from './command.js'
import { bytes } from './table.js'

const USAGE = `usage: wgalloc view <file.json> [-o out.html] [--no-replay] [--budget BYTES] [--device] [--title TEXT]

  file.json   a heap snapshot (gpu.heap.memorySnapshot(), or \`wgalloc replay --snapshot\`),
              an alloc/free trace (bench/data/traces), a plan (\`wgalloc plan --json out.json\`),
              or a profiler trace (gpu.profiler.exportTrace, \`wgalloc demo\`'s trace.json)
  -o FILE     output page (default: the input's name with .html, in the current directory)
  --budget N  bytes an alloc/free trace's replay may hold (default ${VIEW_REPLAY_BUDGET}, 8 GiB);
              allocations past it are drawn as out-of-memory markers
  --device    replay an alloc/free trace through the device heap, for its segment map: it takes
              device memory, at most the budget (default: the device's), and a device
  --no-replay draw an alloc/free trace as is, without replaying it (no budget, no markers)

An alloc/free trace is replayed on host storage by default (the heap's policy simulated, as
\`wgalloc replay --simulate\`): it opens no device and takes no device memory, whatever the file.`

export default async function view(argv: string[]): Promise<number> {
  const { values, positionals, exit } = parseCommand(argv, {
    usage: USAGE,
    files: 1,
    options: {
      output: { type: 'string', short: 'o' },
      'no-replay': { type: 'boolean', default: false },
      budget: { type: 'string' },
      device: { type: 'boolean', default: false },
      title: { type: 'string' },
    },
  })
  if (exit !== undefined) return exit
  const file = positionals[0]
  const out = str(values, 'output') ?? `${basename(file).replace(/\.json$/i, '')}.html`
  refuseInputAsOutput(out, file, '-o')
  if (values['no-replay'] && values.device)
    throw invalidArgument('--device', 'no --device with --no-replay', 'both', '--device replays the trace; leave out --no-replay')
  const budget = values.budget === undefined ? undefined : positiveInt(values, 'budget')
  if (budget !== undefined && values['no-replay'])
    throw invalidArgument('--budget', 'no --budget with --no-replay', 'both', '--budget bounds a replay; leave out --no-replay')
  let json = readJsonFile(file)
  let kind: ViewKind = detectKind(json)
  if ((budget !== undefined || values.device) && kind !== 'trace')
    throw invalidArgument(
      values.device ? '--device' : '--budget',
      'an alloc/free trace to replay',
      `${file}, a ${kind}`,
      '--budget and --device apply to an alloc/free trace',
    )
  const title = str(values, 'title')
  let html: string
  if (kind === 'trace' && values.device) {
    // The real heap gives every block its segment and offset. Its budget, with the high
    // watermark at 1, bounds what the file can make it reserve; a request past it is left out
    // and recorded as an out-of-memory event, so the page is written all the same.
    const gpu = await Gpu.request(budget === undefined ? undefined : { memoryBudget: budget })
    try {
      gpu.heap.setHighWatermarkRatio(1)
      json = replayOnHeap(gpu.heap, json as Trace, true)
    } finally {
      gpu.destroy()
    }
    kind = 'snapshot'
    html = renderHtml(json, { kind, title })
  } else if (kind === 'trace' && !values['no-replay']) {
    html = renderTraceReplay(json, replayOnHost(json, { budget }), { title })
  } else html = renderHtml(json, { kind, title })
  const hasHistory = kind === 'snapshot' && (json as { history?: unknown }).history !== undefined
  writeOutputFile(out, html, `${hasHistory ? 'memory history' : kind}, ${bytes(Buffer.byteLength(html))}`)
  return 0
}
