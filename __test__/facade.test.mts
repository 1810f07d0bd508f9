import test from 'ava'
import { execFileSync } from 'node:child_process'
import { inspect } from 'node:util'
import { fileURLToPath } from 'node:url'
import * as esm from 'wgalloc'
import { createRequire } from 'node:module'

const require = createRequire(import.meta.url)
const cli = fileURLToPath(new URL('../dist/cli.js', import.meta.url))

test('ESM and CommonJS entry points share one set of classes', (t) => {
  const cjs = require('..') as typeof esm
  t.is(esm.Gpu, cjs.Gpu)
  t.is(esm.WgallocError, cjs.WgallocError)
  t.true(esm.ERROR_CODES.includes('DEVICE_LOST'))
  // Every name: the ES module lists them by hand (HeapScope and registerMetrics were missing).
  t.deepEqual(
    Object.keys(esm)
      .filter((k) => k !== 'default')
      .sort(),
    Object.keys(cjs).sort(),
  )
})

test('handles print usefully and dispose releases them', async (t) => {
  const gpu = await esm.Gpu.request()
  t.regex(inspect(gpu), /^Gpu \{ adapter: '.+', backend: '\w+'/)
  const buf = gpu.createBuffer(12)
  t.is(inspect(buf), 'GpuBuffer { size: 12 }')
  buf[Symbol.dispose]()
  t.true(buf.destroyed)
  t.is(inspect(buf), 'GpuBuffer { size: 12, destroyed }')
  const s = gpu.createStream()
  t.is(inspect(s), 'Stream { pendingCommands: 0 }')
  gpu[Symbol.dispose]()
  t.true(gpu.lost)
})

test('`wgalloc info` prints the adapter and budget; --json is machine-readable', (t) => {
  const text = execFileSync(process.execPath, [cli, 'info'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] })
  t.regex(text, /adapter\s+\S+/)
  t.regex(text, /memory budget\s+\S+/)
  const json = JSON.parse(execFileSync(process.execPath, [cli, 'info', '--json'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] })) as {
    maxBufferSize: number
    memoryBudget: { bytes: number }
  }
  t.true(json.maxBufferSize > 0)
  t.true(json.memoryBudget.bytes > 0)
})

test('the CLI reports bad usage with a non-zero exit', (t) => {
  const run = (args: string[]) => {
    try {
      execFileSync(process.execPath, [cli, ...args], { stdio: 'pipe' })
      return 0
    } catch (e) {
      return (e as { status: number | null }).status
    }
  }
  t.is(run(['frobnicate']), 2)
  t.is(run(['info', '--backend', 'quantum']), 1)
  t.is(run(['help']), 0)
})
