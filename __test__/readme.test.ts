// The README's tour runs as written, in CommonJS and as an ES module, through the package's
// own name (`require('wgalloc')` resolves to this checkout from inside it).
import { execFile } from 'node:child_process'
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { promisify } from 'node:util'
import test from 'ava'

const root = join(__dirname, '..')
const readme = readFileSync(join(root, 'README.md'), 'utf8')

/** The code block right after `<!-- tour:<kind> -->`. */
function tour(kind: string): string {
  const m = new RegExp(`<!-- tour:${kind} -->\\s*\`\`\`js\\n([\\s\\S]*?)\`\`\``).exec(readme)
  if (!m) throw new Error(`README.md has no tour:${kind} block`)
  return m[1]
}

async function run(kind: string, file: string): Promise<{ stdout: string; stderr: string }> {
  const dir = join(__dirname, '.tour')
  mkdirSync(dir, { recursive: true })
  writeFileSync(join(dir, file), tour(kind))
  return promisify(execFile)(process.execPath, [join(dir, file)], { cwd: root, timeout: 120_000 })
}

test('the CommonJS tour runs as written', async (t) => {
  const { stdout } = await run('cjs', 'tour.cjs')
  t.regex(stdout, /read back 1\.5 1024/)
  t.regex(stdout, /slab 64 lower bound 64/)
  t.regex(stdout, /^y\[3\] = 12$/m)
  t.regex(stdout, /^chained y\[3\] = 48$/m)
  t.regex(stdout, /^profiled$/m)
})

test('the ES module tour runs as written', async (t) => {
  const { stdout } = await run('mjs', 'tour.mjs')
  t.is(stdout.trim(), '60 2')
})

test('the README is a front door: short, and no install command that cannot work yet', (t) => {
  t.true(readme.split('\n').length <= 250)
  t.notRegex(readme, /^npm install wgalloc$/m)
})
