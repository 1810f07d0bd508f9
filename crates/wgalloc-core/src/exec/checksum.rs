//! Checksum kernels: run any real graph (the `bench/data/models` format) as if its
//! ops were real. Each op reads all its inputs and writes a deterministic integer
//! mix of them into every word of its outputs, so a planned run must reproduce the
//! eager run's outputs bit for bit, and any overlap of live tensors shows.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use super::graph::{ExecGraph, Kernel, Op, Tensor, TensorKind};
use crate::error::{shown_json, Error, Result};

const WORKGROUP: u64 = 64;

/// WGSL of the checksum kernel for `inputs` read bindings and `outputs` written ones.
pub fn kernel_source(inputs: usize, outputs: usize) -> String {
    let mut s = String::from(
        "struct P { seed: u32, words: u32, row: u32, pad: u32 }\n\
         fn mix32(x: u32) -> u32 { var h = x; h ^= h >> 16u; h *= 0x7feb352du; h ^= h >> 15u; h *= 0x846ca68bu; h ^= h >> 16u; return h; }\n",
    );
    for i in 0..inputs {
        s += &format!("@group(0) @binding({i}) var<storage, read_write> in{i}: array<u32>;\n");
    }
    for o in 0..outputs {
        s += &format!("@group(0) @binding({}) var<storage, read_write> out{o}: array<u32>;\n", inputs + o);
    }
    s += &format!("@group(0) @binding({}) var<uniform> p: P;\n", inputs + outputs);
    s += "@compute @workgroup_size(64)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n";
    s += "  let i = gid.x + gid.y * p.row;\n  if (i >= p.words) { return; }\n  var h = mix32(p.seed ^ i);\n";
    for i in 0..inputs {
        s += &format!("  h = mix32(h ^ in{i}[i % arrayLength(&in{i})]);\n");
    }
    for o in 0..outputs {
        s += &format!("  if (i < arrayLength(&out{o})) {{ out{o}[i] = mix32(h + {o}u); }}\n");
    }
    s += "}\n";
    s
}

/// Dispatch covering `words` invocations of 64-wide workgroups, spilling into y.
fn dispatch_for(words: u64, max_dim: u64) -> ([u32; 3], u32) {
    let groups = words.div_ceil(WORKGROUP).max(1);
    let x = groups.min(max_dim);
    let y = groups.div_ceil(x);
    ([x as u32, y as u32, 1], (x * WORKGROUP) as u32)
}

/// A field of a JSON object as an error shows it (`undefined` when absent).
fn got(v: &Value, key: &str) -> String {
    v.get(key).map_or_else(|| "undefined".into(), shown_json)
}

/// Builds an executable checksum graph from a model graph JSON.
/// `max_dim` is the device's maxComputeWorkgroupsPerDimension.
pub fn from_model(text: &str, max_dim: u32) -> Result<ExecGraph> {
    let v = super::graph::parse_json(text)?;
    let root = v
        .as_object()
        .ok_or_else(|| Error::invalid("graph", "an object with ops and tensors (a model graph)", shown_json(&v)))?;
    let mut tensors = Vec::new();
    let mut views = HashSet::new();
    let field_u64 = |t: &Value, k: &str| t.get(k).and_then(Value::as_u64);
    for t in root.get("graphInputs").and_then(Value::as_array).into_iter().flatten() {
        let id = t
            .get("id")
            .and_then(Value::as_str)
            .ok_or_else(|| Error::invalid("graphInputs[].id", "a string", got(t, "id")))?;
        let size = field_u64(t, "size")
            .ok_or_else(|| Error::invalid(format!("graph input '{id}'.size"), "a size in bytes", got(t, "size")))?;
        tensors.push(Tensor { id: id.into(), size: size.max(1), kind: TensorKind::Input, view_of: None, dtype: None });
    }
    for t in root
        .get("tensors")
        .and_then(Value::as_array)
        .ok_or_else(|| Error::invalid("tensors", "an array", got(&v, "tensors")))?
    {
        let id = t
            .get("id")
            .and_then(Value::as_str)
            .ok_or_else(|| Error::invalid("tensors[].id", "a string", got(t, "id")))?;
        let size = field_u64(t, "size")
            .ok_or_else(|| Error::invalid(format!("tensor '{id}'.size"), "a size in bytes", got(t, "size")))?;
        let view_of = t.get("viewOf").and_then(Value::as_str).map(str::to_string);
        if view_of.is_some() {
            views.insert(id.to_string());
        }
        let kind = if t.get("isOutput").and_then(Value::as_bool).unwrap_or(false) {
            TensorKind::Output
        } else {
            TensorKind::Intermediate
        };
        tensors.push(Tensor { id: id.into(), size: size.max(1), kind, view_of, dtype: None });
    }
    let known: HashSet<String> = tensors.iter().map(|t| t.id.clone()).collect();
    let mut kernels = HashMap::new();
    let mut ops = Vec::new();
    let max_dim = u64::from(max_dim);
    for (k, op) in root
        .get("ops")
        .and_then(Value::as_array)
        .ok_or_else(|| Error::invalid("ops", "an array", got(&v, "ops")))?
        .iter()
        .enumerate()
    {
        let names = |key: &str| -> Vec<String> {
            let mut seen = HashSet::new();
            op.get(key)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .filter(|n| known.contains(*n) && seen.insert(n.to_string()))
                .map(str::to_string)
                .collect()
        };
        let name = op.get("name").and_then(Value::as_str).map_or_else(|| format!("op{k}"), str::to_string);
        let outputs = names("outputs");
        let (view_outs, real_outs): (Vec<String>, Vec<String>) = outputs.into_iter().partition(|o| views.contains(o));
        let inputs: Vec<String> = names("inputs").into_iter().filter(|i| !real_outs.contains(i)).collect();
        if !view_outs.is_empty() {
            ops.push(Op {
                name: format!("{name} (views)"),
                kernel: None,
                inputs: Vec::new(),
                outputs: view_outs,
                dispatch: [1, 1, 1],
                params: None,
                workspace: 0,
            });
        }
        if real_outs.is_empty() {
            continue;
        }
        let words = real_outs
            .iter()
            .map(|o| tensors.iter().find(|t| &t.id == o).map_or(1, |t| t.size.div_ceil(4)))
            .max()
            .unwrap_or(1);
        let (dispatch, row) = dispatch_for(words, max_dim);
        let kid = format!("checksum_{}_{}", inputs.len(), real_outs.len());
        kernels.entry(kid.clone()).or_insert_with(|| Kernel {
            source: kernel_source(inputs.len(), real_outs.len()),
            entry_point: "main".into(),
        });
        let mut params = Vec::with_capacity(16);
        for word in [k as u32 ^ 0x9e37_79b9, words as u32, row, 0] {
            params.extend_from_slice(&word.to_le_bytes());
        }
        ops.push(Op {
            name,
            kernel: Some(kid),
            inputs,
            outputs: real_outs,
            dispatch,
            params: Some(params),
            workspace: 0,
        });
    }
    // Drop views nobody produces or reads (their ops had no known outputs).
    ExecGraph::new(tensors, ops, kernels)
}

/// Deterministic bytes for every graph input (a per-input seed).
pub fn sample_inputs(graph: &ExecGraph) -> HashMap<String, Vec<u8>> {
    graph
        .inputs()
        .map(|t| {
            let seed = t.id.bytes().fold(0x811c_9dc5u32, |h, b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193));
            let bytes =
                (0..t.size).map(|i| ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 13) as u8).collect();
            (t.id.clone(), bytes)
        })
        .collect()
}
