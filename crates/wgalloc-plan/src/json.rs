//! Our JSON records format: an array of `{id, size, first, last, alignment?, offset?,
//! preferredOffset?, sharesWith? (alias inPlaceOf), space?}`, or an object
//! `{"records": [...]}`, or a plan written by [`crate::Plan::to_json`] (an object with
//! `slabSize`): there a record's `offset` is where it was placed, fixed only with
//! `fixed: true`, and the plan's `alignment` is folded into every record's.
//! Fields are read by hand from a `serde_json::Value` so that an error names the
//! exact path (e.g. `records[3].size`).
//!
//! Integers are exact u64 end to end: numbers are read as integers (never through a
//! float), decimal strings are accepted too, and [`int`] writes values above
//! 2^53 - 1 (where JS numbers round) as strings.
//!
//! Strict mode (the default) refuses unknown fields, naming them.

use crate::doc::Exact;
use crate::error::PlanError;
use crate::record::{lcm, UsageRecord};
use serde_json::{Map, Value};
use std::fmt::Display;

/// Element `index` of the array `name`, as an error path (`records[3]`). Paths are written
/// only when an error needs them: a million records must not format a million strings.
#[derive(Clone, Copy)]
pub(crate) struct Item<'a>(pub &'a str, pub usize);

impl Display for Item<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}[{}]", self.0, self.1)
    }
}

/// Largest integer JS numbers hold exactly.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// An integer as JSON: a number up to 2^53 - 1, a decimal string above.
pub fn int(x: u64) -> Value {
    if x <= MAX_SAFE_INTEGER {
        Value::from(x)
    } else {
        Value::String(x.to_string())
    }
}

/// A record as JSON (only the fields it has), integers as [`int`] writes them.
pub fn record_json(r: &UsageRecord) -> Value {
    let mut m = Map::new();
    m.insert("id".into(), Value::String(r.id.clone()));
    m.insert("size".into(), int(r.size));
    m.insert("first".into(), int(r.first));
    m.insert("last".into(), int(r.last));
    if let Some(a) = r.alignment {
        m.insert("alignment".into(), int(a));
    }
    if let Some(o) = r.offset {
        m.insert("offset".into(), int(o));
    }
    if let Some(o) = r.preferred_offset {
        m.insert("preferredOffset".into(), int(o));
    }
    if let Some(b) = &r.shares_with {
        m.insert("sharesWith".into(), Value::String(b.clone()));
    }
    if let Some(sp) = &r.space {
        m.insert("space".into(), Value::String(sp.clone()));
    }
    Value::Object(m)
}

const RECORD_FIELDS: [&str; 10] =
    ["id", "size", "first", "last", "alignment", "offset", "preferredOffset", "sharesWith", "inPlaceOf", "space"];
/// Extra fields of a record in a written plan.
const PLAN_RECORD_FIELDS: [&str; 1] = ["fixed"];
const PLAN_FIELDS: [&str; 13] = [
    "strategy",
    "method",
    "slabSize",
    "lowerBound",
    "ratio",
    "optimal",
    "optimalBy",
    "timeMs",
    "alignment",
    "offsets",
    "spaces",
    "records",
    "graph",
];

/// Refuses the first key of `o` not in `known` (strict mode).
pub(crate) fn refuse_unknown(o: &Map<String, Value>, known: &[&str], path: impl Display) -> Result<(), PlanError> {
    match o.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) => Err(PlanError::bad_field(
            format!("{path}.{k}"),
            format!("a known field ({})", known.join(", ")),
            format!("{k:?}"),
        )
        .with_hint("unknown field; pass strict: false to ignore it")),
        None => Ok(()),
    }
}

/// Parses text into a JSON value; syntax errors carry serde's line number.
pub(crate) fn parse_value(text: &str) -> Result<Value, PlanError> {
    serde_json::from_str(text).map_err(|e| PlanError::Parse {
        line: e.line(),
        field: String::new(),
        message: e.to_string(),
    })
}

/// A JSON value in an error: as written, cut short.
pub(crate) fn brief(v: &Value) -> String {
    let s = v.to_string();
    match s.char_indices().nth(60) {
        Some((at, _)) => format!("{}...", &s[..at]),
        None => s,
    }
}

/// A required field that is absent.
fn missing(path: String, expected: &str) -> PlanError {
    PlanError::bad_field(path, expected, "nothing").with_hint("missing field")
}

pub(crate) fn obj(v: &Value, path: impl Display) -> Result<&Map<String, Value>, PlanError> {
    v.as_object().ok_or_else(|| PlanError::bad_field(path.to_string(), "an object", brief(v)))
}

pub(crate) fn arr(v: &Value, path: impl Display) -> Result<&Vec<Value>, PlanError> {
    v.as_array().ok_or_else(|| PlanError::bad_field(path.to_string(), "an array", brief(v)))
}

