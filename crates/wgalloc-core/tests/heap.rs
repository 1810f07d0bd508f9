//! The heap allocator on a real device (lavapipe without a GPU).

use std::collections::HashMap;
use std::time::Duration;

use wgalloc_core::heap::{DeviceBlock, HeapEventKind, PoolKind, Usage};
use wgalloc_core::{Event, Gpu, GpuOptions};

fn gpu_with_budget(budget: Option<u64>) -> Gpu {
    pollster::block_on(Gpu::request(GpuOptions { memory_budget: budget, ..Default::default() }))
        .expect("a Vulkan adapter")
}

fn fill(size: usize, seed: u64) -> Vec<u8> {
    (0..size).map(|i| ((i as u64).wrapping_mul(2654435761).wrapping_add(seed * 97) >> 7) as u8).collect()
}

#[test]
fn live_blocks_never_overlap_data_proves_it() {
    let gpu = gpu_with_budget(None);
    let heap = gpu.heap().unwrap();
    let sizes = [4u64, 100, 256, 1000, 4096, 70_000, 1 << 20, (1 << 20) + 4, 3 << 20];
    let mut blocks = Vec::new();
    for (i, &s) in sizes.iter().cycle().take(40).enumerate() {
        let b = heap.malloc(s, if i % 3 == 0 { Usage::Shared } else { Usage::Device }).unwrap();
        assert_eq!(b.offset().unwrap() % heap.alignment(), 0);
        b.write(&fill(s as usize, i as u64), 0).unwrap();
        blocks.push((b, s, i as u64));
    }
    // Free every other block, allocate more into the holes, then check every live block's data.
    let mut kept = Vec::new();
    for (j, entry) in blocks.into_iter().enumerate() {
        if j % 2 == 0 {
            entry.0.free().unwrap();
        } else {
            kept.push(entry);
        }
    }
    for (i, &s) in sizes.iter().enumerate() {
        let b = heap.malloc(s, Usage::Device).unwrap();
        b.write(&fill(s as usize, 1000 + i as u64), 0).unwrap();
        kept.push((b, s, 1000 + i as u64));
    }
    for (b, s, seed) in &kept {
        let back = pollster::block_on(b.read(0, *s)).unwrap();
        assert!(back == fill(*s as usize, *seed), "block {} (size {s}) was overwritten by a neighbour", b.id());
    }
    let stats = heap.stats();
    assert_eq!(stats.active_blocks.current, kept.len() as u64);
    drop(kept);
    let stats = heap.stats();
    assert_eq!(stats.active_blocks.current, 0, "dropped handles return their blocks");
    assert_eq!(stats.allocated_bytes.current, 0);
    heap.empty_cache();
    assert_eq!(heap.stats().reserved_bytes.current, 0);
}

#[test]
fn cached_blocks_are_reused_without_driver_calls() {
    let gpu = gpu_with_budget(None);
    let heap = gpu.heap().unwrap();
    let b = heap.malloc(1000, Usage::Device).unwrap();
    b.free().unwrap();
    let before = heap.stats().driver_allocations;
    for _ in 0..100 {
        heap.malloc(1000, Usage::Device).unwrap().free().unwrap();
    }
    let s = heap.stats();
    assert_eq!(s.driver_allocations, before);
    assert!(s.cache_hits >= 100);
    assert_eq!(s.requested_bytes.current, 0);
    assert_eq!(s.pool(PoolKind::DeviceSmall).segments.current, 1);
}

#[test]
fn long_lived_block_forgets_retired_streams_but_not_live_ones() {
    let gpu = gpu_with_budget(None);
    let heap = gpu.heap().unwrap();
    // In different segments (small and large pools): a copy within one buffer is invalid.
    let src = heap.malloc(2 << 20, Usage::Device).unwrap();
    let dst = heap.malloc(4096, Usage::Device).unwrap();
    // A live stream with unsubmitted work on `dst`, recorded first: never forgotten.
    let mut live = gpu.create_stream().unwrap();
    dst.copy_from_on(&mut live, &src, 0, 0, 4096).unwrap();
    // Then 200 short-lived streams (one per upload, as `upload_many` does), each done.
    for _ in 0..200 {
        let mut s = gpu.create_stream().unwrap();
        dst.copy_from_on(&mut s, &src, 0, 0, 4096).unwrap();
        assert!(s.submit().unwrap().wait_blocking(Duration::from_secs(30)).unwrap());
    }
    let info = heap.block_info(dst.id()).unwrap();
    assert!(info.recorded_streams <= 9, "marks of retired streams kept: {}", info.recorded_streams);
    dst.free().unwrap();
    assert_eq!(heap.stats().pending_free_blocks, 1, "the live stream's unsubmitted copy must hold the free");
    assert!(live.submit().unwrap().wait_blocking(Duration::from_secs(30)).unwrap());
    heap.free_inactive_buffers();
    assert_eq!(heap.stats().pending_free_blocks, 0);
}

#[test]
fn once_a_read_resolved_earlier_frees_are_reusable() {
    let gpu = gpu_with_budget(None);
    let heap = gpu.heap().unwrap();
    for _ in 0..20 {
        let a = heap.malloc(2 << 20, Usage::Device).unwrap();
        let b = heap.malloc(4096, Usage::Device).unwrap();
        let mut s = gpu.create_stream().unwrap();
        b.copy_from_on(&mut s, &a, 0, 0, 4096).unwrap();
        a.free().unwrap(); // pending: the copy is recorded, not yet run
        s.submit().unwrap();
        pollster::block_on(b.read(0, 4096)).unwrap();
        // The read was submitted after the copy and has resolved: the copy is done.
        heap.free_inactive_buffers();
        assert_eq!(heap.stats().pending_free_blocks, 0);
        b.free().unwrap();
    }
}

