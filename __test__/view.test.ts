// `wgalloc view` pages in headless Chromium (Debian's `chromium`, driven by
// puppeteer-core): inputs made for real (a heap on the device, a plan of a model
// graph, a profiled run, a trace replayed through the heap), each page loaded
// from file://, drawn, screenshotted, counted and hovered, with no console
// errors and no request but the page itself.
import { type ExecFileException, execFile } from 'node:child_process'
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { pathToFileURL } from 'node:url'
import { inflateSync } from 'node:zlib'
import test, { type ExecutionContext } from 'ava'
import type { Browser, Page } from 'puppeteer-core'
import {
  type DeviceBlock,
  Gpu,
  type Heap,
  type MemoryHistorySnapshot,
  type MemorySnapshot,
  type PlannedRecord,
  type SnapshotSegment,
  type Trace,
  detectKind,
  planMemory,
  readJsonFile,
  recordMemoryHistory,
  renderHtml,
} from 'wgalloc'
import { gpu } from './helpers.js'
import { graph, shapes, weights } from './demo-model.js'

// The few browser globals the page functions below use (they run in Chromium, not in Node;
// the test config has no DOM lib).
declare const document: { body: { dataset: Record<string, string | undefined> } }
declare const window: { wgallocView: { pointOf(id: string): { x: number; y: number } } }
/** The part of a DOM element the page functions below read. */
interface Shown {
  hidden: boolean
  textContent: string
}

/** One event of a profiler trace, as far as these tests read it. */
interface ProfileEvent {
  ph: string
  tid: number
  name: string
}

const CHROMIUM = process.env.CHROMIUM_PATH || '/usr/bin/chromium'
const BENCH = join(__dirname, '../bench/data')
const CLI = resolve(__dirname, '..', 'dist', 'cli.js')
const dir = mkdtempSync(join(tmpdir(), 'wgalloc-view-'))

// Browser tests run one at a time: concurrent screenshots in one headless
// Chromium can stall for minutes.
let browser: Browser | undefined
test.before(async () => {
  if (!existsSync(CHROMIUM)) {
    throw new Error(
      `the viewer tests need headless Chromium and found none at ${CHROMIUM}.\n` +
        'Install it with: apt-get install -y chromium   (Debian/Ubuntu; about a minute)\n' +
        'or point CHROMIUM_PATH at a Chromium or Chrome binary.',
    )
  }
  const { default: puppeteer } = await import('puppeteer-core')
  browser = await puppeteer.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--headless'] })
})
test.after.always(async () => {
  await browser?.close()
  rmSync(dir, { recursive: true, force: true })
})

interface CliResult {
  code: ExecFileException['code']
  stdout: string
  stderr: string
}

function cli(args: string[]): Promise<CliResult> {
  return new Promise((done) => {
    execFile(process.execPath, [CLI, ...args], { cwd: dir }, (err, stdout, stderr) => done({ code: err ? err.code : 0, stdout, stderr }))
  })
}

/** Decodes an 8-bit RGB/RGBA PNG (what Chromium writes) and counts its distinct colours. */
function pngColours(png: Buffer) {
  if (png.subarray(0, 8).toString('hex') !== '89504e470d0a1a0a') throw new Error('not a PNG')
  let pos = 8
  let width!: number
  let height!: number
  let bpp!: number
  const idat: Buffer[] = []
  while (pos < png.length) {
    const len = png.readUInt32BE(pos)
    const type = png.toString('latin1', pos + 4, pos + 8)
    const body = png.subarray(pos + 8, pos + 8 + len)
    if (type === 'IHDR') {
      width = body.readUInt32BE(0)
      height = body.readUInt32BE(4)
      if (body[8] !== 8 || (body[9] !== 2 && body[9] !== 6) || body[12] !== 0) throw new Error('unexpected PNG format')
      bpp = body[9] === 6 ? 4 : 3
    } else if (type === 'IDAT') idat.push(body)
    pos += 12 + len
  }
  const raw = inflateSync(Buffer.concat(idat))
  const stride = width * bpp
  const cur = Buffer.alloc(stride)
  let prev = Buffer.alloc(stride)
  const colours = new Set<number>()
  for (let y = 0; y < height; y++) {
    const f = raw[y * (stride + 1)]
    const row = raw.subarray(y * (stride + 1) + 1, (y + 1) * (stride + 1))
    for (let i = 0; i < stride; i++) {
      const a = i >= bpp ? cur[i - bpp] : 0
      const b = prev[i]
      const c = i >= bpp ? prev[i - bpp] : 0
      const p = a + b - c
      const pred =
        f === 0
          ? 0
          : f === 1
            ? a
            : f === 2
              ? b
              : f === 3
                ? (a + b) >> 1
                : Math.abs(p - a) <= Math.abs(p - b) && Math.abs(p - a) <= Math.abs(p - c)
                  ? a
                  : Math.abs(p - b) <= Math.abs(p - c)
                    ? b
                    : c
      cur[i] = (row[i] + pred) & 0xff
    }
    for (let i = 0; i < stride; i += bpp) colours.add(cur.readUIntBE(i, 3))
    prev = Buffer.from(cur)
  }
  return { width, height, colours: colours.size }
}

