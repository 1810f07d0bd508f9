// Shared helpers for the ava suite. Every test runs on a real wgpu device
// (lavapipe on machines without a GPU).
import { type ChildProcessByStdio, spawn } from 'node:child_process'
import type { Readable } from 'node:stream'
import { Gpu } from 'wgalloc'

let shared: Promise<Gpu> | undefined
/** One device per test file: opening a device costs ~100 ms on lavapipe. */
export function gpu(): Promise<Gpu> {
  shared ??= Gpu.request()
  return shared
}

/**
 * Runs full garbage collections until `done()` holds, for at most `timeoutMs`. Finalizers run on
 * the event loop some time after the collection that found their objects: a few milliseconds on
 * a quiet machine, seconds on a loaded one, so a fixed number of turns is not enough. Tests that
 * wait for it are serial: while a file's other tests run beside them, the finalizers can wait
 * until those are done.
 */
export async function collectGarbageUntil(done: () => boolean, timeoutMs = 30_000): Promise<void> {
  const gc = globalThis.gc
  if (typeof gc !== 'function') throw new Error('run with --expose-gc (package.json ava.nodeArguments)')
  const deadline = Date.now() + timeoutMs
  while (!done() && Date.now() < deadline) {
    gc()
    await new Promise((r) => setTimeout(r, 20))
  }
}

/** Bytes that differ per position and per seed, so misplaced copies are caught. */
export function pattern(size: number, seed = 1): Uint8Array {
  const out = new Uint8Array(size)
  for (let i = 0; i < size; i++) out[i] = (i * 31 + seed * 7 + (i >>> 8)) & 0xff
  return out
}

export interface NodeOptions {
  /** Added to this process's environment; an undefined value removes a variable. */
  env?: Record<string, string | undefined>
  /** The child is killed (SIGKILL) after this long. */
  timeoutMs?: number
  onSpawn?: (p: ChildProcessByStdio<null, Readable, Readable>) => void
}

/** How a child Node ended and what it printed. */
export interface NodeResult {
  code: number | null
  signal: NodeJS.Signals | null
  stdout: string
  stderr: string
  /** From the spawn to the child's exit. */
  ms: number
  /** When it exited (`Date.now()`). */
  endedAt: number
}

/** Runs node with `args` and resolves how it ended (it never rejects). */
export function runNode(args: string[], { env = {}, timeoutMs = 60_000, onSpawn }: NodeOptions = {}): Promise<NodeResult> {
  return new Promise((resolve) => {
    const started = Date.now()
    const merged = Object.fromEntries(Object.entries({ ...process.env, ...env }).filter(([, v]) => v !== undefined))
    const p = spawn(process.execPath, args, { env: merged, stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    p.stdout.on('data', (d: Buffer) => {
      stdout += d
    })
    p.stderr.on('data', (d: Buffer) => {
      stderr += d
    })
    const timer = setTimeout(() => p.kill('SIGKILL'), timeoutMs)
    onSpawn?.(p)
    p.on('close', (code, signal) => {
      clearTimeout(timer)
      const endedAt = Date.now()
      resolve({ code, signal, stdout, stderr, ms: endedAt - started, endedAt })
    })
  })
}
