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
    /// Nanoseconds per timestamp tick.
    pub timestamp_period_ns: f64,
    /// What is timed and how, e.g. "CPU timing only: the device lacks TIMESTAMP_QUERY".
    pub timing: String,
    /// Recording now (session, capture or `WGALLOC_PROFILE`).
    pub active: bool,
    /// A `start()` session is running.
    pub session: bool,
    /// A `startCapture()` capture is running.
    pub capturing: bool,
    /// Trace mode in effect, if tracing.
    #[napi(ts_type = "'interval' | 'event' | 'interval,event'")]
    pub mode: Option<String>,
    /// Each profiled submission blocks until the GPU finished it.
    pub wait_until_completed: bool,
    /// `WGALLOC_PROFILE` flags in effect.
    pub env_flags: Vec<String>,
    /// Query sets created (the pool reuses them).
    pub query_sets_created: f64,
}

/// Runs of one op (by name and pipeline). Times in milliseconds.
#[napi(object)]
pub struct OperationStats {
    /// The op's name.
    pub name: String,
    /// Its pipeline (kernel entry point).
    pub pipeline: String,
    /// Runs recorded.
    pub runs: f64,
    /// Runs with a valid GPU time (the mean is over these).
    pub gpu_timed_runs: f64,
    /// GPU time of all timed runs, ms.
    pub total_gpu_ms: f64,
    /// Mean GPU time per timed run, ms.
    pub mean_gpu_ms: f64,
    /// Longest GPU time of one run, ms.
    pub max_gpu_ms: f64,
    /// CPU time from encoding each run to its submission returning.
    pub total_scheduling_ms: f64,
    /// Mean scheduling time per run, ms.
    pub mean_scheduling_ms: f64,
}

/// Copies of one kind. Times in milliseconds, bandwidth in GB/s over GPU-timed copies.
#[napi(object)]
pub struct CopyStats {
    /// Direction of the copies.
    #[napi(ts_type = "'upload' | 'download' | 'device-to-device'")]
    pub kind: String,
    /// Copies recorded.
    pub count: f64,
    /// Bytes copied.
    pub bytes: f64,
    /// Copies the caller waited for (read-backs).
    pub blocking: f64,
    /// Copies staged through the host cache.
    pub via_host: f64,
    /// Copies with a valid GPU time.
    pub gpu_timed: f64,
    /// GPU time of the timed copies, ms.
    pub total_gpu_ms: f64,
    /// CPU time from encoding to submission, ms.
    pub total_scheduling_ms: f64,
    /// Bytes of timed copies per GPU second, in GB/s (0 without GPU times).
    pub bandwidth_gbps: f64,
}

/// CPU fallbacks of one op (`profiler.markCpuFallback()`).
#[napi(object)]
pub struct FallbackStats {
    /// The op's name.
    pub name: String,
    /// Fallbacks recorded.
    pub runs: f64,
    /// Bytes copied between host and device for the fallback.
    pub bytes: f64,
}

/// Timestamp pairs accepted, and dropped by reason.
#[napi(object)]
pub struct TimestampHygiene {
    /// Pairs used.
    pub valid: f64,
    /// Dropped: a timestamp read back as 0.
    pub zero: f64,
    /// Dropped: the end came before the start.
    pub reversed: f64,
    /// Dropped: implausibly long (counter overflow).
    pub overflow: f64,
}

/// Profiler statistics since creation or `resetStats()`; a plain object (numbers, and names of ops).
#[napi(object)]
pub struct ProfilerStats {
    /// One entry per op (name and pipeline).
    pub operations: Vec<OperationStats>,
    /// One entry per copy kind seen.
    pub copies: Vec<CopyStats>,
    /// One entry per op that fell back to the CPU.
    pub fallbacks: Vec<FallbackStats>,
    /// Timestamp pairs used and dropped.
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
    /// What the device can time and what the profiler is doing now.
    #[napi(catch_unwind, getter)]
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
    #[napi(catch_unwind, getter)]
    pub fn active(&self) -> bool {
        self.inner.is_active()
    }

