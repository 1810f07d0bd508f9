//! Building records from graphs: views, outputs, params, workspaces, multistream.
mod common;
use common::*;
use wgalloc_plan::graph::{build_records, parse, GraphOptions, Location, WorkspaceMode};
use wgalloc_plan::{plan, PlanOptions, Strategy};

const G: &str = r#"{
  "ops": [
    {"inputs":["x","w"],"outputs":["a"],"workspace":100},
    {"inputs":["a"],"outputs":["v1"]},
    {"inputs":["v1"],"outputs":["v2"],"workspace":40},
    {"inputs":["v2","b"],"outputs":["c"]},
    {"inputs":["c"],"outputs":["out"],"workspace":60},
    {"inputs":["out"],"outputs":["d"]}
  ],
  "graphInputs": [{"id":"x","size":64,"last":0}],
  "tensors": [
    {"id":"w","size":32,"kind":"param"},
    {"id":"b","size":10,"kind":"param"},
    {"id":"a","size":16,"first":0,"last":1},
    {"id":"v1","size":16,"first":1,"last":2,"viewOf":"a"},
    {"id":"v2","size":16,"first":2,"last":3,"viewOf":"v1"},
    {"id":"c","size":8,"first":3,"last":4},
    {"id":"out","size":4,"first":4,"last":5,"isOutput":true},
    {"id":"d","size":4,"first":5,"last":5},
    {"id":"xv","size":64,"first":0,"last":0,"viewOf":"x"}
  ],
  "steps": [[0],[1,2],[3],[4,5]]
}"#;

fn rec<'a>(g: &'a wgalloc_plan::graph::GraphRecords, id: &str) -> &'a wgalloc_plan::UsageRecord {
    g.records.iter().find(|r| r.id == id).unwrap()
}

#[test]
fn views_outputs_params() {
    let g = parse(G).unwrap();
    let r = build_records(&g, &GraphOptions { constant_alignment: 64, ..Default::default() }).unwrap();
    // Chain of views extends the base to op 3; views are not records.
    assert_eq!((rec(&r, "a").first, rec(&r, "a").last), (0, 3));
    assert!(r.records.iter().all(|x| !["v1", "v2", "w", "b", "x", "xv"].contains(&x.id.as_str())));
    assert!(r.aliases.contains(&("v2".into(), Location::Slab { base: "a".into() })));
    assert!(r.aliases.contains(&("xv".into(), Location::Input { base: "x".into() })));
    // Outputs live to the last op.
    assert_eq!(rec(&r, "out").last, 5);
    // Params in the constant region, 64-aligned.
    assert_eq!(r.constants, vec![("w".into(), 0), ("b".into(), 64)]);
    assert_eq!(r.constant_size, 74);
    assert_eq!((r.workspace.shared_size, r.workspace.unique_size), (100, 200));
    assert_eq!(r.workspace.unique_offsets, vec![(0, 0), (2, 100), (4, 140)]);
}

#[test]
fn external_tensors_stay_out_of_the_slab_even_with_inputs_in_it() {
    let g = parse(
        r#"{"ops":[{"inputs":["x","state"],"outputs":["h"]},{"inputs":["h"],"outputs":["state"]},{"inputs":["h"],"outputs":["y"]}],
            "tensors":[{"id":"x","size":16,"kind":"input"},{"id":"state","size":64,"kind":"external"},
                       {"id":"sv","size":32,"viewOf":"state"},{"id":"h","size":16},{"id":"y","size":16,"kind":"output"}]}"#,
    )
    .unwrap();
    for inputs_in_slab in [false, true] {
        let r = build_records(&g, &GraphOptions { inputs_in_slab, ..Default::default() }).unwrap();
        let ids: Vec<&str> = r.records.iter().map(|x| x.id.as_str()).collect();
        assert!(!ids.contains(&"state") && !ids.contains(&"sv"), "{ids:?}");
        assert_eq!(ids.contains(&"x"), inputs_in_slab);
        assert!(r.aliases.contains(&("state".into(), Location::External { base: "state".into() })));
        assert!(r.aliases.contains(&("sv".into(), Location::External { base: "state".into() })));
    }
}

