//! Streams and events. A `Stream` is an ordered lane of encoded work: commands are
//! recorded into its open encoder and reach the GPU on `submit()`, which returns an
//! `Event` for that submission. wgpu has one queue per device, so streams order
//! their own work and the queue orders submissions across streams.

use std::sync::Arc;
use std::time::Duration;

use crate::completion::Tracker;
use crate::context::Gpu;
use crate::error::{Error, Result};
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
    /// Submits command buffers and returns the event that completes with them.
    pub(crate) fn submit(&self, commands: Vec<wgpu::CommandBuffer>) -> Result<Event> {
        self.check_alive()?;
        let shared = &self.shared;
        let seq = {
            let _order = lock(&shared.submit_lock);
            let submitted = guarded(&shared.device, "queue submit", || {
                shared.queue.submit(commands);
            });
            let seq = shared.tracker.next_seq();
            let tracker = shared.tracker.clone();
            // Registered right after the submit, under the lock: fires when *this* submission is done.
            shared.queue.on_submitted_work_done(move || tracker.complete(seq));
            submitted.map(|_| seq)
        };
        shared.tracker.notify();
        Ok(Event { seq: seq?, tracker: shared.tracker.clone() })
    }

    /// An event for everything submitted so far.
    pub fn current_event(&self) -> Event {
        Event { seq: self.shared.tracker.submitted(), tracker: self.shared.tracker.clone() }
    }

    pub fn create_stream(&self) -> Result<Stream> {
        self.check_alive()?;
        Ok(Stream { gpu: self.clone(), encoder: None, pending_commands: 0, last: None })
    }
}

/// An ordered lane of GPU work. Not shared between threads: wrap it if you must.
pub struct Stream {
    gpu: Gpu,
    encoder: Option<wgpu::CommandEncoder>,
    pending_commands: u32,
    last: Option<Event>,
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
            self.encoder = Some(device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("wgalloc stream"),
            }));
        }
        self.pending_commands += 1;
        Ok(self.encoder.as_mut().expect("encoder was just created"))
    }

    /// Commands recorded since the last submit.
    pub fn pending_commands(&self) -> u32 {
        self.pending_commands
    }

    /// Submits recorded work. With nothing recorded, returns the last event
    /// (or one for all prior device work), so `submit()` is always safe to await.
    pub fn submit(&mut self) -> Result<Event> {
        let Some(encoder) = self.encoder.take() else {
            return Ok(self.last.clone().unwrap_or_else(|| self.gpu.current_event()));
        };
        self.pending_commands = 0;
        let commands = guarded(&self.gpu.shared.device, "finishing the stream's commands", || encoder.finish())?;
        let event = self.gpu.submit(vec![commands])?;
        self.last = Some(event.clone());
        Ok(event)
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
