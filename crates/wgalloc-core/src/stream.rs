//! Streams and events. A `Stream` is an ordered lane of encoded work: commands are
//! recorded into its open encoder and reach the GPU on `submit()`, which returns an
//! `Event` for that submission. wgpu has one queue per device, so streams order
//! their own work and the queue orders submissions across streams.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::completion::Tracker;
use crate::context::Gpu;
use crate::error::{Error, Result};
use crate::profile::{Batch, CopyInfo, Profiler, ProfilerCore, What, Writes};
use crate::scope::{guarded, guarded_alloc};
use crate::signal::lock;

/// The completion of one submission. `query()` never blocks; `wait()` resolves
/// once the GPU finished that submission (and everything submitted before it).
#[derive(Clone)]
pub struct Event {
    seq: u64,
    tracker: Arc<Tracker>,
}

impl Event {
    /// Submission sequence number: events of one device are totally ordered by it.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// True once the submission completed; `DEVICE_LOST` if the device died first.
    pub fn query(&self) -> Result<bool> {
        self.tracker.is_complete(self.seq)
    }

    pub async fn wait(&self) -> Result<()> {
        self.tracker.waiter(self.seq).wait().await
    }

    /// Blocks the calling thread; `Ok(false)` on timeout.
    pub fn wait_blocking(&self, timeout: Duration) -> Result<bool> {
        match self.tracker.waiter(self.seq).wait_timeout(timeout) {
            Some(r) => r.map(|_| true),
            None => Ok(false),
        }
    }
}

impl Gpu {
    /// Enqueues command buffers for submission and returns the event that completes with them
    /// (Note [One submission thread] in `lane.rs`): it fails with the error if wgpu refuses them.
    pub(crate) fn submit(&self, commands: Vec<wgpu::CommandBuffer>) -> Result<Event> {
        self.check_alive()?;
        let shared = &self.shared;
        let seq = {
            let _order = lock(&shared.submit_lock);
            let seq = shared.tracker.reserve_seq();
            self.enqueue(move |lane| lane.submit(seq, commands));
            seq
        };
        Ok(Event { seq, tracker: shared.tracker.clone() })
    }

    /// An event for everything submitted so far.
    pub fn current_event(&self) -> Event {
        Event { seq: self.shared.tracker.submitted(), tracker: self.shared.tracker.clone() }
    }

    pub fn create_stream(&self) -> Result<Stream> {
        self.check_alive()?;
        let id = NEXT_STREAM.fetch_add(1, Ordering::Relaxed);
        Ok(Stream {
            gpu: self.clone(),
            encoder: None,
            pending_commands: 0,
            last: None,
            marks: Arc::default(),
            id,
            profile: None,
        })
    }
}

// A stream's marks are the heap policy's bookkeeping (what a free waits for); the host cache
// and deferred destroys read them too.
pub use wgalloc_heap::{StreamMarks, StreamUse};

/// A buffer whose destruction waits for `waiting` streams to submit (or drop) their work.
pub(crate) struct DeferredDestroy {
    pub gpu: Gpu,
    pub buffer: wgpu::Buffer,
    pub waiting: AtomicU64,
}

impl std::fmt::Debug for DeferredDestroy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeferredDestroy").field("waiting", &self.waiting).finish_non_exhaustive()
    }
}

impl DeferredDestroy {
    /// One stream it waited for submitted (or dropped) its work: the last one destroys it.
    pub(crate) fn stream_done(&self) {
        if self.waiting.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.gpu.destroy_buffer(self.buffer.clone());
        }
    }
}

/// Stream ids (process-wide) name the stream's track in profiler traces.
static NEXT_STREAM: AtomicU64 = AtomicU64::new(0);

/// An ordered lane of GPU work. Not shared between threads: wrap it if you must.
pub struct Stream {
    gpu: Gpu,
    encoder: Option<wgpu::CommandEncoder>,
    pending_commands: u32,
    last: Option<Event>,
    marks: Arc<StreamMarks>,
    id: u64,
    /// Profiled work recorded since the last submit (only while the profiler is on).
    profile: Option<Batch>,
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.marks.dropped();
    }
}

