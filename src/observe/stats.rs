//! Run statistics: the single source of truth read by the dashboard, the progress line, the
//! summary and the report. Stages record per-slice times into per-thread HDR histograms (an
//! uncontended lock each, so the hot path never waits on another thread) and bump atomic
//! counters; readers merge the histograms into a [`Snapshot`] at their own tick.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use super::cpu::{CpuTime, ThreadUse};
use super::hdr;

/// The stages of a slice's life, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StageId {
    Scan,
    ReadDecode,
    TransferIn,
    /// GPU decode of compressed frames (codec libraries), timed by CUDA events.
    GpuDecode,
    Compute,
    /// Compression on the GPU (nvCOMP, nvJPEG), timed by CUDA events.
    GpuEncode,
    TransferOut,
    Encode,
    Write,
}

impl StageId {
    /// All stages in pipeline order.
    pub const ALL: [StageId; 9] = [
        StageId::Scan,
        StageId::ReadDecode,
        StageId::TransferIn,
        StageId::GpuDecode,
        StageId::Compute,
        StageId::GpuEncode,
        StageId::TransferOut,
        StageId::Encode,
        StageId::Write,
    ];

    /// Display name.
    pub fn name(self) -> &'static str {
        match self {
            StageId::Scan => "scan",
            StageId::ReadDecode => "read+decode",
            StageId::TransferIn => "transfer in",
            StageId::GpuDecode => "gpu decode",
            StageId::Compute => "compute",
            StageId::GpuEncode => "gpu encode",
            StageId::TransferOut => "transfer out",
            StageId::Encode => "encode",
            StageId::Write => "write",
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }

    /// The stage with this display name.
    pub fn from_name(name: &str) -> Option<StageId> {
        StageId::ALL.iter().copied().find(|s| s.name() == name)
    }

    /// Whether this stage moves bytes between host and device.
    pub fn is_transfer(self) -> bool {
        matches!(self, StageId::TransferIn | StageId::TransferOut)
    }

    /// Whether only some backends or inputs have this stage (the transfers, GPU decode of
    /// compressed frames, GPU encoding): shown only once it counted a slice.
    pub fn is_optional(self) -> bool {
        self.is_transfer() || matches!(self, StageId::GpuDecode | StageId::GpuEncode)
    }
}

/// The thread pools of the pipeline. A pool's threads run one or more stages one after the
/// other (a writer encodes, then writes), so how busy a pool is, not a stage, says whether the
/// pipeline's threads are kept working.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pool {
    Scan,
    Loaders,
    RenderWorkers,
    Writers,
    /// Threads that load frames and finish them (the shared layout).
    Shared,
}

impl Pool {
    /// All pools in pipeline order.
    pub const ALL: [Pool; 5] = [
        Pool::Scan,
        Pool::Loaders,
        Pool::RenderWorkers,
        Pool::Writers,
        Pool::Shared,
    ];

    /// Position in [`Pool::ALL`].
    fn index(self) -> usize {
        self as usize
    }

    /// The pool whose threads run `stage` in `layout`.
    pub fn of(stage: StageId, layout: ThreadLayout) -> Pool {
        let finishing = if layout.shared {
            Pool::Shared
        } else {
            Pool::Writers
        };
        match stage {
            StageId::Scan => Pool::Scan,
            StageId::ReadDecode if layout.shared => Pool::Shared,
            StageId::ReadDecode => Pool::Loaders,
            StageId::Compute if layout.render_on_writers => finishing,
            StageId::TransferIn
            | StageId::GpuDecode
            | StageId::Compute
            | StageId::GpuEncode
            | StageId::TransferOut => Pool::RenderWorkers,
            StageId::Encode | StageId::Write => finishing,
        }
    }

    /// Display name.
    pub fn name(self) -> &'static str {
        match self {
            Pool::Scan => "scan",
            Pool::Loaders => "loaders",
            Pool::RenderWorkers => "render workers",
            Pool::Writers => "writers",
            Pool::Shared => "shared threads",
        }
    }
}

/// Which threads run which stages, as far as the statistics need it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ThreadLayout {
    /// The threads that encode and write also render (there are no render workers).
    pub render_on_writers: bool,
    /// The threads that encode and write also load (the shared layout).
    pub shared: bool,
}

