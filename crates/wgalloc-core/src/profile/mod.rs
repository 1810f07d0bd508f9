//! The profiler (after PyTorch's MPSProfiler): GPU time per op and per copy from
//! timestamp queries, CPU scheduling time (encode to submit), CPU fallbacks the
//! caller marks, stats tables, and a Chrome/Perfetto trace with memory counters.
//!
//! Cost when off: streams check one atomic (`Gpu::profiling`) before recording
//! anything. When on, a stream collects a [`Batch`] of entries while it encodes;
//! `Stream::submit` resolves its queries into a read-back buffer in the same
//! submission and maps that buffer right away: WebGPU completes the map only once
//! the submission finished, so submission N's results are collected when N
//! completes (the poller drives it, as it drives the tracker), never by stalling.

pub mod options;
mod queries;
pub mod stats;
mod trace;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use crate::completion::Tracker;
use crate::context::Gpu;
use crate::error::{Error, Result};
use crate::signal::{lock, Slot};
pub use options::{flags, Mode};
use queries::{Chunk, Pair, QueryPool};
use stats::Aggregates;
pub use stats::{CopyInfo, CopyKind, CopyStats, FallbackStats, Hygiene, OpStats, ProfileStats};
use trace::{Trace, TraceEvent, TID_COUNTERS, TID_CPU, TID_STREAM_BASE};

/// Stream id of work recorded outside streams (drawn on the CPU track).
const CPU_STREAM: u64 = u64::MAX;

// Note [Memory counters come from their owners]
// The trace's memory counters are the heap's and the host cache's figures, yet the profiler sits
// below both (they record their copies into it). So each owner of device or staging memory
// registers a `MemorySource` when it attaches to the device, and the profiler samples whatever is
// registered, by name, at each submission and export. A source is held weakly: it does not keep
// its owner alive, and one whose owner is gone is skipped.

/// One sample of a memory source: a counter track and the running counts of its instants.
pub(crate) struct MemorySample {
    /// The counter track's name, e.g. `heap bytes`.
    pub counter: &'static str,
    /// The counter's series and their values in bytes.
    pub values: Vec<(&'static str, u64)>,
    /// Events drawn as instants (e.g. `heap OOM`), each with its running count.
    pub instants: Vec<(&'static str, u64)>,
}

/// What owns memory the trace draws as a counter.
pub(crate) trait MemorySource: Send + Sync {
    fn sample(&self) -> MemorySample;
}

/// The memory sources of a device, in the order they attached.
#[derive(Default)]
pub(crate) struct MemorySources {
    sources: Mutex<Vec<Weak<dyn MemorySource>>>,
}

impl MemorySources {
    /// Registers `source` with `gpu`'s profiler, present or future.
    pub(crate) fn add(gpu: &Gpu, source: Weak<dyn MemorySource>) {
        let sources = gpu.shared.services.get_or_attach(|| Arc::new(MemorySources::default()));
        lock(&sources.sources).push(source);
    }

    fn samples(&self) -> Vec<MemorySample> {
        let live: Vec<Arc<dyn MemorySource>> = lock(&self.sources).iter().filter_map(Weak::upgrade).collect();
        live.iter().map(|s| s.sample()).collect()
    }
}

/// What a timed entry is.
pub(crate) enum What {
    Op { name: String, pipeline: String },
    Copy(CopyInfo),
}

pub(crate) struct Entry {
    what: What,
    pair: Option<Pair>,
    cpu_start: Instant,
    cpu_end: Instant,
    /// Encode start to the submission returning; set at submit.
    sched_ns: u64,
}

/// Profiled work a stream recorded since its last submit.
pub(crate) struct Batch {
    opened: Instant,
    chunks: Vec<Chunk>,
    entries: Vec<Entry>,
}

impl Batch {
    /// The chunk and query set of a pair.
    pub fn query_set(&self, pair: Pair) -> &wgpu::QuerySet {
        &self.chunks[pair.chunk].set
    }

    pub fn record(&mut self, what: What, pair: Option<Pair>, cpu_start: Instant) {
        self.entries.push(Entry { what, pair, cpu_start, cpu_end: Instant::now(), sched_ns: 0 });
    }

    /// Resolves the queries of every chunk; encode before finishing the encoder.
    pub fn encode_resolve(&self, encoder: &mut wgpu::CommandEncoder) {
        self.chunks.iter().filter(|c| c.used > 0).for_each(|c| c.encode_resolve(encoder));
    }
}

/// Which timestamps the device can take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimestampSupport {
    /// Compute pass begin/end writes (`TIMESTAMP_QUERY`).
    pub passes: bool,
    /// Encoder writes around copies (`TIMESTAMP_QUERY_INSIDE_ENCODERS`).
    pub encoders: bool,
    /// Writes between dispatches inside one pass (`TIMESTAMP_QUERY_INSIDE_PASSES`).
    pub inside_passes: bool,
}

/// Where a timestamp pair is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Writes {
    /// A compute pass's beginning/end writes.
    Pass,
    /// Around one dispatch inside a pass.
    InsidePass,
    /// Around a command in the encoder (copies).
    Encoder,
}

