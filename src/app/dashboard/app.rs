//! The dashboard's state: what the drawing code reads. It is built only from successive
//! [`Snapshot`]s of the run statistics (sampled at each tick by the display thread), so the
//! same figures feed the dashboard, the progress line and the end-of-run summary. Recent
//! rates (throughput, busy %) come from the difference between snapshots over a short window;
//! before there is a window, the run-so-far figures of the snapshot are used.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::time::Duration;

use dicomflow::observe::stats::{Snapshot, StageId};
use dicomflow::source::live::LiveSnapshot;

/// Length of the window for recent rates, seconds.
const WINDOW_S: f64 = 2.0;
/// Shortest window worth computing a rate from, seconds.
const MIN_WINDOW_S: f64 = 0.25;
/// A point of the throughput sparkline every this many seconds.
const SPARK_STEP_S: f64 = 0.25;
/// Points kept for the sparkline.
const SPARK_POINTS: usize = 400;

const STAGES: usize = StageId::ALL.len();

#[derive(Debug, Clone, Copy)]
struct Sample {
    t: f64,
    counts: [u64; STAGES],
    busy_s: [f64; STAGES],
    finished: u64,
}

impl Sample {
    fn of(s: &Snapshot) -> Sample {
        let mut counts = [0; STAGES];
        let mut busy_s = [0.0; STAGES];
        for (i, st) in s.stages.iter().take(STAGES).enumerate() {
            counts[i] = st.count;
            busy_s[i] = st.busy_s;
        }
        Sample {
            t: s.elapsed.as_secs_f64(),
            counts,
            busy_s,
            finished: s.frames_finished(),
        }
    }
}

/// Recent rates from a sliding window of samples.
#[derive(Debug, Default)]
pub struct Rates {
    samples: VecDeque<Sample>,
}

impl Rates {
    /// Adds the sample of a snapshot; drops those older than the window.
    pub fn push(&mut self, s: &Snapshot) {
        let sample = Sample::of(s);
        self.samples.push_back(sample);
        while self.samples.len() > 2
            && self
                .samples
                .get(1)
                .is_some_and(|x| sample.t - x.t >= WINDOW_S)
        {
            self.samples.pop_front();
        }
    }

    fn window(&self) -> Option<(&Sample, &Sample, f64)> {
        let (a, b) = (self.samples.front()?, self.samples.back()?);
        let dt = b.t - a.t;
        (dt >= MIN_WINDOW_S).then_some((a, b, dt))
    }

    /// Frames finished per second, recently (or over the run so far).
    pub fn frames_per_s(&self, s: &Snapshot) -> f64 {
        match self.window() {
            Some((a, b, dt)) => (b.finished - a.finished.min(b.finished)) as f64 / dt,
            None => s.frames_finished() as f64 / s.elapsed.as_secs_f64().max(1e-9),
        }
    }

    /// Slices per second through stage `i`, recently (or over the run so far).
    pub fn stage_per_s(&self, s: &Snapshot, i: usize) -> f64 {
        match self.window() {
            Some((a, b, dt)) => (b.counts[i] - a.counts[i].min(b.counts[i])) as f64 / dt,
            None => s.stages.get(i).map(|x| x.throughput).unwrap_or(0.0),
        }
    }

    /// Busy fraction of stage `i` (0..=1), recently (or over the run so far).
    pub fn stage_busy(&self, s: &Snapshot, i: usize) -> f64 {
        let Some(st) = s.stages.get(i) else {
            return 0.0;
        };
        match self.window() {
            Some((a, b, dt)) if st.workers > 0 => {
                ((b.busy_s[i] - a.busy_s[i]).max(0.0) / (dt * st.workers as f64)).min(1.0)
            }
            _ => st.busy_fraction,
        }
    }
}

/// Where the run stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunState {
    Running,
    Paused,
    /// q or Ctrl-C: in-flight slices are being finished.
    Finishing,
    Done,
}

impl RunState {
    pub fn label(self) -> &'static str {
        match self {
            RunState::Running => "RUNNING",
            RunState::Paused => "PAUSED (p resumes)",
            RunState::Finishing => "FINISHING in-flight slices",
            RunState::Done => "DONE",
        }
    }
}

/// One row of the stage table.
#[derive(Debug, Clone)]
pub struct StageRow {
    pub name: &'static str,
    pub count: u64,
    pub per_s: f64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// 0..=1.
    pub busy: f64,
    /// False for stages this backend does not have (no recorder, nothing counted).
    pub present: bool,
    pub bottleneck: bool,
}

