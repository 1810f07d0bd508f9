//! The heap's policy on every eager trace of `bench/data`, simulated (no device), held to the
//! target of `replay::target`: bytes within 1.15 x live + 8 MiB and within pytorch-cuda's on every
//! trace, driver allocations within pytorch-cuda's total per set and 2 x its count + 2 per trace,
//! bytes moved within 10% of the bytes allocated. A trace that misses a part today is listed below
//! with its figures: the test fails if it gets worse, and if it meets the target while listed.

use std::path::PathBuf;

use wgalloc_core::replay::{
    simulate, simulate_heap, simulate_heap_from, simulate_pytorch_cuda, PolicyFigures, SetTotals, SimulationOptions,
    Trace, WarmMisses, WarmTotals,
};

const MIB: u64 = 1 << 20;

/// A trace that misses part of the target today: the parts it misses (names of
/// `TargetMisses::PART_NAMES`) and the figures it must stay at or below.
struct KnownMiss {
    trace: &'static str,
    missed: &'static [&'static str],
    /// Peak reserved / peak live.
    ratio: f64,
    driver_allocations: u64,
    /// Bytes moved / bytes allocated.
    moved_share: f64,
}

/// Recorded traces (`bench/data/traces`): every one meets the target.
const RECORDED_MISSES: &[KnownMiss] = &[];

/// Generated architectures (`bench/data/synthetic`).
/// - `bert.mix`: the attention scores of one request are larger than any tensor before. The
///   idle arena merged into one 150 MiB segment (its growth budget when 135 MiB was the most
///   ever live) takes the first of two 84 MiB tensors; it cannot hold both, so the second gets
///   a segment of its own (1.237 against 1.192 allowed).
const SYNTHETIC_MISSES: &[KnownMiss] = &[KnownMiss {
    trace: "bert.mix",
    missed: &["reserved-over-live"],
    ratio: 1.238,
    driver_allocations: 15,
    moved_share: 0.025,
}];

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
            let name = f.file_name().unwrap().to_string_lossy().trim_end_matches(".trace.json").to_string();
            (name, Trace::parse(&text).unwrap())
        })
        .collect()
}

/// Every trace of `folder` meets the target but the `known` misses, which miss exactly their
/// parts and stay within their figures; the set's driver total stays within pytorch-cuda's.
/// Returns the geometric mean of reserved/live over the traces above 16 MiB live, at alignment 256.
fn holds_the_target(folder: &str, at_least: usize, known: &[KnownMiss]) -> f64 {
    let all = traces(folder, at_least);
    for miss in known {
        assert!(all.iter().any(|(name, _)| name == miss.trace), "{}: no such trace in {folder}", miss.trace);
    }
    let (mut log_sum, mut large) = (0.0, 0);
    for alignment in [32, 256] {
        let mut options = SimulationOptions::default();
        options.limits.alignment = alignment;
        let mut set = SetTotals::default();
        for (name, trace) in &all {
            let sim = simulate(trace, &options).unwrap();
            let (ours, pytorch) = (&sim.wgalloc, &sim.baselines[0]);
            assert_eq!(pytorch.policy, "pytorch-cuda");
            let verdict = set.add(ours, pytorch);
            let moved_share = ours.bytes_moved as f64 / ours.bytes_allocated.max(1) as f64;
            let at = format!("{folder}/{name} at alignment {alignment}: {ours:?} against pytorch-cuda {pytorch:?}");
            match known.iter().find(|miss| miss.trace == name) {
                Some(miss) => {
                    assert_eq!(verdict.missed(), miss.missed, "{at}: update its known miss");
                    assert!(
                        ours.ratio() <= miss.ratio
                            && ours.driver_allocations <= miss.driver_allocations
                            && moved_share <= miss.moved_share,
                        "{at}: worse than its known miss (moved {moved_share:.3} of the bytes allocated)"
                    );
                }
                None => assert!(verdict.met(), "{at}: misses {:?}", verdict.missed()),
            }
            if ours.peak_live < 3 * MIB {
                // Tiny workloads: at most what the heap took before arenas (4 MiB, 3 driver calls).
                assert!(ours.peak_reserved <= 4 * MIB && ours.driver_allocations <= 3, "{at}");
            } else if ours.peak_live >= 16 * MIB && alignment == 256 {
                log_sum += ours.ratio().ln();
                large += 1;
            }
        }
        assert!(set.driver_total_met(), "{folder} at alignment {alignment}: {set:?}");
    }
    (log_sum / large.max(1) as f64).exp()
}

#[test]
fn recorded_traces_meet_the_target_but_their_known_misses() {
    let geomean = holds_the_target("traces", 46, RECORDED_MISSES);
    assert!(geomean <= 1.17, "geometric mean of reserved/live over the large traces: {geomean:.3}");
}