/// Required non-negative integer field (rejects negatives and fractions).
pub(crate) fn u64_field(o: &Map<String, Value>, key: &str, path: impl Display) -> Result<u64, PlanError> {
    match o.get(key) {
        None => Err(missing(format!("{path}.{key}"), "a non-negative integer")),
        Some(v) => as_u64(v, format_args!("{path}.{key}")),
    }
}

pub(crate) fn opt_u64_field(o: &Map<String, Value>, key: &str, path: impl Display) -> Result<Option<u64>, PlanError> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => as_u64(v, format_args!("{path}.{key}")).map(Some),
    }
}

/// A non-negative integer: a JSON integer or a decimal string (for values above
/// 2^53 - 1 written by JS). Fractions, negatives, exponents and values past u64 fail.
pub(crate) fn as_u64(v: &Value, path: impl Display) -> Result<u64, PlanError> {
    let n = match v {
        Value::String(s) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => s.parse::<u64>().ok(),
        _ => v.as_u64(),
    };
    n.ok_or_else(|| {
        let big = matches!(v, Value::String(s) if s.bytes().all(|b| b.is_ascii_digit()))
            || v.as_f64().is_some_and(|f| f >= 18446744073709551616.0);
        if big {
            PlanError::SizeOverflow(format!("{path}: {v} does not fit in 64 bits"))
        } else {
            PlanError::bad_field(path.to_string(), "a non-negative integer", brief(v))
        }
    })
}

fn opt_str_field(o: &Map<String, Value>, key: &str, path: impl Display) -> Result<Option<String>, PlanError> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(v) => Err(PlanError::bad_field(format!("{path}.{key}"), "a string", brief(v))),
    }
}

pub(crate) fn str_field<'a>(o: &'a Map<String, Value>, key: &str, path: impl Display) -> Result<&'a str, PlanError> {
    match o.get(key) {
        None => Err(missing(format!("{path}.{key}"), "a string")),
        Some(v) => v.as_str().ok_or_else(|| PlanError::bad_field(format!("{path}.{key}"), "a string", brief(v))),
    }
}

/// Parses records JSON (array, object with a `records` array, or a written plan),
/// refusing unknown fields.
/// Whether JSON `text` is a graph (an object with a `tensors` array) rather than records.
pub fn has_tensors_array(text: &str) -> Result<bool, PlanError> {
    if text.trim_start().starts_with('[') {
        return Ok(false); // an array of records: no need to read it twice
    }
    Ok(parse_value(text)?.get("tensors").is_some_and(Value::is_array))
}

pub fn parse_records(text: &str) -> Result<Vec<UsageRecord>, PlanError> {
    parse_records_with(text, true)
}

/// [`parse_records`]; with `strict` false unknown fields are ignored.
pub fn parse_records_with(text: &str, strict: bool) -> Result<Vec<UsageRecord>, PlanError> {
    // A plain array of well-formed records is read straight into records, with no tree of
    // values (5x faster on 10,000 records). Whatever it does not take (an unknown or repeated
    // field, a bad value, another layout) is read the way below, which names the error.
    if text.trim_start().starts_with('[') {
        if let Ok(records) = serde_json::from_str::<Vec<PlainRecord>>(text) {
            if let Ok(records) = records.into_iter().map(UsageRecord::try_from).collect() {
                return Ok(records);
            }
        }
    }
    records_from_value(&parse_value(text)?, strict)
}

/// A record as the fast path reads it: the known fields only.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PlainRecord {
    id: String,
    size: Exact,
    first: Exact,
    last: Exact,
    alignment: Option<Exact>,
    offset: Option<Exact>,
    preferred_offset: Option<Exact>,
    shares_with: Option<String>,
    in_place_of: Option<String>,
    space: Option<String>,
}

impl TryFrom<PlainRecord> for UsageRecord {
    /// The slow path names the problem.
    type Error = ();

    fn try_from(r: PlainRecord) -> Result<Self, ()> {
        if r.shares_with.is_some() && r.in_place_of.is_some() && r.shares_with != r.in_place_of {
            return Err(());
        }
        Ok(UsageRecord {
            id: r.id,
            size: r.size.0,
            first: r.first.0,
            last: r.last.0,
            alignment: r.alignment.map(|x| x.0),
            offset: r.offset.map(|x| x.0),
            preferred_offset: r.preferred_offset.map(|x| x.0),
            shares_with: r.shares_with.or(r.in_place_of),
            space: r.space,
        })
    }
}

