// ESM entry: the same objects as the CommonJS entry (one native module instance). Loaded with
// require rather than `import ... from './index.js'`: on Node 20 a CommonJS module that throws
// while imported (no binary for this platform) is also reported as an uncaught exception even
// when the import is caught (nodejs/node#51603); thrown from this module's own body, it is
// catchable.
// The list below names every value export of index.ts (a test compares the two entries).
import { createRequire } from 'node:module'

type Wgalloc = typeof import('./index.js')
const wgalloc: Wgalloc = createRequire(import.meta.url)('./index.js')

export const {
  Gpu,
  GpuBuffer,
  GpuEvent,
  Stream,
  Heap,
  HeapScope,
  DeviceBlock,
  Executor,
  Weights,
  ShapeExecutor,
  Host,
  HostBlock,
  Profiler,
  ComputeKernel,
  KvCache,
  KvSequence,
  MemoryPlan,
  planMemory,
  STRATEGIES,
  WgallocError,
  ERROR_CODES,
  CHANNELS,
  MAX_HISTORY_ENTRIES,
  renderHtml,
  detectKind,
  readJsonFile,
  recordMemoryHistory,
  replayHistory,
  VIEW_KINDS,
  registerMetrics,
} = wgalloc
export default wgalloc
