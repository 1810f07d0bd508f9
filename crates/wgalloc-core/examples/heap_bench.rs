//! Heap speed in Rust (`cargo run --release -p wgalloc-core --example heap_bench [-- --json]`):
//! cached malloc + free round trips vs create_buffer + destroy of the same sizes.

use std::time::Instant;

use wgalloc_core::heap::Usage;
use wgalloc_core::{Gpu, GpuOptions};

const SIZES: [u64; 4] = [256, 4096, 65536, 1 << 20];

/// Cached malloc + free of the bench sizes, `n` times (a separate function so
/// `valgrind --tool=callgrind --toggle-collect=*round_trips*` can count just this).
#[inline(never)]
fn round_trips(heap: &wgalloc_core::heap::Heap, n: u64) {
    for i in 0..n {
        heap.malloc(SIZES[(i & 3) as usize], Usage::Device).unwrap().free().unwrap();
    }
}

fn main() {
    let json = std::env::args().any(|a| a == "--json");
    let gpu = pollster::block_on(Gpu::request(GpuOptions::default())).expect("a GPU adapter");
    let heap = gpu.heap().unwrap();
    for &s in &SIZES {
        heap.malloc(s, Usage::Device).unwrap().free().unwrap();
    }
    // Best of 10 batches: this runs on shared 2-core VMs where a batch can lose a slice.
    let n: u64 = std::env::var("HEAP_BENCH_N").ok().and_then(|v| v.parse().ok()).unwrap_or(200_000);
    let mut cached_ns = f64::MAX;
    for _ in 0..10 {
        let t0 = Instant::now();
        round_trips(&heap, n);
        cached_ns = cached_ns.min(t0.elapsed().as_nanos() as f64 / n as f64);
    }
    let m = 2_000u64;
    let t0 = Instant::now();
    for i in 0..m {
        gpu.create_buffer(SIZES[(i & 3) as usize]).unwrap().destroy();
    }
    let driver_ns = t0.elapsed().as_nanos() as f64 / m as f64;
    // The figures mean little without the device they came from.
    let info = gpu.info();
    let device = format!("{} ({}, {} {})", info.adapter_name, info.backend, info.driver, info.driver_info);
    if json {
        println!(
            "{{\"cachedNs\":{cached_ns:.1},\"driverNs\":{driver_ns:.1},\"speedup\":{:.1},\"device\":{}}}",
            driver_ns / cached_ns,
            serde_json::Value::from(device)
        );
    } else {
        println!(
            "{device}: cached malloc+free: {cached_ns:.1} ns; create_buffer+destroy: {driver_ns:.1} ns; speed-up {:.1}x",
            driver_ns / cached_ns
        );
    }
}
