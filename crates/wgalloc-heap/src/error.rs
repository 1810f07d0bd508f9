//! The errors the heap policy raises. Each carries the stable `code` that `wgalloc-core`'s
//! `Error` exposes to JS for it; core converts one into the other variant for variant, so a
//! failure reads the same whichever layer reports it.

use std::fmt;
use std::sync::Arc;

/// A refused heap request. `code()` is stable API; the message tells the caller what to do.
#[derive(Debug, Clone, thiserror::Error)]
pub enum HeapError {
    /// An argument was out of range (a size, a ratio, a profile's segment).
    #[error("{0}")]
    InvalidArgument(String),
    /// The store (or the block table) ran out of room.
    #[error("{0}")]
    OutOfMemory(String),
    /// The heap could not serve a request after its ladder; the figures are data.
    #[error("{0}")]
    HeapOutOfMemory(Box<HeapOom>),
    /// A block was used after it was freed.
    #[error("{0}")]
    UseAfterFree(String),
    /// A block was freed twice.
    #[error("{0}")]
    DoubleFree(String),
    /// The device the completions come from was lost.
    #[error("the device was lost ({0})")]
    DeviceLost(String),
    /// Any other failure of the segment store, kept whole (see [`StoreError`]).
    #[error("{0}")]
    Store(StoreError),
}

// Named so that the policy's modules read `Error::invalid(..)` like the rest of wgalloc.
pub(crate) use HeapError as Error;

impl HeapError {
    /// The stable code, as `wgalloc-core`'s `Error::code` gives it for the same failure.
    pub fn code(&self) -> &'static str {
        match self {
            HeapError::InvalidArgument(_) => "INVALID_ARGUMENT",
            HeapError::OutOfMemory(_) | HeapError::HeapOutOfMemory(_) => "OUT_OF_MEMORY",
            HeapError::UseAfterFree(_) => "USE_AFTER_FREE",
            HeapError::DoubleFree(_) => "DOUBLE_FREE",
            HeapError::DeviceLost(_) => "DEVICE_LOST",
            HeapError::Store(e) => e.code(),
        }
    }

    /// Whether this is an out-of-memory error, of any source.
    pub fn is_out_of_memory(&self) -> bool {
        matches!(self, HeapError::OutOfMemory(_) | HeapError::HeapOutOfMemory(_))
    }

    pub(crate) fn invalid(msg: impl fmt::Display) -> Self {
        HeapError::InvalidArgument(msg.to_string())
    }
}

/// A store's own error that is none of [`HeapError`]'s kinds (a refused driver call): the heap
/// passes it through untouched, with its code, and the runtime takes its own error back out.
#[derive(Clone)]
pub struct StoreError {
    code: &'static str,
    error: Arc<dyn std::error::Error + Send + Sync>,
}

impl StoreError {
    pub fn new(code: &'static str, error: impl std::error::Error + Send + Sync + 'static) -> Self {
        StoreError { code, error: Arc::new(error) }
    }

    pub fn code(&self) -> &'static str {
        self.code
    }

    /// The store's error, to downcast to its own type.
    pub fn error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.error
    }
}

impl fmt::Debug for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreError").field("code", &self.code).field("error", &self.error).finish()
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error.fmt(f)
    }
}

/// The figures of a request the heap could not serve: what `err.details` carries in JS.
#[derive(Debug, Clone, PartialEq)]
pub struct HeapOom {
    /// Why: the high watermark, or the driver's refusal.
    pub cause: String,
    pub requested: u64,
    pub aligned: u64,
    pub pool: &'static str,
    pub allocated: u64,
    pub cached: u64,
    pub pending_free: u64,
    pub reserved: u64,
    /// Bytes, or `None` when the high watermark is disabled.
    pub high_watermark: Option<u64>,
    pub high_watermark_ratio: f64,
    pub budget: u64,
    pub largest_free_block: u64,
}

// The ratio is a finite watermark setting, never NaN.
impl Eq for HeapOom {}

impl fmt::Display for HeapOom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let limit = match self.high_watermark {
            Some(bytes) => format!("{bytes} ({} x budget)", self.high_watermark_ratio),
            None => "disabled".into(),
        };
        write!(
            f,
            "out of memory: {}. Tried to allocate {} bytes ({} aligned, pool {}); allocated {}, cached {}, \
             pending free {}, reserved {}, high watermark {limit}, budget {}; largest free block {}. Free blocks \
             or call emptyCache(); setHighWatermarkRatio(0) lifts the limit (may cause system-wide failure).",
            self.cause,
            self.requested,
            self.aligned,
            self.pool,
            self.allocated,
            self.cached,
            self.pending_free,
            self.reserved,
            self.budget,
            self.largest_free_block
        )
    }
}

pub type Result<T, E = HeapError> = std::result::Result<T, E>;

/// Round `value` up to a multiple of `align` (a power of two), overflow-checked.
pub fn align_up(value: u64, align: u64) -> Result<u64> {
    debug_assert!(align.is_power_of_two());
    let mask = align - 1;
    value
        .checked_add(mask)
        .map(|v| v & !mask)
        .ok_or_else(|| Error::invalid(format!("size {value} overflows when aligned to {align}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn align_up_rounds_and_checks_overflow() {
        assert_eq!(align_up(0, 4).unwrap(), 0);
        assert_eq!(align_up(5, 4).unwrap(), 8);
        assert_eq!(align_up(256, 256).unwrap(), 256);
        assert_eq!(align_up(u64::MAX, 4).unwrap_err().code(), "INVALID_ARGUMENT");
    }
}