/// What `gpu.profiler.info` reports.
#[derive(Debug, Clone)]
pub struct ProfilerInfo {
    pub timestamps: TimestampSupport,
    pub timestamp_period_ns: f64,
    /// One sentence on what is timed and how.
    pub timing: String,
    pub active: bool,
    pub session: bool,
    pub capturing: bool,
    pub mode: Option<String>,
    pub wait_until_completed: bool,
    pub env_flags: Vec<String>,
    pub query_sets_created: u64,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct StartOptions {
    pub mode: Mode,
    pub wait_until_completed: bool,
    /// Count ops and copies and time them on the CPU only: no timestamp queries, so the
    /// profiled work runs as it would unprofiled (the cheapest mode).
    pub stats_only: bool,
}

#[derive(Default)]
struct State {
    session: Option<StartOptions>,
    capture: Option<(String, usize)>,
    agg: Aggregates,
    trace: Trace,
    pending: u64,
    idle: Vec<Arc<Slot<()>>>,
    /// GPU clock (ns) + offset = profiler clock (ns); raised so GPU work never starts before its submit.
    gpu_offset_ns: Option<f64>,
    /// Running counts of each memory source's instants last sampled, to emit only new ones.
    instants_seen: Vec<(&'static str, u64)>,
}

pub(crate) struct ProfilerCore {
    on: AtomicBool,
    env: u32,
    env_error: Option<Error>,
    support: TimestampSupport,
    period_ns: f64,
    device: wgpu::Device,
    tracker: Arc<Tracker>,
    /// Maps go through the submission lane, after the submissions they read.
    lane: crate::lane::LaneHandle,
    pool: QueryPool,
    epoch: Instant,
    state: Mutex<State>,
}

impl ProfilerCore {
    pub(crate) fn new(
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        tracker: &Arc<Tracker>,
        lane: crate::lane::LaneHandle,
    ) -> ProfilerCore {
        let (env, env_error) = match std::env::var("WGALLOC_PROFILE") {
            Ok(v) => match options::parse_flags(&v) {
                Ok(bits) => (bits, None),
                Err(e) => {
                    eprintln!("wgalloc: profiler disabled: {e}");
                    (0, Some(e))
                }
            },
            Err(_) => (0, None),
        };
        let f = device.features();
        let support = TimestampSupport {
            passes: f.contains(wgpu::Features::TIMESTAMP_QUERY),
            encoders: f.contains(wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS),
            inside_passes: f.contains(wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES),
        };
        ProfilerCore {
            on: AtomicBool::new(env != 0),
            env,
            env_error,
            support,
            period_ns: f64::from(queue.get_timestamp_period()),
            device: device.clone(),
            tracker: tracker.clone(),
            lane,
            pool: QueryPool::default(),
            epoch: Instant::now(),
            state: Mutex::new(State::default()),
        }
    }

