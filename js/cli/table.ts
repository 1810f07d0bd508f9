// Plain-text tables for the CLI: columns padded to their widest cell.

/** A table cell: numbers are right-aligned. */
export type Cell = string | number

/** `rows` under `header`, columns padded to their widest cell. */
export function table(header: string[], rows: Cell[][]): string {
  const all = [header, ...rows].map((r) => r.map((c) => String(c)))
  const widths = header.map((_, i) => Math.max(...all.map((r) => r[i].length)))
  const numeric = header.map((_, i) => rows.length > 0 && rows.every((r) => typeof r[i] === 'number'))
  const fmt = (r: string[]) =>
    r
      .map((c, i) => (numeric[i] ? c.padStart(widths[i]) : c.padEnd(widths[i])))
      .join('  ')
      .trimEnd()
  return [fmt(all[0]), widths.map((w) => '-'.repeat(w)).join('  '), ...all.slice(1).map(fmt)].join('\n')
}

/** `n` bytes in binary units. */
export function bytes(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB']
  let i = 0
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024
    i++
  }
  return `${Number.isInteger(n) ? n : n.toFixed(1)} ${units[i]}`
}
