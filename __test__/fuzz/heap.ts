// Model-based fuzzing of the device heap, the host staging cache and streams
// (fast-check commands). The model knows what every block must hold, which calls must
// succeed and which must fail with which code: writes, reads, copies recorded on
// streams and applied at submit, uploads and downloads, frees, double frees, use
// after free, frees and copies across devices, shapes, watermarks, private host pools.
// After every command the heap's active blocks and bytes are exactly the model's;
// after every sequence everything is read back, freed, and usage is back to baseline.
import { mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Arbitrary, AsyncCommand } from 'fast-check'
import { Registry } from 'prom-client'
import type { DeviceBlock, Gpu, HeapScope, HeapStats, HostBlock, HostDirection, HostStats, Stream, WgallocErrorCode } from 'wgalloc'
import { registerMetrics } from 'wgalloc/metrics'
import { copyGraph } from '../graphs.js'
import { KNOWN } from './known.js'
import { type Counts, describe, fault, type Harness, note, problem, settle } from './outcome.js'
import { copy, type Mem, mismatch, pattern, put, shadow, snapshot } from './shadow.js'
import type { Trace } from './trace.js'
import { type DeviceKey, openWorld, restore, type World } from './world.js'

// ---- the model ------------------------------------------------------------------------
/** A live or freed device block and what it must hold. */
interface BlockEntry {
  b: DeviceBlock
  dev: number
  req: number
  size: number
  seg: number
  mem: Mem
}
/** A host staging block and what it must hold. */
interface HostEntry {
  h: HostBlock
  dev: number
  dir: HostDirection
  req: number
  size: number
  mapped: boolean
  mem: Mem
  streams: Set<StreamEntry>
}
/** A recorded transfer, applied to the model when its stream is submitted. */
type PendingOp =
  | { kind: 'copy'; src: BlockEntry; dst: BlockEntry; sOff: number; dOff: number; len: number }
  | { kind: 'upload'; dst: BlockEntry; dOff: number; bytes: Mem }
  | { kind: 'download'; src: BlockEntry; dst: HostEntry; sOff: number; dOff: number; len: number }
interface StreamEntry {
  s: Stream
  pending: PendingOp[]
}
interface DeviceModel {
  gpu: Gpu
  blocks: number
  bytes: number
  streams: StreamEntry[]
  pools: { capturing: number[]; use: Map<number, number> }
  watermarksChanged: boolean
}
/** Hostile surroundings a sequence set up, undone by `finish` (see `unsettle`). */
interface Surroundings {
  /** Removes a throwing listener or logger. */
  listeners: (() => void)[]
  /** The application's Error.prepareStackTrace before a command replaced it (`undefined`: unchanged). */
  hook?: { before: unknown }
  /** Devices recording a memory history. */
  recording: Set<DeviceModel>
  /** Scopes charged for executors and weights dropped without release(): back to 0 once collected. */
  dropped: HeapScope[]
  /** The metrics registry scraped between steps, and the counters of its last scrape. */
  metrics?: { registry: Registry; counters: Map<string, number> }
}
/** The model of one sequence. */
interface State {
  world: World
  counts: Counts
  trace: Trace
  devs: DeviceModel[]
  blocks: BlockEntry[]
  freed: BlockEntry[]
  hosts: HostEntry[]
  hostsFreed: HostEntry[]
  around: Surroundings
}
/** The real system is the devices the model holds: fast-check's `real` is empty. */
type Real = Record<string, never>
/** A block's requested and allocated bytes: what the validity rules read. */
interface Extent {
  req: number
  size: number
}
/** A call's result or what it threw. */
type Result<T> = { ok: true; value: T } | { ok: false; error: unknown }

const HANG_MS = 20_000
const pad4 = (n: number): number => Math.ceil(n / 4) * 4
const pick = <T>(list: readonly T[], i: number): T => list[i % list.length]
/** The `code` of what a call threw (undefined when it has none). */
const codeOf = (err: unknown): unknown => (typeof err === 'object' && err !== null && 'code' in err ? err.code : undefined)

// ---- validity rules, from the README's data-movement rule ------------------------
export const validWrite = (req: number, off: number, len: number): boolean =>
  len >= 1 && off % 4 === 0 && off + len <= req && (len % 4 === 0 || off + len === req)
const validRead = (req: number, off: number, len: number): boolean => len >= 1 && off + len <= req
export const validCopy = (src: Extent, dst: Extent, sOff: number, dOff: number, len: number): boolean =>
  validWrite(dst.req, dOff, len) &&
  sOff % 4 === 0 &&
  sOff + len <= src.req &&
  sOff + pad4(len) <= src.size &&
  !(src === dst && sOff < dOff + pad4(len) && dOff < sOff + pad4(len))

type OffsetKind = 'zero' | 'aligned' | 'unaligned' | 'end' | 'beyond' | 'huge'
type LengthKind = 'rest' | 'words' | 'some' | 'three' | 'zero' | 'tooLong'

/** An offset of kind `k` in a range of `n` bytes (`f` in [0, 1) places it). */
function offsetOf(k: OffsetKind, f: number, n: number): number {
  const aligned = Math.floor((f * n) / 4) * 4
  switch (k) {
    case 'zero':
      return 0
    case 'aligned':
      return aligned
    case 'unaligned':
      return aligned + 1 + Math.floor(f * 3)
    case 'end':
      return n
    case 'beyond':
      return pad4(n) + 4
    default:
      return 2 ** 53 - 4
  }
}
/** A length of kind `k` from `off` in a range of `n` bytes. */
function lengthOf(k: LengthKind, f: number, off: number, n: number): number {
  const rest = Math.max(0, n - off)
  switch (k) {
    case 'rest':
      return rest
    case 'words':
      return Math.max(4, Math.floor((f * rest) / 4) * 4)
    case 'some':
      return 1 + Math.floor(f * Math.max(1, rest))
    case 'three':
      return 3
    case 'zero':
      return 0
    default:
      return rest + 4
  }
}

/** A copy length: mostly one that fits both ranges ('fit'), else any length kind. */
function copyLength(l: { k: LengthKind | 'fit'; f: number }, sOff: number, srcReq: number, dOff: number, dstReq: number): number {
  if (l.k !== 'fit') return lengthOf(l.k, l.f, sOff, srcReq)
  const room = Math.min(srcReq - sOff, dstReq - dOff)
  if (room <= 0) return 4
  const n = Math.max(1, Math.ceil(room * (0.25 + 0.75 * l.f)))
  return n % 4 === 0 || dOff + n === dstReq ? n : Math.max(4, n - (n % 4))
}

