// Prometheus metrics for wgalloc's devices: gauges and counters read from the heap, host cache
// and profiler statistics when the registry is scraped (no timers, nothing between scrapes).
// The registry is prom-client's (a peer dependency); wgalloc only needs its registerMetric.
import type { KvCacheStats } from './binding.js'
import { messageOf, shown, optionKeys, optionsObject, invalidArgument } from './errors.js'
import { Gpu } from './gpu.js'

/** What wgalloc needs of a prom-client `Registry` (any registry with these methods works). */
export interface MetricsRegistry {
  /** Adds a metric; prom-client's `Registry.registerMetric`. */
  registerMetric(metric: never): void
  /** Removes a metric by name; prom-client's `Registry.removeSingleMetric`. */
  removeSingleMetric(name: string): void
}

/** Options of `registerMetrics()`. */
export interface MetricsOptions {
  /** The registry (default: prom-client's global `register`). */
  registry?: MetricsRegistry
  /** Prefix of every metric name (default `wgalloc_`). */
  prefix?: string
}

/** What `registerMetrics()` returns. */
export interface MetricsHandle {
  /** The metric names registered. */
  readonly names: readonly string[]
  /** Adds a device under label `device` = `name` (must be new). */
  add(name: string, gpu: Gpu): void
  /** Stops reporting a device. */
  remove(name: string): void
  /** Removes every metric from the registry. */
  unregister(): void
}

type Labels = Record<string, string>
type Sample = { value: number; labels: Labels }
type Kind = 'gauge' | 'counter'

interface Definition {
  name: string
  help: string
  type: Kind
  /** Samples of one device, labelled with it. */
  read: (gpu: Gpu, device: Labels) => Sample[]
}

const perPool =
  (field: 'allocatedBytes' | 'reservedBytes' | 'activeBlocks' | 'segments') =>
  (gpu: Gpu, device: Labels): Sample[] =>
    gpu.heap.stats().pools.map((p) => ({ value: p[field].current, labels: { ...device, pool: p.pool } }))

const heapFigure =
  (field: 'cachedBytes' | 'pendingFreeBytes' | 'driverAllocations' | 'driverFrees' | 'cacheHits' | 'cacheMisses' | 'ooms' | 'gcRuns' | 'bytesMoved') =>
  (gpu: Gpu, device: Labels): Sample[] => [{ value: gpu.heap.stats()[field], labels: device }]

const opLabels = (device: Labels, op: { name: string; pipeline: string }): Labels => ({ ...device, op: op.name, pipeline: op.pipeline })

/** One sample per live shape executor of the device, labelled with its name (unique per device). */
const perShapeExecutor =
  (field: 'hits' | 'misses' | 'evictions' | 'cached' | 'deviceBytes') =>
  (gpu: Gpu, device: Labels): Sample[] =>
    gpu.shapeExecutors().map((s) => ({ value: s.stats()[field], labels: { ...device, shapes: s.name } }))

/** One sample per live KV cache of the device, labelled with its name (unique per device). */
const perKvCache =
  (value: (s: KvCacheStats) => number) =>
  (gpu: Gpu, device: Labels): Sample[] =>
    gpu.kvCaches().map((c) => ({ value: value(c.stats()), labels: { ...device, cache: c.name } }))