    pub(crate) fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    pub(crate) fn new_batch(&self) -> Batch {
        Batch { opened: Instant::now(), chunks: Vec::new(), entries: Vec::new() }
    }

    /// A free timestamp pair in `batch`, taking a chunk from the pool if needed;
    /// `None` when the device has no timestamps or the batch hit its chunk cap.
    pub(crate) fn reserve(&self, batch: &mut Batch, writes: Writes) -> Option<Pair> {
        let ok = match writes {
            Writes::Pass => self.support.passes,
            Writes::InsidePass => self.support.inside_passes,
            Writes::Encoder => self.support.encoders,
        };
        if !ok || self.stats_only() {
            return None;
        }
        self.queries(batch, 2).map(|(chunk, q)| Pair::at(chunk, q))
    }

    /// Timestamp pairs for `dispatches` consecutive dispatches in one pass, written
    /// between them (`dispatches + 1` queries, not `2 * dispatches`: on drivers that
    /// settle the work before each write, every write costs). `None` as for [`reserve`].
    pub(crate) fn reserve_chain(&self, batch: &mut Batch, dispatches: usize) -> Option<Vec<Pair>> {
        if !self.support.inside_passes || self.stats_only() {
            return None;
        }
        let n = u32::try_from(dispatches).ok()?;
        let (chunk, first) = self.queries(batch, n.checked_add(1)?)?;
        Some((first..first + n).map(|q| Pair::at(chunk, q)).collect())
    }

    /// `n` consecutive queries in the batch's last chunk, taking a fresh chunk if needed:
    /// the chunk's index in the batch and the first query's index in the chunk.
    fn queries(&self, batch: &mut Batch, n: u32) -> Option<(usize, u32)> {
        if n > queries::QUERIES {
            return None;
        }
        if let Some(q) = batch.chunks.last_mut().and_then(|c| c.take(n)) {
            return Some((batch.chunks.len() - 1, q));
        }
        if batch.chunks.len() >= queries::MAX_CHUNKS_PER_SUBMIT {
            lock(&self.state).agg.untimed += 1;
            return None;
        }
        batch.chunks.push(self.pool.take(&self.device));
        let q = batch.chunks.last_mut().expect("just pushed").take(n)?;
        Some((batch.chunks.len() - 1, q))
    }

    /// Whether the running session counts and CPU-times only (no timestamp queries).
    pub(crate) fn stats_only(&self) -> bool {
        lock(&self.state).session.is_some_and(|s| s.stats_only)
    }

    /// Whether a run can stay in one compute pass and still time each dispatch.
    pub(crate) fn times_inside_passes(&self) -> bool {
        self.support.inside_passes || self.stats_only()
    }

    fn flags(&self) -> u32 {
        self.env
    }

    fn tracing(st: &State, env: u32) -> Option<Mode> {
        // A stats-only session records no trace events (a capture or the env still may).
        if let Some(s) = st.session.filter(|s| !s.stats_only) {
            return Some(s.mode);
        }
        if st.capture.is_some() || env & (flags::TRACE_INTERVAL | flags::TRACE_EVENT) != 0 {
            let event = env & flags::TRACE_EVENT != 0;
            return Some(Mode { interval: !event || env & flags::TRACE_INTERVAL != 0, event });
        }
        None
    }

    fn now_us(&self, t: Instant) -> f64 {
        t.saturating_duration_since(self.epoch).as_nanos() as f64 / 1e3
    }