/// Overall progress.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    pub finished: u64,
    pub expected: u64,
    pub per_s: f64,
    pub eta: Option<Duration>,
    pub errors: u64,
    /// The scan goes on: the total so far is only what it found, so neither it nor an ETA is
    /// shown.
    pub scanning: bool,
}

impl Progress {
    /// Figures of a snapshot with the recent rate from `rates`.
    pub fn of(s: &Snapshot, rates: &Rates) -> Progress {
        let finished = s.frames_finished();
        let expected = s.frames_expected();
        let per_s = rates.frames_per_s(s);
        let remaining = expected.saturating_sub(finished);
        let scanning = !s.scan_done && !s.finished;
        let eta = if scanning {
            None
        } else if remaining == 0 {
            (expected > 0).then_some(Duration::ZERO)
        } else if per_s > 0.0 {
            Some(Duration::from_secs_f64(
                (remaining as f64 / per_s).min(360_000.0),
            ))
        } else {
            None
        };
        Progress {
            finished,
            expected,
            per_s,
            eta,
            errors: s.error_count,
            scanning,
        }
    }

    /// 0..=1.
    pub fn ratio(&self) -> f64 {
        if self.expected == 0 {
            0.0
        } else {
            (self.finished as f64 / self.expected as f64).min(1.0)
        }
    }

    /// "frames 120/200 (60%) 340 fr/s ETA 0:00:01 errors 0": the plain progress line
    /// ("frames 120/scanning… 340 fr/s ETA - errors 0" while the scan goes on).
    pub fn line(&self) -> String {
        format!(
            "frames {} {} fr/s ETA {} errors {}",
            self.done_of_total(),
            rate(self.per_s),
            self.eta.map(eta).unwrap_or_else(|| "-".into()),
            self.errors
        )
    }

    /// "120/200 (60%)", or "120/scanning…" before the total is known.
    pub fn done_of_total(&self) -> String {
        if self.scanning {
            format!("{}/scanning…", self.finished)
        } else {
            format!(
                "{}/{} ({:.0}%)",
                self.finished,
                self.expected,
                self.ratio() * 100.0
            )
        }
    }
}

/// H:MM:SS (whole seconds elapsed).
pub fn clock(d: Duration) -> String {
    let s = d.as_secs();
    format!("{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60)
}

/// H:MM:SS for a time left, rounded up (0:00:00 only when nothing is left).
pub fn eta(d: Duration) -> String {
    clock(Duration::from_secs(d.as_secs_f64().ceil() as u64))
}

/// A rate with sensible precision.
pub fn rate(x: f64) -> String {
    if x < 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.0}")
    }
}

/// Milliseconds with sensible precision.
pub fn ms(x: f64) -> String {
    if x < 10.0 {
        format!("{x:.2}")
    } else if x < 100.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.0}")
    }
}

/// A run whose inputs arrive while it goes on (`listen`, `watch`): it has no end and no ETA;
/// arrivals, their rate, latency, associations, senders and what waits are shown instead.
#[derive(Debug, Default)]
pub struct Live {
    pub snap: LiveSnapshot,
    /// (seconds, arrivals) over the last [`WINDOW_S`].
    samples: VecDeque<(f64, u64)>,
}

impl Live {
    /// Takes a new live snapshot into account.
    pub fn update(&mut self, snap: LiveSnapshot) {
        self.samples.push_back((snap.elapsed_s, snap.arrivals));
        while self.samples.len() > 2
            && self
                .samples
                .get(1)
                .is_some_and(|x| snap.elapsed_s - x.0 >= WINDOW_S)
        {
            self.samples.pop_front();
        }
        self.snap = snap;
    }

    /// Arrivals per second, recently (or over the run so far).
    pub fn arrivals_per_s(&self) -> f64 {
        match (self.samples.front(), self.samples.back()) {
            (Some(a), Some(b)) if b.0 - a.0 >= MIN_WINDOW_S => {
                b.1.saturating_sub(a.1) as f64 / (b.0 - a.0)
            }
            _ => self.snap.arrivals as f64 / self.snap.elapsed_s.max(1e-9),
        }
    }

    /// "arrivals 120 (35/s) rendered 118 waiting 2 latency 4.1/6.0/9.2 ms assoc 2 refused 0
    /// errors 0" (latency: arrival → output p50/p95/p99): the progress line of a live run.
    pub fn line(&self, errors: u64) -> String {
        let s = &self.snap;
        let latency = match s.latency_ms {
            Some([p50, p95, p99, _]) => format!("{}/{}/{} ms", ms(p50), ms(p95), ms(p99)),
            None => "-".into(),
        };
        format!(
            "arrivals {} ({}/s) rendered {} waiting {} latency {} assoc {} refused {} errors {}",
            s.arrivals,
            rate(self.arrivals_per_s()),
            s.rendered,
            s.pending,
            latency,
            s.associations_open,
            s.refused + s.associations_refused,
            errors
        )
    }
}

