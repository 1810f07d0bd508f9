//! Fixed and preferred offsets, in-place sharing, any positive alignment, memory
//! spaces with capacities, graph inputs first, strict fields, and exact round trips.
mod common;
use common::{check_plan, naive_check};
use std::collections::HashMap;
use std::time::Duration;
use wgalloc_plan::{csv, json, plan, OptimalBy, PlanOptions, Strategy, UsageRecord};

fn code<T: std::fmt::Debug>(r: Result<T, wgalloc_plan::PlanError>) -> &'static str {
    r.expect_err("expected an error").code()
}

fn opts(strategy: Strategy) -> PlanOptions {
    PlanOptions { strategy, time_limit: Some(Duration::from_millis(50)), ..Default::default() }
}

fn fixed(id: &str, size: u64, first: u64, last: u64, at: u64) -> UsageRecord {
    UsageRecord { offset: Some(at), ..UsageRecord::new(id, size, first, last) }
}

#[test]
fn fixed_offsets_are_kept_by_every_strategy() {
    let r = vec![
        fixed("f", 16, 0, 4, 32),
        UsageRecord::new("a", 32, 0, 2),
        UsageRecord::new("b", 8, 1, 3),
        UsageRecord::new("c", 40, 3, 6),
    ];
    for s in Strategy::ALL {
        let p = plan(&r, opts(s)).unwrap();
        assert_eq!(p.offset_of("f"), Some(32), "{s}");
        check_plan(&p).unwrap_or_else(|e| panic!("{s}: {e}"));
    }
}

#[test]
fn overlapping_fixed_records_are_refused() {
    let r = vec![fixed("f", 16, 0, 4, 0), fixed("g", 16, 4, 6, 8)];
    let e = plan(&r, PlanOptions::default()).unwrap_err();
    assert_eq!(e.code(), "INVALID_ARGUMENT");
    assert!(e.to_string().contains("\"f\"") && e.to_string().contains("\"g\""), "{e}");
    // Disjoint in time: fine at the same bytes.
    let r = vec![fixed("f", 16, 0, 3, 0), fixed("g", 16, 4, 6, 8)];
    assert_eq!(plan(&r, PlanOptions::default()).unwrap().slab_size(), 24);
    // A fixed offset off its alignment.
    let mut r = vec![fixed("f", 16, 0, 3, 6)];
    r[0].alignment = Some(4);
    assert_eq!(code(plan(&r, PlanOptions::default())), "INVALID_ARGUMENT");
}

#[test]
fn preferred_offsets_are_kept_where_they_fit() {
    let mut r = vec![UsageRecord::new("a", 8, 0, 2), UsageRecord::new("b", 8, 0, 2), fixed("f", 8, 0, 2, 64)];
    r[0].preferred_offset = Some(16);
    r[1].preferred_offset = Some(64); // taken by the fixed record: placed as usual
    for s in [Strategy::GreedyBySize, Strategy::Portfolio, Strategy::Best, Strategy::LinearScan] {
        let p = plan(&r, opts(s)).unwrap();
        assert_eq!(p.offset_of("a"), Some(16), "{s}");
        assert_ne!(p.offset_of("b"), Some(64), "{s}");
        check_plan(&p).unwrap();
    }
}

#[test]
fn csv_offset_column_is_fixed() {
    let r = csv::parse("id,lower,upper,size,offset\na,0,3,8,100\nb,0,3,8,\n").unwrap();
    assert_eq!((r[0].offset, r[1].offset), (Some(100), None));
    let p = plan(&r, PlanOptions::default()).unwrap();
    assert_eq!(p.offset_of("a"), Some(100));
    // Written back with the column, read back the same.
    assert_eq!(csv::parse(&csv::write(&r, None).unwrap()).unwrap(), r);
}

