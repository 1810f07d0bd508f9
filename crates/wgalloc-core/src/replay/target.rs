//! The heap's target on a replayed trace, declared once; tests, the `heap_replay` example and
//! `wgalloc replay --json` report its verdict. In order of priority:
//! - bytes, on every trace: peak reserved <= 1.15 x peak live + 8 MiB ([`pool::target`]) and
//!   <= pytorch-cuda's peak reserved;
//! - driver allocations, as a total over a trace set: at most pytorch-cuda's total
//!   ([`SetTotals::driver_total_met`]), and on no trace more than 2 x its count + 2;
//! - compaction, on every trace: bytes moved <= 10% of the bytes the trace allocates.

use super::PolicyFigures;
use crate::heap::pool;

/// No trace makes more than `DRIVER_FACTOR` x pytorch-cuda's driver allocations + `DRIVER_SLACK`.
pub const DRIVER_FACTOR: u64 = 2;
pub const DRIVER_SLACK: u64 = 2;
/// Bytes moved by compaction stay within this share of the bytes a trace allocates (the
/// heap's own bound, Note [Moves within a tenth]).
pub const MOVED_SHARE: f64 = pool::MAX_MOVED_SHARE;

/// The parts of the target one trace misses (all `false`: the trace meets it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TargetMisses {
    /// Peak reserved above 1.15 x peak live + 8 MiB.
    pub over_live: bool,
    /// Peak reserved above pytorch-cuda's.
    pub over_pytorch: bool,
    /// Driver allocations above 2 x pytorch-cuda's + 2.
    pub driver_allocations: bool,
    /// Bytes moved above 10% of the bytes allocated.
    pub bytes_moved: bool,
}

impl TargetMisses {
    /// Stable names of the parts, in the order of [`TargetMisses::parts`].
    pub const PART_NAMES: [&'static str; 4] =
        ["reserved-over-live", "reserved-over-pytorch-cuda", "driver-allocations", "bytes-moved"];

    pub fn parts(&self) -> [bool; 4] {
        [self.over_live, self.over_pytorch, self.driver_allocations, self.bytes_moved]
    }

    pub fn met(&self) -> bool {
        !self.parts().contains(&true)
    }

    /// Names of the parts missed.
    pub fn missed(&self) -> Vec<&'static str> {
        Self::PART_NAMES.iter().zip(self.parts()).filter(|(_, miss)| *miss).map(|(name, _)| *name).collect()
    }
}

/// The per-trace bounds on a trace whose pytorch-cuda baseline is `pytorch` (a replay on a
/// device is judged against them too: `wgalloc replay --json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TargetBounds {
    /// 1.15 x peak live + 8 MiB.
    pub reserved_over_live: u64,
    /// pytorch-cuda's peak reserved.
    pub reserved_pytorch: u64,
    /// 2 x pytorch-cuda's driver allocations + 2.
    pub driver_allocations: u64,
    /// 10% of the bytes the trace allocates.
    pub bytes_moved: u64,
    /// A warm start's peak reserved: [`warm_bound`] of the peak live bytes.
    pub warm_reserved: u64,
}

impl TargetBounds {
    pub fn of(pytorch: &PolicyFigures) -> TargetBounds {
        TargetBounds {
            reserved_over_live: pool::target(pytorch.peak_live),
            reserved_pytorch: pytorch.peak_reserved,
            driver_allocations: driver_bound(pytorch.driver_allocations),
            bytes_moved: (MOVED_SHARE * pytorch.bytes_allocated as f64) as u64,
            warm_reserved: warm_bound(pytorch.peak_live),
        }
    }

    /// Which parts `ours` misses.
    pub fn check(&self, ours: &PolicyFigures) -> TargetMisses {
        TargetMisses {
            over_live: ours.peak_reserved > self.reserved_over_live,
            over_pytorch: ours.peak_reserved > self.reserved_pytorch,
            driver_allocations: ours.driver_allocations > self.driver_allocations,
            bytes_moved: ours.bytes_moved > self.bytes_moved,
        }
    }
}

/// Which parts of the per-trace target `ours` misses against `pytorch` (the pytorch-cuda
/// baseline on the same trace).
pub fn check(ours: &PolicyFigures, pytorch: &PolicyFigures) -> TargetMisses {
    TargetBounds::of(pytorch).check(ours)
}

/// The most driver allocations one trace may make where pytorch-cuda makes `pytorch`.
pub fn driver_bound(pytorch: u64) -> u64 {
    DRIVER_FACTOR.saturating_mul(pytorch).saturating_add(DRIVER_SLACK)
}

/// A trace set's figures: traces, misses per part, and the totals the set-level part compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SetTotals {
    pub traces: usize,
    /// Traces meeting every per-trace part.
    pub met: usize,
    /// Traces missing each part, in the order of [`TargetMisses::PART_NAMES`].
    pub misses: [usize; 4],
    pub driver_allocations: u64,
    pub pytorch_driver_allocations: u64,
    pub driver_frees: u64,
    pub bytes_moved: u64,
    pub bytes_allocated: u64,
}

