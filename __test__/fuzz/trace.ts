// A crash leaves no stack to read, so the child writes each step to a file as it goes
// (one write syscall per step) and the parent shows the tail when the child dies.
// The file is rewritten from the start at every run, so it holds the current run only.
import fs from 'node:fs'

let fd: number | null = null
let pos = 0

export function open(path: string | undefined): void {
  if (path) fd = fs.openSync(path, 'w')
}

/** Starts a new run: the trace keeps only this run's steps. */
export function reset(header: string): void {
  if (fd === null) return
  fs.ftruncateSync(fd, 0)
  pos = 0
  line(header)
}

export function line(text: string): void {
  if (fd === null) return
  pos += fs.writeSync(fd, `${text}\n`, pos)
}

/** The step log a suite writes to (run passes this module). */
export interface Trace {
  reset(header: string): void
  line(text: string): void
}