// ---- outcomes ---------------------------------------------------------------------
function attempt<T>(fn: () => T): Result<T> {
  try {
    return { ok: true, value: fn() }
  } catch (error) {
    return { ok: false, error }
  }
}
async function attemptAsync<T>(fn: () => T): Promise<Result<Awaited<T>>> {
  let p: T
  try {
    p = fn()
  } catch (error) {
    return { ok: false, error }
  }
  const s = await settle(Promise.resolve(p), HANG_MS)
  if (s.hang) throw new Error(`did not settle within ${HANG_MS} ms`)
  return 'error' in s ? { ok: false, error: s.error } : { ok: true, value: s.value }
}
function ok<T>(S: State, r: Result<T>, what: string): T {
  if (!r.ok) {
    note(S.counts, r.error)
    throw new Error(`${what} failed: ${describe(r.error)}`)
  }
  return r.value
}
function fails(S: State, r: Result<unknown>, code: WgallocErrorCode, what: string): undefined {
  if (r.ok) throw new Error(`${what} succeeded; expected ${code}`)
  const kind = note(S.counts, r.error)
  if (kind !== 'typed' || codeOf(r.error) !== code) throw new Error(`${what}: expected ${code}, got ${describe(r.error)}`)
}
/** The call must succeed iff `valid`; otherwise fail with `code`. */
function judged<T>(S: State, r: Result<T>, valid: boolean, code: WgallocErrorCode, what: string): T | undefined {
  S.counts.badInputs += valid ? 0 : 1
  return valid ? ok(S, r, what) : fails(S, r, code, what)
}

function checkStats(_S: State, dev: DeviceModel, what: string): void {
  const st = dev.gpu.heap.stats()
  if (st.activeBlocks.current !== dev.blocks || st.allocatedBytes.current !== dev.bytes) {
    throw new Error(`${what}: heap says ${st.activeBlocks.current} active blocks / ${st.allocatedBytes.current} bytes, the model ${dev.blocks} / ${dev.bytes}`)
  }
  if (st.reservedBytes.current < st.allocatedBytes.current)
    throw new Error(`${what}: reserved ${st.reservedBytes.current} < allocated ${st.allocatedBytes.current}`)
}
function checkPending(st: StreamEntry, what: string): void {
  const n = st.s.pendingCommands
  if (n !== st.pending.length) throw new Error(`${what}: stream reports ${n} pending commands, the model ${st.pending.length}`)
}
function compare(S: State, mem: Mem, off: number, got: Uint8Array, what: string): void {
  S.counts.reads++
  const at = mismatch(mem, off, got)
  if (at >= 0) {
    S.counts.corruptedReads++
    throw new Error(`${what}: byte ${off + at} is ${got[at]}, expected ${mem.data[off + at]}`)
  }
}

// ---- submission: the model applies a stream's recorded copies when it is submitted ---
function sameSegment(op: PendingOp): boolean {
  return op.kind === 'copy' && op.src.dev === op.dst.dev && op.src.seg === op.dst.seg
}
function apply(op: PendingOp): void {
  if (op.kind === 'copy') copy(op.dst.mem, op.dOff, op.src.mem, op.sOff, op.len)
  else if (op.kind === 'upload') {
    op.dst.mem.data.set(op.bytes.data, op.dOff)
    op.dst.mem.known.set(op.bytes.known, op.dOff)
  } else copy(op.dst.mem, op.dOff, op.src.mem, op.sOff, op.len) // download into a host block
}
async function submit(S: State, st: StreamEntry, how: 'submit' | 'sync'): Promise<void> {
  const doomed = KNOWN.sameSegmentCopy && st.pending.some(sameSegment)
  const r: Result<unknown> = how === 'sync' ? await attemptAsync(() => st.s.synchronize()) : attempt(() => st.s.submit())
  if (doomed) {
    fails(S, r, 'GPU_VALIDATION', `${how} of a stream holding a copy within one segment (known defect)`)
    fault(S.counts, 'known defect: copy within one segment')
  } else {
    ok(S, r, `stream ${how}`)
    for (const op of st.pending) apply(op)
  }
  st.pending = []
  checkPending(st, how)
}

// ---- commands -----------------------------------------------------------------------
type FastCheck = Harness['fc']
const pos = (fc: FastCheck) =>
  fc.record({
    k: fc.constantFrom('zero', 'zero', 'aligned', 'aligned', 'aligned', 'aligned', 'unaligned', 'end', 'beyond', 'huge'),
    f: fc.nat(999).map((x) => x / 1000),
  })
const copyLen = (fc: FastCheck) =>
  fc.oneof({ weight: 4, arbitrary: fc.record({ k: fc.constant('fit'), f: fc.nat(999).map((x) => x / 1000) }) }, { weight: 2, arbitrary: len(fc) })
const len = (fc: FastCheck) =>
  fc.record({ k: fc.constantFrom('rest', 'rest', 'words', 'words', 'some', 'three', 'zero', 'tooLong'), f: fc.nat(999).map((x) => x / 1000) })
const SIZES = [1, 3, 4, 12, 100, 255, 256, 257, 4096, 65536, (1 << 20) - 4, 1 << 20, (1 << 20) + 4, 2 << 20, 3 << 20, (10 << 20) + 12]

class Command<P> implements AsyncCommand<State, Real> {
  constructor(
    readonly name: string,
    readonly p: P,
    readonly checkFn: (S: Readonly<State>) => boolean,
    readonly body: (S: State, p: P) => void | Promise<void>,
  ) {}
  check(S: Readonly<State>): boolean {
    return this.checkFn(S)
  }
  async run(S: State): Promise<void> {
    S.counts.operations++
    S.trace.line(this.toString())
    await this.body(S, this.p)
  }
  toString(): string {
    return `${this.name}(${JSON.stringify(this.p)})`
  }
}

