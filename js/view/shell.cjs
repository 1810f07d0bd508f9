'use strict'
// The HTML shell every view shares: page CSS, the common page script, the
// kind's page script and its data, all inline, so the file opens anywhere
// with no network (a Content-Security-Policy forbids every fetch).
const { readFileSync } = require('node:fs')
const { stringifyInput } = require('../errors.cjs')
const { join } = require('node:path')

const cache = new Map()
function asset(name) {
  let text = cache.get(name)
  if (text === undefined) cache.set(name, (text = readFileSync(join(__dirname, 'client', name), 'utf8')))
  return text
}

const escapeHtml = (s) => String(s).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`)
/** JSON that cannot end the <script> element it sits in. */
const scriptJson = (value) =>
  stringifyInput(value, 'the viewer input')
    .replace(/</g, '\\u003c')
    .replace(/\u2028/g, '\\u2028')
    .replace(/\u2029/g, '\\u2029')

/** `view`: { kind, title, subtitle, summary, ...data for the kind's script }. */
function page(view) {
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

module.exports = { page }