/**
 * Writes `html`, opens it from file:// and waits until it is drawn; checks the
 * screenshot and collects console problems and requests. Returns the page and
 * its data- counts.
 */
async function open(t: ExecutionContext, html: string, name: string) {
  const file = join(dir, `${name}.html`)
  writeFileSync(file, html)
  const url = pathToFileURL(file).href
  const page = await browser!.newPage()
  t.teardown(() => page.close())
  await page.setViewport({ width: 1200, height: 850 })
  const problems: string[] = []
  const requests: string[] = []
  page.on('console', (m) => {
    if (m.type() !== 'log' && m.type() !== 'info' && m.type() !== 'debug') problems.push(`${m.type()}: ${m.text()}`)
  })
  page.on('pageerror', (e) => problems.push(`page error: ${(e as Error).message}`))
  page.on('request', (r) => requests.push(r.url()))
  await page.goto(url, { waitUntil: 'load' })
  await page.waitForSelector('body[data-rendered="true"]', { timeout: 10000 })
  const png = Buffer.from(await page.screenshot({ fullPage: true }))
  const shot = pngColours(png)
  t.true(png.length > 20000, `${name}: screenshot only ${png.length} bytes`)
  t.true(shot.width >= 1200 && shot.height >= 850, `${name}: screenshot ${shot.width}x${shot.height}`)
  t.true(shot.colours > 50, `${name}: screenshot has ${shot.colours} colours`)
  writeFileSync(join(dir, `${name}.png`), png)
  const counts = await page.evaluate(() => ({ ...document.body.dataset }))
  const sections = await page.$$eval('section h2', (hs: Shown[]) => hs.map((h) => h.textContent))
  const cards = await page.$$eval('#summary .card', (cs: unknown[]) => cs.length)
  const finish = () => {
    t.deepEqual(problems, [], `${name}: console`)
    t.deepEqual(requests, [url], `${name}: the page made requests`)
  }
  return { page, counts, sections, cards, finish }
}

async function hoverText(page: Page, x: number, y: number): Promise<string> {
  await page.mouse.move(x, y)
  await page.waitForSelector('#tip:not([hidden])', { timeout: 2000 })
  return page.$eval('#tip', (e: Shown) => e.textContent)
}

/** A device of its own: the shared one's heap also holds other tests' slabs. */
async function ownGpu(t: ExecutionContext) {
  const g = await Gpu.request()
  t.teardown(() => g.destroy())
  return g
}

