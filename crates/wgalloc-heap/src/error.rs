//! The errors the heap policy raises. Each carries the stable `code` that `wgalloc-core`'s
//! `Error` exposes to JS for it; core converts one into the other variant for variant, so a
//! failure reads the same whichever layer reports it.

use std::fmt;
use std::sync::Arc;

/// A refused heap request. `code()` is stable API; the message tells the caller what to do.
#[derive(Debug, Clone, thiserror::Error)]
pub enum HeapError {
    /// An argument was out of range (a size, a ratio, a profile's segment): what was expected
    /// and what was received are data (see [`InvalidArgument`]).
    #[error("{0}")]
    InvalidArgument(Box<InvalidArgument>),
    /// A heap scope refused a charge; the figures are data.
    #[error("{0}")]
    QuotaExceeded(Box<QuotaExceeded>),
    /// A fixed limit or the store refused memory; the figures are data (see [`LimitOom`]).
    #[error("{0}")]
    OutOfMemory(Box<LimitOom>),
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
            HeapError::QuotaExceeded(_) => "QUOTA_EXCEEDED",
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

    /// INVALID_ARGUMENT: `path` (the argument or field, as the caller names it) should have been
    /// `expected` but was `got` (shown briefly). Add advice with [`HeapError::with_hint`].
    pub fn invalid(path: impl Into<String>, expected: impl Into<String>, got: impl Into<String>) -> Self {
        HeapError::InvalidArgument(InvalidArgument::new(path, expected, got))
    }

    /// The same error with `hint`, what to do, after its figures; other variants pass through.
    #[must_use]
    pub fn with_hint(self, hint: impl Into<String>) -> Self {
        self.edit_invalid(|a| a.hint = hint.into())
    }

    /// The same error naming the `call` that refused the argument; other variants pass through.
    #[must_use]
    pub fn in_call(self, call: impl Into<String>) -> Self {
        self.edit_invalid(|a| a.call = call.into())
    }

    /// Applies `edit` to an INVALID_ARGUMENT's data; other variants pass through.
    fn edit_invalid(mut self, edit: impl FnOnce(&mut InvalidArgument)) -> Self {
        if let HeapError::InvalidArgument(a) = &mut self {
            edit(a);
        }
        self
    }
}

/// What an INVALID_ARGUMENT is about: what `err.details` carries in JS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidArgument {
    /// The call that refused it, where the path alone does not say (`scope`); may be empty.
    pub call: String,
    /// The argument or field, as the caller names it (`size`, `graph.tensors[3].shape`).
    pub path: String,
    /// What would have been accepted.
    pub expected: String,
    /// The value received, shown briefly.
    pub got: String,
    /// What to do; may be empty.
    pub hint: String,
}

impl InvalidArgument {
    /// The error's data, without a hint. Every field is what a caller reads in `err.details`:
    /// none may be blank.
    pub fn new(path: impl Into<String>, expected: impl Into<String>, got: impl Into<String>) -> Box<Self> {
        let a = InvalidArgument {
            call: String::new(),
            path: path.into(),
            expected: expected.into(),
            got: got.into(),
            hint: String::new(),
        };
        debug_assert!(
            !a.path.is_empty() && !a.expected.is_empty() && !a.got.is_empty(),
            "an INVALID_ARGUMENT without its data: {a:?}"
        );
        Box::new(a)
    }
}

impl fmt::Display for InvalidArgument {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.call.is_empty() {
            write!(f, "{}: ", self.call)?;
        }
        write!(f, "{}: expected {}, got {}", self.path, self.expected, self.got)?;
        if !self.hint.is_empty() {
            write!(f, "; {}", self.hint)?;
        }
        Ok(())
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

/// What ran out, for an OUT_OF_MEMORY: JS reads it as `err.details.source`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OomSource {
    /// The heap could not serve a request after its ladder ([`HeapOom`]).
    Heap,
    /// The driver refused memory (a wgpu out-of-memory error).
    Driver,
    /// One buffer would exceed the device's `maxBufferSize`.
    MaxBufferSize,
    /// The most blocks one heap holds live at once.
    LiveBlocks,
    /// The heap's high watermark refused a reservation made up front (a warm start).
    HighWatermark,
    /// A host-memory segment store's capacity (simulation and tests).
    StoreCapacity,
    /// The heap objects one device heap serves over its life (2^32).
    OwnerTags,
    /// The leases one block holds at once (2^31 - 1).
    BlockLeases,
}

impl OomSource {
    pub const ALL: [OomSource; 8] = [
        OomSource::Heap,
        OomSource::Driver,
        OomSource::MaxBufferSize,
        OomSource::LiveBlocks,
        OomSource::HighWatermark,
        OomSource::StoreCapacity,
        OomSource::OwnerTags,
        OomSource::BlockLeases,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            OomSource::Heap => "heap",
            OomSource::Driver => "driver",
            OomSource::MaxBufferSize => "max-buffer-size",
            OomSource::LiveBlocks => "live-blocks",
            OomSource::HighWatermark => "high-watermark",
            OomSource::StoreCapacity => "store-capacity",
            OomSource::OwnerTags => "owner-tags",
            OomSource::BlockLeases => "block-leases",
        }
    }

    /// What its figures count.
    pub fn unit(self) -> &'static str {
        match self {
            OomSource::LiveBlocks => "blocks",
            OomSource::OwnerTags => "heap objects",
            OomSource::BlockLeases => "leases",
            _ => "bytes",
        }
    }
}

