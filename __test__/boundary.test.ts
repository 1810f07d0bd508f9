// The boundary between JS and the threads that finish async calls: every call owns what
// it needs before it returns, so reused or transferred inputs, terminated workers, frees
// and the GC safety net can neither crash the process nor change a result.
import test from 'ava'
import { Gpu, WgallocError } from 'wgalloc'
import { chain } from './graphs.js'
import { gpu, type NodeResult, pattern, runNode } from './helpers.js'

const { native } = require('../dist/internal/native.js') as { native: { hostViewRegistryLength: () => number } }

const ENTRY = JSON.stringify(require.resolve('..'))
const GRAPHS = JSON.stringify(require.resolve('./graphs.js'))

/** Runs `script` in a child Node (with --expose-gc); stderr keeps its last 20 lines. */
async function child(script: string, { timeoutMs = 60_000, env = {} }: { timeoutMs?: number; env?: Record<string, string> } = {}): Promise<NodeResult> {
  const r = await runNode(['--expose-gc', '-e', script], { env, timeoutMs })
  return { ...r, stderr: r.stderr.split('\n').slice(-20).join('\n') }
}

const LEN = 1 << 18 // f32 elements per tensor (1 MiB)
const BIG = 4_000_000 // 16 MB inputs: copying them takes long enough to race a caller's writes
/** A rejection's code and message, for t.log. */
const why = (e: unknown): unknown[] => (WgallocError.is(e) ? [e.code, e.message] : [e])
const f32 = (buf: ArrayBufferView) => new Float32Array(buf.buffer, buf.byteOffset, buf.byteLength / 4)

/** The chain graph over `len` floats with w = 1 everywhere: y = x + steps. */
async function chainExecutor(g: Gpu, len: number, steps = 4) {
  const w = new Float32Array(len).fill(1)
  return g.compile(chain(steps, { len }), { params: { w: new Uint8Array(w.buffer) } })
}

test('run inputs are copied when run() is called: overwriting them right after changes no result', async (t) => {
  const g = await gpu()
  const exe = await chainExecutor(g, BIG)
  const x = new Float32Array(BIG)
  let wrong = 0
  for (let i = 0; i < 15; i++) {
    x.fill(i)
    const pending = exe.run({ x })
    x.fill(1000 + i) // the caller reuses its buffer at once
    const y = f32((await pending).outputs.y)
    if (y.some((v) => v !== i + 4)) wrong++
  }
  t.is(wrong, 0, `${wrong} of 15 runs computed from bytes written after the call`)
  exe.release()
})

test('an input transferred away and collected right after run() neither crashes nor changes the result', async (t) => {
  const r = await child(`
    const { Gpu } = require(${ENTRY})
    const { chain } = require(${GRAPHS})
    ;(async () => {
      const gpu = await Gpu.request()
      const len = ${BIG}
      const w = new Float32Array(len).fill(1)
      const exe = await gpu.compile(chain(4, { len }), { params: { w: new Uint8Array(w.buffer) } })
      let wrong = 0
      for (let i = 0; i < 20; i++) {
        const x = new Float32Array(len).fill(i)
        const pending = exe.run({ x })
        structuredClone(x.buffer, { transfer: [x.buffer] }) // detached and freed
        global.gc()
        const y = (await pending).outputs.y
        if (y.some((v) => v !== i + 4)) wrong++
      }
      console.log('wrong ' + wrong)
      exe.release()
      gpu.destroy()
    })()`)
  t.is(r.signal, null, `the child died of ${r.signal}:\n${r.stderr}`)
  t.is(r.code, 0, r.stderr)
  t.regex(r.stdout, /wrong 0/)
})

