//! Completion tracking for submitted GPU work, and the poller thread that drives it.
//!
//! wgpu's `SubmissionIndex` is opaque, so each submit gets a sequence number when it is
//! enqueued on the device's submission lane, and the lane registers
//! `Queue::on_submitted_work_done` right after the submit (Note [One submission thread] in
//! `lane.rs`): the callback for sequence `n` fires once submission `n` finished, and callbacks
//! fire in submission order. The poller thread calls `Device::poll` only while
//! something is outstanding, so an idle device costs nothing, and waits for the
//! oldest outstanding submission rather than the newest: with several in flight,
//! each one's completions fire as soon as it finishes (a pipelined download reads
//! its first piece while the device copies the next ones).

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::signal::{lock, Slot};

/// What a waiter receives: `Ok` once its submission completed, or why it never will.
pub type Completion = Result<()>;

/// How many refused submissions' errors are kept for their events.
const KEPT_FAILURES: usize = 256;

#[derive(Default)]
struct State {
    /// Sequence numbers handed out (submissions enqueued).
    submitted: u64,
    /// Submissions the lane passed to wgpu: what the poller may wait for.
    issued: u64,
    completed: u64,
    /// Submissions wgpu refused (or a queue write before them failed), with why: their events
    /// fail with it. The newest `KEPT_FAILURES`.
    failed: BTreeMap<u64, Error>,
    lost: Option<String>,
    waiters: BTreeMap<u64, Vec<Arc<Slot<Completion>>>>,
    /// Map requests in flight; failed with the device if it is lost.
    maps: Vec<Weak<Slot<Completion>>>,
    /// wgpu's index of each submission not yet complete, oldest first: what the poller waits for.
    indices: VecDeque<(u64, wgpu::SubmissionIndex)>,
    /// The poller is inside a blocking wait for GPU work (holding wgpu's device-wide resource
    /// lock for reading all along).
    blocking_wait: bool,
    /// Buffer destroys waiting for the poller to leave its blocking wait, or running.
    destroys: u32,
}

#[derive(Default)]
pub struct Tracker {
    state: Mutex<State>,
    /// Mirrors `state.lost.is_some()` so hot paths check liveness without the lock.
    lost: AtomicBool,
    /// Mirrors `state.completed` for lock-free reads on allocation fast paths.
    completed: std::sync::atomic::AtomicU64,
    /// Wakes the poller when work appears, and blocking waiters on progress.
    cv: Condvar,
}

impl Tracker {
    /// Reserves the next sequence number for a submission about to be enqueued. Call under the
    /// submit lock, enqueueing before it is released.
    pub(crate) fn reserve_seq(&self) -> u64 {
        let mut s = lock(&self.state);
        s.submitted += 1;
        s.submitted
    }

    /// Submission `seq` went to wgpu, which numbered it `index` (`None` when the submit failed:
    /// its callback still fires in order); `failure` is why its event fails, if it does.
    pub(crate) fn issued(&self, seq: u64, index: Option<wgpu::SubmissionIndex>, failure: Option<Error>) {
        let mut s = lock(&self.state);
        s.issued = s.issued.max(seq);
        if let Some(index) = index {
            s.indices.push_back((seq, index));
        }
        if let Some(e) = failure {
            s.failed.insert(seq, e);
            if s.failed.len() > KEPT_FAILURES {
                s.failed.pop_first();
            }
        }
    }