/// An empty histogram of stage times: microseconds, the range and precision every recorder
/// uses (and merged reports too).
pub fn new_histogram() -> Histogram<u64> {
    // Microseconds from 1 µs to one hour, 2 significant digits: a few KiB per histogram.
    Histogram::new_with_bounds(1, 3_600_000_000, 2).unwrap_or_else(|_| {
        Histogram::new(2).unwrap_or_else(|_| unreachable!("2 significant digits is valid"))
    })
}

/// A histogram owned by one thread, merged by readers.
#[derive(Clone)]
pub struct Recorder {
    hist: Arc<Mutex<Histogram<u64>>>,
    counters: Arc<StageCounters>,
}

impl Recorder {
    /// Records one slice that took `d` in this stage.
    #[inline]
    pub fn record(&self, d: Duration) {
        let us = d.as_micros().max(1) as u64;
        if let Ok(mut h) = self.hist.lock() {
            h.saturating_record(us);
        }
        self.counters.count.fetch_add(1, Ordering::Relaxed);
        self.counters
            .busy_ns
            .fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
    }
}

#[derive(Default)]
struct StageCounters {
    count: AtomicU64,
    busy_ns: AtomicU64,
    workers: AtomicU64,
}

#[derive(Default)]
struct StageSlot {
    counters: Arc<StageCounters>,
    recorders: Mutex<Vec<Arc<Mutex<Histogram<u64>>>>>,
}

/// A gauge sampled at each tick (queue length, free slots): returns (current, capacity).
pub type Gauge = Box<dyn Fn() -> (usize, usize) + Send + Sync>;

/// One recent error, for the dashboard.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ErrorEntry {
    #[serde(serialize_with = "crate::paths::serialize")]
    pub path: PathBuf,
    pub stage: String,
    pub reason: String,
}

/// GPU figures published by the CUDA backend.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct GpuFigures {
    pub devices: Vec<String>,
    pub strategy: String,
    /// Per device: (reserved current, used current, reserved high, used high) in bytes.
    pub pools: Vec<[u64; 4]>,
    /// Pinned host memory held by slots, bytes.
    pub pinned_bytes: u64,
    /// Time spent page-locking slot memory so far (allocation happens as slots first fill).
    pub pinned_alloc_ms: f64,
    /// Frames rendered per device.
    pub frames_per_device: Vec<u64>,
    /// Where each family of compressed transfer syntaxes decodes (GPU with which library, or
    /// CPU and why).
    pub decode: Vec<String>,
    /// The codec libraries in short ("nvJPEG2000 0.11.0, nvJPEG 13.0.1", or what is missing).
    pub codecs: String,
    /// Frames decoded on the GPU.
    pub frames_gpu_decoded: u64,
    /// Frames sent to a GPU codec that the CPU decoder took over (unsupported or damaged).
    pub frames_decode_fallback: u64,
    /// Native frames the loaders put straight into GPU memory (`gpu.upload`).
    pub frames_uploaded: u64,
    /// Who compresses the output: "CPU", or the GPU encoder's library and version.
    pub encoder: String,
}

/// The run's live counters, updated by the stages as they go (atomics, read by the dashboard
/// and the progress line); the final per-file counts are the pipeline's `Totals`
/// (`pipeline::events`).
#[derive(Default)]
pub struct Counters {
    pub files_found: AtomicU64,
    pub files_skipped: AtomicU64,
    pub files_failed: AtomicU64,
    pub frames_planned: AtomicU64,
    pub frames_done: AtomicU64,
    pub frames_failed: AtomicU64,
    pub frames_existing: AtomicU64,
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
    /// Frames the GPU compressed, and the compressed bytes it handed the writers.
    pub gpu_encoded_frames: AtomicU64,
    pub gpu_encoded_bytes: AtomicU64,
    /// The scan has listed every input: the number of frames expected is known (before, an ETA
    /// would only count what was found so far).
    pub scan_done: std::sync::atomic::AtomicBool,
}

/// Everything the stages publish.
pub struct Stats {
    start: Instant,
    stages: [StageSlot; StageId::ALL.len()],
    latency: StageSlot,
    pub totals: Counters,
    gauges: Mutex<Vec<(String, Gauge)>>,
    errors: Mutex<(u64, VecDeque<ErrorEntry>)>,
    backend: Mutex<String>,
    gpu: Mutex<Option<GpuFigures>>,
    paused: std::sync::atomic::AtomicBool,
    finished: std::sync::atomic::AtomicBool,
    /// When the run finished: the clock stops there.
    finished_at: std::sync::OnceLock<Instant>,
    layout: Mutex<ThreadLayout>,
    /// What each pool's ended threads used (`ThreadUse`), summed; by [`Pool::index`].
    thread_use: Mutex<[(u64, ThreadUse); Pool::ALL.len()]>,
}