const DEFINITIONS: Definition[] = [
  { name: 'heap_allocated_bytes', help: 'Bytes of live heap blocks (allocated sizes), per pool.', type: 'gauge', read: perPool('allocatedBytes') },
  { name: 'heap_reserved_bytes', help: 'Bytes of heap segments held from the driver, per pool.', type: 'gauge', read: perPool('reservedBytes') },
  { name: 'heap_active_blocks', help: 'Heap blocks handed out and not yet freed, per pool.', type: 'gauge', read: perPool('activeBlocks') },
  { name: 'heap_segments', help: 'Heap segments (driver buffers) held, per pool.', type: 'gauge', read: perPool('segments') },
  { name: 'heap_cached_bytes', help: 'Bytes free in heap segments, ready for reuse.', type: 'gauge', read: heapFigure('cachedBytes') },
  { name: 'heap_pending_free_bytes', help: 'Bytes freed but waiting for their GPU work to complete.', type: 'gauge', read: heapFigure('pendingFreeBytes') },
  { name: 'heap_driver_allocations_total', help: 'Segments allocated from the driver.', type: 'counter', read: heapFigure('driverAllocations') },
  { name: 'heap_driver_frees_total', help: 'Segments released to the driver.', type: 'counter', read: heapFigure('driverFrees') },
  { name: 'heap_cache_hits_total', help: 'Allocations served from cached segments.', type: 'counter', read: heapFigure('cacheHits') },
  { name: 'heap_cache_misses_total', help: 'Allocations that needed a new segment.', type: 'counter', read: heapFigure('cacheMisses') },
  { name: 'heap_ooms_total', help: 'Allocations that failed with OUT_OF_MEMORY.', type: 'counter', read: heapFigure('ooms') },
  { name: 'heap_gc_runs_total', help: 'Garbage collections of idle segments.', type: 'counter', read: heapFigure('gcRuns') },
  { name: 'heap_bytes_moved_total', help: 'Bytes of live blocks moved to make room (compaction).', type: 'counter', read: heapFigure('bytesMoved') },
  {
    name: 'memory_budget_bytes',
    help: 'The memory budget of the device.',
    type: 'gauge',
    read: (gpu, device) => [{ value: gpu.memoryBudget.bytes, labels: device }],
  },
  {
    name: 'host_allocated_bytes',
    help: 'Bytes of host staging blocks held (mapped buffers).',
    type: 'gauge',
    read: (gpu, device) => [{ value: gpu.host.stats().allocatedBytes.current, labels: device }],
  },
  {
    name: 'host_cached_bytes',
    help: 'Bytes of idle host staging blocks ready for reuse.',
    type: 'gauge',
    read: (gpu, device) => [{ value: gpu.host.stats().cachedBytes, labels: device }],
  },
  {
    name: 'scope_allocated_bytes',
    help: 'Bytes charged to a heap scope (a tenant or model quota), by scope path.',
    type: 'gauge',
    read: (gpu, device) => gpu.heap.scopes().map((sc) => ({ value: sc.stats().allocatedBytes, labels: { ...device, scope: sc.path } })),
  },
  {
    name: 'scope_limit_bytes',
    help: 'The limit of a heap scope, by scope path.',
    type: 'gauge',
    read: (gpu, device) => gpu.heap.scopes().map((sc) => ({ value: sc.limit, labels: { ...device, scope: sc.path } })),
  },
  {
    name: 'scope_quota_exceeded_total',
    help: 'Allocations refused for a heap scope limit, by scope path.',
    type: 'counter',
    read: (gpu, device) => gpu.heap.scopes().map((sc) => ({ value: sc.stats().quotaExceeded, labels: { ...device, scope: sc.path } })),
  },
  { name: 'shape_executor_hits_total', help: 'Shape-executor runs served by a cached executor.', type: 'counter', read: perShapeExecutor('hits') },
  {
    name: 'shape_executor_misses_total',
    help: 'Shape-executor runs that compiled an executor for their shape (a miss costs a compile and new slabs).',
    type: 'counter',
    read: perShapeExecutor('misses'),
  },
  {
    name: 'shape_executor_evictions_total',
    help: 'Executors a shape executor released to stay within its capacity (misses far above evictions + cached mean a capacity too small).',
    type: 'counter',
    read: perShapeExecutor('evictions'),
  },
  { name: 'shape_executor_cached', help: 'Executors a shape executor holds.', type: 'gauge', read: perShapeExecutor('cached') },
  {
    name: 'shape_executor_device_bytes',
    help: 'Device bytes the cached executors of a shape executor hold.',
    type: 'gauge',
    read: perShapeExecutor('deviceBytes'),
  },
  {
    name: 'kv_cache_blocks',
    help: 'Blocks of a KV cache by state: used (some sequence refers to them), cached (kept for prefix hits) or free.',
    type: 'gauge',
    read: (gpu, device) =>
      gpu.kvCaches().flatMap((c) => {
        const s = c.stats()
        const at = (state: string, value: number) => ({ value, labels: { ...device, cache: c.name, state } })
        return [at('used', s.usedBlocks), at('cached', s.cachedBlocks), at('free', s.freeBlocks)]
      }),
  },
  { name: 'kv_cache_usage_ratio', help: 'Used blocks of a KV cache over its blocks.', type: 'gauge', read: perKvCache((s) => s.usedBlocks / s.totalBlocks) },
  { name: 'kv_cache_sequences', help: 'Live sequences of a KV cache, swapped-out ones included.', type: 'gauge', read: perKvCache((s) => s.sequences) },
  {
    name: 'kv_cache_swapped_sequences',
    help: 'Sequences of a KV cache swapped out to host memory.',
    type: 'gauge',
    read: perKvCache((s) => s.swappedSequences),
  },
  {
    name: 'kv_cache_prefix_hit_ratio',
    help: 'Prompt tokens served from the prefix cache over those looked up, since the cache was made.',
    type: 'gauge',
    read: perKvCache((s) => (s.prefixQueryTokens ? s.prefixHitTokens / s.prefixQueryTokens : 0)),
  },
  {
    name: 'kv_cache_prefix_query_tokens_total',
    help: 'Prompt tokens looked up in the prefix cache (whole blocks).',
    type: 'counter',
    read: perKvCache((s) => s.prefixQueryTokens),
  },
  {
    name: 'kv_cache_prefix_hit_tokens_total',
    help: 'Prompt tokens served from the prefix cache.',
    type: 'counter',
    read: perKvCache((s) => s.prefixHitTokens),
  },
  { name: 'kv_cache_evictions_total', help: 'Cached KV blocks evicted to serve an allocation.', type: 'counter', read: perKvCache((s) => s.evictions) },
  {
    name: 'kv_cache_copies_on_write_total',
    help: 'Shared partial KV blocks copied on their first write.',
    type: 'counter',
    read: perKvCache((s) => s.copiesOnWrite),
  },
  { name: 'kv_cache_swapped_out_blocks_total', help: 'KV blocks copied to host memory.', type: 'counter', read: perKvCache((s) => s.swappedOutBlocks) },
  { name: 'kv_cache_swapped_in_blocks_total', help: 'KV blocks written back from host memory.', type: 'counter', read: perKvCache((s) => s.swappedInBlocks) },
  // The profiler keeps one row per (op name, pipeline): a graph may run several kernels under
  // one op name, and executors may reuse a name. Labelled by op alone, those rows were several
  // samples of one series in a scrape. They carry the pipeline as a label rather than being
  // summed per op: the label set is then the profiler's own key (one row, one series), the time
  // per kernel the profiler measured stays visible, and `sum by (device, op)` gives the per-op
  // figure at query time. (sample() below still sums any rows that share a label set.)
  {
    name: 'profiler_kernel_seconds_total',
    help: 'GPU time of profiled kernels, per op and pipeline (only while the profiler records).',
    type: 'counter',
    read: (gpu, device) => gpu.profiler.stats().operations.map((op) => ({ value: op.totalGpuMs / 1000, labels: opLabels(device, op) })),
  },
  {
    name: 'profiler_kernel_runs_total',
    help: 'Runs of profiled kernels, per op and pipeline (only while the profiler records).',
    type: 'counter',
    read: (gpu, device) => gpu.profiler.stats().operations.map((op) => ({ value: op.runs, labels: opLabels(device, op) })),
  },
]

