//! Changing shapes: one symbolic graph, executors cached by concrete shape (exact or
//! bucketed), results equal to a graph compiled for that shape, memory bounded by the LRU.

use std::collections::HashMap;

use common::gpu;
use wgalloc_core::exec::{
    CompileOptions, DeviceIo, Dims, ExecGraph, RunOptions, ShapeCache, ShapePolicy, SymbolicGraph,
};

mod common;

const ROW: usize = 1024; // bytes per batch row

/// The chain-of-adds graph with every tensor `batch` rows long.
fn symbolic_chain() -> String {
    let concrete = common::chain_graph_json(3, ROW);
    let groups = ROW / 4 / 64;
    let mut v: serde_json::Value = serde_json::from_str(&concrete).unwrap();
    for t in v["tensors"].as_array_mut().unwrap() {
        if t["id"] != "w" {
            t["size"] = format!("batch * {ROW}").into();
        }
    }
    for op in v["ops"].as_array_mut().unwrap() {
        op["dispatch"] = serde_json::json!([format!("batch * {groups}")]);
    }
    v["dims"] = serde_json::json!(["batch"]);
    v.to_string()
}

fn dims(batch: u64) -> Dims {
    Dims::from([("batch".to_string(), batch)])
}

fn x(batch: usize) -> Vec<u8> {
    (0..batch * ROW / 4).flat_map(|i| (i as f32 * 0.5 - 3.0).to_le_bytes()).collect()
}

fn options() -> CompileOptions {
    let w: Vec<u8> = (0..ROW / 4).flat_map(|i| ((i % 5) as f32).to_le_bytes()).collect();
    CompileOptions { params: HashMap::from([("w".to_string(), w)]), ..Default::default() }
}

fn run(cache: &ShapeCache, batch: usize) -> Vec<u8> {
    let inputs = HashMap::from([("x".to_string(), x(batch))]);
    let out = pollster::block_on(cache.run(&dims(batch as u64), &inputs, &DeviceIo::default(), RunOptions::default()));
    out.unwrap().outputs.remove(0).1
}

/// The same graph compiled by hand for `batch` rows.
fn reference(batch: usize) -> Vec<u8> {
    let g = SymbolicGraph::parse(&symbolic_chain()).unwrap().instantiate(&dims(batch as u64)).unwrap();
    let exe = gpu().compile(g, options()).unwrap();
    let inputs = HashMap::from([("x".to_string(), x(batch))]);
    pollster::block_on(exe.run(&inputs, RunOptions::default())).unwrap().outputs.remove(0).1
}

#[test]
fn exact_shapes_compile_once_each_and_match_a_graph_compiled_for_the_shape() {
    let gpu = gpu();
    let graph = SymbolicGraph::parse(&symbolic_chain()).unwrap();
    let cache = ShapeCache::new(&gpu, graph, ShapePolicy::Exact, 8, options()).unwrap();
    for batch in [1, 3, 1, 5, 3, 3] {
        assert_eq!(run(&cache, batch), reference(batch), "batch {batch}");
    }
    let s = cache.stats();
    assert_eq!((s.misses, s.hits, s.evictions, s.cached), (3, 3, 0, 3));
}