#[test]
fn workspaces_in_slab_beat_unique_region() {
    let g = parse(G).unwrap();
    let plain = build_records(&g, &GraphOptions::default()).unwrap();
    let ins = build_records(&g, &GraphOptions { workspace: WorkspaceMode::InSlab, ..Default::default() }).unwrap();
    assert_eq!(ins.records.len(), plain.records.len() + 3);
    let p0 = plan(&plain.records, PlanOptions::with_strategy(Strategy::Best)).unwrap();
    let p1 = plan(&ins.records, PlanOptions::with_strategy(Strategy::Best)).unwrap();
    let unique_total = p0.slab_size() + plain.workspace.unique_size;
    println!("unique region: {unique_total}, in slab: {}", p1.slab_size());
    assert!(p1.slab_size() <= unique_total);
    check_plan(&p1).unwrap();
}

#[test]
fn multistream_widens_to_steps() {
    let g = parse(G).unwrap();
    let r = build_records(&g, &GraphOptions { multistream: true, ..Default::default() }).unwrap();
    assert_eq!(r.steps, 4);
    assert_eq!((rec(&r, "a").first, rec(&r, "a").last), (0, 2));
    assert_eq!((rec(&r, "c").first, rec(&r, "c").last), (2, 3));
    assert_eq!(rec(&r, "d").first, 3);
    let bad = parse(&G.replace(r#"[[0],[1,2],[3],[4,5]]"#, "[[0],[1,2],[3],[4,4]]")).unwrap();
    assert_eq!(
        build_records(&bad, &GraphOptions { multistream: true, ..Default::default() }).unwrap_err().code(),
        "INVALID_ARGUMENT"
    );
}

#[test]
fn bench_models_match_published_bounds() {
    let d = bench_dir("models");
    for e in std::fs::read_dir(d).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
        let r = build_records(&parse(&text).unwrap(), &GraphOptions::default()).unwrap();
        let lb = wgalloc_plan::lower_bound(&r.records).unwrap();
        assert_eq!(lb, doc["lowerBound"].as_u64().unwrap(), "{}", path.display());
        for s in [Strategy::GreedyBySize, Strategy::Portfolio] {
            let p = plan(&r.records, PlanOptions::with_strategy(s)).unwrap();
            check_plan(&p).unwrap();
        }
    }
}

#[test]
fn declared_in_place_sharing_gives_one_range() {
    let g = r#"{"ops":[{"inputs":["x"],"outputs":["a"]},{"inputs":["a"],"outputs":["b"]},{"inputs":["b"],"outputs":["c"]}],
        "graphInputs":[{"id":"x","size":8,"last":0}],
        "tensors":[{"id":"a","size":32,"first":0,"last":1},{"id":"b","size":32,"first":1,"last":2,"inPlaceOf":"a"},
                   {"id":"c","size":32,"first":2,"last":2,"isOutput":true}]}"#;
    let r = build_records(&parse(g).unwrap(), &GraphOptions::default()).unwrap();
    assert_eq!(rec(&r, "b").shares_with.as_deref(), Some("a"));
    assert_eq!(r.in_place, vec![("b".to_string(), "a".to_string())]);
    let p = plan(&r.records, PlanOptions::default()).unwrap();
    assert_eq!((p.offset_of("a"), p.slab_size()), (p.offset_of("b"), 64));
    check_plan(&p).unwrap();
    // A view or a graph input cannot be a base.
    let bad = g.replace(r#""inPlaceOf":"a""#, r#""inPlaceOf":"x""#);
    assert_eq!(build_records(&parse(&bad).unwrap(), &GraphOptions::default()).unwrap_err().code(), "INVALID_ARGUMENT");
}

/// In-place elementwise ops on the model graphs: every plan valid, never larger, and
/// the bytes saved (with `best`) counted; the ppocr models, with their Add/Mul/Clip/Div
/// chains, must save some.
#[test]
fn in_place_saves_bytes_on_model_graphs() {
    let dir = bench_dir("models");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    let mut saved_any = 0;
    for f in files.iter().filter(|f| f.extension().is_some_and(|x| x == "json")) {
        let g = parse(&std::fs::read_to_string(f).unwrap()).unwrap();
        let opts = PlanOptions { time_limit: Some(std::time::Duration::from_millis(200)), ..Default::default() };
        let plain = plan(&build_records(&g, &GraphOptions::default()).unwrap().records, opts).unwrap();
        let built = build_records(&g, &GraphOptions { in_place: true, ..Default::default() }).unwrap();
        let opts = PlanOptions { time_limit: Some(std::time::Duration::from_millis(200)), ..Default::default() };
        let shared = plan(&built.records, opts).unwrap();
        check_plan(&shared).unwrap();
        assert!(shared.slab_size() <= plain.slab_size(), "{}", f.display());
        let name = f.file_name().unwrap().to_string_lossy();
        println!(
            "{name}: {} in-place pairs, slab {} -> {} ({} bytes saved)",
            built.in_place.len(),
            plain.slab_size(),
            shared.slab_size(),
            plain.slab_size() - shared.slab_size()
        );
        if name.starts_with("ppocr") && shared.slab_size() < plain.slab_size() {
            saved_any += 1;
        }
    }
    assert_eq!(saved_any, 2, "in-place sharing saved nothing on the ppocr models");
}

/// Every committed graph file parses with unknown fields refused (Note [Unknown graph fields
/// are refused]): the fields they use are part of the format.
#[test]
fn every_committed_graph_parses() {
    let mut n = 0;
    for e in std::fs::read_dir(bench_dir("models")).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let doc = wgalloc_plan::doc::GraphDoc::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let g = parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(g.tensors.len(), doc.tensors.len() + doc.graph_inputs.len() + doc.params.len());
        assert_eq!(g.ops.len(), doc.ops.len());
        n += 1;
    }
    assert!(n >= 5, "{n} model graphs");
}

