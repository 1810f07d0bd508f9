// Profile page: one track per thread / GPU stream with its slices packed into
// lanes, markers for instants (OOM, gc), counters (heap and host bytes) as step
// lines on the same time axis, and a table of slices by name. A classic script
// inlined after common.ts (see there); the data comes from js/view/profile.ts.

/** The profile page's data (js/view/profile.ts); times are microseconds from the trace's start. */
interface ProfileData {
  kind: 'profile'
  title: string
  subtitle: string
  duration: number
  tracks: ProfileTrack[]
  /** String table for slice names and categories. */
  names: string[]
  counters: ProfileCounter[]
  marks: ProfileMark[]
  sliceCount: number
  summary: SummaryRow[]
}
/** Trace event arguments, as JSON. */
type ProfileArgs = Record<string, unknown>
/** One thread / GPU stream: one column per field, one row per slice. */
interface ProfileTrack {
  name: string
  process: string
  lanes: number
  ts: number[]
  dur: number[]
  /** Index into `names`. */
  name_: number[]
  /** Index into `names`. */
  cat: number[]
  lane: number[]
  args: (ProfileArgs | null)[]
}
/** A counter: `values[key][sample]` at times `ts[sample]`. */
interface ProfileCounter {
  name: string
  bytes: boolean
  keys: string[]
  ts: number[]
  values: number[][]
}
/** An instant event; `track` -1 draws it on the axis. */
interface ProfileMark {
  track: number
  ts: number
  name: string
  /** The event's `cat`, as the trace gave it. */
  cat: unknown
  args: ProfileArgs | null
}