#[test]
fn buckets_pad_to_the_bucket_cut_outputs_back_and_the_lru_bounds_memory() {
    let gpu = gpu();
    let graph = SymbolicGraph::parse(&symbolic_chain()).unwrap();
    let policy = ShapePolicy::Buckets(HashMap::from([("batch".to_string(), vec![1, 2, 4, 8, 16])]));
    let cache = ShapeCache::new(&gpu, graph, policy, 2, options()).unwrap();
    let reserved_before = gpu.heap().unwrap().stats().allocated_bytes.current;
    let mut max_bytes = 0;
    for batch in [3, 4, 1, 7, 16, 2, 3, 9, 5] {
        let out = run(&cache, batch);
        assert_eq!(out.len(), batch * ROW);
        assert_eq!(out, reference(batch), "batch {batch}");
        max_bytes = max_bytes.max(cache.stats().device_bytes);
    }
    let s = cache.stats();
    // Buckets 4, 4, 1, 8, 16, 2, 4, 16, 8: 2 held at most, so most shapes compile again.
    assert_eq!(s.hits + s.misses, 9);
    assert_eq!(s.hits, 1, "{s:?}");
    assert_eq!(s.cached, 2);
    assert_eq!(s.evictions, s.misses - 2);
    // Never more than two executors' slabs: the two largest buckets' worth.
    assert!(max_bytes <= 2 * (16 * ROW as u64 * 3 + ROW as u64 * 2), "{max_bytes}");
    cache.clear();
    assert_eq!(cache.stats().device_bytes, 0);
    assert_eq!(gpu.heap().unwrap().stats().allocated_bytes.current, reserved_before);
}

#[test]
fn device_blocks_below_the_bucket_are_padded_and_cut_like_host_bytes() {
    use std::sync::Arc;
    use wgalloc_core::Usage;
    let gpu = gpu();
    let heap = gpu.heap().unwrap();
    let graph = SymbolicGraph::parse(&symbolic_chain()).unwrap();
    let policy = ShapePolicy::Buckets(HashMap::from([("batch".to_string(), vec![4])]));
    let cache = ShapeCache::new(&gpu, graph, policy, 2, options()).unwrap();
    // Leave a non-zero pattern in the bucket's slab, where padding rows go.
    let full = HashMap::from([("x".to_string(), vec![0x7fu8; 4 * ROW])]);
    pollster::block_on(cache.run(&dims(4), &full, &DeviceIo::default(), RunOptions::default())).unwrap();
    for batch in [3usize, 1] {
        // Input and output blocks hold the asked rows only, not the bucket's four.
        let input = Arc::new(heap.malloc((batch * ROW) as u64, Usage::Device).unwrap());
        input.write(&x(batch), 0).unwrap();
        let into = Arc::new(heap.malloc((batch * ROW) as u64, Usage::Device).unwrap());
        let y = "y".to_string();
        let io = DeviceIo {
            inputs: HashMap::from([("x".to_string(), input.clone())]),
            outputs_into: HashMap::from([(y.clone(), into.clone())]),
            ..Default::default()
        };
        pollster::block_on(cache.run(&dims(batch as u64), &HashMap::new(), &io, RunOptions::default())).unwrap();
        let got = pollster::block_on(into.read(0, (batch * ROW) as u64)).unwrap();
        assert_eq!(got, reference(batch), "outputsInto at batch {batch}");
        // Left on the device: a block of the asked size, equal to the host path.
        let io = DeviceIo { inputs: io.inputs.clone(), outputs_on_device: true, ..Default::default() };
        let out = pollster::block_on(cache.run(&dims(batch as u64), &HashMap::new(), &io, RunOptions::default()));
        let block = out.unwrap().device_outputs.remove(0).1;
        assert_eq!(block.requested_size(), (batch * ROW) as u64);
        assert_eq!(pollster::block_on(block.read(0, (batch * ROW) as u64)).unwrap(), reference(batch));
        // Fewer bytes than the asked shape is still refused.
        let short = Arc::new(heap.malloc((batch * ROW - 4) as u64, Usage::Device).unwrap());
        let io = DeviceIo { inputs: HashMap::from([("x".to_string(), short)]), ..Default::default() };
        let r = pollster::block_on(cache.run(&dims(batch as u64), &HashMap::new(), &io, RunOptions::default()));
        assert_eq!(r.unwrap_err().code(), "INVALID_ARGUMENT");
    }
}

