//! A process-wide turn for opening and closing devices. NVIDIA's Vulkan driver on Linux races
//! when several threads create or destroy instances and devices at once (gfx-rs/wgpu#5930:
//! data races and crashes in `vkCreateInstance`; kvark/blade#336: crashes under parallel tests
//! that create and destroy contexts), so wgalloc opens and closes devices one at a time (a
//! device dropped with work still running closes outside the turn: its queue may take long).
//!
//! The turn is a guard that may be held across `.await` (the napi layer runs `Gpu::request`
//! as a `Send` future), which a `MutexGuard` may not.

use std::sync::{Condvar, Mutex};

use crate::signal::lock;

static TAKEN: Mutex<bool> = Mutex::new(false);
static RETURNED: Condvar = Condvar::new();

/// Held while a device is opened or closed; returned when dropped.
#[must_use = "the turn ends when the guard is dropped"]
pub(crate) struct DriverTurn(());

impl DriverTurn {
    /// Waits for the turn. Opening or closing a device takes milliseconds, so the wait is short.
    pub(crate) fn take() -> DriverTurn {
        let mut taken = lock(&TAKEN);
        while *taken {
            taken = RETURNED.wait(taken).unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        *taken = true;
        DriverTurn(())
    }
}

impl Drop for DriverTurn {
    fn drop(&mut self) {
        *lock(&TAKEN) = false;
        RETURNED.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::DriverTurn;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// At most one thread holds the turn, and every waiter gets it.
    #[test]
    fn one_holder_at_a_time() {
        let inside = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let served = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (inside, most, served) = (inside.clone(), most.clone(), served.clone());
                std::thread::spawn(move || {
                    for _ in 0..50 {
                        let _turn = DriverTurn::take();
                        let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        std::thread::yield_now();
                        inside.fetch_sub(1, Ordering::SeqCst);
                        served.fetch_add(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(most.load(Ordering::SeqCst), 1, "two threads held the turn at once");
        assert_eq!(served.load(Ordering::SeqCst), 8 * 50);
    }
}
