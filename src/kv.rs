//! `KvCache`: the paged KV cache. Refusals carry their figures as every binding error does
//! (Note [Errors carry their data] in error.rs).

use std::sync::Mutex;

use napi::bindgen_prelude::*;
use napi_derive::napi;
use wgalloc_core::kv::{self as core_kv, Heads, KvDtype, StepSeq};

use crate::error::{coded, invalid, invalid_hint, invalid_in, to_u64, to_u64_in, IntoNapi};
use crate::gpu::Gpu;
use crate::heap::DeviceBlock;
use crate::stream::Stream;
use wgalloc_core::error::quoted;

/// Options of `gpu.createKvCache()` as the binding takes them.
/// @internal
#[napi(object)]
pub struct KvCacheOptions {
    pub layers: u32,
    pub kv_heads: u32,
    pub head_dim: u32,
    pub dtype: String,
    pub block_tokens: u32,
    pub max_blocks: Option<u32>,
    pub max_bytes: Option<f64>,
    pub max_sequences: u32,
    pub max_sequence_length: u32,
    pub prefix_caching: bool,
}

/// What a KV cache holds and has done (`cache.stats()`).
#[napi(object)]
pub struct KvCacheStats {
    /// Blocks in each pool.
    pub total_blocks: u32,
    /// Blocks some sequence refers to.
    pub used_blocks: u32,
    /// Unreferenced blocks with no cached content.
    pub free_blocks: u32,
    /// Unreferenced full blocks kept for prefix hits, evicted least recently used when the pool runs short.
    pub cached_blocks: u32,
    /// Live sequences, swapped-out ones included.
    pub sequences: u32,
    /// Sequences swapped out to host memory.
    pub swapped_sequences: u32,
    /// Tokens the resident sequences hold (a shared block counts once per sequence).
    pub tokens: f64,
    /// Prompt tokens looked up in the prefix cache (whole blocks; a prompt's last token is always computed).
    pub prefix_query_tokens: f64,
    /// Of those, tokens served from cached blocks: their prefill is skipped.
    pub prefix_hit_tokens: f64,
    /// Cached blocks evicted to serve an allocation.
    pub evictions: f64,
    /// Shared partial blocks copied on their first write (after `fork()`).
    pub copies_on_write: f64,
    /// Blocks copied to host memory by `swapOut()`.
    pub swapped_out_blocks: f64,
    /// Blocks written back by `swapIn()` (blocks still in the prefix cache are taken without a copy).
    pub swapped_in_blocks: f64,
}

/// What the prefix cache holds of a prompt, and whether a sequence for it fits now.
/// @internal
#[napi(object)]
pub struct KvLookup {
    pub cached_tokens: u32,
    pub fits: bool,
}

/// One live sequence of a cache, as `cache.snapshot()` lists it.
/// @internal
#[napi(object)]
pub struct KvSequenceRow {
    pub id: f64,
    pub tokens: u32,
    pub blocks: u32,
    pub shared_blocks: u32,
    pub swapped: bool,
}

fn seq_id(seq: f64) -> Result<u64> {
    to_u64(seq, "sequence id")
}

fn steps(seqs: Vec<f64>, tokens: Vec<u32>) -> Result<Vec<StepSeq>> {
    if seqs.len() != tokens.len() {
        return Err(invalid_hint(
            "tokens",
            format!("{} token counts (one per sequence)", seqs.len()),
            tokens.len().to_string(),
            "kv step: one token count per sequence",
        ));
    }
    seqs.into_iter().zip(tokens).map(|(s, tokens)| Ok(StepSeq { seq: seq_id(s)?, tokens })).collect()
}

/// A paged KV cache on the device heap.
/// @internal
#[napi]
pub struct KvCache {
    inner: Mutex<Option<core_kv::KvCache>>,
}

impl KvCache {
    fn with<T>(&self, f: impl FnOnce(&core_kv::KvCache) -> Result<T>) -> Result<T> {
        let guard = self.inner.lock().map_err(|_| coded("INTERNAL", "kv cache lock poisoned"))?;
        match guard.as_ref() {
            Some(c) => f(c),
            None => Err(coded("USE_AFTER_FREE", "the KV cache was released")),
        }
    }

    fn cache(&self) -> Result<core_kv::KvCache> {
        self.with(|c| Ok(c.clone()))
    }
}