#[test]
fn bad_shapes_and_graphs_are_refused_with_typed_errors() {
    let gpu = gpu();
    let code = |r: Result<_, wgalloc_core::Error>| r.map(|_: ()| ()).unwrap_err().code();
    assert_eq!(code(SymbolicGraph::parse(&common::chain_graph_json(1, ROW)).map(drop)), "INVALID_ARGUMENT");
    let bad_expr = symbolic_chain().replace("batch * 1024", "batch ** 2");
    assert_eq!(code(SymbolicGraph::parse(&bad_expr).map(drop)), "INVALID_ARGUMENT");
    let unknown = symbolic_chain().replace("batch * 1024", "rows * 1024");
    assert_eq!(code(SymbolicGraph::parse(&unknown).map(drop)), "INVALID_ARGUMENT");
    // Operands past 2^53 are refused before they multiply (their product overflowed i128).
    let huge = symbolic_chain().replace("batch * 1024", "18446744073709551615 * 18446744073709551615");
    assert_eq!(code(SymbolicGraph::parse(&huge).map(drop)), "INVALID_ARGUMENT");
    // Parentheses 64 deep evaluate; deeper ones are refused (100,000 overflowed the stack).
    let nest = |n: usize| format!("{}batch * 1024{}", "(".repeat(n), ")".repeat(n));
    assert!(SymbolicGraph::parse(&symbolic_chain().replace("batch * 1024", &nest(64))).is_ok());
    let deep = symbolic_chain().replace("batch * 1024", &nest(100_000));
    let err = SymbolicGraph::parse(&deep).map(drop).unwrap_err();
    assert_eq!(err.code(), "INVALID_ARGUMENT");
    assert!(err.to_string().contains("parentheses nest deeper than 64"), "{err}");
    let graph = SymbolicGraph::parse(&symbolic_chain()).unwrap();
    let policy = ShapePolicy::Buckets(HashMap::from([("batch".to_string(), vec![2, 4])]));
    let cache = ShapeCache::new(&gpu, graph.clone(), policy, 2, options()).unwrap();
    for d in [dims(0), dims(5), Dims::new(), Dims::from([("rows".to_string(), 1)])] {
        assert_eq!(code(cache.executor(&d).map(drop)), "INVALID_ARGUMENT", "{d:?}");
    }
    let wrong = HashMap::from([("x".to_string(), x(3))]);
    let r = pollster::block_on(cache.run(&dims(2), &wrong, &DeviceIo::default(), RunOptions::default()));
    assert_eq!(r.unwrap_err().code(), "INVALID_ARGUMENT");
    assert_eq!(
        code(ShapeCache::new(&gpu, graph.clone(), ShapePolicy::Exact, 0, options()).map(drop)),
        "INVALID_ARGUMENT"
    );
    let odd = ShapePolicy::Buckets(HashMap::from([("rows".to_string(), vec![2])]));
    assert_eq!(code(ShapeCache::new(&gpu, graph, odd, 2, options()).map(drop)), "INVALID_ARGUMENT");
    // A concrete graph is unaffected by a "dims" field it does not use.
    assert!(ExecGraph::parse(&common::chain_graph_json(1, ROW)).is_ok());
}

#[test]
fn close_lets_go_of_the_shared_weights_and_a_run_claimed_before_still_completes() {
    use wgalloc_core::exec::Weights;
    let gpu = gpu();
    let heap = gpu.heap().unwrap();
    let before = heap.stats().allocated_bytes.current;
    let weights = gpu.create_weights(options().params).unwrap();
    let (handle, weight_bytes) = (weights.share_handle(), weights.device_bytes());
    let with_weights = || CompileOptions { weights: Some(weights.clone()), ..Default::default() };
    let graph = SymbolicGraph::parse(&symbolic_chain()).unwrap();
    let cache = ShapeCache::new(&gpu, graph.clone(), ShapePolicy::Exact, 2, with_weights()).unwrap();
    assert_eq!(run(&cache, 2), reference(2), "bound from the shared weights");
    // A run claimed before close() compiles for itself (its shape is not cached) and completes.
    let late = ShapeCache::new(&gpu, graph, ShapePolicy::Exact, 2, with_weights()).unwrap();
    let claim = ShapeCache::claim(&late).unwrap();
    drop(weights); // the creator's handle lets go: the caches hold the weights now
    assert!(Weights::attach(handle).is_ok());
    cache.close();
    late.close();
    let inputs = HashMap::from([("x".to_string(), x(3))]);
    let out = pollster::block_on(claim.run(&dims(3), &inputs, &DeviceIo::default(), RunOptions::default()));
    assert_eq!(out.unwrap().outputs.remove(0).1, reference(3));
    // Closed and with no run left: nothing holds the weights, and their block went back.
    let err = Weights::attach(handle).map(drop).unwrap_err();
    assert_eq!(err.code(), "INVALID_ARGUMENT");
    assert_eq!(heap.stats().allocated_bytes.current, before, "weights ({weight_bytes} bytes) and slabs freed");
    let r = pollster::block_on(cache.run(&dims(2), &HashMap::new(), &DeviceIo::default(), RunOptions::default()));
    assert_eq!(r.unwrap_err().code(), "USE_AFTER_FREE");
    assert_eq!(ShapeCache::claim(&cache).map(drop).unwrap_err().code(), "USE_AFTER_FREE");
}

