//! The heap's segment policy on every eager trace in bench/data/traces, simulated (no device):
//! it reserves no more than PyTorch's CUDA caching allocator policy, stays within
//! 1.15 x live plus 8 MiB, and keeps small workloads small, on every trace but the known gaps
//! below, which must not get worse.

use std::path::PathBuf;

use wgalloc_core::replay::{simulate, SimulationOptions, Trace};

const MIB: u64 = 1 << 20;

/// Traces on which the policy misses part of the target today, with the reserved/live ratio each
/// must stay at or below; a trace missing here must meet the target. PP-OCRv6 small rec at
/// 6x3x48x320 reserves 1.284x against pytorch-cuda's 1.168x: its first phase fits one 20 MiB
/// PyTorch segment, which then takes the first of two 17 MiB outputs at the end.
const KNOWN_GAPS: &[(&str, f64)] = &[("ppocr-v6-small-rec.6x3x48x320", 1.29)];

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
            let meets = ours.peak_reserved <= pytorch.peak_reserved
                && ours.peak_reserved as f64 <= 1.15 * ours.peak_live as f64 + (8 * MIB) as f64;
            match KNOWN_GAPS.iter().find(|(gap, _)| *gap == stem) {
                Some((_, bound)) => {
                    assert!(ours.ratio() <= *bound, "{name}: reserved/live {:.3} above {bound}", ours.ratio())
                }
                None => assert!(meets, "{name} at alignment {alignment}: {ours:?} against pytorch-cuda {pytorch:?}"),
            }
            if ours.peak_live < 8 * MIB {
                // Small workloads: at most what the heap took before arenas (4 MiB, 3 driver calls).
                assert!(ours.peak_reserved <= 4 * MIB && ours.driver_allocations <= 3, "{name}: {ours:?}");
            } else if ours.peak_live >= 16 * MIB && alignment == 256 {
                log_sum += ours.ratio().ln();
                large += 1;
            }
        }
    }
    let geomean = (log_sum / large as f64).exp();
    assert!(geomean <= 1.18, "geometric mean of reserved/live over the large traces: {geomean:.3}");
}