export function commands(fc: FastCheck): Arbitrary<AsyncCommand<State, Real>>[] {
  const c = <P>(name: string, arb: Arbitrary<P>, check: (S: Readonly<State>) => boolean, body: (S: State, p: P) => void | Promise<void>) =>
    arb.map((p): AsyncCommand<State, Real> => new Command(name, p, check, body))
  const any = () => true
  const hasBlocks = (S: Readonly<State>) => S.blocks.length > 0
  const hasFreed = (S: Readonly<State>) => S.freed.length > 0
  const hasHosts = (S: Readonly<State>) => S.hosts.length > 0
  const i = fc.nat(999)

  return [
    // Small blocks share a segment, and copies need blocks in different segments too
    // (other pools: shared usage, large sizes). Most blocks start filled with known bytes.
    c(
      'malloc',
      fc.record({
        dev: fc.constantFrom(0, 0, 0, 1),
        size: fc.oneof({ weight: 5, arbitrary: fc.integer({ min: 1, max: 4096 }) }, { weight: 3, arbitrary: fc.constantFrom(...SIZES) }),
        usage: fc.constantFrom(undefined, 'device', 'shared', 'shared'),
        shape: fc.option(fc.array(fc.nat(64), { maxLength: 3 })),
        fill: fc.option(fc.nat(255), { freq: 4 }),
      }),
      any,
      (S, p) => {
        const dev = S.devs[p.dev]
        const options = p.usage || p.shape ? { usage: p.usage, shape: p.shape ?? undefined } : undefined
        const r = attempt(() => dev.gpu.heap.malloc(p.size, options))
        if (!r.ok && codeOf(r.error) === 'OUT_OF_MEMORY') {
          note(S.counts, r.error)
          fault(S.counts, 'out of memory')
          if (dev.bytes + p.size < 64 << 20 && !dev.watermarksChanged) throw new Error(`malloc(${p.size}) ran out of memory with ${dev.bytes} bytes live`)
          return
        }
        const b = ok(S, r, `malloc(${p.size})`)
        const align = dev.gpu.heap.alignment
        const info = b.info()
        if (b.requestedSize !== p.size || b.size < p.size || b.size % align || b.offset % align || b.freed || info.state !== 'active') {
          throw new Error(`malloc(${p.size}) returned ${JSON.stringify(info)}`)
        }
        const shared = p.usage === 'shared' && dev.gpu.info.features.includes('MAPPABLE_PRIMARY_BUFFERS')
        if (b.isShared !== shared || !b.pool.startsWith(shared ? 'shared' : 'device')) throw new Error(`malloc(${p.size}, ${p.usage}) came from pool ${b.pool}`)
        if (JSON.stringify(b.shape) !== JSON.stringify(p.shape ?? null)) throw new Error(`shape ${JSON.stringify(b.shape)} != ${JSON.stringify(p.shape)}`)
        const e: BlockEntry = { b, dev: p.dev, req: p.size, size: b.size, seg: info.segmentId, mem: shadow(p.size) }
        S.blocks.push(e)
        if (p.fill !== null) {
          const data = pattern(Math.min(p.size, 1 << 20), p.fill)
          ok(
            S,
            attempt(() => b.write(data, 0)),
            'fill a new block',
          )
          put(e.mem, 0, data)
        }
        dev.blocks++
        dev.bytes += b.size
        checkStats(S, dev, 'malloc')
      },
    ),

    c('write', fc.record({ i, off: pos(fc), len: len(fc), seed: fc.nat(255), via: fc.constantFrom('write', 'upload') }), hasBlocks, async (S, p) => {
      const e = pick(S.blocks, p.i)
      const off = offsetOf(p.off.k, p.off.f, e.req)
      const n = lengthOf(p.len.k, p.len.f, off, e.req)
      if (n > 16 << 20) return
      const data = pattern(n, p.seed)
      const r = p.via === 'write' ? attempt(() => e.b.write(data, off)) : await attemptAsync(() => S.devs[e.dev].gpu.upload(e.b, data, { offset: off }))
      const valid = validWrite(e.req, off, n)
      judged(S, r, valid, 'INVALID_ARGUMENT', `${p.via}(${n} bytes at ${off} of ${e.req})`)
      if (valid) put(e.mem, off, data)
    }),

    c('read', fc.record({ i, off: pos(fc), len: len(fc), via: fc.constantFrom('read', 'read', 'download') }), hasBlocks, async (S, p) => {
      const e = pick(S.blocks, p.i)
      const off = offsetOf(p.off.k, p.off.f, e.req)
      const n = lengthOf(p.len.k, p.len.f, off, e.req)
      const r =
        p.via === 'read' ? await attemptAsync(() => e.b.read(off, n)) : await attemptAsync(() => S.devs[e.dev].gpu.download(e.b, { offset: off, length: n }))
      const valid = validRead(e.req, off, n) && (p.via === 'read' || off % 4 === 0)
      const got = judged(S, r, valid, 'INVALID_ARGUMENT', `${p.via}(${n} bytes at ${off} of ${e.req})`)
      if (valid) {
        if (got!.length !== n) throw new Error(`${p.via} returned ${got!.length} bytes, asked ${n}`)
        compare(S, e.mem, off, got!, `${p.via} at ${off}`)
      }
    }),

    c(
      'copy',
      fc.record({
        a: i,
        b: i,
        sOff: pos(fc),
        dOff: pos(fc),
        len: fc.option(copyLen(fc), { freq: 4 }),
        stream: fc.nat(1),
        how: fc.constantFrom('stream', 'stream', 'copyFrom'),
        otherSegment: fc.boolean(),
      }),
      hasBlocks,
      async (S, p) => {
        const src = pick(S.blocks, p.a)
        const peers = S.blocks.filter((x) => x.dev === src.dev)
        const elsewhere = peers.filter((x) => x.seg !== src.seg)
        const dst = pick(p.otherSegment && elsewhere.length ? elsewhere : peers, p.b)
        const dev = S.devs[src.dev]
        if (p.how === 'copyFrom') {
          const n = Math.min(src.req, dst.req)
          const r = attempt(() => dst.b.copyFrom(src.b))
          const valid = validCopy(src, dst, 0, 0, n)
          if (valid && KNOWN.sameSegmentCopy && src.seg === dst.seg) {
            fails(S, r, 'GPU_VALIDATION', 'copyFrom within one segment (known defect)')
            fault(S.counts, 'known defect: copy within one segment')
            return
          }
          const event = judged(S, r, valid, 'INVALID_ARGUMENT', `copyFrom(${src.req} -> ${dst.req})`)
          if (valid) {
            copy(dst.mem, 0, src.mem, 0, n)
            if (p.sOff.f < 0.5) ok(S, await attemptAsync(() => event!.wait()), 'copyFrom event wait')
          }
          return
        }
        const st = dev.streams[p.stream % dev.streams.length]
        const sOff = offsetOf(p.sOff.k, p.sOff.f, src.req)
        const dOff = offsetOf(p.dOff.k, p.dOff.f, dst.req)
        const n = p.len ? copyLength(p.len, sOff, src.req, dOff, dst.req) : Math.max(0, Math.min(src.req - sOff, dst.req - dOff))
        const options = p.len ? { srcOffset: sOff, dstOffset: dOff, size: n } : { srcOffset: sOff, dstOffset: dOff }
        const r = attempt(() => st.s.copy(src.b, dst.b, options))
        const valid = validCopy(src, dst, sOff, dOff, n)
        judged(S, r, valid, 'INVALID_ARGUMENT', `copy(${n} bytes ${sOff} of ${src.req} -> ${dOff} of ${dst.req})`)
        if (valid) st.pending.push({ kind: 'copy', src, dst, sOff, dOff, len: n })
        checkPending(st, 'copy')
      },
    ),

    c('submit', fc.record({ dev: fc.nat(1), stream: fc.nat(1), how: fc.constantFrom('submit', 'sync') }), any, async (S, p) => {
      const dev = S.devs[p.dev]
      await submit(S, dev.streams[p.stream % dev.streams.length], p.how)
    }),

    c('free', fc.record({ i, via: fc.constantFrom('block', 'heap') }), hasBlocks, (S, p) => {
      const at = p.i % S.blocks.length
      const e = S.blocks[at]
      const dev = S.devs[e.dev]
      ok(
        S,
        attempt(() => (p.via === 'block' ? e.b.free() : dev.gpu.heap.free(e.b))),
        `${p.via} free`,
      )
      if (!e.b.freed) throw new Error('block.freed is false after free()')
      S.blocks.splice(at, 1)
      S.freed.push(e)
      dev.blocks--
      dev.bytes -= e.size
      checkStats(S, dev, 'free')
    }),

    c('doubleFree', fc.record({ i, via: fc.constantFrom('block', 'heap', 'dispose') }), hasFreed, (S, p) => {
      const e = pick(S.freed, p.i)
      const dev = S.devs[e.dev]
      if (p.via === 'dispose')
        ok(
          S,
          attempt(() => e.b[Symbol.dispose]()),
          'dispose of a freed block (a no-op)',
        )
      else
        fails(
          S,
          attempt(() => (p.via === 'block' ? e.b.free() : dev.gpu.heap.free(e.b))),
          'DOUBLE_FREE',
          `${p.via} free of a freed block`,
        )
      fault(S.counts, 'double free')
      checkStats(S, dev, 'double free')
    }),

    c(
      'useAfterFree',
      fc.record({
        i,
        other: i,
        op: fc.constantFrom(
          'write',
          'read',
          'setShape',
          'info',
          'shape',
          'recordStream',
          'copySrc',
          'copyDst',
          'copyFromSrc',
          'copyFromDst',
          'upload',
          'download',
          'hostUpload',
          'hostDownload',
        ),
      }),
      hasFreed,
      async (S, p) => {
        const e = pick(S.freed, p.i)
        const dev = S.devs[e.dev]
        const live = S.blocks.filter((x) => x.dev === e.dev)
        const other = live.length ? pick(live, p.other).b : e.b
        const st = dev.streams[0]
        const host = () => dev.gpu.host.alloc(64, { direction: p.op === 'hostUpload' ? 'upload' : 'download' })
        const calls = {
          write: () => e.b.write(new Uint8Array(4)),
          read: () => e.b.read(),
          setShape: () => e.b.setShape([1]),
          info: () => e.b.info(),
          shape: () => e.b.shape,
          recordStream: () => e.b.recordStream(st.s),
          copySrc: () => st.s.copy(e.b, other, { size: 4 }),
          copyDst: () => st.s.copy(other, e.b, { size: 4 }),
          copyFromSrc: () => other.copyFrom(e.b),
          copyFromDst: () => e.b.copyFrom(other),
          upload: () => dev.gpu.upload(e.b, new Uint8Array(4)),
          download: () => dev.gpu.download(e.b),
          hostUpload: () => {
            const h = host()
            try {
              st.s.copy(h, e.b, { size: 4 })
            } finally {
              h.free()
            }
          },
          hostDownload: () => {
            const h = host()
            try {
              st.s.copy(e.b, h, { size: 4 })
            } finally {
              h.free()
            }
          },
        }
        fails(S, await attemptAsync<unknown>(calls[p.op]), 'USE_AFTER_FREE', `${p.op} on a freed block`)
        fault(S.counts, 'use after free')
        checkPending(st, 'use after free')
        checkStats(S, dev, 'use after free')
      },
    ),

    c(
      'crossDevice',
      fc.record({
        a: i,
        b: i,
        op: fc.constantFrom('heapFree', 'copy', 'copyFrom', 'upload', 'download', 'hostUpload', 'hostDownload', 'hostFree', 'recordStream'),
      }),
      (S) => S.blocks.some((x) => x.dev === 0) && S.blocks.some((x) => x.dev === 1),
      async (S, p) => {
        if (p.op === 'recordStream' && KNOWN.crossDeviceRecordStream) return
        const a = pick(
          S.blocks.filter((x) => x.dev === 0),
          p.a,
        )
        const b = pick(
          S.blocks.filter((x) => x.dev === 1),
          p.b,
        )
        const [d0, d1] = S.devs
        const calls = {
          heapFree: () => d1.gpu.heap.free(a.b),
          copy: () => d0.streams[0].s.copy(a.b, b.b, { size: 4 }),
          copyFrom: () => b.b.copyFrom(a.b),
          upload: () => d1.gpu.upload(a.b, new Uint8Array(4)),
          download: () => d1.gpu.download(a.b),
          hostUpload: () => {
            const h = d1.gpu.host.alloc(64)
            try {
              d1.streams[0].s.copy(h, a.b, { size: 4 })
            } finally {
              h.free()
            }
          },
          hostDownload: () => {
            const h = d1.gpu.host.alloc(64, { direction: 'download' })
            try {
              d1.streams[0].s.copy(a.b, h, { size: 4 })
            } finally {
              h.free()
            }
          },
          hostFree: () => {
            const h = d0.gpu.host.alloc(64)
            try {
              d1.gpu.host.free(h)
            } finally {
              h.free()
            }
          },
          recordStream: () => a.b.recordStream(d1.streams[0].s),
        }
        fails(S, await attemptAsync<unknown>(calls[p.op]), 'INVALID_ARGUMENT', `${p.op} across devices`)
        fault(S.counts, 'cross-device use')
        if (a.b.freed) throw new Error('a refused cross-device call freed the block')
        for (const st of [...d0.streams, ...d1.streams]) checkPending(st, 'cross-device call')
        checkStats(S, d0, 'cross-device call')
        checkStats(S, d1, 'cross-device call')
      },
    ),

    c('recordStream', fc.record({ i, stream: fc.nat(1) }), hasBlocks, (S, p) => {
      const e = pick(S.blocks, p.i)
      const dev = S.devs[e.dev]
      ok(
        S,
        attempt(() => e.b.recordStream(dev.streams[p.stream % dev.streams.length].s)),
        'recordStream',
      )
    }),

    c(
      'setShape',
      fc.record({
        i,
        shape: fc.oneof(
          fc.constant(null),
          fc.array(fc.nat(1 << 20), { maxLength: 4 }),
          fc.array(fc.constantFrom(-1, 1.5, NaN, 2 ** 53, Infinity), { minLength: 1, maxLength: 2 }),
        ),
      }),
      hasBlocks,
      (S, p) => {
        const e = pick(S.blocks, p.i)
        const before = JSON.stringify(e.b.shape)
        const valid = p.shape === null || p.shape.every((d) => Number.isSafeInteger(d) && d >= 0)
        judged(
          S,
          attempt(() => e.b.setShape(p.shape)),
          valid,
          'INVALID_ARGUMENT',
          `setShape(${JSON.stringify(p.shape)})`,
        )
        const after = JSON.stringify(e.b.shape)
        if (after !== (valid ? JSON.stringify(p.shape) : before))
          throw new Error(`shape is ${after} after setShape(${JSON.stringify(p.shape)}) (was ${before})`)
      },
    ),

    c(
      'watermark',
      fc.record({ dev: fc.nat(1), which: fc.constantFrom('High', 'Low'), v: fc.constantFrom(0, 0.01, 0.5, 1, 1.4, 1.7, 2, 2.5, -1, NaN, Infinity) }),
      any,
      (S, p) => {
        const h = S.devs[p.dev].gpu.heap
        const before = [h.highWatermarkRatio, h.lowWatermarkRatio]
        const r = attempt(() => h[`set${p.which}WatermarkRatio`](p.v))
        if (!(p.v >= 0 && p.v <= 2)) judged(S, r, false, 'INVALID_ARGUMENT', `set${p.which}WatermarkRatio(${p.v})`)
        else if (!r.ok) note(S.counts, r.error) // e.g. low above high: refused, typed
        if (!r.ok && codeOf(r.error) !== 'INVALID_ARGUMENT') throw new Error(`set${p.which}WatermarkRatio: ${describe(r.error)}`)
        const now = [h.highWatermarkRatio, h.lowWatermarkRatio]
        if (r.ok && (p.which === 'High' ? h.highWatermarkRatio : h.lowWatermarkRatio) !== p.v)
          throw new Error(`set${p.which}WatermarkRatio(${p.v}) left it at ${now}`)
        if (!r.ok && (now[0] !== before[0] || now[1] !== before[1]))
          throw new Error(`a refused set${p.which}WatermarkRatio changed the ratios ${before} -> ${now}`)
        if (r.ok) S.devs[p.dev].watermarksChanged = true
      },
    ),

    c('sweep', fc.record({ dev: fc.nat(1), how: fc.constantFrom('emptyCache', 'freeInactiveBuffers', 'snapshot') }), any, (S, p) => {
      const dev = S.devs[p.dev]
      const h = dev.gpu.heap
      if (p.how !== 'snapshot')
        ok(
          S,
          attempt(() => h[p.how]()),
          p.how,
        )
      checkStats(S, dev, p.how)
      const st = h.stats()
      let active = 0
      let reserved = 0
      for (const seg of h.snapshot()) {
        reserved += seg.size
        let at = 0
        for (const blk of seg.blocks) {
          if (blk.offset !== at || blk.size <= 0) throw new Error(`snapshot: segment ${seg.id} has a range at ${blk.offset} (expected ${at})`)
          at += blk.size
          if (blk.state === 'active') active++
        }
        if (at !== seg.size) throw new Error(`snapshot: segment ${seg.id} ranges end at ${at}, the segment is ${seg.size}`)
      }
      if (active !== st.activeBlocks.current || reserved !== st.reservedBytes.current) {
        throw new Error(`snapshot: ${active} active blocks / ${reserved} bytes reserved; stats say ${st.activeBlocks.current} / ${st.reservedBytes.current}`)
      }
    }),

    // ---- host staging cache ----
    c(
      'hostAlloc',
      fc.record({
        dev: fc.constantFrom(0, 0, 1),
        size: fc.oneof(fc.integer({ min: 1, max: 5000 }), fc.constantFrom(1, 4, 64, 65, 65536, 1 << 20, (1 << 20) + 1)),
        dir: fc.constantFrom(undefined, 'upload', 'download'),
      }),
      any,
      (S, p) => {
        const dev = S.devs[p.dev]
        const h = ok(
          S,
          attempt(() => dev.gpu.host.alloc(p.size, p.dir ? { direction: p.dir } : undefined)),
          `host.alloc(${p.size})`,
        )
        const dir = p.dir ?? 'upload'
        const pool = dev.pools.capturing.at(-1) ?? 0
        if (h.requestedSize !== p.size || h.size < p.size || h.direction !== dir || h.mapped !== (dir === 'upload') || h.poolId !== pool) {
          throw new Error(
            `host.alloc(${p.size}, ${dir}) gave ${h.requestedSize} / ${h.size} / ${h.direction} / mapped ${h.mapped} / pool ${h.poolId} (expected pool ${pool})`,
          )
        }
        if (dir === 'upload' && h.bytes.length !== p.size) throw new Error(`upload block bytes has ${h.bytes.length} bytes`)
        S.hosts.push({ h, dev: p.dev, dir, req: p.size, size: h.size, mapped: dir === 'upload', mem: shadow(p.size), streams: new Set() })
      },
    ),

    c('hostWrite', fc.record({ i, off: pos(fc), len: len(fc), seed: fc.nat(255), via: fc.constantFrom('write', 'bytes') }), hasHosts, (S, p) => {
      const e = pick(S.hosts, p.i)
      if (p.via === 'bytes' && e.dir === 'download') return // a download view is plain memory to write
      const off = offsetOf(p.off.k, p.off.f, e.req)
      const n = Math.min(lengthOf(p.len.k, p.len.f, off, e.req), 1 << 22)
      const data = pattern(n, p.seed)
      const valid = e.dir === 'upload' && e.mapped && off + n <= e.req
      const r = attempt(() => {
        if (p.via === 'write') return e.h.write(data, off)
        const view = e.h.bytes
        if (off + n > view.length) throw new RangeError('offset is out of bounds') // what TypedArray#set does
        view.set(data, off)
      })
      if (p.via === 'bytes' && !valid && !r.ok && r.error instanceof RangeError) return
      judged(S, r, valid, 'INVALID_ARGUMENT', `host ${p.via}(${n} bytes at ${off} of ${e.req}, ${e.dir}, mapped ${e.mapped})`)
      if (valid) put(e.mem, off, data)
    }),

    c('hostRead', fc.record({ i, off: pos(fc), len: len(fc) }), hasHosts, (S, p) => {
      const e = pick(S.hosts, p.i)
      const off = offsetOf(p.off.k, p.off.f, e.req)
      const n = lengthOf(p.len.k, p.len.f, off, e.req)
      const valid = e.dir === 'download' && e.mapped && off + n <= e.req
      const got = judged(
        S,
        attempt(() => e.h.read(off, n)),
        valid,
        'INVALID_ARGUMENT',
        `host read(${n} at ${off} of ${e.req}, ${e.dir}, mapped ${e.mapped})`,
      )
      if (valid) compare(S, e.mem, off, got!, 'host read')
    }),

    c(
      'hostCopy',
      fc.record({ h: i, d: i, sOff: pos(fc), dOff: pos(fc), len: fc.option(copyLen(fc), { freq: 4 }), stream: fc.nat(1) }),
      (S) => S.hosts.length > 0 && S.blocks.length > 0,
      (S, p) => {
        const e = pick(S.hosts, p.h)
        const same = S.blocks.filter((x) => x.dev === e.dev)
        if (!same.length) return
        const d = pick(same, p.d)
        const dev = S.devs[e.dev]
        const st = dev.streams[p.stream % dev.streams.length]
        const up = e.dir === 'upload'
        const [src, dst] = up ? [e, d] : [d, e]
        const sOff = offsetOf(p.sOff.k, p.sOff.f, src.req)
        const dOff = offsetOf(p.dOff.k, p.dOff.f, dst.req)
        const n = p.len ? copyLength(p.len, sOff, src.req, dOff, dst.req) : Math.max(0, Math.min(src.req - sOff, dst.req - dOff))
        const options = p.len ? { srcOffset: sOff, dstOffset: dOff, size: n } : { srcOffset: sOff, dstOffset: dOff }
        // src is the host block exactly when it uploads (the two overloads of copy).
        const r = attempt(() => (up ? st.s.copy(e.h, d.b, options) : st.s.copy(d.b, e.h, options)))
        const valid = validCopy(src, dst, sOff, dOff, n)
        judged(S, r, valid, 'INVALID_ARGUMENT', `host copy ${up ? 'up' : 'down'} (${n} bytes ${sOff} of ${src.req} -> ${dOff} of ${dst.req})`)
        if (valid) {
          st.pending.push(up ? { kind: 'upload', dst: d, dOff, bytes: snapshot(e.mem, sOff, n) } : { kind: 'download', src: d, dst: e, sOff, dOff, len: n })
          e.mapped = false
          e.streams.add(st)
          if (e.h.mapped) throw new Error('a copied host block is still mapped')
        }
        checkPending(st, 'host copy')
      },
    ),

    c('hostMap', fc.record({ i, how: fc.constantFrom('map', 'map', 'unmap', 'recordStream') }), hasHosts, async (S, p) => {
      const e = pick(S.hosts, p.i)
      const dev = S.devs[e.dev]
      if (p.how === 'recordStream') {
        const st = dev.streams[p.i % dev.streams.length]
        ok(
          S,
          attempt(() => e.h.recordStream(st.s)),
          'host recordStream',
        )
        e.streams.add(st)
        return
      }
      if (p.how === 'unmap') {
        ok(
          S,
          attempt(() => e.h.unmap()),
          'host unmap',
        )
        e.mapped = false
        return
      }
      const valid = ![...e.streams].some((st) => st.pending.length > 0)
      judged(S, await attemptAsync(() => e.h.map()), valid, 'INVALID_ARGUMENT', 'host map')
      if (valid) e.mapped = true
      if (e.h.mapped !== e.mapped) throw new Error(`host block mapped is ${e.h.mapped}, the model ${e.mapped}`)
    }),

    c('hostFree', fc.record({ i, via: fc.constantFrom('block', 'host') }), hasHosts, (S, p) => {
      const at = p.i % S.hosts.length
      const e = S.hosts[at]
      ok(
        S,
        attempt(() => (p.via === 'block' ? e.h.free() : S.devs[e.dev].gpu.host.free(e.h))),
        'host free',
      )
      S.hosts.splice(at, 1)
      S.hostsFreed.push(e)
    }),

    c(
      'hostMisuse',
      fc.record({ i, op: fc.constantFrom('free', 'hostFree', 'write', 'read', 'map', 'unmap', 'bytes', 'recordStream', 'copy', 'foreignFree') }),
      (S) => S.hostsFreed.length > 0,
      async (S, p) => {
        const e = pick(S.hostsFreed, p.i)
        const dev = S.devs[e.dev]
        const target = S.blocks.find((x) => x.dev === e.dev)
        if (p.op === 'foreignFree') {
          const live = S.hosts.find((x) => x.dev === 0)
          if (!live) return
          fails(
            S,
            attempt(() => S.devs[1].gpu.host.free(live.h)),
            'INVALID_ARGUMENT',
            'host free on another device',
          )
          fault(S.counts, 'cross-device use')
          if (live.h.freed) throw new Error('a refused foreign free freed the host block')
          return
        }
        const calls = {
          free: () => e.h.free(),
          hostFree: () => dev.gpu.host.free(e.h),
          write: () => e.h.write(new Uint8Array(1)),
          read: () => e.h.read(0, 1),
          map: () => e.h.map(),
          unmap: () => e.h.unmap(),
          bytes: () => e.h.bytes,
          recordStream: () => e.h.recordStream(dev.streams[0].s),
          // The upload block is the source, the download block the destination (the two overloads of copy).
          copy: () =>
            target ? (e.dir === 'upload' ? dev.streams[0].s.copy(e.h, target.b, { size: 4 }) : dev.streams[0].s.copy(target.b, e.h, { size: 4 })) : e.h.unmap(),
        }
        const code = p.op === 'free' || p.op === 'hostFree' ? 'DOUBLE_FREE' : 'USE_AFTER_FREE'
        fails(S, await attemptAsync<unknown>(calls[p.op]), code, `${p.op} on a freed host block`)
        fault(S.counts, code === 'DOUBLE_FREE' ? 'double free' : 'use after free')
        checkPending(dev.streams[0], 'host misuse')
      },
    ),

    c('hostPool', fc.record({ dev: fc.nat(1), op: fc.constantFrom('begin', 'begin', 'end', 'release'), id: fc.nat(3) }), any, (S, p) => {
      const dev = S.devs[p.dev]
      const m = dev.pools
      const host = dev.gpu.host
      const use = m.use.get(p.id) ?? 0
      if (p.op === 'begin') {
        const valid = p.id !== 0 && !m.capturing.includes(p.id)
        judged(
          S,
          attempt(() => host.beginAllocateToPool(p.id)),
          valid,
          'INVALID_ARGUMENT',
          `beginAllocateToPool(${p.id})`,
        )
        if (valid) {
          m.use.set(p.id, use + 1)
          m.capturing.push(p.id)
        }
      } else if (p.op === 'end') {
        const valid = m.capturing.includes(p.id)
        judged(
          S,
          attempt(() => host.endAllocateToPool(p.id)),
          valid,
          'INVALID_ARGUMENT',
          `endAllocateToPool(${p.id})`,
        )
        if (valid) m.capturing.splice(m.capturing.indexOf(p.id), 1)
      } else {
        const valid = use > 0
        judged(
          S,
          attempt(() => host.releasePool(p.id)),
          valid,
          'INVALID_ARGUMENT',
          `releasePool(${p.id})`,
        )
        if (valid) m.use.set(p.id, use - 1)
      }
      const reported = new Map(host.privatePools.map((x) => [x.id, x.useCount]))
      for (const [id, n] of m.use) {
        if (n > 0 && reported.get(id) !== n) throw new Error(`privatePools says pool ${id} has ${reported.get(id)} holds, the model ${n}`)
      }
    }),

    // ---- hostile surroundings: what the application around the heap may do ----
    // A listener or logger that throws: calls return as if nobody listened (the model is unchanged).
    c(
      'throwingListener',
      fc.record({ dev: fc.nat(1), kind: fc.constantFrom('ALLOCATED', 'RECYCLED', 'FREED', 'RELEASED', 'OUT_OF_MEMORY', 'logger') }),
      any,
      (S, p) => {
        const heap = S.devs[p.dev].gpu.heap
        const boom = () => {
          throw new Error('listener failed')
        }
        if (p.kind === 'logger') {
          heap.setLogger(boom)
          S.around.listeners.push(() => heap.setLogger(null))
        } else S.around.listeners.push(heap.on(p.kind as 'ALLOCATED', boom))
        fault(S.counts, 'heap listener that throws')
      },
    ),

    // The application's Error.prepareStackTrace returns call sites; the history's stacks stay text.
    c('stackHook', fc.record({ dev: fc.nat(1), hook: fc.constantFrom('sites', 'throws', 'number') }), any, (S, p) => {
      const errorClass = Error as { prepareStackTrace?: unknown }
      S.around.hook ??= { before: errorClass.prepareStackTrace }
      errorClass.prepareStackTrace =
        p.hook === 'sites'
          ? (_e: Error, sites: unknown[]) => sites
          : p.hook === 'number'
            ? () => 42
            : () => {
                throw new Error('hook failed')
              }
      const dev = S.devs[p.dev]
      if (!S.around.recording.has(dev)) {
        dev.gpu.heap.recordHistory({ maxEntries: 64 })
        S.around.recording.add(dev)
      }
      const snap = ok(
        S,
        attempt(() => dev.gpu.heap.memorySnapshot()),
        'memorySnapshot under a custom prepareStackTrace',
      )
      const report = ok(
        S,
        attempt(() => dev.gpu.heap.leakReport()),
        'leakReport under a custom prepareStackTrace',
      )
      for (const e of snap.history) if (e.stack !== undefined && typeof e.stack !== 'string') throw new Error(`a history stack is ${typeof e.stack}`)
      for (const g of report.groups) if (typeof g.stack !== 'string') throw new Error(`a leak group's stack is ${typeof g.stack}`)
      fault(S.counts, 'custom Error.prepareStackTrace')
    }),

    // An OOM snapshot into a folder where links wait at the names a report would take.
    c('oomReport', fc.record({ dev: fc.nat(1), links: fc.integer({ min: 1, max: 20 }) }), any, (S, p) => {
      const dir = mkdtempSync(join(tmpdir(), 'wgalloc-fuzz-oom-'))
      const victim = join(dir, 'victim.txt')
      writeFileSync(victim, 'keep')
      for (let n = 1; n <= p.links; n++) symlinkSync(victim, join(dir, `wgalloc-oom-${process.pid}-${n}.json`))
      const dev = S.devs[p.dev]
      // With the watermark off, the driver would decide, and a granted gigabyte would starve the
      // other device (lavapipe's one heap is shared).
      if (dev.gpu.heap.highWatermarkRatio === 0) return
      process.env.WGALLOC_OOM_SNAPSHOT = dir
      // A segment cached from a request made while the watermark was off could serve this one.
      dev.gpu.heap.emptyCache()
      try {
        const r = attempt(() => dev.gpu.heap.malloc(dev.gpu.memoryBudget.bytes * 4))
        if (r.ok) {
          r.value.free()
          dev.gpu.heap.emptyCache()
          throw new Error(
            `a malloc of 4 x the budget succeeded (high watermark ratio ${dev.gpu.heap.highWatermarkRatio}, budget ${dev.gpu.memoryBudget.bytes})`,
          )
        }
        note(S.counts, r.error)
        if (codeOf(r.error) !== 'OUT_OF_MEMORY' && codeOf(r.error) !== 'INVALID_ARGUMENT') throw new Error(`malloc past the budget: ${describe(r.error)}`)
      } finally {
        delete process.env.WGALLOC_OOM_SNAPSHOT
      }
      const kept = readFileSync(victim, 'utf8')
      rmSync(dir, { recursive: true, force: true })
      if (kept !== 'keep') throw new Error('an OOM snapshot followed a planted link')
      fault(S.counts, 'report into a folder of planted links')
      checkStats(S, dev, 'oomReport')
    }),

    // A Prometheus scrape between steps: no series twice, no counter going down, and two
    // scrapes with nothing between agree on every counter.
    c('scrape', fc.constant(null), any, async (S) => {
      if (!S.around.metrics) {
        const registry = new Registry()
        registerMetrics({ a: S.devs[0].gpu, b: S.devs[1].gpu }, { registry })
        S.around.metrics = { registry, counters: new Map() }
      }
      const m = S.around.metrics
      const first = counterSamples(await m.registry.metrics())
      const again = counterSamples(await m.registry.metrics())
      for (const [series, v] of first) {
        if (again.get(series) !== v) throw new Error(`metrics: ${series} went ${v} -> ${again.get(series)} with no work between`)
        const last = m.counters.get(series)
        if (last !== undefined && v < last) throw new Error(`metrics: counter ${series} went down ${last} -> ${v}`)
      }
      m.counters = first
      fault(S.counts, 'metrics scraped between steps')
    }),

    // Executors and weights charged to a scope and dropped without release(): the charge comes
    // back when the garbage collector takes them (`finish` waits for it).
    c('dropCharged', fc.record({ what: fc.constantFrom('executor', 'weights'), size: fc.constantFrom(256, 4096, 65536) }), any, async (S, p) => {
      const gpu = S.devs[0].gpu
      const scope = gpu.heap.scope({ name: `dropped-${S.around.dropped.length}-${Date.now()}`, limit: 64 << 20 })
      if (p.what === 'weights')
        ok(
          S,
          attempt(() => void gpu.createWeights({ w: new Uint8Array(p.size) }, { scope })),
          'createWeights',
        )
      else ok(S, await attemptAsync(async () => void (await gpu.compile(copyGraph(p.size), { scope }))), 'compile')
      if (scope.stats().allocatedBytes === 0) throw new Error(`a scoped ${p.what} charged nothing`)
      S.around.dropped.push(scope)
      fault(S.counts, 'executors and weights dropped without release() under a scope')
      // Collected now: the heap holds its blocks until then, and the model knows only its own.
      await collectDropped(S)
    }),
  ]
}

