//! Sequences and their block tables over a [`BlockPool`].

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use crate::error::{KvError, Result};
use crate::pool::{BlockId, BlockPool};

/// The shape of a cache's bookkeeping (the GPU layer adds the tensor geometry).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvConfig {
    /// Tokens per block.
    pub block_tokens: u32,
    /// Physical blocks in the pools.
    pub num_blocks: u32,
    /// Rows of the device block table: sequences resident at once.
    pub max_seqs: u32,
    /// The longest sequence, in tokens: the block table's row width is `ceil(max_seq_len / block_tokens)`.
    pub max_seq_len: u32,
    /// Whether full blocks are entered in the prefix map and shared by later prompts.
    pub prefix_caching: bool,
}

impl KvConfig {
    /// Entries per block-table row.
    pub fn table_width(&self) -> u32 {
        self.max_seq_len.div_ceil(self.block_tokens)
    }

    fn check(&self) -> Result<()> {
        if self.block_tokens == 0 {
            return Err(KvError::config("blockTokens", "at least 1", "0"));
        }
        if self.num_blocks == 0 {
            return Err(KvError::config("maxBlocks", "at least one block", "0"));
        }
        if self.max_seqs == 0 {
            return Err(KvError::config("maxSequences", "at least 1", "0"));
        }
        if self.max_seq_len == 0 {
            return Err(KvError::config("maxSequenceLength", "at least 1", "0"));
        }
        // Physical slots (block * blockTokens + offset) and table entries are u32 on the device.
        if u64::from(self.num_blocks) * u64::from(self.block_tokens) > u64::from(u32::MAX)
            || u64::from(self.max_seqs) * u64::from(self.table_width()) > u64::from(u32::MAX / 4)
        {
            return Err(KvError::config(
                "maxBlocks",
                "blocks x blockTokens and maxSequences x table width that fit in 32 bits",
                format!("{} blocks of {} tokens, {} sequences", self.num_blocks, self.block_tokens, self.max_seqs),
            ));
        }
        Ok(())
    }
}

/// A run of block-table entries to write: `row`'s entries from `index` on become `blocks`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableWrite {
    pub row: u32,
    pub index: u32,
    pub blocks: Vec<BlockId>,
}

/// A block whose contents must be copied on the GPU before the step writes (copy-on-write).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockCopy {
    pub src: BlockId,
    pub dst: BlockId,
}

/// What the GPU must do for an append, in order: the copies, the table writes, then the
/// step writes K/V at `slots` (one physical slot, `block * blockTokens + offset`, per token).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Append {
    pub copies: Vec<BlockCopy>,
    pub table: Vec<TableWrite>,
    pub slots: Vec<u32>,
}

/// What a swap-in restores: its table row, and the blocks whose contents must be written
/// back (`(logical index, block)`); the other entries were still in the prefix cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwapIn {
    pub table: TableWrite,
    pub restore: Vec<(u32, BlockId)>,
}

/// Counters and gauges of a cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KvStats {
    pub total_blocks: u32,
    /// Blocks some sequence refers to, or that work recorded on a stream and not yet submitted
    /// names (Note [Blocks held for recorded work]).
    pub used_blocks: u32,
    /// Unreferenced blocks with no cached content.
    pub free_blocks: u32,
    /// Unreferenced full blocks kept for prefix hits (evicted when the pool runs short).
    pub cached_blocks: u32,
    pub sequences: u32,
    pub swapped_sequences: u32,
    /// Tokens the resident sequences hold (a shared block counts once per sequence).
    pub tokens: u64,
    /// Prompt tokens looked up in the prefix map (whole blocks, the last prompt token excluded).
    pub prefix_query_tokens: u64,
    /// Of those, tokens served from cached blocks.
    pub prefix_hit_tokens: u64,
    pub evictions: u64,
    pub copies_on_write: u64,
    pub swapped_out_blocks: u64,
    pub swapped_in_blocks: u64,
}

