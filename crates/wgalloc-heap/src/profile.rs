//! Warm-start profiles: what a heap learned about its workload (per pool, the bytes live at the
//! peak and the segments that hold them), as versioned JSON, and the checks a profile read back
//! passes before a heap reserves its segments (`HeapCore::warm_start`).
//!
//! Note [Warm-start profiles]: a profile does not list the segments the run held at its peak.
//! An online policy sizes each segment without knowing the next request, so the segments held
//! at the peak (of reserved bytes, or of live bytes) carry the history of the growth: 1.05-1.2 x
//! the live bytes on the committed serving mixes, in several pieces. A service that restarts
//! knows the peak, and a segment cannot grow, so the profile plans what the peak needs instead:
//! per arena (the free list a usage's small and large pools share), the most bytes allocated at
//! once during the run, and one segment of `WARM_FACTOR` x those bytes + `WARM_HEADROOM` (as
//! few equal segments as the device's largest buffer allows), listed under the pool that held
//! most of them. One contiguous range fragments least; the margin is room for best fit's holes
//! and for a next run whose requests differ a little (compaction moves large blocks when the
//! free bytes suffice but no range does). The peaks are kept since the heap was created:
//! `resetPeakStats()` does not clear them.
//!
//! Note [Profiles accumulate]: invariant: after a warm start, `profile()` covers the profile it
//! started from: per arena, the larger of that profile's peak and the run's own (with the bytes
//! of each pool at it). A service that saves its profile at exit and warm starts from it then
//! reserves, after a few restarts, what its largest requests so far need, and makes no driver
//! allocation after the warm start unless a run exceeds every run before it, where a profile of
//! one run stalls the next run whose draw of requests peaks higher. The cost: a profile does not
//! shrink when the workload does; the profile of a cold run starts afresh. Held by `a_profile_covers_the_profile_its_warm_start_came_from`
//! (allocator_tests).

use serde_json::{json, Value};

use super::pool::{PoolKind, SEGMENT_GRANULE};
use crate::error::{Error, Result};
use crate::MAX_SAFE_INTEGER;

/// The `format` field of a profile.
pub const PROFILE_FORMAT: &str = "wgalloc-heap-profile";
/// The `version` field this build writes and reads.
pub const PROFILE_VERSION: u64 = 1;
/// A warm segment is this many times the arena's peak live bytes, plus `WARM_HEADROOM`.
pub const WARM_FACTOR: f64 = 1.02;
pub const WARM_HEADROOM: u64 = 1 << 20;

/// What a profile says about one pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolProfile {
    pub pool: PoolKind,
    /// Bytes allocated in the pool when its arena's live bytes peaked.
    pub peak_live: u64,
    /// Segment sizes a warm start reserves for the pool.
    pub segments: Vec<u64>,
}

/// A heap's workload as a warm start needs it (see Note [Warm-start profiles]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HeapProfile {
    /// Pools in the order they were read (or `PoolKind::ALL` order), each at most once.
    pub pools: Vec<PoolProfile>,
}

impl HeapProfile {
    /// The plan for an arena whose pools held `peaks` (pool, bytes) at its live peak.
    pub(crate) fn plan_arena(peaks: &[(PoolKind, u64)], max_buffer_size: u64) -> Vec<PoolProfile> {
        let total: u64 = peaks.iter().map(|p| p.1).sum();
        if total == 0 {
            return Vec::new();
        }
        let bytes = warm_bytes(total);
        // Segments are whole granules (a warm start rounds them up), so the largest is the
        // device's largest buffer rounded down to one.
        let largest = (max_buffer_size / SEGMENT_GRANULE * SEGMENT_GRANULE).max(SEGMENT_GRANULE);
        let pieces = bytes.div_ceil(largest).max(1);
        let each = round_to_granule(bytes.div_ceil(pieces)).min(largest);
        // The segments go under the pool that held most of the peak (the large one on a tie).
        let owner = peaks.iter().max_by_key(|p| (p.1, !p.0.is_small())).map(|p| p.0).expect("a pool");
        peaks
            .iter()
            .filter(|p| p.1 > 0 || p.0 == owner)
            .map(|&(pool, peak_live)| PoolProfile {
                pool,
                peak_live,
                segments: if pool == owner { vec![each; pieces as usize] } else { Vec::new() },
            })
            .collect()
    }