pub(crate) fn records_from_value(v: &Value, strict: bool) -> Result<Vec<UsageRecord>, PlanError> {
    let (list, plan_doc) = match v {
        Value::Object(o) => {
            let plan_doc = o.contains_key("slabSize");
            if strict {
                refuse_unknown(o, if plan_doc { &PLAN_FIELDS } else { &["records"] }, "$")?;
            }
            (arr(o.get("records").unwrap_or(&Value::Null), "records")?, plan_doc.then_some(o))
        }
        other => (arr(other, "records")?, None),
    };
    let plan_align = match plan_doc {
        Some(o) => opt_u64_field(o, "alignment", "$")?.unwrap_or(1),
        None => 1,
    };
    let mut known: Vec<&str> = RECORD_FIELDS.to_vec();
    if plan_doc.is_some() {
        known.extend(PLAN_RECORD_FIELDS);
    }
    list.iter()
        .enumerate()
        .map(|(i, r)| {
            let path = Item("records", i);
            let o = obj(r, path)?;
            if strict {
                refuse_unknown(o, &known, path)?;
            }
            let shares = opt_str_field(o, "sharesWith", path)?;
            let in_place = opt_str_field(o, "inPlaceOf", path)?;
            if shares.is_some() && in_place.is_some() && shares != in_place {
                return Err(PlanError::bad_field(
                    format!("{path}.inPlaceOf"),
                    format!("{:?} (its sharesWith)", shares.as_deref().unwrap_or_default()),
                    format!("{:?}", in_place.as_deref().unwrap_or_default()),
                )
                .with_hint("inPlaceOf differs from sharesWith"));
            }
            let mut alignment = opt_u64_field(o, "alignment", path)?;
            let mut offset = opt_u64_field(o, "offset", path)?;
            if plan_doc.is_some() {
                // A written plan: `offset` is the placement, fixed only when marked so.
                if o.get("fixed").and_then(Value::as_bool) != Some(true) {
                    offset = None;
                }
                if plan_align > 1 {
                    let own = alignment.unwrap_or(1).max(1);
                    alignment = Some(lcm(own, plan_align).ok_or_else(|| {
                        PlanError::SizeOverflow(format!("{path}.alignment with the plan's {plan_align}"))
                    })?);
                }
            }
            Ok(UsageRecord {
                id: str_field(o, "id", path)?.to_string(),
                size: u64_field(o, "size", path)?,
                first: u64_field(o, "first", path)?,
                last: u64_field(o, "last", path)?,
                alignment,
                offset,
                preferred_offset: opt_u64_field(o, "preferredOffset", path)?,
                shares_with: shares.or(in_place),
                space: opt_str_field(o, "space", path)?,
            })
        })
        .collect()
}

/// Writes records as a JSON array (exact integers, see [`int`]).
pub fn write_records(records: &[UsageRecord]) -> String {
    Value::Array(records.iter().map(record_json).collect()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The records the slow path reads (a tree of values, field by field).
    fn slow(text: &str, strict: bool) -> Result<Vec<UsageRecord>, String> {
        parse_value(text).and_then(|v| records_from_value(&v, strict)).map_err(|e| e.to_string())
    }

    #[test]
    fn the_fast_path_reads_what_the_slow_path_reads_and_leaves_it_every_error() {
        let cases = [
            r#"[{"id":"a","size":8,"first":0,"last":1}]"#,
            r#"[{"id":"a","size":"18446744073709551615","first":0,"last":"9007199254740993","alignment":64}]"#,
            r#"[{"id":"a","size":8,"first":0,"last":1,"offset":null,"alignment":null,"space":"s","preferredOffset":16}]"#,
            r#"[{"id":"a","size":8,"first":0,"last":1},{"id":"b","size":8,"first":1,"last":2,"inPlaceOf":"a","sharesWith":"a"}]"#,
            r#"[{"id":"b","size":8,"first":1,"last":2,"inPlaceOf":"a","sharesWith":"c"}]"#,
            r#"[{"id":"a","size":8,"first":0,"last":1,"colour":"red"}]"#,
            r#"[{"id":"a","size":8,"size":9,"first":0,"last":1}]"#,
            r#"[{"id":"a","size":-8,"first":0,"last":1}]"#,
            r#"[{"id":"a","size":8.5,"first":0,"last":1}]"#,
            r#"[{"id":"a","size":1e3,"first":0,"last":1}]"#,
            r#"[{"id":"a","size":"","first":0,"last":1}]"#,
            r#"[{"id":"a","size":"+8","first":0,"last":1}]"#,
            r#"[{"id":"a","size":"18446744073709551616","first":0,"last":1}]"#,
            r#"[{"id":"a","size":18446744073709551616,"first":0,"last":1}]"#,
            r#"[{"id":7,"size":8,"first":0,"last":1}]"#,
            r#"[{"size":8,"first":0,"last":1}]"#,
            r#"[{"id":"a","size":8,"first":0,"last":1}] x"#,
            r#"[3]"#,
            r#"[]"#,
            r#"  [{"id":"a","size":8,"first":0,"last":1}]"#,
        ];
        for text in cases {
            for strict in [true, false] {
                let fast = parse_records_with(text, strict).map_err(|e| e.to_string());
                assert_eq!(fast, slow(text, strict), "{text} (strict {strict})");
            }
        }
    }
}
