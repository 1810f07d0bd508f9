//! Staging benchmarks (`cargo run --release -p wgalloc-core --example host_bench [-- --json]`):
//! upload 256 MiB in chunks through (a) `Queue::write_buffer`, (b) `wgpu::util::StagingBelt`
//! (one submission per chunk), (e) the same belt batched like (d) (one submission per 4 MiB),
//! (c) a fresh mapped buffer per chunk, (d) the host cache through `Host::upload_many`, which
//! packs chunks into (or splits them into) 4 MiB pieces and submits each as it is written;
//! downloads through (c), (d) and the pipelined `Host::download` helper (h) with
//! per-readback latency; and cached `alloc`+`free` without GPU work. Every upload is
//! verified by reading the target back and comparing it with the source. Each figure is the
//! median of `--reps N` (default 5) timed passes, the methods interleaved.

use std::time::{Duration, Instant};

use wgalloc_core::heap::Usage;
use wgalloc_core::host::{Direction, UploadItem};
use wgalloc_core::{DeviceBlock, Gpu, GpuOptions};

const TOTAL: u64 = 256 << 20;
const CHUNKS: [u64; 3] = [64 << 10, 1 << 20, 16 << 20];
/// Bytes of chunks per `upload_many` call in (d); the cache itself stages and submits them
/// in pieces of its `pipeline_bytes` (4 MiB by default).
const CALL_BYTES: u64 = 16 << 20;
/// Bytes per submission of the batched belt (e): the cache's default piece.
const BATCH: u64 = wgalloc_core::host::config::DEFAULT_PIPELINE_BYTES;

fn source() -> Vec<u8> {
    (0..TOTAL as usize).map(|i| (i.wrapping_mul(2654435761) >> 9) as u8).collect()
}

fn sync(gpu: &Gpu) {
    let mut s = gpu.create_stream().unwrap();
    s.encoder().unwrap();
    s.synchronize(Duration::from_secs(120)).unwrap();
}

/// Zeroes the target (untimed), so each pass's verification checks that pass's bytes.
fn clear(gpu: &Gpu, dst: &DeviceBlock) {
    let at = dst.binding().unwrap();
    let (buf, base) = (&*at.buffer, at.offset);
    let mut s = gpu.create_stream().unwrap();
    s.encoder().unwrap().clear_buffer(buf, base, Some(TOTAL));
    s.synchronize(Duration::from_secs(120)).unwrap();
}

fn verify(dst: &DeviceBlock, src: &[u8], what: &str) {
    let back = pollster::block_on(dst.read(0, TOTAL)).unwrap();
    assert!(back == src, "{what}: the device holds different bytes");
}

/// StagingBelts live across passes, as the host cache does: a belt made per pass would
/// pay for its staging chunks in every timed pass.
struct Belts {
    per_chunk: wgpu::util::StagingBelt,
    batched: wgpu::util::StagingBelt,
}