impl SetTotals {
    /// Adds one trace; returns its verdict.
    pub fn add(&mut self, ours: &PolicyFigures, pytorch: &PolicyFigures) -> TargetMisses {
        let verdict = check(ours, pytorch);
        self.traces += 1;
        self.met += verdict.met() as usize;
        for (count, miss) in self.misses.iter_mut().zip(verdict.parts()) {
            *count += miss as usize;
        }
        self.driver_allocations += ours.driver_allocations;
        self.pytorch_driver_allocations += pytorch.driver_allocations;
        self.driver_frees += ours.driver_frees;
        self.bytes_moved += ours.bytes_moved;
        self.bytes_allocated += ours.bytes_allocated;
        verdict
    }

    /// The set-level part: driver allocations summed over the set at most pytorch-cuda's sum.
    pub fn driver_total_met(&self) -> bool {
        self.driver_allocations <= self.pytorch_driver_allocations
    }

    /// Every trace meets the per-trace parts and the set meets the driver total.
    pub fn met(&self) -> bool {
        self.met == self.traces && self.driver_total_met()
    }
}

/// The warm start's target (docs/performance.md, "Warm starts"), per pair of a profile and a
/// draw replayed from it: peak reserved <= `WARM_FACTOR` x peak live + `WARM_HEADROOM`; no
/// driver allocation after the warm start on `WARM_NO_DRIVER_SHARE` of the pairs; every pair
/// within the bytes part of the replay target (and its moves within `MOVED_SHARE`).
pub const WARM_FACTOR: f64 = 1.05;
pub const WARM_HEADROOM: u64 = 2 << 20;
pub const WARM_NO_DRIVER_SHARE: f64 = 0.9;

/// The most a warm heap may reserve for `live` bytes: `WARM_FACTOR` x live + `WARM_HEADROOM`.
pub fn warm_bound(live: u64) -> u64 {
    (WARM_FACTOR * live as f64) as u64 + WARM_HEADROOM
}

/// The parts of the warm start's target one pair misses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WarmMisses {
    /// Peak reserved above 1.05 x the draw's peak live + 2 MiB.
    pub over_live: bool,
    /// Peak reserved above 1.05 x the larger of the profile's peak live and the draw's + 2 MiB:
    /// the bound where a draw peaks below the profile it starts from is the profile's.
    pub over_known_peak: bool,
    /// A driver allocation after the warm start.
    pub driver_allocations: bool,
    /// Above 1.15 x the draw's peak live + 8 MiB or above pytorch-cuda's peak reserved.
    pub over_bytes: bool,
    /// Above pytorch-cuda's peak reserved alone.
    pub over_pytorch: bool,
    /// Bytes moved above 10% of the bytes allocated.
    pub bytes_moved: bool,
}

impl WarmMisses {
    /// `warm`: the draw replayed from a profile whose peak live was `profile_peak`; `pytorch`:
    /// pytorch-cuda on the same draw.
    pub fn of(warm: &PolicyFigures, pytorch: &PolicyFigures, profile_peak: u64) -> WarmMisses {
        let replay = check(warm, pytorch);
        WarmMisses {
            over_live: warm.peak_reserved > warm_bound(warm.peak_live),
            over_known_peak: warm.peak_reserved > warm_bound(warm.peak_live.max(profile_peak)),
            driver_allocations: warm.driver_allocations > 0,
            over_bytes: replay.over_live || replay.over_pytorch,
            over_pytorch: replay.over_pytorch,
            bytes_moved: replay.bytes_moved,
        }
    }

    /// Short names of the parts, in the order of [`WarmMisses::parts`].
    pub const PART_NAMES: [&'static str; 6] = ["live", "known peak", "driver", "bytes", "pytorch-cuda", "moves"];

    pub fn parts(&self) -> [bool; 6] {
        [
            self.over_live,
            self.over_known_peak,
            self.driver_allocations,
            self.over_bytes,
            self.over_pytorch,
            self.bytes_moved,
        ]
    }

    /// Names of the parts missed.
    pub fn missed(&self) -> Vec<&'static str> {
        Self::PART_NAMES.iter().zip(self.parts()).filter(|(_, miss)| *miss).map(|(name, _)| *name).collect()
    }
}

/// Pairs counted by the parts of the warm start's target they meet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WarmTotals {
    pub pairs: usize,
    pub within_live: usize,
    pub within_known_peak: usize,
    pub no_driver: usize,
    pub within_bytes: usize,
    pub within_pytorch: usize,
    pub within_moves: usize,
}

impl WarmTotals {
    pub fn add(&mut self, m: WarmMisses) {
        self.pairs += 1;
        self.within_live += !m.over_live as usize;
        self.within_known_peak += !m.over_known_peak as usize;
        self.no_driver += !m.driver_allocations as usize;
        self.within_bytes += !m.over_bytes as usize;
        self.within_pytorch += !m.over_pytorch as usize;
        self.within_moves += !m.bytes_moved as usize;
    }

