//! A paged KV cache on the device heap: K/V block pools per layer, a device block table
//! kept current by the [`wgalloc_kv::KvManager`], and the kernels that write and read it.
//!
//! The manager decides which blocks hold which tokens; this module applies what it returns
//! on the device in submission order: block copies (copy-on-write, submitted at once),
//! table writes (queued writes, so they precede the next submission), then the caller's
//! step writes K/V at the slots of the tokens it appended.

mod kernels;

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex, OnceLock};

pub use kernels::{append_source, attention_source, KvDtype, KvLayout, MAX_HEAD_DIM};
use wgalloc_kv::{Append, KvConfig, KvManager, TableWrite};
pub use wgalloc_kv::{KvError, KvStats, SequenceSummary};

use crate::context::Gpu;
use crate::error::{Error, Result};
use crate::exec::ComputeKernel;
use crate::heap::{DeviceBlock, Heap, Scope, ScopeCharge, Usage};
use crate::host::{Direction, HostBlock};
use crate::signal::lock;
use crate::stream::{Stream, StreamUse};

/// What a cache holds and how large it is. Give `num_blocks` or `max_bytes`.
#[derive(Debug, Clone)]
pub struct KvOptions {
    pub layers: u32,
    pub kv_heads: u32,
    pub head_dim: u32,
    pub dtype: KvDtype,
    pub block_tokens: u32,
    pub num_blocks: Option<u32>,
    /// K and V of every layer together.
    pub max_bytes: Option<u64>,
    pub max_seqs: u32,
    pub max_seq_len: u32,
    pub prefix_caching: bool,
}

/// One sequence of a step and how many of its last tokens the step covers.
#[derive(Debug, Clone, Copy)]
pub struct StepSeq {
    pub seq: u64,
    pub tokens: u32,
}

/// The query side of an attention step.
#[derive(Debug, Clone, Copy)]
pub struct Heads {
    /// Query heads: a multiple of the cache's kv heads (grouped-query attention).
    pub query_heads: u32,
    /// Score scale (default `1 / sqrt(headDim)`): finite as an f32 (Note [Attention scores stay finite]).
    pub scale: Option<f64>,
}

struct Kernels {
    append: ComputeKernel,
    attention: ComputeKernel,
}

struct Inner {
    gpu: Gpu,
    heap: Heap,
    options: KvOptions,
    num_blocks: u32,
    table_width: u32,
    manager: Mutex<KvManager>,
    /// Per layer: the K pool and the V pool.
    pools: Vec<[DeviceBlock; 2]>,
    tables: DeviceBlock,
    swapped: Mutex<HashMap<u64, HostBlock>>,
    /// Rows and blocks held for work recorded on a stream and not yet submitted (Note [Blocks
    /// held for recorded work] in wgalloc-kv); locked after the manager, never before it.
    recorded: Mutex<Vec<RecordedUse>>,
    kernels: OnceLock<Kernels>,
    /// The scope charged with the pools and the table ([`KvCache::charge_to`]), returned with
    /// them when the last clone drops (Note [A scope's bytes are its live charges]).
    charge: Mutex<Option<ScopeCharge>>,
}

/// Work recorded on a stream that names a cache's rows and blocks.
struct RecordedUse {
    stream: StreamUse,
    rows: Vec<u32>,
    blocks: Vec<u32>,
    /// A K/V write (which a copy or swap-out must not overtake), not an attention (a read).
    writes: bool,
}

/// A paged KV cache (see the module docs). Cheap to clone; the pools are freed with the last clone.
#[derive(Clone)]
pub struct KvCache {
    inner: Arc<Inner>,
}

fn bad(path: &str, expected: impl Into<String>, got: impl Into<String>) -> KvError {
    KvError::config(path, expected, got)
}

impl KvOptions {
    /// Bytes of one block in one pool (K or V of one layer).
    pub fn block_bytes(&self) -> u64 {
        u64::from(self.block_tokens) * u64::from(self.kv_heads) * u64::from(self.head_dim) * self.dtype.bytes()
    }

