//! One error type for the whole runtime. Every variant maps to a stable string
//! `code` that the JS layer exposes unchanged, so callers can branch on it.

/// A runtime failure. `code()` is stable API; the message tells the user what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// An argument was out of range, of the wrong shape, or inconsistent: what, where, and
    /// what was received are data (see [`InvalidArgument`]).
    #[error("{0}")]
    InvalidArgument(Box<InvalidArgument>),
    /// No adapter matched the request (backend, name filter, fallback).
    #[error("{0}")]
    AdapterNotFound(String),
    /// The adapter refused the device request (features or limits).
    #[error("{0}")]
    DeviceRequestFailed(String),
    /// The device was lost or destroyed; every later call fails with this.
    #[error("the GPU device was lost ({0}); open a new one with Gpu.request()")]
    DeviceLost(String),
    /// The driver refused memory, or a request is past a fixed limit; the figures are data.
    #[error("{0}")]
    OutOfMemory(Box<LimitOom>),
    /// The heap could not serve a request after its ladder; the figures are data.
    #[error("{0}")]
    HeapOutOfMemory(Box<HeapOom>),
    /// wgpu rejected a command (validation error caught by an error scope).
    #[error("GPU validation error: {0}")]
    Validation(String),
    /// A handle was used after it was freed or destroyed.
    #[error("{0}")]
    UseAfterFree(String),
    /// A block was freed twice.
    #[error("{0}")]
    DoubleFree(String),
    /// An executor was asked to run while a run of it is still in flight.
    #[error("{0}")]
    Busy(String),
    /// A plan failed validation, on paper or on the device.
    #[error("{0}")]
    PlanInvalid(String),
    /// The operation was aborted by the caller (AbortSignal).
    #[error("the operation was aborted")]
    Aborted,
    /// The profiler was asked for something its state does not allow (stop without start, nested start).
    #[error("{0}")]
    ProfilerState(String),
    /// A file could not be written (e.g. a trace export path).
    #[error("{0}")]
    Io(String),
    /// Text (a graph's JSON) does not parse.
    #[error("{0}")]
    Parse(String),
    /// A kernel's WGSL does not parse, or declares bindings or an entry point other than
    /// what wgalloc supplies.
    #[error("{0}")]
    Shader(String),
    /// A map or wait failed for a reason other than device loss.
    #[error("{0}")]
    Internal(String),
    /// A charge would take a heap scope past its limit; the figures are data.
    #[error("{0}")]
    QuotaExceeded(Box<QuotaExceeded>),
    /// A KV-cache operation was refused; the variant carries its figures.
    #[error(transparent)]
    Kv(#[from] wgalloc_kv::KvError),
}

impl Error {
    /// The stable code exposed to JS as `error.code`.
    pub fn code(&self) -> &'static str {
        match self {
            Error::InvalidArgument(_) => "INVALID_ARGUMENT",
            Error::AdapterNotFound(_) => "ADAPTER_NOT_FOUND",
            Error::DeviceRequestFailed(_) => "DEVICE_REQUEST_FAILED",
            Error::DeviceLost(_) => "DEVICE_LOST",
            Error::OutOfMemory(_) | Error::HeapOutOfMemory(_) => "OUT_OF_MEMORY",
            Error::Validation(_) => "GPU_VALIDATION",
            Error::UseAfterFree(_) => "USE_AFTER_FREE",
            Error::DoubleFree(_) => "DOUBLE_FREE",
            Error::Busy(_) => "EXECUTOR_BUSY",
            Error::PlanInvalid(_) => "PLAN_INVALID",
            Error::Aborted => "ABORTED",
            Error::ProfilerState(_) => "PROFILER_STATE",
            Error::Io(_) => "IO_ERROR",
            Error::Parse(_) => "PARSE_ERROR",
            Error::Shader(_) => "SHADER_ERROR",
            Error::Internal(_) => "INTERNAL",
            Error::QuotaExceeded(_) => "QUOTA_EXCEEDED",
            Error::Kv(e) => e.code(),
        }
    }

    /// INVALID_ARGUMENT: `path` (the argument or field, as the caller names it) should have been
    /// `expected` but was `got` (shown briefly). Add advice with [`Error::with_hint`].
    pub fn invalid(path: impl Into<String>, expected: impl Into<String>, got: impl Into<String>) -> Self {
        Error::InvalidArgument(InvalidArgument::new(path, expected, got))
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
        if let Error::InvalidArgument(a) = &mut self {
            edit(a);
        }
        self
    }

    /// The same error with its path inside `parent` (`items[3]` + `offset`: `items[3].offset`);
    /// other variants pass through.
    #[must_use]
    pub fn within(self, parent: &str) -> Self {
        self.edit_invalid(|a| a.path = format!("{parent}.{}", a.path))
    }

    /// The path, expectation and value of an INVALID_ARGUMENT, of any source.
    pub fn invalid_argument(&self) -> Option<&InvalidArgument> {
        match self {
            Error::InvalidArgument(a) => Some(a),
            _ => None,
        }
    }
}