/// One sequence as a snapshot shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SequenceSummary {
    pub id: u64,
    pub tokens: u32,
    /// Blocks it refers to (reserved ones included; none while swapped out).
    pub blocks: u32,
    /// Of those, blocks other sequences (or forks) refer to as well.
    pub shared_blocks: u32,
    pub swapped: bool,
}

struct Sequence {
    /// Block-table row; `None` while swapped out.
    row: Option<u32>,
    blocks: Vec<BlockId>,
    tokens: Vec<u32>,
    /// Chained hash of each full block (Note [Chained block hashes]).
    hashes: Vec<u64>,
    /// Leading tokens whose K/V were written (Note [A block is shared once written]).
    written: u32,
    salt: u64,
}

// Note [Chained block hashes]
// A full block is named by hash(parent's hash, its tokens, salt), so equal hashes mean an
// equal whole prefix, not only an equal block: attention over a block depends on every token
// before it. The salt keeps apart what must not share KV (another LoRA, another tenant); the
// GPU layer folds the heap scope into it unless sharing across scopes was asked for. A hit is
// verified against the stored tokens, parent hash and salt before it is taken.
const ROOT_HASH: u64 = 0x9e37_79b9_7f4a_7c15;

// Note [A block is shared once written]
// `append` is bookkeeping: the K/V of the tokens it adds exist only once the step writes them.
// A full block enters the prefix map when its tokens are written (`mark_written`), not when it
// fills: a step that fails between its appends and its writes, or a caller that never writes,
// leaves blocks that no later prompt may take, since they hold no K/V. Prefix hits, forks and
// swaps carry what was written with the blocks.

fn chain_hash(parent: u64, tokens: &[u32], salt: u64) -> u64 {
    let mut h = DefaultHasher::new();
    (parent, salt, tokens).hash(&mut h);
    h.finish()
}

/// The block manager: sequences, their block tables, the prefix map and the free queue.
/// Every method checks before it changes anything, so an error leaves the state as it was.
pub struct KvManager {
    config: KvConfig,
    pool: BlockPool,
    seqs: HashMap<u64, Sequence>,
    free_rows: Vec<u32>,
    /// Holds on each block-table row, and whether a held row was let go (Note [Blocks held for
    /// recorded work]: an attention recorded on a stream reads its rows when it runs).
    row_holds: Vec<u32>,
    row_parked: Vec<bool>,
    next_id: u64,
    stats: KvStats,
}

impl KvManager {
    pub fn new(config: KvConfig) -> Result<Self> {
        config.check()?;
        Ok(KvManager {
            config,
            pool: BlockPool::new(config.num_blocks),
            seqs: HashMap::new(),
            free_rows: (0..config.max_seqs).rev().collect(),
            row_holds: vec![0; config.max_seqs as usize],
            row_parked: vec![false; config.max_seqs as usize],
            next_id: 1,
            stats: KvStats::default(),
        })
    }

    pub fn config(&self) -> &KvConfig {
        &self.config
    }

    fn seq(&self, id: u64) -> Result<&Sequence> {
        self.seqs.get(&id).ok_or(KvError::UnknownSequence { seq: id })
    }

    fn resident(&self, id: u64, what: &'static str) -> Result<&Sequence> {
        let s = self.seq(id)?;
        if s.row.is_none() {
            return Err(KvError::Swapped { seq: id, what });
        }
        Ok(s)
    }

    fn short(&self, what: &'static str, needed: u32) -> Result<()> {
        if needed <= self.pool.available() {
            return Ok(());
        }
        Err(KvError::OutOfBlocks {
            what,
            needed,
            free: self.pool.free_count(),
            evictable: self.pool.evictable_count(),
            total: self.pool.total(),
        })
    }

    fn take_row(&mut self) -> Result<u32> {
        self.free_rows.pop().ok_or(KvError::TooManySequences { max_seqs: self.config.max_seqs })
    }

