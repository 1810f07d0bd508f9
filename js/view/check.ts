// Input checks shared by the view kinds: a malformed field is an INVALID_ARGUMENT
// naming where it is, never a page that draws garbage.
import { invalidArgument, shown } from '../errors.js'

/** Parsed JSON, checked field by field before use. */
// biome-ignore lint/suspicious/noExplicitAny: input JSON is unstructured until each field is checked
export type Loose = Record<string, any>

/** Throws the INVALID_ARGUMENT for field `where`: it should have been `expected` but was `got`. */
export function fail(where: string, expected: string, got: string, hint?: string): never {
  throw invalidArgument(where, expected, got, hint)
}

/** A finite number >= 0. */
export function count(value: unknown, where: string): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) fail(where, 'a number >= 0', shown(value))
  return value as never
}

/** A finite number (time stamps may be negative in hand-made traces). */
export function number(value: unknown, where: string): number {
  if (typeof value !== 'number' || !Number.isFinite(value)) fail(where, 'a number', shown(value))
  return value as never
}

/** An id: a string or a number, returned as a string. */
export function id(value: unknown, where: string): string {
  if (typeof value === 'string') return value
  if (typeof value === 'number' && Number.isFinite(value)) return String(value)
  return fail(where, 'a string or number id', shown(value))
}

export function array(value: unknown, where: string): Loose[] {
  if (!Array.isArray(value)) fail(where, 'an array', shown(value))
  return value as never
}

export function object(value: unknown, where: string): Loose {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) fail(where, 'an object', shown(value))
  return value as never
}

/** A summary card: label, value and how to show it. */
export type SummaryRow = [string, number | string, 'bytes' | 'count' | 'ratio' | 'ms' | 'text']
