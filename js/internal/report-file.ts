// Report files written where an environment variable says (WGALLOC_OOM_SNAPSHOT,
// WGALLOC_LEAK_REPORT): created exclusively, never through a link, readable by the user alone,
// and bounded in number per process.
import { closeSync, constants, openSync, unlinkSync, writeSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { makeDirs } from './make-dirs.js'

/** Files of one kind a process writes at most; later reports are counted, not written. */
export const REPORTS_PER_PROCESS = 16
/** Names tried past one that exists (another process's file, or something planted there). */
const NAME_TRIES = 64
// O_NOFOLLOW is redundant beside O_EXCL (which already refuses an existing link) and absent on Windows.
const CREATE_NEW = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | (constants.O_NOFOLLOW ?? 0)

/**
 * Note [Report files]: report names are predictable (`<prefix>-<pid>-<n>.json`), so a file,
 * a link or a link to another file may already sit at one, planted by someone else. Each
 * report is created with O_CREAT | O_EXCL (and O_NOFOLLOW), mode 0600: an existing name is
 * never opened, truncated or followed, and the next number is tried instead. A process writes
 * at most REPORTS_PER_PROCESS files of a kind (an OOM storm must not fill a disk or hold the
 * JS thread), and says once at exit how many it skipped. A report is written whole before the
 * call that made it returns: a caller reading `err.details.snapshotPath` right after the OOM
 * finds the complete file. The count bounds what that costs the thread. A report is whole or
 * absent: a write may take part of the bytes (a disk filling up, a file size limit), so the rest
 * follow until a write fails, which removes the file.
 */
export class ReportFiles {
  readonly #prefix: string
  readonly #variable: string
  #next = 0
  #written = 0
  #skipped = 0
  #said = false

  /** Files named `<prefix>-<pid>-<n>.json`, in the folder `variable` names. */
  constructor(prefix: string, variable: string) {
    this.#prefix = prefix
    this.#variable = variable
  }

  /** Whether another report may be written (counts the skip when not): check before building one. */
  take(): boolean {
    if (this.#written < REPORTS_PER_PROCESS) return true
    if (this.#skipped++ === 0) process.once('exit', () => this.sayHowManySkipped())
    return false
  }

  /** Prints, once, how many reports were skipped (at exit; an exit handler that skipped calls it itself). */
  sayHowManySkipped(): void {
    if (this.#skipped === 0 || this.#said) return
    this.#said = true
    process.stderr.write(`wgalloc: ${this.#variable}: ${this.#skipped} more report(s) not written (at most ${REPORTS_PER_PROCESS} per process)\n`)
  }

  /** Creates a new file in `dir` holding `text`; returns its path. Throws what creating the folder or the file throws. */
  write(dir: string, text: string): string {
    makeDirs(dir)
    const { fd, path } = this.#create(dir)
    this.#written++
    const bytes = Buffer.from(text)
    try {
      for (let at = 0; at < bytes.length; ) {
        const wrote = writeSync(fd, bytes, at)
        if (wrote <= 0) throw Object.assign(new Error(`${path}: the write took no bytes`), { code: 'EIO' })
        at += wrote
      }
    } catch (err) {
      closeSync(fd)
      unlinkSync(path)
      throw err
    }
    closeSync(fd)
    return path
  }

  #create(dir: string): { fd: number; path: string } {
    for (let tries = 0; ; tries++) {
      const path = resolve(join(dir, `${this.#prefix}-${process.pid}-${++this.#next}.json`))
      try {
        return { fd: openSync(path, CREATE_NEW, 0o600), path }
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST' || tries === NAME_TRIES) throw err
      }
    }
  }
}