    /// A row no sequence uses any more: free at once, or once its holds go.
    fn release_row(&mut self, row: u32) {
        if self.row_holds[row as usize] > 0 {
            self.row_parked[row as usize] = true;
        } else {
            self.free_rows.push(row);
        }
    }

    /// Holds `rows` and `blocks` for work recorded on a stream and not yet submitted: they are
    /// not taken by another sequence, whatever is freed, until [`Self::unhold`] (Note [Blocks
    /// held for recorded work]).
    pub fn hold(&mut self, rows: &[u32], blocks: &[BlockId]) {
        for &r in rows {
            self.row_holds[r as usize] += 1;
        }
        for &b in blocks {
            self.pool.hold(b);
        }
    }

    /// Drops the holds [`Self::hold`] took (the work was submitted, or its stream dropped).
    pub fn unhold(&mut self, rows: &[u32], blocks: &[BlockId]) {
        for &r in rows {
            let h = &mut self.row_holds[r as usize];
            *h -= 1;
            if *h == 0 && std::mem::take(&mut self.row_parked[r as usize]) {
                self.free_rows.push(r);
            }
        }
        for &b in blocks {
            self.pool.unhold(b);
        }
    }

    /// Tokens of a sequence.
    pub fn len(&self, id: u64) -> Result<u32> {
        Ok(self.seq(id)?.tokens.len() as u32)
    }

    /// The sequence's block-table row (`None` while swapped out).
    pub fn row(&self, id: u64) -> Result<Option<u32>> {
        Ok(self.seq(id)?.row)
    }

    /// The sequence's blocks, in logical order (reserved ones included).
    pub fn blocks(&self, id: u64) -> Result<&[BlockId]> {
        Ok(&self.seq(id)?.blocks)
    }

    /// Whether the sequence is live (not freed) in this manager.
    pub fn contains(&self, id: u64) -> bool {
        self.seqs.contains_key(&id)
    }

    /// Starts a sequence for `prompt`. Whole blocks of the prompt found in the prefix map are
    /// taken (the last prompt token is always left to compute: its logits are needed), and
    /// the sequence starts that many tokens long; the caller appends the rest of the prompt.
    /// Returns the sequence id and its table writes.
    pub fn add_sequence(&mut self, prompt: &[u32], salt: u64) -> Result<(u64, TableWrite)> {
        let row = self.take_row()?;
        let bt = self.config.block_tokens as usize;
        let eligible = if self.config.prefix_caching { prompt.len().saturating_sub(1) / bt } else { 0 };
        let mut parent = ROOT_HASH;
        let (mut blocks, mut hashes) = (Vec::new(), Vec::new());
        for chunk in prompt.chunks_exact(bt).take(eligible) {
            let h = chain_hash(parent, chunk, salt);
            let Some(b) = self.pool.lookup(h, parent, salt, chunk) else { break };
            self.pool.retain(b);
            blocks.push(b);
            hashes.push(h);
            parent = h;
        }
        let hit = blocks.len() * bt;
        self.stats.prefix_query_tokens += (eligible * bt) as u64;
        self.stats.prefix_hit_tokens += hit as u64;
        let id = self.next_id;
        self.next_id += 1;
        let write = TableWrite { row, index: 0, blocks: blocks.clone() };
        let written = hit as u32;
        self.seqs
            .insert(id, Sequence { row: Some(row), blocks, tokens: prompt[..hit].to_vec(), hashes, salt, written });
        Ok((id, write))
    }

    /// Blocks an append of `adding` tokens to `s` takes from the pool: new blocks past its
    /// table, plus one for each touched block it shares (copy-on-write).
    fn blocks_needed(&self, s: &Sequence, adding: u32) -> u32 {
        let bt = self.config.block_tokens;
        let len = s.tokens.len() as u32;
        if adding == 0 {
            return 0;
        }
        let (first, last) = (len / bt, (len + adding - 1) / bt);
        let shared =
            (first..=last).filter(|&i| s.blocks.get(i as usize).is_some_and(|&b| self.pool.refs(b) > 1)).count() as u32;
        (last + 1).saturating_sub(s.blocks.len() as u32) + shared
    }

