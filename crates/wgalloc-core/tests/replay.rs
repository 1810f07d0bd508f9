//! The heap's segment policy on every eager trace in bench/data/traces, simulated (no device):
//! it stays within 1.15 x live plus 8 MiB, reserves no more than PyTorch's CUDA caching allocator
//! policy and calls the driver no more often, and keeps tiny workloads tiny, on every trace but
//! the known gaps below, which must not get worse.

use std::path::PathBuf;

use wgalloc_core::replay::{simulate, simulate_heap, PolicyFigures, SimulationOptions, Trace};

const MIB: u64 = 1 << 20;

/// A trace on which the policy misses part of the target today: the reserved/live ratio and the
/// driver allocations it must stay at or below. Every other part of the target still holds.
struct Gap {
    trace: &'static str,
    ratio: f64,
    driver_allocations: u64,
}

/// PP-OCRv4 rec at 6x3x48x960 calls the driver once more than pytorch-cuda: a pair of 8.4 MiB
/// requests comes when the arena holds one 12.7 MiB segment (the floor, 4 x the first request),
/// room for the pair would cross the target for the bytes live, and pytorch-cuda's first 20 MiB
/// segment takes it. PP-OCRv6 small rec at 6x3x48x320 reserves 1.284x against pytorch-cuda's
/// 1.168x and calls the driver 5 times against 3: its first phase fits one 20 MiB PyTorch
/// segment, which then takes the first of two 17 MiB outputs at the end (4 driver calls while
/// the floor was 5 x the request; that bound fixed three other traces). A trace missing here
/// must meet the target.
const KNOWN_GAPS: &[Gap] = &[
    Gap { trace: "ppocr-v4-rec.6x3x48x960", ratio: 1.21, driver_allocations: 6 },
    Gap { trace: "ppocr-v6-small-rec.6x3x48x320", ratio: 1.29, driver_allocations: 5 },
];

/// Held-out architectures (bench/data/synthetic, generated from tensor shapes; the policy was
/// not tuned on them) where it misses part of the target today, each with the reserved/live
/// ratio and driver allocations it must stay at or below:
/// - `bert.mix`: the attention scores of one request are larger than any tensor before. The
///   idle arena merged into one 150 MiB segment (its growth budget when 135 MiB was the most
///   ever live) takes the first of two 84 MiB tensors; it cannot hold both, so the second gets
///   a segment of its own (1.237 against 1.192 allowed). No plan of moves helps: the two
///   tensors need 168 MiB of ranges in segments of 150 and 84. (`vit.mix`, 1.399 before the
///   top-up, meets the target: its merged segment could hold both of its large tensors once
///   the small blocks around the first moved to a segment of what the budget left.)
/// - `unet.mix`: one driver call more than pytorch-cuda (7 against 6), whose 20 MiB segments
///   hold the 3-9 MiB tensors that come later; ours, sized to the bytes live, fill up first.
const SYNTHETIC_GAPS: &[Gap] = &[
    Gap { trace: "bert.mix", ratio: 1.24, driver_allocations: 12 },
    Gap { trace: "unet.mix", ratio: 1.09, driver_allocations: 7 },
];

/// Whether trace `name` is one of `gaps`, after checking that it got no worse than its gap.
fn holds_its_gap(gaps: &[Gap], name: &str, ours: &PolicyFigures) -> bool {
    let Some(gap) = gaps.iter().find(|gap| gap.trace == name.trim_end_matches(".trace.json")) else {
        return false;
    };
    assert!(
        ours.ratio() <= gap.ratio && ours.driver_allocations <= gap.driver_allocations,
        "{name}: reserved/live {:.3} (at most {}), {} driver allocations (at most {})",
        ours.ratio(),
        gap.ratio,
        ours.driver_allocations,
        gap.driver_allocations
    );
    true
}

