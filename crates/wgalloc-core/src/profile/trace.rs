//! Trace Event Format (chrome://tracing, ui.perfetto.dev): a bounded in-memory
//! event list and its JSON export. Times are microseconds since the profiler's epoch.

use std::path::Path;

use serde_json::{json, Map, Value};

use crate::error::Result;

pub(crate) const PID: u64 = 1;
/// CPU-side encode/submit spans, CPU fallbacks and allocator instants.
pub(crate) const TID_CPU: u64 = 1;
/// Counter tracks (Perfetto draws one per counter name).
pub(crate) const TID_COUNTERS: u64 = 2;
/// GPU work of stream `n` is on `TID_STREAM_BASE + n`.
pub(crate) const TID_STREAM_BASE: u64 = 100;
/// Events kept in memory; later ones are counted and dropped.
const MAX_EVENTS: usize = 1 << 20;

#[derive(Debug, Clone)]
pub(crate) struct TraceEvent {
    pub name: String,
    pub cat: &'static str,
    pub ph: char,
    pub ts_us: f64,
    pub dur_us: Option<f64>,
    pub tid: u64,
    pub args: Map<String, Value>,
}

#[derive(Default)]
pub(crate) struct Trace {
    pub events: Vec<TraceEvent>,
    pub dropped: u64,
    /// Streams seen, for thread-name metadata.
    pub streams: std::collections::BTreeSet<u64>,
}

impl Trace {
    pub fn push(&mut self, e: TraceEvent) {
        if self.events.len() >= MAX_EVENTS {
            self.dropped += 1;
        } else {
            if e.tid >= TID_STREAM_BASE {
                self.streams.insert(e.tid - TID_STREAM_BASE);
            }
            self.events.push(e);
        }
    }

    pub fn clear(&mut self) {
        *self = Trace::default();
    }

    /// The events from index `from` as a Trace Event JSON document, sorted by time
    /// (so every track, counters included, is monotone in `ts`).
    pub fn to_json(&self, from: usize, meta: Value) -> Value {
        let mut events: Vec<&TraceEvent> = self.events[from.min(self.events.len())..].iter().collect();
        events.sort_by(|a, b| a.ts_us.total_cmp(&b.ts_us));
        let thread = |tid: u64, name: String| json!({"name": "thread_name", "ph": "M", "ts": 0, "pid": PID, "tid": tid, "args": {"name": name}});
        let mut out = vec![
            json!({"name": "process_name", "ph": "M", "ts": 0, "pid": PID, "tid": 0, "args": {"name": "wgalloc"}}),
            thread(TID_CPU, "CPU encode/submit".into()),
            thread(TID_COUNTERS, "memory".into()),
        ];
        out.extend(self.streams.iter().map(|s| thread(TID_STREAM_BASE + s, format!("GPU stream {s}"))));
        for e in events {
            let mut v = json!({"name": e.name, "cat": e.cat, "ph": e.ph.to_string(), "ts": e.ts_us, "pid": PID, "tid": e.tid, "args": e.args});
            if let Some(d) = e.dur_us {
                v["dur"] = json!(d.max(0.0));
            }
            if e.ph == 'i' {
                v["s"] = json!("t");
            }
            out.push(v);
        }
        json!({"traceEvents": out, "displayTimeUnit": "ms", "otherData": meta})
    }
}

/// Writes `doc` to `path` whole (Note [Output files]); the error says which path and why.
pub(crate) fn write(path: &Path, doc: &Value) -> Result<()> {
    crate::output_file::write_whole(path, "the trace", |w| serde_json::to_writer(w, doc).map_err(Into::into))
}
