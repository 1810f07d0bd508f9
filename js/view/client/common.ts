// Shared page helpers: number formats, axis ticks, stable colours, HiDPI
// canvases, tooltips, x zoom/pan, legends and summary cards. A classic browser
// script (no import/export): compiled to dist/view/client/common.js and inlined
// into every page by js/view/shell.ts ahead of the page's own script, which
// reads the global `V` (and the global types below) declared here.

/** A summary card's unit (js/view/check.ts's SummaryRow): every unit but 'text' formats a number. */
type NumericUnit = 'bytes' | 'count' | 'ratio' | 'ms'
/** A summary value and its unit. */
type SummaryValue = [value: number, unit: NumericUnit] | [value: number | string, unit: 'text']
/** A summary card: label, value and how to show it. */
type SummaryRow = [label: string, ...SummaryValue]
/** One tooltip row: key and value (shown as `String(value)`, escaped). */
type TipRow = [key: string, value: unknown]
/** A legend entry: a swatch (the default), a line, a dashed line or a hatched swatch. */
interface LegendItem {
  label: string
  colour: string
  kind?: 'swatch' | 'line' | 'dash' | 'hatch'
}
/** `el()`'s attributes: `class`, `html` (innerHTML), `on<type>` (a listener) or any attribute. */
type Attrs = Record<string, string | EventListener>
/** A canvas sized in CSS pixels (`width`, `height`) and drawn at device resolution. */
interface ViewCanvas {
  el: HTMLCanvasElement
  ctx: CanvasRenderingContext2D
  width: number
  height: number
  size(w: number, h: number): void
}
/** An x range under zoom and pan (`xzoom()`). */
interface Zoom {
  lo: number
  hi: number
  full: [number, number]
  /** Gets clicks that were not drags. */
  onClick: ((e: MouseEvent) => void) | null
  /** The x value at a CSS pixel offset. */
  at: (offsetX: number) => number
}
/** Plot margins in CSS pixels. */
interface Margins {
  l: number
  r: number
  t: number
  b: number
}
type Scale = (v: number) => number
type Format = (v: number) => string
/** What the page scripts count as drawn, written to <body data-*>. */
type Counts = Record<string, string | number>

