//! Error mapping only. napi-rs fixes `error.code` to its own status names, on async paths
//! too, so an error's code and figures travel as data after its message.
//!
//! Note [Errors carry their data]: every error the binding raises has the message the user
//! reads, then `DATA_SEPARATOR` (ASCII record separator, never in a message), then JSON
//! `{ "code": ..., "details": ... }`. The facade (js/errors.ts `toWgallocError`) splits at the
//! last separator and builds the `WgallocError` from the data: the code and the figures
//! (`details` of an OUT_OF_MEMORY or a KV_CACHE_FULL, the `{ path, expected, got }` of an
//! INVALID_ARGUMENT) are never read back out of prose.

use serde_json::{json, Value};
use wgalloc_core::error::OomSource;
use wgalloc_core::Error as CoreError;

/// Between an error's message and its data.
pub(crate) const DATA_SEPARATOR: char = '\u{1e}';

pub(crate) fn to_napi(e: CoreError) -> napi::Error {
    with_data(e.code(), &e.to_string(), details(&e))
}

pub(crate) fn coded(code: &str, message: &str) -> napi::Error {
    with_data(code, message, None)
}

/// INVALID_ARGUMENT from the binding's own checks: `path` should have been `expected`, was `got`.
pub(crate) fn invalid(path: impl Into<String>, expected: impl Into<String>, got: impl Into<String>) -> napi::Error {
    to_napi(CoreError::invalid(path, expected, got))
}

/// As [`invalid`], for argument `path` of `call`.
pub(crate) fn invalid_in(
    call: &str,
    path: impl Into<String>,
    expected: impl Into<String>,
    got: impl Into<String>,
) -> napi::Error {
    to_napi(CoreError::invalid(path, expected, got).in_call(call))
}

/// As [`invalid`], with `hint`, what to do.
pub(crate) fn invalid_hint(
    path: impl Into<String>,
    expected: impl Into<String>,
    got: impl Into<String>,
    hint: impl Into<String>,
) -> napi::Error {
    to_napi(CoreError::invalid(path, expected, got).with_hint(hint))
}

/// A planner error, with its INVALID_ARGUMENT fields as data.
pub(crate) fn plan_err(e: wgalloc_plan::PlanError) -> napi::Error {
    let fields = e.invalid_argument().or_else(|| e.field());
    let details = fields.map(|(path, expected, got)| invalid_details(&path, &expected, &got));
    with_data(e.code(), &e.to_string(), details)
}

fn invalid_details(path: &str, expected: &str, got: &str) -> Value {
    json!({ "path": path, "expected": expected, "got": got })
}

fn with_data(code: &str, message: &str, details: Option<Value>) -> napi::Error {
    let data = match details {
        Some(d) => json!({ "code": code, "details": d }),
        None => json!({ "code": code }),
    };
    napi::Error::new(napi::Status::GenericFailure, format!("{message}{DATA_SEPARATOR}{data}"))
}

/// The figures of an error, as JS reads them in `err.details`.
fn details(e: &CoreError) -> Option<Value> {
    if let Some(a) = e.invalid_argument() {
        let mut d = invalid_details(&a.path, &a.expected, &a.got);
        if !a.call.is_empty() {
            d["call"] = json!(a.call);
        }
        return Some(d);
    }
    match e {
        CoreError::HeapOutOfMemory(o) => Some(json!({
            "source": OomSource::Heap.as_str(),
            "requested": o.requested,
            "aligned": o.aligned,
            "pool": o.pool,
            "allocated": o.allocated,
            "cached": o.cached,
            "pendingFree": o.pending_free,
            "reserved": o.reserved,
            "highWatermark": o.high_watermark,
            "budget": o.budget,
            "largestFreeBlock": o.largest_free_block,
        })),
        CoreError::OutOfMemory(o) => {
            let mut d = json!({ "source": o.source.as_str(), "operation": o.operation });
            for (key, value) in [("requested", o.requested), ("limit", o.limit), ("inUse", o.in_use)] {
                if let Some(v) = value {
                    d[key] = json!(v);
                }
            }
            if let Some(cause) = &o.cause {
                d["cause"] = json!(cause);
            }
            Some(d)
        }
        CoreError::QuotaExceeded(q) => Some(json!({
            "scope": q.scope,
            "limit": q.limit,
            "allocated": q.allocated,
            "requested": q.requested,
        })),
        CoreError::Kv(wgalloc_core::kv::KvError::OutOfBlocks { needed, free, evictable, total, .. }) => {
            Some(json!({ "needed": needed, "free": free, "evictable": evictable, "total": total }))
        }
        CoreError::Kv(wgalloc_core::kv::KvError::TooManySequences { max_seqs }) => {
            Some(json!({ "maxSequences": max_seqs }))
        }
        CoreError::Kv(k) => k.invalid_argument().map(|(path, expected, got)| invalid_details(&path, &expected, &got)),
        _ => None,
    }
}

