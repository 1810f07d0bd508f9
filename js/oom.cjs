'use strict'
// Out-of-memory reports: the figures of a failed malloc as `err.details`, and, with
// WGALLOC_OOM_SNAPSHOT=<dir>, the heap's snapshot written there for later study.
const { mkdirSync, writeFileSync } = require('node:fs')
const { join, resolve } = require('node:path')

// The native heap's message names every figure (crates/wgalloc-core/src/heap/mod.rs `fail`).
const FIGURES =
  /Tried to allocate (\d+) bytes \((\d+) aligned, pool ([\w-]+)\); allocated (\d+), cached (\d+), pending free (\d+), reserved (\d+), high watermark (\d+|disabled)[^,]*, budget (\d+); largest free block (\d+)/

let written = 0

/** `err.details` of an OUT_OF_MEMORY from `malloc(size)`: the request and the heap's figures. */
function oomDetails(err, requested) {
  const m = FIGURES.exec(err.message)
  if (!m) return { requested }
  const n = (i) => Number(m[i])
  return {
    requested: n(1),
    aligned: n(2),
    pool: m[3],
    allocated: n(4),
    cached: n(5),
    pendingFree: n(6),
    reserved: n(7),
    highWatermark: m[8] === 'disabled' ? null : n(8),
    budget: n(9),
    largestFreeBlock: n(10),
  }
}

/** Writes the heap's snapshot into WGALLOC_OOM_SNAPSHOT when set; returns its path (or null). */
function writeOomSnapshot(heap, details) {
  const dir = process.env.WGALLOC_OOM_SNAPSHOT
  if (!dir) return null
  try {
    mkdirSync(dir, { recursive: true })
    const path = resolve(join(dir, `wgalloc-oom-${process.pid}-${++written}.json`))
    writeFileSync(path, `${JSON.stringify({ kind: 'wgalloc-oom', details, stats: heap.stats(), segments: heap.snapshot() })}\n`)
    return path
  } catch {
    // A report must not turn an OOM into another error.
    return null
  }
}

module.exports = { oomDetails, writeOomSnapshot }