pub use wgalloc_heap::InvalidArgument;

pub use wgalloc_heap::QuotaExceeded;
use wgalloc_heap::{HeapError, StoreError};
pub use wgalloc_heap::{HeapOom, LimitOom, OomSource};

/// The heap policy's errors are the runtime's, code for code; a store's own error comes back whole.
impl From<HeapError> for Error {
    // Cold and out of line: inlined, the conversion would weigh on every malloc's success path.
    #[cold]
    #[inline(never)]
    fn from(e: HeapError) -> Self {
        match e {
            HeapError::InvalidArgument(a) => Error::InvalidArgument(a),
            HeapError::QuotaExceeded(q) => Error::QuotaExceeded(q),
            HeapError::OutOfMemory(m) => Error::OutOfMemory(m),
            HeapError::HeapOutOfMemory(oom) => Error::HeapOutOfMemory(oom),
            HeapError::UseAfterFree(m) => Error::UseAfterFree(m),
            HeapError::DoubleFree(m) => Error::DoubleFree(m),
            HeapError::DeviceLost(reason) => Error::DeviceLost(reason),
            HeapError::Store(e) => match e.error().downcast_ref::<Error>() {
                Some(own) => own.clone(),
                None => Error::Internal(e.to_string()),
            },
        }
    }
}

/// The device store's failures as the policy sees them (see `From<HeapError> for Error`).
impl From<Error> for HeapError {
    fn from(e: Error) -> Self {
        match e {
            Error::InvalidArgument(a) => HeapError::InvalidArgument(a),
            Error::QuotaExceeded(q) => HeapError::QuotaExceeded(q),
            Error::OutOfMemory(m) => HeapError::OutOfMemory(m),
            Error::HeapOutOfMemory(oom) => HeapError::HeapOutOfMemory(oom),
            Error::UseAfterFree(m) => HeapError::UseAfterFree(m),
            Error::DoubleFree(m) => HeapError::DoubleFree(m),
            Error::DeviceLost(reason) => HeapError::DeviceLost(reason),
            other => HeapError::Store(StoreError::new(other.code(), other)),
        }
    }
}

impl From<LimitOom> for Error {
    fn from(oom: LimitOom) -> Self {
        Error::OutOfMemory(Box::new(oom))
    }
}

impl Error {
    /// Whether this is an out-of-memory error, of any source.
    pub fn is_out_of_memory(&self) -> bool {
        matches!(self, Error::OutOfMemory(_) | Error::HeapOutOfMemory(_))
    }
}

/// A JSON value as an error shows it: scalars as they are, strings quoted, containers by kind.
pub fn shown_json(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => quoted(s),
        serde_json::Value::Array(a) => format!("an array of {}", a.len()),
        serde_json::Value::Object(_) => "an object".into(),
        other => other.to_string(),
    }
}

pub use wgalloc_heap::quoted;

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Overflow-checked `a + b` for sizes and offsets.
pub fn checked_add(a: u64, b: u64, what: &str) -> Result<u64> {
    a.checked_add(b).ok_or_else(|| {
        Error::invalid(what, format!("at most {} - {b}", u64::MAX), a.to_string()).with_hint("the sum overflows u64")
    })
}

