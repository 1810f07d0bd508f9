//! The optional event-processing thread (the seed's background thread pool):
//! it returns freed default-pool blocks to their free lists as soon as their
//! work completed, and polls the device so map callbacks fire promptly. It holds
//! only weak references, so it never keeps a device open.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use super::{Host, HostCore};
use crate::context::{DeviceCore, Gpu};
use crate::error::{Error, Result};
use crate::signal::lock;

/// Pause between passes while blocks are pending (PyTorch sleeps 100 us).
const BUSY_PAUSE: Duration = Duration::from_micros(100);
/// Longest idle wait before re-checking the stop flag.
const IDLE_WAIT: Duration = Duration::from_millis(50);

pub(crate) struct Background {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Background {
    pub(crate) fn spawn(core: Weak<HostCore>, shared: Weak<DeviceCore>) -> Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let handle = std::thread::Builder::new()
            .name("wgalloc-host-events".into())
            .spawn(move || run(core, shared, stop2))
            .map_err(|e| Error::Internal(format!("cannot start the host event thread: {e}")))?;
        Ok(Background { stop, handle: Some(handle) })
    }

    pub(crate) fn stop(mut self, wake: &(Mutex<()>, Condvar)) {
        self.stop.store(true, Ordering::Release);
        {
            let _g = lock(&wake.0);
            wake.1.notify_all();
        }
        if let Some(h) = self.handle.take() {
            // The thread may drop the last device reference itself; never join from it.
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }
}

fn run(core: Weak<HostCore>, shared: Weak<DeviceCore>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Acquire) {
        let (Some(core), Some(shared)) = (core.upgrade(), shared.upgrade()) else { break };
        let host = Host { gpu: Gpu { shared }, core };
        let waiting = host.process_pool(&host.core.default_pool);
        if waiting > 0 {
            let _ = host.gpu.device().poll(wgpu::PollType::Poll);
        }
        // Hold no device reference while idle.
        let Host { gpu, core } = host;
        drop(gpu);
        if waiting > 0 {
            std::thread::sleep(BUSY_PAUSE);
        } else {
            let g = lock(&core.wake.0);
            if !stop.load(Ordering::Acquire) {
                let _ = core.wake.1.wait_timeout(g, IDLE_WAIT);
            }
        }
    }
}
