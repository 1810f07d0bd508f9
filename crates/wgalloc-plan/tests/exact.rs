//! The exact search against brute force on small instances: it must prove the
//! optimum, and that optimum must match the best of all canonical placements.
use proptest::prelude::*;
use std::time::Duration;
use wgalloc_plan::{plan, PlanOptions, Strategy as Strat, UsageRecord};

/// Minimum over all orders of "each record right above the overlapping records
/// placed before it": every optimum, pushed down and sorted by offset, is one.
fn brute_force(r: &[UsageRecord]) -> u64 {
    fn go(r: &[UsageRecord], used: &mut Vec<bool>, off: &mut Vec<u64>, height: u64, best: &mut u64) {
        if height >= *best {
            return;
        }
        if used.iter().all(|&u| u) {
            *best = height;
            return;
        }
        for i in 0..r.len() {
            if used[i] {
                continue;
            }
            let o = (0..r.len())
                .filter(|&j| used[j] && r[j].overlaps(&r[i]))
                .map(|j| off[j] + r[j].size)
                .max()
                .unwrap_or(0);
            used[i] = true;
            off[i] = o;
            go(r, used, off, height.max(o + r[i].size), best);
            used[i] = false;
        }
    }
    let mut best = u64::MAX;
    go(r, &mut vec![false; r.len()], &mut vec![0; r.len()], 0, &mut best);
    best
}

fn records() -> impl Strategy<Value = Vec<UsageRecord>> {
    prop::collection::vec((1u64..12, 0u64..8, 0u64..5), 1..9).prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(|(i, (size, first, len))| UsageRecord::new(format!("r{i}"), size, first, first + len))
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn exact_matches_brute_force(r in records()) {
        let opt = brute_force(&r);
        for s in [Strat::Exact, Strat::Best] {
            let opts = PlanOptions { strategy: s, time_limit: Some(Duration::from_secs(5)), ..Default::default() };
            let p = plan(&r, opts).unwrap();
            prop_assert_eq!(p.slab_size(), opt, "{}", s);
            prop_assert!(p.optimal());
        }
    }
}
