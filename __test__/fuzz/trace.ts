'use strict'
// A crash leaves no stack to read, so the child writes each step to a file as it goes
// (one write syscall per step) and the parent shows the tail when the child dies.
// The file is rewritten from the start at every run, so it holds the current run only.
const fs = require('node:fs')

let fd = null
let pos = 0

function open(path) {
  if (path) fd = fs.openSync(path, 'w')
}

/** Starts a new run: the trace keeps only this run's steps. */
function reset(header) {
  if (fd === null) return
  fs.ftruncateSync(fd, 0)
  pos = 0
  line(header)
}

function line(text) {
  if (fd === null) return
  pos += fs.writeSync(fd, `${text}\n`, pos)
}

module.exports = { open, reset, line }
