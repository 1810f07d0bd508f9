// `mkdirSync(dir, { recursive: true })` without its hang: Node's recursive mkdir retries forever
// on a path under /proc (the kernel answers ENOENT for the folder it was just told to create).
import { existsSync, mkdirSync } from 'node:fs'
import { dirname, resolve } from 'node:path'

/** Creates `dir` and its missing parents, top down, one call each; throws what a failing call throws. */
export function makeDirs(dir: string): void {
  const missing: string[] = []
  for (let d = resolve(dir); !existsSync(d); d = dirname(d)) {
    missing.push(d)
    if (dirname(d) === d) break
  }
  for (const d of missing.reverse()) mkdirSync(d)
}
