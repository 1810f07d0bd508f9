// docs/errors.md is checked against the code: its table names exactly the codes wgalloc has,
// every code the Rust crates and the binding raise is one of them, and each documented
// failure that can be provoked here raises the code the table gives it.
import { mkdtempSync, readFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import test from 'ava'
import { ERROR_CODES, Gpu, type WgallocErrorCode, planMemory } from 'wgalloc'

const root = join(__dirname, '..')
const read = (path: string) => readFileSync(join(root, path), 'utf8')

/** The codes of docs/errors.md's table (a row may name two). */
function documentedCodes(): string[] {
  const table = read('docs/errors.md')
    .split('\n')
    .filter((l) => /^\| `[A-Z_]+`/.test(l))
  return table.flatMap((row) => [...row.split('|')[1].matchAll(/`([A-Z_]+)`/g)].map((m) => m[1]))
}

test('the table of docs/errors.md names exactly ERROR_CODES', (t) => {
  t.deepEqual([...documentedCodes()].sort(), [...ERROR_CODES].sort())
})

test('every code the Rust crates and the binding raise is in ERROR_CODES', (t) => {
  const sources = [
    'crates/wgalloc-core/src/error.rs',
    'crates/wgalloc-plan/src/error.rs',
    'crates/wgalloc-kv/src/error.rs',
    'src/error.rs',
    ...['exec', 'heap', 'host', 'gpu', 'kv', 'shapes', 'plan', 'weights', 'stream', 'block_ids'].map((f) => `src/${f}.rs`),
  ]
  const raised = new Set<string>()
  for (const f of sources) for (const m of read(f).matchAll(/(?:=> |coded\()"([A-Z][A-Z_]+)"/g)) raised.add(m[1])
  t.true(raised.size >= 15, [...raised].join(', '))
  for (const code of raised) t.true((ERROR_CODES as readonly string[]).includes(code), `${code} is raised but not in ERROR_CODES`)
})

/** What provokes each documented failure; null where this machine cannot, with the reason. */
const PROVOKE: Record<WgallocErrorCode, ((gpu: Gpu) => unknown) | { not: string }> = {
  INVALID_ARGUMENT: (gpu) => gpu.heap.malloc(-1),
  PARSE_ERROR: (gpu) => gpu.compile('{ "tensors": [ '),
  IO_ERROR: async (gpu) => {
    gpu.profiler.start({ mode: 'interval' })
    try {
      await gpu.profiler.exportTrace(join(mkdtempSync(join(tmpdir(), 'wgalloc-errors-')), 'missing', 'deeper', 'trace.json'))
    } finally {
      gpu.profiler.stop()
    }
  },
  SIZE_OVERFLOW: () =>
    planMemory([
      { id: 'a', size: 2 ** 52, first: 0, last: 1 },
      { id: 'b', size: 2 ** 52, first: 0, last: 1 },
      { id: 'c', size: 2 ** 52, first: 0, last: 1 },
    ]),
  ADAPTER_NOT_FOUND: () => Gpu.request({ adapterIndex: 999 }),
  DEVICE_REQUEST_FAILED: { not: 'the driver refusing a device cannot be provoked on lavapipe' },
  DEVICE_LOST: async () => {
    const other = await Gpu.request()
    other.destroy()
    return other.heap.malloc(16)
  },
  OUT_OF_MEMORY: async () => {
    const small = await Gpu.request({ memoryBudget: 1 << 20 })
    try {
      small.heap.malloc(4 << 20)
    } finally {
      small.destroy()
    }
  },
  GPU_VALIDATION: { not: "by definition, what wgalloc's own checks let through; fuzz-regressions.test.ts pins past cases" },
  SHADER_ERROR: (gpu) =>
    gpu.compile({
      kernels: { k: { source: 'fn main( {' } },
      tensors: [{ id: 'y', size: 4, kind: 'output' }],
      ops: [{ kernel: 'k', inputs: [], outputs: ['y'] }],
    }),
  USE_AFTER_FREE: (gpu) => {
    const b = gpu.heap.malloc(16)
    b.free()
    return b.read()
  },
  DOUBLE_FREE: (gpu) => {
    const b = gpu.heap.malloc(16)
    b.free()
    b.free()
  },
  EXECUTOR_BUSY: async (gpu) => {
    const source =
      '@group(0) @binding(0) var<storage, read_write> x: array<u32>;\n@group(0) @binding(1) var<storage, read_write> y: array<u32>;\n@compute @workgroup_size(1) fn main() { y[0] = x[0]; }'
    const size = 4 << 20
    const exe = await gpu.compile({
      kernels: { k: { source } },
      tensors: [
        { id: 'x', size, kind: 'input' },
        { id: 'y', size, kind: 'output' },
      ],
      ops: [{ kernel: 'k', inputs: ['x'], outputs: ['y'] }],
    })
    // Runs that upload and read back 4 MiB each, checked op by op, are queued or in flight when
    // the next call comes (each is claimed when called).
    const queued = Array.from({ length: 4 }, () => exe.run({ x: new Uint8Array(size) }, { checkPlan: true }))
    try {
      await exe.run({ x: new Uint8Array(size) }, { wait: false })
    } finally {
      await Promise.all(queued)
      exe.release()
    }
  },
  ABORTED: (gpu) => gpu.download(gpu.heap.malloc(16), { signal: AbortSignal.abort() }),
  PLAN_INVALID: { not: 'a plan the planner made always passes the checker; crates/wgalloc-core/tests/exec.rs corrupts one for checkPlan' },
  INFEASIBLE: () => planMemory([{ id: 'a', size: 64, first: 0, last: 1 }], { capacity: 32 }),
  CAPACITY_NOT_MET: { not: 'needs a search that runs out of time below a capacity; crates/wgalloc-plan/tests/features.rs covers it' },
  PROFILER_STATE: (gpu) => gpu.profiler.stop(),
  BINARY_NOT_FOUND: { not: 'needs the addon missing; binding-error.test.ts loads a copy of the package without it' },
  KV_CACHE_FULL: (gpu) => {
    const cache = gpu.createKvCache({ layers: 1, kvHeads: 1, headDim: 4, blockTokens: 4, maxBlocks: 1, maxSequenceLength: 16 })
    try {
      cache.addSequence().append([1, 2, 3, 4, 5])
    } finally {
      cache.release()
    }
  },
  QUOTA_EXCEEDED: (gpu) => gpu.heap.scope({ name: `quota-${Date.now()}`, limit: 256 }).malloc(1024),
  INTERNAL: { not: 'a bug in wgalloc' },
}

test('each documented failure that can be provoked here raises the documented code', async (t) => {
  const gpu = await Gpu.request()
  t.teardown(() => gpu.destroy())
  t.deepEqual(Object.keys(PROVOKE).sort(), [...ERROR_CODES].sort(), 'a way to provoke every code, or why not')
  for (const [code, provoke] of Object.entries(PROVOKE)) {
    if (typeof provoke !== 'function') {
      t.true(provoke.not.length > 0, code)
      continue
    }
    const err = await t.throwsAsync(async () => provoke(gpu), undefined, code)
    t.is((err as { code?: string } | undefined)?.code, code, `${code}: ${err?.message}`)
  }
})