/// Errors kept for display.
const RECENT_ERRORS: usize = 50;

impl Default for Stats {
    fn default() -> Self {
        Stats {
            start: Instant::now(),
            stages: Default::default(),
            latency: StageSlot::default(),
            totals: Counters::default(),
            gauges: Mutex::new(Vec::new()),
            errors: Mutex::new((0, VecDeque::new())),
            backend: Mutex::new(String::new()),
            gpu: Mutex::new(None),
            paused: Default::default(),
            finished: Default::default(),
            finished_at: std::sync::OnceLock::new(),
            layout: Mutex::new(ThreadLayout::default()),
            thread_use: Mutex::new(Default::default()),
        }
    }
}

impl Stats {
    /// A fresh set of statistics; the clock starts now.
    pub fn new() -> Arc<Stats> {
        Arc::new(Stats::default())
    }

    /// A recorder for `stage`, owned by the calling thread.
    pub fn recorder(&self, stage: StageId) -> Recorder {
        Self::recorder_of(&self.stages[stage.index()])
    }

    /// A recorder of end-to-end slice latency (first byte read → output renamed).
    pub fn latency_recorder(&self) -> Recorder {
        Self::recorder_of(&self.latency)
    }

    fn recorder_of(slot: &StageSlot) -> Recorder {
        let hist = Arc::new(Mutex::new(new_histogram()));
        if let Ok(mut v) = slot.recorders.lock() {
            v.push(hist.clone());
        }
        slot.counters.workers.fetch_add(1, Ordering::Relaxed);
        Recorder {
            hist,
            counters: slot.counters.clone(),
        }
    }

    /// Registers a gauge sampled at each snapshot.
    pub fn add_gauge(&self, name: impl Into<String>, gauge: Gauge) {
        if let Ok(mut g) = self.gauges.lock() {
            g.push((name.into(), gauge));
        }
    }

    /// Records an error for display (the report keeps all of them separately).
    pub fn push_error(&self, e: ErrorEntry) {
        if let Ok(mut g) = self.errors.lock() {
            g.0 += 1;
            if g.1.len() == RECENT_ERRORS {
                g.1.pop_front();
            }
            g.1.push_back(e);
        }
    }

    /// Sets the backend line ("cpu", "cuda: 2× NVIDIA H200, zero-copy").
    pub fn set_backend(&self, text: impl Into<String>) {
        if let Ok(mut b) = self.backend.lock() {
            *b = text.into();
        }
    }

    /// Publishes GPU figures.
    pub fn set_gpu(&self, g: GpuFigures) {
        if let Ok(mut x) = self.gpu.lock() {
            *x = Some(g);
        }
    }

    /// Pauses or resumes loading (dashboard key `p`).
    pub fn set_paused(&self, paused: bool) {
        self.paused.store(paused, Ordering::Relaxed);
    }

    /// Whether loading is paused.
    pub fn is_paused(&self) -> bool {
        self.paused.load(Ordering::Relaxed)
    }

    /// Adds what an ended thread of `pool` used (its CPU time and lifetime).
    pub fn record_thread_use(&self, pool: Pool, used: ThreadUse) {
        if let Ok(mut all) = self.thread_use.lock() {
            let (threads, sum) = &mut all[pool.index()];
            *threads += 1;
            sum.cpu.user += used.cpu.user;
            sum.cpu.system += used.cpu.system;
            sum.lifetime += used.lifetime;
            // Known for the pool only while every thread of it said.
            sum.runqueue = match (*threads, sum.runqueue, used.runqueue) {
                (1, _, waited) => waited,
                (_, Some(a), Some(b)) => Some(a + b),
                _ => None,
            };
        }
    }

    /// The CPU figures of `pool`'s ended threads; `None` before any ended (or where threads
    /// are not accounted).
    fn pool_cpu(&self, pool: Pool) -> Option<PoolCpu> {
        let (threads, used) = self.thread_use.lock().ok()?[pool.index()];
        (threads > 0).then(|| PoolCpu::of(threads, used))
    }

    /// Says which threads run which stages, so each stage's time counts toward the pool of
    /// threads that ran it.
    pub fn set_layout(&self, layout: ThreadLayout) {
        if let Ok(mut l) = self.layout.lock() {
            *l = layout;
        }
    }

