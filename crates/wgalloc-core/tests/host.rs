//! The host staging cache on a real device (lavapipe without a GPU).

use std::time::Duration;

use wgalloc_core::heap::Usage;
use wgalloc_core::host::{Direction, HostConfig, UploadItem};
use wgalloc_core::{wgpu, Gpu, GpuOptions};

fn gpu() -> Gpu {
    pollster::block_on(Gpu::request(GpuOptions::default())).expect("a Vulkan adapter")
}

fn fill(size: usize, seed: u64) -> Vec<u8> {
    (0..size).map(|i| ((i as u64).wrapping_mul(2654435761).wrapping_add(seed * 97) >> 7) as u8).collect()
}

#[test]
fn round_trips_through_the_cache_at_many_sizes() {
    let gpu = gpu();
    let (heap, host) = (gpu.heap().unwrap(), gpu.host().unwrap());
    for (i, size) in [1usize, 3, 4, 5, 255, 256, 4096, 65_537, 1 << 20, (3 << 20) + 12].into_iter().enumerate() {
        let data = fill(size, i as u64);
        let dev = heap.malloc(size as u64, Usage::Device).unwrap();
        pollster::block_on(host.upload(&dev, 0, &data).unwrap().wait()).unwrap();
        let back = pollster::block_on(host.download(&dev, 0, size as u64)).unwrap();
        assert!(back == data, "size {size}");
        // And through explicit blocks and one stream.
        let up = host.alloc(size as u64, Direction::Upload).unwrap();
        assert!(up.size() >= size as u64 && up.size().is_power_of_two());
        up.write(&data, 0).unwrap();
        let down = host.alloc(size as u64, Direction::Download).unwrap();
        let mut s = gpu.create_stream().unwrap();
        up.copy_to_device_on(&mut s, &dev, 0, 0, size as u64).unwrap();
        down.copy_from_device_on(&mut s, &dev, 0, 0, size as u64).unwrap();
        s.submit().unwrap();
        pollster::block_on(down.map()).unwrap();
        assert!(down.read(0, size as u64).unwrap() == data);
        up.free().unwrap();
        down.free().unwrap();
    }
}

#[test]
fn freed_block_is_not_reused_before_its_copy_ran() {
    let gpu = gpu();
    let (heap, host) = (gpu.heap().unwrap(), gpu.host().unwrap());
    let size = 1u64 << 20;
    let n = 24;
    let targets: Vec<_> = (0..n).map(|_| heap.malloc(size, Usage::Device).unwrap()).collect();
    let mut s = gpu.create_stream().unwrap();
    for (i, t) in targets.iter().enumerate() {
        // Immediate reuse pressure: allocate, fill, copy, free, and let the next
        // iteration scribble over whatever the cache hands out.
        let b = host.alloc(size, Direction::Upload).unwrap();
        b.write(&fill(size as usize, i as u64), 0).unwrap();
        b.copy_to_device_on(&mut s, t, 0, 0, size).unwrap();
        if i % 3 == 0 {
            s.submit().unwrap();
        }
        b.free().unwrap();
        let scribble = host.alloc(size, Direction::Upload).unwrap();
        scribble.write(&vec![0xEE; size as usize], 0).unwrap();
        scribble.free().unwrap();
    }
    s.synchronize(Duration::from_secs(30)).unwrap();
    for (i, t) in targets.iter().enumerate() {
        let back = pollster::block_on(t.read(0, size)).unwrap();
        assert!(back == fill(size as usize, i as u64), "target {i} holds another block's bytes");
    }
    let st = host.stats();
    assert!(st.allocations.current >= 2, "blocks in flight forced new buffers");
}

