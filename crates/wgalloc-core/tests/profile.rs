//! The profiler on a real device (lavapipe has timestamps): positive per-kernel
//! GPU times, copies timed by kind, a structurally valid trace, typed errors for
//! bad control calls, and identical results with profiling on and off.

use std::collections::HashMap;
use std::time::Duration;

use common::{gpu, zero_w};
use serde_json::Value;
use wgalloc_core::exec::{CompileOptions, EagerOptions, ExecGraph, RunOptions};
use wgalloc_core::profile::{Mode, StartOptions};
use wgalloc_core::Usage;

mod common;

fn chain_graph(n: usize) -> ExecGraph {
    ExecGraph::parse(&common::chain_graph_json(n, 65536)).unwrap()
}

fn inputs() -> HashMap<String, Vec<u8>> {
    HashMap::from([("x".to_string(), (0..16384).flat_map(|i| (i as f32).to_le_bytes()).collect())])
}

/// The Trace Event structure chrome://tracing and Perfetto expect.
fn check_trace(doc: &Value) {
    let events = doc["traceEvents"].as_array().expect("traceEvents array");
    let mut last_counter_ts = f64::MIN;
    for e in events {
        for k in ["ph", "ts", "pid", "tid", "name"] {
            assert!(e.get(k).is_some(), "event lacks {k}: {e}");
        }
        let ts = e["ts"].as_f64().unwrap();
        assert!(ts >= 0.0, "{e}");
        if e["ph"] == "X" {
            assert!(e["dur"].as_f64().unwrap() >= 0.0, "{e}");
        }
        if e["ph"] == "C" {
            assert!(ts >= last_counter_ts, "counters out of order: {e}");
            last_counter_ts = ts;
        }
    }
}

#[test]
fn kernels_and_copies_get_positive_gpu_times_and_a_valid_trace() {
    let gpu = gpu();
    let p = gpu.profiler().unwrap();
    assert!(p.info().timestamps.passes, "lavapipe supports TIMESTAMP_QUERY: {}", p.info().timing);
    let mut params = HashMap::new();
    params.insert("w".to_string(), vec![0u8; 65536]);
    let exe = gpu.compile(chain_graph(4), CompileOptions { params: params.clone(), ..Default::default() }).unwrap();
    let off = pollster::block_on(exe.run(&inputs(), RunOptions::default())).unwrap();

    p.start(StartOptions { mode: Mode::parse("interval,event").unwrap(), ..Default::default() }).unwrap();
    let on = pollster::block_on(exe.run(&inputs(), RunOptions::default())).unwrap();
    let eager =
        pollster::block_on(gpu.run_eager(&chain_graph(4), &inputs(), &params, EagerOptions::default())).unwrap();
    let heap = gpu.heap().unwrap();
    let (a, b) = (heap.malloc(1 << 20, Usage::Device).unwrap(), heap.malloc(1 << 20, Usage::Device).unwrap());
    let mut s = gpu.create_stream().unwrap();
    b.copy_from_on(&mut s, &a, 0, 0, 1 << 20).unwrap();
    s.submit().unwrap();
    pollster::block_on(gpu.host().unwrap().download(&b, 0, 4096)).unwrap();
    p.mark_cpu_fallback("topk", 128).unwrap();
    assert!(p.flush_blocking(Duration::from_secs(10)));
    p.stop().unwrap();

    assert_eq!(off.outputs, on.outputs, "profiling must not change results");
    assert_eq!(on.outputs, eager.outputs);
    let st = p.stats();
    assert_eq!(st.ops.len(), 4, "{:?}", st.ops);
    for op in &st.ops {
        assert_eq!(op.pipeline, "add");
        assert_eq!(op.runs, 2, "planned + eager run of {}", op.name);
        assert_eq!(op.gpu_timed_runs, 2);
        assert!(op.gpu_total_ns > 0 && op.gpu_max_ns > 0, "{op:?}");
        assert!(op.scheduling_total_ns > 0);
    }
    let kinds: Vec<&str> = st.copies.iter().map(|c| c.kind.as_str()).collect();
    assert!(
        kinds.contains(&"device-to-device") && kinds.contains(&"download") && kinds.contains(&"upload"),
        "{kinds:?}"
    );
    let d2d = st.copies.iter().find(|c| c.kind == "device-to-device").unwrap();
    assert_eq!(d2d.bytes, 1 << 20);
    assert!(d2d.gpu_total_ns > 0 && d2d.bandwidth_gbps() > 0.0, "{d2d:?}");
    let down = st.copies.iter().find(|c| c.kind == "download").unwrap();
    assert!(down.blocking >= 1 && down.via_host >= 1, "{down:?}");
    assert_eq!(st.fallbacks[0].runs, 1);
    assert_eq!(st.pending_submissions, 0);
    assert_eq!(st.timestamps.dropped(), 0, "{:?}", st.timestamps);

    let path = std::env::temp_dir().join(format!("wgalloc-trace-{}.json", std::process::id()));
    p.export_trace(&path).unwrap();
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    std::fs::remove_file(&path).ok();
    check_trace(&doc);
    let events = doc["traceEvents"].as_array().unwrap();
    let has = |ph: &str, name: &str| {
        events.iter().any(|e| e["ph"] == ph && e["name"].as_str().is_some_and(|n| n.starts_with(name)))
    };
    assert!(
        has("X", "add0")
            && has("i", "add0")
            && has("X", "encode+submit")
            && has("C", "heap bytes")
            && has("C", "host cache bytes")
    );
    // GPU work on stream tracks, CPU encode/submit on its own.
    assert!(events.iter().any(|e| e["name"] == "add0" && e["tid"].as_u64().unwrap() >= 100));
}

