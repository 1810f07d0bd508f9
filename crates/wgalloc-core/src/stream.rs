//! Streams and events. A `Stream` is an ordered lane of encoded work: commands are
//! recorded into its open encoder and reach the GPU on `submit()`, which returns an
//! `Event` for that submission. wgpu has one queue per device, so streams order
//! their own work and the queue orders submissions across streams.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::completion::Tracker;
use crate::context::Gpu;
use crate::error::{Error, Result};
use crate::profile::{Batch, CopyInfo, Profiler, ProfilerCore, What, Writes};
use crate::scope::guarded;
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

/// What allocators need to know about a stream to defer a free correctly:
/// work recorded but not yet submitted may still touch a freed block.
#[derive(Debug, Default)]
pub struct StreamMarks {
    submits: AtomicU64,
    last_seq: AtomicU64,
    has_pending: AtomicBool,
    dropped: AtomicBool,
    /// Buffers destroyed while this stream's unsubmitted work names them: destroyed once that
    /// work is submitted (or dropped with the stream), so it is not refused as a whole.
    deferred: Mutex<Vec<Arc<DeferredDestroy>>>,
}

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

impl StreamMarks {
    /// Whether nothing this stream recorded can still touch memory: it was dropped
    /// (so it records nothing more) with no unsubmitted work, and its last submission
    /// completed. A block may then forget it.
    pub(crate) fn retired(&self, completed: u64) -> bool {
        self.dropped.load(Ordering::Acquire)
            && !self.has_pending.load(Ordering::Acquire)
            && self.last_seq.load(Ordering::Acquire) <= completed
    }

    /// Whether work recorded on the stream may still be submitted (it may name any block the
    /// stream was recorded on, at the place it had then). A dropped stream's never is.
    pub(crate) fn has_unsubmitted(&self) -> bool {
        self.has_pending.load(Ordering::Acquire) && !self.dropped.load(Ordering::Acquire)
    }

    /// Work was recorded and is not submitted yet.
    pub(crate) fn recorded(&self) {
        self.has_pending.store(true, Ordering::Release);
    }

    /// Everything recorded so far went out in submission `seq`. Written in the reverse of the
    /// order [`StreamUse::capture`] reads them.
    pub(crate) fn submitted(&self, seq: u64) {
        self.last_seq.store(seq, Ordering::Release);
        self.has_pending.store(false, Ordering::Release);
        self.submits.fetch_add(1, Ordering::AcqRel);
    }

    /// The stream is gone: work it left unsubmitted never runs.
    pub(crate) fn dropped(&self) {
        self.dropped.store(true, Ordering::Release);
        self.destroy_deferred();
    }

    /// `d`'s buffer waits for this stream's unsubmitted work.
    pub(crate) fn defer_destroy(&self, d: Arc<DeferredDestroy>) {
        lock(&self.deferred).push(d);
    }

    /// The work is out (or gone): buffers that waited only for it are destroyed.
    pub(crate) fn destroy_deferred(&self) {
        for d in std::mem::take(&mut *lock(&self.deferred)) {
            if d.waiting.fetch_sub(1, Ordering::AcqRel) == 1 {
                d.gpu.destroy_buffer(d.buffer.clone());
            }
        }
    }
}

/// A stream's position when a block it used was freed.
#[derive(Debug, Clone)]
pub struct StreamUse {
    marks: Arc<StreamMarks>,
    /// Submission that covers the block's use, if already known.
    seq: u64,
    /// `submits` at free time, when the use was still unsubmitted.
    waiting_for_submit: Option<u64>,
}

impl StreamUse {
    pub(crate) fn capture(marks: &Arc<StreamMarks>) -> Self {
        // Read in the reverse of the order `submit` writes them, so a concurrent
        // submit is either seen whole or waited for, never missed.
        let submits = marks.submits.load(Ordering::Acquire);
        let pending = marks.has_pending.load(Ordering::Acquire);
        StreamUse {
            marks: marks.clone(),
            seq: marks.last_seq.load(Ordering::Acquire),
            waiting_for_submit: pending.then_some(submits),
        }
    }

    /// The submission sequence this use resolves to, once it is known: `None`
    /// while the stream has not yet submitted the work recorded before the free.
    /// Work of a stream dropped unsubmitted never runs, so it resolves to 0.
    pub(crate) fn resolved_seq(&self) -> Option<u64> {
        match self.waiting_for_submit {
            None => Some(self.seq),
            Some(_) if self.marks.dropped.load(Ordering::Acquire) => Some(0),
            Some(at) if self.marks.submits.load(Ordering::Acquire) > at => {
                Some(self.marks.last_seq.load(Ordering::Acquire))
            }
            Some(_) => None,
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
            Some(guarded(&device, "creating a scratch buffer for a copy within one buffer", || {
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
        if let (Some(b), Some(p)) = (batch, self.gpu.shared.profiler.get()) {
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
        self.marks.destroy_deferred();
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
