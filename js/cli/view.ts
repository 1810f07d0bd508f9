// `wgalloc view <file.json> [-o out.html] [--no-replay] [--title T]`: one self-contained HTML
// page for a heap snapshot, alloc/free trace, plan or profile.
import { basename, resolve } from 'node:path'
import { WgallocError } from '../errors.js'
import { Gpu } from '../gpu.js'
import { readJsonFile, writeOutputFile } from '../input-file.js'
import type { Trace } from '../replay.js'
import { replayHistory } from '../view/history.js'
import { type ViewKind, detectKind, renderHtml } from '../view/index.js'
import { parseCommand, str } from './command.js'
import { bytes } from './table.js'

const USAGE = `usage: wgalloc view <file.json> [-o out.html] [--no-replay] [--title TEXT]

  file.json   a heap snapshot (gpu.heap.memorySnapshot(), or \`wgalloc replay --snapshot\`),
              an alloc/free trace (bench/data/traces), a plan (\`wgalloc plan --json out.json\`),
              or a profiler trace (gpu.profiler.exportTrace, \`wgalloc demo\`'s trace.json)
  -o FILE     output page (default: the input's name with .html, in the current directory)
  --no-replay draw an alloc/free trace as is, without replaying it through the device heap
              (no segment map then)`

export default async function view(argv: string[]): Promise<number> {
  const { values, positionals, exit } = parseCommand(argv, {
    usage: USAGE,
    files: 1,
    options: {
      output: { type: 'string', short: 'o' },
      'no-replay': { type: 'boolean', default: false },
      title: { type: 'string' },
    },
  })
  if (exit !== undefined) return exit
  const file = positionals[0]
  const out = str(values, 'output') ?? `${basename(file).replace(/\.json$/i, '')}.html`
  if (resolve(out) === resolve(file)) throw new WgallocError('INVALID_ARGUMENT', `-o ${out} names the input; the page would replace it`)
  let json = readJsonFile(file)
  let kind: ViewKind = detectKind(json)
  if (kind === 'trace' && !values['no-replay']) {
    // A replay through the real heap gives every block its segment and offset.
    const gpu = await Gpu.request()
    try {
      json = replayHistory(gpu.heap, json as Trace)
    } finally {
      gpu.destroy()
    }
    kind = 'snapshot'
  }
  const html = renderHtml(json, { kind, title: str(values, 'title') })
  const hasHistory = kind === 'snapshot' && (json as { history?: unknown }).history !== undefined
  writeOutputFile(out, html, `${hasHistory ? 'memory history' : kind}, ${bytes(Buffer.byteLength(html))}`)
  return 0
}
