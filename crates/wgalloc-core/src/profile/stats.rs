//! Aggregates per op, per copy kind and per CPU fallback, timestamp hygiene, and
//! the text tables printed at exit.

use std::collections::BTreeMap;

/// Which way a copy moves bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CopyKind {
    Upload,
    Download,
    DeviceToDevice,
}

impl CopyKind {
    pub const ALL: [CopyKind; 3] = [CopyKind::Upload, CopyKind::Download, CopyKind::DeviceToDevice];

    pub fn as_str(self) -> &'static str {
        match self {
            CopyKind::Upload => "upload",
            CopyKind::Download => "download",
            CopyKind::DeviceToDevice => "device-to-device",
        }
    }
}

/// What the caller knows about a copy when it is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyInfo {
    pub kind: CopyKind,
    pub bytes: u64,
    /// The caller waits for the copy (read-backs), as opposed to queuing it.
    pub blocking: bool,
    /// Staged through the host cache.
    pub via_host: bool,
    /// Heap block ids of the source and destination, where they are heap blocks.
    pub src_block: Option<u64>,
    pub dst_block: Option<u64>,
}

/// Why a timestamp pair was dropped instead of being reported as a duration.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Hygiene {
    /// Pairs resolved and accepted.
    pub valid: u64,
    /// A timestamp of the pair read 0 (not written, or a driver that zeroes them).
    pub zero: u64,
    /// The end came before the beginning.
    pub reversed: u64,
    /// The duration does not fit (ticks x period beyond `MAX_PLAUSIBLE_NS`).
    pub overflow: u64,
}

/// No single pass or copy on any real device runs this long; beyond it the pair is garbage.
pub const MAX_PLAUSIBLE_NS: f64 = 600e9;

impl Hygiene {
    /// The pair's duration in ns, or `None` (counted) if the pair is unusable.
    pub fn check(&mut self, begin: u64, end: u64, period_ns: f64) -> Option<u64> {
        if begin == 0 || end == 0 {
            self.zero += 1;
            return None;
        }
        let Some(ticks) = end.checked_sub(begin) else {
            self.reversed += 1;
            return None;
        };
        let ns = ticks as f64 * period_ns;
        if !ns.is_finite() || ns > MAX_PLAUSIBLE_NS {
            self.overflow += 1;
            return None;
        }
        self.valid += 1;
        Some(ns.round() as u64)
    }

    pub fn dropped(&self) -> u64 {
        self.zero + self.reversed + self.overflow
    }
}

/// Runs of one op (by name and pipeline).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OpStats {
    pub name: String,
    pub pipeline: String,
    pub runs: u64,
    /// Runs with a valid GPU duration (the mean is over these).
    pub gpu_timed_runs: u64,
    pub gpu_total_ns: u64,
    pub gpu_max_ns: u64,
    /// CPU time from encoding the op to its submission returning.
    pub scheduling_total_ns: u64,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct CopyStats {
    pub kind: String,
    pub count: u64,
    pub bytes: u64,
    pub blocking: u64,
    pub via_host: u64,
    pub gpu_timed: u64,
    /// Bytes of the copies with a valid GPU duration (bandwidth is over these).
    pub gpu_timed_bytes: u64,
    pub gpu_total_ns: u64,
    pub scheduling_total_ns: u64,
}

impl CopyStats {
    /// GB/s over GPU-timed copies (0 without timestamps).
    pub fn bandwidth_gbps(&self) -> f64 {
        if self.gpu_total_ns == 0 {
            0.0
        } else {
            self.gpu_timed_bytes as f64 / self.gpu_total_ns as f64
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct FallbackStats {
    pub name: String,
    pub runs: u64,
    pub bytes: u64,
}

/// Everything the profiler aggregated since the last reset.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProfileStats {
    pub ops: Vec<OpStats>,
    pub copies: Vec<CopyStats>,
    pub fallbacks: Vec<FallbackStats>,
    pub timestamps: Hygiene,
    /// Submissions whose timestamps are still being read back.
    pub pending_submissions: u64,
    /// Entries recorded without a GPU time because the query pool was exhausted.
    pub untimed_pool_exhausted: u64,
}

#[derive(Default)]
pub(crate) struct Aggregates {
    pub ops: BTreeMap<(String, String), OpStats>,
    pub copies: BTreeMap<CopyKind, CopyStats>,
    pub fallbacks: BTreeMap<String, FallbackStats>,
    pub hygiene: Hygiene,
    pub untimed: u64,
}

impl Aggregates {
    pub fn op(&mut self, name: &str, pipeline: &str, gpu_ns: Option<u64>, sched_ns: u64) -> u64 {
        let s = self.ops.entry((name.to_string(), pipeline.to_string())).or_insert_with(|| OpStats {
            name: name.to_string(),
            pipeline: pipeline.to_string(),
            ..Default::default()
        });
        s.runs += 1;
        s.scheduling_total_ns += sched_ns;
        if let Some(ns) = gpu_ns {
            s.gpu_timed_runs += 1;
            s.gpu_total_ns += ns;
            s.gpu_max_ns = s.gpu_max_ns.max(ns);
        }
        s.runs
    }

    pub fn copy(&mut self, info: &CopyInfo, gpu_ns: Option<u64>, sched_ns: u64) -> u64 {
        let s = self
            .copies
            .entry(info.kind)
            .or_insert_with(|| CopyStats { kind: info.kind.as_str().into(), ..Default::default() });
        s.count += 1;
        s.bytes += info.bytes;
        s.blocking += u64::from(info.blocking);
        s.via_host += u64::from(info.via_host);
        s.scheduling_total_ns += sched_ns;
        if let Some(ns) = gpu_ns {
            s.gpu_timed += 1;
            s.gpu_timed_bytes += info.bytes;
            s.gpu_total_ns += ns;
        }
        s.count
    }

    pub fn fallback(&mut self, name: &str, bytes: u64) -> u64 {
        let s = self
            .fallbacks
            .entry(name.to_string())
            .or_insert_with(|| FallbackStats { name: name.to_string(), ..Default::default() });
        s.runs += 1;
        s.bytes += bytes;
        s.runs
    }

    pub fn snapshot(&self, pending: u64) -> ProfileStats {
        ProfileStats {
            ops: self.ops.values().cloned().collect(),
            copies: self.copies.values().cloned().collect(),
            fallbacks: self.fallbacks.values().cloned().collect(),
            timestamps: self.hygiene,
            pending_submissions: pending,
            untimed_pool_exhausted: self.untimed,
        }
    }
}

fn ms(ns: u64) -> String {
    format!("{:.3}", ns as f64 / 1e6)
}

fn table(title: &str, header: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.len());
        }
    }
    let line =
        |cells: Vec<&str>| cells.iter().zip(&widths).map(|(c, w)| format!("{c:>w$}")).collect::<Vec<_>>().join("  ");
    let mut out = format!("{title}\n{}\n", line(header.to_vec()));
    for r in &rows {
        out += &line(r.iter().map(String::as_str).collect());
        out.push('\n');
    }
    out
}