    /// What a waiter for completed submission `seq` receives.
    fn outcome(s: &State, seq: u64) -> Completion {
        match s.failed.get(&seq) {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    pub(crate) fn complete(&self, seq: u64) {
        let ready = {
            let mut s = lock(&self.state);
            s.completed = s.completed.max(seq);
            self.completed.store(s.completed, Ordering::Release);
            let done = s.completed;
            while s.indices.front().is_some_and(|(q, _)| *q <= done) {
                s.indices.pop_front();
            }
            let first_pending = s.completed + 1;
            let rest = s.waiters.split_off(&first_pending);
            let ready = std::mem::replace(&mut s.waiters, rest);
            ready.into_iter().map(|(seq, slots)| (Self::outcome(&s, seq), slots)).collect::<Vec<_>>()
        };
        self.cv.notify_all();
        for (outcome, slots) in ready {
            for slot in slots {
                slot.complete(outcome.clone());
            }
        }
    }

    pub fn completed(&self) -> u64 {
        self.completed.load(Ordering::Acquire)
    }

    pub fn submitted(&self) -> u64 {
        lock(&self.state).submitted
    }

    pub fn lost_reason(&self) -> Option<String> {
        lock(&self.state).lost.clone()
    }

    pub fn is_lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
    }

    pub fn check_alive(&self) -> Result<()> {
        if !self.is_lost() {
            return Ok(());
        }
        match self.lost_reason() {
            Some(reason) => Err(Error::DeviceLost(reason)),
            None => Ok(()),
        }
    }

    /// True once `seq` completed; an error if the device is lost first or wgpu refused it.
    pub fn is_complete(&self, seq: u64) -> Result<bool> {
        let s = lock(&self.state);
        if s.completed >= seq {
            return Self::outcome(&s, seq).map(|_| true);
        }
        match &s.lost {
            Some(reason) => Err(Error::DeviceLost(reason.clone())),
            None => Ok(false),
        }
    }

    /// A slot completed when `seq` completes (at once if it already has).
    pub fn waiter(&self, seq: u64) -> Arc<Slot<Completion>> {
        let slot = Slot::new();
        let mut s = lock(&self.state);
        if s.completed >= seq {
            slot.complete(Self::outcome(&s, seq));
        } else if let Some(reason) = &s.lost {
            slot.complete(Err(Error::DeviceLost(reason.clone())));
        } else {
            s.waiters.entry(seq).or_default().push(slot.clone());
            drop(s);
            self.cv.notify_all();
        }
        slot
    }

    /// Registers a map request so the poller keeps polling and a lost device fails it.
    pub(crate) fn track_map(&self, slot: &Arc<Slot<Completion>>) {
        let mut s = lock(&self.state);
        if let Some(reason) = &s.lost {
            slot.complete(Err(Error::DeviceLost(reason.clone())));
            return;
        }
        s.maps.retain(|w| w.upgrade().is_some_and(|m| !m.is_done()));
        s.maps.push(Arc::downgrade(slot));
        drop(s);
        self.cv.notify_all();
    }

    /// Fails every waiter; later calls see `DEVICE_LOST`.
    pub(crate) fn mark_lost(&self, reason: String) {
        let (waiters, maps) = {
            let mut s = lock(&self.state);
            if s.lost.is_none() {
                s.lost = Some(reason.clone());
            }
            self.lost.store(true, Ordering::Release);
            (std::mem::take(&mut s.waiters), std::mem::take(&mut s.maps))
        };
        self.cv.notify_all();
        let err = Error::DeviceLost(reason);
        for slot in waiters.into_values().flatten() {
            slot.complete(Err(err.clone()));
        }
        for slot in maps.iter().filter_map(Weak::upgrade) {
            slot.complete(Err(err.clone()));
        }
    }

    fn has_outstanding(s: &State) -> bool {
        s.lost.is_none() && (s.issued > s.completed || s.maps.iter().any(|w| w.upgrade().is_some_and(|m| !m.is_done())))
    }

    /// Parks the poller until something is outstanding or `timeout` passes. Returns what
    /// to wait for: the oldest outstanding submission's index (`Some(None)` when only map
    /// requests are outstanding: the newest work, then), or `None` when nothing is.
    fn park_until_outstanding(&self, timeout: Duration, stop: &AtomicBool) -> Option<Option<wgpu::SubmissionIndex>> {
        let s = lock(&self.state);
        let (s, _) = self
            .cv
            .wait_timeout_while(s, timeout, |s| !Self::has_outstanding(s) && !stop.load(Ordering::Acquire))
            .unwrap_or_else(|p| p.into_inner());
        Self::has_outstanding(&s).then(|| s.indices.front().map(|(_, index)| index.clone()))
    }

    pub(crate) fn notify(&self) {
        self.cv.notify_all();
    }

    /// Runs `destroy` once the poller is outside any blocking wait, and keeps it out until
    /// `destroy` returned. Note [Destroys wait outside the poller's wait]: destroying a buffer
    /// takes wgpu's device-wide resource lock for writing, which the poller holds for reading all
    /// through a wait for GPU work; a writer parked on that lock also holds off every new reader
    /// (creating bind groups, finishing encoders, on any thread, the JS thread among them) until
    /// the GPU work finished. So a destroy waits here, holding no wgpu lock, while the poller ends
    /// its wait (it starts no new one meanwhile: it polls without waiting), and then takes the
    /// lock at once.
    pub(crate) fn outside_waits<T>(&self, destroy: impl FnOnce() -> T) -> T {
        struct Done<'a>(&'a Tracker);
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                lock(&self.0.state).destroys -= 1;
                self.0.cv.notify_all();
            }
        }
        let mut s = lock(&self.state);
        s.destroys += 1;
        let done = Done(self);
        while s.blocking_wait && s.lost.is_none() {
            s = self.cv.wait(s).unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        drop(s);
        let value = destroy();
        drop(done);
        value
    }

    /// The poller may start a blocking wait (no destroy waits for it): marks it inside one.
    fn enter_blocking_wait(&self) -> bool {
        let mut s = lock(&self.state);
        s.blocking_wait = s.destroys == 0;
        s.blocking_wait
    }

    fn leave_blocking_wait(&self) {
        lock(&self.state).blocking_wait = false;
        self.cv.notify_all();
    }

    /// Wakes the poller after its stop flag was set. Taking the lock first means a
    /// poller between checking the flag and parking cannot miss the wake-up.
    fn notify_stop(&self) {
        drop(lock(&self.state));
        self.cv.notify_all();
    }
}

