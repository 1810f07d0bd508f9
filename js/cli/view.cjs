'use strict'
// `wgalloc view <file.json> [-o out.html] [--no-replay] [--title T]`: one
// self-contained HTML page for a heap snapshot, alloc/free trace, plan or profile.
const { writeFileSync } = require('node:fs')
const { basename } = require('node:path')
const { renderHtml, detectKind, readJsonFile, replayHistory } = require('../view/index.cjs')
const { WgallocError } = require('../errors.cjs')
const { bytes } = require('./table.cjs')

const USAGE = `usage: wgalloc view <file.json> [-o out.html] [--no-replay] [--title TEXT]

  file.json   a heap snapshot (gpu.heap.snapshot(), or \`wgalloc replay --snapshot\`),
              an alloc/free trace (bench/data/traces), a plan (\`wgalloc plan --json out.json\`),
              or a profiler trace (gpu.profiler.exportTrace, \`wgalloc demo\`'s trace.json)
  -o FILE     output page (default: the input's name with .html, in the current directory)
  --no-replay draw an alloc/free trace as is, without replaying it through the device heap
              (no segment map then)`

module.exports = async function view(argv, { parseCommand }) {
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
  let json = readJsonFile(file)
  let kind = detectKind(json)
  if (kind === 'trace' && !values['no-replay']) {
    // A replay through the real heap gives every block its segment and offset.
    const { Gpu } = require('../index.cjs')
    const gpu = await Gpu.request()
    try {
      json = replayHistory(gpu.heap, json)
    } finally {
      gpu.destroy()
    }
    kind = 'snapshot'
  }
  const html = renderHtml(json, { kind, title: values.title })
  const out = values.output ?? `${basename(file).replace(/\.json$/i, '')}.html`
  try {
    writeFileSync(out, html)
  } catch (err) {
    throw new WgallocError('IO_ERROR', `cannot write ${out}: ${err.message}`, { cause: err })
  }
  console.log(`wrote ${out} (${kind === 'snapshot' && json.history ? 'memory history' : kind}, ${bytes(Buffer.byteLength(html))})`)
  return 0
}