fn upload(gpu: &Gpu, dst: &DeviceBlock, src: &[u8], chunk: u64, method: char, belts: &mut Belts) -> f64 {
    let at = dst.binding().unwrap();
    let (buf, base) = (&*at.buffer, at.offset);
    let (device, queue) = (gpu.device(), gpu.queue());
    let host = gpu.host().unwrap();
    let mut batch = Vec::new();
    let mut batch_enc: Option<wgpu::CommandEncoder> = None;
    let mut batched_bytes = 0u64;
    let t0 = Instant::now();
    for off in (0..TOTAL).step_by(chunk as usize) {
        let part = &src[off as usize..(off + chunk) as usize];
        match method {
            'a' => queue.write_buffer(buf, base + off, part),
            'b' => {
                let belt = &mut belts.per_chunk;
                let mut enc = device.create_command_encoder(&Default::default());
                belt.write_buffer(&mut enc, buf, base + off, wgpu::BufferSize::new(chunk).unwrap())
                    .copy_from_slice(part);
                belt.finish();
                queue.submit([enc.finish()]);
                belt.recall();
            }
            'e' => {
                // The belt batched like the host cache: one submission per 2 MiB of chunks.
                let belt = &mut belts.batched;
                let enc = batch_enc.get_or_insert_with(|| device.create_command_encoder(&Default::default()));
                belt.write_buffer(enc, buf, base + off, wgpu::BufferSize::new(chunk).unwrap()).copy_from_slice(part);
                batched_bytes += chunk;
                if batched_bytes >= BATCH || off + chunk == TOTAL {
                    belt.finish();
                    queue.submit([batch_enc.take().expect("encoder of this batch").finish()]);
                    belt.recall();
                    batched_bytes = 0;
                }
            }
            'c' => {
                let staging = device.create_buffer(&wgpu::BufferDescriptor {
                    label: None,
                    size: chunk,
                    usage: wgpu::BufferUsages::MAP_WRITE | wgpu::BufferUsages::COPY_SRC,
                    mapped_at_creation: true,
                });
                staging.get_mapped_range_mut(..).unwrap().copy_from_slice(part);
                staging.unmap();
                let mut enc = device.create_command_encoder(&Default::default());
                enc.copy_buffer_to_buffer(&staging, 0, buf, base + off, chunk);
                queue.submit([enc.finish()]);
                staging.destroy();
            }
            _ => {
                // 16 MiB of chunks (or one larger chunk) per call; `upload_many` submits
                // them in pipelined pieces.
                batch.push(UploadItem { dst, offset: off, data: part });
                if batch.len() as u64 * chunk >= CALL_BYTES || off + chunk == TOTAL {
                    host.upload_many(&batch).unwrap();
                    batch.clear();
                }
            }
        }
    }
    sync(gpu);
    t0.elapsed().as_secs_f64()
}

