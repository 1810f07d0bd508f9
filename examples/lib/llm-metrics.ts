// The LLM server's own Prometheus metrics, read from the batcher at scrape time. The KV cache's
// figures (blocks by state, prefix hits, evictions, swaps) come with wgalloc's `registerMetrics`
// as `wgalloc_kv_cache_*{cache}`.

import { Counter, Gauge, type Registry } from 'prom-client'
import type { Batcher, BatcherStats } from './batcher'

type Total = 'steps' | 'preemptions' | 'generatedTokens' | 'prefillTokens' | 'cachedTokens'

export function registerLlmMetrics(registry: Registry, batcher: Batcher): void {
  const registers = [registry]
  // Totals the batcher keeps: a counter set to its figure at each scrape.
  const total = (name: string, help: string, field: Total) =>
    new Counter({
      name,
      help,
      registers,
      collect() {
        this.reset()
        this.inc(batcher.stats()[field])
      },
    })
  total('llm_steps_total', 'Batched forward passes.', 'steps')
  total('llm_preemptions_total', 'Sequences preempted (freed and requeued) for KV space.', 'preemptions')
  total('llm_generated_tokens_total', 'Tokens generated.', 'generatedTokens')
  total('llm_prefill_tokens_total', 'Prompt tokens computed (recomputation included).', 'prefillTokens')
  total('llm_cached_prompt_tokens_total', 'Prompt tokens taken from the prefix cache at admission (prefill skipped).', 'cachedTokens')
  const gauge = (name: string, help: string, field: keyof BatcherStats) =>
    new Gauge({
      name,
      help,
      registers,
      collect() {
        this.set(batcher.stats()[field])
      },
    })
  gauge('llm_running_sequences', 'Sequences in the running batch.', 'running')
  gauge('llm_waiting_requests', 'Requests waiting for admission.', 'waiting')
  gauge('llm_peak_batch', 'Most sequences in one step so far.', 'peakBatch')
}
