//! Files written at a caller's path (profiler traces; the CLI's outputs, through the binding):
//! replaced whole, never left half-written.

// Note [Output files]
// Invariant: a file wgalloc writes at a caller's path holds either all of the new content or
// what it held before; nothing else is opened, truncated or followed. The bytes go to a new file
// beside the path, created exclusively (a name planted there is skipped, never opened), which is
// then renamed over the path. A write that fails part-way (a full disk, a file size limit)
// leaves the old file as it was and removes the temporary one. A symlink at the path is replaced
// by the file, not followed to clobber what it points at. A file that existed keeps its
// permissions. Held by `a_failed_write_leaves_the_old_file` and
// `a_symlink_at_the_path_is_replaced_not_followed` (below), and end to end, under a file size
// limit, by the CLI's test in `__test__/defects.test.ts`.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};

/// Temporary names tried past one that exists.
const NAME_TRIES: u32 = 64;

static NEXT_TEMPORARY: AtomicU64 = AtomicU64::new(0);

/// Writes what `fill` writes to `path` whole (Note [Output files]). `what` names the content in
/// the error (`the trace`, `the plan`): IO_ERROR saying which path and why.
pub fn write_whole(path: &Path, what: &str, fill: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> Result<()> {
    let fail = |e: io::Error| {
        Error::Io(format!("cannot write {what} to '{}': {e}; pass a path in a writable directory", path.display()))
    };
    let (file, temporary) = create_beside(path).map_err(fail)?;
    let written = write_and_keep_mode(file, path, fill).and_then(|()| fs::rename(&temporary, path));
    written.map_err(|e| {
        // The temporary file is ours alone; the path still holds what it held.
        let _ = fs::remove_file(&temporary);
        fail(e)
    })
}

fn write_and_keep_mode(file: File, path: &Path, fill: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> io::Result<()> {
    if let Ok(old) = fs::symlink_metadata(path) {
        if old.is_file() {
            file.set_permissions(old.permissions())?;
        }
    }
    let mut out = BufWriter::new(file);
    fill(&mut out)?;
    let file = out.into_inner().map_err(io::IntoInnerError::into_error)?;
    file.sync_all()
}

/// A new file in `path`'s folder, under a name nobody else uses (`.<name>.<pid>-<n>.tmp`).
fn create_beside(path: &Path) -> io::Result<(File, PathBuf)> {
    let name = path.file_name().ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the path names no file"))?;
    let folder = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut last = None;
    for _ in 0..NAME_TRIES {
        let n = NEXT_TEMPORARY.fetch_add(1, Ordering::Relaxed);
        let temporary = folder.join(format!(".{}.{}-{n}.tmp", name.to_string_lossy(), std::process::id()));
        match OpenOptions::new().write(true).create_new(true).open(&temporary) {
            Ok(file) => return Ok((file, temporary)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no free temporary name")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("wgalloc-output-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> =
            fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        names
    }

    #[test]
    fn the_content_replaces_the_file_whole() {
        let dir = folder("whole");
        let path = dir.join("out.json");
        fs::write(&path, "old content, longer than the new").unwrap();
        write_whole(&path, "the test", |w| w.write_all(b"new")).unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "new");
        assert_eq!(entries(&dir), ["out.json"], "no temporary file left");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_failed_write_leaves_the_old_file() {
        let dir = folder("failed");
        let path = dir.join("out.json");
        fs::write(&path, "old").unwrap();
        let err = write_whole(&path, "the test", |w| {
            w.write_all(&[b'x'; 100_000])?;
            Err(io::Error::new(io::ErrorKind::StorageFull, "no space left on device"))
        })
        .unwrap_err();
        assert_eq!(err.code(), "IO_ERROR");
        assert!(err.to_string().contains("out.json") && err.to_string().contains("no space"), "{err}");
        assert_eq!(fs::read_to_string(&path).unwrap(), "old");
        assert_eq!(entries(&dir), ["out.json"], "the temporary file is removed");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn a_symlink_at_the_path_is_replaced_not_followed() {
        use std::os::unix::fs::PermissionsExt;
        let dir = folder("link");
        let target = dir.join("precious");
        fs::write(&target, "keep me").unwrap();
        fs::set_permissions(&target, fs::Permissions::from_mode(0o600)).unwrap();
        let link = dir.join("out.json");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        write_whole(&link, "the test", |w| w.write_all(b"new")).unwrap();
        assert_eq!(fs::read_to_string(&target).unwrap(), "keep me");
        assert!(fs::symlink_metadata(&link).unwrap().is_file());
        assert_eq!(fs::read_to_string(&link).unwrap(), "new");

        // A file that existed keeps its mode.
        write_whole(&target, "the test", |w| w.write_all(b"changed")).unwrap();
        assert_eq!(fs::metadata(&target).unwrap().permissions().mode() & 0o777, 0o600);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_folder_or_a_missing_folder_is_an_io_error() {
        let dir = folder("folder");
        let err = write_whole(&dir, "the test", |w| w.write_all(b"x")).unwrap_err();
        assert_eq!(err.code(), "IO_ERROR");
        assert!(dir.is_dir());
        let err = write_whole(&dir.join("missing/out.json"), "the test", |w| w.write_all(b"x")).unwrap_err();
        assert_eq!(err.code(), "IO_ERROR");
        assert!(entries(&dir).is_empty(), "{:?}", entries(&dir));
        fs::remove_dir_all(&dir).unwrap();
    }
}
