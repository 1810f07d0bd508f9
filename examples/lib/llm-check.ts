// The LLM server's check: requests of changing lengths that share a system prompt, and the
// verification of every generated token against the CPU reference (full attention, no cache).
// The reference is fed the GPU's tokens, so after a near-tie both continue from one sequence
// and every later token is still compared exactly.

import { type DecoderShape, type DecoderWeights, argmax, referenceLogits } from './decoder'
import { mulberry32 } from './random'

export interface CheckRequest {
  prompt: number[]
  maxTokens: number
  tenant?: string
}

/**
 * `count` requests: each prompt is the `systemTokens`-token system prompt, then 1 to 24
 * tokens of its own; `maxTokens` 2 to 16; tenants in turn (the first request of each tenant
 * misses the prefix cache, the rest hit it).
 */
export function checkRequests(s: DecoderShape, count: number, systemTokens: number, tenants: string[], seed: number): CheckRequest[] {
  const next = mulberry32(seed + 1000)
  const token = () => Math.floor(next() * s.vocab)
  const system = Array.from({ length: systemTokens }, token)
  return Array.from({ length: count }, (_, i) => ({
    prompt: [...system, ...Array.from({ length: 1 + ((i * 7) % 24) }, token)],
    maxTokens: 2 + ((i * 5) % 15),
    tenant: tenants.length > 0 ? tenants[i % tenants.length] : undefined,
  }))
}

export interface Verdict {
  /** Tokens whose logits differ from the CPU's by more than the tolerance, or that are not the CPU's argmax outside a near-tie. */
  mismatches: number
  /** Tokens that differ from the CPU's argmax within a near-tie (top-2 gap under the tolerance): accepted. */
  nearTies: number
  /** Largest |GPU - CPU| over every logit of every generated token. */
  maxLogitError: number
}

/** Checks each generated token of one request and its logits against the CPU reference. */
export function verify(s: DecoderShape, w: DecoderWeights, prompt: number[], tokens: number[], logits: number[][], tolerance: number): Verdict {
  const v: Verdict = { mismatches: 0, nearTies: 0, maxLogitError: 0 }
  if (tokens.length === 0 || logits.length !== tokens.length) return { ...v, mismatches: Math.max(1, tokens.length) }
  // One pass over prompt + generated (all but the last): row P - 1 + i predicts token i.
  const ref = referenceLogits(s, w, [...prompt, ...tokens.slice(0, -1)])
  const V = s.vocab
  tokens.forEach((tok, i) => {
    const cpu = ref.subarray((prompt.length - 1 + i) * V, (prompt.length + i) * V)
    const gpu = logits[i]
    let err = 0
    for (let j = 0; j < V; j++) err = Math.max(err, Math.abs(cpu[j] - gpu[j]))
    v.maxLogitError = Math.max(v.maxLogitError, err)
    const best = argmax(cpu)
    if (err > tolerance || argmax(gpu) !== tok) v.mismatches++
    else if (tok !== best) {
      if (cpu[best] - cpu[tok] <= tolerance) v.nearTies++
      else v.mismatches++
    }
  })
  return v
}