/// One readback per chunk through (c) a fresh buffer, (d) a cached block read in place, or
/// (h) the `Host::download` helper, which pipelines chunks above `pipeline_bytes` and returns a `Vec`.
fn download(gpu: &Gpu, src: &DeviceBlock, chunk: u64, method: char) -> (f64, Vec<f64>) {
    let at = src.binding().unwrap();
    let (buf, base) = (&*at.buffer, at.offset);
    let device = gpu.device();
    let host = gpu.host().unwrap();
    let mut lat = Vec::new();
    let mut sum = 0u64;
    let t0 = Instant::now();
    for off in (0..TOTAL).step_by(chunk as usize) {
        let t = Instant::now();
        if method == 'h' {
            let bytes = pollster::block_on(host.download(src, off, chunk)).unwrap();
            sum += bytes.iter().map(|&x| x as u64).sum::<u64>();
        } else if method == 'd' {
            let b = host.alloc(chunk, Direction::Download).unwrap();
            let mut s = gpu.create_stream().unwrap();
            b.copy_from_device_on(&mut s, src, off, 0, chunk).unwrap();
            s.submit().unwrap();
            pollster::block_on(b.map()).unwrap();
            let lent = b.lend().unwrap();
            // SAFETY: mapped for `len` bytes (and leased) until the lease drops, before `free`.
            sum += unsafe { std::slice::from_raw_parts(lent.ptr.as_ptr(), lent.len) }
                .iter()
                .map(|&x| x as u64)
                .sum::<u64>();
            drop(lent);
            b.free().unwrap();
        } else {
            let staging = device.create_buffer(&wgpu::BufferDescriptor {
                label: None,
                size: chunk,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            let mut s = gpu.create_stream().unwrap();
            s.encoder().unwrap().copy_buffer_to_buffer(buf, base + off, &staging, 0, chunk);
            s.submit().unwrap();
            pollster::block_on(gpu.map_read(&staging)).unwrap();
            sum += staging.get_mapped_range(..).unwrap().iter().map(|&x| x as u64).sum::<u64>();
            staging.unmap();
            staging.destroy();
        }
        lat.push(t.elapsed().as_secs_f64() * 1e3);
    }
    std::hint::black_box(sum);
    let total = t0.elapsed().as_secs_f64();
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (total, lat)
}

fn pct(v: &[f64], p: f64) -> f64 {
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let json = std::env::args().any(|a| a == "--json");
    // `--reps N`: timed passes per method and chunk size (the median is reported).
    let args: Vec<String> = std::env::args().collect();
    let reps = args
        .iter()
        .position(|a| a == "--reps")
        .and_then(|i| args.get(i + 1))
        .map_or(5, |n| n.parse().expect("--reps N"));
    let gpu = pollster::block_on(Gpu::request(GpuOptions::default())).expect("a GPU adapter");
    let heap = gpu.heap().unwrap();
    let host = gpu.host().unwrap();
    let src = source();
    let dst = heap.malloc(TOTAL, Usage::Device).unwrap();
    let mib = (TOTAL >> 20) as f64;
    // `--methods de` / `--chunk BYTES`: a subset, for profiling one path.
    let methods: Vec<char> = args
        .iter()
        .position(|a| a == "--methods")
        .and_then(|i| args.get(i + 1))
        .map_or("abcde".into(), |m| m.clone())
        .chars()
        .collect();
    let chunks: Vec<u64> = args
        .iter()
        .position(|a| a == "--chunk")
        .and_then(|i| args.get(i + 1))
        .map_or(CHUNKS.to_vec(), |c| vec![c.parse().expect("--chunk BYTES")]);
    let mut rows = Vec::new();
    for chunk in chunks {
        // Timed passes interleave the methods, so load from elsewhere on the machine hits all
        // of them alike; each reports its median pass.
        let mut times = vec![Vec::new(); methods.len()];
        let belt_size = chunk.max(16 << 20);
        let mut belts = Belts {
            per_chunk: wgpu::util::StagingBelt::new(gpu.device().clone(), belt_size),
            batched: wgpu::util::StagingBelt::new(gpu.device().clone(), belt_size),
        };
        for &m in methods.iter() {
            // One warm-up pass fills the cache (and the belts); the timed passes are steady state.
            upload(&gpu, &dst, &src, chunk, m, &mut belts);
        }
        host.reset_accumulated_stats();
        for _ in 0..reps {
            for (i, &m) in methods.iter().enumerate() {
                clear(&gpu, &dst);
                times[i].push(upload(&gpu, &dst, &src, chunk, m, &mut belts));
                verify(&dst, &src, &format!("upload {m} chunk {chunk}"));
            }
        }
        for (i, &m) in methods.iter().enumerate() {
            let secs = median(&mut times[i]);
            let creations = if m == 'd' { host.stats().num_host_alloc } else { 0 };
            rows.push(format!(
                "{{\"kind\":\"upload\",\"method\":\"{m}\",\"chunk\":{chunk},\"ms\":{:.1},\"mibPerS\":{:.0},\"driverCreations\":{creations}}}",
                secs * 1e3,
                mib / secs
            ));
        }
        for method in ['c', 'd', 'h'] {
            download(&gpu, &dst, chunk, method);
            let mut runs: Vec<_> = (0..reps).map(|_| download(&gpu, &dst, chunk, method)).collect();
            runs.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap());
            let (secs, lat) = runs.swap_remove(runs.len() / 2);
            rows.push(format!(
                "{{\"kind\":\"download\",\"method\":\"{}\",\"chunk\":{chunk},\"ms\":{:.1},\"mibPerS\":{:.0},\"p50Ms\":{:.3},\"p99Ms\":{:.3}}}",
                method,
                secs * 1e3,
                mib / secs,
                pct(&lat, 0.5),
                pct(&lat, 0.99)
            ));
        }
    }
    // Best of 7 batches: the figure is the path's cost, not the machine's other load.
    let n = 200_000;
    for _ in 0..1000 {
        host.alloc(4096, Direction::Upload).unwrap().free().unwrap();
    }
    let ns = (0..7)
        .map(|_| {
            let t0 = Instant::now();
            for _ in 0..n {
                host.alloc(4096, Direction::Upload).unwrap().free().unwrap();
            }
            t0.elapsed().as_nanos() as f64 / n as f64
        })
        .fold(f64::MAX, f64::min);
    rows.push(format!("{{\"kind\":\"alloc-free\",\"nsPerPair\":{ns:.1}}}"));
    if json {
        println!("[{}]", rows.join(","));
    } else {
        for r in rows {
            println!("{r}");
        }
    }
}