    /// The bytes allocated at the peak, over every pool.
    pub fn peak_live(&self) -> u64 {
        self.pools.iter().fold(0u64, |a, p| a.saturating_add(p.peak_live))
    }

    /// Bytes of every segment the profile lists.
    pub fn segment_bytes(&self) -> u64 {
        self.pools.iter().flat_map(|p| &p.segments).fold(0u64, |a, &s| a.saturating_add(s))
    }

    /// The profile as JSON (`format`, `version`, `pools`).
    pub fn to_json(&self) -> Value {
        let pools: Vec<Value> = self
            .pools
            .iter()
            .map(|p| json!({ "pool": p.pool.as_str(), "peakLiveBytes": p.peak_live, "segments": p.segments }))
            .collect();
        json!({ "format": PROFILE_FORMAT, "version": PROFILE_VERSION, "pools": pools })
    }

    /// Parses profile JSON text; bad input is `INVALID_ARGUMENT` naming the field.
    pub fn parse(text: &str) -> Result<HeapProfile> {
        let value: Value = serde_json::from_str(text).map_err(|e| {
            Error::invalid("heap profile", "JSON text", "text that does not parse")
                .with_hint(format!("not valid JSON ({e})"))
        })?;
        HeapProfile::from_value(&value)
    }

    /// Checks a profile: `format`, `version`, and per pool a known name (once), `peakLiveBytes`
    /// and `segments` of integer byte counts. Bad input is `INVALID_ARGUMENT` naming the field.
    pub fn from_value(value: &Value) -> Result<HeapProfile> {
        let bad = |field: &str, expected: String, got: String| {
            Error::invalid(
                if field.is_empty() { "heap profile".into() } else { format!("heap profile.{field}") },
                expected,
                got,
            )
        };
        let obj = value
            .as_object()
            .ok_or_else(|| bad("", "an object with format, version and pools".into(), brief(value)))?;
        // A misspelt field would drop what it says (a pool's segments) without a word.
        if let Some((key, v)) = unknown_field(obj, &PROFILE_FIELDS) {
            return Err(bad(key, "no such field (a profile has format, version and pools)".into(), brief(v)));
        }
        match obj.get("format") {
            Some(Value::String(f)) if f == PROFILE_FORMAT => {}
            other => return Err(bad("format", format!("\"{PROFILE_FORMAT}\""), shown(other))),
        }
        match obj.get("version") {
            Some(v) if v.as_u64() == Some(PROFILE_VERSION) => {}
            other => return Err(bad("version", format!("{PROFILE_VERSION} (this build's)"), shown(other))),
        }
        let pools = obj
            .get("pools")
            .and_then(Value::as_array)
            .ok_or_else(|| bad("pools", "an array".into(), shown(obj.get("pools"))))?;
        let mut out: Vec<PoolProfile> = Vec::with_capacity(pools.len());
        for (i, p) in pools.iter().enumerate() {
            let at = |field: &str| format!("pools[{i}]{field}");
            let p = p.as_object().ok_or_else(|| bad(&at(""), "an object".into(), brief(p)))?;
            if let Some((key, v)) = unknown_field(p, &POOL_FIELDS) {
                let expected = "no such field (a pool has pool, peakLiveBytes and segments)";
                return Err(bad(&at(&format!(".{key}")), expected.into(), brief(v)));
            }
            let name = p.get("pool");
            let pool = name
                .and_then(Value::as_str)
                .and_then(|n| PoolKind::ALL.into_iter().find(|k| k.as_str() == n))
                .ok_or_else(|| {
                let names: Vec<&str> = PoolKind::ALL.iter().map(|k| k.as_str()).collect();
                bad(&at(".pool"), format!("one of {}", names.join(", ")), shown(name))
            })?;
            if out.iter().any(|o| o.pool == pool) {
                return Err(bad(&at(".pool"), "a pool not listed already".into(), format!("\"{}\"", pool.as_str())));
            }
            let peak_live = bytes_of(p.get("peakLiveBytes"), 0).map_err(|(e, g)| bad(&at(".peakLiveBytes"), e, g))?;
            let segments = match p.get("segments") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(list)) => list
                    .iter()
                    .enumerate()
                    .map(|(j, s)| bytes_of(Some(s), 1).map_err(|(e, g)| bad(&at(&format!(".segments[{j}]")), e, g)))
                    .collect::<Result<Vec<u64>>>()?,
                Some(other) => return Err(bad(&at(".segments"), "an array of byte counts".into(), brief(other))),
            };
            out.push(PoolProfile { pool, peak_live, segments });
        }
        Ok(HeapProfile { pools: out })
    }
}

