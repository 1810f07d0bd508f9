// Continuous batching over the paged KV cache. One loop runs steps while there is work; each
// step decodes one token for every running sequence, continues prefills within a token budget
// (chunked prefill), admits waiting requests while the budget, the batch and the cache allow,
// and runs all of it as ONE forward pass: one `cache.write` and one `cache.attention` dispatch
// per layer for every sequence, each with its own length. Finished sequences are freed (their
// full blocks stay in the prefix cache for the next prompt that starts alike).
//
// Preemption is by recomputation: when `cache.canAppend` says the running sequences cannot
// grow, the newest is freed and requeued at the front with its prompt and the tokens it
// generated so far; readmitted, the prefix cache usually still holds its full blocks, so only
// the tail is computed again. (Swapping out would keep its K/V in host memory instead.)

import { type DeviceBlock, type HeapScope, type KvCache, type KvSequence, type KvStepEntry, WgallocError } from 'wgalloc'
import { argmax } from './decoder'
import type { DeviceDecoder } from './device-decoder'

export interface GenerateRequest {
  prompt: readonly number[]
  maxTokens: number
  /** The tenant's scope: prefixes are shared only among sequences of one scope. */
  scope?: HeapScope
  /** Keep each generated token's logits (the check compares them with the CPU). */
  keepLogits?: boolean
}

export interface Generation {
  tokens: number[]
  /** With `keepLogits`: the logits each token was chosen from. */
  logits?: Float32Array[]
  /** Prompt tokens whose prefill the prefix cache saved, over every admission. */
  cachedTokens: number
  /** Times the request was preempted and recomputed. */
  preemptions: number
}

export interface BatcherOptions {
  /** Sequences running at once. */
  maxBatch: number
  /** Rows of one forward pass: every decode row, then prefill chunks up to this. */
  stepTokens: number
}

export interface BatcherStats {
  steps: number
  /** Sequences in one step at most (prefills and decodes). */
  peakBatch: number
  /** Sequences decoding a token in one step at most. */
  peakDecodeBatch: number
  preemptions: number
  generatedTokens: number
  /** Prompt tokens computed (prefill rows, recomputation included). */
  prefillTokens: number
  /** Tokens of the sequences admitted (recomputed ones again), and of those, taken from the prefix cache. */
  admittedTokens: number
  cachedTokens: number
  running: number
  waiting: number
}

interface Job {
  req: GenerateRequest
  /** Prompt and generated tokens: what the sequence must hold before the next token. */
  tokens: number[]
  generated: number[]
  logits: Float32Array[]
  seq: KvSequence | null
  cachedTokens: number
  preemptions: number
  resolve: (g: Generation) => void
  reject: (err: Error) => void
}

const isFull = (err: unknown): boolean => err instanceof WgallocError && err.code === 'KV_CACHE_FULL'

export class Batcher {
  private readonly waiting: Job[] = []
  /** In admission order: the newest is preempted first. */
  private running: Job[] = []
  private loop: Promise<void> | null = null
  private closed = false
  private readonly counts = {
    steps: 0,
    peakBatch: 0,
    peakDecodeBatch: 0,
    preemptions: 0,
    generatedTokens: 0,
    prefillTokens: 0,
    admittedTokens: 0,
    cachedTokens: 0,
  }

  constructor(
    private readonly model: DeviceDecoder,
    private readonly cache: KvCache,
    private readonly options: BatcherOptions,
  ) {}

  stats(): BatcherStats {
    return { ...this.counts, running: this.running.length, waiting: this.waiting.length }
  }

  /** Queues a request; resolves with its tokens once it generated `maxTokens`. */
  generate(req: GenerateRequest): Promise<Generation> {
    if (this.closed) return Promise.reject(new Error('the batcher is closed'))
    return new Promise((resolve, reject) => {
      this.waiting.push({ req, tokens: [...req.prompt], generated: [], logits: [], seq: null, cachedTokens: 0, preemptions: 0, resolve, reject })
      this.loop ??= this.run().finally(() => {
        this.loop = null
      })
    })
  }

  /** Rejects waiting requests, lets running ones finish, and resolves when the loop stopped. */
  async close(): Promise<void> {
    this.closed = true
    for (const job of this.waiting.splice(0)) job.reject(new Error('the server is stopping'))
    await this.loop
  }

  private async run(): Promise<void> {
    while (this.running.length > 0 || this.waiting.length > 0) {
      try {
        await this.step()
      } catch (err) {
        // A failed step leaves no sequence in a known state: end them all with the error. What
        // its appends named but never wrote is not in the prefix cache (blocks enter it once
        // written), so later prompts are safe.
        for (const job of [...this.running, ...this.waiting.splice(0)]) this.finish(job, err as Error)
      }
    }
  }

  /** One entry per running sequence: its decode token, or the next chunk of its prefill. */
  private plan(): { job: Job; tokens: number }[] {
    let budget = this.options.stepTokens
    const decode = this.running.filter((j) => j.tokens.length - j.seq!.length === 1)
    budget -= decode.length
    const entries = decode.map((job) => ({ job, tokens: 1 }))
    for (const job of this.running) {
      const left = job.tokens.length - job.seq!.length
      if (left > 1 && budget > 0) {
        const n = Math.min(left, budget)
        entries.push({ job, tokens: n })
        budget -= n
      }
    }
    return entries
  }