    fn check_growth(&self, id: u64, s: &Sequence, adding: u32) -> Result<()> {
        let len = s.tokens.len() as u32;
        if u64::from(len) + u64::from(adding) > u64::from(self.config.max_seq_len) {
            return Err(KvError::SequenceTooLong { seq: id, length: len, adding, max: self.config.max_seq_len });
        }
        Ok(())
    }

    /// Whether every `(sequence, tokens)` of a step can be appended now, counting blocks
    /// that eviction would free. Conservative where sequences of the step share a partial
    /// block: each counts its own copy, though the last writer needs none.
    pub fn can_append(&self, step: &[(u64, u32)]) -> Result<bool> {
        let mut needed = 0u64;
        for &(id, adding) in step {
            let s = self.resident(id, "canAppend")?;
            self.check_growth(id, s, adding)?;
            needed += u64::from(self.blocks_needed(s, adding));
        }
        Ok(needed <= u64::from(self.pool.available()))
    }

    /// Makes the sequence own blocks for `adding` more tokens without writing any: a later
    /// append of up to that many tokens needs no allocation. Copies shared blocks it would touch.
    pub fn reserve(&mut self, id: u64, adding: u32) -> Result<Append> {
        self.grow(id, &[], adding, "reserve")
    }

    /// Appends `tokens` to the sequence: allocates the blocks it crosses into, copies a
    /// shared block it writes into, hashes blocks it fills, and returns each token's slot.
    pub fn append(&mut self, id: u64, tokens: &[u32]) -> Result<Append> {
        let n = u32::try_from(tokens.len()).map_err(|_| KvError::SequenceTooLong {
            seq: id,
            length: 0,
            adding: u32::MAX,
            max: self.config.max_seq_len,
        })?;
        self.grow(id, tokens, n, "append")
    }

    /// The blocks holding tokens that appending `adding` tokens to sequence `id` would copy
    /// (shared ones it writes into): what a caller must have written before the append.
    pub fn copy_sources(&self, id: u64, adding: u32) -> Result<Vec<BlockId>> {
        let s = self.seq(id)?;
        let (bt, len) = (self.config.block_tokens, s.tokens.len() as u32);
        Ok(self.shared_touched(s, adding).into_iter().filter(|&(i, _)| i * bt < len).map(|(_, b)| b).collect())
    }

    /// The (index, block) of every block appending `adding` tokens to `s` touches that other
    /// sequences share (each is replaced by a private copy).
    fn shared_touched(&self, s: &Sequence, adding: u32) -> Vec<(u32, BlockId)> {
        if adding == 0 {
            return Vec::new();
        }
        let (bt, len) = (self.config.block_tokens, s.tokens.len() as u32);
        (len / bt..=(len + adding - 1) / bt)
            .map_while(|i| s.blocks.get(i as usize).map(|&b| (i, b)))
            .filter(|&(_, b)| self.pool.refs(b) > 1)
            .collect()
    }