#[test]
fn generated_traces_meet_the_target_but_their_known_misses() {
    let geomean = holds_the_target("synthetic", 28, SYNTHETIC_MISSES);
    assert!(geomean <= 1.17, "geometric mean of reserved/live over the large traces: {geomean:.3}");
}

/// Ten identical training steps: the heap calls the driver in the first two only (the second
/// begins by merging the idle arena), 35 times in all (pytorch-cuda: 57). Before a large miss
/// took back the idle bytes it released and grew the arena by an eighth, the backward passes
/// dropped segments that the next forward passes regrew, into the third step (69 in all).
#[test]
fn repeated_training_steps_stop_calling_the_driver_after_the_second() {
    let (_, trace) = traces("synthetic", 28)
        .into_iter()
        .find(|(name, _)| name == "resnet-train.steps32")
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
/// and calls the driver again: driver allocations are held as a total over a set, bytes per trace.
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
    let target = |f: &PolicyFigures| wgalloc_core::heap::pool::target(f.peak_live);
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

/// A committed mix whose halves miss part of the warm start's target: the parts (fields of
/// `WarmMisses` that are set) and the peak reserved / live it must stay at or below.
struct WarmMiss {
    mix: &'static str,
    missed: &'static [&'static str],
    ratio: f64,
}

/// The halves of every committed serving mix and pipeline: the second half replayed from the
/// profile of the first (Note [Growth past a warm start], [Profiles accumulate]).
/// - The three detection mixes' second halves peak 23% below their first (76.8 against 100.2
///   MiB): the warm reservation of the first is 1.34 x the second's live.
/// - `ddddocr-rec`, and the generated `bert`, `vit` and `yolo` mixes, peak past their first half:
///   the heap grows, and where the warm segment cannot hold two of the larger tensors (`vit`:
///   two of 121.9 MiB in 242.8 MiB) a segment of the tensor's size is the least it can add.
/// - The generated `gpt-decode` mix's second half peaks at half its first (49.5 against 99 MiB).
const WARM_MISSES: &[WarmMiss] = &[
    WarmMiss { mix: "traces/ddddocr-rec.mix", missed: &["driver"], ratio: 1.078 },
    WarmMiss { mix: "traces/ppocr-v4-det.mix", missed: &["live", "bytes"], ratio: 1.345 },
    WarmMiss { mix: "traces/ppocr-v4-seal-det.mix", missed: &["live", "bytes"], ratio: 1.345 },
    WarmMiss { mix: "traces/ppocr-v6-small-det.mix", missed: &["live", "bytes"], ratio: 1.345 },
    WarmMiss { mix: "synthetic/bert.mix", missed: &["live", "known peak", "driver"], ratio: 1.180 },
    WarmMiss { mix: "synthetic/gpt-decode.mix", missed: &["live", "bytes", "pytorch-cuda"], ratio: 2.062 },
    WarmMiss { mix: "synthetic/vit.mix", missed: &["live", "known peak", "driver", "bytes"], ratio: 1.347 },
    WarmMiss { mix: "synthetic/yolo.mix", missed: &["live", "known peak", "driver"], ratio: 1.204 },
];

#[test]
fn warm_starts_of_the_committed_mixes_meet_their_target_but_their_known_misses() {
    let options = SimulationOptions::default();
    let mut totals = WarmTotals::default();
    let mut seen = 0;
    for folder in ["traces", "synthetic"] {
        let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../bench/data")).join(folder);
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                let name = p.to_string_lossy();
                name.ends_with(".mix.trace.json") || name.ends_with(".pipeline.trace.json")
            })
            .collect();
        files.sort();
        for file in files {
            let name =
                format!("{folder}/{}", file.file_name().unwrap().to_string_lossy().trim_end_matches(".trace.json"));
            let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
            let (first, rest) = Trace::halves(&doc).unwrap();
            let profile = simulate_heap_from(&first, &options, None).unwrap().profile;
            let warm = simulate_heap_from(&rest, &options, Some(&profile)).unwrap().figures;
            let pytorch = simulate_pytorch_cuda(&rest, None);
            let m = WarmMisses::of(&warm, &pytorch, profile.peak_live());
            totals.add(m);
            let missed = m.missed();
            let at = format!("{name}: {warm:?} from a profile of {} bytes live", profile.peak_live());
            match WARM_MISSES.iter().find(|w| w.mix == name) {
                Some(known) => {
                    seen += 1;
                    assert_eq!(missed, known.missed, "{at}: update its known miss");
                    assert!(warm.ratio() <= known.ratio, "{at}: worse than its known miss");
                }
                None => assert!(missed.is_empty(), "{at}: misses {missed:?}"),
            }
        }
    }
    assert_eq!(seen, WARM_MISSES.len(), "every known miss names a committed mix");
    assert_eq!(totals.pairs, 19, "{totals:?}");
}
