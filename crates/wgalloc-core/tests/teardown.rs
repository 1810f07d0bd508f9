//! Closing a device whose GPU is still busy. A test binary of its own: the process ends right
//! after, so the GPU work it leaves behind does not slow other tests.

use std::time::{Duration, Instant};

use wgalloc_core::{Gpu, GpuOptions};

/// The teardown waits at most 2 s for GPU work (the queue's drop); the poller waits for the same
/// work, so a second wait of its own would make a busy process take 4 s or more to exit.
#[test]
fn dropping_a_busy_device_waits_one_bound_not_two() {
    let gpu = pollster::block_on(Gpu::request(GpuOptions::default()))
        .expect("a Vulkan adapter (install mesa-vulkan-drivers)");
    // 1,000 copies of 128 MiB: tens of seconds on lavapipe; on a fast GPU it may end before the
    // drop, and the bound then holds trivially.
    let size = 128 << 20;
    let a = gpu.create_buffer(size).unwrap();
    let b = gpu.create_buffer(size).unwrap();
    let mut stream = gpu.create_stream().unwrap();
    for _ in 0..1000 {
        stream.copy_buffer(&a, 0, &b, 0, size).unwrap();
    }
    let event = stream.submit().unwrap();
    drop((stream, a, b));
    let busy = !event.query().unwrap();
    let start = Instant::now();
    drop(gpu);
    let took = start.elapsed();
    eprintln!("dropped in {took:?} with the GPU {}", if busy { "busy" } else { "idle" });
    assert!(took < Duration::from_millis(3_500), "dropping a busy device took {took:?}");
}