#[napi]
impl Gpu {
    /// Native form of `gpu.createKvCache()`.
    /// @internal
    #[napi(catch_unwind)]
    pub fn create_kv_cache(&self, o: KvCacheOptions) -> Result<KvCache> {
        let dtype = KvDtype::parse(&o.dtype)
            .ok_or_else(|| invalid_in("createKvCache", "options.dtype", "'f32' or 'f16'", quoted(&o.dtype)))?;
        let max_bytes = o.max_bytes.map(|b| to_u64_in(b, "createKvCache", "options.maxBytes")).transpose()?;
        let options = core_kv::KvOptions {
            layers: o.layers,
            kv_heads: o.kv_heads,
            head_dim: o.head_dim,
            dtype,
            block_tokens: o.block_tokens,
            num_blocks: o.max_blocks,
            max_bytes,
            max_seqs: o.max_sequences,
            max_seq_len: o.max_sequence_length,
            prefix_caching: o.prefix_caching,
        };
        let cache = self.inner.heap().and_then(|h| h.kv_cache(options)).napi()?;
        Ok(KvCache { inner: Mutex::new(Some(cache)) })
    }
}

#[napi]
impl KvCache {
    /// Physical blocks in each pool.
    #[napi(catch_unwind, getter)]
    pub fn num_blocks(&self) -> Result<u32> {
        self.with(|c| Ok(c.num_blocks()))
    }

    /// Device bytes of the pools and the block table.
    #[napi(catch_unwind, getter)]
    pub fn bytes(&self) -> Result<f64> {
        self.with(|c| Ok(c.bytes() as f64))
    }

    #[napi(catch_unwind)]
    pub fn stats(&self) -> Result<KvCacheStats> {
        self.with(|c| {
            let s = c.stats();
            Ok(KvCacheStats {
                total_blocks: s.total_blocks,
                used_blocks: s.used_blocks,
                free_blocks: s.free_blocks,
                cached_blocks: s.cached_blocks,
                sequences: s.sequences,
                swapped_sequences: s.swapped_sequences,
                tokens: s.tokens as f64,
                prefix_query_tokens: s.prefix_query_tokens as f64,
                prefix_hit_tokens: s.prefix_hit_tokens as f64,
                evictions: s.evictions as f64,
                copies_on_write: s.copies_on_write as f64,
                swapped_out_blocks: s.swapped_out_blocks as f64,
                swapped_in_blocks: s.swapped_in_blocks as f64,
            })
        })
    }

    /// Every live sequence, by id.
    #[napi(catch_unwind)]
    pub fn sequences(&self) -> Result<Vec<KvSequenceRow>> {
        self.with(|c| {
            Ok(c.sequences()
                .into_iter()
                .map(|s| KvSequenceRow {
                    id: s.id as f64,
                    tokens: s.tokens,
                    blocks: s.blocks,
                    shared_blocks: s.shared_blocks,
                    swapped: s.swapped,
                })
                .collect())
        })
    }

    /// Heap block ids of the pools (K then V of each layer), then of the block table.
    #[napi(catch_unwind)]
    pub fn block_ids(&self) -> Result<Vec<f64>> {
        self.with(|c| Ok(c.block_ids().into_iter().map(|id| id as f64).collect()))
    }

    /// What `addSequence(prompt)` would find in the prefix cache, and whether it fits; changes nothing.
    #[napi(catch_unwind)]
    pub fn lookup(&self, prompt: Uint32Array, salt: String, scope: Option<String>) -> Result<KvLookup> {
        self.with(|c| {
            let (cached_tokens, fits) = c.lookup(&prompt, core_kv::KvCache::salt_of(&salt, scope.as_deref()));
            Ok(KvLookup { cached_tokens, fits })
        })
    }

    /// Starts a sequence; `value` is its id (`length()` tells how much the prefix cache held).
    #[napi(catch_unwind)]
    pub fn add_sequence(&self, prompt: Uint32Array, salt: String, scope: Option<String>) -> Result<f64> {
        self.with(|c| {
            let salt = core_kv::KvCache::salt_of(&salt, scope.as_deref());
            c.add_sequence(&prompt, salt).map(|(id, _)| id as f64).napi()
        })
    }

    /// Tokens of a sequence.
    #[napi(catch_unwind)]
    pub fn length(&self, seq: f64) -> Result<u32> {
        self.with(|c| c.len(seq_id(seq)?).napi())
    }

    /// Whether the sequence is swapped out.
    #[napi(catch_unwind)]
    pub fn is_swapped(&self, seq: f64) -> Result<bool> {
        self.with(|c| c.is_swapped(seq_id(seq)?).napi())
    }

    /// Appends tokens; `value` is the new length.
    #[napi(catch_unwind)]
    pub fn append(&self, seq: f64, tokens: Uint32Array) -> Result<u32> {
        self.with(|c| c.append(seq_id(seq)?, &tokens).napi())
    }

    #[napi(catch_unwind)]
    pub fn reserve(&self, seq: f64, tokens: u32) -> Result<()> {
        self.with(|c| c.reserve(seq_id(seq)?, tokens).napi())
    }

