//! Timestamp query sets from a pool. A chunk is a query set plus the buffers its
//! results are resolved into and read back from; a stream takes chunks while it
//! records profiled work and returns them once the submission's results were read.

use std::sync::Mutex;

use crate::signal::lock;

/// Timestamp queries per chunk.
pub(crate) const QUERIES: u32 = 256;
/// Free chunks kept for reuse; more are dropped.
const KEEP: usize = 32;
/// Chunks a single submission may take before further work goes untimed.
pub(crate) const MAX_CHUNKS_PER_SUBMIT: usize = 64;

pub(crate) struct Chunk {
    pub set: wgpu::QuerySet,
    pub resolve: wgpu::Buffer,
    pub readback: wgpu::Buffer,
    /// Queries handed out since the chunk was taken.
    pub used: u32,
}

impl Chunk {
    fn new(device: &wgpu::Device) -> Chunk {
        let bytes = u64::from(QUERIES) * wgpu::QUERY_SIZE as u64;
        let set = device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("wgalloc profiler"),
            ty: wgpu::QueryType::Timestamp,
            count: QUERIES,
        });
        let buffer = |usage, label| {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: bytes,
                usage,
                mapped_at_creation: false,
            })
        };
        Chunk {
            set,
            resolve: buffer(
                wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
                "wgalloc profiler resolve",
            ),
            readback: buffer(wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST, "wgalloc profiler readback"),
            used: 0,
        }
    }

    /// Resolves the used queries and copies them to the read-back buffer.
    pub fn encode_resolve(&self, encoder: &mut wgpu::CommandEncoder) {
        let n = self.used;
        encoder.resolve_query_set(&self.set, 0..n, &self.resolve, 0);
        encoder.copy_buffer_to_buffer(&self.resolve, 0, &self.readback, 0, u64::from(n) * wgpu::QUERY_SIZE as u64);
    }
}

#[derive(Default)]
pub(crate) struct QueryPool {
    free: Mutex<Vec<Chunk>>,
    created: std::sync::atomic::AtomicU64,
}

impl QueryPool {
    pub fn take(&self, device: &wgpu::Device) -> Chunk {
        if let Some(mut c) = lock(&self.free).pop() {
            c.used = 0;
            return c;
        }
        self.created.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Chunk::new(device)
    }

    pub fn put(&self, chunk: Chunk) {
        let mut free = lock(&self.free);
        if free.len() < KEEP {
            free.push(chunk);
        }
    }

    /// Query sets created so far (the pool's reuse shows as a small number here).
    pub fn created(&self) -> u64 {
        self.created.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// Where a timed entry's two timestamps live: chunk index within the batch, and the
/// begin and end query indices within the chunk (consecutive dispatches share one: an
/// op's end is the next op's begin).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pair {
    pub chunk: usize,
    begin: u32,
    end: u32,
}

impl Pair {
    pub fn begin(self) -> u32 {
        self.begin
    }
    pub fn end(self) -> u32 {
        self.end
    }
}

impl Pair {
    /// The pair of queries `q` and `q + 1` of batch chunk `chunk`.
    pub fn at(chunk: usize, q: u32) -> Pair {
        Pair { chunk, begin: q, end: q + 1 }
    }
}

impl Chunk {
    /// Takes `n` queries in a row if the chunk has room; returns the first one's index.
    pub fn take(&mut self, n: u32) -> Option<u32> {
        (self.used + n <= QUERIES).then(|| {
            self.used += n;
            self.used - n
        })
    }
}
