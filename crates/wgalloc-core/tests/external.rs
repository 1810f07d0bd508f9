//! External tensors: blocks the caller owns (a KV cache, recurrent state), bound in place at
//! every run and never planned into the slab; checked bit for bit against the host path.

use std::collections::HashMap;
use std::sync::Arc;

use common::{gpu, ADD};
use wgalloc_core::exec::{CompileOptions, DeviceIo, EagerOptions, ExecGraph, Executor, RunOptions};
use wgalloc_core::{DeviceBlock, Gpu, Usage};

mod common;

const BYTES: usize = 1024;
const GROUPS: usize = BYTES / 4 / 64;

fn f32s(v: impl IntoIterator<Item = f32>) -> Vec<u8> {
    v.into_iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// h = x + s; s' = h + w; y = h + w. With `s` external, the step updates it in place; without,
/// `s` is an input and `s'` is a second output the host feeds back.
fn recurrent_graph(external: bool) -> ExecGraph {
    let (state, next) = if external {
        (r#"{"id":"s","size":1024,"kind":"external"}"#.to_string(), String::new())
    } else {
        (r#"{"id":"s","size":1024,"kind":"input"}"#.to_string(), r#",{"id":"s2","size":1024,"kind":"output"}"#.into())
    };
    let keep_out = if external { "s" } else { "s2" };
    ExecGraph::parse(&format!(
        r#"{{"kernels":{{"add":{{"source":{add}}}}},
            "tensors":[{{"id":"x","size":1024,"kind":"input"}},{{"id":"w","size":1024,"kind":"param"}},{state}{next},
                       {{"id":"h","size":1024}},{{"id":"y","size":1024,"kind":"output"}}],
            "ops":[{{"name":"mix","kernel":"add","inputs":["x","s"],"outputs":["h"],"dispatch":[{GROUPS}]}},
                   {{"name":"keep","kernel":"add","inputs":["h","w"],"outputs":["{keep_out}"],"dispatch":[{GROUPS}]}},
                   {{"name":"emit","kernel":"add","inputs":["h","w"],"outputs":["y"],"dispatch":[{GROUPS}]}}]}}"#,
        add = serde_json::to_string(ADD).unwrap()
    ))
    .unwrap()
}

fn compile(gpu: &Gpu, external: bool) -> Executor {
    let params = HashMap::from([("w".to_string(), f32s(std::iter::repeat_n(1.0, BYTES / 4)))]);
    gpu.compile(recurrent_graph(external), CompileOptions { params, ..Default::default() }).unwrap()
}

fn with_state(x: &[u8], state: &Arc<DeviceBlock>) -> (HashMap<String, Vec<u8>>, DeviceIo) {
    let io = DeviceIo { inputs: HashMap::from([("s".to_string(), state.clone())]), ..Default::default() };
    (HashMap::from([("x".to_string(), x.to_vec())]), io)
}

#[test]
fn state_updated_in_place_across_100_runs_equals_the_host_loop() {
    let gpu = gpu();
    let x = f32s((0..BYTES / 4).map(|i| (i as f32).sin() * 3.0));
    let s0 = f32s((0..BYTES / 4).map(|i| i as f32 * 0.125));

    let host = compile(&gpu, false);
    let (mut s, mut ys) = (s0.clone(), Vec::new());
    for _ in 0..100 {
        let inputs = HashMap::from([("x".to_string(), x.clone()), ("s".to_string(), s)]);
        let mut out = pollster::block_on(host.run(&inputs, RunOptions::default())).unwrap().outputs;
        s = out.remove(0).1; // graph order: s2, then y
        ys.push(out.remove(0).1);
    }

    let exe = compile(&gpu, true);
    let heap = gpu.heap().unwrap();
    let state = Arc::new(heap.malloc(BYTES as u64, Usage::Device).unwrap());
    state.write(&s0, 0).unwrap();
    let slab_bytes = exe.stats().slab_bytes;
    assert!(slab_bytes < 3 * BYTES as u64 + 64, "x, h and y are planned; the state is not ({slab_bytes} bytes)");
    for (k, want) in ys.iter().enumerate() {
        let (inputs, io) = with_state(&x, &state);
        let out = pollster::block_on(exe.run_io(&inputs, &io, RunOptions::default())).unwrap();
        assert_eq!(&out.outputs[0].1, want, "run {k}");
    }
    assert_eq!(pollster::block_on(state.read(0, BYTES as u64)).unwrap(), s);
    // The bind group made for the state block is kept while runs give the same block.
    let stats = exe.stats();
    assert_eq!(stats.bind_groups_created, 3, "mix and keep bind the state once; emit at compile");

    // Another block: bound afresh, and the run reads that block's contents.
    let other = Arc::new(heap.malloc(BYTES as u64, Usage::Device).unwrap());
    other.write(&s0, 0).unwrap();
    let (inputs, io) = with_state(&x, &other);
    let out = pollster::block_on(exe.run_io(&inputs, &io, RunOptions::default())).unwrap();
    assert_eq!(out.outputs[0].1, ys[0]);
    assert_eq!(exe.stats().bind_groups_created, 5);

    // The plan check proves the layout with the external bound.
    let (inputs, io) = with_state(&x, &other);
    pollster::block_on(exe.run_io(&inputs, &io, RunOptions { check_plan: true, ..Default::default() })).unwrap();
}

#[test]
fn external_tensors_refuse_what_cannot_be_bound() {
    let gpu = gpu();
    let exe = compile(&gpu, true);
    let heap = gpu.heap().unwrap();
    let x = vec![0u8; BYTES];
    let code = |inputs: HashMap<String, Vec<u8>>, io: DeviceIo| {
        pollster::block_on(exe.run_io(&inputs, &io, RunOptions::default())).unwrap_err()
    };
    let host_x = || HashMap::from([("x".to_string(), x.clone())]);
    let missing = code(host_x(), DeviceIo::default());
    assert_eq!(missing.code(), "INVALID_ARGUMENT");
    assert!(missing.to_string().contains("external tensor 's' needs a DeviceBlock"), "{missing}");
    let mut as_bytes = host_x();
    as_bytes.insert("s".into(), vec![0u8; BYTES]);
    let bytes = code(as_bytes, DeviceIo::default());
    assert!(bytes.to_string().contains("host bytes cannot be bound in place"), "{bytes}");
    let small = Arc::new(heap.malloc(BYTES as u64 / 2, Usage::Device).unwrap());
    assert_eq!(code(host_x(), with_state(&x, &small).1).code(), "INVALID_ARGUMENT");
    small.free().unwrap();
    assert_eq!(code(host_x(), with_state(&x, &small).1).code(), "USE_AFTER_FREE");
    let foreign = Arc::new(common::gpu().heap().unwrap().malloc(BYTES as u64, Usage::Device).unwrap());
    assert_eq!(code(host_x(), with_state(&x, &foreign).1).code(), "INVALID_ARGUMENT");
    // An eager run has no blocks to bind.
    let eager = pollster::block_on(gpu.run_eager(
        &recurrent_graph(true),
        &host_x(),
        &HashMap::from([("w".to_string(), vec![0u8; BYTES])]),
        EagerOptions::default(),
    ))
    .unwrap_err();
    assert!(eager.to_string().contains("compile the graph"), "{eager}");
    // An output cannot be a view of an external tensor.
    let view = ExecGraph::parse(
        r#"{"kernels":{},"tensors":[{"id":"s","size":16,"kind":"external"},{"id":"v","size":16,"viewOf":"s","kind":"output"}],
            "ops":[{"name":"view","inputs":["s"],"outputs":["v"]}]}"#,
    )
    .unwrap_err();
    assert_eq!(view.code(), "INVALID_ARGUMENT");
    // The executor still runs after every refusal.
    let ok = Arc::new(heap.malloc(BYTES as u64, Usage::Device).unwrap());
    let (inputs, io) = with_state(&x, &ok);
    assert!(pollster::block_on(exe.run_io(&inputs, &io, RunOptions::default())).is_ok());
}