    fn grow(&mut self, id: u64, tokens: &[u32], adding: u32, what: &'static str) -> Result<Append> {
        let s = self.resident(id, what)?;
        self.check_growth(id, s, adding)?;
        self.short(what, self.blocks_needed(s, adding))?;
        if adding == 0 {
            return Ok(Append::default());
        }
        let bt = self.config.block_tokens;
        let mut s = self.seqs.remove(&id).expect("checked");
        let row = s.row.expect("resident");
        let len = s.tokens.len() as u32;
        let mut out = Append::default();
        // Copy-on-write: a touched block that others share is replaced by a private copy.
        let last = (len + adding - 1) / bt;
        for (i, old) in self.shared_touched(&s, adding) {
            let fresh = self.pool.allocate();
            if i * bt < len {
                out.copies.push(BlockCopy { src: old, dst: fresh });
                self.stats.copies_on_write += 1;
            }
            self.pool.release(old);
            s.blocks[i as usize] = fresh;
            out.table.push(TableWrite { row, index: i, blocks: vec![fresh] });
        }
        let start = s.blocks.len() as u32;
        while (s.blocks.len() as u32) <= last {
            s.blocks.push(self.pool.allocate());
        }
        if (s.blocks.len() as u32) > start {
            out.table.push(TableWrite { row, index: start, blocks: s.blocks[start as usize..].to_vec() });
        }
        if !tokens.is_empty() {
            out.slots = (len..len + adding).map(|p| s.blocks[(p / bt) as usize] * bt + p % bt).collect();
            s.tokens.extend_from_slice(tokens);
            self.hash_full_blocks(&mut s);
        }
        self.seqs.insert(id, s);
        Ok(out)
    }

    /// Names every newly filled block (it enters the prefix map once written).
    fn hash_full_blocks(&mut self, s: &mut Sequence) {
        let bt = self.config.block_tokens as usize;
        let full = s.tokens.len() / bt;
        while s.hashes.len() < full {
            let i = s.hashes.len();
            let parent = s.hashes.last().copied().unwrap_or(ROOT_HASH);
            s.hashes.push(chain_hash(parent, &s.tokens[i * bt..(i + 1) * bt], s.salt));
        }
    }

    /// Records that the K/V of the sequence's last `tokens` tokens were written: when that
    /// range starts at or before what was written already, everything up to the end is
    /// written, and its full blocks enter the prefix map (Note [A block is shared once written]).
    pub fn mark_written(&mut self, id: u64, tokens: u32) -> Result<()> {
        let bt = self.config.block_tokens as usize;
        let prefix_caching = self.config.prefix_caching;
        let s = self.seqs.get_mut(&id).ok_or(KvError::UnknownSequence { seq: id })?;
        let len = s.tokens.len() as u32;
        if tokens > len || len - tokens > s.written {
            return Ok(());
        }
        let before = s.written as usize / bt;
        s.written = len;
        if prefix_caching && s.row.is_some() {
            for i in before..(len as usize / bt) {
                let parent = if i == 0 { ROOT_HASH } else { s.hashes[i - 1] };
                self.pool.register(s.blocks[i], s.hashes[i], parent, s.salt, &s.tokens[i * bt..(i + 1) * bt]);
            }
        }
        Ok(())
    }

    /// Tokens of `prompt` that [`Self::add_sequence`] would find in the prefix map now, and
    /// whether a sequence for the whole prompt fits now (a table row, and blocks for the rest
    /// of the prompt counting evictions). Changes nothing, counts nothing.
    pub fn lookup(&self, prompt: &[u32], salt: u64) -> (u32, bool) {
        let bt = self.config.block_tokens as usize;
        let eligible = if self.config.prefix_caching { prompt.len().saturating_sub(1) / bt } else { 0 };
        let mut parent = ROOT_HASH;
        let (mut hits, mut evictable_hits) = (0u32, 0u32);
        for chunk in prompt.chunks_exact(bt).take(eligible) {
            let h = chain_hash(parent, chunk, salt);
            let Some(b) = self.pool.lookup(h, parent, salt, chunk) else { break };
            hits += 1;
            evictable_hits += u32::from(self.pool.is_evictable(b));
            parent = h;
        }
        let needed = (prompt.len().div_ceil(bt) as u32).saturating_sub(hits);
        let fits = !self.free_rows.is_empty()
            && u64::from(needed) + u64::from(evictable_hits) <= u64::from(self.pool.available())
            && prompt.len() as u64 <= u64::from(self.config.max_seq_len);
        (hits * bt as u32, fits)
    }