/// What the heap's policy reads of the device's submissions (pending frees wait for them).
impl wgalloc_heap::Completion for Tracker {
    #[inline]
    fn completed(&self) -> u64 {
        Tracker::completed(self)
    }

    #[inline]
    fn is_lost(&self) -> bool {
        Tracker::is_lost(self)
    }

    fn lost_reason(&self) -> Option<String> {
        Tracker::lost_reason(self)
    }

    fn wait(&self, seq: u64, timeout: Duration) {
        let _ = self.waiter(seq).wait_timeout(timeout);
    }
}

/// The background thread that polls the device while work is outstanding.
/// It holds no reference that keeps the `Gpu` alive and stops when the `Gpu` drops.
pub(crate) struct Poller {
    stop: Arc<AtomicBool>,
    tracker: Arc<Tracker>,
    /// Set by the thread once it released its device handle.
    exited: Arc<Slot<()>>,
    handle: Option<JoinHandle<()>>,
    /// Set when the device's teardown already waited its bound for the GPU work this thread
    /// waits for: dropping then leaves the thread to end by itself at once.
    detach: bool,
}

/// How long dropping a device waits for the poller to leave a wait for GPU work.
const POLLER_EXIT_WAIT: Duration = Duration::from_secs(2);

impl Poller {
    pub(crate) fn spawn(device: wgpu::Device, tracker: Arc<Tracker>) -> Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let exited = Slot::new();
        let (stop2, tracker2, exited2) = (stop.clone(), tracker.clone(), exited.clone());
        let handle = std::thread::Builder::new()
            .name("wgalloc-poller".into())
            .spawn(move || {
                poll_loop(device, tracker2, stop2);
                exited2.complete(());
            })
            .map_err(|e| Error::Internal(format!("cannot start the poller thread: {e}")))?;
        Ok(Poller { stop, tracker, exited, handle: Some(handle), detach: false })
    }

    /// Stops the thread and waits (a bounded time) until it released its device handle, without
    /// joining: what the process-exit hook needs (see Note [Threads stop before the process exits]).
    pub(crate) fn stop_for_exit(&self) {
        self.stop.store(true, Ordering::Release);
        self.tracker.notify_stop();
        let _ = self.exited.wait_timeout(POLLER_EXIT_WAIT);
    }

    /// Dropping will not wait for the thread: the GPU work it waits for outlasted the
    /// teardown's bound already (a second wait would double the time a busy process takes
    /// to exit).
    pub(crate) fn detach(&mut self) {
        self.detach = true;
    }
}

