//! Paged KV-cache block manager of wgalloc: which physical blocks hold which tokens of
//! which sequence. Pure bookkeeping, no GPU: `wgalloc-core`'s `kv` module applies what it
//! returns (block copies, block-table writes, K/V slots) on the device.
//!
//! Modelled on vLLM's block pool: a free queue, reference counts, full blocks named by a
//! chained hash of their tokens for prefix caching, least-recently-used eviction of
//! unreferenced cached blocks, copy-on-write of shared partial blocks, and swap.
//!
//! ```
//! use wgalloc_kv::{KvConfig, KvManager};
//!
//! let mut kv = KvManager::new(KvConfig { block_tokens: 4, num_blocks: 8, max_seqs: 4, max_seq_len: 64, prefix_caching: true }).unwrap();
//! let (a, _) = kv.add_sequence(&[1, 2, 3, 4, 5], 0).unwrap();
//! let step = kv.append(a, &[1, 2, 3, 4, 5]).unwrap();
//! assert_eq!(step.slots, vec![0, 1, 2, 3, 4]); // block 0, then block 1
//! kv.mark_written(a, 5).unwrap(); // the step wrote their K/V
//! // A second prompt with the same first block takes it from the prefix cache.
//! let (b, _) = kv.add_sequence(&[1, 2, 3, 4, 9, 9], 0).unwrap();
//! assert_eq!(kv.len(b).unwrap(), 4);
//! assert_eq!(kv.blocks(b).unwrap(), &[0]);
//! ```

mod error;
mod manager;
mod pool;
#[cfg(test)]
mod tests;

pub use error::{KvError, Result};
pub use manager::{Append, BlockCopy, KvConfig, KvManager, KvStats, SequenceSummary, SwapIn, TableWrite};
pub use pool::BlockId;