#[test]
fn cache_hits_take_no_driver_call_and_stats_are_exact() {
    let gpu = gpu();
    let host = gpu.host().unwrap();
    let a = host.alloc(1000, Direction::Upload).unwrap();
    assert_eq!(a.size(), 1024);
    let s = host.stats();
    assert_eq!((s.allocations.current, s.allocated_bytes.current, s.num_host_alloc), (1, 1024, 1));
    assert_eq!((s.active_requests.current, s.active_bytes.current, s.requested_bytes.current), (1, 1024, 1000));
    assert_eq!(s.buckets[10].allocations.current, 1);
    a.free().unwrap();
    for _ in 0..100 {
        host.alloc(600, Direction::Upload).unwrap().free().unwrap();
    }
    let s = host.stats();
    assert_eq!(s.num_host_alloc, 1, "every later block came from the cache");
    assert_eq!(s.cache_hits, 100);
    assert_eq!((s.active_requests.current, s.active_bytes.current, s.active_requests.peak), (0, 0, 1));
    assert_eq!(s.cached_bytes(), 1024);
    assert_eq!(s.host_alloc_time.count, 1);
    // Download blocks live in their own lists.
    host.alloc(1000, Direction::Download).unwrap().free().unwrap();
    assert_eq!(host.stats().num_host_alloc, 2);
    assert_eq!(host.empty_cache(), 2048);
    let s = host.stats();
    assert_eq!((s.allocations.current, s.allocated_bytes.current, s.num_host_free), (0, 0, 2));
    host.reset_accumulated_stats();
    host.reset_peak_stats();
    let s = host.stats();
    assert_eq!((s.num_host_alloc, s.cache_hits, s.active_requests.peak, s.host_alloc_time.count), (0, 0, 0, 0));
}

#[test]
fn rounding_threshold_and_cache_cap() {
    let gpu = gpu();
    let host = gpu.host().unwrap();
    let mut c = host.config();
    c.round_threshold = 4 << 20;
    c.max_cached_bytes = 8 << 20;
    host.configure(c).unwrap();
    let big = host.alloc((5 << 20) + 1, Direction::Upload).unwrap();
    assert_eq!(big.size(), 6 << 20, "above the threshold sizes round to 2 MiB");
    let small = host.alloc(3 << 20, Direction::Upload).unwrap();
    assert_eq!(small.size(), 4 << 20);
    big.free().unwrap();
    small.free().unwrap();
    let s = host.stats();
    assert!(s.cached_bytes() <= 8 << 20, "cap holds: {}", s.cached_bytes());
    assert_eq!(s.num_host_free, 1, "the block over the cap went back to the driver");
    c.max_cached_bytes = 0;
    host.configure(c).unwrap();
    assert_eq!(host.stats().cached_bytes(), 0);
}

#[test]
fn private_pools_keep_their_blocks_apart() {
    let gpu = gpu();
    let host = gpu.host().unwrap();
    host.begin_allocate_to_pool(7).unwrap();
    let p = host.alloc(4096, Direction::Upload).unwrap();
    assert_eq!(p.pool_id(), 7);
    host.end_allocate_to_pool(7).unwrap();
    p.free().unwrap();
    // The default pool does not get the private block.
    let d = host.alloc(4096, Direction::Upload).unwrap();
    assert_eq!(d.pool_id(), 0);
    assert_eq!(host.stats().num_host_alloc, 2);
    d.free().unwrap();
    // Not freed by empty_cache while held ...
    host.empty_cache();
    assert_eq!(host.stats().allocations.current, 1);
    assert_eq!(host.private_pools(), vec![(7, 1)]);
    // ... and freed (and the pool removed) once released.
    host.release_pool(7).unwrap();
    host.empty_cache();
    assert_eq!(host.stats().allocations.current, 0);
    assert!(host.private_pools().is_empty());
    assert_eq!(host.end_allocate_to_pool(3).unwrap_err().code(), "INVALID_ARGUMENT");
    assert_eq!(host.release_pool(7).unwrap_err().code(), "INVALID_ARGUMENT");
    assert_eq!(host.begin_allocate_to_pool(0).unwrap_err().code(), "INVALID_ARGUMENT");
    host.begin_allocate_to_pool(9).unwrap();
    assert_eq!(host.begin_allocate_to_pool(9).unwrap_err().code(), "INVALID_ARGUMENT");
    host.end_allocate_to_pool(9).unwrap();
    host.release_pool(9).unwrap();
    assert_eq!(host.release_pool(9).unwrap_err().code(), "INVALID_ARGUMENT");
}

