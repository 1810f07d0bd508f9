//! Our JSON records format: an array of `{id, size, first, last, alignment?}`, or an
//! object `{"records": [...]}`. Fields are read by hand from a `serde_json::Value`
//! so that an error names the exact path (e.g. `records[3].size`).

use crate::error::PlanError;
use crate::record::UsageRecord;
use serde_json::{Map, Value};

/// Parses text into a JSON value; syntax errors carry serde's line number.
pub(crate) fn parse_value(text: &str) -> Result<Value, PlanError> {
    serde_json::from_str(text).map_err(|e| PlanError::Parse {
        line: e.line(),
        field: String::new(),
        message: e.to_string(),
    })
}

pub(crate) fn obj<'a>(v: &'a Value, path: &str) -> Result<&'a Map<String, Value>, PlanError> {
    v.as_object().ok_or_else(|| PlanError::parse(0, path, "expected an object"))
}

pub(crate) fn arr<'a>(v: &'a Value, path: &str) -> Result<&'a Vec<Value>, PlanError> {
    v.as_array().ok_or_else(|| PlanError::parse(0, path, "expected an array"))
}

/// Required non-negative integer field (rejects negatives and fractions).
pub(crate) fn u64_field(o: &Map<String, Value>, key: &str, path: &str) -> Result<u64, PlanError> {
    match o.get(key) {
        None => Err(PlanError::parse(0, format!("{path}.{key}"), "missing field")),
        Some(v) => as_u64(v, &format!("{path}.{key}")),
    }
}

pub(crate) fn opt_u64_field(o: &Map<String, Value>, key: &str, path: &str) -> Result<Option<u64>, PlanError> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => as_u64(v, &format!("{path}.{key}")).map(Some),
    }
}

pub(crate) fn as_u64(v: &Value, path: &str) -> Result<u64, PlanError> {
    v.as_u64().ok_or_else(|| PlanError::parse(0, path, format!("expected a non-negative integer, found {v}")))
}

pub(crate) fn str_field<'a>(o: &'a Map<String, Value>, key: &str, path: &str) -> Result<&'a str, PlanError> {
    match o.get(key) {
        None => Err(PlanError::parse(0, format!("{path}.{key}"), "missing field")),
        Some(v) => v
            .as_str()
            .ok_or_else(|| PlanError::parse(0, format!("{path}.{key}"), format!("expected a string, found {v}"))),
    }
}

/// Parses records JSON (array, or object with a `records` array).
pub fn parse_records(text: &str) -> Result<Vec<UsageRecord>, PlanError> {
    let v = parse_value(text)?;
    let list = match &v {
        Value::Object(o) => arr(o.get("records").unwrap_or(&Value::Null), "records")?,
        other => arr(other, "records")?,
    };
    list.iter()
        .enumerate()
        .map(|(i, r)| {
            let path = format!("records[{i}]");
            let o = obj(r, &path)?;
            Ok(UsageRecord {
                id: str_field(o, "id", &path)?.to_string(),
                size: u64_field(o, "size", &path)?,
                first: u64_field(o, "first", &path)?,
                last: u64_field(o, "last", &path)?,
                alignment: opt_u64_field(o, "alignment", &path)?,
            })
        })
        .collect()
}

/// Writes records as a JSON array.
pub fn write_records(records: &[UsageRecord]) -> String {
    serde_json::to_string(records).unwrap_or_default()
}
