// The JS / background-thread boundary, attacked as a multi-worker server and a careless
// caller would: async calls raced by free(), inputs overwritten or transferred right after
// a call, forced GCs between steps, worker threads terminated with calls in flight, and a
// child process that must exit within a bound while its GPU is busy. Every read must
// return the bytes the block held when it was issued, and every run the result of the
// input it was given; a crash shows up as the child dying (reliability.test.ts).
import { spawn } from 'node:child_process'
import path from 'node:path'
import { Worker } from 'node:worker_threads'
import type { ExecResult, Graph } from 'wgalloc'
import { type Harness, describe, fault, note, settle } from './outcome.js'
import { COPY_KERNEL, openDevice } from './world.js'

const ENTRY = path.join(__dirname, '..', '..')
const HANG_MS = 20_000
const WORDS = 1 << 16 // u32s per executor tensor: 256 KiB, so copies take long enough to race
const copyGraph = (words: number): Graph => ({
  kernels: { k: { source: COPY_KERNEL } },
  tensors: [
    { id: 'x', size: 4 * words, kind: 'input', dtype: 'u32' },
    { id: 'y', size: 4 * words, kind: 'output', dtype: 'u32' },
  ],
  ops: [{ kernel: 'k', inputs: ['x'], outputs: ['y'], dispatch: [Math.ceil(words / 64)] }],
})
const fill = (n: number, tag: number) => Uint8Array.from({ length: n }, (_, i) => (i * 13 + tag * 7) & 0xff)
const gc = () => globalThis.gc?.()

/** One step on one thread: issue an async call, then race it. */
const RACES = ['none', 'free', 'freeAndReuse', 'gc', 'overwrite', 'transfer']
const CALLS = ['read', 'download', 'readBuffer', 'run', 'runEager']

/**
 * An async call in flight: its promise, the check of what it resolved with, and the cleanup
 * once it settled. `check` is a method, so each call's own result type fits it.
 */
interface Issued {
  p: Promise<unknown>
  check(got: unknown): void
  done(): void
}

async function races({ fc, check, counts, trace }: Harness): Promise<void> {
  let n = 0
  const step = fc.record({ call: fc.constantFrom(...CALLS), race: fc.constantFrom(...RACES), size: fc.integer({ min: 1, max: 1 << 20 }), wait: fc.boolean() })
  const property = fc.asyncProperty(fc.array(step, { minLength: 4, maxLength: 30 }), async (steps) => {
    counts.runs++
    trace.reset(`boundary races run ${++n}`)
    const gpu = await openDevice()
    const executors = [await gpu.compile(copyGraph(WORDS)), await gpu.compile(copyGraph(WORDS))]
    let nextExecutor = 0
    const failures: string[] = []
    const pending: Promise<void>[] = []
    let tag = 0
    const expectBytes = (what: string, got: ArrayBufferView, want: ArrayBufferView) => {
      counts.reads++
      if (Buffer.compare(Buffer.from(got.buffer, got.byteOffset, got.byteLength), Buffer.from(want.buffer, want.byteOffset, want.byteLength)) !== 0) {
        counts.corruptedReads++
        failures.push(`${what}: the result is not the bytes at the call`)
      }
    }
    for (const s of steps) {
      counts.operations++
      const what = `${s.call}(${s.size}) raced by ${s.race}`
      trace.line(what)
      let issued: Issued
      if (s.call === 'read' || s.call === 'download') {
        const block = gpu.heap.malloc(s.size)
        const bytes = fill(s.size, ++tag)
        block.write(bytes)
        const p = s.call === 'read' ? block.read() : gpu.download(block)
        if (s.race === 'free' || s.race === 'freeAndReuse') block.free()
        if (s.race === 'freeAndReuse') {
          const next = gpu.heap.malloc(s.size)
          next.write(fill(s.size, ++tag))
          next.free()
        }
        issued = {
          p,
          check: (got: Buffer) => expectBytes(what, got, bytes),
          done: () => {
            if (!block.freed) block.free()
          },
        }
      } else if (s.call === 'readBuffer') {
        const size = Math.ceil(s.size / 4) * 4
        const buf = gpu.createBuffer(size)
        const bytes = fill(size, ++tag)
        gpu.writeBuffer(buf, 0, bytes)
        const p = gpu.readBuffer(buf, 0, size)
        if (s.race === 'free' || s.race === 'freeAndReuse') buf.destroy()
        issued = { p, check: (got: Buffer) => expectBytes(what, got, bytes), done: () => buf.destroy() }
      } else {
        const x = new Uint32Array(WORDS)
        const base = ++tag * 1000
        for (let i = 0; i < WORDS; i++) x[i] = base + i
        const want = Uint32Array.from(x, (v) => v + 1)
        const exe = executors[nextExecutor++ % executors.length]
        const p = s.call === 'run' ? exe.run({ x }) : gpu.runEager(copyGraph(WORDS), { x })
        if (s.race === 'overwrite') x.fill(7)
        if (s.race === 'transfer') structuredClone(x.buffer, { transfer: [x.buffer] })
        issued = { p, check: (r: ExecResult) => expectBytes(what, r.outputs.y, want), done: () => {} }
      }
      if (s.race === 'gc' || s.race === 'transfer') gc()
      const onInput = s.race === 'overwrite' || s.race === 'transfer'
      const applies = s.race !== 'none' && onInput === (s.call === 'run' || s.call === 'runEager')
      if (applies || s.race === 'gc') {
        const injected: Record<string, string> = {
          free: 'free()',
          freeAndReuse: 'free() and reuse',
          gc: 'forced GC',
          overwrite: 'input overwritten',
          transfer: 'input transferred',
        }
        fault(counts, injected[s.race] + ' racing an async call')
      }
      const settled = settle(issued.p, HANG_MS).then((o) => {
        if (o.hang) {
          counts.hangs++
          failures.push(`${what} never settled`)
        } else if ('error' in o) {
          note(counts, o.error)
          // Nothing may be refused: concurrent runs of one executor queue.
          failures.push(`${what} failed: ${describe(o.error)}`)
        } else {
          issued.check(o.value)
        }
        issued.done()
      })
      if (s.wait) await settled
      else pending.push(settled)
    }
    await Promise.all(pending)
    for (const e of executors) e.release()
    gpu.heap.emptyCache()
    const left = gpu.heap.stats()
    counts.leakedBytes += left.allocatedBytes.current
    if (left.allocatedBytes.current !== 0) failures.push(`${left.allocatedBytes.current} bytes still allocated`)
    gpu.destroy()
    if (failures.length) throw new Error(failures.join('\n'))
  })
  await check('async calls raced by free, reuse, GC and input changes', property, 10)
}