test.serial('heap snapshot of a real heap: pools table and segment map with every block', async (t) => {
  const g = await ownGpu(t)
  const heap = g.heap
  const blocks: DeviceBlock[] = []
  for (let i = 0; i < 60; i++) blocks.push(heap.malloc(4096 + ((i * 7919) % 97) * 3000))
  blocks.push(heap.malloc(3 << 20)) // a large-pool block
  for (let i = 0; i < 60; i += 4) blocks[i].free()
  // A copy recorded on a stream and not yet submitted keeps its freed source pending.
  // (Source and destination in different segments: wgpu refuses a copy within one buffer.)
  const pending = blocks[60]
  const stream = g.createStream()
  stream.copy(pending, blocks[2], { size: 4096 })
  pending.free()
  const snapshot = JSON.parse(JSON.stringify(heap.snapshot())) as SnapshotSegment[]
  await stream.submit().wait()
  t.is(detectKind(snapshot), 'snapshot')
  const used = snapshot.flatMap((s) => s.blocks.filter((b) => b.state !== 'free'))
  t.is(used.length, 46)
  t.deepEqual(
    used.filter((b) => b.state === 'pending-free').map((b) => b.blockId),
    [pending.id],
  )
  const { page, counts, sections, cards, finish } = await open(t, renderHtml(snapshot), 'snapshot')
  t.is(Number(counts.segments), snapshot.length)
  t.is(Number(counts.segmentBlocks), used.length)
  t.deepEqual(sections, ['Memory by pool', `Segment map (${snapshot.length} segments)`])
  t.is(cards, 7)
  const pools = await page.$$eval('section tbody tr', (rows: { cells: Iterable<Shown> }[]) => rows.map((r) => [...r.cells].map((c) => c.textContent)))
  t.deepEqual(pools.map((r) => r[0]).sort(), [...new Set(snapshot.map((s) => s.pool))].sort())
  // Small and large blocks share segments; a segment counts under the pool that created it.
  const home = snapshot.find((s) => s.blocks.some((b) => b.blockId === pending.id))!.pool
  t.is(pools.find((r) => r[0] === home)![4], '3 MiB', 'pending-free bytes of the pending block segment')
  for (const row of pools.filter((r) => r[0] !== home)) t.is(row[4], '0 B', row[0])
  finish()
})

function loadEmbeddingTable(heap: Heap) {
  return heap.malloc(900 << 10)
}

test.serial('memory snapshot with stacks: hovering a block shows where it was allocated', async (t) => {
  const heap = (await ownGpu(t)).heap
  heap.recordHistory()
  const block = loadEmbeddingTable(heap)
  const doc = JSON.parse(JSON.stringify(heap.memorySnapshot())) as MemorySnapshot
  heap.recordHistory(false)
  block.free()
  t.regex(doc.segments.flatMap((s) => s.blocks).find((b) => b.blockId === block.id)!.stack!, /loadEmbeddingTable/)
  const { page, finish } = await open(t, renderHtml(doc), 'stacks')
  // The segment map is the last canvas; the one block fills most of its segment's row.
  const canvases = await page.$$('section canvas')
  const box = (await canvases.at(-1)!.boundingBox())!
  let text: string | null = null
  // The block's place in its segment's row depends on the segment policy: sweep the rows.
  for (let y = box.y + 4; y < box.y + Math.min(box.height, 240) && text === null; y += 6) {
    for (let x = 0.02; x < 1 && text === null; x += 0.04) {
      await page.mouse.move(box.x + box.width * x, y)
      const shown = await page.$eval('#tip', (e: Shown) => (e.hidden ? null : e.textContent))
      if (shown?.includes('allocated at')) text = shown
    }
  }
  t.truthy(text, 'no tooltip with a stack over the segment map')
  t.regex(text ?? '', /allocated at.*loadEmbeddingTable/s)
  t.regex(text ?? '', /view\.test\.[jt]s/)
  finish()
})