#[test]
fn copies_between_blocks_of_one_segment_work() {
    let gpu = gpu_with_budget(None);
    let heap = gpu.heap().unwrap();
    let a = heap.malloc(4096, Usage::Device).unwrap();
    let b = heap.malloc(4096, Usage::Device).unwrap();
    assert_eq!(a.info().unwrap().segment_id, b.info().unwrap().segment_id, "small blocks share a segment");
    let data = fill(4096, 3);
    a.write(&data, 0).unwrap();
    let mut s = gpu.create_stream().unwrap();
    b.copy_from_on(&mut s, &a, 0, 0, 4096).unwrap();
    // A copy within one block, between disjoint halves, takes the same path.
    a.copy_from_on(&mut s, &a, 0, 2048, 2048).unwrap();
    assert!(s.submit().unwrap().wait_blocking(Duration::from_secs(30)).unwrap());
    assert_eq!(pollster::block_on(b.read(0, 4096)).unwrap(), data);
    let a_back = pollster::block_on(a.read(0, 4096)).unwrap();
    assert_eq!(&a_back[..2048], &data[..2048]);
    assert_eq!(&a_back[2048..], &data[..2048]);
}

#[test]
fn freed_block_waits_for_recorded_stream_work() {
    let gpu = gpu_with_budget(None);
    let heap = gpu.heap().unwrap();
    let src = heap.malloc(64 << 20, Usage::Device).unwrap();
    let dst = heap.malloc(64 << 20, Usage::Device).unwrap();
    let mut stream = gpu.create_stream().unwrap();
    for _ in 0..4 {
        dst.copy_from_on(&mut stream, &src, 0, 0, 64 << 20).unwrap();
    }
    // Freed while the copies are recorded but not yet submitted: must stay pending.
    src.free().unwrap();
    assert_eq!(heap.stats().pending_free_blocks, 1);
    let event = stream.submit().unwrap();
    assert!(event.wait_blocking(Duration::from_secs(30)).unwrap());
    heap.free_inactive_buffers();
    let s = heap.stats();
    assert_eq!(s.pending_free_blocks, 0);
    assert_eq!(s.pending_free_bytes, 0);
}

#[test]
fn double_free_and_use_after_free_are_typed_and_stats_stay_exact() {
    let gpu = gpu_with_budget(None);
    let heap = gpu.heap().unwrap();
    let b = heap.malloc(512, Usage::Device).unwrap();
    b.free().unwrap();
    assert_eq!(b.free().unwrap_err().code(), "DOUBLE_FREE");
    assert_eq!(b.write(&[0; 4], 0).unwrap_err().code(), "USE_AFTER_FREE");
    assert_eq!(pollster::block_on(b.read(0, 4)).unwrap_err().code(), "USE_AFTER_FREE");
    assert_eq!(heap.malloc(0, Usage::Device).err().unwrap().code(), "INVALID_ARGUMENT");
    let s = heap.stats();
    assert_eq!(s.active_blocks.current, 0);
    assert_eq!(s.allocated_bytes.current, 0);
}

#[test]
fn high_watermark_is_a_hard_limit_with_a_useful_message() {
    let gpu = gpu_with_budget(Some(64 << 20));
    let heap = gpu.heap().unwrap();
    heap.set_high_watermark_ratio(1.0).unwrap();
    heap.set_event_recording(true, false);
    let a = heap.malloc(40 << 20, Usage::Device).unwrap();
    let err = heap.malloc(40 << 20, Usage::Device).err().unwrap();
    assert_eq!(err.code(), "OUT_OF_MEMORY");
    let msg = err.to_string();
    for needle in ["41943040", "allocated", "cached", "pending free", "budget 67108864", "largest free block"] {
        assert!(msg.contains(needle), "message lacks {needle}: {msg}");
    }
    let (events, _) = heap.take_events();
    assert!(events.iter().any(|e| e.kind == HeapEventKind::AllocationFailed));
    // Still usable, and freeing makes room.
    a.free().unwrap();
    let b = heap.malloc(40 << 20, Usage::Device).unwrap();
    assert_eq!(heap.stats().ooms, 1);
    drop(b);
}

#[test]
fn low_watermark_collects_idle_segments() {
    let gpu = gpu_with_budget(Some(64 << 20));
    let heap = gpu.heap().unwrap();
    heap.set_high_watermark_ratio(2.0).unwrap();
    heap.set_low_watermark_ratio(0.5).unwrap(); // 32 MiB
                                                // Two segments of the shared pools, then idle and cached.
    let a = heap.malloc(10 << 20, Usage::Shared).unwrap();
    let b = heap.malloc(12 << 20, Usage::Shared).unwrap();
    assert_eq!(heap.stats().segments.current, 2);
    a.free().unwrap();
    b.free().unwrap();
    // Device memory above the low watermark: garbage collection releases the cached segments.
    let d = heap.malloc(12 << 20, Usage::Device).unwrap();
    let s = heap.stats();
    assert!(s.gc_runs > 0, "gc ran above the low watermark");
    assert!(s.reserved_bytes.current <= 32 << 20, "reserved {}", s.reserved_bytes.current);
    assert!(s.driver_frees >= 1, "idle segments were released");
    d.free().unwrap();
}

#[test]
fn scalar_blocks_hold_their_value() {
    let gpu = gpu_with_budget(None);
    let heap = gpu.heap().unwrap();
    let v = 3.5f32.to_le_bytes();
    let b = heap.alloc_scalar(&v).unwrap();
    assert_eq!(b.pool(), PoolKind::Scalar);
    assert_eq!(pollster::block_on(b.read(0, 4)).unwrap(), v.to_vec());
    assert_eq!(heap.alloc_scalar(&[]).err().unwrap().code(), "INVALID_ARGUMENT");
}

