//! Eager alloc/free traces (the `bench/data/traces` format): parsed and checked once, so
//! every policy replays the same validated events. Bad input is `INVALID_ARGUMENT` naming
//! the event at fault.

use std::collections::HashMap;

use serde_json::Value;

use crate::error::{Error, Result};
use crate::MAX_SAFE_INTEGER;

/// One event, with its id replaced by a dense slot number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceEvent {
    Alloc { slot: u32, size: u64 },
    Free { slot: u32 },
}

#[derive(Debug, Clone)]
pub struct Trace {
    pub events: Vec<TraceEvent>,
    /// Distinct ids (slots are `0..slots`).
    pub slots: usize,
    /// Requests the trace stands for (figures per 1000 requests).
    pub requests: u64,
    /// Largest total of requested bytes live at one time.
    pub peak_live: u64,
}

const SHAPE: &str = r#"a trace is an object with an events array of { op: "alloc", id, size } | { op: "free", id }"#;

impl Trace {
    /// Parses trace JSON text.
    pub fn parse(text: &str) -> Result<Trace> {
        let value: Value = serde_json::from_str(text).map_err(|e| {
            Error::invalid("trace", "JSON text", "text that does not parse").with_hint(format!("not valid JSON ({e})"))
        })?;
        Trace::from_value(&value)
    }

    pub fn from_value(value: &Value) -> Result<Trace> {
        let events = value.get("events").and_then(Value::as_array).ok_or_else(|| {
            Error::invalid("trace.events", "an array of events", value.get("events").map_or("nothing".into(), brief))
                .with_hint(SHAPE)
        })?;
        let requests = match value.get("requests") {
            None | Some(Value::Null) => 1,
            Some(r) => r
                .as_u64()
                .filter(|&n| (1..=MAX_SAFE_INTEGER).contains(&n))
                .ok_or_else(|| Error::invalid("trace.requests", "a positive integer", brief(r)))?,
        };
        let mut ids: HashMap<String, u32> = HashMap::new();
        // Requested size of each slot while live.
        let mut live: Vec<Option<u64>> = Vec::new();
        let (mut current, mut peak_live) = (0u64, 0u64);
        let mut out = Vec::with_capacity(events.len());
        for (i, e) in events.iter().enumerate() {
            let bad = |(field, expected, got): (&str, String, String)| {
                Error::invalid(format!("trace event {i}{field}"), expected, got)
            };
            let op = e.get("op").and_then(Value::as_str);
            let id = match e.get("id") {
                Some(Value::String(s)) if !s.is_empty() => s.clone(),
                Some(n @ Value::Number(_)) => n.to_string(),
                other => {
                    return Err(bad((
                        ".id",
                        "a non-empty string or a number".into(),
                        other.map_or("nothing".into(), brief),
                    )))
                }
            };
            let next = ids.len() as u32;
            let slot = *ids.entry(id).or_insert(next);
            if slot as usize == live.len() {
                live.push(None);
            }
            match op {
                Some("alloc") => {
                    let size = size_of(e.get("size")).map_err(bad)?;
                    if live[slot as usize].is_some() {
                        return Err(bad((
                            ".id",
                            "an id not live (freed before it is allocated again)".into(),
                            id_of(e),
                        )));
                    }
                    live[slot as usize] = Some(size);
                    // Sizes are at most 2^53 - 1 each; their sum still must fit.
                    current = current.checked_add(size).filter(|&c| c <= crate::MAX_SAFE_INTEGER).ok_or_else(|| {
                        bad((".size", "live bytes of at most 2^53 - 1 at once".into(), size.to_string()))
                    })?;
                    peak_live = peak_live.max(current);
                    out.push(TraceEvent::Alloc { slot, size });
                }
                Some("free") => {
                    let Some(size) = live[slot as usize].take() else {
                        return Err(bad((".id", "the id of a live allocation to free".into(), id_of(e))));
                    };
                    current -= size;
                    out.push(TraceEvent::Free { slot });
                }
                _ => {
                    return Err(bad((
                        ".op",
                        r#""alloc" or "free""#.into(),
                        e.get("op").map_or("nothing".into(), brief),
                    )))
                }
            }
        }
        Ok(Trace { events: out, slots: live.len(), requests, peak_live })
    }

    /// A serving mix (ids `r<k>:...`, `requests` of them) as two draws of its generator: the
    /// events of its first half of requests and of the rest, each with `requests` set to its count.
    pub fn halves(value: &Value) -> Result<(Trace, Trace)> {
        let requests = match value.get("requests").and_then(Value::as_u64) {
            Some(n) if n >= 2 => n,
            other => {
                let got =
                    other.map_or_else(|| value.get("requests").map_or("nothing".into(), brief), |n| n.to_string());
                return Err(Error::invalid("trace.requests", "a mix of at least 2 requests", got));
            }
        };
        let events = value.get("events").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        let cut = requests / 2;
        let mut halves = [Vec::new(), Vec::new()];
        for (i, e) in events.iter().enumerate() {
            let request = e
                .get("id")
                .and_then(Value::as_str)
                .and_then(|id| id.strip_prefix('r')?.split_once(':')?.0.parse::<u64>().ok())
                .ok_or_else(|| Error::invalid(format!("trace event {i}.id"), "a mix's id r<k>:...", id_of(e)))?;
            halves[(request >= cut) as usize].push(e.clone());
        }
        let [first, rest] = halves;
        let draw =
            |events: Vec<Value>, n: u64| Trace::from_value(&serde_json::json!({ "requests": n, "events": events }));
        Ok((draw(first, cut)?, draw(rest, requests - cut)?))
    }