    /// See [`Stats::set_layout`].
    pub fn layout(&self) -> ThreadLayout {
        self.layout.lock().map(|l| *l).unwrap_or_default()
    }

    /// Marks the run as finished (readers stop ticking) and stops the clock: what comes
    /// after (the final GPU figures, the per-file results, the report) is not the pipeline's
    /// time.
    pub fn set_finished(&self) {
        let _ = self.finished_at.set(Instant::now());
        self.finished.store(true, Ordering::Relaxed);
    }

    /// Whether the run is finished.
    pub fn is_finished(&self) -> bool {
        self.finished.load(Ordering::Relaxed)
    }

    /// Time since the run started.
    pub fn elapsed(&self) -> Duration {
        match self.finished_at.get() {
            Some(end) => end.saturating_duration_since(self.start),
            None => self.start.elapsed(),
        }
    }

    /// Samples only the gauges (cheap; for trace counters when nothing else is displayed).
    pub fn gauges(&self) -> Vec<GaugeSnapshot> {
        self.gauges
            .lock()
            .map(|g| {
                g.iter()
                    .map(|(n, f)| {
                        let (cur, cap) = f();
                        GaugeSnapshot {
                            name: n.clone(),
                            current: cur,
                            capacity: cap,
                        }
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Merges everything into a consistent-enough view for display and reports.
    pub fn snapshot(&self) -> Snapshot {
        self.snapshot_of(false)
    }

    /// [`snapshot`](Self::snapshot) with each stage's histogram encoded in it
    /// ([`StageSnapshot::histogram`]), for the report: what `report merge` adds up.
    pub fn snapshot_with_histograms(&self) -> Snapshot {
        self.snapshot_of(true)
    }

    fn snapshot_of(&self, histograms: bool) -> Snapshot {
        let elapsed = self.elapsed();
        let stages: Vec<StageSnapshot> = StageId::ALL
            .iter()
            .map(|&id| {
                let slot = &self.stages[id.index()];
                StageSnapshot::from_slot(id.name().to_string(), slot, elapsed, histograms)
            })
            .collect();
        let layout = self.layout();
        let mut pools = PoolSnapshot::from_stages(&stages, elapsed, layout);
        for p in &mut pools {
            p.cpu = self.pool_cpu(p.pool);
        }
        let overlap = overlap(&pools, elapsed);
        let latency =
            StageSnapshot::from_slot("latency".into(), &self.latency, elapsed, histograms);
        let gauges = self.gauges();
        let (error_count, recent_errors) = self
            .errors
            .lock()
            .map(|e| (e.0, e.1.iter().cloned().collect()))
            .unwrap_or_default();
        let t = &self.totals;
        Snapshot {
            elapsed,
            stages,
            pools,
            render_on_writers: layout.render_on_writers,
            shared_threads: layout.shared,
            overlap,
            latency,
            gauges,
            error_count,
            recent_errors,
            backend: self.backend.lock().map(|b| b.clone()).unwrap_or_default(),
            gpu: self.gpu.lock().ok().and_then(|g| g.clone()),
            files_found: t.files_found.load(Ordering::Relaxed),
            files_skipped: t.files_skipped.load(Ordering::Relaxed),
            files_failed: t.files_failed.load(Ordering::Relaxed),
            frames_planned: t.frames_planned.load(Ordering::Relaxed),
            frames_done: t.frames_done.load(Ordering::Relaxed),
            frames_failed: t.frames_failed.load(Ordering::Relaxed),
            frames_existing: t.frames_existing.load(Ordering::Relaxed),
            bytes_in: t.bytes_in.load(Ordering::Relaxed),
            bytes_out: t.bytes_out.load(Ordering::Relaxed),
            gpu_encoded_frames: t.gpu_encoded_frames.load(Ordering::Relaxed),
            gpu_encoded_bytes: t.gpu_encoded_bytes.load(Ordering::Relaxed),
            paused: self.is_paused(),
            finished: self.is_finished(),
            scan_done: t.scan_done.load(Ordering::Relaxed),
        }
    }
}

/// One stage, merged.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct StageSnapshot {
    pub name: String,
    /// Slices through this stage.
    pub count: u64,
    /// Threads recording this stage.
    pub workers: u64,
    /// Summed time spent in the stage (all threads), seconds.
    pub busy_s: f64,
    /// busy / (elapsed × workers), 0..=1.
    pub busy_fraction: f64,
    /// Slices per second over the run so far.
    pub throughput: f64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub mean_ms: f64,
    /// The times themselves (µs), in the report only: what merging reports adds up.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub histogram: Option<hdr::EncodedHistogram>,
}

impl StageSnapshot {
    fn from_slot(name: String, slot: &StageSlot, elapsed: Duration, encode: bool) -> Self {
        let mut merged = new_histogram();
        if let Ok(recs) = slot.recorders.lock() {
            for r in recs.iter() {
                if let Ok(h) = r.lock() {
                    let _ = merged.add(&*h);
                }
            }
        }
        let count = slot.counters.count.load(Ordering::Relaxed);
        let workers = slot.counters.workers.load(Ordering::Relaxed);
        let busy_s = slot.counters.busy_ns.load(Ordering::Relaxed) as f64 / 1e9;
        let mut s = StageSnapshot::from_histogram(name, &merged, count, workers, busy_s, elapsed);
        if encode {
            s.histogram = Some(hdr::encode(&merged));
        }
        s
    }

    /// A stage's figures from its merged histogram (µs) and counters; `elapsed` is the time
    /// the `workers` threads had.
    pub fn from_histogram(
        name: String,
        merged: &Histogram<u64>,
        count: u64,
        workers: u64,
        busy_s: f64,
        elapsed: Duration,
    ) -> Self {
        let secs = elapsed.as_secs_f64().max(1e-9);
        let ms = |us: u64| us as f64 / 1000.0;
        let empty = merged.is_empty();
        StageSnapshot {
            name,
            count,
            workers,
            busy_s,
            busy_fraction: busy_fraction(busy_s, secs, workers),
            throughput: count as f64 / secs,
            p50_ms: if empty {
                0.0
            } else {
                ms(merged.value_at_quantile(0.50))
            },
            p95_ms: if empty {
                0.0
            } else {
                ms(merged.value_at_quantile(0.95))
            },
            p99_ms: if empty {
                0.0
            } else {
                ms(merged.value_at_quantile(0.99))
            },
            max_ms: if empty { 0.0 } else { ms(merged.max()) },
            mean_ms: if empty { 0.0 } else { merged.mean() / 1000.0 },
            histogram: None,
        }
    }
}

/// busy / (elapsed × workers), 0..=1 (0 without workers).
fn busy_fraction(busy_s: f64, elapsed_s: f64, workers: u64) -> f64 {
    if workers > 0 {
        (busy_s / (elapsed_s * workers as f64)).min(1.0)
    } else {
        0.0
    }
}

/// One thread pool, merged from the stages its threads run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PoolSnapshot {
    pub pool: Pool,
    /// Threads in the pool (the most that recorded any of its stages: the same threads record
    /// each of them).
    pub workers: u64,
    /// Summed time the pool's threads spent in its stages, seconds.
    pub busy_s: f64,
    /// busy / (elapsed × workers), 0..=1.
    pub busy_fraction: f64,
    /// What the pool's threads used of the CPUs, once they have ended (the report's and the
    /// summary's final figures; absent while they run, and where threads are not accounted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<PoolCpu>,
}

/// The CPU time of a pool's threads over their whole lives, as the kernel accounts it
/// ([`super::cpu`]). Beside the busy fraction (wall-clock time in the stages) it says whether
/// the threads computed, worked in the kernel (file reads and writes), or waited.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct PoolCpu {
    /// Threads that reported.
    pub threads: u64,
    /// Seconds running the program's code, summed over the threads.
    pub user_s: f64,
    /// Seconds in the kernel on their behalf, summed.
    pub system_s: f64,
    /// (user + system) / the threads' summed lifetimes, 0..=1: how much of their lives they
    /// were on a CPU.
    pub on_cpu_fraction: f64,
    /// Time the threads were runnable but waited on a run queue for a core / their summed
    /// lifetimes, 0..=1 - `on_cpu_fraction` (each thread's wait at most its time off a CPU:
    /// `observe::cpu`; the rest of the time off a CPU they slept: waiting for work, a slot,
    /// a lock); absent where the kernel keeps no scheduler statistics.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runqueue_fraction: Option<f64>,
}

impl PoolCpu {
    fn of(threads: u64, used: ThreadUse) -> PoolCpu {
        let CpuTime { user, system } = used.cpu;
        let life = used.lifetime.as_secs_f64();
        let on = user.as_secs_f64() + system.as_secs_f64();
        let share = |t: f64| if life > 0.0 { (t / life).min(1.0) } else { 0.0 };
        PoolCpu {
            threads,
            user_s: user.as_secs_f64(),
            system_s: system.as_secs_f64(),
            on_cpu_fraction: share(on),
            runqueue_fraction: used.runqueue.map(|w| share(w.as_secs_f64())),
        }
    }
}

impl PoolSnapshot {
    /// The pools that processed slices, from the per-stage figures (in `StageId::ALL` order).
    fn from_stages(
        stages: &[StageSnapshot],
        elapsed: Duration,
        layout: ThreadLayout,
    ) -> Vec<PoolSnapshot> {
        let secs = elapsed.as_secs_f64().max(1e-9);
        Pool::ALL
            .iter()
            .filter_map(|&pool| {
                let mine = || {
                    StageId::ALL
                        .iter()
                        .zip(stages)
                        .filter(move |(id, st)| Pool::of(**id, layout) == pool && st.count > 0)
                        .map(|(_, st)| st)
                };
                let workers = mine().map(|st| st.workers).max()?;
                let busy_s: f64 = mine().map(|st| st.busy_s).sum();
                Some(PoolSnapshot {
                    pool,
                    workers,
                    busy_s,
                    busy_fraction: busy_fraction(busy_s, secs, workers),
                    cpu: None,
                })
            })
            .collect()
    }
}

/// How well the stages overlap: elapsed time / (busiest pool's busy time / its threads).
/// 1.0 means the busiest pool never waited; a pipeline that ran its stages one after another
/// would approach the number of pools. None before any slice is processed.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Overlap {
    pub ratio: f64,
    pub busiest: Pool,
}

fn overlap(pools: &[PoolSnapshot], elapsed: Duration) -> Option<Overlap> {
    let busiest = pools
        .iter()
        .filter(|p| p.workers > 0 && p.busy_s > 0.0)
        .max_by(|a, b| (a.busy_s / a.workers as f64).total_cmp(&(b.busy_s / b.workers as f64)))?;
    Some(Overlap {
        ratio: elapsed.as_secs_f64() / (busiest.busy_s / busiest.workers as f64),
        busiest: busiest.pool,
    })
}

/// A sampled gauge.
#[derive(Debug, Clone, serde::Serialize)]
pub struct GaugeSnapshot {
    pub name: String,
    pub current: usize,
    pub capacity: usize,
}

/// Everything a reader needs, at one instant.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Snapshot {
    #[serde(serialize_with = "ser_secs")]
    pub elapsed: Duration,
    pub stages: Vec<StageSnapshot>,
    /// The thread pools (loaders, render workers, writers), merged from their stages.
    pub pools: Vec<PoolSnapshot>,
    /// The threads that encode and write render each frame themselves (no render workers; the
    /// compute stage is part of their pool).
    pub render_on_writers: bool,
    /// One pool of threads loaded and finished the frames (the shared layout).
    pub shared_threads: bool,
    pub overlap: Option<Overlap>,
    pub latency: StageSnapshot,
    pub gauges: Vec<GaugeSnapshot>,
    pub error_count: u64,
    pub recent_errors: Vec<ErrorEntry>,
    pub backend: String,
    pub gpu: Option<GpuFigures>,
    pub files_found: u64,
    pub files_skipped: u64,
    pub files_failed: u64,
    pub frames_planned: u64,
    pub frames_done: u64,
    pub frames_failed: u64,
    pub frames_existing: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Frames compressed on the GPU, and the bytes that came back compressed.
    pub gpu_encoded_frames: u64,
    pub gpu_encoded_bytes: u64,
    pub paused: bool,
    pub finished: bool,
    /// See [`Counters::scan_done`].
    pub scan_done: bool,
}