#[test]
fn a_size_below_the_bucket_that_is_not_whole_elements_of_its_dtype_is_refused_as_compile_refuses_it() {
    let gpu = gpu();
    // t holds 2 * b + 2 bytes of u32: whole elements at b = 1 and 3, not at b = 2. (An
    // intermediate: as an input or output, a sum over a bucketed dimension cannot be placed.)
    let source = r#"
@group(0) @binding(0) var<storage, read> x: array<u32>;
@group(0) @binding(1) var<storage, read_write> y: array<u32>;
@group(0) @binding(2) var<storage, read_write> t: array<u32>;
@compute @workgroup_size(1)
fn main() { y[0] = x[0]; t[0] = x[0]; }"#;
    let json = serde_json::json!({
        "dims": ["b"],
        "kernels": { "k": { "source": source } },
        "tensors": [
            { "id": "x", "size": "b * 4", "kind": "input", "dtype": "u32" },
            { "id": "y", "size": "b * 4", "kind": "output", "dtype": "u32" },
            { "id": "t", "size": "2 * b + 2", "dtype": "u32" },
        ],
        "ops": [{ "kernel": "k", "inputs": ["x"], "outputs": ["y", "t"] }],
    })
    .to_string();
    let graph = SymbolicGraph::parse(&json).unwrap();
    let compiled = graph.instantiate(&Dims::from([("b".to_string(), 2)])).map(drop).unwrap_err();
    assert!(
        compiled.to_string().contains("expected a whole number of u32 elements (4 bytes each), got 6 bytes"),
        "{compiled}"
    );
    let policy = ShapePolicy::Buckets(HashMap::from([("b".to_string(), vec![3])]));
    let cache = ShapeCache::new(&gpu, graph, policy, 2, CompileOptions::default()).unwrap();
    let at = |b: u64| {
        let inputs = HashMap::from([("x".to_string(), (0..b as u32).flat_map(|v| (v + 7).to_le_bytes()).collect())]);
        let d = Dims::from([("b".to_string(), b)]);
        pollster::block_on(cache.run(&d, &inputs, &DeviceIo::default(), RunOptions::default()))
    };
    let err = at(2).map(drop).unwrap_err();
    assert_eq!(err.code(), "INVALID_ARGUMENT");
    let msg = err.to_string();
    for part in ["tensor 't'", r#"{"b": 2}"#, "6 bytes", "u32 elements"] {
        assert!(msg.contains(part), "'{part}' missing from: {msg}");
    }
    assert_eq!(cache.stats().misses, 0, "refused before compiling the bucket");
    // At the bucket itself: t is 8 bytes, two u32.
    assert_eq!(at(3).unwrap().outputs[0].1[..4], [7, 0, 0, 0]);
}