const LABEL = /^[a-zA-Z_][a-zA-Z0-9_]*$/

/** The identity of a series within a family: its label set, whatever the order of the labels. */
function seriesKey(labels: Labels): string {
  return JSON.stringify(Object.entries(labels).sort(([a], [b]) => (a < b ? -1 : 1)))
}

/**
 * One sample per label set, in first-seen order: rows that share one are summed. A family whose
 * rows are finer than its labels would otherwise put one series in a scrape several times, which
 * Prometheus rejects, and the counter guard below, keyed by labels, would take the alternation
 * between those rows for resets and carry each drop over, so the counter would grow on every
 * scrape with no work done. Summing is right for every family exported: rows that can share a
 * label set are bytes, blocks, runs or seconds, which add up; the families that are not sums
 * (`memory_budget_bytes`, `scope_limit_bytes`) have one row per device or per scope path, which
 * never repeat. Reads already give one row per label set today (pools are a fixed list, scope
 * paths are unique, profiler rows carry their pipeline); this keeps the exposition valid if a
 * read ever does not.
 */
function oneSamplePerSeries(values: Sample[]): Sample[] {
  const merged = new Map<string, Sample>()
  for (const v of values) {
    const key = seriesKey(v.labels)
    const seen = merged.get(key)
    if (seen === undefined) merged.set(key, { ...v })
    else seen.value += v.value
  }
  return [...merged.values()]
}

/**
 * Keeps a counter's series from going down: what it is read from may start again from zero
 * (`profiler.resetStats()`, a new profiler session), and Prometheus takes any decrease for a
 * restart of the process. A series that drops has its previous total carried on top. A series
 * missing from a read (the profiler's row of an op is gone after a reset until the op runs
 * again) dropped to zero: its total is carried too, and it comes back above it.
 */
function monotonicCounter(): (values: Sample[]) => Sample[] {
  const series = new Map<string, { last: number; carried: number }>()
  return (values) => {
    const seen = new Set<string>()
    const out = values.map((v) => {
      const key = seriesKey(v.labels)
      seen.add(key)
      const s = series.get(key) ?? { last: 0, carried: 0 }
      if (v.value < s.last) s.carried += s.last
      s.last = v.value
      series.set(key, s)
      return { ...v, value: s.carried + v.value }
    })
    for (const [key, s] of series) {
      if (seen.has(key)) continue
      s.carried += s.last
      s.last = 0
    }
    return out
  }
}

