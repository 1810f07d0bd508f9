//! `Profiler`: the JS view of the device's profiler (`gpu.profiler`).

use std::time::Duration;

use napi::bindgen_prelude::*;
use napi_derive::napi;
use wgalloc_core::profile::{Mode, StartOptions};

use crate::error::{coded, to_u64, IntoNapi};

/// Options of `profiler.start()`.
#[napi(object)]
#[derive(Default)]
pub struct ProfilerStartOptions {
    /// `'interval'` (default), `'event'` or `'interval,event'`: how traced work appears in traces.
    pub mode: Option<String>,
    /// Block after each profiled submission until the GPU finished it (serialises CPU and GPU).
    pub wait_until_completed: Option<bool>,
    /// Counts and CPU times only, no GPU timestamps (the cheapest mode).
    pub stats_only: Option<bool>,
}

/// What the device can time and what the profiler is doing.
#[napi(object)]
pub struct ProfilerInfo {
    /// GPU timestamps on compute passes (`TIMESTAMP_QUERY`).
    pub pass_timestamps: bool,
    /// GPU timestamps around copies (`TIMESTAMP_QUERY_INSIDE_ENCODERS`).
    pub copy_timestamps: bool,
    /// GPU timestamps between dispatches inside one pass (`TIMESTAMP_QUERY_INSIDE_PASSES`):
    /// profiled runs then keep their single compute pass.
    pub dispatch_timestamps: bool,
    pub timestamp_period_ns: f64,
    /// What is timed and how, e.g. "CPU timing only: the device lacks TIMESTAMP_QUERY".
    pub timing: String,
    /// Recording now (session, capture or `WGALLOC_PROFILE`).
    pub active: bool,
    pub session: bool,
    pub capturing: bool,
    /// Trace mode in effect, if tracing.
    pub mode: Option<String>,
    pub wait_until_completed: bool,
    /// `WGALLOC_PROFILE` flags in effect.
    pub env_flags: Vec<String>,
    /// Query sets created (the pool reuses them).
    pub query_sets_created: f64,
}

/// Runs of one op (by name and pipeline). Times in milliseconds.
#[napi(object)]
pub struct OperationStats {
    pub name: String,
    pub pipeline: String,
    pub runs: f64,
    /// Runs with a valid GPU time (the mean is over these).
    pub gpu_timed_runs: f64,
    pub total_gpu_ms: f64,
    pub mean_gpu_ms: f64,
    pub max_gpu_ms: f64,
    /// CPU time from encoding each run to its submission returning.
    pub total_scheduling_ms: f64,
    pub mean_scheduling_ms: f64,
}

/// Copies of one kind. Times in milliseconds, bandwidth in GB/s over GPU-timed copies.
#[napi(object)]
pub struct CopyStats {
    #[napi(ts_type = "'upload' | 'download' | 'device-to-device'")]
    pub kind: String,
    pub count: f64,
    pub bytes: f64,
    /// Copies the caller waited for (read-backs).
    pub blocking: f64,
    /// Copies staged through the host cache.
    pub via_host: f64,
    pub gpu_timed: f64,
    pub total_gpu_ms: f64,
    pub total_scheduling_ms: f64,
    pub bandwidth_gbps: f64,
}

#[napi(object)]
pub struct FallbackStats {
    pub name: String,
    pub runs: f64,
    /// Bytes copied between host and device for the fallback.
    pub bytes: f64,
}

/// Timestamp pairs accepted, and dropped by reason.
#[napi(object)]
pub struct TimestampHygiene {
    pub valid: f64,
    pub zero: f64,
    pub reversed: f64,
    pub overflow: f64,
}

#[napi(object)]
pub struct ProfilerStats {
    pub operations: Vec<OperationStats>,
    pub copies: Vec<CopyStats>,
    pub fallbacks: Vec<FallbackStats>,
    pub timestamps: TimestampHygiene,
    /// Submissions whose timestamps are still being read back (`await flush()` first).
    pub pending_submissions: f64,
    /// Work recorded without a GPU time because one submission exhausted its query chunks.
    pub untimed_pool_exhausted: f64,
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// The device's profiler. Get it with `gpu.profiler`.
#[napi]
pub struct Profiler {
    pub(crate) inner: wgalloc_core::Profiler,
}

#[napi]
impl Profiler {
    #[napi(getter)]
    pub fn info(&self) -> ProfilerInfo {
        let i = self.inner.info();
        ProfilerInfo {
            pass_timestamps: i.timestamps.passes,
            copy_timestamps: i.timestamps.encoders,
            dispatch_timestamps: i.timestamps.inside_passes,
            timestamp_period_ns: i.timestamp_period_ns,
            timing: i.timing,
            active: i.active,
            session: i.session,
            capturing: i.capturing,
            mode: i.mode,
            wait_until_completed: i.wait_until_completed,
            env_flags: i.env_flags,
            query_sets_created: i.query_sets_created as f64,
        }
    }