  private preempt(job: Job): void {
    job.seq!.free()
    job.seq = null
    job.preemptions++
    this.counts.preemptions++
    this.running = this.running.filter((j) => j !== job)
    this.waiting.unshift(job)
  }

  private async step(): Promise<void> {
    // The running sequences first; while they cannot all grow, preempt the newest.
    let plan = this.plan()
    let preempted = false
    while (plan.length > 0 && !this.cache.canAppend(plan.map((e) => ({ seq: e.job.seq!, tokens: e.tokens })))) {
      this.preempt(this.running[this.running.length - 1])
      preempted = true
      plan = this.plan()
    }
    // Blocks these tokens fill enter the prefix cache when this step writes them, so prompts
    // admitted from the next step on find them.
    for (const e of plan) e.job.seq!.append(e.job.tokens.slice(e.job.seq!.length, e.job.seq!.length + e.tokens))
    let budget = this.options.stepTokens - plan.reduce((n, e) => n + e.tokens, 0)
    // Admission: a prompt's cached prefix skips prefill; the rest is chunked by the budget. Not
    // after a preemption: the running sequences need the room next step too (no thrashing).
    while ((!preempted || this.running.length === 0) && this.waiting.length > 0 && this.running.length < this.options.maxBatch && budget > 0) {
      const job = this.waiting[0]
      // Asked first, so a prompt that does not fit is neither taken nor counted as a lookup.
      if (!this.cache.lookup(job.tokens, { scope: job.req.scope }).fits) break
      let seq: KvSequence
      try {
        seq = this.cache.addSequence(job.tokens, { scope: job.req.scope })
      } catch (err) {
        if (isFull(err)) break // every table row is taken
        throw err
      }
      const n = Math.min(job.tokens.length - seq.length, budget)
      seq.append(job.tokens.slice(seq.length, seq.length + n))
      this.waiting.shift()
      job.seq = seq
      job.cachedTokens += seq.cachedTokens
      this.counts.admittedTokens += job.tokens.length
      this.counts.cachedTokens += seq.cachedTokens
      this.running.push(job)
      plan.push({ job, tokens: n })
      budget -= n
    }
    if (plan.length === 0) {
      if (this.running.length === 0 && this.waiting.length > 0) this.finish(this.waiting.shift()!, new Error('the request does not fit the KV cache'))
      return
    }

    // Rows in step order: (token, position) for each entry's last `tokens` positions.
    const ids = new Uint32Array(2 * plan.reduce((n, e) => n + e.tokens, 0))
    const logitRows: number[] = []
    const producing: Job[] = []
    let r = 0
    for (const { job, tokens } of plan) {
      const end = job.seq!.length
      for (let pos = end - tokens; pos < end; pos++, r++) {
        ids[2 * r] = job.tokens[pos]
        ids[2 * r + 1] = pos
      }
      // A sequence whose tokens are all in after this step yields its next token.
      if (end === job.tokens.length) {
        logitRows.push(r - 1)
        producing.push(job)
      }
      if (tokens > 1 || job.generated.length === 0) this.counts.prefillTokens += tokens
    }
    const step: KvStepEntry[] = plan.map((e) => ({ seq: e.job.seq!, tokens: e.tokens }))
    this.counts.steps++
    this.counts.peakBatch = Math.max(this.counts.peakBatch, plan.length)
    this.counts.peakDecodeBatch = Math.max(this.counts.peakDecodeBatch, plan.filter((e) => e.tokens === 1 && e.job.generated.length > 0).length)

    const stream = this.model.gpu.createStream()
    let out: DeviceBlock | null
    try {
      out = this.model.forward(stream, this.cache, step, { ids, logitRows })
    } finally {
      stream.submit()
    }
    if (!out) return // prefill chunks only: nothing to sample yet
    const V = this.model.shape.vocab
    let logits: Float32Array
    try {
      const b = await out.read(0, logitRows.length * V * 4)
      logits = new Float32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength))
    } finally {
      out.free()
    }
    producing.forEach((job, i) => {
      const row = logits.subarray(i * V, (i + 1) * V)
      const token = argmax(row)
      job.generated.push(token)
      job.tokens.push(token)
      if (job.req.keepLogits) job.logits.push(row.slice())
      this.counts.generatedTokens++
      if (job.generated.length >= job.req.maxTokens) this.finish(job)
    })
  }

  private finish(job: Job, err?: Error): void {
    if (job.seq && !job.seq.freed) job.seq.free()
    job.seq = null
    this.running = this.running.filter((j) => j !== job)
    if (err) job.reject(err)
    else
      job.resolve({
        tokens: job.generated,
        logits: job.req.keepLogits ? job.logits : undefined,
        cachedTokens: job.cachedTokens,
        preemptions: job.preemptions,
      })
  }
}
