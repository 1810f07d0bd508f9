//! Pools and size classes, after MPSAllocator: usage class x size class, plus a
//! scalar pool, and the segment (heap) size chosen for a request.

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

/// Requests up to this size go to a small pool.
pub const MAX_SMALL_ALLOC: u64 = MIB;
/// Largest segment of small pools (MPS's small heap).
pub const SMALL_HEAP: u64 = 8 * MIB;
/// Largest segment of large pools for requests below `MIN_LARGE_ALLOC` (MPS's large heap).
pub const LARGE_HEAP: u64 = 32 * MIB;
/// First segment of a small / large pool. Later segments grow with the pool (each as
/// big as the pool already is) up to the MPS sizes, so a small workload is not
/// charged a whole 8 or 32 MiB heap while a big one still gets few driver calls.
pub const SMALL_HEAP_MIN: u64 = MIB;
pub const LARGE_HEAP_MIN: u64 = 4 * MIB;
/// From this size a request gets a segment of its own, rounded to `ROUND_LARGE`.
pub const MIN_LARGE_ALLOC: u64 = 10 * MIB;
pub const ROUND_LARGE: u64 = 2 * MIB;
/// Scalar values (uniforms, small constants) live in small segments of their own.
pub const MAX_SCALAR: u64 = 64 * KIB;
pub const SCALAR_HEAP: u64 = 256 * KIB;

/// What a block is for: decides its wgpu usage flags and pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Usage {
    /// Device-local: STORAGE | COPY_SRC | COPY_DST.
    Device,
    /// Mappable and bindable where the adapter has MAPPABLE_PRIMARY_BUFFERS.
    Shared,
}

impl Usage {
    pub fn parse(name: &str) -> Option<Usage> {
        match name {
            "device" | "private" => Some(Usage::Device),
            "shared" => Some(Usage::Shared),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PoolKind {
    DeviceSmall,
    DeviceLarge,
    SharedSmall,
    SharedLarge,
    Scalar,
}

impl PoolKind {
    pub const ALL: [PoolKind; 5] =
        [PoolKind::DeviceSmall, PoolKind::DeviceLarge, PoolKind::SharedSmall, PoolKind::SharedLarge, PoolKind::Scalar];

    pub fn index(self) -> usize {
        self as usize
    }

    pub fn as_str(self) -> &'static str {
        match self {
            PoolKind::DeviceSmall => "device-small",
            PoolKind::DeviceLarge => "device-large",
            PoolKind::SharedSmall => "shared-small",
            PoolKind::SharedLarge => "shared-large",
            PoolKind::Scalar => "scalar",
        }
    }

    pub fn for_request(usage: Usage, aligned_size: u64) -> PoolKind {
        let small = aligned_size <= MAX_SMALL_ALLOC;
        match (usage, small) {
            (Usage::Device, true) => PoolKind::DeviceSmall,
            (Usage::Device, false) => PoolKind::DeviceLarge,
            (Usage::Shared, true) => PoolKind::SharedSmall,
            (Usage::Shared, false) => PoolKind::SharedLarge,
        }
    }

    pub fn is_shared(self) -> bool {
        matches!(self, PoolKind::SharedSmall | PoolKind::SharedLarge)
    }

    /// wgpu usage flags of this pool's segments.
    pub fn buffer_usages(self, mappable_primary: bool) -> wgpu::BufferUsages {
        use wgpu::BufferUsages as U;
        let device = U::STORAGE | U::COPY_SRC | U::COPY_DST;
        match self {
            PoolKind::DeviceSmall | PoolKind::DeviceLarge => device,
            PoolKind::SharedSmall | PoolKind::SharedLarge if mappable_primary => device | U::MAP_READ | U::MAP_WRITE,
            PoolKind::SharedSmall | PoolKind::SharedLarge => device,
            PoolKind::Scalar => device | U::UNIFORM,
        }
    }
}

/// The segment size for a block of `aligned_size` bytes in `pool`, which already
/// reserves `pool_reserved` bytes: MPS's heap sizes as the ceiling, reached by
/// doubling, capped by the device's max buffer size. `dedicated` segments hold one
/// block (requests too big for a shared heap, or above the binding limit).
pub fn segment_size(
    pool: PoolKind,
    aligned_size: u64,
    pool_reserved: u64,
    max_buffer_size: u64,
    max_binding: u64,
) -> (u64, bool) {
    let round = |v: u64, to: u64| v.div_ceil(to).saturating_mul(to);
    if aligned_size > max_binding {
        return (aligned_size, true);
    }
    let grown = |min: u64, max: u64| pool_reserved.clamp(min, max);
    let (size, dedicated) = match pool {
        PoolKind::Scalar => (SCALAR_HEAP, false),
        PoolKind::DeviceSmall | PoolKind::SharedSmall => (grown(SMALL_HEAP_MIN, SMALL_HEAP), false),
        _ if aligned_size < MIN_LARGE_ALLOC => {
            (round(grown(LARGE_HEAP_MIN, LARGE_HEAP).max(aligned_size), ROUND_LARGE), false)
        }
        _ => (round(aligned_size, ROUND_LARGE), true),
    };
    // A heap never exceeds the device's max buffer size, nor is smaller than the request.
    (size.min(max_buffer_size).max(aligned_size), dedicated)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_mps() {
        let max = 2 << 30;
        let bind = 128 * MIB;
        // Pools start small and double up to the MPS heap sizes.
        assert_eq!(segment_size(PoolKind::DeviceSmall, 256, 0, max, bind), (SMALL_HEAP_MIN, false));
        assert_eq!(segment_size(PoolKind::DeviceSmall, 256, 3 * MIB, max, bind), (3 * MIB, false));
        assert_eq!(segment_size(PoolKind::DeviceSmall, 256, 64 * MIB, max, bind), (SMALL_HEAP, false));
        assert_eq!(segment_size(PoolKind::DeviceLarge, 2 * MIB, 0, max, bind), (LARGE_HEAP_MIN, false));
        assert_eq!(segment_size(PoolKind::DeviceLarge, 6 * MIB, 0, max, bind), (6 * MIB, false));
        assert_eq!(segment_size(PoolKind::DeviceLarge, 2 * MIB, 100 * MIB, max, bind), (LARGE_HEAP, false));
        assert_eq!(segment_size(PoolKind::DeviceLarge, 11 * MIB, 0, max, bind), (12 * MIB, true));
        assert_eq!(segment_size(PoolKind::DeviceLarge, 200 * MIB, 0, max, bind), (200 * MIB, true));
        // Capped by the max buffer size.
        assert_eq!(segment_size(PoolKind::DeviceSmall, 256, 64 * MIB, 4 * MIB, bind), (4 * MIB, false));
        assert_eq!(PoolKind::for_request(Usage::Device, MIB), PoolKind::DeviceSmall);
        assert_eq!(PoolKind::for_request(Usage::Shared, MIB + 256), PoolKind::SharedLarge);
    }
}
