//! The heap's segment policy on every eager trace in bench/data/traces, simulated (no device):
//! it stays within 1.15 x live plus 8 MiB, reserves no more than PyTorch's CUDA caching allocator
//! policy and calls the driver no more often, and keeps tiny workloads tiny, on every trace but
//! the known gaps below, which must not get worse.

use std::path::PathBuf;

use wgalloc_core::replay::{simulate, SimulationOptions, Trace};

const MIB: u64 = 1 << 20;

/// A trace on which the policy misses part of the target today: the reserved/live ratio and the
/// driver allocations it must stay at or below. Every other part of the target still holds.
struct Gap {
    trace: &'static str,
    ratio: f64,
    driver_allocations: u64,
}

/// PP-OCRv4 rec at 6x3x48x960 calls the driver once more than pytorch-cuda, and its 50-request
/// mix of shapes once more: a pair of 8.4 MiB requests comes when the arena holds one 15.9 MiB
/// segment (5 x the first request), room for the pair would cross the target for the bytes live,
/// and pytorch-cuda's first 20 MiB segment takes it (the mix: an idle arena merged into one
/// segment, a driver call that pays off on later shapes). PP-OCRv6 small rec at 6x3x48x320
/// reserves 1.284x against pytorch-cuda's 1.168x: its first phase fits one 20 MiB PyTorch
/// segment, which then takes the first of two 17 MiB outputs at the end. A trace missing here
/// must meet the target.
const KNOWN_GAPS: &[Gap] = &[
    Gap { trace: "ppocr-v4-rec.6x3x48x960", ratio: 1.21, driver_allocations: 6 },
    Gap { trace: "ppocr-v4-rec.mix", ratio: 1.12, driver_allocations: 9 },
    Gap { trace: "ppocr-v6-small-rec.6x3x48x320", ratio: 1.29, driver_allocations: 4 },
];

fn traces() -> Vec<(String, Trace)> {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../bench/data/traces"));
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(".trace.json"))
        .collect();
    files.sort();
    assert!(files.len() >= 20, "expected the bench/data/traces files, found {}", files.len());
    files
        .into_iter()
        .map(|f| {
            let text = std::fs::read_to_string(&f).unwrap();
            (f.file_name().unwrap().to_string_lossy().into_owned(), Trace::parse(&text).unwrap())
        })
        .collect()
}

#[test]
fn the_heap_policy_holds_on_every_trace() {
    let (mut log_sum, mut large) = (0.0, 0);
    let all = traces();
    for alignment in [32, 256] {
        let mut options = SimulationOptions::default();
        options.limits.alignment = alignment;
        for (name, trace) in &all {
            let sim = simulate(trace, &options).unwrap();
            let (ours, pytorch) = (&sim.wgalloc, &sim.baselines[0]);
            assert_eq!(pytorch.policy, "pytorch-cuda");
            let stem = name.trim_end_matches(".trace.json");
            let within = ours.peak_reserved as f64 <= 1.15 * ours.peak_live as f64 + (8 * MIB) as f64;
            assert!(within, "{name} at alignment {alignment}: {ours:?} above 1.15 x live + 8 MiB");
            match KNOWN_GAPS.iter().find(|gap| gap.trace == stem) {
                Some(gap) => assert!(
                    ours.ratio() <= gap.ratio && ours.driver_allocations <= gap.driver_allocations,
                    "{name}: reserved/live {:.3} (at most {}), {} driver allocations (at most {})",
                    ours.ratio(),
                    gap.ratio,
                    ours.driver_allocations,
                    gap.driver_allocations
                ),
                None => assert!(
                    ours.peak_reserved <= pytorch.peak_reserved
                        && ours.driver_allocations <= pytorch.driver_allocations,
                    "{name} at alignment {alignment}: {ours:?} against pytorch-cuda {pytorch:?}"
                ),
            }
            if ours.peak_live < 3 * MIB {
                // Tiny workloads: at most what the heap took before arenas (4 MiB, 3 driver calls).
                assert!(ours.peak_reserved <= 4 * MIB && ours.driver_allocations <= 3, "{name}: {ours:?}");
            } else if ours.peak_live >= 16 * MIB && alignment == 256 {
                log_sum += ours.ratio().ln();
                large += 1;
            }
        }
    }
    let geomean = (log_sum / large as f64).exp();
    assert!(geomean <= 1.17, "geometric mean of reserved/live over the large traces: {geomean:.3}");
}
