// Reading a CLI input file: regular files only (a FIFO or /dev/zero would be read without
// end), at most WGALLOC_MAX_INPUT_BYTES (default 1 GiB), typed errors naming the file.
import { closeSync, constants, fstatSync, openSync, readSync } from 'node:fs'
import { WgallocError, messageOf, invalidArgument, shown } from '../errors.js'

export const DEFAULT_MAX_BYTES = 1024 ** 3

function maxInputBytes(): number {
  const env = process.env.WGALLOC_MAX_INPUT_BYTES
  if (env === undefined || env === '') return DEFAULT_MAX_BYTES
  const n = Number(env)
  if (!Number.isSafeInteger(n) || n <= 0) throw invalidArgument('WGALLOC_MAX_INPUT_BYTES', 'a positive integer', `'${env}'`)
  return n
}

/** The text of `file`: IO_ERROR when it is missing, not a regular file, or too large. */
export function readInputFile(file: string): string {
  if (typeof file !== 'string' || file === '') throw invalidArgument('file', 'a path (a non-empty string)', shown(file))
  const max = maxInputBytes()
  let fd: number
  try {
    // Non-blocking: opening a FIFO for reading would otherwise wait for a writer.
    fd = openSync(file, constants.O_RDONLY | (constants.O_NONBLOCK ?? 0))
  } catch (err) {
    throw new WgallocError('IO_ERROR', `cannot read ${file}: ${messageOf(err)}`, { cause: err })
  }
  try {
    const st = fstatSync(fd)
    if (!st.isFile()) throw new WgallocError('IO_ERROR', `cannot read ${file}: not a regular file (wgalloc reads files, not devices, pipes or folders)`)
    if (st.size > max)
      throw new WgallocError('IO_ERROR', `cannot read ${file}: ${st.size} bytes is above the ${max}-byte input limit (raise it with WGALLOC_MAX_INPUT_BYTES)`)
    const buf = Buffer.allocUnsafe(st.size)
    let at = 0
    while (at < st.size) {
      const n = readSync(fd, buf, at, st.size - at, at)
      if (n === 0) break
      at += n
    }
    return buf.toString('utf8', 0, at)
  } catch (err) {
    if (err instanceof WgallocError) throw err
    throw new WgallocError('IO_ERROR', `cannot read ${file}: ${messageOf(err)}`, { cause: err })
  } finally {
    closeSync(fd)
  }
}

/** `file` parsed as JSON: IO_ERROR as `readInputFile`, PARSE_ERROR naming the file. */
export function readJsonFile(file: string): unknown {
  const text = readInputFile(file)
  try {
    return JSON.parse(text)
  } catch (err) {
    throw new WgallocError('PARSE_ERROR', `${file} is not valid JSON: ${messageOf(err)}`, { cause: err })
  }
}