fn traces(folder: &str, at_least: usize) -> Vec<(String, Trace)> {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../bench/data")).join(folder);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(".trace.json"))
        .collect();
    files.sort();
    assert!(files.len() >= at_least, "expected the bench/data/{folder} files, found {}", files.len());
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
    let all = traces("traces", 20);
    for alignment in [32, 256] {
        let mut options = SimulationOptions::default();
        options.limits.alignment = alignment;
        for (name, trace) in &all {
            let sim = simulate(trace, &options).unwrap();
            let (ours, pytorch) = (&sim.wgalloc, &sim.baselines[0]);
            assert_eq!(pytorch.policy, "pytorch-cuda");
            let within = ours.peak_reserved as f64 <= 1.15 * ours.peak_live as f64 + (8 * MIB) as f64;
            assert!(within, "{name} at alignment {alignment}: {ours:?} above 1.15 x live + 8 MiB");
            if !holds_its_gap(KNOWN_GAPS, name, ours) {
                assert!(
                    ours.peak_reserved <= pytorch.peak_reserved
                        && ours.driver_allocations <= pytorch.driver_allocations,
                    "{name} at alignment {alignment}: {ours:?} against pytorch-cuda {pytorch:?}"
                );
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

#[test]
fn held_out_architectures_stay_within_their_known_gaps() {
    for alignment in [32, 256] {
        let mut options = SimulationOptions::default();
        options.limits.alignment = alignment;
        for (name, trace) in &traces("synthetic", 28) {
            let sim = simulate(trace, &options).unwrap();
            let (ours, pytorch) = (&sim.wgalloc, &sim.baselines[0]);
            if !holds_its_gap(SYNTHETIC_GAPS, name, ours) {
                assert!(
                    ours.peak_reserved as f64 <= 1.15 * ours.peak_live as f64 + (8 * MIB) as f64
                        && ours.peak_reserved <= pytorch.peak_reserved
                        && ours.driver_allocations <= pytorch.driver_allocations,
                    "{name} at alignment {alignment}: {ours:?} against pytorch-cuda {pytorch:?}"
                );
            }
        }
    }
}

/// Ten identical training steps: the heap calls the driver in the first two only (the second
/// begins by merging the idle arena), 35 times in all (pytorch-cuda: 57). Before a large miss
/// took back the idle bytes it released and grew the arena by an eighth, the backward passes
/// dropped segments that the next forward passes regrew, into the third step (69 in all).
#[test]
fn repeated_training_steps_stop_calling_the_driver_after_the_second() {
    let (_, trace) = traces("synthetic", 28)
        .into_iter()
        .find(|(name, _)| name == "resnet-train.steps32.trace.json")
        .expect("bench/data/synthetic/resnet-train.steps32.trace.json");
    assert_eq!(trace.requests, 10);
    let step = trace.events.len() / 10;
    let two_steps = Trace { events: trace.events[..2 * step].to_vec(), ..trace.clone() };
    let options = SimulationOptions::default();
    let all = simulate_heap(&trace, &options).unwrap();
    let first_two = simulate_heap(&two_steps, &options).unwrap();
    assert_eq!(
        all.driver_allocations, first_two.driver_allocations,
        "{all:?} after ten steps, {first_two:?} after two"
    );
    assert_eq!(all.peak_reserved, first_two.peak_reserved);
    assert!(all.driver_allocations <= 35, "{all:?}");
}

/// No policy that sees a trace one event at a time can meet every part of the target on every
/// trace: two traces that begin alike can need opposite first segments. After one 1.05 MiB
/// request, a trace that ends there allows 1.15 x 1.05 + 8 = 9.2 MiB, while one that goes on to
/// two 8 MiB requests needs its first segment to hold all 17.05 MiB to call the driver once, as
/// pytorch-cuda does (a request under 10 MiB gets a 20 MiB segment). The heap keeps to the bytes
/// and calls the driver again; the driver-call misses above are of this kind.
#[test]
fn two_traces_that_begin_alike_cannot_both_meet_every_part_of_the_target() {
    let first = MIB + MIB / 20;
    let alone = format!(r#"{{"events":[{{"op":"alloc","id":"a","size":{first}}},{{"op":"free","id":"a"}}]}}"#);
    let grown = format!(
        r#"{{"events":[{{"op":"alloc","id":"a","size":{first}}},{{"op":"alloc","id":"b","size":{eight}}},
        {{"op":"alloc","id":"c","size":{eight}}},{{"op":"free","id":"a"}},{{"op":"free","id":"b"}},{{"op":"free","id":"c"}}]}}"#,
        eight = 8 * MIB
    );
    let options = SimulationOptions::default();
    let [alone, grown] = [alone, grown].map(|text| simulate(&Trace::parse(&text).unwrap(), &options).unwrap());
    let target = |f: &PolicyFigures| (1.15 * f.peak_live as f64) as u64 + 8 * MIB;
    for sim in [&alone, &grown] {
        let pytorch = &sim.baselines[0];
        assert_eq!((pytorch.peak_reserved, pytorch.driver_allocations), (20 * MIB, 1), "{pytorch:?}");
        assert!(sim.wgalloc.peak_reserved <= target(&sim.wgalloc), "{sim:?}");
    }
    assert!(alone.wgalloc.peak_reserved <= alone.baselines[0].peak_reserved, "{alone:?}");
    // The first segment is made before the traces part: within the lone request's target, it
    // cannot hold the grown trace's live bytes, so that trace needs a second driver call.
    assert!(target(&alone.wgalloc) < grown.wgalloc.peak_live);
    assert_eq!(alone.wgalloc.driver_allocations, 1, "{alone:?}");
    assert!(grown.wgalloc.driver_allocations > 1, "{grown:?}");
}