/// The fields of a profile, and of each of its pools (what `to_json` writes).
const PROFILE_FIELDS: [&str; 3] = ["format", "version", "pools"];
const POOL_FIELDS: [&str; 3] = ["pool", "peakLiveBytes", "segments"];

/// The first field of `obj` not among `known`, with its value.
fn unknown_field<'a>(obj: &'a serde_json::Map<String, Value>, known: &[&str]) -> Option<(&'a str, &'a Value)> {
    obj.iter().find(|(k, _)| !known.contains(&k.as_str())).map(|(k, v)| (k.as_str(), v))
}

/// The bytes of warm segments for an arena that peaked at `peak` bytes.
pub fn warm_bytes(peak: u64) -> u64 {
    round_to_granule((WARM_FACTOR * peak as f64) as u64 + WARM_HEADROOM)
}

/// `bytes` rounded up to the segment granule.
pub(crate) fn round_to_granule(bytes: u64) -> u64 {
    bytes.div_ceil(SEGMENT_GRANULE).saturating_mul(SEGMENT_GRANULE)
}

/// An integer byte count from `min` to 2^53-1, or what is wrong with `v`.
/// `v` as bytes from `min`; else what was expected and what came.
fn bytes_of(v: Option<&Value>, min: u64) -> std::result::Result<u64, (String, String)> {
    v.and_then(Value::as_u64)
        .filter(|&n| (min..=MAX_SAFE_INTEGER).contains(&n))
        .ok_or_else(|| (format!("an integer from {min} to 2^53-1 bytes"), shown(v)))
}

fn shown(v: Option<&Value>) -> String {
    v.map_or_else(|| "nothing".to_string(), brief)
}