#[test]
fn requests_above_the_binding_limit_get_a_dedicated_segment() {
    let gpu = gpu_with_budget(None);
    let heap = gpu.heap().unwrap();
    let max_binding = gpu.info().max_storage_buffer_binding_size;
    if max_binding >= gpu.info().max_buffer_size {
        return; // nothing to test on this device
    }
    let b = heap.malloc(max_binding + 1024, Usage::Device).unwrap();
    let info = b.info().unwrap();
    assert!(info.dedicated && info.exceeds_binding_limit);
}

#[test]
fn growth_falls_back_to_a_segment_that_fits_under_the_high_watermark() {
    // 64 MiB limit: after the arena's 20 MiB floor, each miss sizes a segment for two more 5 MiB
    // blocks and some slack; once that no longer fits, a 5 MiB request must still get a segment
    // of its own size.
    let gpu = gpu_with_budget(Some(64 << 20));
    let heap = gpu.heap().unwrap();
    heap.set_high_watermark_ratio(1.0).unwrap();
    let request = 5u64 << 20;
    let mut held = Vec::new();
    let err = loop {
        match heap.malloc(request, Usage::Device) {
            Ok(b) => held.push(b),
            Err(e) => break e,
        }
        assert!(held.len() < 64, "the limit never applied");
    };
    assert_eq!(err.code(), "OUT_OF_MEMORY");
    let s = heap.stats();
    // A failure is honest: the request plus what is reserved really exceeds the limit.
    assert!(
        s.reserved_bytes.current + request > 64 << 20,
        "reserved {} + {request} fits under 64 MiB",
        s.reserved_bytes.current
    );
    assert!(heap.snapshot().iter().any(|seg| seg.size == request), "no segment of the request's size");
    assert!(held.len() >= 11, "only {} 5 MiB blocks fit in 64 MiB", held.len());
}

/// A kernel writing `dst[i]` = `src[i]` through many steps of a 32-bit LCG: a submission that
/// runs a while (milliseconds), and the same steps on the host. A GPU does the steps a hundred
/// times faster than lavapipe on the CPU, so it gets 128 times as many.
fn slow_reader(gpu: &Gpu) -> (wgalloc_core::ComputeKernel, impl Fn(u32) -> u32) {
    let steps: u32 = if gpu.info().device_type == "Cpu" { 8192 } else { 8192 * 128 };
    let source = format!(
        "
@group(0) @binding(0) var<storage, read_write> src: array<u32>;
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {{
  if (g.x >= arrayLength(&dst)) {{ return; }}
  var x = src[g.x];
  for (var i = 0u; i < {steps}u; i++) {{ x = x * 1664525u + 1013904223u; }}
  dst[g.x] = x;
}}"
    );
    let kernel = gpu.compute_kernel("slow-lcg", &source, "main", 2, false).unwrap();
    // The steps as one affine map `x -> a x + c` (mod 2^32).
    let (mut a, mut c) = (1u32, 0u32);
    for _ in 0..steps {
        (a, c) = (a.wrapping_mul(1664525), c.wrapping_mul(1664525).wrapping_add(1013904223));
    }
    (kernel, move |x: u32| a.wrapping_mul(x).wrapping_add(c))
}

fn words(bytes: &[u8]) -> Vec<u32> {
    bytes.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect()
}

/// Words the moved-block reader reads (its first MiB).
const READ_WORDS: usize = 1 << 18;

/// The slow kernel reading a block's first MiB into a shared block: submitted before the heap
/// moves the block, it is still queued during the move. Work submitted before a move must see
/// the block at its old place, work submitted after it at the new one.
struct MovedBlockReader<F: Fn(u32) -> u32> {
    gpu: Gpu,
    kernel: wgalloc_core::ComputeKernel,
    lcg: F,
    out: DeviceBlock,
}

fn moved_block_reader(gpu: &Gpu) -> MovedBlockReader<impl Fn(u32) -> u32> {
    let (kernel, lcg) = slow_reader(gpu);
    let out = gpu.heap().unwrap().malloc(4 * READ_WORDS as u64, Usage::Shared).unwrap();
    MovedBlockReader { gpu: gpu.clone(), kernel, lcg, out }
}

impl<F: Fn(u32) -> u32> MovedBlockReader<F> {
    /// Submits a read of `block` where it is now.
    fn submit(&self, block: &DeviceBlock) -> Event {
        let mut stream = self.gpu.create_stream().unwrap();
        stream.dispatch(&self.kernel, &[block, &self.out], None, [(READ_WORDS / 64) as u32, 1, 1]).unwrap();
        stream.submit().unwrap()
    }

    /// Whether the last completed read saw `bytes` (what the block held).
    fn saw(&self, bytes: &[u8]) -> bool {
        let want: Vec<u32> = words(&bytes[..4 * READ_WORDS]).into_iter().map(&self.lcg).collect();
        words(&pollster::block_on(self.out.read(0, 4 * READ_WORDS as u64)).unwrap()) == want
    }
}

#[test]
fn a_freed_device_block_serves_the_next_malloc_while_its_reader_still_runs() {
    // The reader must still run when its memory is reused, or the test shows nothing. On a busy
    // machine one time slice can outlast it, so the scenario runs again, on a fresh device.
    let mut early = Vec::new();
    for _ in 0..5 {
        match reuse_under_a_running_reader() {
            Ok(()) => return,
            Err(ms) => early.push(ms),
        }
    }
    panic!("the reader finished before its memory was reused in every attempt (after {early:?} ms)");
}

