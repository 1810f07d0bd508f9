// Every INVALID_ARGUMENT carries details { path, expected, got }, whichever layer refused the
// argument: the facade, the binding's own checks, napi-rs's conversions, the core, the planner,
// the KV cache; on synchronous and asynchronous calls alike.
import { readFileSync, readdirSync } from 'node:fs'
import { join } from 'node:path'
import test, { type ExecutionContext } from 'ava'
import { type Graph, type WgallocError, planMemory } from 'wgalloc'
import { gpu } from './helpers.js'

/**
 * Asserts `err` is an INVALID_ARGUMENT whose details name `path` (a substring) and are made of
 * strings; `derived`: its message is made of them (errors whose variant carries its own figures,
 * such as a record's lifetime, keep their own sentence).
 */
function fields(t: ExecutionContext, err: WgallocError | undefined, path: string | RegExp, layer: string, derived = true): void {
  if (!err) return void t.fail(`${layer}: no error`)
  t.is(err.code, 'INVALID_ARGUMENT', `${layer}: ${err.message}`)
  const d = err.details ?? {}
  for (const key of ['path', 'expected', 'got'] as const) {
    const v = d[key]
    t.true(typeof v === 'string' && v.length > 0, `${layer}: details.${key} is ${String(v)} (${err.message})`)
  }
  if (typeof path === 'string') t.true(String(d.path).includes(path), `${layer}: path ${String(d.path)} names ${path}`)
  else t.regex(String(d.path), path, layer)
  if (derived) t.true(err.message.includes(`${d.path}: expected ${d.expected}, got ${d.got}`), `${layer}: ${err.message}`)
}

test('each layer gives INVALID_ARGUMENT its path, expectation and value', async (t) => {
  const g = await gpu()
  // Core: the heap's own size check (malloc(0) passes the binding's integer check).
  const zero = t.throws<WgallocError>(() => g.heap.malloc(0))
  fields(t, zero, 'size', 'core malloc(0)')
  t.is(zero?.details?.got, '0')
  // Binding: to_u64 refuses a negative byte count before the core sees it.
  const negative = t.throws<WgallocError>(() => g.createBuffer(-1))
  fields(t, negative, 'size', 'binding to_u64')
  t.is(negative?.details?.got, '-1')
  // Facade: its own option check.
  const usage = t.throws<WgallocError>(() => g.heap.malloc(64, { usage: 'fast' as never }))
  fields(t, usage, 'usage', 'facade malloc options')
  t.is(usage?.details?.got, "'fast'")
  // napi-rs: a string where the binding takes a number.
  const typed = t.throws<WgallocError>(() => g.createBuffer('big' as never))
  fields(t, typed, /./, 'napi type')
  t.is(typed?.details?.expected, 'a number')
  t.is(typed?.details?.got, 'a string')
  // Core, deeper: a graph whose tensor has no size, at compile (async).
  const graph = {
    kernels: { k: { source: '@compute @workgroup_size(1) fn main() {}' } },
    tensors: [{ id: 'x', kind: 'input' }],
    ops: [],
  } as unknown as Graph
  const compiled = await t.throwsAsync<WgallocError>(g.compile(graph))
  fields(t, compiled, 'tensors[0].size', 'core graph (async)')
  t.is(compiled?.details?.got, 'undefined')
})

test('the planner gives its INVALID_ARGUMENTs details, records as objects or text', async (t) => {
  // A record whose first op is after its last: a data variant of the planner's error.
  const lifetime = await t.throwsAsync<WgallocError>(planMemory([{ id: 'a', size: 8, first: 3, last: 1 }]))
  fields(t, lifetime, '"a".first', 'planner lifetime', false)
  t.is(lifetime?.details?.got, '3')
  // A bad field of records given as objects: the planner's PARSE_ERROR becomes INVALID_ARGUMENT.
  const field = await t.throwsAsync<WgallocError>(planMemory([{ id: 'a', size: -4, first: 0, last: 1 }]))
  fields(t, field, 'records[0].size', 'planner field')
  t.is(field?.details?.got, '-4')
  // The same field as JSON text stays PARSE_ERROR, with the same details.
  const text = await t.throwsAsync<WgallocError>(planMemory(JSON.stringify([{ id: 'a', size: -4, first: 0, last: 1 }])))
  t.is(text?.code, 'PARSE_ERROR')
  t.is(text?.details?.path, 'records[0].size')
  // An unknown strategy: the planner's own InvalidArgument.
  const strategy = await t.throwsAsync<WgallocError>(planMemory([{ id: 'a', size: 8, first: 0, last: 1 }], { strategy: 'fastest' as never }))
  fields(t, strategy, 'strategy', 'planner strategy')
})