    /// Starts a session. `PROFILER_STATE` if one is running; `INVALID_ARGUMENT` for an unknown mode.
    /// @example
    /// ```js
    /// gpu.profiler.start({ mode: 'interval' })
    /// await exe.run({ x })
    /// await gpu.profiler.flush()
    /// gpu.profiler.stop()
    /// console.log(gpu.profiler.stats().operations)
    /// ```
    #[napi(catch_unwind)]
    pub fn start(&self, options: Option<ProfilerStartOptions>) -> Result<()> {
        let o = options.unwrap_or_default();
        let mode = Mode::parse(o.mode.as_deref().unwrap_or("interval")).napi()?;
        self.inner
            .start(StartOptions {
                mode,
                wait_until_completed: o.wait_until_completed.unwrap_or(false),
                stats_only: o.stats_only.unwrap_or(false),
            })
            .napi()
    }

    /// Ends the session. `PROFILER_STATE` without one.
    #[napi(catch_unwind)]
    pub fn stop(&self) -> Result<()> {
        self.inner.stop().napi()
    }

    /// Per-op and per-copy statistics (`await flush()` first for every GPU time).
    #[napi(catch_unwind)]
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
            fallbacks: s
                .fallbacks
                .iter()
                .map(|f| FallbackStats { name: f.name.clone(), runs: f.runs as f64, bytes: f.bytes as f64 })
                .collect(),
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

    /// Clears the statistics (not the trace).
    #[napi(catch_unwind)]
    pub fn reset_stats(&self) {
        self.inner.reset_stats()
    }

    /// Counts a CPU fallback of op `name` that copied `bytes` between host and device.
    /// `INVALID_ARGUMENT` for an empty name.
    #[napi(catch_unwind)]
    pub fn mark_cpu_fallback(&self, name: String, bytes: Option<f64>) -> Result<()> {
        self.inner.mark_cpu_fallback(&name, to_u64(bytes.unwrap_or(0.0), "bytes")?).napi()
    }

    /// Native form of `flush({ timeoutMs, signal })`.
    /// @internal
    #[napi(catch_unwind, ts_return_type = "Promise<boolean>")]
    pub fn flush<'env>(&self, env: &'env Env, timeout_ms: Option<f64>) -> Result<PromiseRaw<'env, bool>> {
        let timeout = Duration::from_millis(to_u64(timeout_ms.unwrap_or(10_000.0), "timeoutMs")?);
        let p = self.inner.clone();
        env.spawn_future(async move {
            spawn_blocking(move || p.flush_blocking(timeout))
                .await
                .map_err(|e| coded("INTERNAL", &format!("profiler flush failed: {e}")))
        })
    }

    /// Writes the trace recorded so far to `path` without waiting for outstanding timestamps
    /// (`exportTrace()` flushes first). `IO_ERROR` if the file cannot be written.
    #[napi(catch_unwind)]
    pub fn export_trace_now(&self, path: String) -> Result<()> {
        self.inner.export_trace(std::path::Path::new(&path)).napi()
    }

    /// Starts recording everything into one trace, written by `stopCapture()` to `name`
    /// (`.json` appended without an extension). `PROFILER_STATE` if a capture is running.
    #[napi(catch_unwind)]
    pub fn start_capture(&self, name: String) -> Result<()> {
        self.inner.start_capture(&name).napi()
    }

    /// Ends the capture and writes its trace file without waiting for outstanding timestamps
    /// (`stopCapture()` flushes first); returns its path. `PROFILER_STATE` without a capture.
    #[napi(catch_unwind)]
    pub fn stop_capture_now(&self) -> Result<String> {
        Ok(self.inner.stop_capture().napi()?.display().to_string())
    }

    /// All stats tables as text.
    #[napi(catch_unwind)]
    pub fn format_stats(&self) -> String {
        self.inner.format_stats()
    }

    /// The tables `WGALLOC_PROFILE` asks for at exit, or null.
    /// @internal
    #[napi(catch_unwind)]
    pub fn exit_report(&self) -> Option<String> {
        self.inner.exit_report()
    }
}
