//! Bad input gives typed errors with stable codes, never panics.
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;
use wgalloc_plan::graph::{build_records, parse as parse_graph, GraphOptions};
use wgalloc_plan::{csv, json, lower_bound, plan, Plan, PlanError, PlanOptions, Strategy, UsageRecord};

fn code(r: Result<impl std::fmt::Debug, PlanError>) -> &'static str {
    r.expect_err("expected an error").code()
}

#[test]
fn first_after_last() {
    let r = [UsageRecord::new("a", 4, 3, 2)];
    assert_eq!(code(plan(&r, PlanOptions::default())), "INVALID_ARGUMENT");
}

#[test]
fn duplicate_ids() {
    let r = [UsageRecord::new("a", 4, 0, 2), UsageRecord::new("a", 4, 0, 2)];
    assert!(matches!(plan(&r, PlanOptions::default()), Err(PlanError::DuplicateId { .. })));
}

#[test]
fn identical_lifetimes_are_distinct_records() {
    let r = [UsageRecord::new("a", 4, 0, 2), UsageRecord::new("b", 4, 0, 2)];
    assert_eq!(plan(&r, PlanOptions::default()).unwrap().slab_size(), 8);
}

#[test]
fn zero_alignment_refused_any_positive_accepted() {
    let mut r = vec![UsageRecord::new("a", 4, 0, 2)];
    r[0].alignment = Some(0);
    assert!(matches!(plan(&r, PlanOptions::default()), Err(PlanError::BadAlignment { .. })));
    let opts = PlanOptions { alignment: 0, ..Default::default() };
    assert_eq!(code(plan(&[], opts)), "INVALID_ARGUMENT");
    r[0].alignment = Some(3);
    assert!(plan(&r, PlanOptions::default()).is_ok());
}

#[test]
fn alignment_respected() {
    let mut r = vec![UsageRecord::new("a", 3, 0, 2), UsageRecord::new("b", 5, 1, 3), UsageRecord::new("c", 7, 2, 2)];
    r[2].alignment = Some(16);
    for s in Strategy::ALL {
        let p = plan(&r, PlanOptions { strategy: s, alignment: 4, ..Default::default() }).unwrap();
        assert!(p.offsets()[..2].iter().all(|o| o % 4 == 0) && p.offsets()[2].is_multiple_of(16), "{s}");
    }
}

#[test]
fn size_sum_overflow() {
    let r = [UsageRecord::new("a", u64::MAX, 0, 0), UsageRecord::new("b", 2, 5, 5)];
    assert_eq!(code(plan(&r, PlanOptions::default())), "SIZE_OVERFLOW");
    assert_eq!(code(lower_bound(&r)), "SIZE_OVERFLOW");
}

#[test]
fn empty_input_is_empty_plan() {
    for s in Strategy::ALL {
        let p = plan(&[], PlanOptions::with_strategy(s)).unwrap();
        assert_eq!((p.slab_size(), p.lower_bound()), (0, 0));
        assert!(p.optimal());
    }
}

#[test]
fn csv_errors_name_line_and_field() {
    let e = csv::parse("id,lower,upper,size\na,0,2,4\nb,0,2,-4\n").unwrap_err();
    assert_eq!(
        e,
        PlanError::Parse { line: 3, field: "size".into(), message: "\"-4\" is not a non-negative integer".into() }
    );
    assert_eq!(code(csv::parse("id,lower,upper,size\na,0,2,1.5\n")), "PARSE_ERROR");
    assert_eq!(code(csv::parse("id,lower,upper,size\na,0,2\n")), "PARSE_ERROR");
    assert_eq!(code(csv::parse("id,lower,size\na,0,2\n")), "PARSE_ERROR");
    assert_eq!(code(csv::parse("id,lower,upper,size\na,3,3,4\n")), "PARSE_ERROR");
    assert!(csv::parse("").unwrap().is_empty());
    // A known column twice is ambiguous, strict or not; an unknown one twice is ignored when not strict.
    for strict in [true, false] {
        let e = csv::parse_with("id,lower,upper,size,size\na,0,2,4,8\n", strict).unwrap_err();
        assert_eq!(e, PlanError::Parse { line: 1, field: "size".into(), message: "column given twice".into() });
    }
    assert_eq!(csv::parse_with("id,lower,upper,size,x,x\na,0,2,4,1,2\n", false).unwrap()[0].size, 4);
}

#[test]
fn csv_round_trip() {
    let text = "id,lower,upper,size\nb1,0,3,4\nb2,3,9,4\n";
    let r = csv::parse(text).unwrap();
    assert_eq!(r[0], UsageRecord::new("b1", 4, 0, 2));
    assert_eq!(csv::write(&r, None).unwrap(), text);
}

