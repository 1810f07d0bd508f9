//! A one-shot completion slot that can be awaited (async) or waited on (blocking),
//! completed from any thread. Whoever completes first wins; later completions are
//! ignored, which lets a map callback and a device-lost sweep race safely.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

struct State<T> {
    value: Option<T>,
    done: bool,
    wakers: Vec<Waker>,
}

pub struct Slot<T> {
    state: Mutex<State<T>>,
    cv: Condvar,
}

impl<T> Slot<T> {
    pub fn new() -> Arc<Self> {
        Arc::new(Slot { state: Mutex::new(State { value: None, done: false, wakers: Vec::new() }), cv: Condvar::new() })
    }

    /// Stores `value` if the slot is still open. Returns whether it was stored.
    pub fn complete(&self, value: T) -> bool {
        let wakers = {
            let mut s = lock(&self.state);
            if s.done {
                return false;
            }
            s.done = true;
            s.value = Some(value);
            std::mem::take(&mut s.wakers)
        };
        self.cv.notify_all();
        wakers.into_iter().for_each(Waker::wake);
        true
    }

    pub fn is_done(&self) -> bool {
        lock(&self.state).done
    }

    /// Blocks until completed or `timeout` passes; takes the value if completed.
    pub fn wait_timeout(&self, timeout: Duration) -> Option<T> {
        let guard = lock(&self.state);
        let (mut guard, _) = self.cv.wait_timeout_while(guard, timeout, |s| !s.done).unwrap_or_else(|p| p.into_inner());
        guard.value.take()
    }

    /// A future that resolves with the value once completed.
    pub fn wait(self: &Arc<Self>) -> SlotFuture<T> {
        SlotFuture(self.clone())
    }

    /// A future that resolves once completed, leaving the value for others
    /// (several waiters may share one slot; read it with `peek`).
    pub fn done(self: &Arc<Self>) -> DoneFuture<T> {
        DoneFuture(self.clone())
    }

    /// A copy of the value, if completed and not taken.
    pub fn peek(&self) -> Option<T>
    where
        T: Clone,
    {
        lock(&self.state).value.clone()
    }
}

pub struct DoneFuture<T>(Arc<Slot<T>>);

impl<T> Future for DoneFuture<T> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut s = lock(&self.0.state);
        if s.done {
            return Poll::Ready(());
        }
        s.wakers.push(cx.waker().clone());
        Poll::Pending
    }
}

pub struct SlotFuture<T>(Arc<Slot<T>>);

impl<T> Future for SlotFuture<T> {
    type Output = T;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let mut s = lock(&self.0.state);
        if s.done {
            // A slot has one consumer; a second poll after Ready is a caller bug.
            return match s.value.take() {
                Some(v) => Poll::Ready(v),
                None => Poll::Pending,
            };
        }
        s.wakers.push(cx.waker().clone());
        Poll::Pending
    }
}

/// Poisoning only happens if a holder panicked; the state stays consistent, so keep going.
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_completion_wins_and_wakes_blocking_waiter() {
        let slot = Slot::new();
        let s2 = slot.clone();
        let t = std::thread::spawn(move || s2.wait_timeout(Duration::from_secs(5)));
        std::thread::sleep(Duration::from_millis(10));
        assert!(slot.complete(1));
        assert!(!slot.complete(2));
        assert_eq!(t.join().unwrap(), Some(1));
    }

    #[test]
    fn future_resolves() {
        let slot = Slot::new();
        slot.complete("x");
        assert_eq!(pollster::block_on(slot.wait()), "x");
    }
}

/// A caller's wish to give up an operation that has not started (its `AbortSignal` fired): a run
/// still queued behind others leaves the queue at once. Cheap to clone; all clones are one wish.
#[derive(Clone)]
pub struct Cancel(Arc<Slot<()>>);

impl Default for Cancel {
    fn default() -> Self {
        Cancel(Slot::new())
    }
}

impl std::fmt::Debug for Cancel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Cancel").field(&self.is_cancelled()).finish()
    }
}

impl PartialEq for Cancel {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Cancel {}

impl Cancel {
    pub fn new() -> Cancel {
        Cancel::default()
    }

    pub fn cancel(&self) {
        self.0.complete(());
    }

    pub fn is_cancelled(&self) -> bool {
        self.0.is_done()
    }

    /// Resolves once cancelled.
    pub fn cancelled(&self) -> DoneFuture<()> {
        self.0.done()
    }
}