    /// Called by `Stream::submit` with the batch of a submission (`seq` is `None` if it failed).
    pub(crate) fn submitted(self: &Arc<Self>, gpu: &Gpu, mut batch: Batch, seq: Option<u64>, stream: u64) {
        let done = Instant::now();
        let Some(seq) = seq else {
            batch.chunks.into_iter().for_each(|c| self.pool.put(c));
            return;
        };
        for e in &mut batch.entries {
            e.sched_ns = done.saturating_duration_since(e.cpu_start).as_nanos() as u64;
        }
        let (timed, untimed): (Vec<Entry>, Vec<Entry>) = batch.entries.into_iter().partition(|e| e.pair.is_some());
        let submit_us = self.now_us(done);
        {
            let mut st = lock(&self.state);
            let tracing = Self::tracing(&st, self.env);
            if tracing.is_some() {
                let mut args = Map::new();
                args.insert("seq".into(), json!(seq));
                args.insert("entries".into(), json!(timed.len() + untimed.len()));
                let start = self.now_us(batch.opened);
                st.trace.push(TraceEvent {
                    name: format!("encode+submit #{seq}"),
                    cat: "cpu",
                    ph: 'X',
                    ts_us: start,
                    dur_us: Some(submit_us - start),
                    tid: TID_CPU,
                    args,
                });
                self.sample_memory(gpu, &mut st, submit_us);
            }
            for e in &untimed {
                self.record(&mut st, tracing, e, None, None, seq, stream);
            }
            st.pending += batch.chunks.iter().filter(|c| c.used > 0).count() as u64;
        }
        // Split the timed entries by chunk and collect each chunk when its map completes.
        let mut per_chunk: Vec<Vec<Entry>> = batch.chunks.iter().map(|_| Vec::new()).collect();
        for e in timed {
            per_chunk[e.pair.expect("timed").chunk].push(e);
        }
        for (chunk, entries) in batch.chunks.into_iter().zip(per_chunk) {
            if chunk.used == 0 {
                self.pool.put(chunk);
                continue;
            }
            self.collect_on_completion(chunk, entries, seq, stream, submit_us);
        }
    }

