// Runs one fuzz suite in a child process (see run.ts) and reads back what happened:
// its summary, or, when it died or hung, the signal or exit code, the end of its stderr
// and the last steps it wrote to its trace file.
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import type { Summary } from './run.js'

const RUNNER = path.join(__dirname, 'run.js')
const tail = (text: string, lines: number) => text.split('\n').slice(-lines).join('\n')

/** How a child that printed no summary, or did not exit on its own, ended. */
export interface Crash {
  /** Killed after the timeout. */
  hung: boolean
  code: number | null
  signal: NodeJS.Signals | null
  /** The end of its stderr. */
  stderr: string
  /** The last steps of its trace file. */
  lastSteps: string
}

/** What `runSuite` reads back: a summary and no crash, or a crash (and the summary, if it printed one). */
export type SuiteResult = { summary: Summary; crash: null } | { summary: Summary | null; crash: Crash }

/**
 * Resolves `{ summary, crash }`: `crash` is null when the child exited on its own and
 * printed a summary; otherwise it says how it ended. `env` adds knobs (scale, time cap,
 * seed). The child runs in a scratch directory (profiler exports write files there).
 */
export function runSuite(
  suite: string,
  { env = {}, timeoutMs = 20 * 60_000 }: { env?: Record<string, string>; timeoutMs?: number } = {},
): Promise<SuiteResult> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `wgalloc-fuzz-${suite}-`))
  const traceFile = path.join(dir, 'steps.log')
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--expose-gc', RUNNER, suite], {
      cwd: dir,
      env: { ...process.env, ...env, WGALLOC_FUZZ_TRACE: traceFile },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let out = ''
    let err = ''
    child.stdout.on('data', (d) => {
      out += d
    })
    child.stderr.on('data', (d) => {
      err += d
    })
    let hung = false
    const timer = setTimeout(() => {
      hung = true
      child.kill('SIGKILL')
    }, timeoutMs)
    child.on('close', (code, signal) => {
      clearTimeout(timer)
      const line = out.split('\n').find((l) => l.startsWith('FUZZ-SUMMARY '))
      const summary: Summary | null = line ? JSON.parse(line.slice('FUZZ-SUMMARY '.length)) : null
      let steps = ''
      try {
        steps = tail(fs.readFileSync(traceFile, 'utf8'), 25)
      } catch {}
      fs.rmSync(dir, { recursive: true, force: true })
      // A null code (killed by a signal) compares as 0, as it did in JavaScript.
      if (summary && !hung && signal === null && (code ?? 0) <= 1) resolve({ summary, crash: null })
      else resolve({ summary, crash: { hung, code, signal, stderr: tail(err, 30), lastSteps: steps } })
    })
  })
}
