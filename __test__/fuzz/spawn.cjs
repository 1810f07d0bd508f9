'use strict'
// Runs one fuzz suite in a child process (see run.cjs) and reads back what happened:
// its summary, or, when it died or hung, the signal or exit code, the end of its stderr
// and the last steps it wrote to its trace file.
const { spawn } = require('node:child_process')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')

const RUNNER = path.join(__dirname, 'run.cjs')
const tail = (text, lines) => text.split('\n').slice(-lines).join('\n')

/**
 * Resolves `{ summary, crash }`: `crash` is null when the child exited on its own and
 * printed a summary; otherwise it says how it ended. `env` adds knobs (scale, time cap,
 * seed). The child runs in a scratch directory (profiler exports write files there).
 */
function runSuite(suite, { env = {}, timeoutMs = 20 * 60_000 } = {}) {
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
      const summary = line ? JSON.parse(line.slice('FUZZ-SUMMARY '.length)) : null
      let steps = ''
      try {
        steps = tail(fs.readFileSync(traceFile, 'utf8'), 25)
      } catch {}
      fs.rmSync(dir, { recursive: true, force: true })
      const crash = summary && !hung && signal === null && code <= 1 ? null : { hung, code, signal, stderr: tail(err, 30), lastSteps: steps }
      resolve({ summary, crash })
    })
  })
}

module.exports = { runSuite }