impl Stream {
    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    /// The open encoder, created on first use.
    pub fn encoder(&mut self) -> Result<&mut wgpu::CommandEncoder> {
        self.gpu.check_alive()?;
        if self.encoder.is_none() {
            let device = &self.gpu.shared.device;
            self.encoder =
                Some(device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("wgalloc stream") }));
        }
        self.pending_commands += 1;
        self.marks.recorded();
        Ok(self.encoder.as_mut().expect("encoder was just created"))
    }

    /// Process-wide id of this stream (its track in profiler traces).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The open encoder and, while the profiler is on, the profiler and this
    /// submission's batch (so the caller can add timestamp writes).
    pub(crate) fn parts(&mut self) -> Result<(&mut wgpu::CommandEncoder, Option<(&ProfilerCore, &mut Batch)>)> {
        self.encoder()?;
        let encoder = self.encoder.as_mut().expect("encoder was just created");
        let prof = match self.gpu.profiling() {
            Some(p) => Some((&**p, &mut *self.profile.get_or_insert_with(|| p.new_batch()))),
            None => None,
        };
        Ok((encoder, prof))
    }

    /// Records a buffer copy, timed with encoder timestamps while the profiler is on.
    pub(crate) fn encode_copy(
        &mut self,
        src: &wgpu::Buffer,
        src_offset: u64,
        dst: &wgpu::Buffer,
        dst_offset: u64,
        size: u64,
        info: CopyInfo,
    ) -> Result<()> {
        let start = std::time::Instant::now();
        // wgpu refuses any copy within one buffer, even between disjoint ranges, and heap
        // blocks of one segment share a buffer: hop through a scratch buffer (kept alive
        // by the command buffer until the copy ran).
        let scratch = if std::ptr::eq(src, dst) {
            let device = self.gpu().device().clone();
            Some(guarded_alloc(&device, "creating a scratch buffer for a copy within one buffer", size, || {
                device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("wgalloc copy scratch"),
                    size,
                    usage: wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                })
            })?)
        } else {
            None
        };
        let copy = |encoder: &mut wgpu::CommandEncoder| match &scratch {
            Some(tmp) => {
                encoder.copy_buffer_to_buffer(src, src_offset, tmp, 0, size);
                encoder.copy_buffer_to_buffer(tmp, 0, dst, dst_offset, size);
            }
            None => encoder.copy_buffer_to_buffer(src, src_offset, dst, dst_offset, size),
        };
        match self.parts()? {
            (encoder, None) => copy(encoder),
            (encoder, Some((p, batch))) => {
                let pair = p.reserve(batch, Writes::Encoder);
                if let Some(pair) = pair {
                    encoder.write_timestamp(batch.query_set(pair), pair.begin());
                }
                copy(encoder);
                if let Some(pair) = pair {
                    encoder.write_timestamp(batch.query_set(pair), pair.end());
                }
                batch.record(What::Copy(info), pair, start);
            }
        }
        Ok(())
    }

    /// Commands recorded since the last submit.
    pub fn pending_commands(&self) -> u32 {
        self.pending_commands
    }

    /// Submits recorded work. With nothing recorded, returns the last event
    /// (or one for all prior device work), so `submit()` is always safe to await.
    pub fn submit(&mut self) -> Result<Event> {
        let Some(encoder) = self.encoder.take() else {
            self.gpu.check_alive()?;
            return Ok(self.last.clone().unwrap_or_else(|| self.gpu.current_event()));
        };
        self.pending_commands = 0;
        let mut encoder = encoder;
        let batch = self.profile.take();
        if let Some(b) = &batch {
            b.encode_resolve(&mut encoder);
        }
        let commands = guarded(&self.gpu.shared.device, "finishing the stream's commands", || encoder.finish());
        // Whatever happens, the recorded work is gone from this stream now.
        let event = commands.and_then(|c| self.gpu.submit(vec![c]));
        if let (Some(b), Some(p)) = (batch, self.gpu.shared.services.get::<ProfilerCore>()) {
            p.submitted(&self.gpu, b, event.as_ref().ok().map(Event::seq), self.id);
            if let Ok(e) = &event {
                if Profiler::wait_until_completed(p) {
                    // waitUntilCompleted: serialise CPU and GPU so timings are not overlapped.
                    let _ = e.wait_blocking(Duration::from_secs(60));
                }
            }
        }
        let seq = event.as_ref().map_or_else(|_| self.gpu.shared.tracker.submitted(), |e| e.seq());
        self.marks.submitted(seq);
        self.marks.run_deferred();
        let event = event?;
        self.last = Some(event.clone());
        Ok(event)
    }

    /// Shared marks the allocators read to defer frees of blocks this stream used.
    pub fn marks(&self) -> &Arc<StreamMarks> {
        &self.marks
    }

    /// The event of the last submit, if any.
    pub fn last_event(&self) -> Option<Event> {
        self.last.clone()
    }

    /// Submits pending work and blocks until it completed.
    pub fn synchronize(&mut self, timeout: Duration) -> Result<()> {
        let event = self.submit()?;
        if event.wait_blocking(timeout)? {
            Ok(())
        } else {
            Err(Error::Internal(format!("stream did not complete within {timeout:?}")))
        }
    }
}