    fn collect_on_completion(
        self: &Arc<Self>,
        chunk: Chunk,
        entries: Vec<Entry>,
        seq: u64,
        stream: u64,
        submit_us: f64,
    ) {
        let weak: Weak<ProfilerCore> = Arc::downgrade(self);
        let slot = Slot::new();
        self.tracker.track_map(&slot);
        let done = slot.clone();
        let readback = chunk.readback.clone();
        let n = u64::from(chunk.used) * wgpu::QUERY_SIZE as u64;
        let buffer = readback.clone();
        self.lane.push(move |lane| {
            lane.map(&buffer, wgpu::MapMode::Read, 0..n, move |r| {
                let ticks = r.ok().and_then(|_| {
                    let view = readback.get_mapped_range(..n).ok()?;
                    let t: Vec<u64> =
                        view.chunks_exact(8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes"))).collect();
                    drop(view);
                    readback.unmap();
                    Some(t)
                });
                if let Some(p) = weak.upgrade() {
                    // A chunk whose read failed may still be mapped: do not reuse it.
                    let reusable = ticks.is_some();
                    p.collected(entries, ticks, seq, stream, submit_us);
                    if reusable {
                        p.pool.put(chunk);
                    }
                }
                done.complete(Ok(()));
            })
        });
        self.tracker.notify();
    }

    /// A chunk's timestamps arrived (or `None`: the read failed, entries stay untimed).
    fn collected(&self, entries: Vec<Entry>, ticks: Option<Vec<u64>>, seq: u64, stream: u64, submit_us: f64) {
        let mut st = lock(&self.state);
        let tracing = Self::tracing(&st, self.env);
        let spans: Vec<Option<(u64, u64)>> = entries
            .iter()
            .map(|e| {
                let (t, p) = (ticks.as_ref()?, e.pair?);
                let (b, end) = (*t.get(p.begin() as usize)?, *t.get(p.end() as usize)?);
                st.agg.hygiene.check(b, end, self.period_ns).map(|ns| (b, ns))
            })
            .collect();
        // Anchor the GPU clock: the earliest work of this submission starts no earlier than its submit.
        if let Some(first) = spans.iter().flatten().map(|(b, _)| *b).min() {
            let need = submit_us * 1e3 - first as f64 * self.period_ns;
            st.gpu_offset_ns = Some(st.gpu_offset_ns.map_or(need, |o| o.max(need)));
        }
        let offset = st.gpu_offset_ns.unwrap_or(0.0);
        for (e, span) in entries.iter().zip(spans) {
            let gpu = span.map(|(b, ns)| ((b as f64 * self.period_ns + offset) / 1e3, ns));
            self.record(&mut st, tracing, e, gpu, span.map(|s| s.1), seq, stream);
        }
        st.pending = st.pending.saturating_sub(1);
        if st.pending == 0 {
            std::mem::take(&mut st.idle).into_iter().for_each(|s| {
                s.complete(());
            });
        }
    }

    /// Aggregates one entry, prints its info line if asked, and traces it.
    #[allow(clippy::too_many_arguments)]
    fn record(
        &self,
        st: &mut State,
        tracing: Option<Mode>,
        e: &Entry,
        gpu: Option<(f64, u64)>,
        gpu_ns: Option<u64>,
        seq: u64,
        stream: u64,
    ) {
        let f = self.flags();
        match &e.what {
            What::Op { name, pipeline } => {
                let run = st.agg.op(name, pipeline, gpu_ns, e.sched_ns);
                if f & flags::OPERATION_INFO != 0 {
                    eprintln!(
                        "wgalloc profiler: op '{name}' (pipeline '{pipeline}') run {run}{}",
                        self.times(gpu_ns, e.sched_ns)
                    );
                }
            }
            What::Copy(c) => {
                let count = st.agg.copy(c, gpu_ns, e.sched_ns);
                if f & flags::COPY_INFO != 0 {
                    let ids = if f & flags::INCLUDE_BUFFER_ID != 0 {
                        format!(", src block {:?}, dst block {:?}", c.src_block, c.dst_block)
                    } else {
                        String::new()
                    };
                    eprintln!(
                        "wgalloc profiler: copy {} #{count}: {} bytes{}{}{ids}{}",
                        c.kind.as_str(),
                        c.bytes,
                        if c.blocking { ", blocking" } else { "" },
                        if c.via_host { ", via host cache" } else { "" },
                        self.times(gpu_ns, e.sched_ns)
                    );
                }
            }
        }
        // Trace events (and their args) only while tracing: stats-only profiling stays cheap.
        let Some(mode) = tracing else { return };
        let mut args = Map::new();
        args.insert("seq".into(), json!(seq));
        args.insert("schedulingMs".into(), json!(e.sched_ns as f64 / 1e6));
        if let Some(ns) = gpu_ns {
            args.insert("gpuMs".into(), json!(ns as f64 / 1e6));
        }
        let (name, cat) = match &e.what {
            What::Op { name, pipeline } => {
                args.insert("pipeline".into(), json!(pipeline));
                (name.clone(), "op")
            }
            What::Copy(c) => {
                args.insert("bytes".into(), json!(c.bytes));
                args.insert("blocking".into(), json!(c.blocking));
                args.insert("viaHost".into(), json!(c.via_host));
                if let Some(id) = c.src_block {
                    args.insert("srcBlock".into(), json!(id));
                }
                if let Some(id) = c.dst_block {
                    args.insert("dstBlock".into(), json!(id));
                }
                (format!("copy {}", c.kind.as_str()), "copy")
            }
        };
        // Without a GPU time the CPU encode span stands in, marked as such.
        let (ts, dur) = match gpu {
            Some((ts, ns)) => (ts, ns as f64 / 1e3),
            None => {
                args.insert("gpuTime".into(), json!("unavailable"));
                let s = self.now_us(e.cpu_start);
                (s, self.now_us(e.cpu_end) - s)
            }
        };
        let tid = if stream == CPU_STREAM { TID_CPU } else { TID_STREAM_BASE + stream };
        if mode.event {
            st.trace.push(TraceEvent {
                name: name.clone(),
                cat,
                ph: 'i',
                ts_us: ts,
                dur_us: None,
                tid,
                args: args.clone(),
            });
        }
        if mode.interval {
            st.trace.push(TraceEvent { name, cat, ph: 'X', ts_us: ts, dur_us: Some(dur), tid, args });
        }
    }

    fn times(&self, gpu_ns: Option<u64>, sched_ns: u64) -> String {
        let f = self.flags();
        let mut parts = Vec::new();
        if f & flags::INCLUDE_GPU_TIME != 0 {
            parts.push(gpu_ns.map_or("GPU=n/a".into(), |ns| format!("GPU={:.3} ms", ns as f64 / 1e6)));
        }
        if f & flags::INCLUDE_KERNEL_TIME != 0 {
            parts.push(format!("SCHED={:.3} ms", sched_ns as f64 / 1e6));
        }
        if parts.is_empty() {
            String::new()
        } else {
            format!(" [{}]", parts.join(", "))
        }
    }

    /// A counter sample of every memory source, and instants for its new events.
    fn sample_memory(&self, gpu: &Gpu, st: &mut State, ts_us: f64) {
        let Some(sources) = gpu.shared.services.get::<MemorySources>() else { return };
        for sample in sources.samples() {
            let values: Map<String, Value> = sample.values.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
            st.trace.push(TraceEvent {
                name: sample.counter.into(),
                cat: "memory",
                ph: 'C',
                ts_us,
                dur_us: None,
                tid: TID_COUNTERS,
                args: values,
            });
            for (what, count) in sample.instants {
                let seen = match st.instants_seen.iter_mut().find(|(w, _)| *w == what) {
                    Some((_, seen)) => seen,
                    None => {
                        st.instants_seen.push((what, 0));
                        &mut st.instants_seen.last_mut().expect("pushed").1
                    }
                };
                let new = count.saturating_sub(*seen);
                *seen = count;
                for _ in 0..new.min(100) {
                    st.trace.push(TraceEvent {
                        name: what.into(),
                        cat: "memory",
                        ph: 'i',
                        ts_us,
                        dur_us: None,
                        tid: TID_CPU,
                        args: Map::new(),
                    });
                }
            }
        }
    }

    /// Records work that bypasses streams (queue writes): CPU time only, on the CPU track.
    pub(crate) fn record_now(&self, what: What, start: Instant) {
        let e = Entry {
            what,
            pair: None,
            cpu_start: start,
            cpu_end: Instant::now(),
            sched_ns: start.elapsed().as_nanos() as u64,
        };
        let mut st = lock(&self.state);
        let tracing = Self::tracing(&st, self.env);
        self.record(&mut st, tracing, &e, None, None, 0, CPU_STREAM);
    }

    fn refresh_on(&self, st: &State) {
        self.on.store(self.env != 0 || st.session.is_some() || st.capture.is_some(), Ordering::Relaxed);
    }
}

/// `gpu.profiler()`: control, stats and export. Cheap to clone.
#[derive(Clone)]
pub struct Profiler {
    gpu: Gpu,
    core: Arc<ProfilerCore>,
}

impl Gpu {
    /// Records a queue write of `bytes` (an upload that bypasses streams) while profiling.
    pub(crate) fn profile_queue_write(&self, start: Instant, bytes: u64, dst_block: Option<u64>) {
        if let Some(p) = self.profiling() {
            let info = CopyInfo {
                kind: CopyKind::Upload,
                bytes,
                blocking: false,
                via_host: false,
                src_block: None,
                dst_block,
            };
            p.record_now(What::Copy(info), start);
        }
    }

