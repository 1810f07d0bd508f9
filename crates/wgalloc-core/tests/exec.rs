//! Plan execution on a real device: planned runs equal eager runs bit for bit on
//! every model graph, and the plan is proven on the device.

use std::collections::HashMap;
use std::path::PathBuf;

use common::{gpu, zero_w};
use wgalloc_core::exec::{checksum, CompileOptions, EagerOptions, ExecGraph, RunOptions};

mod common;

fn models() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../bench/data/models");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|d| d.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|e| e == "json")).collect())
        .unwrap_or_else(|e| panic!("benchmark data {} is missing from the repository: {e}", dir.display()));
    files.sort();
    files
}

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn chain_graph(n: usize) -> String {
    common::chain_graph_json(n, 1024)
}

#[test]
fn a_planned_chain_computes_the_right_numbers_and_reuses_memory() {
    let gpu = gpu();
    let graph = ExecGraph::parse(&chain_graph(8)).unwrap();
    let x: Vec<f32> = (0..256).map(|i| i as f32).collect();
    let w = vec![0.5f32; 256];
    let mut params = HashMap::new();
    params.insert("w".to_string(), f32s(&w));
    let exe = gpu.compile(graph, CompileOptions { params, ..Default::default() }).unwrap();
    // 9 live-at-most-2 tensors of 1 KiB: the plan reuses memory.
    assert!(exe.plan().slab_size() <= 3 * 1024, "slab {}", exe.plan().slab_size());
    let inputs = HashMap::from([("x".to_string(), f32s(&x))]);
    let out = pollster::block_on(exe.run(&inputs, RunOptions::default())).unwrap();
    let y: Vec<f32> = out.outputs[0].1.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(y, x.iter().map(|v| v + 4.0).collect::<Vec<_>>());
    let stats = exe.stats();
    for _ in 0..3 {
        pollster::block_on(exe.run(&inputs, RunOptions::default())).unwrap();
    }
    let after = exe.stats();
    assert_eq!(
        (after.pipelines_created, after.bind_groups_created, after.buffers_created),
        (stats.pipelines_created, stats.bind_groups_created, stats.buffers_created)
    );
    assert_eq!(after.runs, 4);
    // The plan also holds on the device.
    pollster::block_on(exe.run(&inputs, RunOptions { check_plan: true, observe: true, ..Default::default() })).unwrap();
    assert!(exe.release());
    assert_eq!(pollster::block_on(exe.run(&inputs, RunOptions::default())).unwrap_err().code(), "USE_AFTER_FREE");
}

#[test]
fn planned_runs_equal_eager_runs_on_every_model_graph() {
    let gpu = gpu();
    let files = models();
    assert!(!files.is_empty(), "bench/data/models holds no model graph");
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let graph = checksum::from_model(&text, gpu.info().max_compute_workgroups_per_dimension).unwrap();
        let inputs = checksum::sample_inputs(&graph);
        let eager = pollster::block_on(gpu.run_eager(&graph, &inputs, &HashMap::new(), EagerOptions { observe: true }))
            .unwrap();
        let exe = gpu.compile(graph.clone(), CompileOptions::default()).unwrap();
        let planned = pollster::block_on(exe.run(&inputs, RunOptions::default())).unwrap();
        assert_eq!(planned.outputs, eager.outputs, "{}: planned outputs differ from eager", file.display());
        assert!(!planned.outputs.is_empty());
        // Observed eager lifetimes give records a planner accepts, and the same bound.
        let records = eager.observation.unwrap().to_usage_records();
        let observed = gpu.compile(
            graph,
            CompileOptions {
                records: Some(
                    records
                        .into_iter()
                        .map(|mut r| {
                            r.size = r.size.div_ceil(4) * 4;
                            r
                        })
                        .collect(),
                ),
                ..Default::default()
            },
        );
        let observed = observed.unwrap();
        assert_eq!(pollster::block_on(observed.run(&inputs, RunOptions::default())).unwrap().outputs, eager.outputs);
        exe.release();
        observed.release();
    }
}

#[test]
fn a_corrupted_plan_is_caught_on_the_device() {
    let gpu = gpu();
    let graph = ExecGraph::parse(&chain_graph(4)).unwrap();
    // Force every record to one lifetime-free offset by claiming no overlap: all at op 0..0.
    let records: Vec<_> = graph
        .placed_roots()
        .map(|i| wgalloc_plan::UsageRecord::new(graph.tensors[i].id.clone(), 1024, 0, 0))
        .map(|mut r| {
            // Lifetimes that do not overlap let the planner stack everything at offset 0.
            let k: u64 = r.id.trim_start_matches('t').parse().unwrap_or(if r.id == "x" { 0 } else { 9 });
            r.first = k * 10;
            r.last = k * 10;
            r
        })
        .collect();
    let exe = gpu
        .compile(graph, CompileOptions { records: Some(records), params: zero_w(1024), ..Default::default() })
        .unwrap();
    let inputs = HashMap::from([("x".to_string(), vec![1u8; 1024])]);
    let err = pollster::block_on(exe.run(&inputs, RunOptions { check_plan: true, ..Default::default() })).unwrap_err();
    assert_eq!(err.code(), "PLAN_INVALID", "{err}");
}

