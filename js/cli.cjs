#!/usr/bin/env node
'use strict'
// wgalloc command line: `wgalloc <command> [options]`. Run `wgalloc help`.
const { parseArgs } = require('node:util')

// Load the addon before the commands do, so a missing binary is reported like
// any other error (what to install) rather than as a stack trace.
try {
  require('./native.cjs')
} catch (err) {
  console.error(`wgalloc: ${err.code ? `[${err.code}] ` : ''}${err.message}`)
  process.exit(1)
}

const COMMANDS = {
  info: { run: require('./cli/info.cjs'), summary: 'adapter, backend, features, limits and memory budget' },
  check: { run: require('./cli/check.cjs'), summary: 'run a graph eagerly and planned; outputs must match bit for bit' },
  replay: { run: require('./cli/replay.cjs'), summary: 'replay an eager alloc/free trace through the heap; fragmentation figures' },
  plan: { run: require('./cli/plan.cjs'), summary: 'plan tensor offsets in one slab (JSON graph/records or MiniMalloc CSV)' },
  view: { run: require('./cli/view.cjs'), summary: 'write one self-contained HTML page for a heap snapshot, alloc/free trace, plan or profile' },
  demo: { run: require('./cli/demo.cjs'), summary: 'transformer block on the device: every strategy, eager vs planned memory and time, CPU check' },
}

/**
 * Parses a command's arguments: its `options` plus `--help`, and exactly `files` positional
 * file names (0 or 1). Returns `{ values, positionals }`, or `{ exit }` once it printed the
 * command's usage: 0 for `--help`, 2 for a wrong number of files.
 */
function parseCommand(argv, { options, usage, files = 0 }) {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: files > 0,
    options: { ...options, help: { type: 'boolean', short: 'h', default: false } },
  })
  if (values.help || positionals.length !== files) {
    console.log(usage)
    return { exit: values.help ? 0 : 2 }
  }
  return { values, positionals }
}

function usage() {
  const lines = Object.entries(COMMANDS).map(([name, c]) => `  ${name.padEnd(8)} ${c.summary}`)
  return `usage: wgalloc <command> [options]\n\ncommands:\n${lines.join('\n')}\n\nRun 'wgalloc <command> --help' for a command's options.`
}

async function main(argv) {
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
  return command.run(rest, { parseCommand })
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code ?? 0
  },
  (err) => {
    console.error(`wgalloc: ${err.code ? `[${err.code}] ` : ''}${err.message}`)
    process.exitCode = 1
  },
)