test('terminating workers with run, runEager, compile, read and download in flight never crashes the process', async (t) => {
  const r = await child(
    `
    const { Worker } = require('node:worker_threads')
    const { Gpu } = require(${ENTRY})
    const WORKER = \`
      const { workerData } = require('node:worker_threads')
      const { Gpu } = require(workerData.entry)
      const { chain } = require(workerData.graphs)
      const gpu = Gpu.attach(workerData.handle)
      const len = ${LEN}
      const graph = chain(3, { len })
      const w = new Uint8Array(4 * len)
      const x = new Uint8Array(4 * len)
      ;(async () => {
        const exe = await gpu.compile(graph, { params: { w } })
        const block = gpu.heap.malloc(16 << 20)
        block.write(new Uint8Array(16 << 20).fill(7))
        for (;;) {
          const calls = [exe.run({ x }), gpu.runEager(graph, { x }, { params: { w } }), gpu.compile(graph, { params: { w } }), block.read(), gpu.download(block)]
          await Promise.allSettled(calls)
        }
      })()\`
    ;(async () => {
      const gpu = await Gpu.request()
      const handle = gpu.shareHandle()
      let seed = 7
      const rnd = (n) => ((seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) % n)
      for (let round = 0; round < 12; round++) {
        const workers = Array.from({ length: 2 }, () => new Worker(WORKER, { eval: true, workerData: { handle, entry: ${ENTRY}, graphs: ${GRAPHS} } }))
        await new Promise((r) => setTimeout(r, 150 + rnd(400)))
        await Promise.all(workers.map((w) => w.terminate()))
        global.gc()
      }
      console.log('terminated 24 workers')
      gpu.destroy()
    })()`,
    { timeoutMs: 120_000 },
  )
  t.is(r.signal, null, `the child died of ${r.signal}:\n${r.stderr}`)
  t.is(r.code, 0, r.stderr)
  t.regex(r.stdout, /terminated 24 workers/)
})

test('a read issued on a live block gets its bytes even when free() and a new owner follow at once', async (t) => {
  const g = await gpu()
  const size = 1 << 20
  const failures = { wrong: 0, rejected: 0 }
  for (let i = 0; i < 40; i++) {
    const b = g.heap.malloc(size)
    const mine = pattern(size, i)
    b.write(mine)
    const read = b.read()
    b.free()
    const next = g.heap.malloc(size) // may take the same range once it is reusable
    next.write(pattern(size, i + 100))
    try {
      if (Buffer.compare(await read, Buffer.from(mine)) !== 0) failures.wrong++
    } catch (e) {
      failures.rejected++
      t.log(...why(e))
    }
    next.free()
  }
  t.deepEqual(failures, { wrong: 0, rejected: 0 })
})

test('a download issued on a live block completes with its bytes when free() follows, in many pieces', async (t) => {
  const g = await Gpu.request()
  g.host.configure({ pipelineBytes: 64 << 10 })
  const size = 13 << 20 // above 3 pieces in flight at the default piece size too
  const failures = { wrong: 0, rejected: 0 }
  for (let i = 0; i < 4; i++) {
    const b = g.heap.malloc(size)
    const mine = pattern(size, i)
    b.write(mine)
    const download = g.download(b)
    b.free()
    const next = g.heap.malloc(size)
    next.write(pattern(size, i + 50))
    try {
      if (Buffer.compare(Buffer.from(await download), Buffer.from(mine)) !== 0) failures.wrong++
    } catch (e) {
      failures.rejected++
      t.log(...why(e))
    }
    next.free()
  }
  t.deepEqual(failures, { wrong: 0, rejected: 0 })
  t.is(g.heap.stats().pendingFreeBlocks, 0, 'held blocks were returned once their downloads ended')
  g.destroy()
})

test('readBuffer followed by destroy() still resolves with the bytes', async (t) => {
  const g = await gpu()
  let rejected = 0
  for (let i = 0; i < 20; i++) {
    const buf = g.createBuffer(1 << 16)
    const bytes = pattern(1 << 16, i)
    g.writeBuffer(buf, 0, bytes)
    const read = g.readBuffer(buf, 0, 1 << 16)
    buf.destroy()
    try {
      t.true(Buffer.compare(await read, Buffer.from(bytes)) === 0)
    } catch (e) {
      rejected++
      t.log(...why(e))
    }
  }
  t.is(rejected, 0)
})