#[test]
fn json_errors_name_field() {
    let e = json::parse_records(r#"[{"id":"a","size":-1,"first":0,"last":1}]"#).unwrap_err();
    assert_eq!(
        e.field(),
        Some(("records[0].size".into(), "a non-negative integer".into(), "-1".into())),
        "a bad field carries its path, what it should have been and what it was: {e}"
    );
    let e = json::parse_records(r#"[{"id":"a","size":1.5,"first":0,"last":1}]"#).unwrap_err();
    assert_eq!(e.code(), "PARSE_ERROR");
    assert_eq!(code(json::parse_records("[{")), "PARSE_ERROR");
    let ok = json::parse_records(r#"{"records":[{"id":"a","size":1,"first":0,"last":1,"alignment":8}]}"#).unwrap();
    assert_eq!(json::parse_records(&json::write_records(&ok)).unwrap(), ok);
}

#[test]
fn corrupted_plan_rejected() {
    let r = vec![UsageRecord::new("a", 8, 0, 2), UsageRecord::new("b", 8, 1, 3)];
    let p = plan(&r, PlanOptions::default()).unwrap();
    let mut off = p.offsets().to_vec();
    off[1] = off[0] + 4; // into its live neighbour
    let e = Plan::from_parts(r.clone(), off, 1).unwrap_err();
    assert_eq!(e.code(), "PLAN_INVALID");
    assert!(Plan::from_parts(r, p.offsets().to_vec(), 1).is_ok());
}

#[test]
fn graph_errors() {
    let g = parse_graph(r#"{"ops":[],"tensors":[{"id":"v","size":4,"first":0,"last":0,"viewOf":"nope"}]}"#).unwrap();
    assert!(matches!(build_records(&g, &GraphOptions::default()), Err(PlanError::UnknownView { .. })));
    let g = parse_graph(r#"{"ops":[],"tensors":[{"id":"a","size":4,"first":0,"last":0,"viewOf":"b"},{"id":"b","size":4,"first":0,"last":0,"viewOf":"a"}]}"#).unwrap();
    assert!(matches!(build_records(&g, &GraphOptions::default()), Err(PlanError::ViewCycle { .. })));
    assert_eq!(code(parse_graph(r#"{"ops":[],"tensors":[{"id":"a","size":-4,"first":0,"last":0}]}"#)), "PARSE_ERROR");
    assert_eq!(
        code(parse_graph(r#"{"ops":[],"tensors":[{"id":"a","size":4,"first":0,"last":0,"kind":"weird"}]}"#)),
        "PARSE_ERROR"
    );
}

/// Every INVALID_ARGUMENT the planner raises, whatever its variant, carries a path, an
/// expectation and the value received (what the binding sends as `err.details`).
#[test]
fn every_invalid_argument_has_its_fields() {
    let rec = |id: &str, first, last| UsageRecord::new(id, 4, first, last);
    let mut shared = vec![rec("a", 0, 2), rec("b", 1, 3)];
    shared[1].shares_with = Some("a".into());
    let mut unknown_share = vec![rec("a", 0, 1)];
    unknown_share[0].shares_with = Some("zz".into());
    let mut bad_align = vec![rec("a", 0, 1)];
    bad_align[0].alignment = Some(0);
    let g = |json: &str| build_records(&parse_graph(json).unwrap(), &GraphOptions::default()).unwrap_err();
    let errors = [
        plan(&[UsageRecord::new("a", 4, 3, 1)], PlanOptions::default()).unwrap_err(),
        plan(&[rec("a", 0, 1), rec("a", 0, 1)], PlanOptions::default()).unwrap_err(),
        plan(&bad_align, PlanOptions::default()).unwrap_err(),
        plan(&shared, PlanOptions::default()).unwrap_err(),
        plan(&unknown_share, PlanOptions::default()).unwrap_err(),
        "fastest".parse::<Strategy>().unwrap_err(),
        g(r#"{"ops":[],"tensors":[{"id":"v","size":4,"first":0,"last":0,"viewOf":"nope"}]}"#),
        g(
            r#"{"ops":[],"tensors":[{"id":"a","size":4,"first":0,"last":0,"viewOf":"b"},{"id":"b","size":4,"first":0,"last":0,"viewOf":"a"}]}"#,
        ),
    ];
    for e in &errors {
        assert_eq!(e.code(), "INVALID_ARGUMENT", "{e}");
        let (path, expected, got) = e.invalid_argument().unwrap_or_else(|| panic!("no fields: {e}"));
        assert!(!path.is_empty() && !expected.is_empty() && !got.is_empty(), "{e}");
    }
    let e = "fastest".parse::<Strategy>().unwrap_err();
    assert_eq!(e.invalid_argument().unwrap().0, "strategy");
    assert!(e.to_string().starts_with("strategy: expected one of"), "{e}");
    assert!(PlanError::Stopped.invalid_argument().is_none());
}

#[test]
fn strategy_names_round_trip() {
    for s in Strategy::ALL {
        assert_eq!(s.as_str().parse::<Strategy>().unwrap(), s);
    }
    assert_eq!(code("fastest".parse::<Strategy>()), "INVALID_ARGUMENT");
    assert_eq!(Strategy::default(), Strategy::Best);
}

#[test]
fn cancel_before_any_plan_is_aborted() {
    let r: Vec<_> =
        (0..40).map(|i| UsageRecord::new(format!("r{i}"), 1 + (i * 7919 % 13), i % 9, i % 9 + i % 5)).collect();
    for strategy in Strategy::ALL {
        let opts = PlanOptions {
            strategy,
            cancel: Some(Arc::new(AtomicBool::new(true))),
            time_limit: Some(Duration::from_secs(60)),
            ..Default::default()
        };
        assert_eq!(code(plan(&r, opts)), "ABORTED", "{strategy:?}");
    }
}

/// Many records, each long-lived enough that greedy placement takes a while.
fn large(n: u64) -> Vec<UsageRecord> {
    (0..n).map(|i| UsageRecord::new(format!("r{i}"), 64 + (i * 7919 % 4096), i % 50_000, i % 50_000 + i % 97)).collect()
}

/// The time limit is the search's: every strategy still returns its own plan when it is spent
/// before the first one exists (bump allocation came back, hundreds of times the bound at scale).
#[test]
fn a_time_limit_spent_before_the_first_plan_still_gets_the_strategy_s_plan() {
    let r = large(50_000);
    for (strategy, method) in [
        (Strategy::GreedyBySize, "greedyBySize"),
        (Strategy::LinearScan, "linearScan"),
        // A portfolio member (`best` starts from the whole portfolio).
        (Strategy::Portfolio, ""),
        (Strategy::Best, ""),
    ] {
        let opts = PlanOptions { strategy, time_limit: Some(Duration::ZERO), ..Default::default() };
        let p = plan(&r, opts).unwrap();
        p.validate().unwrap();
        assert!(p.method().starts_with(method) && !p.method().starts_with("naive"), "{strategy:?}: {}", p.method());
        assert!(p.ratio() < 1.5, "{strategy:?}: ratio {}", p.ratio());
    }
}

#[test]
fn cancel_during_placement_stops_it_promptly() {
    let r = large(400_000);
    let full = {
        let t = std::time::Instant::now();
        plan(&r, PlanOptions::with_strategy(Strategy::GreedyBySize)).unwrap();
        t.elapsed()
    };
    let cancel = Arc::new(AtomicBool::new(false));
    let flag = cancel.clone();
    let cancelled_at = Arc::new(std::sync::Mutex::new(None));
    let at = cancelled_at.clone();
    let timer = std::thread::spawn(move || {
        std::thread::sleep(full / 4);
        *at.lock().unwrap() = Some(std::time::Instant::now());
        flag.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    let opts = PlanOptions { strategy: Strategy::GreedyBySize, cancel: Some(cancel), ..Default::default() };
    let out = plan(&r, opts);
    let done = std::time::Instant::now();
    timer.join().unwrap();
    let cancelled = *cancelled_at.lock().unwrap();
    match cancelled {
        // A cancel a quarter in stops at the next check: well before the end (input checks are not
        // interruptible, so some of the run may remain).
        Some(t) => {
            assert_eq!(code(out), "ABORTED");
            assert!(done - t < full * 3 / 4, "took {:?} after the cancel (a full run takes {full:?})", done - t);
        }
        None => panic!("the plan finished before the cancel ({full:?} for a full run)"),
    }
}

#[test]
fn json_and_svg_output() {
    let r = vec![UsageRecord::new("a<b", 8, 0, 2), UsageRecord::new("b", 8, 1, 3)];
    let p = plan(&r, PlanOptions::with_strategy(Strategy::GreedyBySize)).unwrap();
    let v: serde_json::Value = serde_json::from_str(&p.to_json()).unwrap();
    for k in ["strategy", "slabSize", "lowerBound", "ratio", "optimal", "timeMs", "offsets", "records"] {
        assert!(v.get(k).is_some(), "missing {k}");
    }
    assert_eq!(v["strategy"], "greedyBySize");
    let svg = p.to_svg();
    assert!(svg.starts_with("<svg") && svg.contains("<title>") && svg.contains("op index") && svg.contains("a&lt;b"));
    assert_eq!(svg.matches("<rect").count(), 3);
}
