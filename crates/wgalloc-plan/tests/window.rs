//! `best` on an instance too large for the exact search to take whole, whose greedy plans sit
//! above the lower bound only around its load peak: a real model's graph, a record that lives
//! throughout (as weights do), and thousands of short records after the graph. The peak-window
//! relaxation plans the graph's window exactly and places the rest around it.
mod common;

use std::time::Duration;
use wgalloc_plan::graph::{build_records, parse, GraphOptions};
use wgalloc_plan::{plan, PlanOptions, Strategy, UsageRecord};

fn instance() -> Vec<UsageRecord> {
    let path = common::bench_dir("models").join("ppocr-mobile-v2-cls.1x3x48x192.json");
    let graph = parse(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut recs = build_records(&graph, &GraphOptions::default()).unwrap().records;
    let end = recs.iter().map(|r| r.last).max().unwrap();
    let tail = 3_000u64;
    recs.push(UsageRecord::new("resident", 4096, 0, end + 3 * tail + 10));
    // Two or three live at a time, a few KiB: far below the graph's peak.
    recs.extend(
        (0..tail).map(|k| UsageRecord::new(format!("tail{k}"), 256 * (1 + k % 7), end + 1 + 3 * k, end + 6 + 3 * k)),
    );
    recs
}

#[test]
fn best_plans_the_peak_window_exactly_when_the_instance_is_too_large_to_search() {
    let recs = instance();
    let greedy = plan(&recs, PlanOptions::with_strategy(Strategy::Portfolio)).unwrap();
    assert!(greedy.slab_size() > greedy.lower_bound(), "the greedy plans must leave something to win");
    let opts =
        PlanOptions { strategy: Strategy::Best, time_limit: Some(Duration::from_secs(60)), ..Default::default() };
    let best = plan(&recs, opts).unwrap();
    println!(
        "portfolio {} -> best {} (bound {}) by {}",
        greedy.slab_size(),
        best.slab_size(),
        best.lower_bound(),
        best.method()
    );
    assert_eq!(best.slab_size(), best.lower_bound(), "{}", best.method());
    assert!(best.method().starts_with("window("), "{}", best.method());
    common::naive_check(&recs, best.offsets(), best.slab_size(), 1).unwrap();
}