    /// A new sequence sharing every block of `id` that holds tokens (parallel sampling,
    /// beam search). The first write either makes to a shared partial block copies it.
    pub fn fork(&mut self, id: u64) -> Result<(u64, TableWrite)> {
        let s = self.resident(id, "fork")?;
        let used = s.tokens.len().div_ceil(self.config.block_tokens as usize);
        let (blocks, tokens, hashes, salt, written) =
            (s.blocks[..used].to_vec(), s.tokens.clone(), s.hashes.clone(), s.salt, s.written);
        let row = self.take_row()?;
        for &b in &blocks {
            self.pool.retain(b);
        }
        let id = self.next_id;
        self.next_id += 1;
        let write = TableWrite { row, index: 0, blocks: blocks.clone() };
        self.seqs.insert(id, Sequence { row: Some(row), blocks, tokens, hashes, salt, written });
        Ok((id, write))
    }

    fn release_blocks(&mut self, blocks: &[BlockId]) {
        // Tail first: Note [Free queue and eviction order].
        for &b in blocks.iter().rev() {
            self.pool.release(b);
        }
    }

    /// Ends a sequence: its blocks return to the pool (cached full blocks stay for prefix hits).
    pub fn free(&mut self, id: u64) -> Result<()> {
        let s = self.seqs.remove(&id).ok_or(KvError::UnknownSequence { seq: id })?;
        self.release_blocks(&s.blocks);
        if let Some(row) = s.row {
            self.release_row(row);
        }
        Ok(())
    }

    /// Swaps a sequence out: returns the blocks that hold its tokens, in logical order, and
    /// releases them. The caller copies their contents out before anything else is allocated
    /// (one queue orders the copy before any later write into those blocks).
    pub fn swap_out(&mut self, id: u64) -> Result<Vec<BlockId>> {
        self.resident(id, "swapOut")?;
        let s = self.seqs.get_mut(&id).expect("checked");
        let used = s.tokens.len().div_ceil(self.config.block_tokens as usize);
        let blocks = std::mem::take(&mut s.blocks);
        let row = s.row.take().expect("resident");
        self.release_row(row);
        self.release_blocks(&blocks);
        self.stats.swapped_out_blocks += used as u64;
        Ok(blocks[..used].to_vec())
    }

    /// Swaps a sequence back in: full blocks still in the prefix map are taken as they are,
    /// the others are allocated and listed in `restore` for the caller to write back.
    pub fn swap_in(&mut self, id: u64) -> Result<SwapIn> {
        let s = self.seq(id)?;
        if s.row.is_some() {
            return Err(KvError::NotSwapped { seq: id });
        }
        let bt = self.config.block_tokens as usize;
        let used = s.tokens.len().div_ceil(bt);
        let mut found: Vec<Option<BlockId>> = vec![None; used];
        let mut taken_evictable = 0;
        if self.config.prefix_caching {
            let mut parent = ROOT_HASH;
            for (i, &h) in s.hashes.iter().enumerate() {
                let chunk = &s.tokens[i * bt..(i + 1) * bt];
                if let Some(b) = self.pool.lookup(h, parent, s.salt, chunk) {
                    taken_evictable += u32::from(self.pool.is_evictable(b));
                    found[i] = Some(b);
                }
                parent = h;
            }
        }
        let fresh = found.iter().filter(|b| b.is_none()).count() as u32;
        self.short("swapIn", fresh + taken_evictable)?;
        let row = self.take_row()?;
        // Every hit is retained before anything is allocated: an allocation may evict
        // any unreferenced cached block, a later hit of this very sequence included.
        for &b in found.iter().flatten() {
            self.pool.retain(b);
        }
        let mut blocks = Vec::with_capacity(used);
        let mut restore = Vec::new();
        for (i, f) in found.into_iter().enumerate() {
            let b = f.unwrap_or_else(|| {
                let b = self.pool.allocate();
                restore.push((i as u32, b));
                b
            });
            blocks.push(b);
        }
        self.stats.swapped_in_blocks += restore.len() as u64;
        let s = self.seqs.get_mut(&id).expect("checked");
        s.row = Some(row);
        s.blocks = blocks.clone();
        Ok(SwapIn { table: TableWrite { row, index: 0, blocks }, restore })
    }

