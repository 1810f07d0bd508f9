// Device loss in the middle of work: a fresh device per run does random heap, host,
// stream, executor and profiler work, some of it left in flight, and is destroyed at a
// random step; the sequence then goes on. Every promise must settle (no waiter left
// hanging), every call must return or fail typed, and once the device is gone every
// call that needs it fails with DEVICE_LOST.
import { type DeviceBlock, type HostBlock, type Stream, WgallocError } from 'wgalloc'
import { KNOWN } from './known.js'
import { type Harness, describe, fault, note, settle } from './outcome.js'
import { GRAPH, openDevice } from './world.js'

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
] as const
type Op = (typeof OPS)[number]
// Calls that need the device: after loss they must fail with DEVICE_LOST.
const NEEDS_DEVICE = new Set<Op>([
  'malloc',
  'hostAlloc',
  'compile',
  'run',
  'read',
  'download',
  'upload',
  'hostMap',
  ...(KNOWN.idleSubmitAfterLoss ? [] : ['sync' as const]),
])

/** Whether a call returned a promise (anything with a `then` method). */
function isPromise(r: unknown): r is Promise<unknown> {
  return (typeof r === 'object' || typeof r === 'function') && r !== null && 'then' in r && typeof r.then === 'function'
}

export async function run({ fc, check, counts, trace }: Harness): Promise<void> {
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
      const S: { blocks: DeviceBlock[]; hosts: HostBlock[]; streams: Stream[] } = {
        blocks: [gpu.heap.malloc(1024)],
        hosts: [gpu.host.alloc(1024)],
        streams: [gpu.createStream()],
      }
      const inFlight: Promise<void>[] = []
      const failures: string[] = []
      let lost = false
      const pick = <T>(list: T[], i: number) => list[i % list.length]
      const judge = (err: unknown, what: string, afterLoss: boolean, waited: boolean) => {
        const kind = note(counts, err)
        // Also true, and may be said instead: a call left running may find its block freed by a
        // later step before it starts.
        const allowed = ['DEVICE_LOST', ...(waited ? [] : ['USE_AFTER_FREE'])]
        if (kind !== 'typed') failures.push(`${what} threw ${describe(err)}`)
        // 'typed' is a WgallocError with a known code.
        else if (afterLoss && WgallocError.is(err) && !allowed.includes(err.code)) failures.push(`${what}: expected DEVICE_LOST, got ${describe(err)}`)
      }
      const calls: Record<Op, (i: number) => unknown> = {
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
          // Symbol.dispose: every Node the package supports has it (engines: ^18.18 || >= 20.4).
          else gpu[Symbol.dispose]()
          lost = true
          fault(counts, 'device destroyed mid-run')
          if (!gpu.lost) failures.push('gpu.lost is false after destroy')
        }
        const what = `${s.op}(${s.i})${lost ? ' after loss' : ''}`
        trace.line(what)
        counts.operations++
        const afterLoss = lost && NEEDS_DEVICE.has(s.op)
        let r: unknown
        try {
          r = calls[s.op](s.i)
        } catch (err) {
          if (!(lost && err instanceof WgallocError && ['USE_AFTER_FREE', 'DOUBLE_FREE', 'INVALID_ARGUMENT'].includes(err.code) && !afterLoss))
            judge(err, what, afterLoss, true)
          else note(counts, err)
          continue
        }
        if (isPromise(r)) {
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