function defaultRegistry(): MetricsRegistry {
  try {
    return (require('prom-client') as { register: MetricsRegistry }).register
  } catch (err) {
    throw invalidArgument(
      ['registerMetrics', 'options.registry'],
      'a registry, or prom-client installed (a peer dependency)',
      'undefined',
      'install prom-client, or pass options.registry',
      { cause: err },
    )
  }
}

/**
 * Registers wgalloc's metrics for `devices` (a Gpu, an array, or `{ name: Gpu }`; the label
 * `device` is the name, or the index) in a prom-client registry. Values are read from
 * `heap.stats()`, `host.stats()` and `profiler.stats()` at scrape time; a lost device reports
 * nothing. Names follow Prometheus conventions: `wgalloc_heap_reserved_bytes{device,pool}`,
 * `wgalloc_heap_driver_allocations_total{device}`, ...
 *
 * @example
 * ```js
 * const client = require('prom-client')
 * const { registerMetrics } = require('wgalloc/metrics')
 * registerMetrics({ main: gpu })
 * http.createServer(async (req, res) => res.end(await client.register.metrics()))
 * ```
 */
export function registerMetrics(devices: Gpu | Gpu[] | Record<string, Gpu>, opts?: MetricsOptions | null): MetricsHandle {
  const options = optionsObject(opts, 'registerMetrics', optionKeys<MetricsOptions>({ registry: true, prefix: true }))
  const prefix = options.prefix ?? 'wgalloc_'
  if (typeof prefix !== 'string' || (prefix !== '' && !/^[a-zA-Z_:][a-zA-Z0-9_:]*$/.test(prefix)))
    throw invalidArgument(['registerMetrics', 'options.prefix'], "a metric name prefix such as 'wgalloc_'", shown(prefix))
  const registry = options.registry ?? defaultRegistry()
  const gpus = new Map<string, Gpu>()
  const add = (name: string, gpu: Gpu) => {
    if (typeof name !== 'string' || name === '') throw invalidArgument(['registerMetrics', 'device name'], 'a non-empty string', shown(name))
    if (gpus.has(name)) throw invalidArgument(['registerMetrics', 'device name'], 'a name not registered already', shown(name))
    if (!(gpu instanceof Gpu)) throw invalidArgument(['registerMetrics', `device '${name}'`], 'a Gpu', shown(gpu))
    gpus.set(name, gpu)
  }
  if (Array.isArray(devices)) {
    for (const [i, g] of devices.entries()) add(String(i), g)
  } else if (devices instanceof Gpu) add('0', devices)
  else if (devices !== null && typeof devices === 'object') for (const [k, g] of Object.entries(devices)) add(k, g)
  else throw invalidArgument(['registerMetrics', 'devices'], 'a Gpu, an array of Gpus or { name: Gpu }', shown(devices))

  const names = DEFINITIONS.map((d) => `${prefix}${d.name}`)
  for (const n of names)
    if (!LABEL.test(n.replace(/:/g, '_')))
      throw invalidArgument(['registerMetrics', 'options.prefix'], 'a prefix that makes metric names', shown(n), 'not a metric name')
  const metrics = DEFINITIONS.map((d, i) => {
    const name = names[i]
    const monotonic = d.type === 'counter' ? monotonicCounter() : (values: Sample[]) => values
    const sample = () => {
      const values: Sample[] = []
      for (const [device, gpu] of gpus) {
        if (gpu.lost) continue
        try {
          values.push(...d.read(gpu, { device }))
        } catch {
          // A device lost between the check and the read reports nothing this scrape.
        }
      }
      return monotonic(oneSamplePerSeries(values))
    }
    // prom-client's metric interface: name, help, type, aggregator, get(), reset().
    return {
      name,
      help: d.help,
      type: d.type,
      aggregator: 'sum',
      get: async () => ({ name, help: d.help, type: d.type, aggregator: 'sum', values: sample() }),
      reset: () => {},
    }
  })
  const added: string[] = []
  try {
    for (const m of metrics) {
      registry.registerMetric(m as never)
      added.push(m.name)
    }
  } catch (err) {
    // All or nothing: a name the registry holds already leaves it as it was.
    for (const n of added) registry.removeSingleMetric(n)
    throw invalidArgument(
      ['registerMetrics', 'options.registry'],
      'a registry without these metrics',
      'one that refused them',
      `${messageOf(err)} (use another registry or prefix, or unregister() first)`,
      { cause: err },
    )
  }
  return {
    names,
    add,
    remove(name: string) {
      gpus.delete(name)
    },
    unregister() {
      for (const n of names) registry.removeSingleMetric(n)
    },
  }
}