fn ser_secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

impl Snapshot {
    /// The stage with the highest busy fraction among those that processed slices.
    pub fn bottleneck(&self) -> Option<&StageSnapshot> {
        self.stages
            .iter()
            .filter(|s| s.count > 0 && s.name != "scan")
            .max_by(|a, b| a.busy_fraction.total_cmp(&b.busy_fraction))
    }

    /// Frames finished (written, failed or already present) out of those planned.
    pub fn frames_finished(&self) -> u64 {
        self.frames_done + self.frames_failed + self.frames_existing
    }

    /// Output frames per second so far.
    pub fn throughput(&self) -> f64 {
        self.frames_done as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// The frames this run is expected to finish, as far as is known now: the frames of the
    /// files opened so far, or the image candidates found by the scan when that is more
    /// (exact for single-frame files once the scan is over; grows while scanning).
    pub fn frames_expected(&self) -> u64 {
        let candidates = self
            .files_found
            .saturating_sub(self.files_skipped)
            .saturating_sub(self.files_failed);
        self.frames_planned
            .max(candidates)
            .max(self.frames_finished())
    }

    /// The statistics of one stage.
    pub fn stage(&self, id: StageId) -> Option<&StageSnapshot> {
        self.stages.get(id.index())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorders_merge_into_percentiles_and_counts() {
        let stats = Stats::new();
        let a = stats.recorder(StageId::Encode);
        let b = stats.recorder(StageId::Encode);
        for i in 1..=100u64 {
            a.record(Duration::from_micros(i * 10));
            b.record(Duration::from_micros(i * 10));
        }
        let s = stats.snapshot();
        let enc = &s.stages[StageId::Encode as usize];
        assert_eq!(enc.count, 200);
        assert_eq!(enc.workers, 2);
        assert!((enc.p50_ms - 0.5).abs() < 0.02, "{}", enc.p50_ms);
        assert!((enc.max_ms - 1.0).abs() < 0.02, "{}", enc.max_ms);
        assert_eq!(s.bottleneck().map(|b| b.name.as_str()), Some("encode"));
    }

    #[test]
    fn pools_merge_the_stages_their_threads_run() {
        let stats = Stats::new();
        let loader = stats.recorder(StageId::ReadDecode);
        let writers: Vec<_> = (0..2)
            .map(|_| {
                (
                    stats.recorder(StageId::Encode),
                    stats.recorder(StageId::Write),
                )
            })
            .collect();
        for _ in 0..10 {
            loader.record(Duration::from_millis(4));
            for (encode, write) in &writers {
                encode.record(Duration::from_millis(3));
                write.record(Duration::from_millis(2));
            }
        }
        let s = stats.snapshot();
        let names: Vec<_> = s.pools.iter().map(|p| p.pool).collect();
        assert_eq!(names, [Pool::Loaders, Pool::Writers]);
        let w = &s.pools[1];
        assert_eq!(w.workers, 2);
        assert!((w.busy_s - 0.1).abs() < 1e-9, "{}", w.busy_s);
        // Per thread: loaders 40 ms, writers (30 + 20 ms) = 50 ms: the writers are busiest,
        // though each of their stages alone is less busy than the loader.
        let o = s.overlap.unwrap();
        assert_eq!(o.busiest, Pool::Writers);
        assert!(
            (o.ratio - s.elapsed.as_secs_f64() / 0.05).abs() < 1e-6,
            "{}",
            o.ratio
        );
    }

    #[test]
    fn a_pool_sums_what_its_ended_threads_used() {
        let stats = Stats::new();
        let write = stats.recorder(StageId::Write);
        write.record(Duration::from_millis(5));
        // Not yet ended: no CPU figures.
        assert_eq!(stats.snapshot().pools[0].cpu, None);
        let used = |user_ms, system_ms, life_ms| ThreadUse {
            cpu: CpuTime {
                user: Duration::from_millis(user_ms),
                system: Duration::from_millis(system_ms),
            },
            lifetime: Duration::from_millis(life_ms),
            runqueue: Some(Duration::from_millis(life_ms / 10)),
        };
        stats.record_thread_use(Pool::Writers, used(100, 300, 500));
        stats.record_thread_use(Pool::Writers, used(50, 150, 500));
        // Another pool's thread counts toward that pool only.
        stats.record_thread_use(Pool::Loaders, used(900, 0, 1000));
        let s = stats.snapshot();
        let names: Vec<_> = s.pools.iter().map(|p| p.pool).collect();
        assert_eq!(names, [Pool::Writers]);
        let cpu = s.pools[0].cpu.unwrap();
        assert_eq!(cpu.threads, 2);
        assert!((cpu.user_s - 0.15).abs() < 1e-9, "{cpu:?}");
        assert!((cpu.system_s - 0.45).abs() < 1e-9, "{cpu:?}");
        // 600 ms on a CPU of 1000 ms of life, 100 ms waiting for one.
        assert!((cpu.on_cpu_fraction - 0.6).abs() < 1e-9, "{cpu:?}");
        assert!(
            cpu.runqueue_fraction
                .is_some_and(|f| (f - 0.1).abs() < 1e-9),
            "{cpu:?}"
        );
        // One thread that cannot say leaves the pool's figure unknown.
        stats.record_thread_use(
            Pool::Writers,
            ThreadUse {
                runqueue: None,
                ..used(1, 1, 10)
            },
        );
        stats.record_thread_use(Pool::Writers, used(1, 1, 10));
        assert_eq!(
            stats.snapshot().pools[0].cpu.unwrap().runqueue_fraction,
            None
        );
    }

    #[test]
    fn pools_are_indexed_in_their_listed_order() {
        for (i, p) in Pool::ALL.iter().enumerate() {
            assert_eq!(p.index(), i, "{p:?}");
        }
    }

    #[test]
    fn each_stage_counts_toward_the_threads_that_ran_it() {
        let cases = [
            (
                false,
                false,
                vec![
                    (Pool::Loaders, 20),
                    (Pool::RenderWorkers, 10),
                    (Pool::Writers, 30),
                ],
            ),
            (true, false, vec![(Pool::Loaders, 20), (Pool::Writers, 40)]),
            (true, true, vec![(Pool::Shared, 60)]),
            (
                false,
                true,
                vec![(Pool::RenderWorkers, 10), (Pool::Shared, 50)],
            ),
        ];
        for (render_on_writers, shared, expected) in cases {
            let stats = Stats::new();
            let layout = ThreadLayout {
                render_on_writers,
                shared,
            };
            stats.set_layout(layout);
            let (load, compute, encode) = (
                stats.recorder(StageId::ReadDecode),
                stats.recorder(StageId::Compute),
                stats.recorder(StageId::Encode),
            );
            for _ in 0..10 {
                load.record(Duration::from_millis(2));
                compute.record(Duration::from_millis(1));
                encode.record(Duration::from_millis(3));
            }
            let s = stats.snapshot();
            assert_eq!(
                (s.render_on_writers, s.shared_threads),
                (render_on_writers, shared)
            );
            let busy: Vec<_> = s
                .pools
                .iter()
                .map(|p| (p.pool, (p.busy_s * 1e3).round() as u64))
                .collect();
            assert_eq!(busy, expected, "{layout:?}");
        }
    }

    #[test]
    fn the_clock_stops_when_the_run_finishes() {
        let stats = Stats::new();
        std::thread::sleep(Duration::from_millis(5));
        stats.set_finished();
        let at_finish = stats.elapsed();
        assert!(at_finish >= Duration::from_millis(5));
        std::thread::sleep(Duration::from_millis(5));
        stats.set_finished();
        assert_eq!(stats.elapsed(), at_finish);
        assert_eq!(stats.snapshot().elapsed, at_finish);
    }

    #[test]
    fn overlap_is_unknown_before_any_slice() {
        assert!(Stats::new().snapshot().overlap.is_none());
    }

    #[test]
    fn errors_keep_the_most_recent_and_count_all() {
        let stats = Stats::new();
        for i in 0..60 {
            stats.push_error(ErrorEntry {
                path: format!("f{i}").into(),
                stage: "decode".into(),
                reason: "bad".into(),
            });
        }
        let s = stats.snapshot();
        assert_eq!(s.error_count, 60);
        assert_eq!(s.recent_errors.len(), RECENT_ERRORS);
        assert_eq!(s.recent_errors.last().unwrap().path, PathBuf::from("f59"));
    }

    #[test]
    fn frames_expected_uses_the_scan_until_files_are_opened() {
        let stats = Stats::new();
        stats.totals.files_found.store(10, Ordering::Relaxed);
        stats.totals.files_skipped.store(2, Ordering::Relaxed);
        stats.totals.frames_planned.store(3, Ordering::Relaxed);
        assert_eq!(stats.snapshot().frames_expected(), 8);
        stats.totals.frames_planned.store(30, Ordering::Relaxed);
        assert_eq!(stats.snapshot().frames_expected(), 30);
        assert_eq!(StageId::from_name("read+decode"), Some(StageId::ReadDecode));
    }

    #[test]
    fn gauges_are_sampled() {
        let stats = Stats::new();
        stats.add_gauge("slots", Box::new(|| (3, 8)));
        let s = stats.snapshot();
        assert_eq!(s.gauges[0].current, 3);
        assert_eq!(s.gauges[0].capacity, 8);
    }
}
