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
                alignment: if al == 0 { None } else { Some(1 << (al * 2)) },
                ..UsageRecord::new(format!("r{i}"), size, first, first + len)
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

/// Records in chains that hand over in place: each chain's members live back to back,
/// touching at one op index, every member after the first sharing with its predecessor.
fn shared_records() -> impl Strategy<Value = Vec<UsageRecord>> {
    prop::collection::vec((prop::collection::vec((1u64..120, 0u64..5), 1..4), 0u64..16), 0..14).prop_map(|chains| {
        let mut out: Vec<UsageRecord> = Vec::new();
        for (c, (links, start)) in chains.into_iter().enumerate() {
            let mut t = start;
            for (k, (size, len)) in links.into_iter().enumerate() {
                let mut r = UsageRecord::new(format!("c{c}.{k}"), size, t, t + len);
                if k > 0 {
                    r.shares_with = Some(format!("c{c}.{}", k - 1));
                }
                t += len;
                out.push(r);
            }
        }
        out
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// Fix a random subset at offsets of a valid plan: every strategy keeps them and
    /// its plan passes the independent checker.
    #[test]
    fn fixed_offsets_kept_and_valid(r in records(), mask in any::<u64>(), align_pow in 0u32..3) {
        let align = 1u64 << align_pow;
        let base = plan(&r, PlanOptions { strategy: wgalloc_plan::Strategy::GreedyBySize, alignment: align, ..Default::default() }).unwrap();
        let mut pinned = r.clone();
        for (i, x) in pinned.iter_mut().enumerate() {
            match (mask >> (i % 64)) & 3 {
                0 => x.offset = Some(base.offsets()[i]),
                1 => x.preferred_offset = Some(base.offsets()[i] + 8),
                _ => {}
            }
        }
        for s in wgalloc_plan::Strategy::ALL {
            let opts = PlanOptions { strategy: s, alignment: align, time_limit: Some(Duration::from_millis(20)), ..Default::default() };
            let p = plan(&pinned, opts).unwrap();
            prop_assert!(naive_check(&pinned, p.offsets(), p.slab_size(), align).is_ok(), "{s}: {:?}", naive_check(&pinned, p.offsets(), p.slab_size(), align));
            for (i, x) in pinned.iter().enumerate() {
                if let Some(o) = x.offset {
                    prop_assert_eq!(p.offsets()[i], o);
                }
            }
            prop_assert!(p.slab_size() >= p.lower_bound());
        }
    }

    /// In-place chains: one range per chain, valid under the independent checker; a
    /// member moved off its base is refused by both checkers.
    #[test]
    fn sharing_plans_valid(r in shared_records()) {
        for s in wgalloc_plan::Strategy::ALL {
            let opts = PlanOptions { strategy: s, time_limit: Some(Duration::from_millis(20)), ..Default::default() };
            let p = plan(&r, opts).unwrap();
            prop_assert!(naive_check(&r, p.offsets(), p.slab_size(), 1).is_ok(), "{s}: {:?}", naive_check(&r, p.offsets(), p.slab_size(), 1));
        }
        // Corrupt: move one sharing member off its base; both checkers refuse.
        if let Some(i) = r.iter().position(|x| x.shares_with.is_some()) {
            let p = plan(&r, PlanOptions::with_strategy(wgalloc_plan::Strategy::GreedyBySize)).unwrap();
            let mut off = p.offsets().to_vec();
            off[i] += 1;
            prop_assert!(naive_check(&r, &off, u64::MAX, 1).is_err());
            prop_assert_eq!(Plan::from_parts(r.clone(), off, 1).unwrap_err().code(), "PLAN_INVALID");
        }
    }
}