/// A device-only block freed while the submission reading it runs serves the next malloc at
/// once; both see their own bytes. `Err(ms since the submit)` when the reader had already
/// finished by the time the memory was reused.
fn reuse_under_a_running_reader() -> Result<(), u128> {
    let gpu = gpu_with_budget(None);
    let heap = gpu.heap().unwrap();
    let n = 1usize << 18;
    let bytes = 4 * n as u64;
    let old: Vec<u8> = fill(4 * n, 1);
    let new: Vec<u8> = fill(4 * n, 2);
    let a = heap.malloc(bytes, Usage::Device).unwrap();
    let out = heap.malloc(bytes, Usage::Device).unwrap();
    // A mappable block used by the same submission: it must keep waiting for completion.
    let mapped = heap.malloc(4096, Usage::Shared).unwrap();
    a.write(&old, 0).unwrap();
    let (slow, lcg) = slow_reader(&gpu);
    let mut s1 = gpu.create_stream().unwrap();
    s1.dispatch(&slow, &[&a, &out], None, [(n / 64) as u32, 1, 1]).unwrap();
    mapped.copy_from_on(&mut s1, &a, 0, 0, 4096).unwrap();
    let reader = s1.submit().unwrap();
    let submitted = std::time::Instant::now();
    let (a_segment, a_offset) = (a.info().unwrap().segment_id, a.offset().unwrap());
    a.free().unwrap();
    mapped.free().unwrap();
    if reader.query().unwrap() {
        return Err(submitted.elapsed().as_millis());
    }
    let s = heap.stats();
    assert_eq!((s.pending_free_blocks, s.pending_free_bytes), (1, mapped.size()), "only the mappable block waits");
    // The next malloc of that size takes the same memory at once, and new data goes in.
    let b = heap.malloc(bytes, Usage::Device).unwrap();
    assert_eq!((b.info().unwrap().segment_id, b.offset().unwrap()), (a_segment, a_offset), "the freed memory, reused");
    b.write(&new, 0).unwrap();
    let copy = heap.malloc(bytes, Usage::Device).unwrap();
    let mut s2 = gpu.create_stream().unwrap();
    copy.copy_from_on(&mut s2, &b, 0, 0, bytes).unwrap();
    if reader.query().unwrap() {
        return Err(submitted.elapsed().as_millis());
    }
    // (lavapipe runs one submission at a time: this submit returns once the reader is done.)
    let second = s2.submit().unwrap();
    assert!(second.wait_blocking(Duration::from_secs(120)).unwrap());
    assert!(reader.query().unwrap(), "queue order: the first submission completed before the second");
    // Both see their own data, bit for bit: the reader the old contents, the copy the new ones.
    let want: Vec<u32> = words(&old).into_iter().map(&lcg).collect();
    assert!(words(&pollster::block_on(out.read(0, bytes)).unwrap()) == want, "the reader saw the new data");
    assert!(pollster::block_on(copy.read(0, bytes)).unwrap() == new, "the copy missed the new data");
    heap.free_inactive_buffers();
    assert_eq!(heap.stats().pending_free_blocks, 0, "the mappable block is free once the work completed");
    Ok(())
}

#[test]
fn a_free_while_leased_takes_effect_when_the_last_lease_ends() {
    let gpu = gpu_with_budget(None);
    let heap = gpu.heap().unwrap();
    let block = std::sync::Arc::new(heap.malloc(4096, Usage::Device).unwrap());
    let allocated = || heap.stats().allocated_bytes.current;
    let before = allocated();
    let (a, b) = (block.lease().unwrap(), block.lease().unwrap());
    block.free().unwrap(); // deferred: two leases
    assert_eq!(block.free().unwrap_err().code(), "DOUBLE_FREE");
    assert_eq!(block.lease().unwrap_err().code(), "USE_AFTER_FREE", "no new lease after free()");
    assert!(!block.is_freed(), "the leaseholders still use it");
    assert!(block.binding().is_ok());
    drop(a);
    assert_eq!(allocated(), before, "one lease left: still allocated");
    drop(b);
    assert!(block.is_freed());
    assert_eq!(allocated(), before - block.size(), "the last lease freed it");
    assert_eq!(block.free().unwrap_err().code(), "DOUBLE_FREE");
    // Leases without a free change nothing; a free after them is immediate.
    let other = std::sync::Arc::new(heap.malloc(4096, Usage::Device).unwrap());
    drop(other.lease().unwrap());
    other.free().unwrap();
    assert!(other.is_freed());
}

/// Leases taken and dropped on several threads while another frees: the block goes back to the
/// heap exactly once, when the free and every lease ended, and no lease starts after the free.
/// (A lease count that lost an update would leave the block allocated, or free it under a lease.)
#[test]
fn frees_and_leases_racing_on_threads_free_each_block_once() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let gpu = gpu_with_budget(None);
    let heap = gpu.heap().unwrap();
    for round in 0..20 {
        let block = std::sync::Arc::new(heap.malloc(4096, Usage::Device).unwrap());
        let before = heap.stats().allocated_bytes.current;
        let freed = AtomicBool::new(false);
        let start = std::sync::Barrier::new(5);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    start.wait();
                    for _ in 0..2_000 {
                        match block.lease() {
                            Ok(lease) => {
                                assert!(block.binding().is_ok(), "round {round}: leased, yet freed");
                                drop(lease);
                            }
                            Err(e) => {
                                assert_eq!(e.code(), "USE_AFTER_FREE");
                                assert!(freed.load(Ordering::Acquire), "round {round}: refused before the free");
                            }
                        }
                    }
                });
            }
            s.spawn(|| {
                start.wait();
                std::thread::sleep(Duration::from_micros(300));
                freed.store(true, Ordering::Release);
                block.free().unwrap();
            });
        });
        assert!(block.is_freed(), "round {round}: every lease ended, so the free took effect");
        assert_eq!(heap.stats().allocated_bytes.current, before - block.size(), "round {round}: freed once");
        assert_eq!(block.free().unwrap_err().code(), "DOUBLE_FREE");
    }
}