    /// No driver allocation after the warm start on `WARM_NO_DRIVER_SHARE` of the pairs.
    pub fn no_driver_met(&self) -> bool {
        self.no_driver as f64 >= WARM_NO_DRIVER_SHARE * self.pairs as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn figures(policy: &'static str, reserved: u64, driver: u64, moved: u64) -> PolicyFigures {
        PolicyFigures {
            bytes_moved: moved,
            ..PolicyFigures::baseline(policy, reserved, 100 * MIB, 1000 * MIB, driver, 0, 0)
        }
    }

    #[test]
    fn each_part_is_judged_at_its_bound() {
        let pytorch = figures("pytorch-cuda", 200 * MIB, 10, 0);
        let at = |reserved, driver, moved| check(&figures("wgalloc", reserved, driver, moved), &pytorch);
        // 1.15 x 100 MiB + 8 MiB = 123 MiB; 2 x 10 + 2 = 22 calls; 10% of 1000 MiB = 100 MiB
        // (the byte bounds within one byte, as the products round).
        let (reserved, moved) = (123 * MIB, 100 * MIB);
        assert!(at(reserved - 1, 22, moved - 1).met());
        assert_eq!(at(reserved + 1, 22, moved - 1).missed(), ["reserved-over-live"]);
        assert_eq!(at(reserved - 1, 23, moved - 1).missed(), ["driver-allocations"]);
        assert_eq!(at(reserved - 1, 22, moved + 1).missed(), ["bytes-moved"]);
        assert_eq!(at(reserved + 1, 23, moved + 1).missed().len(), 3);
        let small = figures("pytorch-cuda", 120 * MIB, 10, 0);
        let v = check(&figures("wgalloc", 121 * MIB, 10, 0), &small);
        assert_eq!(v.missed(), ["reserved-over-pytorch-cuda"]);
    }

    #[test]
    fn each_part_of_the_warm_target_is_judged_at_its_bound() {
        // 100 MiB live: 1.05 x 100 + 2 = 107 MiB; with a profile that peaked at 120 MiB, 128 MiB.
        let pytorch = figures("pytorch-cuda", 200 * MIB, 10, 0);
        let warm = |reserved, driver| WarmMisses::of(&figures("wgalloc", reserved, driver, 0), &pytorch, 120 * MIB);
        assert_eq!(warm(107 * MIB, 0), WarmMisses::default());
        assert_eq!(warm(107 * MIB + 1, 0), WarmMisses { over_live: true, ..Default::default() });
        // Past 128 MiB, above the bytes part's 1.15 x 100 + 8 = 123 MiB too.
        let over_all = WarmMisses { over_live: true, over_known_peak: true, over_bytes: true, ..Default::default() };
        assert_eq!(warm(128 * MIB + 1, 0), over_all);
        assert_eq!(warm(107 * MIB, 1), WarmMisses { driver_allocations: true, ..Default::default() });
        let bytes = WarmMisses::of(&figures("wgalloc", 124 * MIB, 0, 0), &pytorch, 0);
        assert!(bytes.over_bytes && !bytes.over_pytorch, "above 1.15 x 100 + 8 = 123 MiB: {bytes:?}");
        let small = figures("pytorch-cuda", 106 * MIB, 10, 0);
        let v = WarmMisses::of(&figures("wgalloc", 107 * MIB, 0, 0), &small, 0);
        assert!(v.over_bytes && v.over_pytorch && !v.over_live, "{v:?}");
        let mut totals = WarmTotals::default();
        for driver in [0, 0, 0, 0, 0, 0, 0, 0, 0, 1] {
            totals.add(warm(107 * MIB, driver));
        }
        assert!(totals.no_driver_met(), "9 of 10: {totals:?}");
        totals.add(warm(107 * MIB, 1));
        assert!(!totals.no_driver_met(), "9 of 11: {totals:?}");
    }

    #[test]
    fn the_driver_total_is_a_set_level_part() {
        let mut set = SetTotals::default();
        // 5 calls against 2 on one trace (within 2 x 2 + 2), 3 against 8 on another: 8 <= 10.
        let pytorch = |driver| figures("pytorch-cuda", 200 * MIB, driver, 0);
        assert!(set.add(&figures("wgalloc", 110 * MIB, 5, 0), &pytorch(2)).met());
        assert!(set.add(&figures("wgalloc", 110 * MIB, 3, 0), &pytorch(8)).met());
        assert!(set.met() && set.driver_total_met(), "{set:?}");
        set.add(&figures("wgalloc", 110 * MIB, 6, 0), &pytorch(2));
        assert_eq!((set.traces, set.met, set.misses), (3, 3, [0; 4]));
        assert!(!set.driver_total_met(), "14 calls against pytorch-cuda's 12: {set:?}");
    }
}