/// Everything the drawing code needs.
pub struct App {
    pub snap: Snapshot,
    rates: Rates,
    spark: VecDeque<u64>,
    last_spark_t: f64,
    /// The help overlay is shown.
    pub help: bool,
    /// q / Ctrl-C was pressed: in-flight slices are being finished.
    pub cancelling: bool,
    /// Where the logs go while the dashboard owns the terminal.
    pub log_path: Option<PathBuf>,
    /// The live view, for runs without an end.
    pub live: Option<Live>,
}

impl App {
    pub fn new(snap: Snapshot, log_path: Option<PathBuf>) -> App {
        let mut app = App {
            snap: snap.clone(),
            rates: Rates::default(),
            spark: VecDeque::new(),
            last_spark_t: f64::NEG_INFINITY,
            help: false,
            cancelling: false,
            log_path,
            live: None,
        };
        app.update(snap);
        app
    }

    /// Takes a new snapshot into account.
    pub fn update(&mut self, snap: Snapshot) {
        self.rates.push(&snap);
        let t = snap.elapsed.as_secs_f64();
        self.snap = snap;
        if t - self.last_spark_t >= SPARK_STEP_S {
            self.last_spark_t = t;
            let r = self.rates.frames_per_s(&self.snap).round() as u64;
            self.spark.push_back(r);
            if self.spark.len() > SPARK_POINTS {
                self.spark.pop_front();
            }
        }
    }

    pub fn state(&self) -> RunState {
        if self.snap.finished {
            RunState::Done
        } else if self.cancelling {
            RunState::Finishing
        } else if self.snap.paused {
            RunState::Paused
        } else {
            RunState::Running
        }
    }

    /// The stage table, with the bottleneck (highest recent busy % among stages that did
    /// work, scan excepted) marked. The GPU encode row appears only once the GPU encodes
    /// (small terminals keep their rows for the stages every run has).
    pub fn stage_rows(&self) -> Vec<StageRow> {
        let s = &self.snap;
        let mut rows: Vec<StageRow> = StageId::ALL
            .iter()
            .enumerate()
            .filter(|(i, id)| {
                **id != StageId::GpuEncode || s.stages.get(*i).is_some_and(|st| st.count > 0)
            })
            .map(|(i, id)| {
                let st = s.stages.get(i).cloned().unwrap_or_default();
                StageRow {
                    name: id.name(),
                    count: st.count,
                    per_s: self.rates.stage_per_s(s, i),
                    p50_ms: st.p50_ms,
                    p95_ms: st.p95_ms,
                    p99_ms: st.p99_ms,
                    max_ms: st.max_ms,
                    busy: self.rates.stage_busy(s, i),
                    present: st.count > 0 || (st.workers > 0 && !id.is_optional()),
                    bottleneck: false,
                }
            })
            // The GPU decode row only once compressed frames were decoded on the GPU: most
            // runs have none, and a small terminal needs the line.
            .filter(|r| r.name != StageId::GpuDecode.name() || r.count > 0)
            .collect();
        let best = rows
            .iter()
            .enumerate()
            .filter(|(i, r)| r.count > 0 && *i != StageId::Scan as usize && r.busy > 0.0)
            .max_by(|a, b| a.1.busy.total_cmp(&b.1.busy))
            .map(|(i, _)| i);
        if let Some(i) = best {
            rows[i].bottleneck = true;
        }
        rows
    }

    pub fn progress(&self) -> Progress {
        Progress::of(&self.snap, &self.rates)
    }

    /// Sparkline points, oldest first.
    pub fn spark(&self) -> &VecDeque<u64> {
        &self.spark
    }

    /// Share of host→device, kernel, GPU encode and device→host time in rendering, percent.
    pub fn gpu_split(&self) -> Option<[f64; 4]> {
        let busy = |id: StageId| self.snap.stage(id).map(|s| s.busy_s).unwrap_or(0.0);
        let parts = [
            busy(StageId::TransferIn),
            busy(StageId::Compute),
            busy(StageId::GpuEncode),
            busy(StageId::TransferOut),
        ];
        let total: f64 = parts.iter().sum();
        (total > 0.0).then(|| parts.map(|p| p / total * 100.0))
    }
}