#[test]
fn unknown_fields_are_refused_in_strict_mode() {
    let text = r#"[{"id":"a","size":4,"first":0,"last":1,"ofset":3}]"#;
    let e = json::parse_records(text).unwrap_err();
    assert_eq!(e.code(), "PARSE_ERROR");
    assert!(e.to_string().contains("records[0].ofset") && e.to_string().contains("unknown field"), "{e}");
    assert_eq!(json::parse_records_with(text, false).unwrap().len(), 1);
    let e = csv::parse("id,lower,upper,size,colour\na,0,1,4,red\n").unwrap_err();
    assert!(e.to_string().contains("colour"), "{e}");
    assert_eq!(csv::parse_with("id,lower,upper,size,colour\na,0,1,4,red\n", false).unwrap().len(), 1);
    assert_eq!(code(json::parse_records(r#"{"records":[],"extra":1}"#)), "PARSE_ERROR");
}

#[test]
fn in_place_sharing_gives_one_range() {
    // b is written over a at op 2 (a's last use); c reuses b in turn.
    let text = r#"[{"id":"a","size":64,"first":0,"last":2},{"id":"b","size":48,"first":2,"last":4,"sharesWith":"a"},
                   {"id":"c","size":64,"first":4,"last":6,"inPlaceOf":"b"},{"id":"x","size":32,"first":1,"last":5}]"#;
    let r = json::parse_records(text).unwrap();
    for s in Strategy::ALL {
        let p = plan(&r, opts(s)).unwrap();
        let o = p.offset_of("a");
        assert_eq!((p.offset_of("b"), p.offset_of("c")), (o, o), "{s}");
        check_plan(&p).unwrap();
        if s == Strategy::Best {
            assert_eq!(p.slab_size(), 96);
        }
    }
    // Without sharing the three need more room while x lives.
    let mut free = r.clone();
    free.iter_mut().for_each(|x| x.shares_with = None);
    assert!(plan(&free, opts(Strategy::Best)).unwrap().slab_size() > 96);
}

#[test]
fn sharing_checks_lifetimes_and_ids() {
    let mut r = vec![UsageRecord::new("a", 8, 0, 3), UsageRecord::new("b", 8, 2, 5)];
    r[1].shares_with = Some("a".into());
    let e = plan(&r, PlanOptions::default()).unwrap_err();
    assert_eq!(e.code(), "INVALID_ARGUMENT");
    assert!(e.to_string().contains("both live"), "{e}");
    r[1].shares_with = Some("zz".into());
    assert_eq!(code(plan(&r, PlanOptions::default())), "INVALID_ARGUMENT");
    r[1].shares_with = Some("b".into());
    assert_eq!(code(plan(&r, PlanOptions::default())), "INVALID_ARGUMENT");
    // The checker refuses split offsets for a shared range.
    r[1].first = 3;
    r[1].shares_with = Some("a".into());
    assert_eq!(wgalloc_plan::Plan::from_parts(r.clone(), vec![0, 8], 1).unwrap_err().code(), "PLAN_INVALID");
    assert!(wgalloc_plan::Plan::from_parts(r, vec![8, 8], 1).is_ok());
}

#[test]
fn any_positive_alignment() {
    // XLA heap simulator style: alignment 20.
    let r = vec![UsageRecord::new("a", 10, 0, 2), UsageRecord::new("b", 30, 0, 2), UsageRecord::new("c", 10, 1, 3)];
    for s in Strategy::ALL {
        let p = plan(&r, PlanOptions { alignment: 20, ..opts(s) }).unwrap();
        assert!(p.offsets().iter().all(|o| o % 20 == 0), "{s}: {:?}", p.offsets());
        check_plan(&p).unwrap();
        assert!(p.slab_size() >= p.lower_bound() && p.lower_bound() >= 50, "{s}");
    }
    // Record 12 with plan 8: offsets are multiples of both (24).
    let mut r = vec![UsageRecord::new("a", 5, 0, 1), UsageRecord::new("b", 5, 0, 1)];
    r[1].alignment = Some(12);
    let p = plan(&r, PlanOptions { alignment: 8, ..opts(Strategy::GreedyBySize) }).unwrap();
    assert!(p.offset_of("b").unwrap().is_multiple_of(24));
}

#[test]
fn aligned_lower_bound_is_reported_everywhere() {
    // Two 60-byte records live together at alignment 64: LOAD is 120, but the one on
    // top starts at 64 at least, so 124 bytes are needed.
    let r = vec![UsageRecord::new("a", 60, 0, 1), UsageRecord::new("b", 60, 1, 2)];
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = log.clone();
    let o = PlanOptions {
        alignment: 64,
        progress: Some(Box::new(move |p| sink.lock().unwrap().push(p))),
        ..opts(Strategy::Best)
    };
    let p = plan(&r, o).unwrap();
    assert_eq!((p.slab_size(), p.lower_bound()), (124, 124));
    assert_eq!(p.optimal_by(), Some(OptimalBy::LowerBound));
    let last = *log.lock().unwrap().last().expect("a progress report");
    assert_eq!((last.best, last.lower_bound), (124, 124));
    // Not at the bound: not optimal, whatever the strategy.
    let p = plan(&r, PlanOptions { alignment: 64, ..opts(Strategy::Naive) }).unwrap();
    assert_eq!((p.slab_size(), p.lower_bound(), p.optimal()), (124, 124, true));
    let r3 = vec![UsageRecord::new("a", 3, 0, 1), UsageRecord::new("b", 2, 0, 1), UsageRecord::new("c", 3, 1, 2)];
    let p = plan(&r3, PlanOptions { alignment: 2, ..opts(Strategy::Naive) }).unwrap();
    assert!(p.slab_size() > p.lower_bound() && !p.optimal(), "{} {}", p.slab_size(), p.lower_bound());
}

#[test]
fn memory_spaces_are_planned_apart_with_capacities() {
    let mut r =
        vec![UsageRecord::new("u1", 16, 0, 3), UsageRecord::new("s1", 100, 0, 3), UsageRecord::new("u2", 16, 1, 2)];
    r[0].space = Some("uniform".into());
    r[2].space = Some("uniform".into());
    let p = plan(&r, opts(Strategy::Best)).unwrap();
    assert_eq!((p.offset_of("s1"), p.spaces().len()), (Some(0), 2));
    let uniform = p.spaces().iter().find(|s| s.name == "uniform").unwrap();
    assert_eq!((uniform.slab_size, p.slab_size()), (32, 132));
    check_plan(&p).unwrap();
    // Capacity: proven infeasible by the live bytes at op 1.
    let caps = HashMap::from([("uniform".to_string(), 31u64)]);
    let e = plan(&r, PlanOptions { capacities: caps, ..opts(Strategy::Best) }).unwrap_err();
    assert_eq!(e.code(), "INFEASIBLE");
    assert!(e.to_string().contains("at op 1") && e.to_string().contains("uniform"), "{e}");
    let caps = HashMap::from([("uniform".to_string(), 32u64), ("default".to_string(), 100)]);
    assert!(plan(&r, PlanOptions { capacities: caps, ..opts(Strategy::Best) }).is_ok());
    // Feasible in principle, but the strategy's plan does not fit.
    let r2 = vec![UsageRecord::new("a", 10, 0, 0), UsageRecord::new("b", 10, 1, 1)];
    let caps = HashMap::from([("default".to_string(), 15u64)]);
    assert_eq!(code(plan(&r2, PlanOptions { capacities: caps, ..opts(Strategy::Naive) })), "CAPACITY_NOT_MET");
    let caps = HashMap::from([("nowhere".to_string(), 15u64)]);
    assert_eq!(code(plan(&r2, PlanOptions { capacities: caps, ..opts(Strategy::Best) })), "INVALID_ARGUMENT");
}

#[test]
fn inputs_first_places_whole_run_records_first() {
    // "in" lives over the whole run; by size it would be placed after "big".
    let r = vec![
        UsageRecord::new("big", 40, 0, 1),
        UsageRecord::new("in", 8, 0, 3),
        UsageRecord::new("mid", 24, 2, 3),
        UsageRecord::new("small", 16, 1, 2),
    ];
    let p = plan(&r, opts(Strategy::GreedyInputsFirst)).unwrap();
    assert_eq!(p.offset_of("in"), Some(0));
    check_plan(&p).unwrap();
    let by_size = plan(&r, opts(Strategy::GreedyBySize)).unwrap();
    assert_ne!(by_size.offset_of("in"), Some(0));
}

#[test]
fn json_round_trip_keeps_every_constraint() {
    let mut r = vec![
        UsageRecord::new("a", 100, 0, 1),
        UsageRecord::new("b", 28, 1, 4),
        fixed("f", 8, 2, 2, 512),
        UsageRecord::new("s", 100, 1, 1),
        UsageRecord::new("t", 50, 2, 3),
    ];
    r[1].alignment = Some(64);
    r[3].space = Some("heap2".into());
    r[4].shares_with = Some("a".into());
    r[4].first = 1;
    r[4].preferred_offset = Some(256);
    let p = plan(&r, PlanOptions { alignment: 4, ..opts(Strategy::Best) }).unwrap();
    let back = json::parse_records(&p.to_json()).unwrap();
    // The plan's alignment is folded into the records; the rest comes back as it was.
    for (x, y) in r.iter().zip(&back) {
        assert_eq!(y.alignment, Some(x.alignment.unwrap_or(1).max(4)), "{}", x.id);
        assert_eq!(UsageRecord { alignment: x.alignment, ..y.clone() }, *x);
    }
    let again = plan(&back, opts(Strategy::Best)).unwrap();
    assert_eq!(again.offset_of("b").unwrap() % 64, 0);
    assert_eq!(again.offset_of("f"), Some(512));
    assert_eq!(again.offset_of("t"), again.offset_of("a"));
    assert_eq!(json::parse_records(&json::write_records(&r)).unwrap(), r);
}

#[test]
fn integers_above_2_pow_53_stay_exact() {
    let base = (1u64 << 60) + 1;
    let r = vec![UsageRecord::new("a", 8, base, base), UsageRecord::new("b", 8, base + 1, base + 1)];
    let p = plan(&r, PlanOptions::default()).unwrap();
    assert_eq!(p.slab_size(), 8);
    let text = p.to_json();
    assert!(text.contains(&format!("\"first\":\"{base}\"")), "{text}");
    assert_eq!(json::parse_records(&text).unwrap(), r);
    // Plain JSON numbers past 2^53 are read exactly too (never through a float).
    let text = format!(
        r#"[{{"id":"a","size":8,"first":{base},"last":{base}}},{{"id":"b","size":8,"first":{},"last":{}}}]"#,
        base + 1,
        base + 1
    );
    assert_eq!(plan(json::parse_records(&text).unwrap(), PlanOptions::default()).unwrap().slab_size(), 8);
    let e = json::parse_records(r#"[{"id":"a","size":"18446744073709551616","first":0,"last":0}]"#).unwrap_err();
    assert_eq!(e.code(), "SIZE_OVERFLOW");
    assert_eq!(code(json::parse_records(r#"[{"id":"a","size":1.5,"first":0,"last":0}]"#)), "PARSE_ERROR");
}

#[test]
fn naive_check_agrees_on_sharing_and_fixed() {
    let mut r = vec![UsageRecord::new("a", 8, 0, 2), UsageRecord::new("b", 8, 2, 4)];
    r[1].shares_with = Some("a".into());
    assert!(naive_check(&r, &[0, 0], 8, 1).is_ok());
    assert!(naive_check(&r, &[0, 8], 16, 1).is_err());
    r[0].offset = Some(8);
    assert!(naive_check(&r, &[0, 0], 8, 1).is_err());
}
