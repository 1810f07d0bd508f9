//! Error scopes around fallible wgpu calls. wgpu reports creation errors
//! asynchronously; a scope turns them into a `Result` at the call site instead of
//! letting them reach the uncaptured-error handler. Scopes are thread-local, so
//! push, call and pop happen on one thread without awaiting in between.

use crate::error::{Error, LimitOom, OomSource, Result};

/// Runs `f` inside out-of-memory and validation scopes and reports what they caught.
pub(crate) fn guarded<T>(device: &wgpu::Device, what: &str, f: impl FnOnce() -> T) -> Result<T> {
    guarded_sized(device, what, None, f)
}

/// [`guarded`] for a call that asks the driver for `bytes`: an out-of-memory names them.
pub(crate) fn guarded_alloc<T>(device: &wgpu::Device, what: &str, bytes: u64, f: impl FnOnce() -> T) -> Result<T> {
    guarded_sized(device, what, Some(bytes), f)
}

fn guarded_sized<T>(device: &wgpu::Device, what: &str, bytes: Option<u64>, f: impl FnOnce() -> T) -> Result<T> {
    let oom = device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
    let validation = device.push_error_scope(wgpu::ErrorFilter::Validation);
    let value = f();
    // wgpu-core resolves popped scopes immediately; block_on does not actually wait.
    let validation_err = pollster::block_on(validation.pop());
    let oom_err = pollster::block_on(oom.pop());
    if let Some(e) = oom_err {
        let oom = LimitOom::new(OomSource::Driver, what, "free memory (heap.emptyCache()) or ask for less")
            .cause(e.to_string());
        return Err(match bytes {
            Some(bytes) => oom.requested(bytes),
            None => oom,
        }
        .into());
    }
    if let Some(e) = validation_err {
        return Err(Error::Validation(format!("{what}: {e}")));
    }
    Ok(value)
}
