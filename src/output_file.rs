//! `writeOutputFile`: the CLI's output files, written whole by the core (Note [Output files]).

use std::path::Path;

use napi_derive::napi;

use crate::error::IntoNapi;

/// Writes `text` to `path` whole: the path keeps its old content if the write fails, and a
/// symlink there is replaced, not followed.
/// @internal
#[napi(catch_unwind)]
pub fn write_output_file(path: String, text: String) -> napi::Result<()> {
    wgalloc_core::output_file::write_whole(Path::new(&path), "the output", |w| w.write_all(text.as_bytes())).napi()
}