    fn blocks(&self) -> Result<u32> {
        if self.layers == 0 || self.kv_heads == 0 || self.head_dim == 0 || self.block_tokens == 0 {
            let (path, _) = [("layers", self.layers), ("kvHeads", self.kv_heads), ("headDim", self.head_dim)]
                .into_iter()
                .find(|&(_, v)| v == 0)
                .unwrap_or(("blockTokens", 0));
            return Err(bad(path, "at least 1", "0").into());
        }
        if self.head_dim > MAX_HEAD_DIM || (self.dtype == KvDtype::F16 && !self.head_dim.is_multiple_of(2)) {
            return Err(
                bad("headDim", format!("1 to {MAX_HEAD_DIM} (even for f16 pools)"), self.head_dim.to_string()).into()
            );
        }
        let per_block = self.block_bytes() * 2 * u64::from(self.layers);
        match (self.num_blocks, self.max_bytes) {
            (Some(n), None) => Ok(n),
            (None, Some(bytes)) => {
                let n = bytes / per_block;
                if n == 0 {
                    return Err(bad(
                        "maxBytes",
                        format!("at least {per_block} bytes (one block: K and V of every layer)"),
                        bytes.to_string(),
                    )
                    .into());
                }
                u32::try_from(n).map_err(|_| {
                    bad(
                        "maxBytes",
                        format!("at most {} bytes (2^32 blocks)", per_block * u64::from(u32::MAX)),
                        bytes.to_string(),
                    )
                    .into()
                })
            }
            (Some(_), Some(_)) => Err(bad("maxBlocks", "one of maxBlocks and maxBytes", "both").into()),
            (None, None) => Err(bad("maxBlocks", "one of maxBlocks and maxBytes", "neither").into()),
        }
    }
}

/// Little-endian bytes of u32s.
fn words(values: impl IntoIterator<Item = u32>) -> Vec<u8> {
    values.into_iter().flat_map(u32::to_le_bytes).collect()
}

impl Heap {
    /// A KV cache whose pools and block table are blocks of this heap.
    pub fn kv_cache(&self, options: KvOptions) -> Result<KvCache> {
        let num_blocks = options.blocks()?;
        let config = KvConfig {
            block_tokens: options.block_tokens,
            num_blocks,
            max_seqs: options.max_seqs,
            max_seq_len: options.max_seq_len,
            prefix_caching: options.prefix_caching,
        };
        let manager = KvManager::new(config)?;
        let gpu = self.gpu().clone();
        let max_binding = gpu.limits().max_storage_buffer_binding_size;
        let pool_bytes = options.block_bytes() * u64::from(num_blocks);
        if pool_bytes > max_binding {
            return Err(bad(
                "maxBlocks",
                format!("a pool of at most {max_binding} bytes per layer (maxStorageBufferBindingSize)"),
                format!("{num_blocks} blocks ({pool_bytes} bytes)"),
            )
            .with_hint("use fewer blocks or f16")
            .into());
        }
        let table_bytes = 4 * u64::from(options.max_seqs) * u64::from(config.table_width());
        let tables = self.malloc(table_bytes, Usage::Device)?;
        tables.write(&vec![0u8; table_bytes as usize], 0)?;
        let mut pools = Vec::with_capacity(options.layers as usize);
        for _ in 0..options.layers {
            pools.push([self.malloc(pool_bytes, Usage::Device)?, self.malloc(pool_bytes, Usage::Device)?]);
        }
        Ok(KvCache {
            inner: Arc::new(Inner {
                gpu,
                heap: self.clone(),
                options,
                num_blocks,
                table_width: config.table_width(),
                manager: Mutex::new(manager),
                pools,
                tables,
                swapped: Mutex::new(HashMap::new()),
                recorded: Mutex::new(Vec::new()),
                kernels: OnceLock::new(),
                charge: Mutex::new(None),
            }),
        })
    }
}

impl KvCache {
    pub fn options(&self) -> &KvOptions {
        &self.inner.options
    }

    pub fn num_blocks(&self) -> u32 {
        self.inner.num_blocks
    }

    /// The heap holding the pools and the table.
    pub fn heap(&self) -> &Heap {
        &self.inner.heap
    }

    /// Device bytes the cache holds: every pool and the block table.
    pub fn bytes(&self) -> u64 {
        let i = &self.inner;
        i.pools.iter().flatten().map(DeviceBlock::size).sum::<u64>() + i.tables.size()
    }