#[test]
fn bad_control_calls_are_typed_errors() {
    let gpu = gpu();
    let p = gpu.profiler().unwrap();
    assert_eq!(p.stop().unwrap_err().code(), "PROFILER_STATE");
    p.start(StartOptions::default()).unwrap();
    assert_eq!(p.start(StartOptions::default()).unwrap_err().code(), "PROFILER_STATE");
    p.stop().unwrap();
    assert_eq!(p.stop_capture().unwrap_err().code(), "PROFILER_STATE");
    assert_eq!(p.export_trace(std::path::Path::new("/nonexistent-dir/x/trace.json")).unwrap_err().code(), "IO_ERROR");
    assert_eq!(p.mark_cpu_fallback("", 1).unwrap_err().code(), "INVALID_ARGUMENT");
    assert!(!p.is_active());
}

#[test]
fn capture_writes_one_trace_file() {
    let gpu = gpu();
    let p = gpu.profiler().unwrap();
    let name = std::env::temp_dir().join(format!("wgalloc-capture-{}", std::process::id()));
    p.start_capture(name.to_str().unwrap()).unwrap();
    assert_eq!(p.start_capture("again").unwrap_err().code(), "PROFILER_STATE");
    let buf = gpu.create_buffer(4096).unwrap();
    gpu.write_buffer(&buf, 0, &[1u8; 4096]).unwrap();
    assert_eq!(pollster::block_on(gpu.read_buffer(&buf, 0, 4096)).unwrap(), vec![1u8; 4096]);
    assert!(p.flush_blocking(Duration::from_secs(10)));
    let path = p.stop_capture().unwrap();
    assert_eq!(path.extension().unwrap(), "json");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    std::fs::remove_file(&path).ok();
    check_trace(&doc);
    assert!(doc["traceEvents"].as_array().unwrap().iter().any(|e| e["name"] == "copy download"));
    assert!(!p.is_active());
}

#[test]
fn stats_only_counts_ops_without_timestamps() {
    let gpu = gpu();
    let p = gpu.profiler().unwrap();
    let exe = gpu.compile(chain_graph(3), CompileOptions { params: zero_w(65536), ..Default::default() }).unwrap();
    let off = pollster::block_on(exe.run(&inputs(), RunOptions::default())).unwrap();
    p.start(StartOptions { stats_only: true, ..Default::default() }).unwrap();
    let on = pollster::block_on(exe.run(&inputs(), RunOptions::default())).unwrap();
    for _ in 0..20 {
        pollster::block_on(exe.run(&inputs(), RunOptions::default())).unwrap();
    }
    assert!(p.flush_blocking(Duration::from_secs(10)));
    assert_eq!(p.trace_events(), 0, "a stats-only session records no trace");
    p.stop().unwrap();
    assert_eq!(off.outputs, on.outputs);
    let st = p.stats();
    assert_eq!(st.ops.len(), 3);
    for op in &st.ops {
        assert_eq!(op.runs, 21);
        assert_eq!(op.gpu_timed_runs, 0, "no timestamps in stats-only mode");
    }
}