/// Round `value` up to a multiple of `align` (a power of two), overflow-checked.
pub fn align_up(value: u64, align: u64) -> Result<u64> {
    Ok(wgalloc_heap::align_up(value, align)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overflowing_sizes_are_invalid_arguments() {
        // The rounding itself is the heap crate's (and tested there).
        assert_eq!(align_up(5, 4).unwrap(), 8);
        assert_eq!(align_up(u64::MAX, 4).unwrap_err().code(), "INVALID_ARGUMENT");
        assert_eq!(checked_add(u64::MAX, 1, "offset").unwrap_err().code(), "INVALID_ARGUMENT");
    }

    /// Bad input through each pure check of the core: every INVALID_ARGUMENT carries a path,
    /// an expectation and the value received, and its message is made of them.
    #[test]
    fn every_invalid_argument_has_its_fields() {
        use crate::exec::{checksum, ExecGraph, SymbolicGraph};
        use crate::heap::config::Watermarks;
        use crate::heap::profile::HeapProfile;
        use crate::profile::options::{parse_flags, Mode};
        use crate::replay::trace::Trace;
        let graph = |tensors: &str, ops: &str| {
            ExecGraph::parse(&format!(
                r#"{{"kernels":{{"k":{{"source":"@compute @workgroup_size(1) fn main() {{}}"}}}},"tensors":[{tensors}],"ops":[{ops}]}}"#
            ))
        };
        let errors: Vec<Error> = vec![
            align_up(u64::MAX, 4).unwrap_err(),
            checked_add(u64::MAX, 1, "offset").unwrap_err(),
            graph(r#"{"id":"a","size":0}"#, "").unwrap_err(),
            graph(r#"{"id":"a","size":4,"kind":"nope"}"#, "").unwrap_err(),
            graph(r#"{"id":"a","shape":[2],"dtype":"f99"}"#, "").unwrap_err(),
            graph(r#"{"id":"a","size":4},{"id":"a","size":4}"#, "").unwrap_err(),
            graph(r#"{"id":"a","size":4,"kind":"output"}"#, r#"{"kernel":"k","inputs":["zz"],"outputs":["a"]}"#)
                .unwrap_err(),
            ExecGraph::parse("[]").unwrap_err(),
            SymbolicGraph::parse(r#"{"dims":[7],"tensors":[],"ops":[]}"#).unwrap_err(),
            checksum::from_model("{}", 65535).unwrap_err(),
            Trace::parse(r#"{"events":[{"op":"alloc","id":"a","size":-1}]}"#).unwrap_err(),
            Trace::parse(r#"{"events":[{"op":"free","id":"a"}]}"#).unwrap_err(),
            Trace::parse("not json").unwrap_err(),
            HeapProfile::parse("[]").unwrap_err().into(),
            HeapProfile::parse(r#"{"format":"wgalloc-heap-profile","version":1,"pools":[3]}"#).unwrap_err().into(),
            Watermarks { high: 9.0, low: 0.0 }.validate().unwrap_err().into(),
            Watermarks { high: 0.5, low: 0.9 }.validate().unwrap_err().into(),
            Mode::parse("sometimes").unwrap_err(),
            parse_flags("nope").unwrap_err(),
        ];
        for e in &errors {
            assert_eq!(e.code(), "INVALID_ARGUMENT", "{e}");
            let a = e.invalid_argument().unwrap_or_else(|| panic!("no fields: {e}"));
            assert!(!a.path.is_empty() && !a.expected.is_empty() && !a.got.is_empty(), "{a:?}");
            assert!(e.to_string().starts_with(&format!("{}: expected {}, got {}", a.path, a.expected, a.got)), "{e}");
        }
        let with_hint = Error::invalid("size", "a positive integer", "0").with_hint("free blocks first");
        assert_eq!(with_hint.to_string(), "size: expected a positive integer, got 0; free blocks first");
        assert_eq!(Error::Aborted.with_hint("x"), Error::Aborted, "a hint leaves other errors alone");
        assert!(Error::Aborted.invalid_argument().is_none());
    }

    /// The policy's errors reach JS with the codes and messages they had when the policy was
    /// part of this crate, and a store's own error comes back unchanged.
    #[test]
    fn heap_errors_keep_their_codes_and_messages() {
        let oom = HeapOom {
            cause: "the high watermark would be exceeded".into(),
            requested: 1,
            aligned: 256,
            pool: "device-small",
            allocated: 0,
            cached: 0,
            pending_free: 0,
            reserved: 0,
            high_watermark: None,
            high_watermark_ratio: 0.0,
            budget: 1,
            largest_free_block: 0,
        };
        let cases = [
            HeapError::invalid("size", "a positive integer", "0"),
            HeapError::from(LimitOom::new(OomSource::StoreCapacity, "allocating", "").requested(2).limit(1)),
            HeapError::HeapOutOfMemory(Box::new(oom)),
            HeapError::UseAfterFree("block 3 was freed".into()),
            HeapError::DoubleFree("block 3 was already freed".into()),
        ];
        for e in cases {
            let core = Error::from(e.clone());
            assert_eq!((core.code(), core.to_string()), (e.code(), e.to_string()));
            assert_eq!(Error::from(HeapError::from(core.clone())), core, "round trip");
        }
        let lost = Error::from(HeapError::DeviceLost("gone".into()));
        assert_eq!(lost, Error::DeviceLost("gone".into()));
        for own in [Error::Validation("refused".into()), Error::Internal("odd".into()), Error::Aborted] {
            let through = HeapError::from(own.clone());
            assert_eq!(through.code(), own.code());
            assert_eq!(Error::from(through), own);
        }
    }
}
