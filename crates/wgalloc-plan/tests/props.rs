//! Property tests: every strategy's plan passes an independent pairwise checker,
//! and corrupting a plan always gets it rejected.
mod common;
use common::naive_check;
use proptest::prelude::*;
use std::time::Duration;
use wgalloc_plan::{plan, Plan, PlanOptions, UsageRecord};

fn records() -> impl Strategy<Value = Vec<UsageRecord>> {
    prop::collection::vec((0u64..200, 0u64..20, 0u64..8, 0u32..4), 0..40).prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(|(i, (size, first, len, al))| UsageRecord {
                id: format!("r{i}"),
                size,
                first,
                last: first + len,
                alignment: if al == 0 { None } else { Some(1 << (al * 2)) },
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn every_strategy_is_valid(r in records(), align_pow in 0u32..4) {
        let align = 1u64 << align_pow;
        for s in wgalloc_plan::Strategy::ALL {
            let opts = PlanOptions { strategy: s, alignment: align, time_limit: Some(Duration::from_millis(20)), ..Default::default() };
            let p = plan(&r, opts).unwrap();
            prop_assert!(naive_check(&r, p.offsets(), p.slab_size(), align).is_ok(), "{s}");
            prop_assert!(p.slab_size() >= p.lower_bound());
        }
    }

    #[test]
    fn corrupted_plans_rejected(r in records(), pick in any::<prop::sample::Index>(), shift in 1u64..64) {
        let p = plan(&r, PlanOptions::with_strategy(wgalloc_plan::Strategy::GreedyBySize)).unwrap();
        if r.is_empty() { return Ok(()); }
        let i = pick.index(r.len());
        let mut off = p.offsets().to_vec();
        // Move record i onto a live neighbour's bytes (if it has one with size).
        if let Some(j) = (0..r.len()).find(|&j| j != i && r[j].overlaps(&r[i]) && r[j].size > 0 && r[i].size > 0) {
            off[i] = off[j] + (shift % r[j].size);
            prop_assert!(naive_check(&r, &off, u64::MAX, 1).is_err());
            prop_assert_eq!(Plan::from_parts(r.clone(), off, 1).unwrap_err().code(), "PLAN_INVALID");
        }
    }
}
