//! Inputs and outputs that stay on the GPU: executors chained through blocks, and state
//! kept in one block across runs, bit for bit against the same runs through the host.

use std::collections::HashMap;
use std::sync::Arc;

use common::gpu;
use wgalloc_core::exec::{CompileOptions, DeviceIo, ExecGraph, Executor, RunOptions};
use wgalloc_core::{Gpu, Usage};

mod common;

const BYTES: usize = 1024;

fn f32s(v: impl IntoIterator<Item = f32>) -> Vec<u8> {
    v.into_iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A chain of `n` adds of the constant `w` (x -> y).
fn chain(gpu: &Gpu, n: usize, w: f32) -> Executor {
    let graph = ExecGraph::parse(&common::chain_graph_json(n, BYTES)).unwrap();
    let params = HashMap::from([("w".to_string(), f32s(std::iter::repeat_n(w, BYTES / 4)))]);
    gpu.compile(graph, CompileOptions { params, ..Default::default() }).unwrap()
}

fn run_host(exe: &Executor, x: &[u8]) -> Vec<u8> {
    let inputs = HashMap::from([("x".to_string(), x.to_vec())]);
    pollster::block_on(exe.run(&inputs, RunOptions::default())).unwrap().outputs.remove(0).1
}

#[test]
fn two_executors_chain_through_a_block_without_a_host_round_trip() {
    let gpu = gpu();
    let (a, b) = (chain(&gpu, 3, 0.5), chain(&gpu, 2, 1.25));
    let x = f32s((0..BYTES / 4).map(|i| i as f32 * 0.37 - 11.0));
    let through_host = run_host(&b, &run_host(&a, &x));

    for _ in 0..5 {
        let io = DeviceIo { outputs_on_device: true, ..Default::default() };
        let host_in = HashMap::from([("x".to_string(), x.clone())]);
        let out = pollster::block_on(a.run_io(&host_in, &io, RunOptions::default())).unwrap();
        assert!(out.outputs.is_empty(), "nothing is read back");
        let (name, y_a) = &out.device_outputs[0];
        assert_eq!(name, "y");
        let io = DeviceIo { inputs: HashMap::from([("x".to_string(), y_a.clone())]), ..Default::default() };
        let out = pollster::block_on(b.run_io(&HashMap::new(), &io, RunOptions::default())).unwrap();
        assert_eq!(out.outputs[0].1, through_host);
        // Freed while the chained run may still read it: the free defers, nothing breaks.
        y_a.free().unwrap();
    }
}

#[test]
fn state_kept_in_one_block_across_100_runs_matches_the_host_path() {
    let gpu = gpu();
    let step = chain(&gpu, 1, 1.0);
    let x0 = f32s((0..BYTES / 4).map(|i| i as f32 * 0.25));
    let mut host = x0.clone();
    for _ in 0..100 {
        host = run_host(&step, &host);
    }
    let state = Arc::new(gpu.heap().unwrap().malloc(BYTES as u64, Usage::Device).unwrap());
    state.write(&x0, 0).unwrap();
    for _ in 0..100 {
        let io = DeviceIo {
            inputs: HashMap::from([("x".to_string(), state.clone())]),
            outputs_into: HashMap::from([("y".to_string(), state.clone())]),
            ..Default::default()
        };
        let out = pollster::block_on(step.run_io(&HashMap::new(), &io, RunOptions::default())).unwrap();
        assert!(out.outputs.is_empty());
    }
    assert_eq!(pollster::block_on(state.read(0, BYTES as u64)).unwrap(), host);
    assert_eq!(host, f32s((0..BYTES / 4).map(|i| i as f32 * 0.25 + 100.0)));
}

#[test]
fn bad_device_io_is_refused_with_typed_errors() {
    let gpu = gpu();
    let exe = chain(&gpu, 1, 1.0);
    let heap = gpu.heap().unwrap();
    let small = Arc::new(heap.malloc(16, Usage::Device).unwrap());
    let ok = Arc::new(heap.malloc(BYTES as u64, Usage::Device).unwrap());
    let x = HashMap::from([("x".to_string(), vec![0u8; BYTES])]);
    let code = |inputs: &HashMap<String, Vec<u8>>, io: DeviceIo| {
        pollster::block_on(exe.run_io(inputs, &io, RunOptions::default())).unwrap_err().code()
    };
    let as_input = |b: &Arc<wgalloc_core::DeviceBlock>| HashMap::from([("x".to_string(), b.clone())]);
    assert_eq!(code(&HashMap::new(), DeviceIo { inputs: as_input(&small), ..Default::default() }), "INVALID_ARGUMENT");
    assert_eq!(code(&x, DeviceIo { inputs: as_input(&ok), ..Default::default() }), "INVALID_ARGUMENT", "given twice");
    let not_output = HashMap::from([("x".to_string(), ok.clone())]);
    assert_eq!(code(&x, DeviceIo { outputs_into: not_output, ..Default::default() }), "INVALID_ARGUMENT");
    let other = common::gpu();
    let foreign = Arc::new(other.heap().unwrap().malloc(BYTES as u64, Usage::Device).unwrap());
    assert_eq!(
        code(&HashMap::new(), DeviceIo { inputs: as_input(&foreign), ..Default::default() }),
        "INVALID_ARGUMENT"
    );
    ok.free().unwrap();
    assert_eq!(code(&HashMap::new(), DeviceIo { inputs: as_input(&ok), ..Default::default() }), "USE_AFTER_FREE");
    // The executor still runs after every refusal.
    assert_eq!(pollster::block_on(exe.run(&x, RunOptions::default())).unwrap().outputs[0].1.len(), BYTES);
}

#[test]
fn four_threads_share_one_copy_of_the_weights() {
    let gpu = gpu();
    let w: Vec<u8> = f32s((0..BYTES / 4).map(|i| (i % 7) as f32 * 0.5));
    let x = f32s((0..BYTES / 4).map(|i| i as f32));
    let graph = || ExecGraph::parse(&common::chain_graph_json(3, BYTES)).unwrap();
    let own = gpu
        .compile(graph(), CompileOptions { params: HashMap::from([("w".into(), w.clone())]), ..Default::default() })
        .unwrap();
    let want = run_host(&own, &x);
    let heap = gpu.heap().unwrap();
    let before = heap.stats().allocated_bytes.current;

    let weights = gpu.create_weights(HashMap::from([("w".to_string(), w.clone())])).unwrap();
    let handle = weights.share_handle();
    let device = gpu.share_handle();
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let x = x.clone();
            std::thread::spawn(move || {
                let gpu = Gpu::attach(device).unwrap();
                let weights = wgalloc_core::exec::Weights::attach(handle).unwrap();
                let exe =
                    gpu.compile(graph(), CompileOptions { weights: Some(weights), ..Default::default() }).unwrap();
                assert_eq!(exe.stats().constant_bytes, 0, "no private copy of the params");
                (run_host(&exe, &x), exe)
            })
        })
        .collect();
    let executors: Vec<Executor> = workers
        .into_iter()
        .map(|h| {
            let (out, exe) = h.join().unwrap();
            assert_eq!(out, want);
            exe
        })
        .collect();
    // One copy resident: the store's block, not one per executor (slabs aside).
    assert_eq!(weights.device_bytes(), BYTES as u64);
    let own_bytes: u64 = executors.iter().map(Executor::device_bytes).sum();
    assert_eq!(heap.stats().allocated_bytes.current - before, weights.device_bytes() + own_bytes);
    // The creator lets go first: executors keep the store, and it goes once the last one does.
    drop(weights);
    assert_eq!(run_host(&executors[0], &x), want);
    for e in &executors[1..] {
        e.release();
    }
    assert_eq!(run_host(&executors[0], &x), want, "the last user keeps the store");
    executors[0].release();
    // Released, not yet dropped: the store went with its last user's release().
    assert_eq!(heap.stats().allocated_bytes.current, before);
    assert_eq!(wgalloc_core::exec::Weights::attach(handle).unwrap_err().code(), "INVALID_ARGUMENT");
    drop(executors);
}