const V = (() => {
  const data: unknown = JSON.parse(document.getElementById('wgalloc-data')!.textContent!)
  const main = document.getElementById('main')!
  const cssVar = (name: string) => getComputedStyle(document.documentElement).getPropertyValue(name).trim()
  const theme = () => ({
    fg: cssVar('--fg'),
    muted: cssVar('--muted'),
    grid: cssVar('--grid'),
    axis: cssVar('--axis'),
    free: cssVar('--free'),
    freeEdge: cssVar('--free-edge'),
    warn: cssVar('--warn'),
    line: cssVar('--line'),
    accent: cssVar('--accent'),
    panel: cssVar('--panel'),
  })

  const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB']
  const short = (n: number) => (n >= 100 || Number.isInteger(n) ? n.toFixed(0) : n >= 10 ? n.toFixed(1) : n.toFixed(2)).replace(/\.0+$/, '')
  /** 1536 -> "1.5 KiB" */
  function bytes(n: number) {
    if (!Number.isFinite(n)) return String(n)
    let v = Math.abs(n)
    let i = 0
    while (v >= 1024 && i < UNITS.length - 1) {
      v /= 1024
      i++
    }
    return `${n < 0 ? '-' : ''}${short(v)} ${UNITS[i]}`
  }
  const int = (n: number) => Math.round(n).toLocaleString('en-US')
  /** Exact and short: "1,572,864 B (1.5 MiB)". */
  const bytesLong = (n: number) => (n < 1024 ? `${int(n)} B` : `${int(n)} B (${bytes(n)})`)
  /** Microseconds -> "12.5 µs" / "3.2 ms" / "1.05 s". */
  function time(us: number) {
    const a = Math.abs(us)
    if (a < 1000) return `${short(us)} µs`
    if (a < 1e6) return `${short(us / 1000)} ms`
    return `${short(us / 1e6)} s`
  }

  function nice(x: number) {
    const p = 10 ** Math.floor(Math.log10(x))
    const f = x / p
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * p
  }
  /** Tick values in [lo, hi]; `binary` steps are 1-2-5 multiples of B/KiB/MiB/... */
  function ticks(lo: number, hi: number, count: number, binary?: boolean) {
    const span = hi - lo
    if (!(span > 0) || !(count > 0)) return [lo]
    let step: number
    if (binary) {
      let unit = 1
      while (unit * 1024 <= span) unit *= 1024
      step = Math.max(nice(span / count / unit) * unit, 1)
    } else {
      step = nice(span / count)
    }
    const out: number[] = []
    for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(v)
    return out
  }

  // Colours stable per id: FNV-1a of the id picks hue, saturation and lightness.
  const colours = new Map<string, string>()
  function hash(s: string) {
    let h = 2166136261
    for (let i = 0; i < s.length; i++) {
      h ^= s.charCodeAt(i)
      h = Math.imul(h, 16777619)
    }
    return h >>> 0
  }
  function colour(key: string) {
    const k = String(key)
    let c = colours.get(k)
    if (!c) {
      const h = hash(k)
      c = `hsl(${h % 360} ${58 + ((h >>> 9) % 22)}% ${50 + ((h >>> 17) % 14)}%)`
      colours.set(k, c)
    }
    return c
  }

  /** Largest value of an array (spreading 100k values into Math.max overflows the stack). */
  function max(values: ArrayLike<number>, start = -Infinity) {
    let m = start
    for (let i = 0; i < values.length; i++) if (values[i] > m) m = values[i]
    return m
  }

  /** The same colour as `colour(key)`, as a little-endian RGBA word for ImageData. */
  function colourRgba(key: string) {
    const m = /hsl\((\d+) (\d+)% (\d+)%\)/.exec(colour(key))!
    const h = Number(m[1]) / 360,
      s = Number(m[2]) / 100,
      l = Number(m[3]) / 100
    const q = l < 0.5 ? l * (1 + s) : l + s - l * s
    const p = 2 * l - q
    const ch = (t: number) => {
      t = (t + 1) % 1
      const v = t < 1 / 6 ? p + (q - p) * 6 * t : t < 1 / 2 ? q : t < 2 / 3 ? p + (q - p) * (2 / 3 - t) * 6 : p
      return Math.round(v * 255)
    }
    return ((255 << 24) | (ch(h - 1 / 3) << 16) | (ch(h) << 8) | ch(h + 1 / 3)) >>> 0
  }

  const esc = (s: unknown) => String(s).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`)
  function el<K extends keyof HTMLElementTagNameMap>(tag: K, attrs?: Attrs, ...children: (Node | string | null | undefined)[]): HTMLElementTagNameMap[K] {
    const e = document.createElement(tag)
    for (const [k, v] of Object.entries(attrs ?? {})) {
      if (k === 'class') e.className = String(v)
      else if (k === 'html') e.innerHTML = String(v)
      else if (k.startsWith('on')) e.addEventListener(k.slice(2), v as EventListener)
      else e.setAttribute(k, String(v))
    }
    for (const c of children) if (c != null) e.append(c)
    return e
  }
  function section(title: string, help?: string) {
    const s = el('section', {}, el('h2', {}, title))
    if (help) s.append(el('p', { class: 'help', html: help }))
    main.append(s)
    return s
  }
  /** items: [{ label, colour, kind: 'swatch' | 'line' | 'dash' | 'hatch' }] */
  function legend(items: LegendItem[]) {
    const box = el('div', { class: 'legend' })
    for (const it of items) {
      const mark =
        it.kind === 'line' || it.kind === 'dash'
          ? el('span', { class: `ln${it.kind === 'dash' ? ' dash' : ''}`, style: `border-color:${it.colour}` })
          : el('span', {
              class: 'sw',
              style:
                it.kind === 'hatch'
                  ? `background:repeating-linear-gradient(45deg, ${it.colour} 0 2px, transparent 2px 5px); outline: 1px solid ${it.colour}`
                  : `background:${it.colour}`,
            })
      box.append(el('span', {}, mark, it.label))
    }
    return box
  }
  function formatValue(...[value, unit]: SummaryValue) {
    if (unit === 'bytes') return bytes(value)
    if (unit === 'ratio') return `${value.toFixed(3)}x`
    if (unit === 'ms') return value >= 1000 ? `${(value / 1000).toFixed(2)} s` : `${short(value)} ms`
    if (unit === 'count') return int(value)
    return String(value)
  }
  function cards(summary?: SummaryRow[]) {
    const box = document.getElementById('summary')!
    for (const [k, ...value] of summary ?? []) {
      const card = el('div', { class: 'card' }, el('div', { class: 'k' }, k), el('div', { class: 'v' }, formatValue(...value)))
      if (value[1] === 'bytes') card.title = `${int(value[0])} bytes`
      box.append(card)
    }
  }

  /** A canvas sized in CSS pixels and drawn at device resolution. */
  function canvas(parent: HTMLElement): ViewCanvas {
    const c = el('canvas')
    parent.append(c)
    const ctx = c.getContext('2d')!
    return {
      el: c,
      ctx,
      width: 0,
      height: 0,
      size(w: number, h: number) {
        const dpr = window.devicePixelRatio || 1
        this.width = w
        this.height = h
        c.style.width = `${w}px`
        c.style.height = `${h}px`
        c.width = Math.max(1, Math.round(w * dpr))
        c.height = Math.max(1, Math.round(h * dpr))
        ctx.setTransform(dpr, 0, 0, dpr, 0, 0)
        ctx.clearRect(0, 0, w, h)
      },
    }
  }
  const plotWidth = (elem: HTMLElement) => Math.max(320, elem.clientWidth)

  const tipEl = document.getElementById('tip')!
  /** rows: [[key, value]] (values are escaped) */
  function tip(event: MouseEvent, title: string, rows: TipRow[]) {
    tipEl.innerHTML = `<b>${esc(title)}</b><table>${rows.map(([k, v]) => `<tr><td>${esc(k)}</td><td>${esc(v)}</td></tr>`).join('')}</table>`
    tipEl.hidden = false
    const r = tipEl.getBoundingClientRect()
    const x = event.clientX + 14 + r.width > window.innerWidth ? event.clientX - 14 - r.width : event.clientX + 14
    const y = event.clientY + 14 + r.height > window.innerHeight ? event.clientY - 14 - r.height : event.clientY + 14
    tipEl.style.left = `${Math.max(2, x)}px`
    tipEl.style.top = `${Math.max(2, y)}px`
  }
  const hideTip = () => {
    tipEl.hidden = true
  }

  /** Redraws `fn` at most once a frame. */
  function throttle<A extends unknown[]>(fn: (...args: A) => void): (...args: A) => void {
    let pending = false
    let lastArgs: A
    return (...args) => {
      lastArgs = args
      if (pending) return
      pending = true
      requestAnimationFrame(() => {
        pending = false
        fn(...lastArgs)
      })
    }
  }
  const resizers: (() => void)[] = []
  const onResize = (fn: () => void) => resizers.push(fn)
  let lastWidth = main.clientWidth
  const resize = throttle(() => {
    if (main.clientWidth === lastWidth) return
    lastWidth = main.clientWidth
    for (const fn of resizers) fn()
  })
  window.addEventListener('resize', resize)
  if (typeof ResizeObserver === 'function') new ResizeObserver(resize).observe(main)

  /**
   * X zoom and pan on `elem`: wheel zooms around the pointer, drag pans,
   * double-click resets. `plotX()` gives the plot's [left, right] in CSS px.
   * `z.click(fn)` gets clicks that were not drags.
   */
  function xzoom(elem: HTMLElement, lo: number, hi: number, plotX: () => [number, number], redraw: () => void): Zoom {
    const minSpan = (hi - lo) / 1e6
    const at = (offsetX: number) => {
      const [x0, x1] = plotX()
      return z.lo + ((offsetX - x0) / (x1 - x0)) * (z.hi - z.lo)
    }
    const z: Zoom = { lo, hi, full: [lo, hi], onClick: null, at }
    const clamp = () => {
      const span = Math.min(Math.max(z.hi - z.lo, minSpan), z.full[1] - z.full[0])
      if (z.lo < z.full[0]) z.lo = z.full[0]
      z.hi = z.lo + span
      if (z.hi > z.full[1]) {
        z.hi = z.full[1]
        z.lo = z.hi - span
      }
    }
    elem.addEventListener(
      'wheel',
      (e) => {
        e.preventDefault()
        const x = at(e.offsetX)
        const f = Math.exp(Math.max(-1, Math.min(1, e.deltaY * 0.002)))
        z.lo = x - (x - z.lo) * f
        z.hi = x + (z.hi - x) * f
        clamp()
        redraw()
      },
      { passive: false },
    )
    let drag: { x: number; lo: number; hi: number; moved: boolean } | null = null
    elem.addEventListener('mousedown', (e) => {
      drag = { x: e.clientX, lo: z.lo, hi: z.hi, moved: false }
    })
    window.addEventListener('mousemove', (e) => {
      if (!drag) return
      const dx = e.clientX - drag.x
      if (Math.abs(dx) > 3) drag.moved = true
      if (!drag.moved) return
      const [x0, x1] = plotX()
      const shift = (dx / (x1 - x0)) * (drag.hi - drag.lo)
      z.lo = drag.lo - shift
      z.hi = drag.hi - shift
      clamp()
      redraw()
    })
    window.addEventListener('mouseup', (e) => {
      if (drag && !drag.moved && z.onClick && e.target === elem) z.onClick(e)
      drag = null
    })
    elem.addEventListener('dblclick', () => {
      z.lo = z.full[0]
      z.hi = z.full[1]
      redraw()
    })
    return z
  }

  /** Horizontal axis with grid lines from `top` to `y`. */
  function axisX(
    ctx: CanvasRenderingContext2D,
    {
      x0,
      x1,
      y,
      top,
      lo,
      hi,
      format,
      binary = false,
      labelEvery = 90,
    }: { x0: number; x1: number; y: number; top: number; lo: number; hi: number; format: Format; binary?: boolean; labelEvery?: number },
  ) {
    const t = theme()
    ctx.save()
    ctx.font = '11px system-ui, sans-serif'
    ctx.textAlign = 'center'
    ctx.textBaseline = 'top'
    for (const v of ticks(lo, hi, Math.max(2, Math.floor((x1 - x0) / labelEvery)), binary)) {
      const x = x0 + ((v - lo) / (hi - lo)) * (x1 - x0)
      ctx.fillStyle = t.grid
      ctx.fillRect(Math.round(x), top, 1, y - top)
      ctx.fillStyle = t.muted
      const label = format(v)
      const half = ctx.measureText(label).width / 2
      // Keep the end labels inside the canvas.
      ctx.fillText(label, Math.min(Math.max(x, half + 2), ctx.canvas.clientWidth - half - 2), y + 4)
    }
    ctx.fillStyle = t.axis
    ctx.fillRect(x0, y, x1 - x0, 1)
    ctx.restore()
  }
  /** Vertical axis at x0 with grid lines to x1. */
  function axisY(
    ctx: CanvasRenderingContext2D,
    {
      x0,
      x1,
      y0,
      y1,
      lo,
      hi,
      format,
      binary = false,
    }: { x0: number; x1: number; y0: number; y1: number; lo: number; hi: number; format: Format; binary?: boolean },
  ) {
    const t = theme()
    ctx.save()
    ctx.font = '11px system-ui, sans-serif'
    ctx.textAlign = 'right'
    ctx.textBaseline = 'middle'
    for (const v of ticks(lo, hi, Math.max(2, Math.floor((y0 - y1) / 40)), binary)) {
      const y = y0 - ((v - lo) / (hi - lo)) * (y0 - y1)
      ctx.fillStyle = t.grid
      ctx.fillRect(x0, Math.round(y), x1 - x0, 1)
      ctx.fillStyle = t.muted
      ctx.fillText(format(v), x0 - 6, y)
    }
    ctx.fillStyle = t.axis
    ctx.fillRect(x0, y1, 1, y0 - y1)
    ctx.restore()
  }

  /**
   * A bytes-over-steps plot: axes for steps `z.lo..z.hi` and bytes `0..maxY` inside margins
   * `M` of a `W` x `H` canvas, then a clip to the plot area (the caller restores it).
   * Returns the plot box and the step -> x and bytes -> y scales.
   */
  function bytePlot(ctx: CanvasRenderingContext2D, { W, H, M, z, maxY }: { W: number; H: number; M: Margins; z: Zoom; maxY: number }) {
    const x0 = M.l,
      x1 = W - M.r,
      y0 = H - M.b,
      y1 = M.t
    const xs: Scale = (v) => x0 + ((v - z.lo) / (z.hi - z.lo)) * (x1 - x0)
    const ys: Scale = (v) => y0 - (v / maxY) * (y0 - y1)
    axisY(ctx, { x0, x1, y0, y1, lo: 0, hi: maxY, format: bytes, binary: true })
    axisX(ctx, { x0, x1, y: y0, top: y1, lo: z.lo, hi: z.hi, format: (v) => int(v) })
    ctx.save()
    ctx.beginPath()
    ctx.rect(x0, y1, x1 - x0, y0 - y1)
    ctx.clip()
    return { x0, x1, y0, y1, xs, ys }
  }

  /** What was drawn, as data- attributes on <body> (read by tests and tools); redraws after `done` refresh them. */
  function update(counts: Counts) {
    if (document.body.dataset.rendered) done(counts)
  }
  /** Marks the page as drawn. */
  function done(counts: Counts) {
    for (const [k, v] of Object.entries(counts)) document.body.dataset[k] = String(v)
    if (!document.body.dataset.rendered) document.body.dataset.renderMs = String(Math.round(performance.now()))
    document.body.dataset.rendered = 'true'
  }

  return {
    data,
    main,
    theme,
    max,
    colourRgba,
    bytes,
    bytesLong,
    int,
    time,
    ticks,
    colour,
    esc,
    el,
    section,
    legend,
    cards,
    canvas,
    plotWidth,
    tip,
    hideTip,
    throttle,
    onResize,
    xzoom,
    axisX,
    axisY,
    bytePlot,
    done,
    update,
    formatValue,
  }
})()