#[test]
fn background_thread_recycles_without_alloc() {
    let gpu = gpu();
    let (heap, host) = (gpu.heap().unwrap(), gpu.host().unwrap());
    host.configure(HostConfig { background_thread: true, ..host.config() }).unwrap();
    let dev = heap.malloc(4096, Usage::Device).unwrap();
    let ev = host.upload(&dev, 0, &fill(4096, 3)).unwrap();
    ev.wait_blocking(Duration::from_secs(10)).unwrap();
    // The thread maps the block again and returns it without any alloc call.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while host.config().background_thread && std::time::Instant::now() < deadline {
        let s = host.raw_stats();
        if s.pending_blocks == 0 && s.active_requests.current == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let s = host.raw_stats();
    assert_eq!((s.pending_blocks, s.active_requests.current), (0, 0));
    assert_eq!(pollster::block_on(dev.read(0, 4096)).unwrap(), fill(4096, 3));
    host.configure(HostConfig { background_thread: false, ..host.config() }).unwrap();
}

#[test]
fn bad_input_gets_typed_errors_and_stats_stay_exact() {
    let gpu = gpu();
    let other = self::gpu();
    let (heap, host) = (gpu.heap().unwrap(), gpu.host().unwrap());
    assert_eq!(host.alloc(0, Direction::Upload).unwrap_err().code(), "INVALID_ARGUMENT");
    assert_eq!(host.alloc(1 << 60, Direction::Upload).unwrap_err().code(), "INVALID_ARGUMENT");
    let b = host.alloc(100, Direction::Upload).unwrap();
    assert_eq!(b.write(&[1; 101], 0).unwrap_err().code(), "INVALID_ARGUMENT");
    assert_eq!(b.write(&[1; 4], u64::MAX).unwrap_err().code(), "INVALID_ARGUMENT");
    let dev = heap.malloc(256, Usage::Device).unwrap();
    let foreign = other.heap().unwrap().malloc(256, Usage::Device).unwrap();
    let mut s = gpu.create_stream().unwrap();
    assert_eq!(b.copy_to_device_on(&mut s, &foreign, 0, 0, 4).unwrap_err().code(), "INVALID_ARGUMENT");
    assert_eq!(b.copy_to_device_on(&mut s, &dev, 2, 0, 4).unwrap_err().code(), "INVALID_ARGUMENT");
    assert_eq!(b.copy_to_device_on(&mut s, &dev, 0, 2, 4).unwrap_err().code(), "INVALID_ARGUMENT");
    assert_eq!(b.copy_to_device_on(&mut s, &dev, 0, 0, 104).unwrap_err().code(), "INVALID_ARGUMENT");
    assert_eq!(b.copy_to_device_on(&mut s, &dev, 0, 252, 8).unwrap_err().code(), "INVALID_ARGUMENT");
    assert_eq!(b.copy_from_device_on(&mut s, &dev, 0, 0, 4).unwrap_err().code(), "INVALID_ARGUMENT");
    assert!(b.is_mapped(), "failed copies leave the block mapped");
    b.free().unwrap();
    assert_eq!(b.free().unwrap_err().code(), "DOUBLE_FREE");
    assert_eq!(b.write(&[1], 0).unwrap_err().code(), "USE_AFTER_FREE");
    assert_eq!(b.lend().unwrap_err().code(), "USE_AFTER_FREE");
    let d = host.alloc(64, Direction::Download).unwrap();
    assert_eq!(d.read(0, 4).unwrap_err().code(), "INVALID_ARGUMENT", "not mapped yet");
    d.copy_from_device_on(&mut s, &dev, 0, 0, 64).unwrap();
    assert_eq!(pollster::block_on(d.map()).unwrap_err().code(), "INVALID_ARGUMENT", "stream not submitted");
    s.submit().unwrap();
    pollster::block_on(d.map()).unwrap();
    d.free().unwrap();
    let st = host.stats();
    assert_eq!((st.active_requests.current, st.active_bytes.current, st.requested_bytes.current), (0, 0, 0));
    assert_eq!(st.allocations.current, 2);
}