    #[napi(catch_unwind)]
    pub fn can_append(&self, seqs: Vec<f64>, tokens: Vec<u32>) -> Result<bool> {
        let step: Vec<(u64, u32)> = steps(seqs, tokens)?.into_iter().map(|s| (s.seq, s.tokens)).collect();
        self.with(|c| c.can_append(&step).napi())
    }

    /// A sequence sharing every block of `seq`; `value` is its id.
    #[napi(catch_unwind)]
    pub fn fork(&self, seq: f64) -> Result<f64> {
        self.with(|c| c.fork(seq_id(seq)?).map(|id| id as f64).napi())
    }

    #[napi(catch_unwind)]
    pub fn free(&self, seq: f64) -> Result<()> {
        self.with(|c| c.free(seq_id(seq)?).napi())
    }

    #[napi(catch_unwind)]
    pub fn swap_out(&self, seq: f64) -> Result<()> {
        self.with(|c| c.swap_out(seq_id(seq)?).napi())
    }

    /// Swaps a sequence back in once its copy to the host completed.
    #[napi(catch_unwind, ts_return_type = "Promise<void>")]
    pub fn swap_in<'env>(&self, env: &'env Env, seq: f64) -> Result<PromiseRaw<'env, ()>> {
        let (cache, seq) = (self.cache()?, seq_id(seq)?);
        env.spawn_future(async move { cache.swap_in(seq).await.napi() })
    }

    /// Records the K/V write of the step's tokens into `layer`.
    #[napi(catch_unwind)]
    pub fn write(
        &self,
        stream: &Stream,
        layer: u32,
        seqs: Vec<f64>,
        tokens: Vec<u32>,
        k: &DeviceBlock,
        v: &DeviceBlock,
    ) -> Result<()> {
        let step = steps(seqs, tokens)?;
        let cache = self.cache()?;
        stream.with(|s| cache.write(s, layer, &step, &k.inner, &v.inner))
    }

    /// Records attention of the step's query rows over `layer`.
    #[napi(catch_unwind)]
    #[allow(clippy::too_many_arguments)]
    pub fn attention(
        &self,
        stream: &Stream,
        layer: u32,
        seqs: Vec<f64>,
        tokens: Vec<u32>,
        query_heads: u32,
        scale: Option<f64>,
        q: &DeviceBlock,
        out: &DeviceBlock,
    ) -> Result<()> {
        let step = steps(seqs, tokens)?;
        let cache = self.cache()?;
        let heads = Heads { query_heads, scale };
        stream.with(|s| cache.attention(s, layer, &step, heads, &q.inner, &out.inner))
    }

    /// Frees the pools and the table (after the GPU work recorded on them); later calls fail.
    #[napi(catch_unwind)]
    pub fn release(&self) -> Result<()> {
        let mut guard = self.inner.lock().map_err(|_| coded("INTERNAL", "kv cache lock poisoned"))?;
        guard.take();
        Ok(())
    }

    /// Charges the device bytes to `scope` until they go back to the heap, at `release()` or
    /// collection (`QUOTA_EXCEEDED` when they do not fit).
    #[napi(catch_unwind)]
    pub fn charge_to(&self, scope: &crate::heap::HeapScope) -> Result<()> {
        self.cache()?.charge_to(&scope.inner).napi()
    }

    /// `INVALID_ARGUMENT` (naming `what`) unless `scope` is a scope of the cache's device.
    #[napi(catch_unwind)]
    pub fn check_scope(&self, scope: &crate::heap::HeapScope, what: String) -> Result<()> {
        self.cache()?.check_scope(&scope.inner, &what).napi()
    }
}

/// The WGSL of the KV kernels, for graphs: `append` and `attention` (`layout`: `paged` or `contiguous`).
/// @internal
#[napi(catch_unwind)]
pub fn kv_kernel_source(kernel: String, dtype: String, layout: Option<String>) -> Result<String> {
    let dtype = KvDtype::parse(&dtype)
        .ok_or_else(|| invalid("dtype", "'f32' or 'f16'", wgalloc_core::error::quoted(&dtype)))?;
    match (kernel.as_str(), layout.as_deref()) {
        ("append", None) => Ok(core_kv::append_source(dtype)),
        ("attention", None | Some("paged")) => Ok(core_kv::attention_source(dtype, core_kv::KvLayout::Paged)),
        ("attention", Some("contiguous")) => Ok(core_kv::attention_source(dtype, core_kv::KvLayout::Contiguous)),
        _ => Err(invalid_hint(
            "kernel",
            "'append', or 'attention' with layout 'paged' or 'contiguous'",
            wgalloc_core::error::quoted(&kernel),
            format!("no KV kernel '{kernel}' with layout {layout:?}"),
        )),
    }
}
