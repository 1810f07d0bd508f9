//! The submission lane: one thread per device that makes every queue-ordered wgpu call.
//!
//! Note [One submission thread]: some drivers wait inside `vkQueueSubmit` until the GPU
//! finished the submission before (lavapipe does), and wgpu holds device locks while it does; a
//! `queue.submit` made on the JS thread while a long job runs would hold the event loop for the
//! rest of the job. So no call
//! that returns to JS submits, writes through the queue, maps or destroys a buffer itself: it
//! enqueues a [`Job`] on the device's lane and returns, and the lane's thread runs the jobs
//! one at a time, in the order they were enqueued. The invariants:
//!
//! - Order. WebGPU has one queue: a `write_buffer` before a submit is seen by it, a map
//!   requested after a submit waits for it, a buffer destroyed after a submit outlives it.
//!   Every such call goes through the lane, whose FIFO is that order. (A call made directly on
//!   the calling thread could overtake a job still waiting in the lane.)
//! - Sequence numbers. `Gpu::submit` reserves the submission's number and enqueues it under
//!   the submit lock, so numbers follow lane order, and the lane registers each submission's
//!   completion callback right after the submit: callbacks fire in number order. The
//!   [`crate::Event`] is valid at once; the heap records use by its number before the submit
//!   ran, which is safe because the number only ever completes after the submit did.
//! - Errors. Error scopes are thread-local, so the lane pushes and pops them around its own
//!   calls ([`crate::scope::guarded`]). A submission wgpu refused completes its event with that
//!   error (`GPU_VALIDATION`, `OUT_OF_MEMORY`); a queue write that failed fails the next
//!   submission's event (the write's data was meant for that work) and counts as an uncaptured
//!   error. A panic inside wgpu is caught on the lane, never unwinds into Node, and fails the
//!   job's event like an error.
//! - Teardown. The lane's thread owns clones of the device and queue. Closing the lane ends
//!   the thread once the jobs before the close ran; dropping a device waits for it a bounded
//!   time, as for the poller.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::completion::Tracker;
use crate::context::UncapturedErrors;
use crate::error::{Error, Result};
use crate::scope::{guarded, guarded_alloc};
use crate::signal::{lock, Slot};

/// Work the lane runs on its thread, in order.
pub(crate) type Job = Box<dyn FnOnce(&mut LaneState) + Send>;

/// What the lane's thread owns.
pub(crate) struct LaneState {
    device: wgpu::Device,
    queue: wgpu::Queue,
    tracker: Arc<Tracker>,
    uncaptured: Arc<Mutex<UncapturedErrors>>,
    /// The first queue write that failed since the last submission: fails the next one.
    write_error: Option<Error>,
    /// Queue writes, and their bytes, since the last submission (Note [Queue writes are flushed]).
    writes_since_submit: u32,
    written_since_submit: u64,
}

// Note [Queue writes are flushed]
// wgpu stages every `write_buffer` in memory of its own until the next submission. A caller that
// writes without submitting (a scheduler that admits and cancels KV sequences, whose block-table
// writes go through the queue) would grow that memory without bound. After
// `FLUSH_AFTER_WRITES` writes or `FLUSH_AFTER_BYTES` bytes with no submission, the lane submits
// nothing: the staged writes go out in queue order, as they would have with the next submission,
// and their staging memory is reclaimed once done. The flush has no sequence number; a failed
// write still fails the next numbered submission.
const FLUSH_AFTER_WRITES: u32 = 1024;
const FLUSH_AFTER_BYTES: u64 = 64 << 20;

/// The message of a caught panic.
fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// Runs `f`, turning a panic into an internal error naming `what`.
fn unwound<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    catch_unwind(AssertUnwindSafe(f))
        .unwrap_or_else(|p| Err(Error::Internal(format!("{what}: wgpu panicked: {}", panic_message(&*p)))))
}

impl LaneState {
    /// Submits `commands` as submission `seq` and registers its completion.
    pub(crate) fn submit(&mut self, seq: u64, commands: Vec<wgpu::CommandBuffer>) {
        let submitted =
            unwound("queue submit", || guarded(&self.device, "queue submit", || self.queue.submit(commands)));
        (self.writes_since_submit, self.written_since_submit) = (0, 0);
        let failure = self.write_error.take().or_else(|| submitted.as_ref().err().cloned());
        self.tracker.issued(seq, submitted.ok(), failure);
        let tracker = self.tracker.clone();
        // Fires once *this* submission is done (also for a refused one, in order).
        let registered =
            catch_unwind(AssertUnwindSafe(|| self.queue.on_submitted_work_done(move || tracker.complete(seq))));
        if registered.is_err() {
            self.tracker.mark_lost("wgpu panicked registering a submission's completion".into());
        }
        self.tracker.notify();
    }

    /// Writes `data` at `at` of `buffer` through the queue; a failure fails the next submission.
    pub(crate) fn write(&mut self, buffer: &wgpu::Buffer, at: u64, data: &[u8], what: &str) {
        let written = unwound(what, || {
            guarded_alloc(&self.device, what, data.len() as u64, || self.queue.write_buffer(buffer, at, data))
        });
        if let Err(e) = written {
            let mut u = lock(&self.uncaptured);
            u.count += 1;
            u.last = Some(e.to_string());
            drop(u);
            self.write_error.get_or_insert(e);
        }
        self.writes_since_submit += 1;
        self.written_since_submit += data.len() as u64;
        if self.writes_since_submit >= FLUSH_AFTER_WRITES || self.written_since_submit >= FLUSH_AFTER_BYTES {
            // Note [Queue writes are flushed]
            (self.writes_since_submit, self.written_since_submit) = (0, 0);
            let flushed = unwound("queue flush", || {
                guarded(&self.device, "queue flush", || {
                    self.queue.submit(std::iter::empty());
                })
            });
            if let Err(e) = flushed {
                self.write_error.get_or_insert(e);
            }
        }
    }