    /// Bytes the trace's allocations request in all (saturating).
    pub fn bytes_allocated(&self) -> u64 {
        self.events.iter().fold(0u64, |sum, e| match *e {
            TraceEvent::Alloc { size, .. } => sum.saturating_add(size),
            TraceEvent::Free { .. } => sum,
        })
    }
}

/// A byte count: an integer from 0 to 2^53-1 (zero-sized tensors exist).
fn size_of(v: Option<&Value>) -> std::result::Result<u64, (&'static str, String, String)> {
    let ok = v.and_then(Value::as_u64).filter(|&n| n <= MAX_SAFE_INTEGER);
    ok.ok_or_else(|| (".size", "an integer from 0 to 2^53-1 bytes".into(), v.map_or("nothing".into(), brief)))
}

fn id_of(e: &Value) -> String {
    e.get("id").map_or_else(String::new, brief)
}

/// A value as JSON, cut short: error messages quote the input without echoing megabytes.
fn brief(v: &Value) -> String {
    let s = v.to_string();
    if s.len() <= 80 {
        return s;
    }
    let cut = (0..=80).rev().find(|&i| s.is_char_boundary(i)).unwrap_or(0);
    format!("{}...", &s[..cut])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(events: &str) -> Result<Trace> {
        Trace::parse(&format!(r#"{{"events": [{events}]}}"#))
    }

    #[test]
    fn events_get_dense_slots_and_the_live_peak() {
        let t = Trace::parse(
            r#"{"requests": 2, "events": [
                {"op":"alloc","id":"a","size":8}, {"op":"alloc","id":7,"size":4},
                {"op":"free","id":"a"}, {"op":"alloc","id":"a","size":2}, {"op":"free","id":7}, {"op":"free","id":"a"}]}"#,
        )
        .unwrap();
        assert_eq!((t.slots, t.requests, t.peak_live, t.bytes_allocated()), (2, 2, 12, 14));
        assert_eq!(t.events[3], TraceEvent::Alloc { slot: 0, size: 2 });
        assert_eq!(t.events[4], TraceEvent::Free { slot: 1 });
    }

    #[test]
    fn a_mix_splits_into_its_halves_of_requests() {
        let mix = serde_json::json!({ "requests": 3, "events": [
            {"op":"alloc","id":"r0:a","size":8}, {"op":"free","id":"r0:a"},
            {"op":"alloc","id":"r1:a","size":4}, {"op":"free","id":"r1:a"},
            {"op":"alloc","id":"r2:a","size":6}, {"op":"free","id":"r2:a"}]});
        let (first, rest) = Trace::halves(&mix).unwrap();
        assert_eq!((first.requests, first.peak_live, first.events.len()), (1, 8, 2));
        assert_eq!((rest.requests, rest.peak_live, rest.events.len()), (2, 6, 4));
        let single = serde_json::json!({ "events": [{"op":"alloc","id":"a","size":8}] });
        assert!(Trace::halves(&single).unwrap_err().to_string().contains("trace.requests: expected a mix"));
        let unnamed = serde_json::json!({ "requests": 2, "events": [{"op":"alloc","id":"a","size":8}] });
        assert!(Trace::halves(&unnamed).unwrap_err().to_string().contains("trace event 0.id: expected a mix's id"));
    }

    #[test]
    fn bad_input_names_the_event() {
        let cases = [
            (
                r#"{"op":"alloc","id":"a","size":-8}"#,
                "trace event 0.size: expected an integer from 0 to 2^53-1 bytes, got -8",
            ),
            (r#"{"op":"alloc","id":"a","size":1.5}"#, "got 1.5"),
            (r#"{"op":"alloc","id":"a","size":9007199254740992}"#, "got 9007199254740992"),
            (r#"{"op":"alloc","id":"a","size":1e300}"#, "got 1e+300"),
            (r#"{"op":"alloc","id":"a","size":"8"}"#, r#"got "8""#),
            (r#"{"op":"alloc","id":"a"}"#, "got nothing"),
            (
                r#"{"op":"alloc","id":"a","size":8}, {"op":"alloc","id":"a","size":8}"#,
                "trace event 1.id: expected an id not live (freed before it is allocated again), got \"a\"",
            ),
            (
                r#"{"op":"alloc","id":"a","size":8}, {"op":"free","id":"b"}"#,
                "trace event 1.id: expected the id of a live allocation to free, got \"b\"",
            ),
            (
                r#"{"op":"alloc","id":"a","size":8}, {"op":"free","id":"a"}, {"op":"free","id":"a"}"#,
                "trace event 2.id: expected the id of a live allocation",
            ),
            (r#"{"op":"realloc","id":"a","size":8}"#, r#"trace event 0.op: expected "alloc" or "free", got "realloc""#),
            (r#"{"op":"alloc","size":8}"#, "trace event 0.id: expected a non-empty string or a number, got nothing"),
            (r#"7"#, "trace event 0.id: expected"),
            (
                r#"{"op":"alloc","id":"a","size":9007199254740991}, {"op":"alloc","id":"b","size":1}"#,
                "trace event 1.size: expected live bytes of at most 2^53 - 1 at once",
            ),
        ];
        let mut wrong = Vec::new();
        for (events, want) in cases {
            let err = parse(events).unwrap_err();
            assert_eq!(err.code(), "INVALID_ARGUMENT");
            if !err.to_string().contains(want) {
                wrong.push(format!("{events}: {err}"));
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
        for text in ["[]", "{}", r#"{"events": 3}"#, "not json", r#"{"events": [], "requests": 0}"#] {
            assert_eq!(Trace::parse(text).unwrap_err().code(), "INVALID_ARGUMENT", "{text}");
        }
        assert_eq!(parse(r#"{"op":"alloc","id":"a","size":9007199254740991}"#).unwrap().peak_live, (1 << 53) - 1);
    }
}