test('the GC safety net never frees a block under a pending read', async (t) => {
  if (typeof globalThis.gc !== 'function') return t.fail('run with --expose-gc (package.json ava.nodeArguments)')
  const g = await Gpu.request()
  const reads: Promise<unknown>[] = []
  for (let i = 0; i < 400; i++) {
    ;(() => {
      const b = g.heap.malloc(4096) // never freed by hand: the FinalizationRegistry returns it
      const bytes = pattern(4096, i)
      b.write(bytes)
      reads.push(
        b.read().then(
          (r) => Buffer.compare(r, Buffer.from(bytes)) === 0,
          (e: unknown) => (WgallocError.is(e) ? e.code : e),
        ),
      )
    })()
    if (i % 25 === 0) {
      globalThis.gc!()
      await new Promise(setImmediate)
    }
  }
  const outcomes = await Promise.all(reads)
  t.deepEqual(
    outcomes.filter((o) => o !== true),
    [],
  )
  g.destroy()
})

test('hostBlock.write from a view of its own bytes copies like memmove', async (t) => {
  const g = await gpu()
  const block = g.host.alloc(256, { direction: 'upload' })
  const original = pattern(256, 3)
  block.bytes.set(original)
  block.write(block.bytes.subarray(0, 64), 4)
  const expected = Uint8Array.from(original)
  expected.set(original.subarray(0, 64), 4)
  t.deepEqual(Array.from(block.bytes), Array.from(expected))
  block.write(block.bytes.subarray(8, 72), 0)
  expected.copyWithin(0, 8, 72)
  t.deepEqual(Array.from(block.bytes), Array.from(expected))
  block.free()
})

test('bytes views do not accumulate: one registry entry per host block, pruned as blocks are collected', async (t) => {
  const g = await Gpu.request()
  const before = native.hostViewRegistryLength()
  const block = g.host.alloc(1024, { direction: 'upload' })
  for (let i = 0; i < 300; i++) {
    t.is(block.bytes.length, 1024)
    block.unmap()
    await block.map()
  }
  t.true(native.hostViewRegistryLength() - before <= 1, 'views of one block share one entry')
  block.free()
  for (let i = 0; i < 2000; i++) {
    const b = g.host.alloc(64, { direction: 'upload' })
    b.bytes.fill(1)
    b.free()
    if (i % 200 === 0) {
      globalThis.gc!()
      await new Promise(setImmediate)
    }
  }
  globalThis.gc!()
  await new Promise(setImmediate)
  const after = native.hostViewRegistryLength() - before
  t.true(after <= 600, `${after} registry entries after 2000 short-lived blocks`)
  g.destroy()
})

test('a process whose GPU is still busy exits within a bound after destroy()', async (t) => {
  // 1,000 copies of 128 MiB: tens of seconds of work on lavapipe, seconds on a discrete GPU. The
  // child first times 10 of them, so the bound follows the machine's speed (lavapipe runs on the
  // CPU, and a loaded machine slows the copies and the exit alike).
  const r = await child(
    `
    const { Gpu } = require(${ENTRY})
    ;(async () => {
      const gpu = await Gpu.request()
      const a = gpu.createBuffer(128 << 20)
      const b = gpu.createBuffer(128 << 20)
      const s = gpu.createStream()
      const t0 = Date.now()
      for (let i = 0; i < 10; i++) s.copy(a, b)
      await s.submit().wait()
      console.log('ten ' + (Date.now() - t0))
      for (let i = 0; i < 1000; i++) s.copy(a, b)
      const event = s.submit()
      const ac = new AbortController()
      const waiting = event.wait({ signal: ac.signal }).catch((e) => e.code)
      ac.abort()
      console.log('wait ' + (await waiting))
      gpu.destroy()
      console.log('destroyed ' + Date.now())
    })()`,
    { timeoutMs: 120_000 },
  )
  t.is(r.signal, null, `the child was killed (${r.signal})\n${r.stderr}`)
  t.is(r.code, 0, r.stderr)
  t.regex(r.stdout, /wait ABORTED/)
  const tenMs = Number(/ten (\d+)/.exec(r.stdout)?.[1])
  const destroyed = Number(/destroyed (\d+)/.exec(r.stdout)?.[1])
  const ms = r.endedAt - destroyed
  // Waiting for the work would take about 100 x tenMs; a fifth of that, or 8 s, whichever is more.
  const bound = Math.max(8_000, 20 * tenMs)
  t.log(`exited ${ms} ms after destroy() with the GPU busy; 10 copies took ${tenMs} ms; bound ${bound} ms`)
  t.true(Number.isFinite(tenMs) && ms < bound, `exit took ${ms} ms (bound ${bound} ms)`)
})

