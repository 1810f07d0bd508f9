// Every closed set of names is declared once, in the Rust core; the public types must say the
// same. This reads the literal unions of index.d.ts with the TypeScript checker and holds each
// to the core's table as the binding exports it, so a name added, renamed or dropped on one
// side fails here.
import { join } from 'node:path'
import test from 'ava'
import ts from 'typescript'

const { native } = require('../dist/internal/native.js') as { native: { constantTables(): Record<string, string[]> } }

const ENTRY = join(__dirname, '../index.d.ts')

/** Where each table shows in the types: `Interface.property`, or a type alias by name. */
const USES: Record<string, string[]> = {
  pools: ['HeapEvent.pool', 'BlockInfo.pool', 'SnapshotSegment.pool', 'PoolStats.pool', 'PoolName'],
  heapEventKinds: ['HeapEvent.kind', 'HeapEventKind'],
  blockStates: ['SnapshotBlock.state'],
  budgetSources: ['MemoryBudget.source'],
  observedEventKinds: ['ObservedEvent.kind'],
  copyKinds: ['CopyStats.kind'],
  profilerModes: ['ProfilerInfo.mode'],
  hostDirections: ['HostDirection'],
  kvDtypes: ['KvDtype', 'KvCacheOptions.dtype'],
  backends: ['AdapterDescription.backend', 'GpuInfo.backend'],
  deviceTypes: ['AdapterDescription.deviceType', 'GpuInfo.deviceType'],
  tensorKinds: ['GraphTensor.kind'],
  workspaceModes: ['PlanMemoryCallOptions.workspace'],
  strategies: ['Strategy'],
  oomSources: ['OutOfMemorySource', 'OutOfMemoryDetails.source'],
}

function checker() {
  const program = ts.createProgram([ENTRY], { strict: true, noEmit: true })
  const source = program.getSourceFile(ENTRY)!
  const c = program.getTypeChecker()
  return { c, source, exports: c.getExportsOfModule(c.getSymbolAtLocation(source)!) }
}

/** The string literals of the type at `path`, or why it is not a union of them. */
function literals({ c, source, exports }: ReturnType<typeof checker>, path: string): string[] | string {
  const [name, prop] = path.split('.')
  const symbol = exports.find((s) => s.name === name)
  if (!symbol) return `${name} is not exported`
  let type = c.getDeclaredTypeOfSymbol(symbol)
  if (prop) {
    const p = c.getPropertyOfType(type, prop)
    if (!p) return `${path} is not declared`
    type = c.getTypeOfSymbolAtLocation(p, p.valueDeclaration ?? source)
  }
  type = c.getNonNullableType(type)
  const parts = type.isUnion() ? type.types : [type]
  const out: string[] = []
  for (const t of parts) {
    if (!t.isStringLiteral()) return `${path} is ${c.typeToString(type)}, not a union of names`
    out.push(t.value)
  }
  return out.sort()
}

test('every closed set of names in the public types equals the core table', (t) => {
  const tables = native.constantTables()
  t.deepEqual(Object.keys(USES).sort(), Object.keys(tables).sort(), 'every table is checked somewhere')
  const types = checker()
  for (const [table, paths] of Object.entries(USES)) {
    for (const path of paths) t.deepEqual(literals(types, path), [...tables[table]].sort(), `${path} against ${table}`)
  }
})

test('a live block is never in the free state, so BlockInfo.state is the table without it', (t) => {
  const types = checker()
  const states = native.constantTables().blockStates.filter((s) => s !== 'free')
  t.deepEqual(literals(types, 'BlockInfo.state'), states.sort())
})