/// An OUT_OF_MEMORY at a fixed limit, or refused by the driver or the store: what `err.details`
/// carries in JS. The message is made of these fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitOom {
    /// What ran out (never [`OomSource::Heap`], whose figures are a [`HeapOom`]).
    pub source: OomSource,
    /// What was being done, e.g. `creating a staging buffer`.
    pub operation: String,
    /// Bytes asked for (blocks, for [`OomSource::LiveBlocks`]), where the call knows them.
    pub requested: Option<u64>,
    /// The limit that refused it, where there is one.
    pub limit: Option<u64>,
    /// What was in use when it was refused, where known.
    pub in_use: Option<u64>,
    /// The driver's or the store's own words.
    pub cause: Option<String>,
    /// What to do.
    pub hint: String,
}

impl LimitOom {
    /// An OUT_OF_MEMORY of `source` while doing `operation`, with what to do; add figures with
    /// the builder methods.
    pub fn new(source: OomSource, operation: impl Into<String>, hint: impl Into<String>) -> LimitOom {
        LimitOom {
            source,
            operation: operation.into(),
            requested: None,
            limit: None,
            in_use: None,
            cause: None,
            hint: hint.into(),
        }
    }

    #[must_use]
    pub fn requested(mut self, requested: u64) -> Self {
        self.requested = Some(requested);
        self
    }

    #[must_use]
    pub fn limit(mut self, limit: u64) -> Self {
        self.limit = Some(limit);
        self
    }

    #[must_use]
    pub fn in_use(mut self, in_use: u64) -> Self {
        self.in_use = Some(in_use);
        self
    }

    #[must_use]
    pub fn cause(mut self, cause: impl Into<String>) -> Self {
        self.cause = Some(cause.into());
        self
    }
}

impl From<LimitOom> for HeapError {
    fn from(oom: LimitOom) -> Self {
        HeapError::OutOfMemory(Box::new(oom))
    }
}

impl fmt::Display for LimitOom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = self.source.unit();
        let what = match self.source {
            OomSource::Heap => "the heap is out of memory",
            OomSource::Driver => "the driver is out of memory",
            OomSource::MaxBufferSize => "past the device's max buffer size",
            OomSource::LiveBlocks => "past the most blocks one heap holds live",
            OomSource::HighWatermark => "past the heap's high watermark",
            OomSource::StoreCapacity => "the store is out of memory",
            OomSource::OwnerTags => "past the most heap objects one device heap serves",
            OomSource::BlockLeases => "past the most leases one block holds at once",
        };
        write!(f, "{}: {what}", self.operation)?;
        let figures: Vec<String> = [("requested", self.requested), ("limit", self.limit), ("in use", self.in_use)]
            .into_iter()
            .filter_map(|(name, v)| v.map(|v| format!("{name} {v} {unit}")))
            .chain(self.cause.iter().cloned())
            .collect();
        if !figures.is_empty() {
            write!(f, " ({})", figures.join(", "))?;
        }
        if !self.hint.is_empty() {
            write!(f, "; {}", self.hint)?;
        }
        Ok(())
    }
}

pub type Result<T, E = HeapError> = std::result::Result<T, E>;

/// Round `value` up to a multiple of `align` (a power of two), overflow-checked.
pub fn align_up(value: u64, align: u64) -> Result<u64> {
    debug_assert!(align.is_power_of_two());
    let mask = align - 1;
    value.checked_add(mask).map(|v| v & !mask).ok_or_else(|| {
        Error::invalid("size", format!("a size that can be aligned to {align}"), value.to_string())
            .with_hint("it overflows u64 when rounded up")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An OUT_OF_MEMORY outside the ladder is its figures: the message is made of them, in the
    /// unit its source counts in, and names are unique per source.
    #[test]
    fn limit_ooms_are_made_of_their_figures() {
        let driver = LimitOom::new(OomSource::Driver, "creating a buffer", "free memory").requested(10).cause("vk");
        assert_eq!(
            driver.to_string(),
            "creating a buffer: the driver is out of memory (requested 10 bytes, vk); free memory"
        );
        let blocks = LimitOom::new(OomSource::LiveBlocks, "malloc", "").limit(4).in_use(4);
        assert_eq!(
            blocks.to_string(),
            "malloc: past the most blocks one heap holds live (limit 4 blocks, in use 4 blocks)"
        );
        let e = HeapError::from(blocks);
        assert!(e.is_out_of_memory() && e.code() == "OUT_OF_MEMORY");
        let mut names: Vec<&str> = OomSource::ALL.iter().map(|s| s.as_str()).collect();
        names.dedup();
        assert_eq!(names.len(), OomSource::ALL.len());
    }

    #[test]
    fn align_up_rounds_and_checks_overflow() {
        assert_eq!(align_up(0, 4).unwrap(), 0);
        assert_eq!(align_up(5, 4).unwrap(), 8);
        assert_eq!(align_up(256, 256).unwrap(), 256);
        assert_eq!(align_up(u64::MAX, 4).unwrap_err().code(), "INVALID_ARGUMENT");
    }
}

/// A charge a heap scope refused: the scope (its path), its limit, what it held, what was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaExceeded {
    pub scope: String,
    pub limit: u64,
    pub allocated: u64,
    pub requested: u64,
}

impl fmt::Display for QuotaExceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "scope '{}' is over its limit: {} more bytes on {} allocated would exceed {}; free blocks of this scope or raise its limit",
            self.scope, self.requested, self.allocated, self.limit
        )
    }
}

/// A caller's string as an error shows it: quoted, cut short when long.
pub fn quoted(s: &str) -> String {
    match s.char_indices().nth(60) {
        Some((at, _)) => format!("'{}...'", &s[..at]),
        None => format!("'{s}'"),
    }
}