/// Stats once every freed block is back in the cache (its remap callback may trail the event).
fn settled(host: &wgalloc_core::Host) -> wgalloc_core::HostStats {
    let t0 = std::time::Instant::now();
    loop {
        let st = host.stats();
        if st.pending_blocks == 0 || t0.elapsed() > Duration::from_secs(10) {
            return st;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn upload_many_packs_items_into_few_blocks_and_submits_once() {
    let gpu = gpu();
    let (heap, host) = (gpu.heap().unwrap(), gpu.host().unwrap());
    // Pieces as large as the whole batch: everything packs into one block and one submission.
    host.configure(HostConfig { pipeline_bytes: 32 << 20, ..host.config() }).unwrap();
    // Odd lengths end at their block's end (the padding rule).
    let sizes = [1usize, 3, 4, 5, 100, 4096, 65_537, 1 << 20, (17 << 20) + 2, 6];
    let targets: Vec<_> = sizes.iter().map(|&n| heap.malloc(n as u64 + 8, Usage::Device).unwrap()).collect();
    let data: Vec<_> = sizes.iter().enumerate().map(|(i, &n)| fill(n, i as u64 + 7)).collect();
    // Each item lands at offset 8 and ends at its target's end.
    let items: Vec<_> = targets.iter().zip(&data).map(|(t, d)| UploadItem { dst: t, offset: 8, data: d }).collect();
    let before = gpu.current_event().seq();
    let event = host.upload_many(&items).unwrap();
    assert_eq!(event.seq(), before + 1, "one submission for the whole batch");
    pollster::block_on(event.wait()).unwrap();
    for (i, (t, d)) in targets.iter().zip(&data).enumerate() {
        let back = pollster::block_on(t.read(8, d.len() as u64)).unwrap();
        assert!(&back == d, "item {i} (size {})", d.len());
    }
    let st = settled(&host);
    assert_eq!(st.num_host_alloc, 1, "items packed back to back");
    assert_eq!((st.active_requests.current, st.pending_blocks), (0, 0), "every block is back in the cache");
    // Steady state: the same batch again takes no driver call.
    for _ in 0..3 {
        pollster::block_on(host.upload_many(&items).unwrap().wait()).unwrap();
        settled(&host);
    }
    let st = host.stats();
    assert_eq!(st.num_host_alloc, 1);
}

#[test]
fn large_uploads_go_in_pipelined_pieces() {
    let gpu = gpu();
    let (heap, host) = (gpu.heap().unwrap(), gpu.host().unwrap());
    let piece = 64u64 << 10;
    host.configure(HostConfig { pipeline_bytes: piece, ..host.config() }).unwrap();
    // 10 full pieces and an odd tail that ends at the target's end; then a packed pair.
    let big = fill(10 * piece as usize + 6, 3);
    let target = heap.malloc(big.len() as u64 + 4, Usage::Device).unwrap();
    let small = [fill(1000, 4), fill(2000, 5)];
    let pair = heap.malloc(3000, Usage::Device).unwrap();
    let items = [
        UploadItem { dst: &target, offset: 4, data: &big },
        UploadItem { dst: &pair, offset: 0, data: &small[0] },
        UploadItem { dst: &pair, offset: 1000, data: &small[1] },
    ];
    let before = gpu.current_event().seq();
    let event = host.upload_many(&items).unwrap();
    // 10 full pieces, then the tail and the pair share the last piece.
    assert_eq!(event.seq(), before + 11, "one submission per piece");
    pollster::block_on(event.wait()).unwrap();
    assert!(pollster::block_on(target.read(4, big.len() as u64)).unwrap() == big);
    assert!(pollster::block_on(pair.read(0, 3000)).unwrap() == [&small[0][..], &small[1][..]].concat());
    let st = settled(&host);
    let largest = st.buckets.iter().rposition(|b| b.allocations.peak > 0).unwrap();
    assert_eq!(1u64 << largest, piece, "no staging block is larger than a piece");
    // `upload` takes the same path; a wrong setting is refused and changes nothing.
    pollster::block_on(host.upload(&target, 4, &big).unwrap().wait()).unwrap();
    assert!(pollster::block_on(target.read(4, big.len() as u64)).unwrap() == big);
    for bad in [0, 4, 6, (64 << 10) - 4, (64 << 10) + 2, (1 << 30) + 4] {
        let err = host.configure(HostConfig { pipeline_bytes: bad, ..host.config() }).unwrap_err();
        assert_eq!(err.code(), "INVALID_ARGUMENT", "pipeline_bytes {bad}");
    }
    assert_eq!(host.config().pipeline_bytes, piece);
}

#[test]
fn large_downloads_go_in_pipelined_pieces() {
    let gpu = gpu();
    let (heap, host) = (gpu.heap().unwrap(), gpu.host().unwrap());
    let piece = 64u64 << 10;
    host.configure(HostConfig { pipeline_bytes: piece, ..host.config() }).unwrap();
    // An odd length that ends at the block's end, read from offset 4: 16 pieces and a tail.
    let data = fill(16 * piece as usize + 10, 9);
    let src = heap.malloc(data.len() as u64, Usage::Device).unwrap();
    src.write(&data, 0).unwrap();
    let before = settled(&host).num_host_alloc;
    let back = pollster::block_on(host.download(&src, 4, data.len() as u64 - 4)).unwrap();
    assert!(back == data[4..], "the pieces come back in order, byte for byte");
    let st = settled(&host);
    let created = st.num_host_alloc - before;
    // At most DOWNLOAD_DEPTH full pieces in flight, plus the 6-byte tail's block of a smaller class.
    assert!(
        (2..=wgalloc_core::host::DOWNLOAD_DEPTH as u64 + 1).contains(&created),
        "{created} staging blocks for 17 pieces"
    );
    let largest = st.buckets.iter().rposition(|b| b.allocations.peak > 0).unwrap();
    assert_eq!(1u64 << largest, piece, "no staging block is larger than a piece");
    assert_eq!((st.active_requests.current, st.pending_blocks), (0, 0));
    // A bad range is refused before any piece is copied.
    for (offset, len) in [(0, data.len() as u64 + 4), (2, 8), (0, 0)] {
        let err = pollster::block_on(host.download(&src, offset, len)).unwrap_err();
        assert_eq!(err.code(), "INVALID_ARGUMENT", "offset {offset} len {len}");
    }
    assert_eq!(host.stats().num_host_alloc, st.num_host_alloc, "no block taken for a bad range");
}

#[test]
fn upload_many_does_not_reuse_a_block_before_its_copies_ran() {
    let gpu = gpu();
    let (heap, host) = (gpu.heap().unwrap(), gpu.host().unwrap());
    let chunk = 64u64 << 10;
    let n = 64;
    let targets: Vec<_> = (0..4).map(|_| heap.malloc(chunk * n, Usage::Device).unwrap()).collect();
    let mut s = gpu.create_stream().unwrap();
    for (k, t) in targets.iter().enumerate() {
        let data: Vec<_> = (0..n).map(|i| fill(chunk as usize, k as u64 * 1000 + i)).collect();
        let items: Vec<_> =
            data.iter().enumerate().map(|(i, d)| UploadItem { dst: t, offset: i as u64 * chunk, data: d }).collect();
        host.upload_many_on(&mut s, &items).unwrap();
        if k % 2 == 1 {
            s.submit().unwrap();
        }
        // Whatever the cache hands out next gets scribbled on.
        let scribble = host.alloc(chunk * n, Direction::Upload).unwrap();
        scribble.write(&vec![0xEE; (chunk * n) as usize], 0).unwrap();
        scribble.free().unwrap();
    }
    s.synchronize(Duration::from_secs(60)).unwrap();
    for (k, t) in targets.iter().enumerate() {
        let back = pollster::block_on(t.read(0, chunk * n)).unwrap();
        let want: Vec<u8> = (0..n).flat_map(|i| fill(chunk as usize, k as u64 * 1000 + i)).collect();
        assert!(back == want, "target {k} holds another block's bytes");
    }
}

#[test]
fn upload_many_checks_every_item_before_recording() {
    let gpu = gpu();
    let other = self::gpu();
    let (heap, host) = (gpu.heap().unwrap(), gpu.host().unwrap());
    let dev = heap.malloc(256, Usage::Device).unwrap();
    let foreign = other.heap().unwrap().malloc(256, Usage::Device).unwrap();
    let ok = [7u8; 16];
    let mut s = gpu.create_stream().unwrap();
    let bad: [&[UploadItem]; 5] = [
        &[],
        &[UploadItem { dst: &dev, offset: 0, data: &ok }, UploadItem { dst: &foreign, offset: 0, data: &ok }],
        &[UploadItem { dst: &dev, offset: 0, data: &ok }, UploadItem { dst: &dev, offset: 2, data: &ok }],
        &[UploadItem { dst: &dev, offset: 0, data: &ok }, UploadItem { dst: &dev, offset: 248, data: &ok }],
        &[UploadItem { dst: &dev, offset: 0, data: &ok }, UploadItem { dst: &dev, offset: 0, data: &[] }],
    ];
    for (i, items) in bad.iter().enumerate() {
        assert_eq!(host.upload_many_on(&mut s, items).unwrap_err().code(), "INVALID_ARGUMENT", "case {i}");
        assert_eq!(s.pending_commands(), 0, "case {i}: nothing recorded");
    }
    let st = host.stats();
    assert_eq!((st.num_host_alloc, st.active_requests.current), (0, 0), "no block taken for a bad batch");
}

/// A mapped buffer made with wgpu directly: its mapping is readable until wgpu frees the
/// buffers of a destroyed device (at the first poll after `device.destroy()`).
fn probe(gpu: &Gpu) -> wgpu::Buffer {
    gpu.device().create_buffer(&wgpu::BufferDescriptor {
        label: Some("probe"),
        size: 256,
        usage: wgpu::BufferUsages::MAP_WRITE | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: true,
    })
}

/// Polls, then tells whether the probe's memory is still there.
fn still_mapped(gpu: &Gpu, probe: &wgpu::Buffer) -> bool {
    let _ = gpu.device().poll(wgpu::PollType::wait_indefinitely());
    probe.get_mapped_range(..).is_ok()
}

/// Whether the probe's memory goes within a few seconds. A destroyed device's buffers go at the
/// driver's maintenance after its last work completes, which the device's poller thread may be
/// the one to run: a single poll here can return before that.
fn unmapped_soon(gpu: &Gpu, probe: &wgpu::Buffer) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while still_mapped(gpu, probe) {
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    true
}

#[test]
fn a_destroyed_device_keeps_lent_mapped_memory_until_the_last_lease_ends() {
    let gpu = gpu();
    let (heap, host) = (gpu.heap().unwrap(), gpu.host().unwrap());
    let size = 1 << 20;
    let data = fill(size, 11);
    let up = host.alloc(size as u64, Direction::Upload).unwrap();
    up.write(&data, 0).unwrap();
    let lent = up.lend().unwrap();
    let probe = probe(&gpu);
    assert_eq!(gpu.mapping_leases(), 1);
    // GPU work in flight, so the device is polled after the destroy: that poll is where wgpu
    // frees the buffers of a destroyed device.
    let (a, b) = (heap.malloc(16 << 20, Usage::Device).unwrap(), heap.malloc(16 << 20, Usage::Device).unwrap());
    let mut s = gpu.create_stream().unwrap();
    for _ in 0..8 {
        b.copy_from_on(&mut s, &a, 0, 0, 16 << 20).unwrap();
        a.copy_from_on(&mut s, &b, 0, 0, 16 << 20).unwrap();
    }
    s.submit().unwrap();
    gpu.destroy();
    assert_eq!(up.lend().unwrap_err().code(), "DEVICE_LOST", "no new lease once destroyed");
    assert_eq!(up.write(&data, 0).unwrap_err().code(), "DEVICE_LOST");
    assert_eq!(gpu.create_buffer(16).err().unwrap().code(), "DEVICE_LOST", "lost to every call at once");
    assert!(still_mapped(&gpu, &probe), "the driver's device waits for the lease");
    // SAFETY: the lease keeps the mapping in place; this is what a JS view reads.
    let bytes = unsafe { std::slice::from_raw_parts(lent.ptr.as_ptr(), lent.len) };
    assert!(bytes == data);
    drop(lent);
    assert_eq!(gpu.mapping_leases(), 0);
    assert!(unmapped_soon(&gpu, &probe), "the last lease destroyed the driver's device");
}

#[test]
fn a_device_destroyed_without_leases_goes_at_once() {
    let gpu = gpu();
    let up = gpu.host().unwrap().alloc(4096, Direction::Upload).unwrap();
    let probe = probe(&gpu);
    drop(up.lend().unwrap());
    assert!(still_mapped(&gpu, &probe));
    gpu.destroy();
    assert!(unmapped_soon(&gpu, &probe));
    assert_eq!(gpu.mapping_leases(), 0);
}
