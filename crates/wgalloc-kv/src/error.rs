//! Errors of the block manager, with their figures as data.

/// What a block-manager operation refused. Nothing changed when one is returned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KvError {
    /// The options do not describe a usable cache.
    #[error("KV cache options: {0}")]
    InvalidConfig(String),
    /// Not enough blocks, even after evicting every unreferenced cached block.
    #[error(
        "KV cache full: {what} needs {needed} blocks; {free} are free and {evictable} cached blocks could be evicted ({total} in all). Free or swap out a sequence, or make the cache larger"
    )]
    OutOfBlocks { what: &'static str, needed: u32, free: u32, evictable: u32, total: u32 },
    /// Every sequence row of the device block table is taken.
    #[error("KV cache has no free sequence row: all {max_seqs} are taken (maxSequences); free a sequence first")]
    TooManySequences { max_seqs: u32 },
    /// The sequence would grow past the longest the cache was made for.
    #[error("sequence {seq}: {length} + {adding} tokens exceeds maxSequenceLength {max}")]
    SequenceTooLong { seq: u64, length: u32, adding: u32, max: u32 },
    /// The handle names no live sequence of this cache (freed, or never made by it).
    #[error("sequence {seq} is not a live sequence of this KV cache (freed, or made by another cache)")]
    UnknownSequence { seq: u64 },
    /// The sequence is swapped out; swap it in first.
    #[error("sequence {seq} is swapped out; swap it in before {what}")]
    Swapped { seq: u64, what: &'static str },
    /// The sequence is resident; only a swapped-out sequence can be swapped in.
    #[error("sequence {seq} is not swapped out")]
    NotSwapped { seq: u64 },
    /// A query row asked for more tokens than the sequence holds, or none.
    #[error("sequence {seq}: a query over {tokens} tokens must be 1 to its length {length}")]
    BadQueryLength { seq: u64, tokens: u32, length: u32 },
}

impl KvError {
    /// The stable code a binding exposes.
    pub fn code(&self) -> &'static str {
        match self {
            KvError::OutOfBlocks { .. } | KvError::TooManySequences { .. } => "KV_CACHE_FULL",
            KvError::UnknownSequence { .. } => "USE_AFTER_FREE",
            _ => "INVALID_ARGUMENT",
        }
    }
}

pub type Result<T, E = KvError> = std::result::Result<T, E>;