const NAMES = [
  'malloc',
  'write',
  'read',
  'copy',
  'submit',
  'free',
  'doubleFree',
  'useAfterFree',
  'crossDevice',
  'recordStream',
  'setShape',
  'watermark',
  'sweep',
  'hostAlloc',
  'hostWrite',
  'hostRead',
  'hostCopy',
  'hostMap',
  'hostFree',
  'hostMisuse',
  'hostPool',
  'throwingListener',
  'stackHook',
  'oomReport',
  'scrape',
  'dropCharged',
]

/** Counter samples of exposition text, by series; a series twice in one scrape throws. */
function counterSamples(text: string): Map<string, number> {
  const counters = new Set<string>()
  const out = new Map<string, number>()
  const seen = new Set<string>()
  for (const line of text.split('\n')) {
    const type = /^# TYPE (\S+) counter$/.exec(line)
    if (type) counters.add(type[1])
    if (line === '' || line.startsWith('#')) continue
    const at = line.lastIndexOf(' ')
    const series = line.slice(0, at)
    if (seen.has(series)) throw new Error(`metrics: series ${series} appears twice in one scrape`)
    seen.add(series)
    const name = series.replace(/\{.*$/, '')
    if (counters.has(name)) out.set(series, Number(line.slice(at + 1)))
  }
  return out
}

/** Undoes the surroundings a sequence set up; charges of dropped objects must come back once collected. */
async function unsettle(S: State): Promise<void> {
  const a = S.around
  for (const off of a.listeners.splice(0)) off()
  if (a.hook) (Error as { prepareStackTrace?: unknown }).prepareStackTrace = a.hook.before
  a.hook = undefined
  for (const dev of a.recording) dev.gpu.heap.recordHistory(false)
  a.recording.clear()
  await collectDropped(S)
}

/** Collects garbage until the dropped objects' charges and heap blocks are gone; throws if they stay. */
async function collectDropped(S: State): Promise<void> {
  const a = S.around
  const charged = () => a.dropped.reduce((n, scope) => n + scope.stats().allocatedBytes, 0)
  // The native objects' drops free their blocks, possibly after the charge came back.
  const dropping = () => S.devs.some((dev) => dev.gpu.heap.stats().activeBlocks.current !== dev.blocks)
  for (let t = 0; t < 300 && (charged() > 0 || (a.dropped.length > 0 && dropping())); t++) {
    global.gc?.()
    await new Promise((r) => setTimeout(r, 10))
  }
  const left = charged()
  for (const scope of a.dropped.splice(0)) scope.dispose()
  if (left > 0) {
    S.counts.leakedBytes += left
    throw new Error(`scopes still charged ${left} bytes for executors and weights collected without release()`)
  }
}

// ---- one sequence ---------------------------------------------------------------------
function start(world: World, counts: Counts, trace: Trace): State {
  const devs = [world.gpu, world.gpu2].map((gpu, k): DeviceModel => {
    const base = world.baseline[k === 0 ? 'gpu' : 'gpu2']
    return { gpu, blocks: base.blocks, bytes: base.bytes, streams: [], pools: { capturing: [], use: new Map() }, watermarksChanged: false }
  })
  devs[0].streams = [0, 1].map(() => ({ s: world.gpu.createStream(), pending: [] }))
  devs[1].streams = [{ s: world.gpu2.createStream(), pending: [] }]
  return { world, counts, trace, devs, blocks: [], freed: [], hosts: [], hostsFreed: [], around: { listeners: [], recording: new Set(), dropped: [] } }
}

/** Submits what is left, reads every live block back, frees everything, checks usage. */
async function finish(S: State, defaults: ((gpu: Gpu) => void)[]): Promise<void> {
  await unsettle(S)
  for (const dev of S.devs) for (const st of dev.streams) await submit(S, st, 'sync')
  for (const e of S.blocks) {
    const n = Math.min(e.req, 1 << 20)
    compare(S, e.mem, 0, ok(S, await attemptAsync(() => e.b.read(0, n)), 'final read'), 'final read')
  }
  for (const e of S.hosts) {
    if (e.dir === 'download') {
      ok(S, await attemptAsync(() => e.h.map()), 'final map')
      compare(
        S,
        e.mem,
        0,
        ok(
          S,
          attempt(() => e.h.read(0, e.req)),
          'final host read',
        ),
        'final host read',
      )
    }
    ok(
      S,
      attempt(() => e.h.free()),
      'final host free',
    )
  }
  for (const e of S.blocks) {
    ok(
      S,
      attempt(() => e.b.free()),
      'final free',
    )
    S.devs[e.dev].blocks--
    S.devs[e.dev].bytes -= e.size
  }
  const problems: string[] = []
  for (const [k, dev] of S.devs.entries()) {
    for (const st of dev.streams) await st.s.synchronize()
    const base = S.world.baseline[k === 0 ? 'gpu' : 'gpu2']
    const { gpu } = dev
    defaults[k](gpu)
    let h!: HeapStats
    let s!: HostStats
    for (let t = 0; t < 200; t++) {
      gpu.heap.freeInactiveBuffers()
      gpu.host.processEvents()
      h = gpu.heap.stats()
      s = gpu.host.stats()
      if (!h.pendingFreeBlocks && !s.pendingBlocks) break
      await new Promise((r) => setTimeout(r, 2))
    }
    const leak = {
      blocks: h.activeBlocks.current - base.blocks,
      bytes: h.allocatedBytes.current - base.bytes,
      pendingFree: h.pendingFreeBlocks,
      hostRequests: s.activeRequests.current - base.hostRequests,
      hostBytes: s.activeBytes.current - base.hostBytes,
      hostPending: s.pendingBlocks,
    }
    S.counts.leakedBytes += Math.max(0, leak.bytes) + Math.max(0, leak.hostBytes)
    S.counts.leakedBlocks += Math.max(0, leak.blocks) + Math.max(0, leak.hostRequests)
    if (Object.values(leak).some((v) => v !== 0)) problems.push(`device ${k} after freeing everything: ${JSON.stringify(leak)}`)
    if (gpu.lost) problems.push(`device ${k} was lost`)
  }
  if (problems.length) throw new Error(problems.join('; '))
}

export async function run({ fc, check, counts, trace }: Harness): Promise<void> {
  const world = await openWorld()
  const restoreDefaults = (w: World, key: DeviceKey) => (gpu: Gpu) => restore(gpu, w[`${key}Defaults`])
  let n = 0
  // Weights: allocation, data movement and submission carry the state the others probe.
  const all = commands(fc)
  const weight: Record<string, number> = { malloc: 4, write: 3, read: 3, copy: 4, submit: 2, hostAlloc: 2, hostCopy: 3, hostMap: 2 }
  const weighted = all.flatMap((arb, k) => Array<typeof arb>(weight[NAMES[k]] ?? 1).fill(arb))
  const property = fc.asyncProperty(fc.commands(weighted, { maxCommands: 80, size: 'max' }), async (cmds) => {
    counts.runs++
    trace.reset(`heap run ${++n}`)
    const S = start(world, counts, trace)
    try {
      await fc.asyncModelRun(() => ({ model: S, real: {} }), cmds)
      await finish(S, [restoreDefaults(world, 'gpu'), restoreDefaults(world, 'gpu2')])
    } catch (err) {
      if (err instanceof Error && /corrupt|expected \d+$/.test(err.message)) problem(counts, err.message)
      // Leave the devices clean for the next run (and the shrinker's replays).
      await unsettle(S).catch(() => {})
      for (const e of S.blocks)
        try {
          e.b.free()
        } catch {}
      for (const e of S.hosts)
        try {
          e.h.free()
        } catch {}
      for (const dev of S.devs)
        for (const st of dev.streams)
          try {
            await st.s.synchronize()
          } catch {}
      for (const k of ['gpu', 'gpu2'] as const) restoreDefaults(world, k)(world[k])
      throw err
    }
  })
  await check('heap / host / stream model', property, 60)
}
