//! Leases on mapped memory. wgpu frees every buffer of a destroyed device at its next poll,
//! mapped or not, so a pointer into a mapping (a zero-copy JS view of a staging block, a
//! copy into or out of one) would dangle. Whoever reads or writes mapped memory holds a
//! lease, and [`crate::Gpu::destroy`] leaves the driver's device alone until the last
//! lease ends: the device is lost to every call at once, its memory goes when nothing can
//! reach it any more. A device the *driver* loses is freed by wgpu without asking; leases
//! then only stop new access (see `docs/reliability.md`).

use std::sync::{Arc, Mutex};

use crate::context::DeviceCore;
use crate::error::{Error, Result};
use crate::signal::lock;

/// The leases of one device.
#[derive(Debug, Default)]
pub(crate) struct MappingLeases {
    state: Mutex<LeaseState>,
}

#[derive(Debug, Default)]
struct LeaseState {
    live: usize,
    /// `destroy` ran: no new lease; the last one to end destroys the driver's device.
    destroy_requested: bool,
}

impl MappingLeases {
    /// A lease, unless the device is lost or its destruction was asked for.
    pub(crate) fn take(shared: &Arc<DeviceCore>) -> Result<MappingLease> {
        let mut st = lock(&shared.leases.state);
        if st.destroy_requested {
            return Err(Error::DeviceLost("destroyed by the caller".into()));
        }
        shared.tracker.check_alive()?;
        st.live += 1;
        Ok(MappingLease { shared: shared.clone() })
    }

    /// Asks for the driver's device to be destroyed: now when no lease is out, else when the
    /// last one ends. Returns whether it was destroyed now.
    pub(crate) fn destroy(shared: &DeviceCore) -> bool {
        let mut st = lock(&shared.leases.state);
        st.destroy_requested = true;
        if st.live == 0 {
            shared.device.destroy();
        }
        st.live == 0
    }

    /// Leases out now.
    pub(crate) fn live(&self) -> usize {
        lock(&self.state).live
    }
}

/// Mapped memory of a device stays in place while this lives (see the module note).
#[must_use = "the mapping may be freed once the lease drops"]
pub struct MappingLease {
    shared: Arc<DeviceCore>,
}

impl std::fmt::Debug for MappingLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MappingLease")
    }
}

impl Drop for MappingLease {
    fn drop(&mut self) {
        let mut st = lock(&self.shared.leases.state);
        st.live -= 1;
        if st.live == 0 && st.destroy_requested {
            self.shared.device.destroy();
        }
    }
}
