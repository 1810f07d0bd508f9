//! Holds each module of the crate to its layer (Note [Layers of the core] in `src/lib.rs`): a
//! module imports only from its own layer or a lower one. Reads the sources; needs no device.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, lowest first. Only the device core holds more than one module.
const LAYERS: &[&[&str]] = &[
    &[
        "signal",
        "error",
        "output_file",
        "scope",
        "services",
        "driver_turn",
        "completion",
        "lane",
        "mapping",
        "adapter",
        "context",
    ],
    &["profile"],
    &["stream"],
    &["transfer"],
    &["heap"],
    &["host"],
    &["exec"],
    &["kv"],
    &["replay", "open"],
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_dir() {
        for entry in std::fs::read_dir(path).unwrap() {
            rust_files(&entry.unwrap().path(), out);
        }
    } else if path.extension().is_some_and(|e| e == "rs") {
        out.push(path.to_path_buf());
    }
}

/// The crate's top-level modules: every file and folder of `src/` but `lib.rs`.
fn modules() -> BTreeMap<String, PathBuf> {
    std::fs::read_dir(src())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap() != "lib.rs")
        .map(|p| (p.file_stem().unwrap().to_string_lossy().into_owned(), p))
        .collect()
}

/// Names `lib.rs` re-exports (`pub use context::{Gpu, ..}`), with the module each comes from.
fn reexports() -> BTreeMap<String, String> {
    let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    let mut names = BTreeMap::new();
    for line in lib.lines().filter_map(|l| l.strip_prefix("pub use ")) {
        let Some((module, rest)) = line.split_once("::") else { continue };
        for name in rest.trim_end_matches(';').trim_matches(|c| c == '{' || c == '}').split(',') {
            names.insert(name.trim().to_string(), module.to_string());
        }
    }
    names
}

/// The code of `file` without comments and without its unit tests (`#[cfg(test)] mod`), which
/// may reach across layers.
fn code(file: &Path) -> String {
    let text = std::fs::read_to_string(file).unwrap();
    let text = match text.find("#[cfg(test)]\nmod ") {
        Some(at) => &text[..at],
        None => &text,
    };
    text.lines().map(|l| l.split("//").next().unwrap()).collect::<Vec<_>>().join("\n")
}

/// The first path segments after `crate::`, including each name of a `crate::{a, b::c}` group.
fn crate_paths(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(group.len())];
            found.extend(group.split(',').filter_map(|p| p.trim().split("::").next()).map(str::to_string));
        } else {
            found.push(rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect());
        }
    }
    found
}

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

#[test]
fn every_module_imports_only_its_layer_and_below() {
    let modules = modules();
    let reexports = reexports();
    let unplaced: Vec<&String> = modules.keys().filter(|m| layer_of(m).is_none()).collect();
    assert!(unplaced.is_empty(), "modules with no layer in LAYERS (and Note [Layers of the core]): {unplaced:?}");
    let mut upward = BTreeSet::new();
    let mut imports = 0;
    for (module, path) in &modules {
        let mut files = Vec::new();
        rust_files(path, &mut files);
        for file in files {
            for name in crate_paths(&code(&file)) {
                let target = reexports.get(&name).cloned().unwrap_or(name);
                if target == *module || !modules.contains_key(&target) {
                    continue;
                }
                imports += 1;
                if layer_of(&target) > layer_of(module) {
                    upward.insert(format!("{module} imports {target} ({})", file.display()));
                }
            }
        }
    }
    assert!(imports > 50, "the scan found only {imports} imports: is it still reading the sources?");
    assert!(upward.is_empty(), "imports from a higher layer:\n{}", upward.into_iter().collect::<Vec<_>>().join("\n"));
}

#[test]
fn the_scan_sees_an_upward_import() {
    let planted = "use crate::heap::Heap;\nfn f() { crate::Gpu::attach(1); }\nuse crate::{exec, signal::lock};";
    let paths = crate_paths(planted);
    assert_eq!(paths, ["heap", "Gpu", "exec", "signal"]);
    assert!(layer_of("heap") > layer_of("context") && layer_of("exec") > layer_of("profile"));
    assert_eq!(reexports().get("Gpu").map(String::as_str), Some("context"));
}
