// Types of the `wgalloc/metrics` entry (dist/metrics.js): declared once, in index.d.ts, and
// re-exported here so that this entry's types hold what it exports and nothing else.
export { type MetricsHandle, type MetricsOptions, type MetricsRegistry, registerMetrics } from './index.js'
