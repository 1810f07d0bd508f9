// Child-process entry of the fuzzers: `npm run build:test && node --expose-gc dist-test/fuzz/run.js <suite>`.
// Runs one suite under fast-check and prints `FUZZ-SUMMARY <json>` as its last line;
// exits 1 when a property failed. reliability.test.ts runs each suite in a child so a
// crash or a hang is caught and reported instead of taking the test runner down.
// Env: WGALLOC_FUZZ_SEED (replays a run), WGALLOC_FUZZ_SCALE (multiplies the runs per
// property), WGALLOC_FUZZ_TIME_MS (time cap per property), WGALLOC_FUZZ_TRACE (step log).
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import fc from 'fast-check'
import { type Counts, type Harness, newCounts, problem, type Suite } from './outcome.js'
import * as trace from './trace.js'

/** What a run prints after `FUZZ-SUMMARY ` (spawn.ts reads it back). */
export interface Summary {
  suite: string
  seed: number
  scale: number
  ms: number
  counts: Counts
  failures: string[]
}

/**
 * Random calls write files under random names (profiler exports, CLI outputs) relative to the
 * working directory. spawn.ts starts the child in a scratch directory; a run started by hand
 * (a replay from the repository root) gets one too, removed at exit, so nothing lands in the tree.
 */
function intoScratch(): void {
  if (fs.realpathSync(process.cwd()).startsWith(fs.realpathSync(os.tmpdir()) + path.sep)) return
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wgalloc-fuzz-replay-'))
  process.chdir(dir)
  process.on('exit', () => fs.rmSync(dir, { recursive: true, force: true }))
}

const SUITES = ['api', 'heap', 'plan', 'graph', 'profiler', 'lost', 'boundary', 'serving']

async function main(name: string): Promise<void> {
  if (!SUITES.includes(name)) throw new Error(`unknown suite '${name}'; use one of ${SUITES.join(', ')}`)
  // Relative to where the run was started, not to the scratch directory.
  const traceFile = process.env.WGALLOC_FUZZ_TRACE && path.resolve(process.env.WGALLOC_FUZZ_TRACE)
  intoScratch()
  const suite: Suite = require(`./${name}.js`)
  const seed = process.env.WGALLOC_FUZZ_SEED ? Number(process.env.WGALLOC_FUZZ_SEED) : (Date.now() ^ Math.floor(Math.random() * 2 ** 31)) >>> 0
  const scale = Number(process.env.WGALLOC_FUZZ_SCALE ?? 1)
  const timeMs = Number(process.env.WGALLOC_FUZZ_TIME_MS ?? 8000)
  trace.open(traceFile)
  const counts = newCounts()
  const started = Date.now()
  const failures: string[] = []
  /**
   * Checks one property: `runs` scaled, capped at `timeMs`; a failure is recorded, not thrown.
   * fast-check fails a property interrupted before its first run ended; on a loaded machine one
   * sequence can outlast the cap (a device lost with work in flight waits for its teardown), so
   * that first run then goes once more without the cap (the spawner's timeout still catches a hang).
   */
  const check: Harness['check'] = async (label, property, runs) => {
    const numRuns = Math.max(1, Math.round(runs * scale))
    try {
      try {
        await fc.assert(property, { seed, numRuns, plugins: [fc.interruptAfterTimeLimit(timeMs)] })
      } catch (err) {
        if (!(err instanceof Error) || !/interrupted after 0 tests/.test(err.message)) throw err
        problem(counts, `${label}: the first sequence outlasted ${timeMs} ms and ran again without the cap`)
        await fc.assert(property, { seed, numRuns: 1 })
      }
    } catch (err) {
      const { message, cause } = err as { message?: unknown; cause?: { message?: unknown } }
      failures.push(`${label}: ${message}${cause ? `\nGot: ${cause.message ?? cause}` : ''}`)
    }
  }
  await suite.run({ fc, check, counts, trace })
  const summary: Summary = { suite: name, seed, scale, ms: Date.now() - started, counts, failures }
  process.stdout.write(`\nFUZZ-SUMMARY ${JSON.stringify(summary)}\n`)
  process.exitCode = failures.length ? 1 : 0
}

main(process.argv[2]).catch((err: unknown) => {
  process.stderr.write(`fuzz harness error: ${err instanceof Error ? err.stack : undefined}\n`)
  process.exitCode = 2
})
