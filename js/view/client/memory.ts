// Memory page: active-memory timeline (one band per allocation, stacked in
// allocation order, as PyTorch's memory viewer draws it) and the segment map
// (each segment with its blocks at their offsets) at a chosen step. A classic
// script inlined after common.ts (see there); the data comes from js/view/memory.ts.

/** The memory page's data (js/view/memory.ts): a snapshot, a recorded history or a trace. */
interface MemoryData {
  kind: 'memory'
  title: string
  subtitle: string
  /** 'snapshot': one moment (steps 1, pool table); 'history': replayed or recorded; 'trace': no segments or offsets. */
  mode: 'snapshot' | 'history' | 'trace'
  /** Allocator steps (one alloc or free each). */
  steps: number
  pools: string[]
  blocks: MemoryBlocks
  /** JS stacks of mallocs, indexed by `blocks.stack`. */
  stacks: string[]
  segments: MemorySegment[]
  /** Failed allocations, at step `t`. */
  ooms: { t: number; size: number; pool: string }[]
  /** Snapshot mode only. */
  byPool?: PoolRow[]
  /** History and trace modes: the step of the peak active bytes. */
  peakStep?: number
  summary: SummaryRow[]
}
/** One column per field, one row per block (live over steps [start, end)). */
interface MemoryBlocks {
  label: string[]
  size: number[]
  start: number[]
  end: number[]
  /** Index into `segments`, -1 without one. */
  seg: number[]
  /** Offset in the segment, -1 when unknown. */
  off: number[]
  /** Index into `pools`. */
  pool: number[]
  /** 0: active, 1: pending free. */
  state: number[]
  /** Index into `stacks`, -1 without one (absent in older pages). */
  stack?: number[]
}
/** A segment (one wgpu::Buffer), live over steps [start, end). */
interface MemorySegment {
  id: number
  /** Index into `pools`. */
  pool: number
  size: number
  dedicated: boolean
  start: number
  end: number
}
/** What one pool holds in a snapshot. */
interface PoolRow {
  name: string
  segments: number
  reserved: number
  active: number
  pending: number
  free: number
  largestFree: number
}