/// Row sums (`y`, over the bucket's whole rows: padding must be zeros) and doubles (`z`) of
/// `x`, declared by `x`; `b` rows of `s`.
fn rows_graph(x: &str) -> String {
    let sum = r#"@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(1) fn main(@builtin(workgroup_id) id: vec3<u32>) {
    let width = arrayLength(&x) / arrayLength(&y);
    var sum = 0.0;
    for (var j = 0u; j < width; j++) { sum += x[id.x * width + j]; }
    y[id.x] = sum;
}"#;
    let double = r#"@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> z: array<f32>;
@compute @workgroup_size(1) fn main(@builtin(workgroup_id) id: vec3<u32>) { z[id.x] = 2.0 * x[id.x]; }"#;
    serde_json::json!({
        "dims": ["b", "s"],
        "kernels": { "sum": { "source": sum }, "double": { "source": double } },
        "tensors": [
            serde_json::from_str::<serde_json::Value>(x).unwrap(),
            { "id": "y", "shape": ["b"], "dtype": "f32", "kind": "output" },
            { "id": "z", "shape": ["b", "s"], "dtype": "f32", "kind": "output" },
        ],
        "ops": [
            { "kernel": "sum", "inputs": ["x"], "outputs": ["y"], "dispatch": ["b"] },
            { "kernel": "double", "inputs": ["x"], "outputs": ["z"], "dispatch": ["b * s"] },
        ],
    })
    .to_string()
}

const SHAPED_X: &str = r#"{ "id": "x", "shape": ["b", "s"], "dtype": "f32", "kind": "input" }"#;