/// A value as JSON, cut short: messages quote the input without echoing megabytes.
fn brief(v: &Value) -> String {
    let s = v.to_string();
    if s.len() <= 60 {
        return s;
    }
    let cut = (0..=60).rev().find(|&i| s.is_char_boundary(i)).unwrap_or(0);
    format!("{}...", &s[..cut])
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn a_profile_round_trips_through_json() {
        let p = HeapProfile {
            pools: vec![
                PoolProfile { pool: PoolKind::DeviceSmall, peak_live: 3 * MIB, segments: vec![] },
                PoolProfile { pool: PoolKind::DeviceLarge, peak_live: 40 * MIB, segments: vec![45 * MIB] },
            ],
        };
        let back = HeapProfile::parse(&p.to_json().to_string()).unwrap();
        assert_eq!(back, p);
        assert_eq!(back.segment_bytes(), 45 * MIB);
    }

    #[test]
    fn the_plan_is_one_segment_per_arena_under_the_pool_that_held_most() {
        let plan =
            HeapProfile::plan_arena(&[(PoolKind::DeviceSmall, 2 * MIB), (PoolKind::DeviceLarge, 98 * MIB)], 1 << 31);
        assert_eq!(plan.len(), 2);
        assert_eq!(plan[0].segments, Vec::<u64>::new());
        // 1.02 x 100 MiB + 1 MiB, in whole granules.
        assert_eq!(plan[1].segments, vec![round_to_granule(103 * MIB)]);
        // Past the largest buffer: equal pieces.
        let plan = HeapProfile::plan_arena(&[(PoolKind::DeviceLarge, 300 * MIB)], 128 * MIB);
        assert_eq!(plan[0].segments.len(), 3);
        assert!(plan[0].segments.iter().all(|&s| s <= 128 * MIB));
        // A largest buffer that is not whole granules (2^31 - 1): pieces of whole granules below it.
        let plan = HeapProfile::plan_arena(&[(PoolKind::DeviceLarge, 5 << 30)], (1 << 31) - 1);
        assert!(plan[0].segments.iter().all(|&s| s < 1 << 31 && s % SEGMENT_GRANULE == 0), "{:?}", plan[0].segments);
        assert!(plan[0].segments.iter().sum::<u64>() >= warm_bytes(5 << 30));
        assert!(HeapProfile::plan_arena(&[(PoolKind::Scalar, 0)], 1 << 31).is_empty());
    }

    #[test]
    fn bad_profiles_name_the_field() {
        let ok = r#"{"format":"wgalloc-heap-profile","version":1,"pools":[]}"#;
        assert_eq!(HeapProfile::parse(ok).unwrap(), HeapProfile::default());
        let pools = |p: &str| format!(r#"{{"format":"wgalloc-heap-profile","version":1,"pools":[{p}]}}"#);
        let cases = [
            ("[]".to_string(), "heap profile: expected an object"),
            (r#"{"format":"x","version":1,"pools":[]}"#.into(), r#"format: expected "wgalloc-heap-profile", got "x""#),
            (r#"{"version":1,"pools":[]}"#.into(), "format: expected"),
            (r#"{"format":"wgalloc-heap-profile","version":2,"pools":[]}"#.into(), "version: expected 1"),
            (r#"{"format":"wgalloc-heap-profile","version":1}"#.into(), "pools: expected an array, got nothing"),
            (pools(r#"{"pool":"gpu","peakLiveBytes":1,"segments":[]}"#), "pools[0].pool: expected one of device-small"),
            (pools(r#"{"pool":"device-large","peakLiveBytes":-1}"#), "pools[0].peakLiveBytes: expected an integer"),
            (
                pools(r#"{"pool":"device-large","peakLiveBytes":1,"segments":[4096,-8]}"#),
                "pools[0].segments[1]: expected",
            ),
            (
                pools(r#"{"pool":"device-large","peakLiveBytes":1,"segments":[0]}"#),
                "segments[0]: expected an integer from 1",
            ),
            (pools(r#"{"pool":"device-large","peakLiveBytes":1,"segments":[1.5]}"#), "got 1.5"),
            (
                pools(r#"{"pool":"device-large","peakLiveBytes":1,"segments":7}"#),
                "pools[0].segments: expected an array",
            ),
            (
                pools(r#"{"pool":"scalar","peakLiveBytes":1},{"pool":"scalar","peakLiveBytes":2}"#),
                r#"pools[1].pool: expected a pool not listed already, got "scalar""#,
            ),
            (pools("3"), "pools[0]: expected an object"),
            (
                pools(r#"{"pool":"device-large","peakLiveBytes":1,"segmnets":[4096]}"#),
                "pools[0].segmnets: expected no such field (a pool has pool, peakLiveBytes and segments), got [4096]",
            ),
            (
                r#"{"format":"wgalloc-heap-profile","version":1,"pools":[],"pool":[]}"#.into(),
                "heap profile.pool: expected no such field",
            ),
            ("not json".into(), "not valid JSON"),
        ];
        let mut wrong = Vec::new();
        for (text, want) in cases {
            let err = HeapProfile::parse(&text).unwrap_err();
            assert_eq!(err.code(), "INVALID_ARGUMENT", "{text}");
            if !err.to_string().contains(want) {
                wrong.push(format!("{text}: {err}"));
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }
}