#[test]
fn an_unknown_field_is_refused_naming_its_path() {
    for (text, path) in [
        (G.replace(r#""viewOf":"v1""#, r#""viewof":"v1""#), "tensors[4].viewof"),
        (G.replace(r#""workspace":40"#, r#""workspace":40,"scratch":8"#), "ops[2].scratch"),
        (G.replace(r#""steps""#, r#""stepz""#), "stepz"),
        (
            G.replace(r#"{"id":"x","size":64,"last":0}"#, r#"{"id":"x","size":64,"last":0,"kind":"input"}"#),
            "graphInputs[0].kind",
        ),
    ] {
        let e = parse(&text).unwrap_err();
        assert_eq!(e.code(), "PARSE_ERROR");
        assert!(e.to_string().starts_with(&format!("{path}: expected a field of the graph format")), "{e}");
    }
    let e = parse(&G.replace(r#""kind":"param""#, r#""kind":"weight""#)).unwrap_err();
    assert!(e.to_string().starts_with("tensors[0].kind: expected one of 'input', 'param'"), "{e}");
}

#[test]
fn a_view_larger_than_its_base_is_refused() {
    // At its base's offset, the 64-byte view would overlap `a`, live at the same time.
    let g = parse(
        r#"{"tensors":[{"id":"x","size":64,"kind":"input"},{"id":"h","size":16},{"id":"hv","size":64,"viewOf":"h"},
        {"id":"a","size":64},{"id":"y","size":64,"kind":"output"}],
        "ops":[{"inputs":["x"],"outputs":["h"]},{"inputs":["x"],"outputs":["a"]},{"inputs":["hv","a"],"outputs":["y"]}]}"#,
    )
    .unwrap();
    let err = build_records(&g, &GraphOptions::default()).unwrap_err();
    assert_eq!(
        err.invalid_argument(),
        Some(("tensors[2].size".into(), "at most 16 bytes (its base 'h')".into(), "64".into())),
        "{err}"
    );
}