    /// True while recording (session, capture or `WGALLOC_PROFILE`).
    #[napi(getter)]
    pub fn active(&self) -> bool {
        self.inner.is_active()
    }

    /// Starts a session. `PROFILER_STATE` if one is running; `INVALID_ARGUMENT` for an unknown mode.
    #[napi]
    pub fn start(&self, options: Option<ProfilerStartOptions>) -> Result<()> {
        let o = options.unwrap_or_default();
        let mode = Mode::parse(o.mode.as_deref().unwrap_or("interval")).napi()?;
        self.inner.start(StartOptions { mode, wait_until_completed: o.wait_until_completed.unwrap_or(false), stats_only: o.stats_only.unwrap_or(false) }).napi()
    }

    /// Ends the session. `PROFILER_STATE` without one.
    #[napi]
    pub fn stop(&self) -> Result<()> {
        self.inner.stop().napi()
    }

    #[napi]
    pub fn stats(&self) -> ProfilerStats {
        let s = self.inner.stats();
        ProfilerStats {
            operations: s
                .ops
                .iter()
                .map(|o| OperationStats {
                    name: o.name.clone(),
                    pipeline: o.pipeline.clone(),
                    runs: o.runs as f64,
                    gpu_timed_runs: o.gpu_timed_runs as f64,
                    total_gpu_ms: ms(o.gpu_total_ns),
                    mean_gpu_ms: if o.gpu_timed_runs > 0 { ms(o.gpu_total_ns) / o.gpu_timed_runs as f64 } else { 0.0 },
                    max_gpu_ms: ms(o.gpu_max_ns),
                    total_scheduling_ms: ms(o.scheduling_total_ns),
                    mean_scheduling_ms: if o.runs > 0 { ms(o.scheduling_total_ns) / o.runs as f64 } else { 0.0 },
                })
                .collect(),
            copies: s
                .copies
                .iter()
                .map(|c| CopyStats {
                    kind: c.kind.clone(),
                    count: c.count as f64,
                    bytes: c.bytes as f64,
                    blocking: c.blocking as f64,
                    via_host: c.via_host as f64,
                    gpu_timed: c.gpu_timed as f64,
                    total_gpu_ms: ms(c.gpu_total_ns),
                    total_scheduling_ms: ms(c.scheduling_total_ns),
                    bandwidth_gbps: c.bandwidth_gbps(),
                })
                .collect(),
            fallbacks: s.fallbacks.iter().map(|f| FallbackStats { name: f.name.clone(), runs: f.runs as f64, bytes: f.bytes as f64 }).collect(),
            timestamps: TimestampHygiene {
                valid: s.timestamps.valid as f64,
                zero: s.timestamps.zero as f64,
                reversed: s.timestamps.reversed as f64,
                overflow: s.timestamps.overflow as f64,
            },
            pending_submissions: s.pending_submissions as f64,
            untimed_pool_exhausted: s.untimed_pool_exhausted as f64,
        }
    }

    #[napi]
    pub fn reset_stats(&self) {
        self.inner.reset_stats()
    }

    /// Counts a CPU fallback of op `name` that copied `bytes` between host and device.
    #[napi]
    pub fn mark_cpu_fallback(&self, name: String, bytes: Option<f64>) -> Result<()> {
        self.inner.mark_cpu_fallback(&name, to_u64(bytes.unwrap_or(0.0), "bytes")?).napi()
    }

    /// Resolves `true` once every submitted timestamp was read back (`false` after `timeoutMs`, default 10 s).
    #[napi]
    pub async fn flush(&self, timeout_ms: Option<f64>) -> Result<bool> {
        let timeout = Duration::from_millis(to_u64(timeout_ms.unwrap_or(10_000.0), "timeoutMs")?);
        let p = self.inner.clone();
        spawn_blocking(move || p.flush_blocking(timeout)).await.map_err(|e| coded("INTERNAL", &format!("profiler flush failed: {e}")))
    }

    /// Writes the trace recorded so far to `path` (the facade's `exportTrace` flushes first).
    #[napi]
    pub fn export_trace_now(&self, path: String) -> Result<()> {
        self.inner.export_trace(std::path::Path::new(&path)).napi()
    }

    #[napi]
    pub fn start_capture(&self, name: String) -> Result<()> {
        self.inner.start_capture(&name).napi()
    }

    /// Ends the capture and writes its trace file; returns its path.
    #[napi]
    pub fn stop_capture_now(&self) -> Result<String> {
        Ok(self.inner.stop_capture().napi()?.display().to_string())
    }

    /// All stats tables as text.
    #[napi]
    pub fn format_stats(&self) -> String {
        self.inner.format_stats()
    }

    /// The tables `WGALLOC_PROFILE` asks for at exit, or null.
    #[napi]
    pub fn exit_report(&self) -> Option<String> {
        self.inner.exit_report()
    }
}
