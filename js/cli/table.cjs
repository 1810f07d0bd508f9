'use strict'
// Plain-text tables for the CLI: columns padded to their widest cell.

/** rows: arrays of cells; numbers are right-aligned. */
function table(header, rows) {
  const all = [header, ...rows].map((r) => r.map((c) => String(c)))
  const widths = header.map((_, i) => Math.max(...all.map((r) => r[i].length)))
  const numeric = header.map((_, i) => rows.length > 0 && rows.every((r) => typeof r[i] === 'number'))
  const fmt = (r) =>
    r
      .map((c, i) => (numeric[i] ? c.padStart(widths[i]) : c.padEnd(widths[i])))
      .join('  ')
      .trimEnd()
  return [fmt(all[0]), widths.map((w) => '-'.repeat(w)).join('  '), ...all.slice(1).map(fmt)].join('\n')
}

function bytes(n) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB']
  let i = 0
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024
    i++
  }
  return `${Number.isInteger(n) ? n : n.toFixed(1)} ${units[i]}`
}

module.exports = { table, bytes }
