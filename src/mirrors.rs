//! Note [Mirrors agree with the core]: napi-rs turns `u64` into a BigInt, so the objects JS
//! reads (`#[napi(object)]`, numbers as `f64`) mirror core structs rather than being them.
//! The core struct owns the concept; its mirror is checked against it here: every field of one
//! is a field of the other, except the differences listed with their reason. A field added to
//! a core struct without its mirror (or the reverse) fails this test.

/// (mirror in `src/`, core struct in `crates/`, fields only the mirror has, fields only the core has).
/// A difference is listed with why it is one.
#[cfg(test)]
const PAIRS: &[(&str, &str, &[&str], &[&str])] = &[
    ("Stat", "Stat", &[], &[]),
    // The pool is the index of the core's array; JS gets its name.
    ("PoolStats", "PoolStats", &["pool"], &[]),
    // cachedBytes = reserved - allocated, derived for JS.
    ("HeapStats", "HeapStats", &["cached_bytes"], &[]),
    // `shared` is named as a predicate in JS; the streams a block was used on stay in the core.
    ("BlockInfo", "BlockInfo", &["is_shared"], &["shared", "recorded_streams"]),
    ("SnapshotSegment", "SegmentSnapshot", &[], &[]),
    // JS names byte counts with `Bytes`.
    ("WarmStartResult", "WarmStart", &["reserved_bytes", "released_bytes"], &["bytes", "released"]),
    ("HeapEvent", "HeapEvent", &[], &[]),
    // cachedBytes, derived for JS as for the heap.
    ("HostStats", "HostStats", &["cached_bytes"], &[]),
    // A bucket is the index of the core's array; JS gets the index and its size.
    ("HostBucketStats", "BucketStats", &["index", "size"], &[]),
    ("DurationStat", "DurationStat", &[], &[]),
    ("HostConfig", "HostConfig", &[], &[]),
    ("ExecutorStats", "ExecutorStats", &[], &[]),
    ("ShapeExecutorStats", "ShapeCacheStats", &[], &[]),
    ("ObservedEvent", "ObservedEvent", &[], &[]),
    // Derived for JS from the observed events: the records a plan takes, and their peak.
    ("Observation", "Observation", &["usage_records", "peak_live_bytes"], &[]),
    ("GpuInfo", "GpuInfo", &[], &[]),
    ("MemoryBudget", "MemoryBudget", &[], &[]),
    // The core's timestamp support, split per kind of pass for JS.
    ("ProfilerInfo", "ProfilerInfo", &["dispatch_timestamps", "copy_timestamps", "pass_timestamps"], &["timestamps"]),
    // Nanosecond sums become milliseconds and a bandwidth in JS.
    (
        "CopyStats",
        "CopyStats",
        &["total_gpu_ms", "total_scheduling_ms", "bandwidth_gbps"],
        &["gpu_total_ns", "scheduling_total_ns", "gpu_timed_bytes"],
    ),
    ("FallbackStats", "FallbackStats", &[], &[]),
    // Nanosecond sums become milliseconds, totals and means, in JS.
    (
        "OperationStats",
        "OpStats",
        &["total_gpu_ms", "mean_gpu_ms", "max_gpu_ms", "total_scheduling_ms", "mean_scheduling_ms"],
        &["gpu_total_ns", "gpu_max_ns", "scheduling_total_ns"],
    ),
    ("KvCacheStats", "KvStats", &[], &[]),
    // JS names byte counts with `Bytes`.
    (
        "SimulatedPolicy",
        "PolicyFigures",
        &["peak_live_bytes", "peak_reserved_bytes", "peak_allocated_bytes"],
        &["peak_live", "peak_reserved", "peak_allocated"],
    ),
];

#[cfg(test)]
mod tests {
    use super::PAIRS;
    use std::collections::BTreeSet;
    use std::path::{Path, PathBuf};

    fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                rust_files(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    /// The named fields of `struct name { ... }` in `files` (the first struct of that name).
    fn fields(files: &[PathBuf], name: &str) -> Option<BTreeSet<String>> {
        let head = format!("struct {name} {{");
        for file in files {
            let text = std::fs::read_to_string(file).expect("source");
            let Some(start) = text.lines().position(|l| l.trim_start().trim_start_matches("pub ").starts_with(&head))
            else {
                continue;
            };
            let mut out = BTreeSet::new();
            for line in text.lines().skip(start + 1) {
                let line = line.trim();
                if line.starts_with('}') {
                    return Some(out);
                }
                if line.starts_with("//") || line.starts_with("#[") {
                    continue;
                }
                let line = line.strip_prefix("pub(crate) ").or_else(|| line.strip_prefix("pub ")).unwrap_or(line);
                if let Some((field, _)) = line.split_once(':') {
                    if field.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') && !field.is_empty() {
                        out.insert(field.to_string());
                    }
                }
            }
        }
        None
    }

    #[test]
    fn every_mirror_has_the_fields_of_its_core_struct() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let (mut binding, mut core) = (Vec::new(), Vec::new());
        rust_files(&root.join("src"), &mut binding);
        for krate in std::fs::read_dir(root.join("crates")).expect("crates").flatten() {
            rust_files(&krate.path().join("src"), &mut core);
        }
        let mut drift = Vec::new();
        for &(mirror, owner, mirror_only, core_only) in PAIRS {
            let m = fields(&binding, mirror).unwrap_or_else(|| panic!("no struct {mirror} in src/"));
            let c = fields(&core, owner).unwrap_or_else(|| panic!("no struct {owner} in crates/"));
            let extra: Vec<_> = m.difference(&c).filter(|f| !mirror_only.contains(&f.as_str())).collect();
            let missing: Vec<_> = c.difference(&m).filter(|f| !core_only.contains(&f.as_str())).collect();
            if !extra.is_empty() || !missing.is_empty() {
                drift.push(format!("{mirror} / {owner}: only in the mirror {extra:?}, only in the core {missing:?}"));
            }
            // A listed difference that is gone must leave the list too.
            for f in mirror_only.iter().filter(|f| !m.contains(**f) || c.contains(**f)) {
                drift.push(format!("{mirror}: `{f}` is listed as mirror-only but is not"));
            }
            for f in core_only.iter().filter(|f| !c.contains(**f) || m.contains(**f)) {
                drift.push(format!("{owner}: `{f}` is listed as core-only but is not"));
            }
        }
        assert!(drift.is_empty(), "mirrors drifted from their core structs:\n{}", drift.join("\n"));
    }
}
