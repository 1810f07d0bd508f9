// The HTML shell every view shares: page CSS, the common page script, the
// kind's page script and its data, all inline, so the file opens anywhere
// with no network (a Content-Security-Policy forbids every fetch).
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { stringifyInput } from '../errors.js'

const cache = new Map<string, string>()
function asset(name: string): string {
  let text = cache.get(name)
  if (text === undefined) cache.set(name, (text = readFileSync(join(__dirname, 'client', name), 'utf8')))
  return text
}

const escapeHtml = (s: unknown) => String(s).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`)
/** JSON that cannot end the <script> element it sits in. */
const scriptJson = (value: unknown) =>
  stringifyInput(value, 'the viewer input')
    .replace(/</g, '\\u003c')
    .replace(/\u2028/g, '\\u2028')
    .replace(/\u2029/g, '\\u2029')

/** `view`: { kind, title, subtitle, summary, ...data for the kind's script }. */
export function page(view: { kind: string; title: string; subtitle?: string }): string {
  const { kind, title, subtitle } = view
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<meta name="generator" content="wgalloc view">
<title>${escapeHtml(title)}</title>
<style>
${asset('page.css')}
</style>
</head>
<body data-kind="${escapeHtml(kind)}">
<header>
  <h1>${escapeHtml(title)}</h1>
  <p class="sub">${escapeHtml(subtitle ?? '')}</p>
  <div id="summary" class="cards"></div>
</header>
<main id="main"></main>
<div id="tip" role="tooltip" hidden></div>
<script type="application/json" id="wgalloc-data">${scriptJson(view)}</script>
<script>
${asset('common.js')}
${asset(`${kind}.js`)}
</script>
</body>
</html>
`
}