    /// Destroys `buffer`: after every job before this one, so work already enqueued on it runs,
    /// and outside the poller's waits (Note [Destroys wait outside the poller's wait] in
    /// `completion.rs`). Jobs after it wait meanwhile; the calling threads do not.
    pub(crate) fn destroy(&mut self, buffer: &wgpu::Buffer) {
        let destroyed = self.tracker.outside_waits(|| catch_unwind(AssertUnwindSafe(|| buffer.destroy())));
        if destroyed.is_err() {
            let mut u = lock(&self.uncaptured);
            u.count += 1;
            u.last = Some("wgpu panicked destroying a buffer".into());
        }
    }

    /// Requests a map of `range` of `buffer`; `done` gets the outcome.
    pub(crate) fn map(
        &mut self,
        buffer: &wgpu::Buffer,
        mode: wgpu::MapMode,
        range: std::ops::Range<u64>,
        done: impl FnOnce(std::result::Result<(), String>) + Send + 'static,
    ) {
        // Shared with the callback, so a panic before wgpu took it still reports the failure.
        let once = Arc::new(Mutex::new(Some(done)));
        let callback = once.clone();
        let requested = catch_unwind(AssertUnwindSafe(|| {
            buffer.map_async(mode, range, move |r| {
                if let Some(done) = lock(&callback).take() {
                    done(r.map_err(|e| e.to_string()));
                }
            })
        }));
        if let Err(p) = requested {
            if let Some(done) = lock(&once).take() {
                done(Err(format!("wgpu panicked requesting a map: {}", panic_message(&*p))));
            }
        }
        self.tracker.notify();
    }
}

/// Enqueues on a lane; cheap to clone. Once the lane closed, jobs are dropped unrun.
#[derive(Clone)]
pub(crate) struct LaneHandle(Arc<Mutex<Option<Sender<Job>>>>);

impl LaneHandle {
    pub(crate) fn push(&self, job: impl FnOnce(&mut LaneState) + Send + 'static) {
        if let Some(tx) = lock(&self.0).as_ref() {
            let _ = tx.send(Box::new(job));
        }
    }
}

/// A device's submission lane (see the module note).
pub(crate) struct Lane {
    tx: LaneHandle,
    handle: Mutex<Option<JoinHandle<()>>>,
    exited: Arc<Slot<()>>,
}

/// How long dropping a device waits for the lane's thread to run what was enqueued.
const LANE_EXIT_WAIT: Duration = Duration::from_secs(2);

impl Lane {
    pub(crate) fn spawn(
        device: wgpu::Device,
        queue: wgpu::Queue,
        tracker: Arc<Tracker>,
        uncaptured: Arc<Mutex<UncapturedErrors>>,
    ) -> Result<Lane> {
        let (tx, rx) = channel::<Job>();
        let exited = Slot::new();
        let exited2 = exited.clone();
        let state = LaneState {
            device,
            queue,
            tracker,
            uncaptured,
            write_error: None,
            writes_since_submit: 0,
            written_since_submit: 0,
        };
        let handle = std::thread::Builder::new()
            .name("wgalloc-submit".into())
            .spawn(move || {
                run(state, rx);
                exited2.complete(());
            })
            .map_err(|e| Error::Internal(format!("cannot start the submission thread: {e}")))?;
        Ok(Lane { tx: LaneHandle(Arc::new(Mutex::new(Some(tx)))), handle: Mutex::new(Some(handle)), exited })
    }

    pub(crate) fn handle(&self) -> &LaneHandle {
        &self.tx
    }

    /// Ends the thread once the jobs enqueued so far ran; with `wait`, waits for that at most
    /// `LANE_EXIT_WAIT`, else (or then) leaves the thread to finish by itself. Returns whether
    /// it ended before this returned.
    pub(crate) fn close(&self, wait: bool) -> bool {
        drop(lock(&self.tx.0).take());
        let Some(handle) = lock(&self.handle).take() else { return true };
        if !wait || handle.thread().id() == std::thread::current().id() {
            return false;
        }
        let ended = self.exited.wait_timeout(LANE_EXIT_WAIT).is_some();
        if ended {
            let _ = handle.join();
        }
        ended
    }
}

impl Drop for Lane {
    fn drop(&mut self) {
        self.close(true);
    }
}

fn run(mut state: LaneState, rx: Receiver<Job>) {
    while let Ok(job) = rx.recv() {
        // Each job catches wgpu's panics itself; this one keeps the thread alive for the rest.
        let _ = catch_unwind(AssertUnwindSafe(|| job(&mut state)));
    }
}

impl crate::Gpu {
    /// Enqueues `job` on the device's lane.
    pub(crate) fn enqueue(&self, job: impl FnOnce(&mut LaneState) + Send + 'static) {
        self.shared.lane.handle().push(job);
    }

    /// Destroys `buffer` once every job enqueued before ran.
    pub(crate) fn destroy_buffer(&self, buffer: wgpu::Buffer) {
        self.enqueue(move |lane| lane.destroy(&buffer));
    }

    /// Maps `range` of `buffer` after every job enqueued before; `done` gets the outcome (also
    /// when the device is lost first: the slot is tracked).
    pub(crate) fn map_buffer(
        &self,
        buffer: wgpu::Buffer,
        mode: wgpu::MapMode,
        range: std::ops::Range<u64>,
        done: impl FnOnce(std::result::Result<(), String>) + Send + 'static,
    ) {
        self.enqueue(move |lane| lane.map(&buffer, mode, range, done));
    }
}
