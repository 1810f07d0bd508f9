//! Caches keyed by rounded size, as simple runtimes keep them: a freed buffer serves later
//! requests of the same key and none is ever released. Exact size (tfjs-webgpu's buffer
//! manager, 4-byte granularity) and power-of-two buckets (ORT-WebGPU, CachingHostAllocator).

use std::collections::HashMap;

use super::trace::{Trace, TraceEvent};
use super::PolicyFigures;

/// The rounding of a keyed cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keying {
    ExactSize,
    PowerOfTwo,
}

impl Keying {
    pub fn policy(self) -> &'static str {
        match self {
            Keying::ExactSize => "exact-size",
            Keying::PowerOfTwo => "power-of-two",
        }
    }

    /// The buffer size a request of `size` bytes gets (at least 4 bytes, as WebGPU copies need).
    pub fn key(self, size: u64) -> u64 {
        let size = size.max(4);
        match self {
            Keying::ExactSize => size.div_ceil(4) * 4,
            Keying::PowerOfTwo => size.next_power_of_two(),
        }
    }
}

pub fn simulate(trace: &Trace, keying: Keying) -> PolicyFigures {
    let mut cached: HashMap<u64, u64> = HashMap::new();
    let mut live_keys: Vec<u64> = vec![0; trace.slots];
    let (mut reserved, mut peak_reserved, mut driver) = (0u64, 0u64, 0u64);
    for e in &trace.events {
        match *e {
            TraceEvent::Alloc { slot, size } => {
                let key = keying.key(size);
                match cached.get_mut(&key) {
                    Some(n) if *n > 0 => *n -= 1,
                    _ => {
                        reserved += key;
                        driver += 1;
                        peak_reserved = peak_reserved.max(reserved);
                    }
                }
                live_keys[slot as usize] = key;
            }
            TraceEvent::Free { slot } => *cached.entry(live_keys[slot as usize]).or_default() += 1,
        }
    }
    PolicyFigures::baseline(keying.policy(), peak_reserved, trace.peak_live, trace.bytes_allocated(), driver, 0, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_keys_reuse_cached_buffers() {
        let t = Trace::parse(
            r#"{"events":[{"op":"alloc","id":"a","size":5},{"op":"free","id":"a"},{"op":"alloc","id":"b","size":7},
                {"op":"alloc","id":"c","size":6},{"op":"free","id":"b"},{"op":"free","id":"c"}]}"#,
        )
        .unwrap();
        let exact = simulate(&t, Keying::ExactSize);
        assert_eq!((exact.peak_reserved, exact.driver_allocations), (16, 2), "8 + 8: b reuses a's buffer");
        let pow2 = simulate(&t, Keying::PowerOfTwo);
        assert_eq!((pow2.peak_reserved, pow2.driver_allocations), (16, 2));
        assert_eq!(Keying::PowerOfTwo.key(1025), 2048);
        assert_eq!(Keying::ExactSize.key(0), 4);
    }
}
