// What every CLI command shares: its arguments parsed with its own options and usage.
import { type ParseArgsConfig, parseArgs } from 'node:util'
import { WgallocError, messageOf, invalidArgument } from '../errors.js'

/** A command's options (node:util parseArgs form). */
export type Options = NonNullable<ParseArgsConfig['options']>

/** Parsed option values: strings, booleans, or string lists. */
export type Values = Record<string, string | boolean | string[] | undefined>

/** What `parseCommand` returns: the values and files, or the exit code once it printed the usage. */
export type Parsed = { values: Values; positionals: string[]; exit?: undefined } | { exit: number; values?: undefined; positionals?: undefined }

/**
 * Parses a command's arguments: its `options` plus `--help`, and exactly `files` positional
 * file names (0 or 1). Returns `{ values, positionals }`, or `{ exit }` once it printed the
 * command's usage: 0 for `--help`, 2 for a wrong number of files.
 */
export function parseCommand(argv: string[], { options, usage, files = 0 }: { options: Options; usage: string; files?: number }): Parsed {
  let parsed: { values: Record<string, unknown>; positionals: string[] }
  try {
    parsed = parseArgs({
      args: argv,
      allowPositionals: files > 0,
      options: { ...options, help: { type: 'boolean', short: 'h', default: false } },
    })
  } catch (err) {
    // An unknown flag or a flag without its value: the caller's argument, typed like any other.
    const code = (err as { code?: string }).code ?? ''
    if (code.startsWith('ERR_PARSE_ARGS')) throw invalidArgument('argv', 'the flags --help lists', 'another', `${messageOf(err)} (see --help)`, { cause: err })
    throw err
  }
  const { values, positionals } = parsed
  if (values.help || positionals.length !== files) {
    console.log(usage)
    return { exit: values.help ? 0 : 2 }
  }
  return { values: values as Values, positionals }
}

/** A string option's value. */
export const str = (values: Values, name: string): string | undefined => values[name] as string | undefined

/** A CLI command: resolves with the exit code. */
export type Command = (argv: string[]) => Promise<number>

/** Option `name` as a positive integer (`--runs 5`), else INVALID_ARGUMENT naming the flag. */
export function positiveInt(values: Values, name: string): number {
  const text = String(values[name])
  if (!/^\d+$/.test(text) || Number(text) < 1 || !Number.isSafeInteger(Number(text))) throw invalidArgument(`--${name}`, 'a positive integer', `'${text}'`)
  return Number(text)
}

/**
 * `err` naming input `file`: a PARSE_ERROR from the input's text gets the file's name in front
 * (its `details` kept), so input errors read alike in every command; other errors pass through.
 */
export function namingFile(err: unknown, file: string): unknown {
  if (!WgallocError.is(err, 'PARSE_ERROR') || err.message.includes(file)) return err
  const named = new WgallocError('PARSE_ERROR', `${file}: ${err.message}`, { cause: err })
  named.details = err.details
  return named
}