fn bs(b: u64, s: u64) -> Dims {
    Dims::from([("b".to_string(), b), ("s".to_string(), s)])
}

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn floats(b: &[u8]) -> Vec<f32> {
    b.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

/// `b` rows of `s`: row r is (r * 10 + 1) * [1, 2, .., s].
fn rows(b: usize, s: usize) -> Vec<f32> {
    (0..b).flat_map(|r| (1..=s).map(move |j| ((r * 10 + 1) * j) as f32)).collect()
}

fn s_buckets(sizes: &[u64]) -> ShapePolicy {
    ShapePolicy::Buckets(HashMap::from([("s".to_string(), sizes.to_vec())]))
}

#[test]
fn a_bucket_on_an_inner_dimension_places_shaped_tensors_row_by_row() {
    let gpu = gpu();
    let graph = SymbolicGraph::parse(&rows_graph(SHAPED_X)).unwrap();
    let cache = ShapeCache::new(&gpu, graph, s_buckets(&[4, 8]), 4, CompileOptions::default()).unwrap();
    // The issue's example: b=2, s=3 runs in the bucket s=4.
    let x = HashMap::from([("x".to_string(), f32s(&[1.0, 2.0, 3.0, 10.0, 20.0, 30.0]))]);
    let out = pollster::block_on(cache.run(&bs(2, 3), &x, &DeviceIo::default(), RunOptions::default())).unwrap();
    assert_eq!(floats(&out.outputs[0].1), [6.0, 60.0], "row sums");
    assert_eq!(floats(&out.outputs[1].1), [2.0, 4.0, 6.0, 20.0, 40.0, 60.0], "outputs cut row by row");
    for (b, s) in [(1, 5), (3, 4), (2, 1), (3, 7)] {
        let x = rows(b, s);
        let inputs = HashMap::from([("x".to_string(), f32s(&x))]);
        let out = pollster::block_on(cache.run(
            &bs(b as u64, s as u64),
            &inputs,
            &DeviceIo::default(),
            RunOptions::default(),
        ))
        .unwrap();
        let sums: Vec<f32> = x.chunks(s).map(|r| r.iter().sum()).collect();
        assert_eq!(floats(&out.outputs[0].1), sums, "b={b} s={s}");
        assert_eq!(floats(&out.outputs[1].1), x.iter().map(|v| v * 2.0).collect::<Vec<_>>(), "b={b} s={s}");
    }
    assert_eq!(cache.stats().misses, 4, "(2, 4), (1, 8), (3, 4) and (3, 8)");
    // The same tensor sized in bytes cannot be placed under that bucket: refused at creation.
    let bytes = rows_graph(r#"{ "id": "x", "size": "b * s * 4", "dtype": "f32", "kind": "input" }"#);
    let graph = SymbolicGraph::parse(&bytes).unwrap();
    let err = ShapeCache::new(&gpu, graph.clone(), s_buckets(&[4, 8]), 4, CompileOptions::default()).err().unwrap();
    assert_eq!(err.code(), "INVALID_ARGUMENT");
    let m = err.to_string();
    assert!(m.contains("input 'x'") && m.contains("dimension 's'") && m.contains("Declare the tensor's shape"), "{m}");
    // A bucket on its first factor stays allowed, as does running it without buckets.
    let b_buckets = ShapePolicy::Buckets(HashMap::from([("b".to_string(), vec![4])]));
    let cache = ShapeCache::new(&gpu, graph.clone(), b_buckets, 4, CompileOptions::default()).unwrap();
    let out = pollster::block_on(cache.run(&bs(2, 3), &x, &DeviceIo::default(), RunOptions::default())).unwrap();
    assert_eq!(floats(&out.outputs[0].1), [6.0, 60.0]);
    let cache = ShapeCache::new(&gpu, graph, ShapePolicy::Exact, 4, CompileOptions::default()).unwrap();
    let out = pollster::block_on(cache.run(&bs(2, 3), &x, &DeviceIo::default(), RunOptions::default())).unwrap();
    assert_eq!(floats(&out.outputs[0].1), [6.0, 60.0]);
}

#[test]
fn device_blocks_under_an_inner_bucket_are_copied_row_by_row() {
    use std::sync::Arc;
    use wgalloc_core::Usage;
    let gpu = gpu();
    let heap = gpu.heap().unwrap();
    let graph = SymbolicGraph::parse(&rows_graph(SHAPED_X)).unwrap();
    let cache = ShapeCache::new(&gpu, graph, s_buckets(&[4]), 2, CompileOptions::default()).unwrap();
    // Leave a non-zero pattern in the bucket's slab, where padding goes.
    let full = HashMap::from([("x".to_string(), f32s(&[7.0; 8]))]);
    pollster::block_on(cache.run(&bs(2, 4), &full, &DeviceIo::default(), RunOptions::default())).unwrap();
    let x = rows(2, 3);
    let input = Arc::new(heap.malloc(24, Usage::Device).unwrap());
    input.write(&f32s(&x), 0).unwrap();
    let into = Arc::new(heap.malloc(24, Usage::Device).unwrap());
    let io = DeviceIo {
        inputs: HashMap::from([("x".to_string(), input.clone())]),
        outputs_into: HashMap::from([("z".to_string(), into.clone())]),
        ..Default::default()
    };
    let out = pollster::block_on(cache.run(&bs(2, 3), &HashMap::new(), &io, RunOptions::default())).unwrap();
    assert_eq!(floats(&out.outputs[0].1), [6.0, 66.0], "the padding was zeroed on the GPU");
    let doubled: Vec<f32> = x.iter().map(|v| v * 2.0).collect();
    assert_eq!(floats(&pollster::block_on(into.read(0, 24)).unwrap()), doubled, "outputsInto row by row");
    let io = DeviceIo { inputs: io.inputs.clone(), outputs_on_device: true, ..Default::default() };
    let mut out = pollster::block_on(cache.run(&bs(2, 3), &HashMap::new(), &io, RunOptions::default())).unwrap();
    let (z, y) = (out.device_outputs.remove(1).1, out.device_outputs.remove(0).1);
    assert_eq!((y.requested_size(), z.requested_size()), (8, 24));
    assert_eq!(floats(&pollster::block_on(z.read(0, 24)).unwrap()), doubled);
    assert_eq!(floats(&pollster::block_on(y.read(0, 8)).unwrap()), [6.0, 66.0]);
    // Rows that are not whole words cannot be copied on the GPU: refused, pointing to host bytes.
    let u16_x = r#"{ "id": "x", "shape": ["b", "s"], "dtype": "u16", "kind": "input" }"#;
    let graph = SymbolicGraph::parse(&rows_graph(u16_x)).unwrap();
    let cache = ShapeCache::new(&gpu, graph, s_buckets(&[4]), 2, CompileOptions::default()).unwrap();
    let io = DeviceIo { inputs: HashMap::from([("x".to_string(), input)]), ..Default::default() };
    let err = pollster::block_on(cache.run(&bs(2, 3), &HashMap::new(), &io, RunOptions::default())).unwrap_err();
    assert_eq!(err.code(), "INVALID_ARGUMENT");
    let m = err.to_string();
    assert!(
        m.contains("device input 'x'") && m.contains("[2, 3]") && m.contains("[2, 4]") && m.contains("shapeOf"),
        "{m}"
    );
    let host = HashMap::from([("x".to_string(), vec![0u8; 12])]);
    pollster::block_on(cache.run(&bs(2, 3), &host, &DeviceIo::default(), RunOptions::default())).unwrap();
}

#[test]
fn external_blocks_are_bound_whole_in_the_buckets_shape() {
    use std::sync::Arc;
    use wgalloc_core::Usage;
    let gpu = gpu();
    let heap = gpu.heap().unwrap();
    let mut g: serde_json::Value = serde_json::from_str(&rows_graph(SHAPED_X)).unwrap();
    g["tensors"].as_array_mut().unwrap().push(serde_json::json!(
        { "id": "kv", "shape": ["b", "s"], "dtype": "f32", "kind": "external" }
    ));
    // The doubling op adds the external tensor, read in the bucket's layout.
    g["kernels"]["double"]["source"] = r#"@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> kv: array<f32>;
@group(0) @binding(2) var<storage, read_write> z: array<f32>;
@compute @workgroup_size(1) fn main(@builtin(workgroup_id) id: vec3<u32>) { z[id.x] = 2.0 * x[id.x] + kv[id.x]; }"#
        .into();
    g["ops"][1]["inputs"] = serde_json::json!(["x", "kv"]);
    let graph = SymbolicGraph::parse(&g.to_string()).unwrap();
    let cache = ShapeCache::new(&gpu, graph, s_buckets(&[4]), 2, CompileOptions::default()).unwrap();
    let x = HashMap::from([("x".to_string(), f32s(&rows(2, 3)))]);
    // A block for the asked shape is refused: the tensor is bound whole at the bucket's.
    let small = Arc::new(heap.malloc(24, Usage::Device).unwrap());
    let io = DeviceIo { inputs: HashMap::from([("kv".to_string(), small)]), ..Default::default() };
    let err = pollster::block_on(cache.run(&bs(2, 3), &x, &io, RunOptions::default())).unwrap_err();
    assert_eq!(err.code(), "INVALID_ARGUMENT");
    let m = err.to_string();
    assert!(
        m.contains("external tensor 'kv'")
            && m.contains("shape [2, 3] asked, [2, 4] in the bucket: 32 bytes")
            && m.contains("shapeOf(dims)"),
        "{m}"
    );
    // A block of the bucket's shape, laid out in it, is bound as it is.
    let kv = Arc::new(heap.malloc(32, Usage::Device).unwrap());
    kv.write(&f32s(&[100.0, 200.0, 300.0, 400.0, 500.0, 600.0, 700.0, 800.0]), 0).unwrap();
    let io = DeviceIo { inputs: HashMap::from([("kv".to_string(), kv)]), ..Default::default() };
    let out = pollster::block_on(cache.run(&bs(2, 3), &x, &io, RunOptions::default())).unwrap();
    assert_eq!(floats(&out.outputs[1].1), [102.0, 204.0, 306.0, 522.0, 644.0, 766.0]);
}

/// Row means over the asked `s`, read from the dims uniform.
const MEAN: &str = r#"struct Dims { b: u32, s: u32 }
@group(1) @binding(0) var<uniform> dims: Dims;
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(1) fn main(@builtin(workgroup_id) id: vec3<u32>) {
    let width = arrayLength(&x) / arrayLength(&y);
    var sum = 0.0;
    for (var j = 0u; j < dims.s; j++) { sum += x[id.x * width + j]; }
    y[id.x] = sum / f32(dims.s) + f32(dims.b) * 1000.0;
}"#;

fn mean_graph(source: &str) -> String {
    let mut g: serde_json::Value = serde_json::from_str(&rows_graph(SHAPED_X)).unwrap();
    g["kernels"]["sum"]["source"] = source.into();
    g.to_string()
}

#[test]
fn kernels_read_the_asked_dims_from_the_dims_uniform() {
    let gpu = gpu();
    let graph = SymbolicGraph::parse(&mean_graph(MEAN)).unwrap();
    let policy = ShapePolicy::Buckets(HashMap::from([("b".to_string(), vec![4]), ("s".to_string(), vec![8])]));
    let cache = ShapeCache::new(&gpu, graph, policy, 2, CompileOptions::default()).unwrap();
    let want = |b: usize, s: usize| -> Vec<f32> {
        rows(b, s).chunks(s).map(|r| r.iter().sum::<f32>() / s as f32 + b as f32 * 1000.0).collect()
    };
    for (b, s) in [(2, 3), (4, 8), (1, 5), (3, 1)] {
        let x = HashMap::from([("x".to_string(), f32s(&rows(b, s)))]);
        let out =
            pollster::block_on(cache.run(&bs(b as u64, s as u64), &x, &DeviceIo::default(), RunOptions::default()))
                .unwrap();
        assert_eq!(floats(&out.outputs[0].1), want(b, s), "b={b} s={s}");
    }
    // Runs left on the device return once submitted: each queued run sees its own dims.
    let io = DeviceIo { outputs_on_device: true, ..Default::default() };
    let shapes = [(2, 3), (3, 7), (1, 2), (4, 8), (2, 6)];
    let blocks: Vec<_> = shapes
        .iter()
        .map(|&(b, s)| {
            let x = HashMap::from([("x".to_string(), f32s(&rows(b, s)))]);
            let run = pollster::block_on(cache.run(&bs(b as u64, s as u64), &x, &io, RunOptions::default()));
            run.unwrap().device_outputs.remove(0).1
        })
        .collect();
    for (&(b, s), y) in shapes.iter().zip(&blocks) {
        assert_eq!(floats(&pollster::block_on(y.read(0, 4 * b as u64)).unwrap()), want(b, s), "queued b={b} s={s}");
    }
    assert_eq!(cache.stats().misses, 1, "every run in the one bucket");
    // A dims uniform larger than the graph's dims, and one in a graph without dims, are refused.
    let three = MEAN.replace("struct Dims { b: u32, s: u32 }", "struct Dims { b: u32, s: u32, t: u32 }");
    let graph = SymbolicGraph::parse(&mean_graph(&three)).unwrap();
    let err = ShapeCache::new(&gpu, graph, ShapePolicy::Exact, 2, CompileOptions::default()).err().unwrap();
    assert!(
        err.to_string().contains("expected a dims uniform of at most 8 bytes (b, s: one u32 each), got 12 bytes"),
        "{err}"
    );
    let plain = SymbolicGraph::parse(&mean_graph(MEAN)).unwrap().instantiate(&bs(2, 3)).unwrap().to_json();
    let err = gpu.compile(ExecGraph::parse(&plain).unwrap(), CompileOptions::default()).err().unwrap();
    assert!(err.to_string().contains("only a graph with \"dims\" compiled with compileShapes"), "{err}");
    let err = gpu.compute_kernel("mean", MEAN, "main", 2, false).err().unwrap();
    assert_eq!(err.code(), "SHADER_ERROR");
    assert!(err.to_string().contains("a single kernel binds @group(0) only"), "{err}");
}
