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