/**
 * Keeps the GPU busy for about half a second, then waits 50 ms: the device is polled for that
 * work when destroy() comes, and the poll that ends it is where a destroyed device is freed.
 */
const BUSY = `
  const busy = async (gpu) => {
    const a = gpu.heap.malloc(64 << 20), b = gpu.heap.malloc(64 << 20)
    const s = gpu.createStream()
    for (let i = 0; i < 12; i++) { s.copy(a, b); s.copy(b, a) }
    s.submit()
    await settle()
  }
  const settle = () => new Promise((r) => setTimeout(r, 50))
  const sum = (v) => { let s = 0; for (let i = 0; i < v.length; i += 4096) s += v[i]; return s }`

test('a zero-copy view whose block was collected stays readable after destroy() with work in flight', async (t) => {
  // 64 MiB: the driver gives it memory of its own and unmaps it when freed, so a dangling
  // view faulted the process here.
  const r = await child(`
    const { Gpu } = require(${ENTRY})
    ${BUSY}
    ;(async () => {
      const gpu = await Gpu.request()
      const view = (() => { const b = gpu.host.alloc(64 << 20); const v = b.bytes; v.fill(7); return v })()
      for (let i = 0; i < 5; i++) { global.gc(); await settle() }
      await busy(gpu)
      gpu.destroy()
      for (let i = 0; i < 50; i++) await settle()
      console.log('length ' + view.length + ' sum ' + sum(view))
    })()`)
  t.is(r.signal, null, `the child died of ${r.signal}:\n${r.stderr}`)
  t.is(r.code, 0, r.stderr)
  t.regex(r.stdout, new RegExp(`length ${64 << 20} sum ${7 * (64 << 8)}`))
})

test("destroy() on one thread leaves another thread's zero-copy view readable until that thread frees it", async (t) => {
  const r = await child(`
    const { Worker } = require('node:worker_threads')
    const { Gpu } = require(${ENTRY})
    ${BUSY}
    const WORKER = \`
      const { workerData, parentPort } = require('node:worker_threads')
      const { Gpu } = require(workerData.entry)
      const gpu = Gpu.attach(workerData.handle)
      const block = gpu.host.alloc(64 << 20)
      block.bytes.fill(9)
      parentPort.postMessage('ready')
      parentPort.once('message', () => {
        let s = 0; for (let i = 0; i < block.bytes.length; i += 4096) s += block.bytes[i]
        let code = 'none'
        try { gpu.host.alloc(16) } catch (e) { code = e.code }
        const view = block.bytes
        block.free()
        parentPort.postMessage({ s, code, detached: view.length })
      })\`
    ;(async () => {
      const gpu = await Gpu.request()
      const worker = new Worker(WORKER, { eval: true, workerData: { handle: gpu.shareHandle(), entry: ${ENTRY} } })
      await new Promise((r) => worker.once('message', r))
      await busy(gpu)
      gpu.destroy()
      for (let i = 0; i < 50; i++) await settle()
      worker.postMessage('read')
      const m = await new Promise((r) => worker.once('message', r))
      console.log('sum ' + m.s + ' then ' + m.code + ' detached ' + m.detached)
      await worker.terminate()
    })()`)
  t.is(r.signal, null, `the child died of ${r.signal}:\n${r.stderr}`)
  t.is(r.code, 0, r.stderr)
  t.regex(r.stdout, new RegExp(`sum ${9 * (64 << 8)} then DEVICE_LOST detached 0`))
})
