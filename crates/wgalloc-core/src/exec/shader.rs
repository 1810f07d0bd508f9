//! Kernel sources checked and prepared with naga before wgpu sees them.
//!
//! wgalloc binds `storage` read-write storage buffers at `@group(0) @binding(0..storage)`
//! and, optionally, one uniform right after them; a kernel may also declare the dims uniform
//! at `@group(1) @binding(0)` (see Note [The dims uniform] in bind.rs). Errors here name the binding and both
//! sides, with the WGSL line and column, instead of wgpu's layout text.

use std::collections::BTreeMap;

use wgpu::naga;

use crate::error::{Error, Result};

/// A parsed kernel, its storage accesses widened to read-write, ready for wgpu.
#[derive(Debug)]
pub(crate) struct Prepared {
    pub module: naga::Module,
    /// Bytes of the uniform's type, when the kernel takes one.
    pub uniform_size: Option<u64>,
    /// Bytes of the dims uniform's type, when the kernel declares one.
    pub dims_size: Option<u64>,
    /// Per storage binding, its variable's name and the fewest bytes its type needs (a
    /// runtime-sized array counts one element, as wgpu's binding check does).
    pub storage_min_sizes: Vec<(String, u64)>,
}

/// What the kernel's binding at one slot is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Declared {
    Storage,
    Uniform,
    Other,
}

impl Declared {
    fn describe(self) -> &'static str {
        match self {
            Declared::Storage => "a storage buffer",
            Declared::Uniform => "a uniform buffer",
            Declared::Other => "a texture, sampler or other resource",
        }
    }
}

/// Parses `source`, checks that its `@group(0)` bindings are exactly `storage` storage
/// buffers followed by a uniform when `uniform`, and that `entry_point` is a compute entry
/// point; returns the module with every storage buffer read-write.
pub(crate) fn prepare(label: &str, source: &str, entry_point: &str, storage: u32, uniform: bool) -> Result<Prepared> {
    let mut module = naga::front::wgsl::parse_str(source).map_err(|e| {
        let at = e
            .location(source)
            .map_or(String::new(), |l| format!(" at line {}, column {}", l.line_number, l.line_position));
        Error::Shader(format!("kernel '{label}': WGSL error{at}: {}", e.message()))
    })?;
    if !module.entry_points.iter().any(|ep| ep.name == entry_point && ep.stage == naga::ShaderStage::Compute) {
        let found: Vec<&str> = module
            .entry_points
            .iter()
            .filter(|ep| ep.stage == naga::ShaderStage::Compute)
            .map(|ep| ep.name.as_str())
            .collect();
        return Err(Error::Shader(format!(
            "kernel '{label}' has no @compute entry point '{entry_point}' (compute entry points: {}); \
             set entryPoint to one of them",
            if found.is_empty() { "none".to_string() } else { found.join(", ") }
        )));
    }
    let mut declared = BTreeMap::new();
    let mut dims_var = None;
    for (_, var) in module.global_variables.iter_mut() {
        let Some(binding) = var.binding.as_ref() else { continue };
        let at = line_of(source, var.name.as_deref());
        if binding.group == 1 && binding.binding == 0 && var.space == naga::AddressSpace::Uniform {
            dims_var = Some(var.ty);
            continue;
        }
        if binding.group != 0 {
            return Err(Error::Shader(format!(
                "kernel '{label}': '{}'{at} is @group({}) @binding({}); wgalloc binds @group(0), and the run's dims \
                 as a uniform at @group(1) @binding(0)",
                var.name.as_deref().unwrap_or("?"),
                binding.group,
                binding.binding
            )));
        }
        let kind = match &mut var.space {
            naga::AddressSpace::Storage { access } => {
                // Blocks of one heap segment share a wgpu buffer, and wgpu forbids mixing
                // read-only and writable uses of one buffer in a dispatch: every storage
                // buffer is bound read-write, so a `read` declaration is widened to match.
                *access |= naga::StorageAccess::LOAD | naga::StorageAccess::STORE;
                Declared::Storage
            }
            naga::AddressSpace::Uniform => Declared::Uniform,
            _ => Declared::Other,
        };
        declared.insert(binding.binding, (kind, var.name.clone().unwrap_or_default(), var.ty, at));
    }
    let expected = |b: u32| {
        if b < storage {
            Some(Declared::Storage)
        } else if uniform && b == storage {
            Some(Declared::Uniform)
        } else {
            None
        }
    };
    let supplied = storage + u32::from(uniform);
    let supplies = if uniform {
        format!("{storage} storage buffers at bindings 0..{} and a uniform at binding {storage}", storage.max(1) - 1)
    } else {
        format!("{storage} storage buffers at bindings 0..{}", storage.max(1) - 1)
    };
    for (&b, (kind, name, _, at)) in &declared {
        match expected(b) {
            Some(want) if want == *kind => {}
            Some(want) => {
                return Err(Error::Shader(format!(
                    "kernel '{label}': binding {b} ('{name}'{at}) is declared as {}, but wgalloc supplies {} there \
                     ({supplies})",
                    kind.describe(),
                    want.describe()
                )))
            }
            None => {
                return Err(Error::Shader(format!(
                    "kernel '{label}': binding {b} ('{name}'{at}) is declared as {}, but nothing is bound there \
                     (wgalloc supplies {supplies})",
                    kind.describe()
                )))
            }
        }
    }
    if let Some(missing) = (0..supplied).find(|b| !declared.contains_key(b)) {
        return Err(Error::Shader(format!(
            "kernel '{label}' declares no binding {missing}, but wgalloc supplies {} there ({supplies}); \
             declare every buffer the op binds",
            expected(missing).map_or("nothing", Declared::describe)
        )));
    }
    let uniform_size = uniform
        .then(|| declared.get(&storage).map(|&(_, _, ty, _)| u64::from(module.types[ty].inner.size(module.to_ctx()))))
        .flatten();
    let dims_size = dims_var.map(|ty| u64::from(module.types[ty].inner.size(module.to_ctx())));
    let storage_min_sizes = (0..storage)
        .map(|b| {
            let (_, name, ty, _) = &declared[&b];
            (name.clone(), u64::from(module.types[*ty].inner.size(module.to_ctx())))
        })
        .collect();
    Ok(Prepared { module, uniform_size, dims_size, storage_min_sizes })
}

