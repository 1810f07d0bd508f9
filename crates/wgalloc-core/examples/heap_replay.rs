//! Every trace of a folder through the simulated heap and the baselines, no device needed
//! (`cargo run --release -p wgalloc-core --example heap_replay -- [folder or files] [--alignment N]`).
//! Prints reserved/live and driver allocations per policy (and the bytes wgalloc moved), the target check
//! (<= 1.15 x live + 8 MiB, <= pytorch-cuda's reserved and driver allocations) and the
//! geometric mean of reserved/live over the traces above 16 MiB live.

use std::path::PathBuf;

use wgalloc_core::replay::{simulate, SimulationOptions, Trace};
use wgalloc_heap::pool;

const MIB: u64 = 1 << 20;

fn main() {
    let mut args = std::env::args().skip(1);
    let mut options = SimulationOptions::default();
    let mut paths: Vec<PathBuf> = Vec::new();
    let mut quiet = false;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--alignment" => {
                let n = args.next().and_then(|v| v.parse().ok()).expect("--alignment N");
                options.limits.alignment = n;
                options.limits.scalar_alignment = n;
            }
            "--quiet" => quiet = true,
            _ => paths.push(a.into()),
        }
    }
    if paths.is_empty() {
        paths.push(concat!(env!("CARGO_MANIFEST_DIR"), "/../../bench/data/traces").into());
    }
    let mut files: Vec<PathBuf> = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(&p)
                .expect("a readable folder")
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| f.to_string_lossy().ends_with(".trace.json"))
                .collect();
            found.sort();
            files.extend(found);
        } else {
            files.push(p);
        }
    }
    let header = format!(
        "{:<44} {:>9} {:>8} {:>6} {:>9} {:>8} {:>6} {:>8} {:>6} {:>8} {:>6}  target",
        "trace", "live MiB", "wgalloc", "drv", "moved MiB", "pytorch", "drv", "pow2", "drv", "exact", "drv"
    );
    if !quiet {
        println!("{header}");
    }
    let (mut log_sum, mut log_pt, mut large, mut misses) = (0.0, 0.0, 0, 0);
    let mut counts = [0; 3];
    for f in &files {
        let text = std::fs::read_to_string(f).expect("a readable trace");
        let trace = Trace::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let sim = simulate(&trace, &options).expect("simulation");
        let (w, pt) = (&sim.wgalloc, &sim.baselines[0]);
        let within = w.peak_reserved <= pool::target(w.peak_live);
        let ok = within && w.peak_reserved <= pt.peak_reserved && w.driver_allocations <= pt.driver_allocations;
        if !ok {
            misses += 1;
        }
        if w.peak_live >= 16 * MIB {
            log_sum += w.ratio().ln();
            log_pt += pt.ratio().ln();
            large += 1;
        }
        if quiet {
            counts[0] += !within as usize;
            counts[1] += (w.peak_reserved > pt.peak_reserved) as usize;
            counts[2] += (w.driver_allocations > pt.driver_allocations) as usize;
            continue;
        }
        let name = f.file_name().map(|n| n.to_string_lossy().replace(".trace.json", "")).unwrap_or_default();
        print!("{name:<44} {:>9.1}", w.peak_live as f64 / MIB as f64);
        for (i, p) in std::iter::once(w).chain(&sim.baselines).enumerate() {
            print!(" {:>8.3} {:>6}", p.ratio(), p.driver_allocations);
            if i == 0 {
                print!(" {:>9.1}", p.bytes_moved as f64 / MIB as f64);
            }
        }
        let why = [
            (!within, "over 1.15x+8MiB"),
            (w.peak_reserved > pt.peak_reserved, "over pytorch"),
            (w.driver_allocations > pt.driver_allocations, "more driver allocs"),
        ];
        let why: Vec<&str> = why.iter().filter(|(bad, _)| *bad).map(|(_, s)| *s).collect();
        println!("  {}", if ok { "ok".to_string() } else { why.join(", ") });
    }
    let (geo, geo_pt) = ((log_sum / large.max(1) as f64).exp(), (log_pt / large.max(1) as f64).exp());
    if quiet {
        println!(
            "geomean {geo:.3} (pytorch {geo_pt:.3}); missing {misses}: over 1.15x+8MiB {}, over pytorch {}, more driver allocs {}",
            counts[0], counts[1], counts[2]
        );
        return;
    }
    println!("geomean reserved/live over {large} traces >= 16 MiB live: {geo:.3} (pytorch-cuda {geo_pt:.3})");
    println!("traces missing the target: {misses} of {}", files.len());
}