    /// The profiler, if it is on: the one atomic load hot paths pay when it is off.
    #[inline]
    pub(crate) fn profiling(&self) -> Option<&Arc<ProfilerCore>> {
        self.shared.services.get::<ProfilerCore>().filter(|p| p.is_on())
    }

    /// The device's profiler. Fails if `WGALLOC_PROFILE` holds an unknown flag.
    pub fn profiler(&self) -> Result<Profiler> {
        let core = self
            .shared
            .services
            .get_or_attach(|| {
                let lane = self.shared.lane.handle().clone();
                Arc::new(ProfilerCore::new(&self.shared.device, &self.shared.queue, &self.shared.tracker, lane))
            })
            .clone();
        if let Some(e) = &core.env_error {
            return Err(e.clone());
        }
        Ok(Profiler { gpu: self.clone(), core })
    }
}

impl Profiler {
    pub fn info(&self) -> ProfilerInfo {
        let c = &self.core;
        let st = lock(&c.state);
        let timing = match (c.support.passes, c.support.encoders, c.support.inside_passes) {
            (true, true, true) => "GPU timestamps per dispatch (written inside the run's one compute pass) and per copy, plus CPU scheduling time",
            (true, true, false) => "GPU timestamps per dispatch (one compute pass per op while profiling) and per copy, plus CPU scheduling time",
            (true, false, _) => "GPU timestamps for compute passes (copies CPU-timed: no TIMESTAMP_QUERY_INSIDE_ENCODERS), plus CPU scheduling time",
            _ => "CPU timing only: the device lacks TIMESTAMP_QUERY",
        };
        ProfilerInfo {
            timestamps: c.support,
            timestamp_period_ns: c.period_ns,
            timing: timing.into(),
            active: c.is_on(),
            session: st.session.is_some(),
            capturing: st.capture.is_some(),
            mode: ProfilerCore::tracing(&st, c.env).map(|m| m.as_str().to_string()),
            wait_until_completed: self.wait_until_completed_locked(&st),
            env_flags: flags::NAMES.iter().filter(|(_, b)| c.env & b != 0).map(|(n, _)| n.to_string()).collect(),
            query_sets_created: c.pool.created(),
        }
    }