/// " at line N" of the line declaring `var<...> name`, for messages; empty if not found.
fn line_of(source: &str, name: Option<&str>) -> String {
    let Some(name) = name else { return String::new() };
    let declares = |line: &str| {
        let Some(rest) = line.split_once("var<").and_then(|(_, r)| r.split_once('>')).map(|(_, r)| r.trim_start())
        else {
            return false;
        };
        rest.strip_prefix(name).is_some_and(|r| r.trim_start().starts_with(':'))
    };
    source.lines().position(declares).map_or(String::new(), |i| format!(" at line {}", i + 1))
}

#[cfg(test)]
mod tests {
    use super::prepare;

    const AXPY: &str = include_str!("../../tests/kernels/axpy.wgsl");

    #[test]
    fn read_only_inputs_are_widened_to_read_write() {
        let src = AXPY.replace("var<storage, read_write> x", "var<storage, read> x");
        let p = prepare("axpy", &src, "main", 2, true).unwrap();
        let x = p.module.global_variables.iter().find(|(_, v)| v.name.as_deref() == Some("x")).unwrap().1;
        assert_eq!(
            x.space,
            wgpu::naga::AddressSpace::Storage {
                access: wgpu::naga::StorageAccess::LOAD | wgpu::naga::StorageAccess::STORE
            }
        );
        assert_eq!(p.uniform_size, Some(4));
    }

    #[test]
    fn mismatched_bindings_name_the_binding_and_both_sides() {
        let e = prepare("axpy", AXPY, "main", 3, false).unwrap_err();
        assert_eq!(e.code(), "SHADER_ERROR");
        let m = e.to_string();
        assert!(
            m.contains(
                "binding 2 ('p' at line 5) is declared as a uniform buffer, but wgalloc supplies a storage buffer"
            ),
            "{m}"
        );
        let e = prepare("axpy", AXPY, "main", 1, true).unwrap_err().to_string();
        assert!(
            e.contains("binding 1 ('y' at line 4) is declared as a storage buffer, but wgalloc supplies a uniform"),
            "{e}"
        );
        let e = prepare("axpy", AXPY, "main", 2, false).unwrap_err().to_string();
        assert!(
            e.contains("binding 2 ('p' at line 5) is declared as a uniform buffer, but nothing is bound there"),
            "{e}"
        );
        let short = AXPY.replace("@group(0) @binding(1) var<storage, read_write> y: array<f32>;", "");
        assert!(prepare("axpy", &short, "main", 2, false).is_err());
    }

    #[test]
    fn syntax_errors_carry_line_and_column() {
        let e = prepare("bad", "@compute @workgroup_size(1)\nfn main( {", "main", 1, false).unwrap_err();
        assert_eq!(e.code(), "SHADER_ERROR");
        assert!(e.to_string().contains("at line 2, column"), "{e}");
        let e = prepare("axpy", AXPY, "nope", 2, true).unwrap_err().to_string();
        assert!(e.contains("no @compute entry point 'nope' (compute entry points: main)"), "{e}");
        let g1 = AXPY.replace("@group(0) @binding(2)", "@group(1) @binding(2)");
        assert!(prepare("axpy", &g1, "main", 2, true).unwrap_err().to_string().contains("@group(1)"));
        // The dims uniform is the one binding of group 1.
        let dims = format!("struct Dims {{ b: u32, s: u32 }}\n@group(1) @binding(0) var<uniform> dims: Dims;\n{AXPY}");
        assert_eq!(prepare("axpy", &dims, "main", 2, true).unwrap().dims_size, Some(8));
        assert_eq!(prepare("axpy", AXPY, "main", 2, true).unwrap().dims_size, None);
        let storage = format!("@group(1) @binding(0) var<storage, read_write> dims: array<u32>;\n{AXPY}");
        assert!(prepare("axpy", &storage, "main", 2, true).unwrap_err().to_string().contains("@group(1) @binding(0)"));
    }
}