impl Drop for Poller {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.tracker.notify_stop();
        // Join, so the device is torn down on the dropping thread and never on the
        // poller while the process exits (Mesa's exit handlers racing a driver unload
        // on another thread crashed `wgalloc info` about 1 run in 60 under load). A
        // poller inside a wait for GPU work gets a bounded grace, then is left to end
        // by itself: dropping a Gpu must not block the JS thread on long GPU work.
        let Some(handle) = self.handle.take() else { return };
        if !self.detach
            && handle.thread().id() != std::thread::current().id()
            && self.exited.wait_timeout(POLLER_EXIT_WAIT).is_some()
        {
            let _ = handle.join();
        }
    }
}

/// Between two non-blocking polls while a buffer destroy waits for the device's locks.
const DESTROY_POLL_PAUSE: Duration = Duration::from_millis(1);

/// Polls until `stop`; returns (dropping its device handle) right after.
fn poll_loop(device: wgpu::Device, tracker: Arc<Tracker>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Acquire) {
        let Some(oldest) = tracker.park_until_outstanding(Duration::from_millis(100), &stop) else {
            continue;
        };
        // Wait without a timeout: wgpu-core 30.0.1 can panic when a timed-out wait races
        // another thread's queue maintenance (gfx-rs/wgpu#9958). The wait returns when the
        // oldest outstanding submission completes (or the device is lost), and the
        // completions of everything finished by then fire. While a buffer destroy waits for
        // the device's locks, poll without waiting instead (Note [Destroys wait outside the
        // poller's wait]).
        let blocking = tracker.enter_blocking_wait();
        let poll = if blocking {
            wgpu::PollType::Wait { submission_index: oldest, timeout: None }
        } else {
            wgpu::PollType::Poll
        };
        let polled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| device.poll(poll)));
        if blocking {
            tracker.leave_blocking_wait();
        } else {
            std::thread::sleep(DESTROY_POLL_PAUSE);
        }
        match polled {
            Ok(Ok(_)) | Ok(Err(wgpu::PollError::Timeout)) => {}
            Ok(Err(e)) => tracker.mark_lost(format!("device poll failed: {e}")),
            // A panic inside wgpu drops the callbacks it was running: nothing pending can
            // complete any more, so fail every waiter instead of hanging them.
            Err(_) => tracker.mark_lost("wgpu panicked while polling the device".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiters_complete_in_order_and_fail_on_loss() {
        let t = Tracker::default();
        let (a, b) = (t.reserve_seq(), t.reserve_seq());
        t.issued(a, None, None);
        t.issued(b, None, None);
        let wa = t.waiter(a);
        let wb = t.waiter(b);
        t.complete(a);
        assert!(wa.is_done() && !wb.is_done());
        assert_eq!(t.is_complete(a), Ok(true));
        assert_eq!(t.is_complete(b), Ok(false));
        t.mark_lost("test".into());
        assert_eq!(wb.wait_timeout(Duration::ZERO).unwrap().unwrap_err().code(), "DEVICE_LOST");
        assert_eq!(t.is_complete(b).unwrap_err().code(), "DEVICE_LOST");
        // Already-completed work stays complete after loss.
        assert_eq!(t.is_complete(a), Ok(true));
    }

    #[test]
    fn a_refused_submission_fails_its_own_event_only() {
        let t = Tracker::default();
        let (a, b, c) = (t.reserve_seq(), t.reserve_seq(), t.reserve_seq());
        t.issued(a, None, None);
        t.issued(b, None, Some(Error::Validation("queue submit: refused".into())));
        t.issued(c, None, None);
        let wb = t.waiter(b);
        t.complete(c);
        assert_eq!(wb.wait_timeout(Duration::ZERO).unwrap().unwrap_err().code(), "GPU_VALIDATION");
        assert_eq!(t.is_complete(a), Ok(true));
        assert_eq!(t.is_complete(b).unwrap_err().code(), "GPU_VALIDATION");
        assert_eq!(t.is_complete(c), Ok(true));
        assert_eq!(t.waiter(b).wait_timeout(Duration::ZERO).unwrap().unwrap_err().code(), "GPU_VALIDATION");
    }
}
