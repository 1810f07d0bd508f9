#!/usr/bin/env node
// wgalloc command line: `wgalloc <command> [options]`. Run `wgalloc help`.
import type { Command } from './cli/command.js'

interface Entry {
  load: () => { default: Command }
  summary: string
}

// Commands load on use: `wgalloc plan` never opens the viewer's modules.
const COMMANDS: Record<string, Entry> = {
  info: { load: () => require('./cli/info.js'), summary: 'adapter, backend, features, limits and memory budget' },
  check: { load: () => require('./cli/check.js'), summary: 'run a graph eagerly and planned; outputs must match bit for bit' },
  replay: { load: () => require('./cli/replay.js'), summary: 'replay an eager alloc/free trace through the heap; fragmentation figures' },
  plan: { load: () => require('./cli/plan.js'), summary: 'plan tensor offsets in one slab (JSON graph/records or MiniMalloc CSV)' },
  view: {
    load: () => require('./cli/view.js'),
    summary: 'write one self-contained HTML page for a heap snapshot, alloc/free trace, plan or profile',
  },
  demo: { load: () => require('./cli/demo.js'), summary: 'transformer block on the device: every strategy, eager vs planned memory and time, CPU check' },
}

function usage(): string {
  const lines = Object.entries(COMMANDS).map(([name, c]) => `  ${name.padEnd(8)} ${c.summary}`)
  return `usage: wgalloc <command> [options]\n\ncommands:\n${lines.join('\n')}\n\nRun 'wgalloc <command> --help' for a command's options.`
}

const report = (err: unknown) => {
  const e = err as { code?: string; message?: string }
  console.error(`wgalloc: ${e.code ? `[${e.code}] ` : ''}${e.message ?? String(err)}`)
}

async function main(argv: string[]): Promise<number> {
  // Load the addon before the commands do, so a missing binary is reported like any other
  // error (what to install) rather than as a stack trace.
  require('./internal/native.js')
  const [name, ...rest] = argv
  if (!name || name === 'help' || name === '--help' || name === '-h') {
    console.log(usage())
    return 0
  }
  const command = COMMANDS[name]
  if (!command) {
    console.error(`wgalloc: unknown command '${name}'\n\n${usage()}`)
    return 2
  }
  return command.load().default(rest)
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code
  },
  (err) => {
    report(err)
    process.exitCode = 1
  },
)
