//! Warm starts on host storage, no device needed: a profile recorded on one draw of a serving
//! mix, another draw replayed from it, beside the same draw from a cold start and the
//! pytorch-cuda policy (`cargo run --release -p wgalloc-core --example heap_warm_start --
//! RECORD=REPLAY ... | MIX ...`). `RECORD=REPLAY` names two trace files; a lone `MIX` is split
//! into its first and last halves of requests (ids `r<k>:...`), two draws of its generator.
//! Targets: warm peak reserved <= 1.05 x live + 2 MiB and no driver allocation after the warm
//! start; every pair <= 1.15 x live + 8 MiB and <= pytorch-cuda's peak reserved.

use serde_json::Value;
use wgalloc_core::replay::{simulate_heap_from, simulate_pytorch_cuda, SimulationOptions, Trace};
use wgalloc_heap::pool;

const MIB: u64 = 1 << 20;

/// The events of requests `range` of a mix (ids `r<k>:...`), with `requests` set to their count.
fn half(doc: &Value, first: bool) -> Trace {
    let requests = doc["requests"].as_u64().expect("a mix names its requests");
    let cut = requests / 2;
    let request_of = |e: &Value| -> u64 {
        let id = e["id"].as_str().expect("mix ids are strings");
        id.strip_prefix('r').and_then(|r| r.split(':').next()).and_then(|k| k.parse().ok()).expect("ids r<k>:...")
    };
    let events: Vec<Value> =
        doc["events"].as_array().expect("events").iter().filter(|e| (request_of(e) < cut) == first).cloned().collect();
    let n = if first { cut } else { requests - cut };
    Trace::from_value(&serde_json::json!({ "requests": n, "events": events })).expect("a valid half")
}

fn read(path: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"))).expect("JSON")
}

fn main() {
    let options = SimulationOptions::default();
    println!(
        "{:<40} {:>8} {:>8} {:>14} {:>14} {:>14}  target",
        "pair", "A MiB", "B MiB", "cold B (drv)", "warm B (drv)", "pytorch (drv)"
    );
    let (mut pairs, mut no_driver, mut tight, mut bytes_ok) = (0, 0, 0, 0);
    for arg in std::env::args().skip(1) {
        let (name, a, b) = match arg.split_once('=') {
            Some((x, y)) => {
                let (ta, tb) =
                    (Trace::from_value(&read(x)).expect("trace"), Trace::from_value(&read(y)).expect("trace"));
                (format!("{} -> {}", short(x), short(y)), ta, tb)
            }
            None => {
                let doc = read(&arg);
                (format!("{} halves", short(&arg)), half(&doc, true), half(&doc, false))
            }
        };
        let recorded = simulate_heap_from(&a, &options, None).expect("record");
        let cold = simulate_heap_from(&b, &options, None).expect("cold").figures;
        let warm = simulate_heap_from(&b, &options, Some(&recorded.profile)).expect("warm").figures;
        let pt = simulate_pytorch_cuda(&b, None);
        let live = warm.peak_live;
        let within_tight = warm.peak_reserved as f64 <= 1.05 * live as f64 + (2 * MIB) as f64;
        let within_bytes = warm.peak_reserved <= pool::target(live) && warm.peak_reserved <= pt.peak_reserved;
        pairs += 1;
        no_driver += (warm.driver_allocations == 0) as u32;
        tight += within_tight as u32;
        bytes_ok += within_bytes as u32;
        let mut why = Vec::new();
        if !within_tight {
            why.push(format!(
                "over 1.05x+2MiB by {:.2} MiB",
                (warm.peak_reserved as f64 - 1.05 * live as f64) / MIB as f64 - 2.0
            ));
        }
        if warm.driver_allocations > 0 {
            why.push("driver allocations".into());
        }
        if !within_bytes {
            why.push("over the bytes target".into());
        }
        println!(
            "{name:<40} {:>8.1} {:>8.1} {:>8.3} ({:>3}) {:>8.3} ({:>3}) {:>8.3} ({:>3})  {}",
            a.peak_live as f64 / MIB as f64,
            live as f64 / MIB as f64,
            cold.ratio(),
            cold.driver_allocations,
            warm.ratio(),
            warm.driver_allocations,
            pt.ratio(),
            pt.driver_allocations,
            if why.is_empty() { "ok".to_string() } else { why.join(", ") }
        );
    }
    println!(
        "{pairs} pairs: no driver allocation after the warm start {no_driver}, within 1.05x+2MiB {tight}, within the bytes target {bytes_ok}"
    );
}

fn short(path: &str) -> String {
    path.rsplit('/').next().unwrap_or(path).replace(".trace.json", "")
}
