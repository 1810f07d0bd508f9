// The public API as the TypeScript types declare it (the top-level index.d.ts, emitted from
// the TypeScript sources), read with the compiler's checker: what the API tests enumerate, so
// a new class or method is checked without editing a list.
import { join } from 'node:path'
import ts from 'typescript'

const ENTRY = join(__dirname, '../index.d.ts')

const isInternal = (decl: ts.Node | undefined): boolean => decl != null && ts.getJSDocTags(decl).some((t) => t.tagName.text === 'internal')

/** Whether `type` (or a member of a union) has a property `name`. */
function hasProperty(checker: ts.TypeChecker, type: ts.Type, name: string): boolean {
  const t = checker.getNonNullableType(type)
  if (t.isUnion()) return t.types.some((u) => hasProperty(checker, u, name))
  return checker.getPropertyOfType(t, name) !== undefined
}

/** One property or method of a class or of the module, as the tests see it. */
export interface Member {
  owner: string
  name: string
  isStatic: boolean
  isSymbol: boolean
  isMethod: boolean
  internal: boolean
  arity: number
  async: boolean
  takesSignal: boolean
}

export interface ApiSurface {
  classes: Map<string, Member[]>
  functions: Member[]
}

function members(checker: ts.TypeChecker, type: ts.Type, owner: string, isStatic: boolean): Member[] {
  const out: Member[] = []
  for (const prop of checker.getPropertiesOfType(type)) {
    if (prop.name === 'prototype') continue
    const decl = prop.valueDeclaration ?? prop.declarations?.[0]
    if (!decl) continue
    const propType = checker.getTypeOfSymbolAtLocation(prop, decl)
    const signatures = propType.getCallSignatures().filter((s) => !isInternal(s.declaration))
    const isAccessor = (prop.declarations ?? []).some((d) => ts.isGetAccessorDeclaration(d))
    const m = /^__@(\w+)@\d+$/.exec(prop.name) // well-known symbols: __@dispose@123
    out.push({
      owner,
      name: m ? `[Symbol.${m[1]}]` : prop.name,
      isStatic,
      isSymbol: Boolean(m),
      isMethod: signatures.length > 0 && !isAccessor,
      internal: (prop.declarations ?? []).every(isInternal),
      arity: Math.max(0, ...signatures.map((s) => s.getParameters().length)),
      async: signatures.some((s) => checker.getReturnTypeOfSignature(s).getSymbol()?.getName() === 'Promise'),
      // Some public signature's last parameter takes `{ signal }`.
      takesSignal: signatures.some((s) => {
        const last = s.getParameters().at(-1)
        return last !== undefined && hasProperty(checker, checker.getTypeOfSymbolAtLocation(last, s.declaration!), 'signal')
      }),
    })
  }
  return out
}

let cached: ApiSurface | undefined
/** `{ classes: Map<name, member[]>, functions: member[] }` of everything index.d.ts exports. */
export function apiSurface(): ApiSurface {
  if (cached) return cached
  const program = ts.createProgram([ENTRY], {
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    lib: ['lib.es2022.d.ts', 'lib.esnext.disposable.d.ts'],
    types: ['node'],
    strict: true,
    noEmit: true,
  })
  const checker = program.getTypeChecker()
  const mod = checker.getSymbolAtLocation(program.getSourceFile(ENTRY)!)!
  const classes = new Map<string, Member[]>()
  for (let sym of checker.getExportsOfModule(mod)) {
    if (sym.flags & ts.SymbolFlags.Alias) sym = checker.getAliasedSymbol(sym)
    if (sym.flags & ts.SymbolFlags.Class) {
      const name = sym.getName()
      classes.set(name, [...members(checker, checker.getDeclaredTypeOfSymbol(sym), name, false), ...members(checker, checker.getTypeOfSymbol(sym), name, true)])
    }
  }
  // Exported functions: the callable properties of the module object.
  const functions = members(checker, checker.getTypeOfSymbol(mod), '', false).filter((m) => m.isMethod)
  cached = { classes, functions }
  return cached
}
