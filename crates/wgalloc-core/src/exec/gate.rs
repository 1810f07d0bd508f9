//! A first-in first-out gate for async callers: each takes a ticket, in call order, and its
//! turn comes once every earlier ticket was dropped. Waiting is a future (no thread blocks), so
//! it works under any executor that polls it: the binding's async runtime or a `block_on`.
//!
//! Note [Run queue]: `queue` holds the number of every live ticket, in the order they were
//! taken (so sorted), and its front is the ticket whose turn it is. A ticket leaves the queue
//! only when it is dropped (its holder finished, failed, or gave up while waiting), and whoever
//! removes the front wakes the new front. So every ticket gets exactly one turn, in order, one
//! at a time, and a ticket given up while queued never holds up the ones behind it. A waiter
//! stores its waker under the lock in the same critical section in which it found it is not yet
//! at the front, and the wake happens after the front changed under that lock: a turn that comes
//! between a poll and the next one is never missed.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;

#[derive(Default)]
pub(crate) struct Gate {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Number of the next ticket.
    next: u64,
    /// Live tickets in call order: the front's turn is now.
    queue: VecDeque<Waiting>,
}

struct Waiting {
    ticket: u64,
    /// Set by a poll that found the ticket behind others.
    waker: Option<Waker>,
}

/// A place in a [`Gate`]'s queue; dropping it ends its turn (or gives up its place).
pub(crate) struct Ticket {
    gate: Arc<Gate>,
    number: u64,
}

impl Gate {
    /// A ticket behind every live one.
    pub fn ticket(self: &Arc<Self>) -> Ticket {
        let mut s = self.state.lock();
        self.push(&mut s)
    }

    /// A ticket whose turn is now, or none while any other ticket is live.
    pub fn ticket_now(self: &Arc<Self>) -> Option<Ticket> {
        let mut s = self.state.lock();
        s.queue.is_empty().then(|| self.push(&mut s))
    }

    fn push(self: &Arc<Self>, s: &mut State) -> Ticket {
        let number = s.next;
        s.next += 1;
        s.queue.push_back(Waiting { ticket: number, waker: None });
        Ticket { gate: self.clone(), number }
    }
}

impl Ticket {
    /// Resolves when every ticket taken before this one was dropped.
    pub fn turn(&self) -> Turn<'_> {
        Turn(self)
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let next = {
            let mut s = self.gate.state.lock();
            // Sorted by number: found in O(log n). Always present while the ticket lives.
            let Ok(at) = s.queue.binary_search_by_key(&self.number, |w| w.ticket) else { return };
            s.queue.remove(at);
            if at == 0 {
                s.queue.front_mut().and_then(|w| w.waker.take())
            } else {
                None
            }
        };
        if let Some(waker) = next {
            waker.wake();
        }
    }
}

/// The future of [`Ticket::turn`].
pub(crate) struct Turn<'a>(&'a Ticket);

impl Future for Turn<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let ticket = self.0;
        let mut s = ticket.gate.state.lock();
        let Ok(at) = s.queue.binary_search_by_key(&ticket.number, |w| w.ticket) else {
            return Poll::Ready(()); // unreachable while the ticket lives; never wait forever
        };
        if at == 0 {
            return Poll::Ready(());
        }
        match &mut s.queue[at].waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            slot => *slot = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Wake;

    struct Flag(std::sync::atomic::AtomicBool);
    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    fn poll(turn: &mut Turn<'_>, flag: &Arc<Flag>) -> bool {
        let waker = Waker::from(flag.clone());
        Pin::new(turn).poll(&mut Context::from_waker(&waker)).is_ready()
    }

    #[test]
    fn turns_come_in_call_order_and_a_ticket_given_up_while_queued_holds_nothing_up() {
        let gate = Arc::new(Gate::default());
        let (a, b, c) = (gate.ticket(), gate.ticket(), gate.ticket());
        assert!(gate.ticket_now().is_none(), "busy while a ticket lives");
        let flags: Vec<Arc<Flag>> = (0..3).map(|_| Arc::new(Flag(false.into()))).collect();
        let woken = |i: usize| flags[i].0.load(std::sync::atomic::Ordering::SeqCst);
        assert!(poll(&mut a.turn(), &flags[0]));
        assert!(!poll(&mut b.turn(), &flags[1]));
        assert!(!poll(&mut c.turn(), &flags[2]));
        drop(b); // given up while queued: c is still behind a
        assert!(!woken(2));
        assert!(!poll(&mut c.turn(), &flags[2]));
        drop(a);
        assert!(woken(2), "the new front is woken");
        assert!(poll(&mut c.turn(), &flags[2]));
        drop(c);
        assert!(gate.ticket_now().is_some(), "free once every ticket is dropped");
    }
}