test('KV cache options name what was wrong, in the facade and the core', async (t) => {
  const g = await gpu()
  const kv = t.throws<WgallocError>(() =>
    g.createKvCache({ name: 'invalid-argument-test', layers: 1, kvHeads: 1, headDim: 8, blockTokens: 4, maxSequences: 1, maxSequenceLength: 8, maxBytes: 1 }),
  )
  fields(t, kv, 'maxBytes', 'kv options')
  t.is(kv?.details?.got, '1')
  const facade = t.throws<WgallocError>(() =>
    g.createKvCache({ name: 'invalid-argument-test', layers: 0, kvHeads: 1, headDim: 8, blockTokens: 4, maxSequences: 1, maxSequenceLength: 8, maxBlocks: 4 }),
  )
  fields(t, facade, 'layers', 'facade u32')
})

// Every INVALID_ARGUMENT is built by one constructor per layer, which takes its data: a site
// that wrote the code by hand would raise one without details.
const sources = (dir: string, ext: string): string[] =>
  readdirSync(dir, { recursive: true, encoding: 'utf8' })
    .filter((f) => f.endsWith(ext))
    .map((f) => join(dir, f))

test('no INVALID_ARGUMENT is raised without its data, in the facade or the binding', (t) => {
  const root = join(__dirname, '..')
  // js/errors.ts holds the constructor; js/plan.ts re-codes a planner field error, details copied.
  const facade = sources(join(root, 'js'), '.ts').filter((f) => !/[/\\](errors|plan)\.ts$/.test(f))
  const byHand = facade.filter((f) => readFileSync(f, 'utf8').includes("new WgallocError('INVALID_ARGUMENT'"))
  t.deepEqual(byHand, [], 'use invalidArgument(path, expected, got) from js/errors.ts')
  const binding = sources(join(root, 'src'), '.rs').filter((f) => readFileSync(f, 'utf8').includes('coded("INVALID_ARGUMENT"'))
  t.deepEqual(binding, [], 'use error::invalid(path, expected, got) in src/')
  const core = ['crates']
    .flatMap((d) => sources(join(root, d), '.rs'))
    .filter((f) => /InvalidArgument\((format!|String|msg|"|m\))/.test(readFileSync(f, 'utf8')))
  t.deepEqual(core, [], 'core and crate errors take (path, expected, got)')
})

// Note: `details.path` is the argument as the caller names it; the call goes in `details.call`
// (`invalidArgument([call, path], ...)`, `.in_call(call)`), never into the path.
test('no INVALID_ARGUMENT path names its call, and a call named apart reaches details.call', async (t) => {
  const root = join(__dirname, '..')
  const prefixed = (files: string[], pattern: RegExp) => files.flatMap((f) => (readFileSync(f, 'utf8').match(pattern) ?? []).map((m) => `${f}: ${m}`))
  const facade = prefixed(sources(join(root, 'js'), '.ts'), /invalidArgument\(\s*[`'][A-Za-z$][\w.{} ]*: /g)
  t.deepEqual(facade, [], 'pass [call, path] to invalidArgument')
  const rust = prefixed(
    [...sources(join(root, 'src'), '.rs'), ...sources(join(root, 'crates'), '.rs')],
    /(?:(?:invalid|invalid_hint)\(\s*(?:format!\()?|to_u64\([^,()]*,\s*)"[A-Za-z{'][\w.{}' ]*: /g,
  )
  t.deepEqual(rust, [], 'use .in_call(call) (to_u64_in, invalid_in in the binding)')
  // Nor does a hint: it says what to do, and the call is in details.call.
  const hints = prefixed(
    [...sources(join(root, 'src'), '.rs'), ...sources(join(root, 'crates'), '.rs')],
    /with_hint\(\s*(?:format!\()?"[A-Za-z_{}]+(?: [a-z{}]+)?: /g,
  )
  t.deepEqual(hints, [], 'a hint that starts with a call name: use .in_call(call)')
  const g = await gpu()
  const facadeErr = t.throws<WgallocError>(() => g.heap.recordHistory({ maxEntries: -1 }))
  t.like(facadeErr?.details, { call: 'recordHistory', path: 'options.maxEntries' })
  t.true(facadeErr?.message.startsWith('recordHistory: options.maxEntries: expected'))
  const coreErr = t.throws<WgallocError>(() => g.heap.scope({ name: 'a/b', limit: 1024 }))
  t.like(coreErr?.details, { call: 'scope', path: 'options.name' })
  const bindingErr = t.throws<WgallocError>(() => g.heap.scope({ name: 'x', limit: 1024 }).charge(-1))
  t.like(bindingErr?.details, { call: 'scope.charge', path: 'bytes' })
})
