//! Every trace of one or more sets through the simulated heap and the baselines, no device needed
//! (`cargo run --release -p wgalloc-core --example heap_replay -- [folders or files] [--alignment N]
//! [--quiet]`). Each folder is a set (files given alone form one). Per trace: reserved/live and
//! driver allocations per policy, wgalloc's driver frees and bytes moved (MiB, and as a share of the
//! bytes allocated), and the parts of the target it misses (`replay::target`). Per set: traces
//! meeting it, misses per part, driver totals against pytorch-cuda's, bytes moved, and the
//! geometric mean of reserved/live over the traces above 16 MiB live.

use std::path::PathBuf;

use wgalloc_core::replay::{simulate, SetTotals, SimulationOptions, TargetMisses, Trace};

const MIB: u64 = 1 << 20;

fn trace_files(dir: &PathBuf) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("a readable folder")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|f| f.to_string_lossy().ends_with(".trace.json"))
        .collect();
    found.sort();
    found
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut options = SimulationOptions::default();
    let mut sets: Vec<(String, Vec<PathBuf>)> = Vec::new();
    let mut loose: Vec<PathBuf> = Vec::new();
    let mut quiet = false;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--alignment" => {
                let n = args.next().and_then(|v| v.parse().ok()).expect("--alignment N");
                options.limits.alignment = n;
                options.limits.scalar_alignment = n;
            }
            "--quiet" => quiet = true,
            _ => {
                let p = PathBuf::from(&a);
                if p.is_dir() {
                    sets.push((a.clone(), trace_files(&p)));
                } else {
                    loose.push(p);
                }
            }
        }
    }
    if !loose.is_empty() {
        sets.push(("files".into(), loose));
    }
    if sets.is_empty() {
        let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../bench/data/traces"));
        sets.push(("bench/data/traces".into(), trace_files(&dir)));
    }
    let header = format!(
        "{:<44} {:>9} {:>8} {:>5} {:>5} {:>9} {:>6} {:>8} {:>5} {:>8} {:>5} {:>8} {:>5}  target",
        "trace",
        "live MiB",
        "wgalloc",
        "drv",
        "frees",
        "moved MiB",
        "moved%",
        "pytorch",
        "drv",
        "pow2",
        "drv",
        "exact",
        "drv"
    );
    for (set_name, files) in &sets {
        if !quiet {
            println!("{header}");
        }
        let mut totals = SetTotals::default();
        let (mut log_sum, mut log_pt, mut large) = (0.0, 0.0, 0);
        for f in files {
            let text = std::fs::read_to_string(f).expect("a readable trace");
            let trace = Trace::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            let sim = simulate(&trace, &options).expect("simulation");
            let (w, pt) = (&sim.wgalloc, &sim.baselines[0]);
            let verdict = totals.add(w, pt);
            if w.peak_live >= 16 * MIB {
                log_sum += w.ratio().ln();
                log_pt += pt.ratio().ln();
                large += 1;
            }
            if quiet {
                continue;
            }
            let name = f.file_name().map(|n| n.to_string_lossy().replace(".trace.json", "")).unwrap_or_default();
            print!("{name:<44} {:>9.1}", w.peak_live as f64 / MIB as f64);
            for (i, p) in std::iter::once(w).chain(&sim.baselines).enumerate() {
                print!(" {:>8.3} {:>5}", p.ratio(), p.driver_allocations);
                if i == 0 {
                    let share = 100.0 * p.bytes_moved as f64 / p.bytes_allocated.max(1) as f64;
                    print!(" {:>5} {:>9.1} {:>6.2}", p.driver_frees, p.bytes_moved as f64 / MIB as f64, share);
                }
            }
            println!("  {}", if verdict.met() { "ok".to_string() } else { verdict.missed().join(", ") });
        }
        let (geo, geo_pt) = ((log_sum / large.max(1) as f64).exp(), (log_pt / large.max(1) as f64).exp());
        let misses: Vec<String> =
            TargetMisses::PART_NAMES.iter().zip(totals.misses).map(|(name, n)| format!("{name} {n}")).collect();
        println!(
            "{set_name}: {} of {} traces meet the per-trace target; misses: {}; driver allocations {} \
             (pytorch-cuda {}: {}), driver frees {}; moved {:.1} MiB of {:.1} MiB allocated ({:.2}%); \
             geomean reserved/live over {large} traces >= 16 MiB live {geo:.3} (pytorch-cuda {geo_pt:.3})",
            totals.met,
            totals.traces,
            misses.join(", "),
            totals.driver_allocations,
            totals.pytorch_driver_allocations,
            if totals.driver_total_met() { "met" } else { "missed" },
            totals.driver_frees,
            totals.bytes_moved as f64 / MIB as f64,
            totals.bytes_allocated as f64 / MIB as f64,
            100.0 * totals.bytes_moved as f64 / totals.bytes_allocated.max(1) as f64,
        );
    }
}
