//! Runs on a real wgpu device (lavapipe on machines without a GPU).

use std::time::Duration;

use wgalloc_core::{Gpu, GpuOptions};

fn gpu() -> Gpu {
    pollster::block_on(Gpu::request(GpuOptions::default())).expect("a Vulkan adapter (install mesa-vulkan-drivers)")
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

#[test]
fn device_reports_limits_and_budget() {
    let gpu = gpu();
    let info = gpu.info();
    assert!(!info.adapter_name.is_empty());
    assert!(info.max_buffer_size >= 1 << 28, "max buffer {}", info.max_buffer_size);
    assert!(info.min_storage_buffer_offset_alignment.is_power_of_two());
    assert!(gpu.memory_budget().bytes > 0);
}

#[test]
fn write_copy_read_roundtrip_sizes() {
    let gpu = gpu();
    for &size in &[4u64, 8, 12, 1000, 4096, 65_536, 1 << 20, 16 << 20] {
        let data = pattern(size as usize, size as u8);
        let a = gpu.create_buffer(size).unwrap();
        let b = gpu.create_buffer(size).unwrap();
        gpu.write_buffer(&a, 0, &data).unwrap();
        let mut s = gpu.create_stream().unwrap();
        s.copy_buffer(&a, 0, &b, 0, size).unwrap();
        s.submit().unwrap();
        let back = pollster::block_on(gpu.read_buffer(&b, 0, size)).unwrap();
        assert!(back == data, "size {size} round trip differs");
    }
}

#[test]
fn unaligned_lengths_follow_the_documented_rule() {
    let gpu = gpu();
    let buf = gpu.create_buffer(7).unwrap();
    assert_eq!(buf.padded_size(), 8);
    // A 7-byte write that ends at the buffer end is padded privately.
    gpu.write_buffer(&buf, 0, &[1, 2, 3, 4, 5, 6, 7]).unwrap();
    // A 3-byte write inside the buffer would clobber a neighbour byte: refused.
    assert_eq!(gpu.write_buffer(&buf, 0, &[9, 9, 9]).unwrap_err().code(), "INVALID_ARGUMENT");
    assert_eq!(gpu.write_buffer(&buf, 2, &[9, 9]).unwrap_err().code(), "INVALID_ARGUMENT");
    // Reads accept any range.
    assert_eq!(pollster::block_on(gpu.read_buffer(&buf, 1, 5)).unwrap(), vec![2, 3, 4, 5, 6]);
}

#[test]
fn events_complete_in_submission_order() {
    let gpu = gpu();
    let a = gpu.create_buffer(8 << 20).unwrap();
    let b = gpu.create_buffer(8 << 20).unwrap();
    let mut s = gpu.create_stream().unwrap();
    let mut events = Vec::new();
    for _ in 0..8 {
        s.copy_buffer(&a, 0, &b, 0, 8 << 20).unwrap();
        events.push(s.submit().unwrap());
    }
    assert!(events.windows(2).all(|w| w[0].seq() < w[1].seq()));
    assert!(events.last().unwrap().wait_blocking(Duration::from_secs(30)).unwrap());
    for e in &events {
        assert!(e.query().unwrap(), "an earlier event must be complete once a later one is");
    }
}

#[test]
fn destroyed_device_fails_with_device_lost() {
    let gpu = gpu();
    let buf = gpu.create_buffer(16).unwrap();
    gpu.destroy();
    assert_eq!(gpu.create_buffer(16).err().unwrap().code(), "DEVICE_LOST");
    assert_eq!(gpu.write_buffer(&buf, 0, &[0; 16]).unwrap_err().code(), "DEVICE_LOST");
    assert_eq!(pollster::block_on(gpu.read_buffer(&buf, 0, 16)).unwrap_err().code(), "DEVICE_LOST");
}

#[test]
fn oversized_buffer_is_a_typed_error() {
    let gpu = gpu();
    let too_big = gpu.info().max_buffer_size + 1;
    assert_eq!(gpu.create_buffer(too_big).err().unwrap().code(), "INVALID_ARGUMENT");
    assert_eq!(gpu.create_buffer(0).err().unwrap().code(), "INVALID_ARGUMENT");
}

#[test]
fn a_buffer_destroyed_while_a_stream_holds_unsubmitted_work_on_it_waits_for_that_work() {
    let gpu = gpu();
    let (src, kept, gone) =
        (gpu.create_buffer(16).unwrap(), gpu.create_buffer(16).unwrap(), gpu.create_buffer(16).unwrap());
    gpu.write_buffer(&src, 0, &[7; 16]).unwrap();
    let mut s = gpu.create_stream().unwrap();
    s.copy_buffer(&src, 0, &kept, 0, 16).unwrap();
    s.copy_buffer(&src, 0, &gone, 0, 16).unwrap();
    assert!(gone.destroy());
    assert!(!gone.destroy(), "once");
    assert_eq!(s.copy_buffer(&src, 0, &gone, 0, 16).unwrap_err().code(), "USE_AFTER_FREE");
    // wgpu refused the whole submission when a buffer it names was destroyed first.
    pollster::block_on(s.submit().unwrap().wait()).unwrap();
    assert_eq!(pollster::block_on(gpu.read_buffer(&kept, 0, 16)).unwrap(), vec![7; 16]);
    // A stream dropped with the work unsubmitted lets the buffer go too.
    let other = gpu.create_buffer(16).unwrap();
    let mut t = gpu.create_stream().unwrap();
    t.copy_buffer(&src, 0, &other, 0, 16).unwrap();
    other.destroy();
    drop(t);
    let mut u = gpu.create_stream().unwrap();
    u.copy_buffer(&src, 0, &kept, 0, 16).unwrap();
    pollster::block_on(u.submit().unwrap().wait()).unwrap();
}
