//! Error mapping only: every core error becomes a JS error whose message starts
//! with `[CODE]`. napi-rs fixes `error.code` to its own status names on async
//! paths, so the JS facade (js/errors.ts) lifts the bracketed code into `code`.

use wgalloc_core::Error as CoreError;

pub(crate) fn to_napi(e: CoreError) -> napi::Error {
    coded(e.code(), &e.to_string())
}

pub(crate) fn coded(code: &str, message: &str) -> napi::Error {
    napi::Error::new(napi::Status::GenericFailure, format!("[{code}] {message}"))
}

pub(crate) trait IntoNapi<T> {
    fn napi(self) -> napi::Result<T>;
}

impl<T> IntoNapi<T> for Result<T, CoreError> {
    fn napi(self) -> napi::Result<T> {
        self.map_err(to_napi)
    }
}

/// A JS number that must be a byte count or offset: a non-negative integer below 2^53.
pub(crate) fn to_u64(value: f64, what: &str) -> napi::Result<u64> {
    if !value.is_finite() || value < 0.0 || value.fract() != 0.0 || value > wgalloc_core::MAX_SAFE_INTEGER as f64 {
        return Err(coded(
            "INVALID_ARGUMENT",
            &format!("{what} must be a non-negative integer below 2^53, got {value}"),
        ));
    }
    Ok(value as u64)
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
