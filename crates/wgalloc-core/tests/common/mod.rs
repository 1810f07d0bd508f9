//! Shared by the device tests: opening the device and a chain-of-adds graph.
#![allow(dead_code)]

use wgalloc_core::{Gpu, GpuOptions};

pub fn gpu() -> Gpu {
    pollster::block_on(Gpu::request(GpuOptions::default())).expect("a Vulkan adapter (install mesa-vulkan-drivers)")
}

pub const ADD: &str = r#"
@group(0) @binding(0) var<storage, read_write> a: array<f32>;
@group(0) @binding(1) var<storage, read_write> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  if (g.x < arrayLength(&c)) { c[g.x] = a[g.x] + b[g.x]; }
}"#;

/// Data for the chain graphs' param `w`: `bytes` of zeros.
pub fn zero_w(bytes: usize) -> std::collections::HashMap<String, Vec<u8>> {
    std::collections::HashMap::from([("w".to_string(), vec![0u8; bytes])])
}

/// x -> t0 = x + w -> t1 = t0 + w -> ... -> y (`n` ops), every tensor `bytes` long, w a param.
pub fn chain_graph_json(n: usize, bytes: usize) -> String {
    let mut tensors = vec![
        format!(r#"{{"id":"x","size":{bytes},"kind":"input"}}"#),
        format!(r#"{{"id":"w","size":{bytes},"kind":"param"}}"#),
    ];
    let mut ops = Vec::new();
    let mut prev = "x".to_string();
    let groups = bytes / 4 / 64;
    for i in 0..n {
        let out = if i + 1 == n { "y".to_string() } else { format!("t{i}") };
        let kind = if i + 1 == n { "output" } else { "intermediate" };
        tensors.push(format!(r#"{{"id":"{out}","size":{bytes},"kind":"{kind}"}}"#));
        ops.push(format!(
            r#"{{"name":"add{i}","kernel":"add","inputs":["{prev}","w"],"outputs":["{out}"],"dispatch":[{groups}]}}"#
        ));
        prev = out;
    }
    format!(
        r#"{{"kernels":{{"add":{{"source":{}}}}},"tensors":[{}],"ops":[{}]}}"#,
        serde_json::to_string(ADD).unwrap(),
        tensors.join(","),
        ops.join(",")
    )
}
