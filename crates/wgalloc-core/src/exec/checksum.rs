//! Checksum kernels: run any real graph (the `bench/data/models` format) as if its
//! ops were real. Each op reads all its inputs and writes a deterministic integer
//! mix of them into every word of its outputs, so a planned run must reproduce the
//! eager run's outputs bit for bit, and any overlap of live tensors shows.

use std::collections::{HashMap, HashSet};

use super::graph::{ExecGraph, Extent, Kernel, Op, Tensor, TensorKind};
use crate::error::{Error, Result};

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

/// Builds an executable checksum graph from a model graph JSON.
/// `max_dim` is the device's maxComputeWorkgroupsPerDimension.
pub fn from_model(text: &str, max_dim: u32) -> Result<ExecGraph> {
    let doc = super::graph::parse_doc(text)?;
    let mut tensors = Vec::new();
    let mut views = HashSet::new();
    // Sizes as the planner reads them (an integer, or a decimal string).
    let size = |e: &Extent, id: &str| match e {
        Extent::Int(n) => Ok(*n),
        Extent::Expr(s) => s
            .parse::<u64>()
            .map_err(|_| Error::invalid(format!("tensor '{id}'.size"), "a size in bytes", format!("{s:?}"))),
    };
    for t in &doc.graph_inputs {
        tensors.push(Tensor::new(t.id.clone(), size(&t.size, &t.id)?.max(1), TensorKind::Input));
    }
    for t in &doc.tensors {
        let bytes = t
            .size
            .as_ref()
            .ok_or_else(|| Error::invalid(format!("tensor '{}'.size", t.id), "a size in bytes", "undefined"))?;
        if t.view_of.is_some() {
            views.insert(t.id.clone());
        }
        let kind = if t.is_output == Some(true) { TensorKind::Output } else { TensorKind::Intermediate };
        tensors
            .push(Tensor { view_of: t.view_of.clone(), ..Tensor::new(t.id.clone(), size(bytes, &t.id)?.max(1), kind) });
    }
    let known: HashSet<String> = tensors.iter().map(|t| t.id.clone()).collect();
    let mut kernels = HashMap::new();
    let mut ops = Vec::new();
    let max_dim = u64::from(max_dim);
    for (k, op) in doc.ops.iter().enumerate() {
        let names = |list: &[String]| -> Vec<String> {
            let mut seen = HashSet::new();
            list.iter().filter(|n| known.contains(*n) && seen.insert(n.to_string())).cloned().collect()
        };
        let name = op.name.clone().unwrap_or_else(|| format!("op{k}"));
        let outputs = names(&op.outputs);
        let (view_outs, real_outs): (Vec<String>, Vec<String>) = outputs.into_iter().partition(|o| views.contains(o));
        let inputs: Vec<String> = names(&op.inputs).into_iter().filter(|i| !real_outs.contains(i)).collect();
        if !view_outs.is_empty() {
            ops.push(Op::new(format!("{name} (views)"), Vec::new(), view_outs));
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
        ops.push(Op { kernel: Some(kid), dispatch, params: Some(params), ..Op::new(name, inputs, real_outs) });
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