test.serial('recorded history: one band per allocation; a click shows the blocks live at that step', async (t) => {
  const heap = (await ownGpu(t)).heap
  const rec = recordMemoryHistory(heap)
  const live: DeviceBlock[] = []
  let allocs = 0
  for (let i = 0; i < 300; i++) {
    const b = heap.malloc(1024 * (1 + ((i * 37) % 200)))
    rec.label(b.id, `tensor${i}`)
    live.push(b)
    allocs++
    if (i % 3 === 2) live.splice((i * 13) % live.length, 1)[0].free()
  }
  const doc = JSON.parse(JSON.stringify(rec.snapshot())) as MemoryHistorySnapshot
  rec.stop()
  for (const b of live) b.free()
  t.is(doc.history.filter((e) => e.action === 'alloc').length, allocs)
  t.true(doc.history.some((e) => e.action === 'segment_alloc'))
  const { page, counts, finish } = await open(t, renderHtml(doc), 'history')
  t.is(counts.timelineMode, 'bands')
  t.is(Number(counts.timelineBlocks), allocs)
  t.true(Number(counts.segments) > 0)

  // Blocks live at a step, from the history itself.
  const liveAt = (step: number) => {
    const open = new Set<number | undefined>()
    let s = 0
    for (const e of doc.history) {
      if (e.action !== 'alloc' && e.action !== 'free') continue
      if (s > step) break
      if (e.action === 'alloc') open.add(e.blockId)
      else open.delete(e.blockId)
      s++
    }
    return open.size
  }
  t.is(Number(counts.segmentBlocks), liveAt(Number(counts.segmentStep)))
  const box = (await (await page.$('section canvas'))!.boundingBox())!
  await page.mouse.click(box.x + box.width * 0.3, box.y + box.height / 2)
  await page.waitForFunction((s: string | undefined) => document.body.dataset.segmentStep !== s, {}, counts.segmentStep)
  const after = await page.evaluate(() => ({ ...document.body.dataset }))
  t.is(Number(after.segmentBlocks), liveAt(Number(after.segmentStep)))
  t.regex(
    await page.$eval('section:nth-of-type(2) h2', (h: Shown) => h.textContent),
    new RegExp(`^Segment map at step ${Number(after.segmentStep).toLocaleString('en-US')}`),
  )
  finish()
})

test.serial('plan of a model graph: one rectangle per buffer; hover names id, size, offset and lifetime', async (t) => {
  const model = join(BENCH, 'models/ppocr-mobile-v2-cls.1x3x48x192.json')
  const input = JSON.parse(readFileSync(model, 'utf8')) as object
  const plan = (await planMemory(input, { strategy: 'greedyBySize' })).toJSON()
  // Sizes and steps are numbers here (decimal strings only past 2^53 - 1).
  const records = plan.records as (PlannedRecord & { size: number; first: number; last: number })[]
  t.is(detectKind(plan), 'plan')
  const { page, counts, sections, finish } = await open(t, renderHtml(plan), 'plan')
  t.is(Number(counts.records), plan.records.length)
  t.deepEqual(sections, ['Offsets by step', 'Live bytes by step'])
  const big = records.reduce((a, b) => (b.size * (b.last - b.first + 1) > a.size * (a.last - a.first + 1) ? b : a))
  const at = await page.evaluate((id: string) => window.wgallocView.pointOf(id), big.id)
  const text = await hoverText(page, at.x, at.y)
  t.true(text.startsWith(big.id), text)
  t.true(text.includes(`${big.size.toLocaleString('en-US')} B`), text)
  t.true(text.includes(`offset${big.offset.toLocaleString('en-US')} B`), text)
  t.true(text.includes(`steps ${big.first} to ${big.last}`), text)
  finish()
})

test.serial('profiler trace of a real run: a track per stream, every slice and counter sample drawn', async (t) => {
  const g = await gpu()
  const s = shapes({ seq: 8, dim: 16, heads: 2 })
  const data = weights(s, 3)
  const exe = await g.compile(graph(s), { params: data.params })
  await g.profiler.profile(async () => {
    await exe.run(data.inputs)
    await g.runEager(graph(s), data.inputs, { params: data.params })
  })
  exe.release()
  const file = join(dir, 'profile.trace.json')
  await g.profiler.exportTrace(file)
  const trace = readJsonFile(file) as { traceEvents: ProfileEvent[] }
  t.is(detectKind(trace), 'profile')
  const ev = trace.traceEvents
  const slices = ev.filter((e) => e.ph === 'X')
  const { page, counts, sections, finish } = await open(t, renderHtml(trace), 'profile')
  t.is(Number(counts.slices), slices.length)
  t.is(Number(counts.tracks), new Set(slices.map((e) => e.tid)).size)
  t.is(Number(counts.counters), new Set(ev.filter((e) => e.ph === 'C').map((e) => e.name)).size)
  t.is(Number(counts.counterSamples), ev.filter((e) => e.ph === 'C').length)
  t.deepEqual(sections, ['Timeline', 'Slices by name'])
  const names = await page.$$eval('section:nth-of-type(2) tbody tr td:first-child', (tds: Shown[]) => tds.map((d) => d.textContent))
  for (const op of ['ln1', 'q_proj', 'softmax']) t.true(names.includes(op), `${op} missing from ${names}`)
  // Zooming in on the left quarter draws fewer slices; a double-click restores all.
  const box = (await (await page.$('section canvas'))!.boundingBox())!
  await page.mouse.move(box.x + 180 + (box.width - 194) * 0.05, box.y + 40)
  for (let i = 0; i < 4; i++) await page.mouse.wheel({ deltaY: -400 })
  await page.waitForFunction((n: number) => Number(document.body.dataset.slices) < n, {}, slices.length)
  await page.mouse.click(box.x + box.width / 2, box.y + 40, { clickCount: 2 })
  await page.waitForFunction((n: number) => Number(document.body.dataset.slices) === n, {}, slices.length)
  finish()
})

