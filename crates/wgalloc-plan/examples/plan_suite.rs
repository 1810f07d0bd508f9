//! Runs every strategy on every bench instance and prints a table plus one JSON
//! object per (instance, strategy) line (for `npm run bench`).
//!
//! Usage: `cargo run --release -p wgalloc-plan --example plan_suite -- [SECONDS] [FILTER] [STRATEGIES]`
//! SECONDS: time limit of exact/best per instance (default 10); FILTER: substring
//! of instance names to run; STRATEGIES: comma-separated names (default all).
//! `PLAN_SUITE_PERTURB=SEED` runs variants no planner was tuned on: every size scaled by a
//! factor in [0.9, 1.1) from a seeded generator, rounded down to 1 KiB (at least 1 KiB).

use std::path::{Path, PathBuf};
use std::time::Duration;
use wgalloc_plan::graph::{build_records, parse, GraphOptions};
use wgalloc_plan::{plan, PlanOptions, Strategy, UsageRecord};

fn instances(root: &Path) -> Vec<(String, Vec<UsageRecord>)> {
    let mut out = Vec::new();
    let csvs = [
        "pisarchyk_fig6",
        "minimalloc/examples",
        "minimalloc/challenging",
        "idealloc/somas_tensors",
        "idealloc/iopddl",
    ];
    for dir in csvs {
        let Ok(rd) = std::fs::read_dir(root.join(dir)) else { continue };
        let mut files: Vec<PathBuf> =
            rd.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.extension().is_some_and(|x| x == "csv")).collect();
        files.sort();
        for f in files {
            match std::fs::read_to_string(&f)
                .map_err(|e| e.to_string())
                .and_then(|t| wgalloc_plan::csv::parse(&t).map_err(|e| e.to_string()))
            {
                Ok(r) => out.push((f.file_stem().unwrap_or_default().to_string_lossy().into_owned(), r)),
                Err(e) => eprintln!("skip {}: {e}", f.display()),
            }
        }
    }
    if let Ok(rd) = std::fs::read_dir(root.join("models")) {
        let mut files: Vec<PathBuf> = rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        files.sort();
        for f in files {
            let r = std::fs::read_to_string(&f)
                .map_err(|e| e.to_string())
                .and_then(|t| parse(&t).map_err(|e| e.to_string()))
                .and_then(|g| build_records(&g, &GraphOptions::default()).map_err(|e| e.to_string()));
            match r {
                Ok(g) => out.push((f.file_stem().unwrap_or_default().to_string_lossy().into_owned(), g.records)),
                Err(e) => eprintln!("skip {}: {e}", f.display()),
            }
        }
    }
    out
}

/// CPU time of the whole process so far (every planner thread), so runs on a loaded machine
/// can be compared.
fn process_cpu() -> Option<Duration> {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec it is given and nothing else.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) } == 0;
    ok.then(|| Duration::new(t.tv_sec as u64, t.tv_nsec as u32))
}

/// Scales every size by a factor in [0.9, 1.1) (xorshift64 from `seed`), rounded down to 1 KiB.
fn perturb_sizes(recs: &mut [UsageRecord], seed: u64) {
    let mut next = wgalloc_plan::test_rng::below(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    for r in recs {
        let factor = 0.9 + 0.2 * ((next(u64::MAX) >> 11) as f64 / (1u64 << 53) as f64);
        r.size = ((r.size as f64 * factor) as u64 / 1024 * 1024).max(1024);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let secs: f64 = args.first().and_then(|s| s.parse().ok()).unwrap_or(10.0);
    let filter = args.get(1).cloned().unwrap_or_default();
    let strategies: Vec<Strategy> = match args.get(2) {
        Some(list) => list.split(',').filter_map(|s| s.parse().ok()).collect(),
        None => Strategy::ALL.to_vec(),
    };
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../bench/data");
    println!(
        "{:<34} {:<16} {:>16} {:>16} {:>8} {:>5} {:>10} {:>10}",
        "instance", "strategy", "slab", "lowerBound", "ratio", "opt", "ms", "cpu ms"
    );
    let perturb: Option<u64> = std::env::var("PLAN_SUITE_PERTURB").ok().and_then(|v| v.parse().ok());
    for (name, mut recs) in instances(&root) {
        if !name.contains(&filter) {
            continue;
        }
        let name = match perturb {
            Some(seed) => {
                perturb_sizes(&mut recs, seed);
                format!("{name}~{seed}")
            }
            None => name,
        };
        for &s in &strategies {
            let opts =
                PlanOptions { strategy: s, time_limit: Some(Duration::from_secs_f64(secs)), ..Default::default() };
            let cpu0 = process_cpu();
            match plan(&recs, opts) {
                Ok(p) => {
                    let ms = p.elapsed().as_secs_f64() * 1e3;
                    let cpu_ms = process_cpu().zip(cpu0).map_or(f64::NAN, |(b, a)| (b - a).as_secs_f64() * 1e3);
                    println!(
                        "{:<34} {:<16} {:>16} {:>16} {:>8.4} {:>5} {:>10.1} {:>10.1}",
                        name,
                        s.as_str(),
                        p.slab_size(),
                        p.lower_bound(),
                        p.ratio(),
                        p.optimal(),
                        ms,
                        cpu_ms
                    );
                    println!(
                        "{}",
                        serde_json::json!({"instance": name, "strategy": s.as_str(), "slabSize": p.slab_size(), "lowerBound": p.lower_bound(), "ratio": p.ratio(), "optimal": p.optimal(), "optimalBy": p.optimal_by().map(|o| o.as_str()), "timeMs": ms, "cpuMs": cpu_ms, "method": p.method()})
                    );
                }
                Err(e) => println!("{name} {s}: error {} ({e})", e.code()),
            }
        }
    }
}