/// Note [Block lifetime]: blocks held by id (a JS heap object's) go back when their owner goes,
/// with their scope charges; a leased one when its last lease ends. Other owners' stay.
#[test]
fn an_owner_gives_back_every_block_it_holds_when_it_goes() {
    let gpu = gpu_with_budget(None);
    let heap = gpu.heap().unwrap();
    let allocated = || heap.stats().allocated_bytes.current;
    let scope = heap.scope("tenant", 1 << 20).unwrap();
    let (owner, other) = (heap.owner().unwrap(), heap.owner().unwrap());
    let before = allocated();
    let a = owner.malloc(4096, Usage::Device).unwrap();
    let b = owner.malloc_in(&scope, 4096, Usage::Shared).unwrap();
    let scalar = owner.alloc_scalar(&[1, 2, 3, 4]).unwrap();
    let kept = other.malloc(4096, Usage::Device).unwrap();
    assert_eq!(owner.blocks().iter().map(|&(id, _)| id).collect::<Vec<_>>(), vec![a.id, b.id, scalar]);
    assert_eq!(scope.stats().allocated, 4096);
    // A queued run leases `a` through a handle by id.
    let lease = owner.block(a.id).unwrap().lease().unwrap();
    drop(owner);
    assert_eq!(scope.stats().allocated, 0, "the charge went with its block");
    assert_eq!(allocated(), before + a.size + kept.size, "all but the leased block and the other owner's went");
    drop(lease);
    assert_eq!(allocated(), before + kept.size, "the last lease gave it back");
    other.free(kept.id).unwrap();
    assert_eq!(allocated(), before);
}

/// A handle by id ([`BlockOwner::block`]) gives nothing back, and once its block is freed every
/// operation on it is `USE_AFTER_FREE` (the slab refuses the id), also after the slot is reused.
#[test]
fn a_handle_by_id_of_a_freed_block_is_use_after_free() {
    let gpu = gpu_with_budget(None);
    let heap = gpu.heap().unwrap();
    let owner = heap.owner().unwrap();
    let a = owner.malloc(4096, Usage::Device).unwrap();
    let handle = owner.block(a.id).unwrap();
    handle.write(&[7; 16], 0).unwrap();
    assert_eq!(pollster::block_on(handle.read(0, 16)).unwrap(), vec![7; 16]);
    assert_eq!(handle.free().unwrap_err().code(), "INVALID_ARGUMENT", "its owner frees it");
    assert!(!handle.is_freed());
    assert_eq!(heap.owner().unwrap().block(a.id).unwrap_err().code(), "USE_AFTER_FREE", "another owner's id");
    owner.free(a.id).unwrap();
    // The next block may take its slot and place: the stale id still names nothing.
    let b = owner.malloc(4096, Usage::Device).unwrap();
    assert!(handle.is_freed());
    let codes = [
        handle.write(&[1; 16], 0).unwrap_err().code(),
        pollster::block_on(handle.read(0, 16)).unwrap_err().code(),
        handle.info().unwrap_err().code(),
        handle.offset().unwrap_err().code(),
        handle.binding().unwrap_err().code(),
        handle.set_shape(None).unwrap_err().code(),
        handle.lease().unwrap_err().code(),
        owner.block(a.id).unwrap_err().code(),
    ];
    assert_eq!(codes, ["USE_AFTER_FREE"; 8]);
    assert_eq!(owner.free(a.id).unwrap_err().code(), "DOUBLE_FREE");
    assert_eq!(owner.release(a.id), None);
    drop(handle);
    assert_eq!(owner.blocks(), vec![(b.id, b.size)], "dropping a handle by id frees nothing");
}

/// A handle passes its block to an owner (an executor's device outputs): the handle and its
/// clones no longer give it back, the owner does.
#[test]
fn a_handle_passes_its_block_to_an_owner() {
    let gpu = gpu_with_budget(None);
    let heap = gpu.heap().unwrap();
    let owner = heap.owner().unwrap();
    let before = heap.stats().allocated_bytes.current;
    let block = std::sync::Arc::new(heap.malloc(4096, Usage::Device).unwrap());
    let id = owner.adopt(&block).unwrap();
    assert_eq!(owner.adopt(&block).unwrap_err().code(), "INVALID_ARGUMENT", "passed already");
    assert_eq!(block.free().unwrap_err().code(), "INVALID_ARGUMENT");
    drop(block);
    assert_eq!(heap.stats().allocated_bytes.current, before + 4096, "the owner holds it");
    owner.free(id).unwrap();
    assert_eq!(heap.stats().allocated_bytes.current, before);
    let freed = heap.malloc(4096, Usage::Device).unwrap();
    freed.free().unwrap();
    assert_eq!(owner.adopt(&freed).unwrap_err().code(), "USE_AFTER_FREE");
}