test.serial('CLI: `wgalloc view --device` replays an alloc/free trace through the device heap; `replay --snapshot` saves one', async (t) => {
  const mix = join(BENCH, 'traces/ppocr-mobile-v2-cls.mix.trace.json')
  const trace = mix
  const allocs = (readJsonFile(trace) as Trace).events.filter((e) => e.op === 'alloc').length
  const r = await cli(['view', trace, '--device', '-o', 'replayed.html'])
  t.is(r.code, 0, r.stderr)
  t.regex(r.stdout, /wrote replayed\.html \(memory history/)
  const { counts, finish } = await open(t, readFileSync(join(dir, 'replayed.html'), 'utf8'), 'replayed')
  t.is(Number(counts.timelineBlocks), allocs)
  t.true(Number(counts.segments) > 0 && Number(counts.segmentBlocks) > 0)
  finish()

  const saved = await cli(['replay', trace, '--snapshot', 'snap.json'])
  t.is(saved.code, 0, saved.stderr)
  const snap = readJsonFile(join(dir, 'snap.json')) as MemorySnapshot
  t.is(detectKind(snap), 'snapshot')
  t.is(snap.history.filter((e) => e.action === 'alloc').length, allocs)
})

test.serial('CLI: `wgalloc view` replays a trace past its budget on host storage: a page with OOM markers, no device opened', async (t) => {
  // 24 live MiB against a 16 MiB budget: the 17th to 24th allocations cannot fit; once all is
  // freed, 4 more do.
  const MiB = 1 << 20
  const events: Trace['events'] = []
  for (let i = 0; i < 24; i++) events.push({ op: 'alloc', id: `a${i}`, size: MiB - 100 * i })
  for (let i = 0; i < 24; i++) events.push({ op: 'free', id: `a${i}` })
  for (let i = 0; i < 4; i++) events.push({ op: 'alloc', id: `b${i}`, size: MiB })
  const file = join(dir, 'over-budget.trace.json')
  writeFileSync(file, JSON.stringify({ model: 'over-budget', events }))
  const out = join(dir, 'over-budget.html')
  // In this process, so a device opened anywhere on the way would go through this Gpu.request.
  const view = require(join(__dirname, '..', 'dist', 'cli', 'view.js')).default as (argv: string[]) => Promise<number>
  const request = Gpu.request
  let opened = 0
  Gpu.request = (() => {
    opened++
    throw new Error('the viewer opened a device')
  }) as typeof Gpu.request
  let code: number
  try {
    code = await view([file, '--budget', String(16 * MiB), '-o', out])
  } finally {
    Gpu.request = request
  }
  t.is(code, 0)
  t.is(opened, 0, 'no device opened')
  const html = readFileSync(out, 'utf8')
  const data = JSON.parse(/<script type="application\/json" id="wgalloc-data">([\s\S]*?)<\/script>/.exec(html)![1]) as {
    mode: string
    ooms: { t: number; size: number }[]
    blocks: { label: string[] }
    summary: [string, number][]
  }
  t.is(data.mode, 'trace')
  t.deepEqual(
    data.ooms.map((o) => o.t),
    [16, 17, 18, 19, 20, 21, 22, 23],
    'a marker at each allocation past the budget',
  )
  t.deepEqual(
    data.ooms.map((o) => o.size),
    events.slice(16, 24).map((e) => e.size),
  )
  t.is(data.blocks.label.length, 16 + 4, 'the refused allocations are not drawn as blocks')
  const figure = (name: string) => data.summary.find(([n]) => n === name)?.[1]
  t.is(figure('budget'), 16 * MiB)
  t.is(figure('out-of-memory events'), 8)
  t.true((figure('peak live') as number) <= 16 * MiB)
  // The heap's policy on host storage under the same budget refuses at least those.
  t.true((figure('heap policy: refused allocations') as number) >= 8)
  t.true((figure('heap policy: peak reserved') as number) <= 16 * MiB)
  const { counts, finish } = await open(t, html, 'over-budget')
  t.is(Number(counts.oomMarkers), 8)
  t.is(Number(counts.timelineBlocks), 20)
  finish()

  // --device: the device heap, held to the budget; the requests it refuses are markers too.
  const r = await cli(['view', file, '--device', '--budget', String(16 * MiB), '-o', 'over-budget-device.html'])
  t.is(r.code, 0, r.stderr)
  const onDevice = JSON.parse(
    /<script type="application\/json" id="wgalloc-data">([\s\S]*?)<\/script>/.exec(readFileSync(join(dir, 'over-budget-device.html'), 'utf8'))![1],
  ) as typeof data
  t.is(onDevice.mode, 'history')
  t.true(onDevice.ooms.length >= 8, `${onDevice.ooms.length} markers`)
  t.true((onDevice.summary.find(([n]) => n === 'peak reserved')?.[1] as number) <= 16 * MiB)
})

test('bad input: typed errors naming the accepted kinds, the file, or the bad field', async (t) => {
  const e = t.throws(() => detectKind({ hello: 1 }), { code: 'INVALID_ARGUMENT' })
  for (const kind of ['heap snapshot', 'alloc/free trace', 'memory plan', 'profiler trace']) t.true(e.message.includes(kind), e.message)
  t.throws(() => renderHtml(42), { code: 'INVALID_ARGUMENT' })
  const bad = join(dir, 'broken.json')
  writeFileSync(bad, '{"segments": [')
  t.throws(() => readJsonFile(bad), { code: 'PARSE_ERROR', message: new RegExp(`${bad.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} is not valid JSON`) })
  t.throws(() => readJsonFile(join(dir, 'missing.json')), { code: 'IO_ERROR' })
  t.throws(() => renderHtml([{ id: 1, pool: 'device-small', size: 1024, blocks: [{ blockId: 1, offset: 0, size: -5, state: 'active' }] }]), {
    code: 'INVALID_ARGUMENT',
    message: /segments\[0\]\.blocks\[0\]\.size/,
  })
  t.throws(() => renderHtml({ events: [{ op: 'free', id: 'x' }] }), {
    code: 'INVALID_ARGUMENT',
    message: /events\[0\]\.id: expected the id of a live allocation, got 'x'; free of unknown id/,
  })
  t.throws(() => renderHtml({ records: [{ id: 'a', size: 4, first: 3, last: 1, offset: 0 }], slabSize: 4 }), {
    code: 'INVALID_ARGUMENT',
    message: /records\[0\]/,
  })
  t.throws(() => renderHtml({ traceEvents: [{ ph: 'X', ts: 'soon', dur: 1 }] }), { code: 'INVALID_ARGUMENT', message: /traceEvents\[0\]\.ts/ })
  const r = await cli(['view', bad])
  t.is(r.code, 1)
  t.true(r.stderr.includes('[PARSE_ERROR]') && r.stderr.includes('broken.json'), r.stderr)
  const unknown = join(dir, 'unknown.json')
  writeFileSync(unknown, '{"rows": []}')
  const u = await cli(['view', unknown])
  t.is(u.code, 1)
  t.regex(u.stderr, /\[INVALID_ARGUMENT\] json: expected a kind wgalloc view accepts, got an object; cannot tell what this JSON is/)
})

test.serial('page text is escaped: ids cannot inject markup', async (t) => {
  const plan = (
    await planMemory([
      { id: '</script><img src=x onerror=alert(1)>', size: 64, first: 0, last: 2 },
      { id: 'b&c', size: 32, first: 1, last: 3 },
    ])
  ).toJSON()
  const { page, counts, finish } = await open(t, renderHtml(plan, { title: '<b>title</b>' }), 'escaped')
  t.is(Number(counts.records), 2)
  t.is(await page.title(), '<b>title</b>')
  t.is(await page.$$eval('img', (i: unknown[]) => i.length), 0)
  finish()
})
