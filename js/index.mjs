// ESM entry: the same objects as the CommonJS entry (one native module instance).
import wgalloc from './index.cjs'

export const { Gpu, GpuBuffer, GpuEvent, Stream, Heap, DeviceBlock, Executor, Host, HostBlock, Profiler, MemoryPlan, planMemory, STRATEGIES, WgallocError, ERROR_CODES, CHANNELS } = wgalloc
export default wgalloc