/// The exit tables: `ops`, `copies`, `fallbacks` select which are printed.
pub fn format_tables(s: &ProfileStats, ops: bool, copies: bool, fallbacks: bool) -> String {
    let mut out = String::new();
    if ops {
        let rows = s.ops.iter().map(|o| {
            let mean = o.gpu_total_ns.checked_div(o.gpu_timed_runs).unwrap_or(0);
            vec![
                o.name.clone(),
                o.pipeline.clone(),
                o.runs.to_string(),
                ms(o.gpu_total_ns),
                ms(mean),
                ms(o.gpu_max_ns),
                ms(o.scheduling_total_ns),
            ]
        });
        out += &table(
            "wgalloc profiler: operations",
            &["op", "pipeline", "runs", "gpu total ms", "gpu mean ms", "gpu max ms", "sched total ms"],
            rows.collect(),
        );
    }
    if copies {
        let rows = s.copies.iter().map(|c| {
            vec![
                c.kind.clone(),
                c.count.to_string(),
                c.bytes.to_string(),
                c.blocking.to_string(),
                c.via_host.to_string(),
                ms(c.gpu_total_ns),
                format!("{:.3}", c.bandwidth_gbps()),
            ]
        });
        out += &table(
            "wgalloc profiler: copies",
            &["kind", "count", "bytes", "blocking", "via host", "gpu ms", "GB/s"],
            rows.collect(),
        );
    }
    if fallbacks {
        let rows = s.fallbacks.iter().map(|f| vec![f.name.clone(), f.runs.to_string(), f.bytes.to_string()]);
        out += &table("wgalloc profiler: cpu fallbacks", &["op", "runs", "bytes copied"], rows.collect());
    }
    let h = s.timestamps;
    if h.dropped() > 0 {
        out += &format!(
            "wgalloc profiler: dropped timestamp pairs: {} zero, {} reversed, {} overflowing\n",
            h.zero, h.reversed, h.overflow
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hygiene_drops_zero_reversed_and_overflowing_pairs() {
        let mut h = Hygiene::default();
        assert_eq!(h.check(100, 150, 2.0), Some(100));
        assert_eq!(h.check(0, 150, 1.0), None);
        assert_eq!(h.check(150, 0, 1.0), None);
        assert_eq!(h.check(200, 100, 1.0), None);
        assert_eq!(h.check(1, u64::MAX, 1.0), None);
        assert_eq!(h, Hygiene { valid: 1, zero: 2, reversed: 1, overflow: 1 });
        assert_eq!(h.dropped(), 4);
    }

    #[test]
    fn aggregates_and_tables() {
        let mut a = Aggregates::default();
        a.op("add", "k", Some(10), 5);
        a.op("add", "k", None, 5);
        let info = CopyInfo {
            kind: CopyKind::Download,
            bytes: 1000,
            blocking: true,
            via_host: false,
            src_block: None,
            dst_block: None,
        };
        a.copy(&info, Some(500), 1);
        a.fallback("topk", 64);
        let s = a.snapshot(0);
        assert_eq!((s.ops[0].runs, s.ops[0].gpu_timed_runs, s.ops[0].gpu_total_ns), (2, 1, 10));
        assert_eq!(s.copies[0].bandwidth_gbps(), 2.0);
        let t = format_tables(&s, true, true, true);
        assert!(t.contains("operations") && t.contains("download") && t.contains("topk"), "{t}");
    }
}
