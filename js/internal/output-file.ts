// The CLI's output files (--out, --json FILE, --save-profile, --snapshot): written whole by the
// core (Note [Output files] in wgalloc-core's output_file.rs), so a failed write leaves what the
// path held, and a symlink there is replaced rather than followed.
import { accessSync, constants } from 'node:fs'
import { dirname, resolve } from 'node:path'
import { WgallocError, messageOf, toWgallocError } from '../errors.js'
import { native } from './native.js'

/**
 * Writes `text` to `file` and says so (`wrote <path>`; on stderr when stdout carries JSON);
 * IO_ERROR naming the file when it cannot.
 */
export function writeOutputFile(file: string, text: string, what?: string, toStderr = false): void {
  writeWhole(file, text)
  const line = `wrote ${file}${what ? ` (${what})` : ''}`
  if (toStderr) console.error(line)
  else console.log(line)
}

/** Writes `text` to `file` whole, silently; IO_ERROR naming the file when it cannot. */
export function writeWhole(file: string, text: string): void {
  try {
    native.writeOutputFile(file, text, 'the output')
  } catch (err) {
    throw toWgallocError(err, true)
  }
}

/** IO_ERROR naming `file` unless its folder exists and is writable: checked before a long run that ends by writing it. */
export function checkWritable(file: string): void {
  try {
    accessSync(dirname(resolve(file)), constants.W_OK)
  } catch (err) {
    throw new WgallocError('IO_ERROR', `cannot write ${file}: ${messageOf(err)}; pass a path in a writable directory`, { cause: err })
  }
}
