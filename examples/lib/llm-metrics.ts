// The LLM server's own Prometheus metrics, read at scrape time: the KV cache's figures from
// `cache.stats()` (blocks as gauges, running totals as counters) and the batcher's.

import { Counter, Gauge, type Registry } from 'prom-client'
import type { KvCache } from 'wgalloc'
import type { Batcher, BatcherStats } from './batcher'

type KvTotal = 'prefixHitTokens' | 'prefixQueryTokens' | 'evictions' | 'swappedOutBlocks' | 'swappedInBlocks' | 'copiesOnWrite'
type BatcherTotal = 'steps' | 'preemptions' | 'generatedTokens' | 'prefillTokens'

export function registerLlmMetrics(registry: Registry, cache: KvCache, batcher: Batcher): void {
  const registers = [registry]
  new Gauge({
    name: 'llm_kv_blocks',
    help: 'KV cache blocks: used (some sequence refers to them), free, cached (unreferenced, kept for prefix hits).',
    labelNames: ['state'],
    registers,
    collect() {
      const s = cache.stats()
      this.set({ state: 'used' }, s.usedBlocks)
      this.set({ state: 'free' }, s.freeBlocks)
      this.set({ state: 'cached' }, s.cachedBlocks)
    },
  })
  new Gauge({
    name: 'llm_kv_sequences',
    help: 'Sequences in the KV cache.',
    registers,
    collect() {
      this.set(cache.stats().sequences)
    },
  })
  // Totals the cache keeps: a counter set to the cache's figure at each scrape.
  const kvTotal = (name: string, help: string, field: KvTotal) =>
    new Counter({
      name,
      help,
      registers,
      collect() {
        this.reset()
        this.inc(cache.stats()[field])
      },
    })
  kvTotal('llm_kv_prefix_query_tokens_total', 'Prompt tokens looked up in the prefix cache.', 'prefixQueryTokens')
  kvTotal('llm_kv_prefix_hit_tokens_total', 'Prompt tokens served from the prefix cache (prefill skipped).', 'prefixHitTokens')
  kvTotal('llm_kv_evictions_total', 'Cached KV blocks evicted to serve an allocation.', 'evictions')
  kvTotal('llm_kv_swapped_out_blocks_total', 'KV blocks copied to host memory by swap-out.', 'swappedOutBlocks')
  kvTotal('llm_kv_swapped_in_blocks_total', 'KV blocks written back by swap-in.', 'swappedInBlocks')
  kvTotal('llm_kv_copies_on_write_total', 'Shared partial KV blocks copied on their first write.', 'copiesOnWrite')

  const batcherTotal = (name: string, help: string, field: BatcherTotal) =>
    new Counter({
      name,
      help,
      registers,
      collect() {
        this.reset()
        this.inc(batcher.stats()[field])
      },
    })
  batcherTotal('llm_steps_total', 'Batched forward passes.', 'steps')
  batcherTotal('llm_preemptions_total', 'Sequences preempted (freed and requeued) for KV space.', 'preemptions')
  batcherTotal('llm_generated_tokens_total', 'Tokens generated.', 'generatedTokens')
  batcherTotal('llm_prefill_tokens_total', 'Prompt tokens computed (recomputation included).', 'prefillTokens')
  const batcherGauge = (name: string, help: string, field: keyof BatcherStats) =>
    new Gauge({
      name,
      help,
      registers,
      collect() {
        this.set(batcher.stats()[field])
      },
    })
  batcherGauge('llm_running_sequences', 'Sequences in the running batch.', 'running')
  batcherGauge('llm_waiting_requests', 'Requests waiting for admission.', 'waiting')
}