#[test]
fn compaction_moves_live_blocks_with_their_bytes_in_queue_order() {
    const MIB: u64 = 1 << 20;
    let gpu = gpu_with_budget(None);
    let heap = gpu.heap().unwrap();
    heap.set_event_recording(true, false);
    // Two segments of three 4 MiB blocks (each the budget of the bytes live then): a, b, c in
    // the first, f, e, x in the second; b and f are freed.
    let blocks: Vec<_> = (0..6).map(|_| heap.malloc(4 * MIB, Usage::Device).unwrap()).collect();
    let data: Vec<Vec<u8>> = (0..6).map(|i| fill(4 * MIB as usize, 10 + i)).collect();
    for (b, d) in blocks.iter().zip(&data) {
        b.write(d, 0).unwrap();
    }
    let seg = |b: &DeviceBlock| b.info().unwrap().segment_id;
    assert!(blocks[..3].iter().all(|b| seg(b) == seg(&blocks[0])) && seg(&blocks[3]) == seg(&blocks[5]));
    assert!(seg(&blocks[0]) != seg(&blocks[5]));
    let mut blocks = blocks.into_iter();
    let mut next = || blocks.next().unwrap();
    let (a, b, c, f, e, x) = (next(), next(), next(), next(), next(), next());
    for freed in [b, f] {
        freed.free().unwrap();
    }
    // Churn in the holes: a tenth of the bytes requested then covers one 4 MiB move.
    for _ in 0..3 {
        heap.malloc(4 * MIB, Usage::Device).unwrap().free().unwrap();
    }
    let reader = moved_block_reader(&gpu);
    let queued = reader.submit(&c);
    let c_before = (seg(&c), c.offset().unwrap());

    // 8 MiB free, no 8 MiB range: the heap moves c into f's old range instead of growing.
    let before = heap.stats();
    let big = heap.malloc(8 * MIB, Usage::Device).unwrap();
    let s = heap.stats();
    assert_eq!(s.driver_allocations, before.driver_allocations, "no new segment");
    assert_eq!((s.blocks_moved, s.bytes_moved), (1, 4 * MIB));
    assert_eq!((seg(&c), c.offset().unwrap()), (seg(&e), 0), "c took f's old range");
    let at = big.offset().unwrap();
    assert!(
        seg(&big) == c_before.0 && at <= c_before.1 && c_before.1 < at + 8 * MIB,
        "the request covers c's old range"
    );
    let (events, _) = heap.take_events();
    assert!(events.iter().any(|ev| ev.kind == HeapEventKind::Moved && ev.block_id == Some(c.id())));
    // New bytes over c's old place, queued after the move.
    let new = fill(8 * MIB as usize, 99);
    big.write(&new, 0).unwrap();

    let done = gpu.current_event();
    assert!(done.wait_blocking(Duration::from_secs(120)).unwrap());
    assert!(queued.query().unwrap());
    assert!(reader.saw(&data[2]), "the reader saw c's old bytes");
    for (block, bytes) in [(&a, &data[0]), (&e, &data[4]), (&x, &data[5]), (&c, &data[2])] {
        assert!(pollster::block_on(block.read(0, 4 * MIB)).unwrap() == *bytes, "block {} changed", block.id());
    }
    assert!(pollster::block_on(big.read(0, 8 * MIB)).unwrap() == new);
    // Work recorded after the move binds c at its new place.
    assert!(reader.submit(&c).wait_blocking(Duration::from_secs(120)).unwrap());
    assert!(reader.saw(&data[2]), "a dispatch after the move");
}

#[test]
fn a_top_up_moves_small_blocks_out_and_slides_a_large_one_with_their_bytes() {
    const MIB: u64 = 1 << 20;
    let gpu = gpu_with_budget(None);
    let heap = gpu.heap().unwrap();
    // One 50 MiB segment (1.05 x 40 MiB + 8 MiB) laid out [x 2.5][a 2.5][y 6.25][b 2.5][big 24]
    // [12.25 free] (MiB); x and y are freed: 21 MiB free, no 24 MiB range.
    heap.malloc(40 * MIB, Usage::Device).unwrap().free().unwrap();
    let sizes = [10, 10, 25, 10, 96].map(|quarters| quarters * MIB / 4);
    let blocks: Vec<_> = sizes.iter().map(|&s| heap.malloc(s, Usage::Device).unwrap()).collect();
    let data: Vec<Vec<u8>> = sizes.iter().zip(30..).map(|(&s, seed)| fill(s as usize, seed)).collect();
    for (b, d) in blocks.iter().zip(&data) {
        b.write(d, 0).unwrap();
    }
    let place = |b: &DeviceBlock| (b.info().unwrap().segment_id, b.offset().unwrap());
    let merged = place(&blocks[0]).0;
    assert!(blocks.iter().all(|b| place(b).0 == merged) && heap.snapshot()[0].size == 50 * MIB);
    let mut blocks = blocks.into_iter();
    let mut next = || blocks.next().unwrap();
    let (x, a, y, b, big) = (next(), next(), next(), next(), next());
    x.free().unwrap();
    y.free().unwrap();
    let reader = moved_block_reader(&gpu);
    let queued = reader.submit(&big);

    // A second 24 MiB block: a segment for it would take the arena past its growth budget
    // (1.05 x 53 MiB live + 8 MiB); a 13.625 MiB one takes a and b, and big slides down.
    let before = heap.stats();
    let second = heap.malloc(24 * MIB, Usage::Device).unwrap();
    let s = heap.stats();
    assert_eq!(s.driver_allocations, before.driver_allocations + 1);
    assert_eq!(s.reserved_bytes.current - before.reserved_bytes.current, 13 * MIB + 10 * MIB / 16);
    assert_eq!((s.blocks_moved - before.blocks_moved, s.bytes_moved - before.bytes_moved), (3, 29 * MIB));
    let topped = place(&a).0;
    assert!(topped != merged);
    assert_eq!([place(&a), place(&b), place(&big)], [(topped, 0), (topped, 5 * MIB / 2), (merged, 0)]);
    assert_eq!(place(&second), (merged, 24 * MIB), "the request lies over big's old place");
    let new = fill(24 * MIB as usize, 99);
    second.write(&new, 0).unwrap();

    assert!(gpu.current_event().wait_blocking(Duration::from_secs(120)).unwrap());
    assert!(queued.query().unwrap());
    assert!(reader.saw(&data[4]), "the reader saw big's old bytes");
    for (block, bytes) in [(&a, &data[1]), (&b, &data[3]), (&big, &data[4])] {
        assert!(
            pollster::block_on(block.read(0, bytes.len() as u64)).unwrap() == *bytes,
            "block {} changed",
            block.id()
        );
    }
    assert!(pollster::block_on(second.read(0, 24 * MIB)).unwrap() == new);
    assert!(reader.submit(&big).wait_blocking(Duration::from_secs(120)).unwrap());
    assert!(reader.saw(&data[4]), "a dispatch after the move");
}

