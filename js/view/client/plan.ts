// Plan page: every buffer as a rectangle over its lifetime (x: steps) at its
// offset in the slab (y: bytes), the slab and lower-bound lines, and the live
// bytes per step underneath. A classic script inlined after common.ts (see
// there); the data comes from js/view/plan.ts.

/** The plan page's data (js/view/plan.ts). */
interface PlanData {
  kind: 'plan'
  title: string
  subtitle: string
  /** One column per field, one row per buffer: live over steps first..last (inclusive) at [offset, offset + size). */
  records: { id: string[]; size: number[]; first: number[]; last: number[]; offset: number[] }
  steps: number
  slabSize: number
  lowerBound: number | null
  /** Views sharing a base buffer's storage, by the base's id. */
  views: Partial<Record<string, string[]>>
  summary: SummaryRow[]
}

;(() => {
  const D = V.data as PlanData
  const R = D.records
  const n = R.id.length
  const colour = R.id.map((id) => V.colour(id))
  V.cards(D.summary)
  const t = V.theme()

  let top = 0 // highest byte any record reaches
  for (let i = 0; i < n; i++) top = Math.max(top, R.offset[i] + R.size[i])
  const maxY = Math.max(1, top, D.slabSize, D.lowerBound ?? 0) * 1.04
  const live = new Float64Array(D.steps)
  {
    const delta = new Float64Array(D.steps + 1)
    for (let i = 0; i < n; i++) {
      delta[R.first[i]] += R.size[i]
      delta[R.last[i] + 1] -= R.size[i]
    }
    let cur = 0
    for (let s = 0; s < D.steps; s++) live[s] = cur += delta[s]
  }
  const maxLive = Math.max(1, V.max(live), D.lowerBound ?? 0) * 1.08

  const sec = V.section(
    'Offsets by step',
    'Each rectangle is one buffer: x spans its lifetime (first to last step, inclusive), y its bytes in the slab. ' +
      'Buffers whose lifetimes overlap never overlap in memory. Hover for details; wheel to zoom, drag to pan, double-click to reset.',
  )
  sec.append(
    V.legend([
      { label: 'buffer (colour per id)', colour: 'linear-gradient(90deg,#e9775b,#5bb0e9,#7be95b)' },
      { label: `slab ${V.bytes(D.slabSize)}`, colour: t.line, kind: 'line' },
      ...(D.lowerBound != null ? [{ label: `lower bound ${V.bytes(D.lowerBound)}`, colour: t.warn, kind: 'dash' as const }] : []),
    ]),
  )
  const plot = V.el('div', { class: 'plot' })
  sec.append(plot)
  const cv = V.canvas(plot)
  const liveSec = V.section(
    'Live bytes by step',
    'Sum of the sizes of the buffers live at each step: no slab can be smaller than its highest bar (the lower bound).',
  )
  const livePlot = V.el('div', { class: 'plot' })
  liveSec.append(livePlot)
  const lv = V.canvas(livePlot)

  const M = { l: 74, r: 14, t: 10, b: 28 }
  const plotX = (): [number, number] => [M.l, cv.width - M.r]
  let geom: { xs: Scale; ys: Scale } | null = null
  const counts: Counts = {}

  /** The lower bound, dashed across the plot (both plots draw it). */
  function lowerBoundLine(ctx: CanvasRenderingContext2D, x0: number, x1: number, ys: (v: number) => number) {
    if (D.lowerBound == null) return
    ctx.strokeStyle = t.warn
    ctx.setLineDash([6, 4])
    ctx.beginPath()
    ctx.moveTo(x0, ys(D.lowerBound))
    ctx.lineTo(x1, ys(D.lowerBound))
    ctx.stroke()
    ctx.setLineDash([])
  }

  function drawLayout() {
    const W = V.plotWidth(plot)
    const H = Math.round(Math.min(Math.max(window.innerHeight * 0.5, 280), 640))
    cv.size(W, H)
    const ctx = cv.ctx
    const { x0, x1, y0, y1, xs, ys } = V.bytePlot(ctx, { W, H, M, z, maxY })
    geom = { xs, ys }
    let drawn = 0
    for (let i = 0; i < n; i++) {
      if (R.last[i] + 1 < z.lo || R.first[i] > z.hi) continue
      const xa = xs(R.first[i]),
        xb = xs(R.last[i] + 1)
      const ya = ys(R.offset[i] + R.size[i]),
        yb = ys(R.offset[i])
      ctx.fillStyle = colour[i]
      ctx.fillRect(xa, ya, Math.max(xb - xa, 0.5), Math.max(yb - ya, 0.5))
      // Outlines separate neighbours once rectangles are big enough to see.
      if (xb - xa > 6 && yb - ya > 6) {
        ctx.strokeStyle = 'rgba(0,0,0,.25)'
        ctx.strokeRect(xa + 0.5, ya + 0.5, xb - xa - 1, yb - ya - 1)
      }
      drawn++
    }
    ctx.lineWidth = 1.5
    ctx.strokeStyle = t.line
    ctx.beginPath()
    ctx.moveTo(x0, ys(D.slabSize))
    ctx.lineTo(x1, ys(D.slabSize))
    ctx.stroke()
    lowerBoundLine(ctx, x0, x1, ys)
    ctx.restore()
    counts.records = drawn
    V.update(counts)
  }

  function drawLive() {
    const W = V.plotWidth(livePlot)
    const H = 150
    lv.size(W, H)
    const ctx = lv.ctx
    const { x0, x1, y0, y1, xs, ys } = V.bytePlot(ctx, { W, H, M, z, maxY: maxLive })
    ctx.fillStyle = t.accent
    for (let s = Math.max(0, Math.floor(z.lo)); s < Math.min(D.steps, Math.ceil(z.hi)); s++) {
      const xa = xs(s)
      ctx.fillRect(xa, ys(live[s]), Math.max(xs(s + 1) - xa - (xs(s + 1) - xa > 4 ? 1 : 0), 0.5), y0 - ys(live[s]))
    }
    lowerBoundLine(ctx, x0, x1, ys)
    ctx.restore()
  }

  const draw = () => {
    drawLayout()
    drawLive()
  }
  const z = V.xzoom(cv.el, 0, D.steps, plotX, V.throttle(draw))
  const zl = V.xzoom(lv.el, 0, D.steps, plotX, V.throttle(draw))
  // Both charts share one x range.
  Object.defineProperty(zl, 'lo', {
    get: () => z.lo,
    set: (v: number) => {
      z.lo = v
    },
  })
  Object.defineProperty(zl, 'hi', {
    get: () => z.hi,
    set: (v: number) => {
      z.hi = v
    },
  })

  function recordAt(e: MouseEvent) {
    const step = z.at(e.offsetX)
    const maxYpx = cv.height - M.b
    const bytes = ((maxYpx - e.offsetY) / (maxYpx - M.t)) * maxY
    let best = -1
    for (let i = 0; i < n; i++) {
      if (R.first[i] <= step && step < R.last[i] + 1 && R.offset[i] <= bytes && bytes < R.offset[i] + R.size[i]) {
        if (best < 0 || R.size[i] < R.size[best]) best = i
      }
    }
    return best
  }
  cv.el.addEventListener('mousemove', (e) => {
    const i = recordAt(e)
    if (i < 0) return V.hideTip()
    const rows: TipRow[] = [
      ['size', V.bytesLong(R.size[i])],
      ['offset', V.bytesLong(R.offset[i])],
      ['end', V.bytesLong(R.offset[i] + R.size[i])],
      ['lifetime', `steps ${V.int(R.first[i])} to ${V.int(R.last[i])} (${V.int(R.last[i] - R.first[i] + 1)} steps)`],
    ]
    const views = Object.hasOwn(D.views, R.id[i]) ? D.views[R.id[i]] : undefined
    if (views) rows.push(['views', views.length > 6 ? `${views.slice(0, 6).join(', ')} and ${views.length - 6} more` : views.join(', ')])
    V.tip(e, R.id[i], rows)
  })
  cv.el.addEventListener('mouseleave', V.hideTip)
  lv.el.addEventListener('mousemove', (e) => {
    const s = Math.floor(z.at(e.offsetX))
    if (s < 0 || s >= D.steps) return V.hideTip()
    let k = 0
    for (let i = 0; i < n; i++) if (R.first[i] <= s && s <= R.last[i]) k++
    V.tip(e, `step ${V.int(s)}`, [
      ['live bytes', V.bytesLong(live[s])],
      ['live buffers', V.int(k)],
      ['slab use', `${((100 * live[s]) / Math.max(1, D.slabSize)).toFixed(1)}%`],
    ])
  })
  lv.el.addEventListener('mouseleave', V.hideTip)

  V.onResize(draw)
  draw()
  // For tools and tests: where a buffer is drawn, in viewport coordinates.
  const wgallocView = {
    pointOf(id: string | number) {
      const i = R.id.indexOf(String(id))
      if (i < 0 || !geom) return null
      const r = cv.el.getBoundingClientRect()
      return { x: r.left + (geom.xs(R.first[i]) + geom.xs(R.last[i] + 1)) / 2, y: r.top + (geom.ys(R.offset[i]) + geom.ys(R.offset[i] + R.size[i])) / 2 }
    },
  }
  Object.assign(window, { wgallocView })
  V.done(counts)
})()
