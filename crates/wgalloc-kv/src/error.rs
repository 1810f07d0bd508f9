//! Errors of the block manager, with their figures as data.

/// What a block-manager operation refused. Nothing changed when one is returned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KvError {
    /// The options do not describe a usable cache: `path` should have been `expected`, was `got`.
    #[error("KV cache options: {path}: expected {expected}, got {got}{}", if hint.is_empty() { String::new() } else { format!("; {hint}") })]
    InvalidConfig { path: String, expected: String, got: String, hint: String },
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
    /// `what` (a swap-out, or the copy-on-write of an append) would copy blocks of the sequence
    /// that a K/V write recorded on a stream, not yet submitted, writes.
    #[error("sequence {seq}: {what} would copy K/V that a write recorded on a stream has not submitted yet; submit that stream first")]
    WriteNotSubmitted { seq: u64, what: &'static str },
    /// An earlier swap-in of the sequence is still running (the binding's swap-in waits on its copy).
    #[error("sequence {seq} is being swapped in by an earlier swapIn(); await that one")]
    SwapInRunning { seq: u64 },
    /// A write or a query asked for more tokens than the sequence holds, or none (`what`:
    /// `write`, `attention`).
    #[error("sequence {seq}: {what} over its last {tokens} tokens: expected 1 to its length {length}")]
    BadQueryLength { seq: u64, what: &'static str, tokens: u32, length: u32 },
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

impl KvError {
    /// An INVALID_ARGUMENT's `(path, expected, got)`: the option or argument, what it should
    /// have been, and what it was. `None` for the other codes.
    pub fn invalid_argument(&self) -> Option<(String, String, String)> {
        let seq = |s: &u64| format!("sequence {s}");
        Some(match self {
            KvError::InvalidConfig { path, expected, got, .. } => (path.clone(), expected.clone(), got.clone()),
            KvError::SequenceTooLong { seq: s, length, adding, max } => (
                format!("{} tokens", seq(s)),
                format!("at most {} more (maxSequenceLength {max})", max.saturating_sub(*length)),
                adding.to_string(),
            ),
            KvError::Swapped { seq: s, .. } => (seq(s), "a resident sequence".into(), "a swapped-out sequence".into()),
            KvError::NotSwapped { seq: s } => (seq(s), "a swapped-out sequence".into(), "a resident sequence".into()),
            KvError::WriteNotSubmitted { seq: s, what } => (
                format!("{} ({what})", seq(s)),
                "no K/V write of it recorded on a stream and not submitted".into(),
                "a write not submitted yet".into(),
            ),
            KvError::SwapInRunning { seq: s } => {
                (seq(s), "a swapped-out sequence".into(), "one an earlier swapIn() is bringing back".into())
            }
            KvError::BadQueryLength { seq: s, what, tokens, length } => {
                (format!("{} {what} tokens", seq(s)), format!("1 to {length} (its length)"), tokens.to_string())
            }
            KvError::OutOfBlocks { .. } | KvError::TooManySequences { .. } | KvError::UnknownSequence { .. } => {
                return None
            }
        })
    }

    /// [`KvError::InvalidConfig`] for `path`.
    pub fn config(path: impl Into<String>, expected: impl Into<String>, got: impl Into<String>) -> Self {
        KvError::InvalidConfig { path: path.into(), expected: expected.into(), got: got.into(), hint: String::new() }
    }

    /// The same error with `hint`, what to do; other variants pass through.
    #[must_use]
    pub fn with_hint(self, hint: impl Into<String>) -> Self {
        match self {
            KvError::InvalidConfig { path, expected, got, .. } => {
                KvError::InvalidConfig { path, expected, got, hint: hint.into() }
            }
            other => other,
        }
    }
}

pub type Result<T, E = KvError> = std::result::Result<T, E>;