const WORKER = `
const { workerData, parentPort } = require('node:worker_threads')
const { Gpu } = require(workerData.entry)
const gpu = Gpu.attach(workerData.handle)
const words = workerData.words
const graph = workerData.graph
;(async () => {
  const exe = await gpu.compile(graph)
  const block = gpu.heap.malloc(4 << 20)
  block.write(new Uint8Array(4 << 20).fill(3))
  parentPort.postMessage('ready')
  for (let i = 0; ; i++) {
    const x = new Uint32Array(words).fill(i)
    const calls = [exe.run({ x }), gpu.runEager(graph, { x }), block.read(), gpu.download(block), gpu.compile(graph).then((e) => e.release())]
    if (i % 3 === 0) x.fill(0)
    await Promise.allSettled(calls)
  }
})()
`

async function terminations({ fc, check, counts, trace }: Harness): Promise<void> {
  let n = 0
  const property = fc.asyncProperty(fc.array(fc.integer({ min: 0, max: 300 }), { minLength: 1, maxLength: 4 }), async (delays) => {
    counts.runs++
    trace.reset(`boundary terminations run ${++n}`)
    const gpu = await openDevice()
    const handle = gpu.shareHandle()
    const workers = delays.map(() => new Worker(WORKER, { eval: true, workerData: { entry: ENTRY, handle, words: WORDS, graph: copyGraph(WORDS) } }))
    await Promise.all(workers.map((w) => new Promise((resolve) => w.once('message', resolve).once('error', resolve))))
    await Promise.all(
      workers.map(async (w, i) => {
        await new Promise((r) => setTimeout(r, delays[i]))
        trace.line(`terminate worker ${i} after ${delays[i]} ms`)
        counts.operations++
        await w.terminate()
        fault(counts, 'worker terminated with calls in flight')
      }),
    )
    gc()
    // The device still works for this thread, byte for byte.
    const b = gpu.heap.malloc(4096)
    const bytes = fill(4096, n)
    b.write(bytes)
    const back = await b.read()
    counts.reads++
    if (Buffer.compare(back, Buffer.from(bytes)) !== 0) {
      counts.corruptedReads++
      throw new Error('a read after the terminations returned other bytes')
    }
    b.free()
    gpu.destroy()
  })
  await check('worker threads terminated with calls in flight', property, 4)
}

/** A child with its GPU busy for tens of seconds must exit within a bound once it destroys its device. */
async function busyExit({ counts, trace }: Pick<Harness, 'counts' | 'trace'>): Promise<void> {
  trace.reset('boundary busy exit')
  const script = `
    const { Gpu } = require(${JSON.stringify(ENTRY)})
    Gpu.request().then(async (gpu) => {
      const a = gpu.createBuffer(128 << 20), b = gpu.createBuffer(128 << 20)
      const s = gpu.createStream()
      for (let i = 0; i < 1000; i++) s.copy(a, b)
      const ac = new AbortController()
      const waiting = s.submit().wait({ signal: ac.signal }).catch(() => {})
      ac.abort()
      await waiting
      gpu.destroy()
      console.log('destroyed ' + Date.now())
    })`
  counts.runs++
  counts.operations++
  fault(counts, 'process exit with the GPU busy')
  const ended = await new Promise<{ code: number | null; signal: NodeJS.Signals | null; ms: number }>((resolve) => {
    const child = spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'pipe', 'pipe'] })
    let out = ''
    child.stdout.on('data', (d) => {
      out += d
    })
    const timer = setTimeout(() => child.kill('SIGKILL'), 60_000)
    child.on('close', (code, signal) => {
      clearTimeout(timer)
      resolve({ code, signal, ms: Date.now() - Number(/destroyed (\d+)/.exec(out)?.[1]) })
    })
  })
  if (ended.signal || ended.code !== 0 || !(ended.ms < 8_000)) {
    counts.hangs++
    throw new Error(`busy exit: code ${ended.code}, signal ${ended.signal}, ${ended.ms} ms after destroy()`)
  }
}

export async function run(ctx: Harness): Promise<void> {
  await races(ctx)
  await terminations(ctx)
  await ctx.check(
    'a busy process exits within a bound',
    ctx.fc.asyncProperty(ctx.fc.constant(0), () => busyExit(ctx)),
    1,
  )
}