/// Blocks of `sizes` MiB fill one fresh segment in order and those in `freed` are freed; a
/// slow kernel reads block `mover` at its old place; then a malloc of `need` MiB finds enough
/// free bytes but no range, and the heap slides `mover` within the segment to `to` MiB, over
/// part of its old place (a kernel copies it in pieces: WebGPU cannot copy a buffer into
/// itself). The reader saw the old bytes, every block keeps its bytes, the request's bytes
/// land over the old place, and a dispatch after the move reads the new one.
fn slide_case(sizes: &[f64], freed: &[usize], mover: usize, need: f64, to: f64) {
    const MIB: f64 = (1u64 << 20) as f64;
    let bytes = |mib: f64| (mib * MIB) as u64;
    let gpu = gpu_with_budget(None);
    let heap = gpu.heap().unwrap();
    let blocks: Vec<_> = sizes.iter().map(|&s| heap.malloc(bytes(s), Usage::Device).unwrap()).collect();
    let data: Vec<Vec<u8>> = sizes.iter().zip(20..).map(|(&s, seed)| fill(bytes(s) as usize, seed)).collect();
    for (b, d) in blocks.iter().zip(&data) {
        b.write(d, 0).unwrap();
    }
    let seg = |b: &DeviceBlock| b.info().unwrap().segment_id;
    assert!(blocks.iter().all(|b| seg(b) == seg(&blocks[0])), "one segment");
    assert_eq!(heap.stats().driver_allocations, 1);
    let mut kept = Vec::new();
    for (i, b) in blocks.into_iter().enumerate() {
        if freed.contains(&i) {
            b.free().unwrap();
        } else {
            kept.push((i, b));
        }
    }
    // Traffic that returns each block to the hole it took: compaction moves at most a tenth of
    // the bytes requested (Note [Moves within a tenth]), so the heap must have served ten times
    // the mover's bytes.
    let churn = 64 << 10;
    for _ in 0..=10 * bytes(sizes[mover]) / churn {
        heap.malloc(churn, Usage::Device).unwrap().free().unwrap();
    }
    let m = &kept.iter().find(|(i, _)| *i == mover).unwrap().1;
    let reader = moved_block_reader(&gpu);
    let queued = reader.submit(m);
    let old = m.offset().unwrap();

    let before = heap.stats();
    let big = heap.malloc(bytes(need), Usage::Device).unwrap();
    let s = heap.stats();
    assert_eq!(s.driver_allocations, before.driver_allocations, "no new segment");
    assert_eq!((s.blocks_moved, s.bytes_moved), (1, bytes(sizes[mover])));
    assert_eq!((seg(m), m.offset().unwrap()), (seg(&big), bytes(to)), "slid within its segment");
    assert!(old.abs_diff(bytes(to)) < bytes(sizes[mover]), "the new place overlaps the old one");
    let at = big.offset().unwrap();
    assert!(at < old + bytes(sizes[mover]) && old < at + bytes(need), "the request covers part of the old place");
    let new = fill(bytes(need) as usize, 99);
    big.write(&new, 0).unwrap();

    assert!(gpu.current_event().wait_blocking(Duration::from_secs(120)).unwrap());
    assert!(queued.query().unwrap());
    assert!(reader.saw(&data[mover]), "the reader saw the old bytes");
    for (i, b) in &kept {
        assert!(pollster::block_on(b.read(0, bytes(sizes[*i]))).unwrap() == data[*i], "block {i} changed");
    }
    assert!(pollster::block_on(big.read(0, bytes(need))).unwrap() == new);
    assert!(reader.submit(m).wait_blocking(Duration::from_secs(120)).unwrap());
    assert!(reader.saw(&data[mover]), "a dispatch after the move");
}

#[test]
fn a_block_slides_down_within_its_segment_in_pieces() {
    // A 10.125 MiB segment: [2 free][6 MiB block][2 free][0.125 free]. A 3 MiB request: the
    // block slides down by 2 MiB (three pieces).
    slide_case(&[2.0, 6.0, 2.0], &[0, 2], 1, 3.0, 0.0);
}

#[test]
fn a_block_slides_up_within_its_segment_in_pieces() {
    // A 7.625 MiB segment: [1.5 free][3 MiB][1.5 free][1 MiB][0.625 free]. A 2 MiB request:
    // sliding the 1 MiB block up by 0.625 MiB (two pieces) moves fewer bytes than sliding the
    // 3 MiB block down.
    slide_case(&[1.5, 3.0, 1.5, 1.0, 0.625], &[0, 2, 4], 3, 2.0, 6.625);
}