#[test]
fn bad_graphs_and_inputs_are_typed_errors_and_leave_the_device_usable() {
    let gpu = gpu();
    let broken = chain_graph(2).replace("a[g.x] + b[g.x]", "a[g.x] + undefined_thing");
    let with_w = || CompileOptions { params: zero_w(1024), ..Default::default() };
    let err = gpu.compile(ExecGraph::parse(&broken).unwrap(), with_w()).err().unwrap();
    assert_eq!(err.code(), "SHADER_ERROR");
    let m = err.to_string();
    assert!(m.contains("undefined_thing") && m.contains("at line"), "compiler message with its place: {m}");
    let exe = gpu.compile(ExecGraph::parse(&chain_graph(2)).unwrap(), with_w()).unwrap();
    let short = HashMap::from([("x".to_string(), vec![0u8; 10])]);
    assert_eq!(pollster::block_on(exe.run(&short, RunOptions::default())).unwrap_err().code(), "INVALID_ARGUMENT");
    assert_eq!(
        pollster::block_on(exe.run(&HashMap::new(), RunOptions::default())).unwrap_err().code(),
        "INVALID_ARGUMENT"
    );
    let ok = HashMap::from([("x".to_string(), vec![0u8; 1024])]);
    assert!(pollster::block_on(exe.run(&ok, RunOptions::default())).is_ok());
}

#[test]
fn checked_runs_equal_plain_runs() {
    let gpu = gpu();
    for file in models() {
        let text = std::fs::read_to_string(&file).unwrap();
        let graph = checksum::from_model(&text, gpu.info().max_compute_workgroups_per_dimension).unwrap();
        let inputs = checksum::sample_inputs(&graph);
        let exe = gpu.compile(graph, CompileOptions::default()).unwrap();
        let plain = pollster::block_on(exe.run(&inputs, RunOptions::default())).unwrap();
        let checked =
            pollster::block_on(exe.run(&inputs, RunOptions { check_plan: true, ..Default::default() })).unwrap();
        assert_eq!(plain.outputs, checked.outputs, "{}", file.display());
    }
}

/// Shared with the JS kernel tests (`__test__/kernel.test.cjs`).
const AXPY: &str = include_str!("kernels/axpy.wgsl");

#[test]
fn kernels_dispatch_on_heap_blocks_and_freed_blocks_wait_for_them() {
    use wgalloc_core::heap::Usage;
    let gpu = gpu();
    let heap = gpu.heap().unwrap();
    let n = 1000usize;
    let x: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let y0: Vec<f32> = (0..n).map(|i| 1.0 - i as f32 * 0.5).collect();
    let (bx, by) =
        (heap.malloc(4 * n as u64, Usage::Device).unwrap(), heap.malloc(4 * n as u64, Usage::Device).unwrap());
    bx.write(&f32s(&x), 0).unwrap();
    by.write(&f32s(&y0), 0).unwrap();
    let axpy = gpu.compute_kernel("axpy", AXPY, "main", 2, true).unwrap();
    let add = gpu.compute_kernel("add", common::ADD, "main", 3, false).unwrap();
    let mut s = gpu.create_stream().unwrap();
    let groups = [n.div_ceil(64) as u32, 1, 1];
    // Two dispatches in order on one stream: y = 2x + y, then y = 3x + y.
    s.dispatch(&axpy, &[&bx, &by], Some(&2f32.to_le_bytes()), groups).unwrap();
    s.dispatch(&axpy, &[&bx, &by], Some(&3f32.to_le_bytes()), groups).unwrap();
    let bz = heap.malloc(4 * n as u64, Usage::Device).unwrap();
    s.dispatch(&add, &[&bx, &by, &bz], None, groups).unwrap();
    // Freed before the submit: must stay pending (not reused) until the work ran.
    let bx_id = bx.id();
    bx.free().unwrap();
    assert_eq!(heap.block_info(bx_id).unwrap().state, wgalloc_core::heap::BlockState::PendingFree);
    // The two uniforms, too (scalar blocks freed as soon as they were recorded).
    assert_eq!(heap.stats().pending_free_blocks, 3);
    assert!(s.submit().unwrap().wait_blocking(std::time::Duration::from_secs(30)).unwrap());
    let y = pollster::block_on(by.read(0, 4 * n as u64)).unwrap();
    let z = pollster::block_on(bz.read(0, 4 * n as u64)).unwrap();
    for i in 0..n {
        let want = 5.0 * x[i] + y0[i];
        assert_eq!(f32::from_le_bytes(y[4 * i..4 * i + 4].try_into().unwrap()), want, "y[{i}]");
        assert_eq!(f32::from_le_bytes(z[4 * i..4 * i + 4].try_into().unwrap()), want + x[i], "z[{i}]");
    }
    heap.free_inactive_buffers();
    assert_eq!(heap.stats().pending_free_blocks, 0);
    // Bad input: typed errors, nothing recorded.
    let err = |r: wgalloc_core::Result<()>| r.unwrap_err().to_string();
    assert!(err(s.dispatch(&axpy, &[&by], Some(&[0; 4]), groups)).contains("expected 2 blocks"));
    assert!(err(s.dispatch(&axpy, &[&by, &bz], None, groups)).contains("takes a uniform"));
    assert!(err(s.dispatch(&add, &[&by, &bz, &bz], Some(&[0; 4]), groups)).contains("takes no uniform"));
    assert!(err(s.dispatch(&add, &[&by, &bz, &bx], None, groups)).contains("freed"));
    assert!(
        err(s.dispatch(&add, &[&by, &bz, &bz], None, [u32::MAX, 1, 1])).contains("maxComputeWorkgroupsPerDimension")
    );
    assert!(gpu.compute_kernel("bad", "fn main( {", "main", 1, false).is_err());
    assert!(gpu.compute_kernel("zero", AXPY, "main", 0, true).is_err());
    let other = common::gpu();
    let foreign = other.heap().unwrap().malloc(4 * n as u64, Usage::Device).unwrap();
    assert!(err(s.dispatch(&add, &[&by, &bz, &foreign], None, groups)).contains("another device"));
    assert!(s.submit().unwrap().wait_blocking(std::time::Duration::from_secs(30)).unwrap());
}