;(() => {
  const D = V.data as ProfileData
  V.cards(D.summary)
  const t = V.theme()
  const LABEL = 180
  const LANE = 18
  const TRACK_PAD = 8
  const COUNTER_H = 84
  const AXIS_H = 24
  // Numbered names ("encode+submit #253") share a colour and a row in the table.
  const groupOf = (name: string) => name.replace(/\s*#\d+$/, '')
  const sliceColour = D.names.map((name) => V.colour(groupOf(name)))

  const sec = V.section(
    'Timeline',
    'One track per stream (GPU time from timestamp queries) and for CPU encode/submit; counters below share the time axis. ' +
      'Hover for details; wheel to zoom, drag to pan, double-click to reset.',
  )
  const keyColour = (c: ProfileCounter, k: string) => V.colour(`${c.name}/${k}`)
  sec.append(
    V.legend([
      { label: 'slice (colour per name)', colour: 'linear-gradient(90deg,#e9775b,#5bb0e9,#7be95b)' },
      ...(D.marks.length ? [{ label: 'instant event (OOM, gc, ...)', colour: t.warn }] : []),
      ...D.counters.flatMap((c) => c.keys.map((k) => ({ label: `${c.name}: ${k}`, colour: keyColour(c, k), kind: 'line' as const }))),
    ]),
  )
  const plot = V.el('div', { class: 'plot' })
  sec.append(plot)
  const cv = V.canvas(plot)

  // Vertical layout: axis, tracks (lanes), counters.
  const trackY: number[] = []
  let y = AXIS_H
  for (const tr of D.tracks) {
    trackY.push(y)
    y += tr.lanes * LANE + TRACK_PAD
  }
  const counterY: number[] = []
  for (const c of D.counters) {
    counterY.push(y + 6)
    y += COUNTER_H + 12
  }
  const H = y + 6
  const counterMax = D.counters.map((c) => Math.max(1, ...c.values.map((v) => V.max(v))))
  const plotX = (): [number, number] => [LABEL, cv.width - 14]
  const counts: Counts = { tracks: D.tracks.length, counters: D.counters.length, marks: D.marks.length }

  function draw() {
    const W = V.plotWidth(plot)
    cv.size(W, H)
    const ctx = cv.ctx
    const [x0, x1] = plotX()
    const xs: Scale = (v) => x0 + ((v - z.lo) / (z.hi - z.lo)) * (x1 - x0)
    // Axis at the top, grid through everything.
    ctx.save()
    ctx.font = '11px system-ui, sans-serif'
    ctx.textAlign = 'center'
    ctx.textBaseline = 'middle'
    for (const v of V.ticks(z.lo, z.hi, Math.max(2, Math.floor((x1 - x0) / 100)))) {
      const x = Math.round(xs(v))
      ctx.fillStyle = t.grid
      ctx.fillRect(x, AXIS_H - 4, 1, H - AXIS_H)
      ctx.fillStyle = t.muted
      ctx.fillText(V.time(v), x, AXIS_H / 2 - 2)
    }
    ctx.restore()
    ctx.font = '11px system-ui, sans-serif'
    ctx.textBaseline = 'middle'
    let drawn = 0
    D.tracks.forEach((tr, r) => {
      const ty = trackY[r]
      ctx.fillStyle = t.grid
      ctx.fillRect(0, ty + tr.lanes * LANE + TRACK_PAD / 2, W, 1)
      ctx.fillStyle = t.fg
      ctx.textAlign = 'left'
      ctx.fillText(tr.name, 6, ty + LANE / 2)
      if (tr.lanes > 1 || D.tracks.some((o) => o.process !== tr.process)) {
        ctx.fillStyle = t.muted
        ctx.fillText(tr.process, 6, ty + LANE * 1.5)
      }
      ctx.save()
      ctx.beginPath()
      ctx.rect(x0, ty, x1 - x0, tr.lanes * LANE)
      ctx.clip()
      for (let i = 0; i < tr.ts.length; i++) {
        const a = tr.ts[i],
          b = a + tr.dur[i]
        if (b < z.lo || a > z.hi) continue
        const xa = xs(a),
          w = Math.max(xs(b) - xa, 1)
        const ly = ty + tr.lane[i] * LANE
        ctx.fillStyle = sliceColour[tr.name_[i]]
        ctx.fillRect(xa, ly + 1, w, LANE - 2)
        if (w > 36) {
          ctx.save()
          ctx.beginPath()
          ctx.rect(Math.max(xa, x0), ly, Math.min(w, x1 - xa), LANE)
          ctx.clip()
          ctx.fillStyle = '#111'
          ctx.textAlign = 'left'
          ctx.fillText(D.names[tr.name_[i]], Math.max(xa, x0) + 4, ly + LANE / 2)
          ctx.restore()
        }
        drawn++
      }
      ctx.restore()
    })
    ctx.fillStyle = t.warn
    for (const m of D.marks) {
      if (m.ts < z.lo || m.ts > z.hi) continue
      const x = xs(m.ts)
      const my = m.track >= 0 ? trackY[m.track] : AXIS_H
      ctx.beginPath()
      ctx.moveTo(x - 5, my)
      ctx.lineTo(x + 5, my)
      ctx.lineTo(x, my + 9)
      ctx.fill()
    }
    D.counters.forEach((c, k) => {
      const cy = counterY[k]
      const y0 = cy + COUNTER_H,
        y1 = cy + 4
      const ys: Scale = (v) => y0 - (v / (counterMax[k] * 1.05)) * (y0 - y1)
      const fmt: Format = c.bytes ? V.bytes : (v) => V.int(v)
      ctx.fillStyle = t.fg
      ctx.textAlign = 'left'
      ctx.fillText(c.name, 6, cy + 8)
      ctx.fillStyle = t.muted
      ctx.textAlign = 'right'
      ctx.fillText(fmt(counterMax[k]), x0 - 6, ys(counterMax[k]))
      ctx.fillText(fmt(0), x0 - 6, y0 - 4)
      ctx.fillStyle = t.grid
      ctx.fillRect(x0, Math.round(ys(counterMax[k])), x1 - x0, 1)
      ctx.fillStyle = t.axis
      ctx.fillRect(x0, y0, x1 - x0, 1)
      ctx.save()
      ctx.beginPath()
      ctx.rect(x0, y1 - 2, x1 - x0, y0 - y1 + 2)
      ctx.clip()
      c.keys.forEach((key, j) => {
        const vals = c.values[j]
        ctx.beginPath()
        ctx.moveTo(xs(c.ts[0] ?? 0), y0)
        for (let i = 0; i < c.ts.length; i++) {
          const x = xs(c.ts[i])
          if (i > 0) ctx.lineTo(x, ys(vals[i - 1]))
          ctx.lineTo(x, ys(vals[i]))
        }
        ctx.lineTo(x1, ys(vals[vals.length - 1] ?? 0))
        ctx.strokeStyle = keyColour(c, key)
        ctx.lineWidth = 1.5
        ctx.stroke()
        ctx.lineTo(x1, y0)
        ctx.closePath()
        ctx.globalAlpha = 0.12
        ctx.fillStyle = keyColour(c, key)
        ctx.fill()
        ctx.globalAlpha = 1
      })
      ctx.restore()
    })
    counts.slices = drawn
    counts.counterSamples = D.counters.reduce((a, c) => a + c.ts.length, 0)
    V.update(counts)
  }
  const z = V.xzoom(cv.el, 0, D.duration, plotX, V.throttle(draw))

  const fmtArg = (k: string, v: unknown) =>
    typeof v === 'number' && /bytes|allocated|reserved|active/i.test(k) ? V.bytesLong(v) : typeof v === 'object' ? JSON.stringify(v) : String(v)
  cv.el.addEventListener('mousemove', (e) => {
    const [x0, x1] = plotX()
    if (e.offsetX < x0 || e.offsetX > x1) return V.hideTip()
    const at = z.at(e.offsetX)
    const slack = (3 / (x1 - x0)) * (z.hi - z.lo) // 3 px, so thin slices can be hovered
    for (const m of D.marks) {
      const my = m.track >= 0 ? trackY[m.track] : AXIS_H
      if (Math.abs(m.ts - at) <= slack * 2 && e.offsetY >= my && e.offsetY <= my + 10) {
        return V.tip(e, m.name, [['at', V.time(m.ts)], ['category', m.cat], ...Object.entries(m.args ?? {}).map(([k, v]): TipRow => [k, fmtArg(k, v)])])
      }
    }
    const r = trackY.findIndex((ty, i) => e.offsetY >= ty && e.offsetY < ty + D.tracks[i].lanes * LANE)
    if (r >= 0) {
      const tr = D.tracks[r]
      const lane = Math.floor((e.offsetY - trackY[r]) / LANE)
      for (let i = 0; i < tr.ts.length; i++) {
        if (tr.lane[i] === lane && tr.ts[i] - slack <= at && at <= tr.ts[i] + tr.dur[i] + slack) {
          return V.tip(e, D.names[tr.name_[i]], [
            ['track', tr.name],
            ['category', D.names[tr.cat[i]]],
            ['start', V.time(tr.ts[i])],
            ['duration', V.time(tr.dur[i])],
            ...Object.entries(tr.args[i] ?? {}).map(([k, v]): TipRow => [k, fmtArg(k, v)]),
          ])
        }
      }
      return V.hideTip()
    }
    const k = counterY.findIndex((cy) => e.offsetY >= cy && e.offsetY <= cy + COUNTER_H)
    if (k >= 0) {
      const c = D.counters[k]
      let i = -1
      for (let lo = 0, hi = c.ts.length - 1; lo <= hi; ) {
        const mid = (lo + hi) >> 1
        if (c.ts[mid] <= at) {
          i = mid
          lo = mid + 1
        } else hi = mid - 1
      }
      return V.tip(e, c.name, [
        ['at', V.time(at)],
        ...c.keys.map((key, j): TipRow => [key, i < 0 ? 'no sample yet' : c.bytes ? V.bytesLong(c.values[j][i]) : V.int(c.values[j][i])]),
      ])
    }
    V.hideTip()
  })
  cv.el.addEventListener('mouseleave', V.hideTip)

  // Slices by name: where the time went.
  const agg = new Map<string, { name: string; track: string; count: number; total: number; max: number }>()
  for (const tr of D.tracks) {
    for (let i = 0; i < tr.ts.length; i++) {
      const name = groupOf(D.names[tr.name_[i]])
      const key = `${name}|${tr.name}`
      let a = agg.get(key)
      if (!a) agg.set(key, (a = { name, track: tr.name, count: 0, total: 0, max: 0 }))
      a.count++
      a.total += tr.dur[i]
      a.max = Math.max(a.max, tr.dur[i])
    }
  }
  const rows = [...agg.values()].sort((a, b) => b.total - a.total)
  if (rows.length) {
    const tsec = V.section('Slices by name', `Total, mean and longest duration per slice name and track${rows.length > 40 ? ' (the 40 largest totals)' : ''}.`)
    const head = V.el('tr', {}, ...['name', 'track', 'count', 'total', 'mean', 'max'].map((h) => V.el('th', {}, h)))
    const body = rows
      .slice(0, 40)
      .map((a) =>
        V.el(
          'tr',
          {},
          V.el('td', {}, V.el('span', { class: 'sw', style: `background:${V.colour(a.name)}` }), a.name),
          V.el('td', {}, a.track),
          V.el('td', {}, V.int(a.count)),
          V.el('td', {}, V.time(a.total)),
          V.el('td', {}, V.time(a.total / a.count)),
          V.el('td', {}, V.time(a.max)),
        ),
      )
    tsec.append(V.el('table', { class: 't text2' }, V.el('thead', {}, head), V.el('tbody', {}, ...body)))
  }

  V.onResize(draw)
  draw()
  V.done(counts)
})()