;(() => {
  const D = V.data as MemoryData
  const B = D.blocks
  const n = B.size.length
  const segs = D.segments
  const MAX_RECTS = 1 << 19 // beyond this many band rectangles the timeline is drawn per pixel column
  const blockColour = B.label.map((l) => V.colour(l))
  const counts: Counts = {}
  V.cards(D.summary)

  const blockRows = (k: number, step?: number | null) => {
    const rows: TipRow[] = [['size', V.bytesLong(B.size[k])]]
    if (D.mode !== 'trace') rows.push(['pool', D.pools[B.pool[k]]])
    if (B.seg[k] >= 0) rows.push(['segment', `#${segs[B.seg[k]].id}`], ['offset', B.off[k] >= 0 ? V.bytesLong(B.off[k]) : 'unknown'])
    if (D.mode !== 'snapshot') rows.push(['lifetime', `steps ${V.int(B.start[k])} to ${V.int(B.end[k])} (${V.int(B.end[k] - B.start[k])} steps)`])
    if (B.state[k] === 1) rows.push(['state', 'pending free (GPU work outstanding)'])
    if (step != null) rows.push(['at step', V.int(step)])
    // The JS stack of the block's malloc (heap.recordHistory with stacks), first frames.
    const stack = B.stack && B.stack[k] >= 0 ? D.stacks[B.stack[k]] : null
    if (stack) rows.push(['allocated at', stack.split('\n').slice(0, 6).join('\n')])
    return rows
  }

  // Allocation order, and free order: a sweep through both gives the live stack at any step.
  const byStart = Array.from({ length: n }, (_, i) => i).sort((a, b) => B.start[a] - B.start[b] || a - b)
  const byEnd = Array.from({ length: n }, (_, i) => i).sort((a, b) => B.end[a] - B.end[b] || a - b)
  /** Live blocks in allocation order; `advance(s)` applies every event up to step s (frees first at a step). */
  function sweeper(onFree?: (k: number, i: number, t: number) => boolean | undefined, onAlloc?: (k: number) => void) {
    let ai = 0
    let fi = 0
    const stack: number[] = []
    return {
      stack,
      advance(s: number) {
        for (;;) {
          const nf = fi < n ? B.end[byEnd[fi]] : Infinity
          const na = ai < n ? B.start[byStart[ai]] : Infinity
          if (fi >= n && ai >= n) return true
          if (nf <= na) {
            if (nf > s) return true
            const k = byEnd[fi++]
            const i = stack.lastIndexOf(k)
            if (onFree && onFree(k, i, nf) === false) return false
            stack.splice(i, 1)
          } else {
            if (na > s) return true
            const k = byStart[ai++]
            if (onAlloc) onAlloc(k)
            stack.push(k)
          }
        }
      },
    }
  }

  /**
   * Exact layout: every band as rectangles [t0, t1) x [base, base + size), one more
   * each time a lower block is freed. Null when that exceeds MAX_RECTS.
   */
  function bandLayout() {
    let cap = 1024
    let rb = new Int32Array(cap)
    let rt = new Float64Array(cap * 3) // t0, t1, base
    let count = 0
    const emit = (b: number, t0: number, t1: number, base: number) => {
      if (t1 <= t0) return true
      if (count === cap) {
        if (cap >= MAX_RECTS) return false
        cap *= 2
        const nb = new Int32Array(cap)
        nb.set(rb)
        rb = nb
        const nt = new Float64Array(cap * 3)
        nt.set(rt)
        rt = nt
      }
      rb[count] = b
      rt[count * 3] = t0
      rt[count * 3 + 1] = t1
      rt[count * 3 + 2] = base
      count++
      return true
    }
    const base = new Float64Array(n)
    const since = new Float64Array(n)
    let total = 0
    let peak = 0
    const sw = sweeper(
      (k, i, t) => {
        const stack = sw.stack
        if (!emit(k, since[k], t, base[k])) return false
        for (let j = i + 1; j < stack.length; j++) {
          const b = stack[j]
          if (!emit(b, since[b], t, base[b])) return false
          base[b] -= B.size[k]
          since[b] = t
        }
        total -= B.size[k]
      },
      (k) => {
        base[k] = total
        since[k] = B.start[k]
        total += B.size[k]
        peak = Math.max(peak, total)
      },
    )
    if (!sw.advance(Infinity)) return null
    return { rb, rt, count, peak }
  }

  /** Total bytes at every step (hover figures, and the peak each pixel column samples). */
  function totals() {
    const delta = new Float64Array(D.steps + 1)
    for (let k = 0; k < n; k++) {
      delta[B.start[k]] += B.size[k]
      delta[B.end[k]] -= B.size[k]
    }
    const out = new Float64Array(D.steps)
    let cur = 0
    for (let t = 0; t < D.steps; t++) out[t] = cur += delta[t]
    return out
  }
  function reservedSteps() {
    const delta = new Float64Array(D.steps + 1)
    for (const s of segs) {
      delta[s.start] += s.size
      delta[s.end] -= s.size
    }
    const out = new Float64Array(D.steps)
    let cur = 0
    for (let t = 0; t < D.steps; t++) out[t] = cur += delta[t]
    return out
  }

  let selectStep = (_step: number) => {}

  function timeline() {
    const sec = V.section(
      'Active memory timeline',
      'One band per allocation, stacked in allocation order: when a block is freed, the blocks above it move down. ' +
        'x: allocator steps (one alloc or free each); y: bytes. Hover for details; click to show the segment map at that step; ' +
        'wheel to zoom, drag to pan, double-click to reset.',
    )
    const layout = bandLayout()
    const total = totals()
    const reserved = segs.length ? reservedSteps() : null
    const t = V.theme()
    const rgba = layout ? null : Uint32Array.from(B.label, (l) => V.colourRgba(l))
    sec.append(
      V.legend([
        { label: 'allocation (colour per id)', colour: 'linear-gradient(90deg,#e9775b,#5bb0e9,#7be95b)' },
        ...(reserved ? [{ label: 'reserved (segments)', colour: t.line, kind: 'dash' as const }] : []),
        ...(D.ooms.length ? [{ label: 'allocation failed', colour: t.warn }] : []),
        ...(segs.length ? [{ label: 'step shown in the segment map', colour: t.accent, kind: 'line' as const }] : []),
      ]),
    )
    if (!layout) {
      sec.append(
        V.el(
          'p',
          { class: 'note' },
          `${V.int(n)} allocations move too often to draw as exact bands; ` +
            'each pixel column shows the live blocks at the step of its highest total (zoom in for detail).',
        ),
      )
    }
    const plot = V.el('div', { class: 'plot' })
    sec.append(plot)
    const cv = V.canvas(plot)
    const M = { l: 74, r: 14, t: 10, b: 28 }
    const maxY = Math.max(1, V.max(total), reserved ? V.max(reserved) : 0) * 1.04
    const plotX = (): [number, number] => [M.l, cv.width - M.r]

    /** Pixel columns: the live stack at one step per column, written into an image. */
    function drawColumns(ctx: CanvasRenderingContext2D, x0: number, x1: number, y0: number, y1: number) {
      const dpr = window.devicePixelRatio || 1
      const pw = Math.max(1, Math.round((x1 - x0) * dpr))
      const ph = Math.max(1, Math.round((y0 - y1) * dpr))
      const img = new ImageData(pw, ph)
      const px = new Uint32Array(img.data.buffer)
      const seen = new Uint8Array(n)
      let drawn = 0
      const sw = sweeper()
      const span = z.hi - z.lo
      for (let c = 0; c < pw; c++) {
        const a = Math.max(0, Math.floor(z.lo + (c / pw) * span))
        if (a >= D.steps) break
        const end = Math.min(D.steps, Math.max(a + 1, Math.ceil(z.lo + ((c + 1) / pw) * span)))
        let s = a
        for (let q = a + 1; q < end; q++) if (total[q] > total[s]) s = q
        sw.advance(s)
        let base = 0
        for (const k of sw.stack) {
          const top = base + B.size[k]
          const r0 = Math.max(0, Math.round(ph - (top / maxY) * ph))
          const r1 = Math.min(ph, Math.round(ph - (base / maxY) * ph))
          base = top
          if (r1 <= r0) continue
          if (!seen[k]) {
            seen[k] = 1
            drawn++
          }
          const colour = rgba![k]
          for (let r = r0; r < r1; r++) px[r * pw + c] = colour
        }
      }
      const off = document.createElement('canvas')
      off.width = pw
      off.height = ph
      off.getContext('2d')!.putImageData(img, 0, 0)
      ctx.drawImage(off, x0, y1, x1 - x0, y0 - y1)
      return drawn
    }

    const draw = () => {
      const W = V.plotWidth(plot)
      const H = Math.round(Math.min(Math.max(window.innerHeight * 0.42, 260), 520))
      cv.size(W, H)
      const ctx = cv.ctx
      const { x0, x1, y0, y1, xs, ys } = V.bytePlot(ctx, { W, H, M, z, maxY })
      let drawn = 0
      if (layout) {
        const seen = new Uint8Array(n)
        const { rb, rt } = layout
        let last = -1
        for (let i = 0; i < layout.count; i++) {
          const a = rt[i * 3],
            b = rt[i * 3 + 1]
          if (b < z.lo || a > z.hi) continue
          const k = rb[i]
          if (k !== last) {
            ctx.fillStyle = blockColour[k]
            last = k
          }
          const base = rt[i * 3 + 2]
          const xa = xs(a),
            ya = ys(base + B.size[k])
          ctx.fillRect(xa, ya, Math.max(xs(b) - xa, 0.5), ys(base) - ya)
          if (!seen[k]) {
            seen[k] = 1
            drawn++
          }
        }
      } else {
        drawn = drawColumns(ctx, x0, x1, y0, y1)
      }
      if (reserved) {
        ctx.strokeStyle = t.line
        ctx.setLineDash([5, 4])
        ctx.lineWidth = 1.25
        ctx.beginPath()
        for (let s = Math.max(0, Math.floor(z.lo)); s < Math.min(D.steps, Math.ceil(z.hi)); s++) {
          const y = ys(reserved[s])
          if (s === Math.max(0, Math.floor(z.lo))) ctx.moveTo(xs(s), y)
          else ctx.lineTo(xs(s), y)
          ctx.lineTo(xs(s + 1), y)
        }
        ctx.stroke()
        ctx.setLineDash([])
      }
      ctx.fillStyle = t.warn
      for (const o of D.ooms) {
        const x = xs(o.t)
        ctx.beginPath()
        ctx.moveTo(x - 5, y1)
        ctx.lineTo(x + 5, y1)
        ctx.lineTo(x, y1 + 8)
        ctx.fill()
        ctx.fillRect(x, y1, 1, y0 - y1)
      }
      if (segs.length) {
        ctx.fillStyle = t.accent
        ctx.fillRect(Math.round(xs(selected + 0.5)) - 1, y1, 2, y0 - y1)
      }
      ctx.restore()
      counts.timelineBlocks = drawn
      counts.timelineMode = layout ? 'bands' : 'columns'
      counts.oomMarkers = D.ooms.length
      V.update(counts)
    }
    const z = V.xzoom(cv.el, 0, D.steps, plotX, V.throttle(draw))
    let selected = D.peakStep ?? 0
    const redraw = V.throttle(draw)

    let hoverSweep: { sw: ReturnType<typeof sweeper>; step: number } | null = null
    /** The block drawn at (step, bytes), or -1. */
    function blockAt(step: number, bytes: number) {
      if (layout) {
        const { rb, rt } = layout
        for (let i = 0; i < layout.count; i++) {
          const k = rb[i]
          if (rt[i * 3] <= step && step < rt[i * 3 + 1] && rt[i * 3 + 2] <= bytes && bytes < rt[i * 3 + 2] + B.size[k]) return k
        }
        return -1
      }
      // Hover moves a little at a time: sweep on from the last step, restart only to go back.
      const s = Math.floor(step)
      if (!hoverSweep || hoverSweep.step > s) hoverSweep = { sw: sweeper(), step: 0 }
      hoverSweep.sw.advance(s)
      hoverSweep.step = s
      let base = 0
      for (const k of hoverSweep.sw.stack) {
        if (base <= bytes && bytes < base + B.size[k]) return k
        base += B.size[k]
      }
      return -1
    }
    let inside = false
    const hover = V.throttle((e: MouseEvent) => {
      if (!inside) return
      const x0 = M.l,
        x1 = cv.width - M.r,
        y0 = cv.height - M.b,
        y1 = M.t
      if (e.offsetX < x0 || e.offsetX > x1 || e.offsetY < y1 || e.offsetY > y0) return V.hideTip()
      const step = z.at(e.offsetX)
      const s = Math.min(D.steps - 1, Math.max(0, Math.floor(step)))
      const at: TipRow[] = [['active', V.bytesLong(total[s])], ...(reserved ? [['reserved', V.bytesLong(reserved[s])] satisfies TipRow] : [])]
      const k = blockAt(step, ((y0 - e.offsetY) / (y0 - y1)) * maxY)
      if (k >= 0) V.tip(e, B.label[k], [...blockRows(k), ['at step', V.int(s)], ...at])
      else V.tip(e, `step ${V.int(s)}`, at)
    })
    cv.el.addEventListener('mousemove', (e) => {
      inside = true
      hover(e)
    })
    cv.el.addEventListener('mouseleave', () => {
      inside = false
      V.hideTip()
    })
    z.onClick = (e) => {
      selected = Math.min(D.steps - 1, Math.max(0, Math.floor(z.at(e.offsetX))))
      redraw()
      selectStep(selected)
    }
    V.onResize(draw)
    draw()
    return selected
  }

  function poolTable() {
    const sec = V.section(
      'Memory by pool',
      'What each pool holds at the moment of the snapshot. Free bytes are cached: reserved from the driver, ready for reuse.',
    )
    const t = V.theme()
    sec.append(
      V.legend([
        { label: 'active', colour: t.accent },
        { label: 'pending free', colour: PENDING },
        { label: 'free (cached)', colour: t.free },
      ]),
    )
    const rows = D.byPool!.map((p) => {
      const pct = (v: number) => (p.reserved > 0 ? (100 * v) / p.reserved : 0)
      const bar = V.el(
        'div',
        { class: 'bar' },
        V.el('div', { style: `width:${pct(p.active)}%;background:${t.accent}` }),
        V.el('div', { style: `width:${pct(p.pending)}%;background:${PENDING}` }),
      )
      return V.el(
        'tr',
        {},
        V.el('td', {}, p.name),
        V.el('td', {}, V.int(p.segments)),
        V.el('td', {}, V.bytes(p.reserved)),
        V.el('td', {}, V.bytes(p.active)),
        V.el('td', {}, V.bytes(p.pending)),
        V.el('td', {}, V.bytes(p.free)),
        V.el('td', {}, V.bytes(p.largestFree)),
        V.el('td', { style: 'width:40%' }, bar),
      )
    })
    const head = V.el('tr', {}, ...['pool', 'segments', 'reserved', 'active', 'pending free', 'free', 'largest free', 'use'].map((h) => V.el('th', {}, h)))
    sec.append(V.el('table', { class: 't' }, V.el('thead', {}, head), V.el('tbody', {}, ...rows)))
  }

  const PENDING = '#f0a33a'
  let hatchPattern: CanvasPattern | null = null
  /** Diagonal orange stripes: a pending free (freed, GPU work still outstanding). */
  function hatch(ctx: CanvasRenderingContext2D) {
    if (!hatchPattern) {
      const c = document.createElement('canvas')
      c.width = c.height = 6
      const g = c.getContext('2d')!
      g.strokeStyle = PENDING
      g.lineWidth = 2
      g.beginPath()
      g.moveTo(-1, 7)
      g.lineTo(7, -1)
      g.moveTo(5, 7)
      g.lineTo(7, 5)
      g.moveTo(-1, 1)
      g.lineTo(1, -1)
      g.stroke()
      hatchPattern = ctx.createPattern(c, 'repeat')
    }
    return hatchPattern!
  }

  function segmentMap(initial: number) {
    const sec = V.section('Segment map', 'One row per segment (one <code>wgpu::Buffer</code>), its blocks at their offsets. Hover for details.')
    if (!segs.length) {
      sec.append(
        V.el('p', {
          class: 'note',
          html:
            D.mode === 'trace'
              ? 'This trace was not replayed on a device, so its blocks have no segments or offsets yet. ' +
                '<code>npx wgalloc view trace.json</code> replays it through the real heap (the default; <code>--no-replay</code> skips that).'
              : 'The heap holds no segments.',
        }),
      )
      counts.segments = 0
      counts.segmentBlocks = 0
      return
    }
    const title = sec.querySelector('h2')!
    const t = V.theme()
    const common = V.el('input', { type: 'checkbox' })
    sec.append(
      V.legend([
        {
          label: D.mode === 'snapshot' ? 'block (colour per id)' : 'block (colour per id, as in the timeline)',
          colour: 'linear-gradient(90deg,#e9775b,#5bb0e9,#7be95b)',
        },
        { label: 'pending free', colour: PENDING, kind: 'hatch' },
        { label: 'free range', colour: t.free },
      ]),
    )
    sec.querySelector('.legend')!.append(V.el('label', {}, common, ' bar length proportional to segment size'))
    const scroll = V.el('div', { class: 'scroll plot' })
    sec.append(scroll)
    const cv = V.canvas(scroll)
    const LABEL = 190
    let step = initial
    let rows: number[] = []
    let hits: number[][] = [] // per row: blocks [k] sorted by offset
    let geom: { x0: number; x1: number; rowH: number; gap: number; maxSize: number } | null = null
    const draw = () => {
      rows = segs
        .map((s, i) => i)
        .filter((i) => segs[i].start <= step && step < segs[i].end)
        .sort((a, b) => segs[a].pool - segs[b].pool || segs[a].id - segs[b].id)
      const rowOf = new Map(rows.map((k, r) => [k, r]))
      hits = rows.map(() => [])
      let blocks = 0
      for (let k = 0; k < n; k++) {
        if (B.seg[k] < 0 || B.off[k] < 0 || !(B.start[k] <= step && step < B.end[k])) continue
        const r = rowOf.get(B.seg[k])
        if (r === undefined) continue
        hits[r].push(k)
        blocks++
      }
      for (const h of hits) h.sort((a, b) => B.off[a] - B.off[b])
      const rowH = rows.length <= 40 ? 22 : rows.length <= 200 ? 12 : 6
      const gap = rowH >= 12 ? 4 : 1
      const W = V.plotWidth(scroll)
      cv.size(W, Math.max(40, rows.length * (rowH + gap) + 8))
      const ctx = cv.ctx
      const x0 = LABEL,
        x1 = W - 12
      const maxSize = V.max(
        rows.map((k) => segs[k].size),
        1,
      )
      geom = { x0, x1, rowH, gap, maxSize }
      ctx.font = '11px system-ui, sans-serif'
      ctx.textBaseline = 'middle'
      rows.forEach((k, r) => {
        const s = segs[k]
        const y = 4 + r * (rowH + gap)
        const w = common.checked ? Math.max(2, ((x1 - x0) * s.size) / maxSize) : x1 - x0
        ctx.fillStyle = t.free
        ctx.fillRect(x0, y, w, rowH)
        for (const b of hits[r]) {
          const xa = x0 + (B.off[b] / s.size) * w
          const xb = Math.max(xa + 0.75, x0 + ((B.off[b] + B.size[b]) / s.size) * w)
          if (B.state[b] === 1) {
            ctx.fillStyle = hatch(ctx)
            ctx.fillRect(xa, y, xb - xa, rowH)
            ctx.strokeStyle = PENDING
            ctx.strokeRect(xa + 0.5, y + 0.5, xb - xa - 1, rowH - 1)
          } else {
            ctx.fillStyle = blockColour[b]
            ctx.fillRect(xa, y, xb - xa, rowH)
          }
          // A hairline at each block start tells neighbours of similar colour apart.
          if (xb - xa > 4) {
            ctx.fillStyle = t.panel
            ctx.fillRect(xa, y, 1, rowH)
          }
        }
        ctx.strokeStyle = t.freeEdge
        ctx.strokeRect(x0 + 0.5, y + 0.5, w - 1, rowH - 1)
        if (rowH >= 12) {
          ctx.fillStyle = t.fg
          ctx.textAlign = 'left'
          ctx.fillText(`#${s.id} ${D.pools[s.pool]}${s.dedicated ? ' (dedicated)' : ''}`, 4, y + rowH / 2)
          ctx.fillStyle = t.muted
          ctx.textAlign = 'right'
          ctx.fillText(V.bytes(s.size), x0 - 8, y + rowH / 2)
        }
      })
      title.textContent =
        D.mode === 'snapshot'
          ? `Segment map (${rows.length} segments)`
          : `Segment map at step ${V.int(step)} (${rows.length} segments, ${V.int(blocks)} blocks)`
      counts.segments = rows.length
      counts.segmentBlocks = blocks
      counts.segmentStep = step
      V.update(counts)
    }
    cv.el.addEventListener('mousemove', (e) => {
      if (!geom) return
      const { x0, x1, rowH, gap, maxSize } = geom
      const r = Math.floor((e.offsetY - 4) / (rowH + gap))
      if (r < 0 || r >= rows.length || (e.offsetY - 4) % (rowH + gap) > rowH) return V.hideTip()
      const s = segs[rows[r]]
      const w = common.checked ? Math.max(2, ((x1 - x0) * s.size) / maxSize) : x1 - x0
      const used = hits[r].reduce((a, k) => a + B.size[k], 0)
      const segRows: TipRow[] = [
        ['pool', D.pools[s.pool]],
        ['size', V.bytesLong(s.size)],
        ['in use', `${V.bytes(used)} in ${hits[r].length} blocks`],
      ]
      if (e.offsetX < x0 || e.offsetX > x0 + w) return V.tip(e, `segment #${s.id}`, segRows)
      const off = ((e.offsetX - x0) / w) * s.size
      const k = hits[r].find((b) => B.off[b] <= off && off < B.off[b] + B.size[b])
      if (k !== undefined) return V.tip(e, B.label[k], blockRows(k, D.mode === 'snapshot' ? null : step))
      // A free range: between the neighbouring blocks.
      let lo = 0
      let hi = s.size
      for (const b of hits[r]) {
        if (B.off[b] + B.size[b] <= off) lo = Math.max(lo, B.off[b] + B.size[b])
        else if (B.off[b] > off) {
          hi = B.off[b]
          break
        }
      }
      V.tip(e, 'free range', [
        ['offset', V.bytesLong(lo)],
        ['size', V.bytesLong(hi - lo)],
        ['segment', `#${s.id} (${V.bytes(s.size)})`],
      ])
    })
    cv.el.addEventListener('mouseleave', V.hideTip)
    common.addEventListener('change', draw)
    V.onResize(draw)
    selectStep = (s) => {
      step = s
      draw()
    }
    draw()
  }

  if (D.mode === 'snapshot') poolTable()
  const initial = D.mode === 'snapshot' ? 0 : timeline()
  segmentMap(initial)
  counts.blocks = n
  V.done(counts)
})()
