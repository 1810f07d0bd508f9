// The CLI's output files (--out, --json FILE, --save-profile, --snapshot): written whole by the
// core (Note [Output files] in wgalloc-core's output_file.rs), so a failed write leaves what the
// path held, and a symlink there is replaced rather than followed.
import { accessSync, constants, statSync } from 'node:fs'
import { dirname, resolve } from 'node:path'
import { WgallocError, invalidArgument, messageOf, toWgallocError } from '../errors.js'
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
    native.writeOutputFile(file, text)
  } catch (err) {
    throw toWgallocError(err, true)
  }
}

/**
 * INVALID_ARGUMENT when output `file` (given as `flag`) is the input file `input`, by path or
 * by link: the output would replace what the command reads.
 */
export function refuseInputAsOutput(file: string, input: string, flag: string): void {
  let same = resolve(file) === resolve(input)
  try {
    const [a, b] = [statSync(file), statSync(input)]
    same ||= a.dev === b.dev && a.ino === b.ino
  } catch {
    // One of them does not exist (yet): only the paths can be the same.
  }
  if (same) throw invalidArgument(flag, 'a file other than the input', `'${file}'`, `${flag} names the input; the output would replace it`)
}

/** IO_ERROR naming `file` unless its folder exists and is writable: checked before a long run that ends by writing it. */
export function checkWritable(file: string): void {
  try {
    accessSync(dirname(resolve(file)), constants.W_OK)
  } catch (err) {
    throw new WgallocError('IO_ERROR', `cannot write ${file}: ${messageOf(err)}; pass a path in a writable directory`, { cause: err })
  }
}