    /// Query rows `(table row, tokens visible)` for the last `queries` tokens of a sequence:
    /// the causal rows of a prefill chunk, or one row for a decode step. `what` (`write`,
    /// `attention`) names the operation in errors.
    pub fn query_rows(&self, id: u64, queries: u32, what: &'static str) -> Result<Vec<[u32; 2]>> {
        let s = self.resident(id, what)?;
        let len = s.tokens.len() as u32;
        if queries == 0 || queries > len {
            return Err(KvError::BadQueryLength { seq: id, what, tokens: queries, length: len });
        }
        let row = s.row.expect("resident");
        Ok((len - queries + 1..=len).map(|visible| [row, visible]).collect())
    }

    /// Every live sequence, by id.
    pub fn summaries(&self) -> Vec<SequenceSummary> {
        let mut out: Vec<SequenceSummary> = self
            .seqs
            .iter()
            .map(|(&id, s)| SequenceSummary {
                id,
                tokens: s.tokens.len() as u32,
                blocks: s.blocks.len() as u32,
                shared_blocks: s.blocks.iter().filter(|&&b| self.pool.refs(b) > 1).count() as u32,
                swapped: s.row.is_none(),
            })
            .collect();
        out.sort_by_key(|s| s.id);
        out
    }

    pub fn stats(&self) -> KvStats {
        let mut st = self.stats;
        st.total_blocks = self.pool.total();
        st.free_blocks = self.pool.free_count();
        st.cached_blocks = self.pool.evictable_count();
        st.used_blocks = st.total_blocks - st.free_blocks - st.cached_blocks;
        st.evictions = self.pool.evictions;
        st.sequences = self.seqs.len() as u32;
        st.swapped_sequences = self.seqs.values().filter(|s| s.row.is_none()).count() as u32;
        st.tokens = self.seqs.values().filter(|s| s.row.is_some()).map(|s| s.tokens.len() as u64).sum();
        st
    }

    /// Checks every invariant that ties sequences to the pool (tests and fuzzing).
    #[cfg(test)]
    pub(crate) fn check(&self) {
        self.pool.check();
        let mut refs = vec![0u32; self.config.num_blocks as usize];
        let bt = self.config.block_tokens as usize;
        for s in self.seqs.values() {
            if s.row.is_some() {
                assert!(s.blocks.len() >= s.tokens.len().div_ceil(bt), "a resident sequence lacks blocks");
            } else {
                assert!(s.blocks.is_empty());
            }
            assert_eq!(s.hashes.len(), s.tokens.len() / bt);
            for &b in &s.blocks {
                refs[b as usize] += 1;
            }
        }
        for (b, &r) in refs.iter().enumerate() {
            assert_eq!(self.pool.refs(b as u32), r, "block {b}: reference count differs from the tables");
        }
        // Every row is in use, free, or let go while held: exactly one of them.
        let mut row_state = vec![0u32; self.config.max_seqs as usize];
        for s in self.seqs.values() {
            if let Some(r) = s.row {
                row_state[r as usize] += 1;
            }
        }
        for &r in &self.free_rows {
            assert_eq!(self.row_holds[r as usize], 0, "free row {r} is held");
            row_state[r as usize] += 1;
        }
        for (r, &parked) in self.row_parked.iter().enumerate() {
            if parked {
                assert!(self.row_holds[r] > 0, "row {r} is parked without holds");
                row_state[r] += 1;
            }
        }
        assert!(row_state.iter().all(|&n| n == 1), "rows in use, free or parked: {row_state:?}");
    }
}
