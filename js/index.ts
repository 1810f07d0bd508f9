/**
 * GPU memory management for WebGPU in Node: a caching device heap, a host staging cache
 * with stream events, a static memory planner and executor, and a profiler, over wgpu.
 *
 * @example
 * ```js
 * const { Gpu } = require('wgalloc')
 * async function main() {
 *   const gpu = await Gpu.request()
 *   const block = gpu.heap.malloc(1024)
 *   await gpu.upload(block, new Uint8Array(1024).fill(7))
 *   const bytes = await gpu.download(block)
 *   block.free()
 *   gpu.destroy()
 * }
 * ```
 * @module
 */
export type * from './internal/binding-types.js'
export { GpuBuffer } from './buffer.js'
export type { TensorData, TypedArrayClass } from './internal/bytes.js'
export { DeviceBlock, type MallocOptions, type PoolName, type ReadOptions } from './device-block.js'
export {
  CHANNELS,
  type DeviceChannelMessage,
  type DeviceDestroyMessage,
  type DeviceErrorMessage,
  type DeviceLostMessage,
  type DeviceOpenMessage,
  type DeviceWarningMessage,
  type HeapChannelMessage,
  type HostBlockMessage,
  type HostChannelMessage,
  type HostTransferMessage,
  type ProfilerChannelMessage,
} from './diagnostics.js'
export {
  type CodedError,
  ERROR_CODES,
  type ErrorDetails,
  type InvalidArgumentDetails,
  type KvCacheFullDetails,
  type OutOfMemoryDetails,
  type OutOfMemorySource,
  type QuotaExceededDetails,
  WgallocError,
  type WgallocErrorCode,
} from './errors.js'
export { GpuEvent } from './event.js'
export {
  type CompileOptions,
  type CompileShapesOptions,
  type CreateWeightsOptions,
  type DeviceExecResult,
  type DeviceRunOptions,
  type ExecObservation,
  type ExecResult,
  Executor,
  type NoOutputBlocks,
  type OutputBlocks,
  type RunResultOf,
  type RunEagerOptions,
  type RunOptions,
  ShapeExecutor,
  Weights,
} from './exec.js'
export {
  type Backend,
  type DownloadOptions,
  type EnumerateOptions,
  Gpu,
  type GpuRequestOptions,
  type HeapRequestOptions,
  type UploadBatchItem,
  type UploadOptions,
} from './gpu.js'
export type {
  DType,
  DTypeArrays,
  Dispatch,
  Graph,
  GraphDims,
  GraphInputs,
  GraphIsLiteral,
  GraphKernel,
  GraphOp,
  GraphOutputIds,
  GraphOutputs,
  GraphTensor,
  GraphTensorIds,
  GraphTensorOf,
  GraphWithDims,
  OpParams,
  OutputArray,
  TensorOfKind,
  TensorWithDType,
} from './graph.js'
export { Heap, type HeapProfile, type HeapProfilePool } from './heap.js'
export { HeapScope, type HeapScopeOptions, type HeapScopeStats, type ScopeCharge } from './heap-scope.js'
export type { HeapEventKind, OutOfMemoryEvent } from './heap-events.js'
export {
  type HistoryEntry,
  type HistorySnapshotBlock,
  type HistorySnapshotSegment,
  type KvCacheLeak,
  type LeakGroup,
  type LeakReport,
  MAX_HISTORY_ENTRIES,
  type MemorySnapshot,
  type RecordHistoryOptions,
  type StackSampling,
} from './heap-history.js'
export { Host } from './host.js'
export { HostBlock, type HostDirection } from './host-block.js'
export { ComputeKernel } from './kernel.js'
export {
  type KvAttentionOptions,
  KvCache,
  type KvCacheOptions,
  type KvDtype,
  type KvKernel,
  type KvKernelSourceOptions,
  type KvLookup,
  KvSequence,
  type KvSequenceOptions,
  type KvStepEntry,
} from './kv.js'
export type { KvCacheSnapshot, KvSequenceSnapshot } from './internal/kv-registry.js'
export {
  MemoryPlan,
  type MemoryPlanJSON,
  type PlanMemoryCallOptions,
  type PlannedAlias,
  type PlannedGraph,
  type PlannedRecord,
  planMemory,
  STRATEGIES,
  type Strategy,
  type UsageRecord,
} from './plan.js'
export { type FlushOptions, type ProfileOptions, Profiler, type ProfilerMode, type ProfilerStartOptions } from './profiler.js'
export type { AsyncOptions } from './internal/signal.js'
export { type MetricsHandle, type MetricsOptions, type MetricsRegistry, registerMetrics } from './metrics.js'
export type { Trace, TraceEvent } from './replay.js'
export { Stream } from './stream.js'
export {
  detectKind,
  type MemoryHistorySnapshot,
  type MemoryRecorder,
  type RenderHtmlOptions,
  type ReplayedTrace,
  readJsonFile,
  recordMemoryHistory,
  renderHtml,
  replayHistory,
  VIEW_KINDS,
  type ViewKind,
} from './view/index.js'
