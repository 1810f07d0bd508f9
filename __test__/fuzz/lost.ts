'use strict'
// Device loss in the middle of work: a fresh device per run does random heap, host,
// stream, executor and profiler work, some of it left in flight, and is destroyed at a
// random step; the sequence then goes on. Every promise must settle (no waiter left
// hanging), every call must return or fail typed, and once the device is gone every
// call that needs it fails with DEVICE_LOST.
const { WgallocError } = require('../..')
const { describe, settle, note, fault } = require('./outcome.cjs')
const { openDevice, GRAPH } = require('./world.cjs')
const KNOWN = require('./known.cjs')

const HANG_MS = 20_000
const OPS = [
  'malloc',
  'write',
  'read',
  'download',
  'upload',
  'copy',
  'submit',
  'sync',
  'hostAlloc',
  'hostMap',
  'free',
  'hostFree',
  'run',
  'compile',
  'profile',
  'bytes',
]
// Calls that need the device: after loss they must fail with DEVICE_LOST.
const NEEDS_DEVICE = new Set(['malloc', 'hostAlloc', 'compile', 'run', 'read', 'download', 'upload', 'hostMap', ...(KNOWN.idleSubmitAfterLoss ? [] : ['sync'])])

async function run({ fc, check, counts, trace }) {
  let n = 0
  const property = fc.asyncProperty(
    fc.array(fc.record({ op: fc.constantFrom(...OPS), i: fc.nat(99), wait: fc.boolean() }), { minLength: 4, maxLength: 40 }),
    fc.nat(40),
    fc.constantFrom('destroy', 'dispose'),
    async (steps, at, how) => {
      counts.runs++
      trace.reset(`lost run ${++n}`)
      const gpu = await openDevice()
      const exe = await gpu.compile(GRAPH)
      const S = { blocks: [gpu.heap.malloc(1024)], hosts: [gpu.host.alloc(1024)], streams: [gpu.createStream()] }
      const inFlight = []
      const failures = []
      let lost = false
      const pick = (list, i) => list[i % list.length]
      const judge = (err, what, afterLoss, waited) => {
        const kind = note(counts, err)
        // Also true, and may be said instead: a run while another is in flight is busy; a
        // call left running may find its block freed by a later step before it starts.
        const allowed = ['DEVICE_LOST', ...(what.startsWith('run') ? ['EXECUTOR_BUSY'] : []), ...(waited ? [] : ['USE_AFTER_FREE'])]
        if (kind !== 'typed') failures.push(`${what} threw ${describe(err)}`)
        else if (afterLoss && !allowed.includes(err.code)) failures.push(`${what}: expected DEVICE_LOST, got ${describe(err)}`)
      }
      const calls = {
        malloc: () => {
          S.blocks.push(gpu.heap.malloc(256 + 4 * (S.blocks.length % 64)))
        },
        write: (i) => pick(S.blocks, i).write(new Uint8Array(64).fill(i)),
        read: (i) => pick(S.blocks, i).read(0, 64),
        download: (i) => gpu.download(pick(S.blocks, i), { length: 64 }),
        upload: (i) => gpu.upload(pick(S.blocks, i), new Uint8Array(64).fill(i)),
        copy: (i) => pick(S.streams, i).copy(pick(S.blocks, i), pick(S.blocks, i + 1), { size: 64 }),
        submit: (i) => pick(S.streams, i).submit(),
        sync: (i) => pick(S.streams, i).synchronize(),
        hostAlloc: (i) => {
          S.hosts.push(gpu.host.alloc(64 + i, { direction: i % 2 ? 'upload' : 'download' }))
        },
        hostMap: (i) => pick(S.hosts, i).map(),
        free: (i) => {
          if (S.blocks.length > 1) S.blocks.splice(i % S.blocks.length, 1)[0].free()
        },
        hostFree: (i) => {
          if (S.hosts.length > 1) S.hosts.splice(i % S.hosts.length, 1)[0].free()
        },
        run: () => exe.run({ x: new Uint32Array(64) }),
        compile: () => gpu.compile(GRAPH).then((e) => e.release()),
        profile: () => gpu.profiler.profile(() => exe.run({ x: new Uint32Array(64) })),
        bytes: (i) => pick(S.hosts, i).bytes,
      }
      const cut = at % steps.length
      for (const [k, s] of steps.entries()) {
        if (k === cut) {
          trace.line(`${how} the device`)
          if (how === 'destroy') gpu.destroy()
          else gpu[Symbol.dispose ?? Symbol.for('nodejs.dispose')]()
          lost = true
          fault(counts, 'device destroyed mid-run')
          if (!gpu.lost) failures.push('gpu.lost is false after destroy')
        }
        const what = `${s.op}(${s.i})${lost ? ' after loss' : ''}`
        trace.line(what)
        counts.operations++
        const afterLoss = lost && NEEDS_DEVICE.has(s.op)
        let r
        try {
          r = calls[s.op](s.i)
        } catch (err) {
          if (!(lost && err instanceof WgallocError && ['USE_AFTER_FREE', 'DOUBLE_FREE', 'INVALID_ARGUMENT'].includes(err.code) && !afterLoss))
            judge(err, what, afterLoss, true)
          else note(counts, err)
          continue
        }
        if (r && typeof r.then === 'function') {
          const p = settle(r, HANG_MS).then((o) => {
            if (o.hang) {
              counts.hangs++
              failures.push(`${what} never settled (device ${lost ? 'lost' : 'alive'} when it started)`)
            } else if ('error' in o) {
              judge(o.error, what, afterLoss, s.wait)
            } else if (afterLoss) {
              failures.push(`${what} succeeded after the device was lost`)
            }
          })
          if (s.wait) await p
          else inFlight.push(p)
        } else if (afterLoss) {
          failures.push(`${what} succeeded after the device was lost`)
        }
      }
      if (!lost) {
        gpu.destroy()
        fault(counts, 'device destroyed mid-run')
      }
      await Promise.all(inFlight)
      for (const b of S.blocks)
        try {
          b.free()
        } catch {}
      for (const h of S.hosts)
        try {
          h.free()
        } catch {}
      if (failures.length) throw new Error(failures.join('\n'))
    },
  )
  await check('device destroyed mid-sequence', property, 12)
}

module.exports = { run }
