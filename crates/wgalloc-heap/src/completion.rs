//! Which submissions finished: what a pending free waits for. Submissions are numbered in
//! order from 1 and complete in order, so one number (the highest completed) says it all.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

/// The completion of submitted work, as the heap reads it. `wgalloc-core` implements it for
/// its device's submission tracker; [`HostCompletion`] for tests and simulations.
pub trait Completion: Send + Sync + 'static {
    /// The highest submission completed (every one up to it did).
    fn completed(&self) -> u64;

    /// Whether the device is lost: nothing pending will complete, and nothing can use a freed
    /// block any more. Read on every malloc and free, so it should be one atomic load.
    fn is_lost(&self) -> bool;

    /// Why the device was lost, once it is.
    fn lost_reason(&self) -> Option<String>;

    /// Blocks until submission `seq` completed, the device is lost or `timeout` passed.
    fn wait(&self, seq: u64, timeout: Duration);
}

/// Completion driven by hand: submissions are numbered by [`HostCompletion::next_seq`] and
/// completed by [`HostCompletion::complete`] (unit tests, trace simulations).
#[derive(Debug, Default)]
pub struct HostCompletion {
    submitted: AtomicU64,
    completed: AtomicU64,
    lost: AtomicBool,
    reason: Mutex<Option<String>>,
    progress: Condvar,
}

impl HostCompletion {
    /// Numbers the next submission.
    pub fn next_seq(&self) -> u64 {
        self.submitted.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// Submission `seq`, and every one before it, completed.
    pub fn complete(&self, seq: u64) {
        let _guard = self.reason.lock();
        self.completed.fetch_max(seq, Ordering::AcqRel);
        self.progress.notify_all();
    }

    /// The device is lost for `reason` (the first reason stays).
    pub fn mark_lost(&self, reason: String) {
        let mut r = self.reason.lock();
        r.get_or_insert(reason);
        self.lost.store(true, Ordering::Release);
        self.progress.notify_all();
    }
}

impl Completion for HostCompletion {
    fn completed(&self) -> u64 {
        self.completed.load(Ordering::Acquire)
    }

    fn is_lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
    }

    fn lost_reason(&self) -> Option<String> {
        self.reason.lock().clone()
    }

    fn wait(&self, seq: u64, timeout: Duration) {
        let mut r = self.reason.lock();
        let _ = self.progress.wait_while_for(&mut r, |r| r.is_none() && self.completed() < seq, timeout);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn waits_end_on_completion_loss_or_timeout() {
        let c = Arc::new(HostCompletion::default());
        let (a, b) = (c.next_seq(), c.next_seq());
        assert_eq!((a, b, c.completed()), (1, 2, 0));
        let t = c.clone();
        let finisher = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            t.complete(a);
        });
        c.wait(a, Duration::from_secs(10));
        finisher.join().unwrap();
        assert_eq!(c.completed(), a);
        let start = std::time::Instant::now();
        c.wait(b, Duration::from_millis(30));
        assert!(start.elapsed() >= Duration::from_millis(30), "timed out, not complete");
        c.mark_lost("test".into());
        c.wait(b, Duration::from_secs(10));
        assert!(c.is_lost());
        assert_eq!(c.lost_reason().as_deref(), Some("test"));
    }
}