    /// Charges the cache's device bytes to `scope` until the pools go back to the heap, with the
    /// last clone (`QUOTA_EXCEEDED` when they do not fit; nothing charged). Once per cache.
    pub fn charge_to(&self, scope: &Scope) -> Result<()> {
        self.heap().charge_once(&mut lock(&self.inner.charge), scope, self.bytes(), "createKvCache", "cache")
    }

    /// `INVALID_ARGUMENT` (naming `what`) unless `scope` is a scope of the cache's device: a
    /// sequence's scope decides which prefixes it may share.
    pub fn check_scope(&self, scope: &Scope, what: &str) -> Result<()> {
        self.heap().check_scope(scope, what)
    }

    /// The device block table: `u32 [maxSequences][ceil(maxSequenceLength / blockTokens)]`.
    pub fn tables(&self) -> &DeviceBlock {
        &self.inner.tables
    }

    /// The K and V pools of `layer`.
    pub fn pools(&self, layer: u32) -> Result<&[DeviceBlock; 2]> {
        self.inner.pools.get(layer as usize).ok_or_else(|| {
            Error::invalid("layer", format!("below {} (the cache's layers)", self.inner.pools.len()), layer.to_string())
        })
    }

    /// The manager, once the holds of work whose stream has submitted it (or was dropped) are
    /// let go: the queue orders that work before anything recorded later.
    fn manager(&self) -> std::sync::MutexGuard<'_, KvManager> {
        let mut m = lock(&self.inner.manager);
        lock(&self.inner.recorded).retain(|r| {
            let pending = r.stream.resolved_seq().is_none();
            if !pending {
                m.unhold(&r.rows, &r.blocks);
            }
            pending
        });
        m
    }

    /// Holds `rows` and `blocks`, which work just recorded on `stream` names, until it submits.
    fn hold(&self, stream: &Stream, rows: Vec<u32>, mut blocks: Vec<u32>, writes: bool) {
        blocks.sort_unstable();
        blocks.dedup();
        self.manager().hold(&rows, &blocks);
        lock(&self.inner.recorded).push(RecordedUse {
            stream: StreamUse::capture(stream.marks()),
            rows,
            blocks,
            writes,
        });
    }

    /// `INVALID_ARGUMENT` when a K/V write recorded on a stream and not yet submitted names one
    /// of `blocks`: `what` (a swap-out's or a copy-on-write's copy, submitted at once) would
    /// copy them before that write lands.
    fn refuse_unsubmitted_writes(&self, seq: u64, blocks: &[u32], what: &'static str) -> Result<()> {
        let recorded = lock(&self.inner.recorded);
        let pending = recorded
            .iter()
            .any(|r| r.writes && r.stream.resolved_seq().is_none() && r.blocks.iter().any(|b| blocks.contains(b)));
        if pending {
            return Err(KvError::WriteNotSubmitted { seq, what }.into());
        }
        Ok(())
    }

    pub fn stats(&self) -> KvStats {
        self.manager().stats()
    }

    /// Every live sequence: tokens, blocks, shared blocks, swapped.
    pub fn sequences(&self) -> Vec<SequenceSummary> {
        self.manager().summaries()
    }

    /// Heap block ids of the pools (K then V of each layer) and of the block table, last.
    pub fn block_ids(&self) -> Vec<u64> {
        let i = &self.inner;
        i.pools.iter().flatten().chain(std::iter::once(&i.tables)).map(DeviceBlock::id).collect()
    }

    /// `salt` and, unless prefixes are shared across scopes, the scope, as one salt
    /// (Note [Chained block hashes] in wgalloc-kv).
    pub fn salt_of(salt: &str, scope: Option<&str>) -> u64 {
        let mut h = DefaultHasher::new();
        (salt, scope).hash(&mut h);
        h.finish()
    }

    fn write_table(&self, w: &TableWrite) -> Result<()> {
        if w.blocks.is_empty() {
            return Ok(());
        }
        let width = u64::from(self.table_width());
        let at = 4 * (u64::from(w.row) * width + u64::from(w.index));
        self.inner.tables.write(&words(w.blocks.iter().copied()), at)
    }

    /// Entries per block-table row (the manager's config owns the rule).
    fn table_width(&self) -> u32 {
        self.inner.table_width
    }

    /// Copies, then table writes (Note [Step order] in the module docs).
    fn apply(&self, a: &Append) -> Result<()> {
        if !a.copies.is_empty() {
            let bytes = self.inner.options.block_bytes();
            let mut stream = self.inner.gpu.create_stream()?;
            for pool in self.inner.pools.iter().flatten() {
                for c in &a.copies {
                    pool.copy_on(
                        &mut stream,
                        pool,
                        u64::from(c.src) * bytes,
                        u64::from(c.dst) * bytes,
                        bytes,
                        "kv copy-on-write",
                    )?;
                }
            }
            stream.submit()?;
        }
        a.table.iter().try_for_each(|w| self.write_table(w))
    }

    /// Starts a sequence for `prompt` (token ids); returns its id and how many leading
    /// tokens were found in the prefix cache (their K/V need no prefill).
    pub fn add_sequence(&self, prompt: &[u32], salt: u64) -> Result<(u64, u32)> {
        let mut m = self.manager();
        let (id, write) = m.add_sequence(prompt, salt)?;
        let cached = m.len(id)?;
        drop(m);
        self.write_table(&write)?;
        Ok((id, cached))
    }

    /// Tokens of `prompt` the prefix cache holds now, and whether a sequence for all of it fits
    /// now; takes and counts nothing (a scheduler asks before [`KvCache::add_sequence`]).
    pub fn lookup(&self, prompt: &[u32], salt: u64) -> (u32, bool) {
        self.manager().lookup(prompt, salt)
    }

    /// Appends tokens (their K/V are written by the next [`KvCache::write`] of the sequence).
    pub fn append(&self, seq: u64, tokens: &[u32]) -> Result<u32> {
        let mut m = self.manager();
        let adding = u32::try_from(tokens.len()).unwrap_or(u32::MAX);
        self.refuse_unsubmitted_writes(seq, &m.copy_sources(seq, adding)?, "append")?;
        let a = m.append(seq, tokens)?;
        let len = m.len(seq)?;
        drop(m);
        self.apply(&a)?;
        Ok(len)
    }

    /// Blocks for `tokens` more tokens, so that appending them cannot fail for space.
    pub fn reserve(&self, seq: u64, tokens: u32) -> Result<()> {
        let mut m = self.manager();
        self.refuse_unsubmitted_writes(seq, &m.copy_sources(seq, tokens)?, "reserve")?;
        let a = m.reserve(seq, tokens)?;
        drop(m);
        self.apply(&a)
    }

    pub fn can_append(&self, step: &[(u64, u32)]) -> Result<bool> {
        Ok(self.manager().can_append(step)?)
    }

    pub fn fork(&self, seq: u64) -> Result<u64> {
        let (id, write) = self.manager().fork(seq)?;
        self.write_table(&write)?;
        Ok(id)
    }

    pub fn len(&self, seq: u64) -> Result<u32> {
        Ok(self.manager().len(seq)?)
    }

    pub fn is_swapped(&self, seq: u64) -> Result<bool> {
        Ok(self.manager().row(seq)?.is_none())
    }

    pub fn free(&self, seq: u64) -> Result<()> {
        self.manager().free(seq)?;
        if let Some(host) = lock(&self.inner.swapped).remove(&seq) {
            host.free()?;
        }
        Ok(())
    }

    /// Copies the sequence's blocks to a host block of the staging cache and releases them.
    pub fn swap_out(&self, seq: u64) -> Result<()> {
        let i = &self.inner;
        let mut m = self.manager();
        let used = m.len(seq)?.div_ceil(i.options.block_tokens) as u64;
        if m.row(seq)?.is_none() {
            return Err(KvError::Swapped { seq, what: "swapOut" }.into());
        }
        self.refuse_unsubmitted_writes(seq, &m.blocks(seq)?[..used as usize], "swapOut")?;
        let bytes = i.options.block_bytes();
        let per_block = bytes * 2 * u64::from(i.options.layers);
        let host = i.heap.gpu().host()?.alloc((used * per_block).max(4), Direction::Download)?;
        let blocks = m.blocks(seq)?[..used as usize].to_vec();
        let mut stream = i.gpu.create_stream()?;
        // Host layout: [block][layer][k, v] of `bytes` each.
        for (n, &b) in blocks.iter().enumerate() {
            for (p, pool) in i.pools.iter().flatten().enumerate() {
                let at = n as u64 * per_block + p as u64 * bytes;
                host.copy_from_device_on(&mut stream, pool, u64::from(b) * bytes, at, bytes)?;
            }
        }
        stream.submit()?;
        // Released only once the copies are submitted: nothing can reuse the blocks first.
        m.swap_out(seq)?;
        drop(m);
        lock(&i.swapped).insert(seq, host);
        Ok(())
    }

    /// Waits for the swap-out copy, then takes blocks and writes the contents back.
    pub async fn swap_in(&self, seq: u64) -> Result<()> {
        let i = &self.inner;
        let host = {
            let m = self.manager();
            if m.row(seq)?.is_some() {
                return Err(KvError::NotSwapped { seq }.into());
            }
            lock(&i.swapped)
                .remove(&seq)
                // Swapped out, but its bytes are out of the table: a swap-in took them and runs.
                .ok_or(KvError::SwapInRunning { seq })?
        };
        let restored = async {
            host.map().await?;
            let back = self.manager().swap_in(seq)?;
            let bytes = i.options.block_bytes();
            let per_block = bytes * 2 * u64::from(i.options.layers);
            for &(n, b) in &back.restore {
                for (p, pool) in i.pools.iter().flatten().enumerate() {
                    let data = host.read(u64::from(n) * per_block + p as u64 * bytes, bytes)?;
                    pool.write(&data, u64::from(b) * bytes)?;
                }
            }
            self.write_table(&back.table)
        }
        .await;
        match restored {
            Ok(()) => host.free(),
            Err(e) => {
                // Still swapped out (a refusal changes nothing): keep the bytes for a later try.
                if self.manager().row(seq).ok().flatten().is_none() && self.manager().contains(seq) {
                    lock(&i.swapped).insert(seq, host);
                } else {
                    host.free()?;
                }
                Err(e)
            }
        }
    }

    fn kernels(&self) -> Result<&Kernels> {
        if let Some(k) = self.inner.kernels.get() {
            return Ok(k);
        }
        let dtype = self.inner.options.dtype;
        let gpu = &self.inner.gpu;
        let append = gpu.compute_kernel("kv_append", &append_source(dtype), "main", 5, true)?;
        let attention =
            gpu.compute_kernel("paged_attention", &attention_source(dtype, KvLayout::Paged), "main", 6, true)?;
        Ok(self.inner.kernels.get_or_init(|| Kernels { append, attention }))
    }

    /// A scratch block holding `values` (freed once the stream's work ran).
    fn upload(&self, values: &[u32]) -> Result<DeviceBlock> {
        let block = self.inner.heap.malloc(4 * values.len().max(1) as u64, Usage::Device)?;
        block.write(&words(values.iter().copied()), 0)?;
        Ok(block)
    }

    fn check_input(&self, block: &DeviceBlock, need: u64, call: &str, path: &str) -> Result<()> {
        if block.requested_size() < need {
            return Err(Error::invalid(
                path,
                format!("a block of at least {need} bytes"),
                format!("{} bytes", block.requested_size()),
            )
            .in_call(call));
        }
        Ok(())
    }

    /// Records the write of K and V (`[tokens][kvHeads][headDim]` f32, in step order) of
    /// the last `tokens` tokens of each step sequence into `layer`'s pools.
    pub fn write(
        &self,
        stream: &mut Stream,
        layer: u32,
        step: &[StepSeq],
        k: &DeviceBlock,
        v: &DeviceBlock,
    ) -> Result<()> {
        let [kp, vp] = self.pools(layer)?;
        let mut slots = Vec::new();
        let bt = self.inner.options.block_tokens;
        {
            let m = self.manager();
            for s in step {
                let rows = m.query_rows(s.seq, s.tokens, "write")?;
                let blocks = m.blocks(s.seq)?;
                slots.extend(rows.iter().map(|&[_, visible]| {
                    let p = visible - 1;
                    blocks[(p / bt) as usize] * bt + p % bt
                }));
            }
        }
        if slots.is_empty() {
            return Err(Error::invalid("slots", "at least one token", "none").in_call("write"));
        }
        let o = &self.inner.options;
        let width = o.kv_heads * o.head_dim;
        let need = 4 * slots.len() as u64 * u64::from(width);
        self.check_input(k, need, "write", "k")?;
        self.check_input(v, need, "write", "v")?;
        let kernel = &self.kernels()?.append;
        let slot_block = self.upload(&slots)?;
        let threads = slots.len() as u64 * u64::from(width) / if o.dtype == KvDtype::F16 { 2 } else { 1 };
        let groups = threads.div_ceil(64);
        let wg = [groups.min(u64::from(kernels::GRID)) as u32, groups.div_ceil(u64::from(kernels::GRID)) as u32, 1];
        let uniform = words([slots.len() as u32, width, 0, 0]);
        stream.dispatch(kernel, &[k, v, &slot_block, kp, vp], Some(&uniform), wg)?;
        self.hold(stream, Vec::new(), slots.iter().map(|s| s / bt).collect(), true);
        slot_block.free()?;
        // Written once the last layer is (Note [A block is shared once written] in wgalloc-kv).
        if layer + 1 == o.layers {
            let mut m = self.manager();
            for s in step {
                m.mark_written(s.seq, s.tokens)?;
            }
        }
        Ok(())
    }

    /// Records attention of the step's query rows (`[rows][queryHeads][headDim]` f32 in `q`,
    /// the last `tokens` positions of each sequence, causal) over `layer`'s K/V into `out`.
    pub fn attention(
        &self,
        stream: &mut Stream,
        layer: u32,
        step: &[StepSeq],
        heads: Heads,
        q: &DeviceBlock,
        out: &DeviceBlock,
    ) -> Result<()> {
        let [kp, vp] = self.pools(layer)?;
        let o = &self.inner.options;
        let Heads { query_heads, scale } = heads;
        // Note [Attention scores stay finite] (the kernel's): a scale past f32's range would be
        // infinite there, and its scores NaN.
        if let Some(s) = scale.filter(|s| s.is_nan() || s.abs() > f64::from(f32::MAX)) {
            return Err(Error::invalid(
                "options.scale",
                "a finite number of at most 3.4e38 in magnitude (an f32)",
                s.to_string(),
            )
            .in_call("kv attention"));
        }
        if query_heads == 0 || !query_heads.is_multiple_of(o.kv_heads) {
            return Err(Error::invalid(
                "queryHeads",
                format!("a positive multiple of kvHeads ({})", o.kv_heads),
                query_heads.to_string(),
            )
            .with_hint(format!(
                "kv attention: queryHeads must be a positive multiple of kvHeads ({}), got {query_heads}",
                o.kv_heads
            )));
        }
        let mut rows = Vec::new();
        // The rows and blocks the dispatch reads (through the table, when it runs).
        let (mut read_rows, mut read_blocks) = (Vec::new(), Vec::new());
        {
            let m = self.manager();
            let bt = o.block_tokens as usize;
            for s in step {
                rows.extend(m.query_rows(s.seq, s.tokens, "attention")?.into_iter().flatten());
                read_rows.extend(m.row(s.seq)?);
                read_blocks.extend_from_slice(&m.blocks(s.seq)?[..(m.len(s.seq)? as usize).div_ceil(bt)]);
            }
        }
        let n = (rows.len() / 2) as u64;
        if n == 0 {
            return Err(Error::invalid("rows", "at least one query row", "none").in_call("attention"));
        }
        let need = 4 * n * u64::from(query_heads) * u64::from(o.head_dim);
        self.check_input(q, need, "attention", "q")?;
        self.check_input(out, need, "attention", "out")?;
        let kernel = &self.kernels()?.attention;
        let row_block = self.upload(&rows)?;
        let scale = scale.map_or(1.0 / (o.head_dim as f32).sqrt(), |s| s as f32);
        let mut uniform = words([n as u32, query_heads, o.kv_heads, o.head_dim, o.block_tokens, self.table_width()]);
        uniform.extend(scale.to_le_bytes());
        uniform.extend(0u32.to_le_bytes());
        let grid = u64::from(kernels::GRID);
        let wg = [query_heads, n.min(grid) as u32, n.div_ceil(grid) as u32];
        stream.dispatch(kernel, &[q, kp, vp, &self.inner.tables, &row_block, out], Some(&uniform), wg)?;
        self.hold(stream, read_rows, read_blocks, false);
        row_block.free()
    }
}
