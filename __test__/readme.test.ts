// The README's tour runs as written, in CommonJS and as an ES module, through the package's
// own name (`require('wgalloc')` resolves to this checkout from inside it).
import { execFile } from 'node:child_process'
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
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

/** apt options that take a value as the next word. */
const APT_OPTION_WITH_VALUE = new Set(['-o', '-t', '-c', '--option', '--target-release', '--config-file'])

/**
 * The Debian packages that the `apt-get install` / `apt install` commands in shell `text` name,
 * and how many such commands it holds: continuations joined, comments dropped, each command cut
 * at `;`, `&&`, `||`, `|` or a redirection, options skipped, version and architecture suffixes
 * dropped.
 */
function aptInstalls(text: string): { packages: Set<string>; commands: number } {
  const packages = new Set<string>()
  let commands = 0
  const lines = text
    .replace(/\\\n/g, ' ')
    .split('\n')
    .map((l) => l.replace(/(^|\s)#.*$/, ''))
  for (const line of lines) {
    for (const command of line.split(/;|&&|\|\||\|/)) {
      const words = command.trim().split(/\s+/)
      const apt = words.findIndex((w) => w === 'apt-get' || w === 'apt')
      if (apt < 0) continue
      let i = apt + 1
      for (; i < words.length && words[i] !== 'install'; i++) if (APT_OPTION_WITH_VALUE.has(words[i])) i++
      if (i >= words.length) continue // another apt-get command (update, ...)
      commands++
      for (i++; i < words.length; i++) {
        const w = words[i]
        if (/^\d*[<>]/.test(w)) break
        if (APT_OPTION_WITH_VALUE.has(w)) i++
        else if (!w.startsWith('-')) packages.add(w.replace(/[=:].*$/, ''))
      }
    }
  }
  return { packages, commands }
}

/** The README's Requirements list: from `Requirements:` to the next blank line. */
function requirements(): string {
  const m = /^Requirements:\n([\s\S]*?)\n\n/m.exec(readme)
  if (!m) throw new Error('README.md has no Requirements: list')
  return m[1]
}

/** The packages of the `apt-get install` commands in the inline code of `markdown`. */
function aptInstallsInCode(markdown: string): { packages: Set<string>; commands: number } {
  const spans = [...markdown.replace(/\n\s*/g, ' ').matchAll(/`([^`]+)`/g)].map((m) => m[1])
  return aptInstalls(spans.join('\n'))
}

test("the README's requirements name every package .ci/run installs, and no other", (t) => {
  const ci = readFileSync(join(root, '.ci', 'run'), 'utf8')
  const installed = aptInstalls(ci)
  const named = aptInstallsInCode(requirements())
  // Each side parsed: as many install commands as lines that say so, each naming a package.
  t.is(
    installed.commands,
    ci.split('\n').filter((l) => /\bapt(-get)?\b.*\binstall\b/.test(l.replace(/#.*$/, ''))).length,
    '.ci/run: every apt-get install parsed',
  )
  t.is(named.commands, (requirements().match(/\bapt(-get)?\s+install\b/g) ?? []).length, 'README: every apt-get install parsed')
  t.true(installed.packages.size >= installed.commands && installed.commands > 0, `.ci/run installs ${[...installed.packages]}`)
  t.true(named.packages.size >= named.commands && named.commands > 0, `README names ${[...named.packages]}`)
  for (const p of installed.packages)
    t.true(named.packages.has(p), `.ci/run installs '${p}', which the README's Requirements do not name (\`apt-get install ${p}\`)`)
  for (const p of named.packages) t.true(installed.packages.has(p), `the README's Requirements name '${p}', which .ci/run does not install`)
})

// This file is left out: its parser's examples are not hints.
test('the install hints in the tests name packages the README requires', (t) => {
  const named = aptInstallsInCode(requirements()).packages
  let hints = 0
  for (const file of readdirSync(join(root, '__test__')).filter((f) => f.endsWith('.ts') && f !== 'readme.test.ts')) {
    const text = readFileSync(join(root, '__test__', file), 'utf8')
    for (const m of text.matchAll(/apt-get install((?:\s+-\S+)*(?:\s+[a-z0-9][a-z0-9.+-]*)+)/g)) {
      for (const p of aptInstalls(`apt-get install ${m[1]}`).packages) {
        hints++
        t.true(named.has(p), `__test__/${file} asks for 'apt-get install ${p}', which the README's Requirements do not name`)
      }
    }
  }
  t.true(hints > 0)
})

test('the package parser reads the forms .ci/run may use', (t) => {
  const parsed = aptInstalls(
    [
      '# apt-get install commented-out',
      'apt-get update -qq',
      'DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mesa-vulkan-drivers >/dev/null',
      'sudo apt-get -o Dpkg::Use-Pty=0 install -y --no-install-recommends \\',
      '  chromium prometheus=2.45.3+ds-2 2>&1 | tail -1',
      'apt install -y foo:amd64 && echo bar',
    ].join('\n'),
  )
  t.is(parsed.commands, 3)
  t.deepEqual([...parsed.packages].sort(), ['chromium', 'foo', 'mesa-vulkan-drivers', 'prometheus'])
})

test('the README, engines and docs/device.md name the same Node versions', (t) => {
  const engines = (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { engines: { node: string } }).engines.node
  // `^18.18.0 || >= 20.4.0`: the lowest version of each major line it accepts.
  const lows = [...engines.matchAll(/(\d+)\.(\d+)\.\d+/g)].map((m) => `${m[1]}.${m[2]}`)
  t.true(lows.length >= 2, engines)
  const line = /^- Node\.js ([^\n]*)$/m.exec(readme)?.[1] ?? ''
  t.deepEqual(
    [...line.matchAll(/(\d+\.\d+)\+/g)].map((m) => m[1]),
    lows,
    line,
  )
  const device = readFileSync(join(root, 'docs/device.md'), 'utf8')
  t.true(device.includes(`Node >= ${lows[0]} / ${lows[1]}`))
})

test("docs/operations.md's metrics server runs as written, as the ES module it says it is", async (t) => {
  const doc = readFileSync(join(root, 'docs', 'operations.md'), 'utf8')
  const m = /```js\n(\/\/ An ES module \(server\.mjs\)[\s\S]*?)```/.exec(doc)
  if (!m) throw new Error('docs/operations.md has no metrics server example')
  // The one change: listen on a free port, answer one scrape, then end.
  const once = m[1].replace(
    '.listen(9464)',
    `.listen(0, async function () {
      const body = await (await fetch('http://127.0.0.1:' + this.address().port + '/metrics')).text()
      console.log(body.includes('wgalloc_heap_reserved_bytes') ? 'scraped' : 'no metrics')
      this.close()
      gpu.destroy()
    })`,
  )
  t.not(once, m[1], 'the example listens on 9464')
  const dir = join(__dirname, '.tour')
  mkdirSync(dir, { recursive: true })
  writeFileSync(join(dir, 'server.mjs'), once)
  const { stdout } = await promisify(execFile)(process.execPath, [join(dir, 'server.mjs')], { cwd: root, timeout: 60_000 })
  t.is(stdout.trim(), 'scraped')
})
