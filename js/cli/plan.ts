// `wgalloc plan <file.json|file.csv> [--strategy s|all] [--time-limit 10s] [--alignment N]
//   [--svg out.svg] [--json [out.json]]`
import type { PlanProgress } from '../binding.js'
import { WgallocError, invalidArgument } from '../errors.js'
import { readInputFile } from '../internal/input-file.js'
import { refuseInputAsOutput, writeOutputFile } from '../internal/output-file.js'
import { type MemoryPlan, STRATEGIES, type Strategy, isJsonText, planMemory } from '../plan.js'
import { namingFile, parseCommand, str } from './command.js'
import { bytes, table } from './table.js'

const USAGE = 'usage: wgalloc plan <file.json|file.csv> [--strategy NAME|all] [--time-limit 10s] [--alignment N] [--svg out.svg] [--json [out.json]]'

function parseDuration(text: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m)?$/.exec(String(text).trim())
  if (!m) throw invalidArgument('--time-limit', 'a duration such as 500ms, 10s, 2m', `'${text}'`)
  const unit: Record<string, number> = { ms: 1, s: 1000, m: 60000 }
  return Math.round(Number(m[1]) * unit[m[2] ?? 's'])
}

/** `--json` takes an optional file name: the next argument when it ends in .json. */
function splitJsonFlag(argv: string[]): { args: string[]; json: boolean; jsonFile: string | null } {
  const args = [...argv]
  const i = args.indexOf('--json')
  if (i < 0) return { args, json: false, jsonFile: null }
  const next = args[i + 1]
  // Only when another file (the input) is also named, so `plan --json g.json` still reads g.json.
  const files = args.filter((a) => /\.(json|csv)$/.test(a))
  const jsonFile = next?.endsWith('.json') && files.length > 1 ? next : null
  args.splice(i, jsonFile ? 2 : 1)
  return { args, json: true, jsonFile }
}

function progressBar(strategy: string): ((p: PlanProgress) => void) | undefined {
  if (!process.stderr.isTTY) return undefined
  return (p) => {
    const ratio = p.best / p.lowerBound
    process.stderr.write(`\r${strategy}: best ${p.best} / lower bound ${p.lowerBound} (${ratio.toFixed(4)}) after ${(p.elapsedMs / 1000).toFixed(1)} s   `)
  }
}

export default async function plan(argv: string[]): Promise<number> {
  const { args, json, jsonFile } = splitJsonFlag(argv)
  const { values, positionals, exit } = parseCommand(args, {
    usage: USAGE,
    files: 1,
    options: {
      strategy: { type: 'string', default: 'best' },
      'time-limit': { type: 'string', default: '10s' },
      alignment: { type: 'string', default: '1' },
      svg: { type: 'string' },
    },
  })
  if (exit !== undefined) return exit
  const file = positionals[0]
  if (jsonFile) refuseInputAsOutput(jsonFile, file, '--json')
  const svgFile = str(values, 'svg')
  if (svgFile) refuseInputAsOutput(svgFile, file, '--svg')
  // The text itself: the planner reads JSON exactly (integers past 2^53 included).
  const input = readInputFile(file)
  if (file.endsWith('.json') && !isJsonText(input)) {
    // Not an array, an object or a graph: refused as JSON (else it would be read as CSV).
    throw new WgallocError('PARSE_ERROR', `${file}: expected a JSON array of usage records, { records } or a graph`)
  }
  const strategy = str(values, 'strategy') ?? 'best'
  const strategies = strategy === 'all' ? STRATEGIES : [strategy as Strategy]
  const timeLimitMs = parseDuration(str(values, 'time-limit') ?? '10s')
  const alignment = Number(values.alignment)
  const plans: MemoryPlan[] = []
  for (const s of strategies) {
    const bar = progressBar(s)
    // Input errors name the file, as in every command.
    const p = await planMemory(input, { strategy: s, timeLimitMs, alignment, onProgress: bar }).catch((err: unknown) => {
      throw namingFile(err, file)
    })
    if (bar) process.stderr.write('\n')
    plans.push(p)
  }
  const rows = plans.map((p) => ({
    strategy: p.strategy,
    method: p.method,
    slabSize: p.slabSize,
    lowerBound: p.lowerBound,
    ratio: p.ratio,
    optimal: p.optimal,
    timeMs: p.timeMs,
  }))
  const best = plans.reduce((a, b) => (b.slabSize < a.slabSize ? b : a))
  if (json && !jsonFile) {
    // One JSON document: the row, or an array of rows for several strategies.
    console.log(JSON.stringify(rows.length === 1 ? rows[0] : rows))
  } else {
    console.log(
      table(
        ['strategy', 'slab', 'lower bound', 'ratio', 'optimal', 'time ms', 'method'],
        rows.map((r) => [r.strategy, r.slabSize, r.lowerBound, Number(r.ratio.toFixed(4)), r.optimal ? 'yes' : 'no', Number(r.timeMs.toFixed(1)), r.method]),
      ),
    )
    console.log(`\nsmallest slab: ${bytes(best.slabSize)} (${best.strategy}), lower bound ${bytes(best.lowerBound)}`)
  }
  if (jsonFile) writeOutputFile(jsonFile, `${JSON.stringify(plans.length === 1 ? best.toJSON() : plans.map((p) => p.toJSON()), null, 2)}\n`, 'plan')
  if (svgFile) writeOutputFile(svgFile, best.toSVG(), 'plan picture')
  return 0
}