pub(crate) trait IntoNapi<T> {
    fn napi(self) -> napi::Result<T>;
}

impl<T> IntoNapi<T> for Result<T, CoreError> {
    fn napi(self) -> napi::Result<T> {
        self.map_err(to_napi)
    }
}

/// The heap policy's errors (a profile that does not parse) carry the codes of the core's.
impl<T> IntoNapi<T> for Result<T, wgalloc_core::heap::HeapError> {
    fn napi(self) -> napi::Result<T> {
        self.map_err(|e| to_napi(e.into()))
    }
}

/// A JS number that must be a byte count or offset: a non-negative integer below 2^53.
pub(crate) fn to_u64(value: f64, what: &str) -> napi::Result<u64> {
    u64_argument(value, what).map_err(to_napi)
}

/// As [`to_u64`], for argument `path` of `call`.
pub(crate) fn to_u64_in(value: f64, call: &str, path: &str) -> napi::Result<u64> {
    u64_argument(value, path).map_err(|e| to_napi(e.in_call(call)))
}

fn u64_argument(value: f64, path: &str) -> Result<u64, CoreError> {
    if !value.is_finite() || value < 0.0 || value.fract() != 0.0 || value > wgalloc_core::MAX_SAFE_INTEGER as f64 {
        return Err(CoreError::invalid(path, "a non-negative integer below 2^53", js_number(value)));
    }
    Ok(value as u64)
}

/// A JS number as JS writes it where that is short: exponent notation below 1e-6 and from 1e21
/// (Rust's `Display` would spell 1e-300 with 300 digits).
pub(crate) fn js_number(value: f64) -> String {
    if value != 0.0 && value.is_finite() && (value.abs() < 1e-6 || value.abs() >= 1e21) {
        format!("{value:e}")
    } else {
        value.to_string()
    }
}

/// Panics with `message`: lets the tests check that a panic in a native call comes back as an
/// error (every `#[napi]` function catches them) and leaves the process running.
/// @internal
#[napi_derive::napi(catch_unwind)]
pub fn panic_for_tests(message: String) -> napi::Result<()> {
    panic!("{message}");
}

#[cfg(test)]
mod tests {
    /// Every synchronous `#[napi]` function catches panics (see the crate docs); a new one
    /// without it fails here rather than aborting Node in the field.
    #[test]
    fn every_synchronous_napi_function_catches_panics() {
        // Catches its own, with a message of its own.
        const OWN_CATCH: [&str; 1] = ["simulate_trace"];
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src");
        let mut missing = Vec::new();
        for entry in std::fs::read_dir(dir).expect("src") {
            let path = entry.expect("entry").path();
            let text = std::fs::read_to_string(&path).expect("source");
            let lines: Vec<&str> = text.lines().map(str::trim).collect();
            for (i, line) in lines.iter().enumerate() {
                let napi = line.starts_with("#[napi]") || line.starts_with("#[napi(");
                if !napi || line.contains("catch_unwind") || line.contains("object") {
                    continue;
                }
                let Some(item) = lines[i + 1..].iter().find(|l| !l.starts_with("#[") && !l.starts_with("///")) else {
                    continue;
                };
                let sync_fn = item.starts_with("pub fn ") || item.starts_with("pub unsafe fn ");
                if sync_fn && !OWN_CATCH.iter().any(|name| item.contains(&format!("fn {name}("))) {
                    missing.push(format!("{}: {item}", path.display()));
                }
            }
        }
        assert!(missing.is_empty(), "#[napi] functions without catch_unwind:\n{}", missing.join("\n"));
    }
}
