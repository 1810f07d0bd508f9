//! Warm starts on host storage, no device needed: a profile recorded on one draw of a serving
//! mix, another draw replayed from it, beside the same draw from a cold start and the
//! pytorch-cuda policy (`cargo run --release -p wgalloc-core --example heap_warm_start --
//! RECORD=REPLAY ... | A=B=C... | MIX ...`). `RECORD=REPLAY` names two trace files; `A=B=C...`
//! restarts a service on each draw in turn, each run warm-started from the profile the run
//! before ended with (which covers the profiles before it, Note [Profiles accumulate]); a lone
//! `MIX` is split into its first and last halves of requests (ids `r<k>:...`), two draws of its
//! generator. The target is `replay::target`'s warm start part (`WarmMisses`).

use serde_json::Value;
use wgalloc_core::replay::{
    simulate_heap_from, simulate_pytorch_cuda, SimulationOptions, Trace, WarmMisses, WarmTotals,
};

const MIB: f64 = (1u64 << 20) as f64;

fn read(path: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"))).expect("JSON")
}

fn main() {
    let options = SimulationOptions::default();
    println!(
        "{:<44} {:>8} {:>8} {:>13} {:>13} {:>6} {:>13}  misses",
        "pair", "prof MiB", "live MiB", "cold (drv)", "warm (drv)", "moved%", "pytorch (drv)"
    );
    let mut totals = WarmTotals::default();
    for arg in std::env::args().skip(1) {
        let runs: Vec<(String, Trace)> = if arg.contains('=') {
            arg.split('=').map(|x| (short(x), Trace::from_value(&read(x)).expect("trace"))).collect()
        } else {
            let (first, rest) = Trace::halves(&read(&arg)).expect("a serving mix");
            vec![(format!("{} 1st half", short(&arg)), first), ("2nd".into(), rest)]
        };
        let mut profile = simulate_heap_from(&runs[0].1, &options, None).expect("record").profile;
        for pair in runs.windows(2) {
            let [(from, _), (to, draw)] = pair else { unreachable!() };
            let cold = simulate_heap_from(draw, &options, None).expect("cold").figures;
            let run = simulate_heap_from(draw, &options, Some(&profile)).expect("warm");
            let pytorch = simulate_pytorch_cuda(draw, None);
            let warm = run.figures;
            let misses = WarmMisses::of(&warm, &pytorch, profile.peak_live());
            totals.add(misses);
            let missed = misses.missed();
            println!(
                "{:<44} {:>8.1} {:>8.1} {:>7.3} ({:>3}) {:>7.3} ({:>3}) {:>6.2} {:>7.3} ({:>3})  {}",
                format!("{from} -> {to}"),
                profile.peak_live() as f64 / MIB,
                warm.peak_live as f64 / MIB,
                cold.ratio(),
                cold.driver_allocations,
                warm.ratio(),
                warm.driver_allocations,
                100.0 * warm.bytes_moved as f64 / warm.bytes_allocated.max(1) as f64,
                pytorch.ratio(),
                pytorch.driver_allocations,
                if missed.is_empty() { "-".to_string() } else { missed.join(", ") }
            );
            profile = run.profile;
        }
    }
    let t = totals;
    println!(
        "{} pairs: no driver allocation after the warm start {} ({}), within 1.05x live + 2 MiB {}, within 1.05x the \
         larger of the profile's and the draw's live + 2 MiB {}, within the bytes target {} (pytorch-cuda {}), moves \
         within 10% {}",
        t.pairs,
        t.no_driver,
        if t.no_driver_met() { "90%: met" } else { "90%: not met" },
        t.within_live,
        t.within_known_peak,
        t.within_bytes,
        t.within_pytorch,
        t.within_moves
    );
}

fn short(path: &str) -> String {
    path.rsplit('/').next().unwrap_or(path).replace(".trace.json", "")
}
