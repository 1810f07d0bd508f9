// Small helpers of the examples' command lines: checked numeric options and byte formatting.

/** `value` (a string option) as an integer in [min, max]; `fallback` when absent. */
export function intOption(name: string, value: string | undefined, fallback: number, min = 1, max = Number.MAX_SAFE_INTEGER): number {
  if (value === undefined) return fallback
  const n = Number(value)
  if (!Number.isInteger(n) || n < min || n > max) throw new RangeError(`--${name} must be an integer in [${min}, ${max}], got '${value}'`)
  return n
}

/** `value` as a finite positive number; `fallback` when absent. */
export function numberOption(name: string, value: string | undefined, fallback: number): number {
  if (value === undefined) return fallback
  const n = Number(value)
  if (!Number.isFinite(n) || n <= 0) throw new RangeError(`--${name} must be a positive number, got '${value}'`)
  return n
}

export function formatBytes(n: number): string {
  if (Math.abs(n) < 1024) return `${n} B`
  if (Math.abs(n) < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`
  return `${(n / 1024 / 1024).toFixed(2)} MiB`
}

/** Runs `main`; a failure prints its message (and code) and exits with 1. */
export function runMain(main: () => Promise<void>): void {
  main().catch((err: unknown) => {
    const e = err as { code?: string; message?: string }
    console.error(`error${e.code ? ` [${e.code}]` : ''}: ${e.message ?? String(err)}`)
    process.exitCode = 1
  })
}