    fn wait_until_completed_locked(&self, st: &State) -> bool {
        st.session.is_some_and(|s| s.wait_until_completed) || self.core.env & flags::WAIT_UNTIL_COMPLETED != 0
    }

    /// Starts a session. Fails with `PROFILER_STATE` if one is running, `DEVICE_LOST` once the
    /// device is gone (what was recorded before stays readable and exportable).
    pub fn start(&self, options: StartOptions) -> Result<()> {
        self.gpu.check_alive()?;
        let mut st = lock(&self.core.state);
        if st.session.is_some() {
            return Err(Error::ProfilerState(
                "the profiler is already started; call stop() before starting it again (sessions do not nest)".into(),
            ));
        }
        st.session = Some(options);
        if st.capture.is_none() {
            st.trace.clear();
        }
        self.core.refresh_on(&st);
        Ok(())
    }

    /// Ends the session. Fails with `PROFILER_STATE` without one.
    pub fn stop(&self) -> Result<()> {
        let mut st = lock(&self.core.state);
        if st.session.take().is_none() {
            return Err(Error::ProfilerState("the profiler is not started; call start() first".into()));
        }
        self.core.refresh_on(&st);
        Ok(())
    }

    pub fn is_active(&self) -> bool {
        self.core.is_on()
    }

    /// Whether submits should block until the GPU finished them (`waitUntilCompleted`).
    pub(crate) fn wait_until_completed(core: &ProfilerCore) -> bool {
        let st = lock(&core.state);
        st.session.is_some_and(|s| s.wait_until_completed) || core.env & flags::WAIT_UNTIL_COMPLETED != 0
    }

    /// Counts a CPU fallback of `name` that copied `bytes` between host and device.
    pub fn mark_cpu_fallback(&self, name: &str, bytes: u64) -> Result<()> {
        if name.is_empty() {
            return Err(Error::invalid("name", "a non-empty op name", "''").in_call("markCpuFallback"));
        }
        let c = &self.core;
        let mut st = lock(&c.state);
        let runs = st.agg.fallback(name, bytes);
        if c.env & flags::FALLBACK_INFO != 0 {
            eprintln!("wgalloc profiler: cpu fallback '{name}' run {runs}, {bytes} bytes copied");
        }
        if ProfilerCore::tracing(&st, c.env).is_some() {
            let mut args = Map::new();
            args.insert("bytes".into(), json!(bytes));
            let ts = c.now_us(Instant::now());
            st.trace.push(TraceEvent {
                name: format!("cpu fallback {name}"),
                cat: "fallback",
                ph: 'i',
                ts_us: ts,
                dur_us: None,
                tid: TID_CPU,
                args,
            });
        }
        Ok(())
    }