/// A slide whose old and new place together pass the binding limit goes in pieces that each
/// fit one binding. Three 70 MiB blocks freed leave three idle segments; the next malloc
/// merges them into one (the growth budget of 210 MiB live, about 228 MiB). In it: an 81 MiB
/// block, then a 100 MiB block with data, then the first freed. A 110 MiB request finds 81 and
/// 47 MiB free: sliding the 100 MiB block down by 81 MiB spans 181 MiB, and even pieces of the
/// shift would span 162 MiB, above lavapipe's 128 MiB binding (real GPUs allow as much or
/// more), so it goes in three pieces of 47 MiB.
#[test]
fn a_slide_past_the_binding_limit_goes_in_pieces_that_fit_one_binding() {
    const MIB: u64 = 1 << 20;
    let gpu = gpu_with_budget(None);
    // On a device whose binding holds 162 MiB the same slide goes in pieces of the shift.
    assert!(gpu.info().max_buffer_size >= 229 * MIB, "the merged segment fits one buffer");
    let heap = gpu.heap().unwrap();
    let first: Vec<_> = (0..3).map(|_| heap.malloc(70 * MIB, Usage::Device).unwrap()).collect();
    assert!(heap.stats().segments.current >= 3, "three segments");
    for b in first {
        b.free().unwrap();
    }
    let a = heap.malloc(81 * MIB, Usage::Device).unwrap();
    let b = heap.malloc(100 * MIB, Usage::Device).unwrap();
    let seg = |x: &DeviceBlock| x.info().unwrap().segment_id;
    assert_eq!(heap.stats().segments.current, 1, "the idle segments merged into one");
    assert_eq!((seg(&a), a.offset().unwrap(), seg(&b), b.offset().unwrap()), (seg(&b), 0, seg(&a), 81 * MIB));
    let data = fill((100 * MIB) as usize, 7);
    b.write(&data, 0).unwrap();
    a.free().unwrap();

    let before = heap.stats();
    let big = heap.malloc(110 * MIB, Usage::Device).unwrap();
    let s = heap.stats();
    assert_eq!(s.driver_allocations, before.driver_allocations, "no new segment");
    assert_eq!((s.blocks_moved - before.blocks_moved, s.bytes_moved - before.bytes_moved), (1, 100 * MIB));
    assert_eq!((seg(&b), b.offset().unwrap()), (seg(&big), 0), "slid to the start of its segment");
    let new = fill((110 * MIB) as usize, 8);
    big.write(&new, 0).unwrap();
    assert!(pollster::block_on(b.read(0, 100 * MIB)).unwrap() == data, "the moved block kept its bytes");
    assert!(pollster::block_on(big.read(0, 110 * MIB)).unwrap() == new);
}

/// Random allocations of `size(next)` bytes, frees, writes and stream copies (some left
/// unsubmitted for a while) on the device, `steps` of them; then every live block must hold
/// its bytes. Returns the moves across segments and within one (slides).
fn random_traffic(seed: u64, steps: u64, size: impl Fn(&mut dyn FnMut(u64) -> u64) -> u64) -> (u64, u64) {
    let gpu = gpu_with_budget(None);
    let heap = gpu.heap().unwrap();
    heap.set_event_recording(true, false);
    let mut x = seed;
    let mut next = move |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    // (block, the bytes it must hold)
    let mut live: Vec<(DeviceBlock, Vec<u8>)> = Vec::new();
    let mut stream = gpu.create_stream().unwrap();
    // Where each block is, from the events: a move to the same segment is a slide.
    let (mut at, mut across, mut within) = (HashMap::new(), 0, 0);
    for step in 0..steps {
        match next(10) {
            0..=4 => {
                let size = size(&mut next);
                let b = heap.malloc(size, Usage::Device).unwrap();
                let bytes = fill(size as usize, step);
                b.write(&bytes, 0).unwrap();
                live.push((b, bytes));
            }
            5..=7 if !live.is_empty() => {
                let (b, _) = live.swap_remove(next(live.len() as u64) as usize);
                b.free().unwrap();
            }
            8 if live.len() >= 2 => {
                // A copy recorded now, submitted at some later step: both blocks stay put until then.
                let (i, j) = (next(live.len() as u64) as usize, next(live.len() as u64) as usize);
                if i != j {
                    let n = live[i].1.len().min(live[j].1.len()) as u64 & !3;
                    live[j].0.copy_from_on(&mut stream, &live[i].0, 0, 0, n).unwrap();
                    let src = live[i].1[..n as usize].to_vec();
                    live[j].1[..n as usize].copy_from_slice(&src);
                }
            }
            _ => {
                stream.submit().unwrap();
            }
        }
        for e in heap.take_events().0 {
            match (e.kind, e.block_id, e.segment_id) {
                (HeapEventKind::Allocated | HeapEventKind::Recycled, Some(id), Some(seg)) => {
                    at.insert(id, seg);
                }
                (HeapEventKind::Moved, Some(id), Some(seg)) => match at.insert(id, seg) {
                    Some(old) if old == seg => within += 1,
                    _ => across += 1,
                },
                _ => {}
            }
        }
    }
    stream.submit().unwrap().wait_blocking(Duration::from_secs(120)).unwrap();
    let s = heap.stats();
    assert_eq!(s.blocks_moved, across + within);
    for (b, bytes) in &live {
        let back = pollster::block_on(b.read(0, bytes.len() as u64)).unwrap();
        assert!(back == *bytes, "block {} lost its bytes ({} moves in all)", b.id(), s.blocks_moved);
    }
    (across, within)
}

/// Large blocks of 1-6 MiB: the heap moves blocks across segments many times.
#[test]
fn random_traffic_that_compacts_keeps_every_block_s_bytes() {
    const MIB: u64 = 1 << 20;
    let (across, _) = random_traffic(0x2545_F491_4F6C_DD1D, 250, |next| MIB * (1 + next(6)) + 256 * next(4));
    assert!(across > 0, "the traffic never moved a block across segments");
}

/// Blocks of 64 KiB to 6 MiB: small blocks cut the holes, so the heap also slides blocks within
/// their segment (the in-buffer kernel, in pieces where the old and new place overlap).
#[test]
fn random_traffic_that_slides_keeps_every_block_s_bytes() {
    const KIB: u64 = 1 << 10;
    let (across, within) = random_traffic(0x9E37_79B9_7F4A_7C15, 300, |next| 64 * KIB * (1 + next(96)));
    assert!(across > 0 && within > 0, "moves across segments: {across}, within one: {within}");
}