    pub fn stats(&self) -> ProfileStats {
        let st = lock(&self.core.state);
        st.agg.snapshot(st.pending)
    }

    pub fn reset_stats(&self) {
        lock(&self.core.state).agg = Aggregates::default();
    }

    /// Blocks until every submitted timestamp was read back; `false` if `timeout`
    /// passed first (e.g. the device was lost with reads outstanding).
    pub fn flush_blocking(&self, timeout: Duration) -> bool {
        let slot = {
            let mut st = lock(&self.core.state);
            if st.pending == 0 {
                return true;
            }
            let s = Slot::new();
            st.idle.push(s.clone());
            s
        };
        slot.wait_timeout(timeout).is_some()
    }

    /// The stats tables `WGALLOC_PROFILE` asks for at exit, or `None` if it asks for none.
    pub fn exit_report(&self) -> Option<String> {
        let f = self.core.env;
        if !options::wants_stats_at_exit(f) {
            return None;
        }
        let all = f & flags::ALL_STATS != 0;
        Some(stats::format_tables(
            &self.stats(),
            all || f & flags::OPERATION_STATS != 0,
            all || f & flags::COPY_STATS != 0,
            all || f & flags::FALLBACK_STATS != 0,
        ))
    }

    /// All stats tables.
    pub fn format_stats(&self) -> String {
        stats::format_tables(&self.stats(), true, true, true)
    }

    fn document(&self, st: &mut State, from: usize) -> Value {
        self.core.sample_memory(&self.gpu, st, self.core.now_us(Instant::now()));
        let info = self.gpu.info();
        st.trace.to_json(from, json!({"adapter": info.adapter_name, "backend": info.backend, "droppedEvents": st.trace.dropped, "timestampPeriodNs": self.core.period_ns}))
    }

    /// Trace events held (what `export_trace` would write, less the final memory sample).
    pub fn trace_events(&self) -> usize {
        lock(&self.core.state).trace.events.len()
    }

    /// Writes everything traced so far (this session, or since the last start) to `path`.
    pub fn export_trace(&self, path: &Path) -> Result<()> {
        let doc = {
            let mut st = lock(&self.core.state);
            self.document(&mut st, 0)
        };
        trace::write(path, &doc)
    }

    /// Starts recording everything into one trace file, written by `stop_capture`.
    pub fn start_capture(&self, name: &str) -> Result<()> {
        self.gpu.check_alive()?;
        if name.is_empty() {
            return Err(Error::invalid("name", "a non-empty file name or path", "''").in_call("startCapture"));
        }
        let mut st = lock(&self.core.state);
        if let Some((current, _)) = &st.capture {
            return Err(Error::ProfilerState(format!(
                "a capture ('{current}') is already running; call stopCapture() first"
            )));
        }
        let from = st.trace.events.len();
        st.capture = Some((name.to_string(), from));
        self.core.refresh_on(&st);
        Ok(())
    }

    /// Ends the capture and writes its trace to `<name>` (`.json` appended if it has no extension).
    pub fn stop_capture(&self) -> Result<PathBuf> {
        let (doc, path) = {
            let mut st = lock(&self.core.state);
            let Some((name, from)) = st.capture.take() else {
                return Err(Error::ProfilerState("no capture is running; call startCapture(name) first".into()));
            };
            self.core.refresh_on(&st);
            let mut path = PathBuf::from(name);
            if path.extension().is_none() {
                path.set_extension("json");
            }
            (self.document(&mut st, from), path)
        };
        trace::write(&path, &doc)?;
        Ok(path)
    }
}
