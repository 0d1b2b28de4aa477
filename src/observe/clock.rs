//! A stage thread's [`StageClock`]: the one place where it reports what it measured. Each
//! interval goes in once and feeds the stage's histogram in [`stats`](super::stats) and, when
//! tracing, its span in [`trace`](super::trace), from the same two instants, so the report,
//! the dashboard and the timeline cannot disagree about a slice.

use std::cell::OnceCell;
use std::fmt::Display;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::stats::{Recorder, StageId, Stats};
use super::trace::Tracer;

/// What one stage thread records: a histogram of its own for each stage it runs (and of the
/// end-to-end latency when it finishes frames), and the run's tracer when there is one.
///
/// Made once per thread, on that thread, before its first slice: making it counts the thread
/// as one of the workers of each of its stages (the busy fractions divide by them), whether or
/// not a slice ever takes that stage.
pub struct StageClock {
    stages: [Option<Recorder>; StageId::ALL.len()],
    latency: Option<Recorder>,
    tracer: Option<Arc<Tracer>>,
    /// The thread's track in the trace: its name, looked up at the first span (the clock
    /// stays on the thread that made it) instead of at each one.
    track: OnceCell<String>,
}

/// One piece of a stage's interval that is not all the stage's (a loader's wait for a free
/// slot falls between two pieces): it counts toward the stage's time, and has a span when it
/// has a label.
#[derive(Clone, Copy)]
pub struct Piece<'a> {
    pub start: Instant,
    pub end: Instant,
    pub label: Option<&'a dyn Display>,
}

impl<'a> Piece<'a> {
    /// A piece of the stage's time with no span of its own.
    pub fn new(start: Instant, end: Instant) -> Piece<'a> {
        Piece {
            start,
            end,
            label: None,
        }
    }

    /// This piece, with a span labelled `label`.
    pub fn traced(self, label: &'a dyn Display) -> Piece<'a> {
        Piece {
            label: Some(label),
            ..self
        }
    }
}

/// Stages that another clock measured inside one wall-clock interval of this thread (a GPU
/// worker's CUDA events: transfer in, decode, compute, encode, transfer out). Each measured
/// time goes to its stage's histogram as it is; the spans are laid end to end in the
/// interval, `leading` forward from its start, `trailing` backward from its end, and `middle`
/// over what is left between them. A leading or trailing stage that took no time (the CPU has
/// no transfers) is neither recorded nor drawn; `middle` always is.
pub struct Parts<'a> {
    pub leading: &'a [(StageId, Duration)],
    pub middle: (StageId, Duration),
    pub trailing: &'a [(StageId, Duration)],
}

impl StageClock {
    /// A clock for the calling thread that records `stages`, tracing to `tracer` when given.
    pub fn new(stats: &Stats, tracer: Option<Arc<Tracer>>, stages: &[StageId]) -> StageClock {
        let mut recorders: [Option<Recorder>; StageId::ALL.len()] = Default::default();
        for &stage in stages {
            recorders[stage.index()].get_or_insert_with(|| stats.recorder(stage));
        }
        StageClock {
            stages: recorders,
            latency: None,
            tracer,
            track: OnceCell::new(),
        }
    }

    /// This clock, recording the end-to-end latency of the frames its thread finishes too.
    pub fn with_latency(mut self, stats: &Stats) -> StageClock {
        self.latency = Some(stats.latency_recorder());
        self
    }

    /// Whether spans are recorded: a label worth keeping (one that travels with the frame)
    /// is only built then.
    pub fn is_tracing(&self) -> bool {
        self.tracer.is_some()
    }

    /// Records that `stage` took slice `label` from `start` to `end`: that time in its
    /// histogram and, when tracing, the span (`label` is only formatted then).
    pub fn record(&self, stage: StageId, label: impl Display, start: Instant, end: Instant) {
        self.time(stage, end.saturating_duration_since(start));
        self.span(stage, label, start, end);
    }

    /// Records `took` in `stage`'s histogram alone, for work with no interval on the timeline.
    pub fn record_time(&self, stage: StageId, took: Duration) {
        self.time(stage, took);
    }

    /// Records one slice of `stage` made of `pieces`: their summed time in its histogram and,
    /// when tracing, a span for each labelled one.
    pub fn record_pieces(&self, stage: StageId, pieces: &[Piece]) {
        let took = pieces
            .iter()
            .map(|p| p.end.saturating_duration_since(p.start))
            .sum();
        self.time(stage, took);
        for p in pieces {
            if let Some(label) = p.label {
                self.span(stage, label, p.start, p.end);
            }
        }
    }

    /// Records the `parts` of slice `label` measured within `start..end` (see [`Parts`]).
    pub fn record_parts(&self, label: impl Display, start: Instant, end: Instant, parts: Parts) {
        let measured = |&&(_, took): &&(StageId, Duration)| !took.is_zero();
        for &(stage, took) in parts.leading.iter().filter(measured) {
            self.time(stage, took);
        }
        self.time(parts.middle.0, parts.middle.1);
        for &(stage, took) in parts.trailing.iter().filter(measured) {
            self.time(stage, took);
        }
        if self.tracer.is_none() {
            return;
        }
        // Forward from the start, clamped to the end.
        let mut low = start;
        for &(stage, took) in parts.leading.iter().filter(measured) {
            let next = (low + took).min(end);
            self.span(stage, &label, low, next);
            low = next;
        }
        // Backward from the end, clamped to where the leading parts stopped: a trailing part
        // starts where the parts after it, laid from the end, leave off.
        let from_end = |after: Duration| end.checked_sub(after).unwrap_or(low).max(low);
        let mut after: Duration = parts.trailing.iter().map(|&(_, took)| took).sum();
        self.span(parts.middle.0, &label, low, from_end(after));
        for &(stage, took) in parts.trailing {
            let part_start = from_end(after);
            after = after.saturating_sub(took);
            if !took.is_zero() {
                self.span(stage, &label, part_start, from_end(after));
            }
        }
    }

    /// Records a frame's end-to-end latency (`started` → `end`) and returns it, for the
    /// frame's outcome.
    pub fn latency(&self, started: Instant, end: Instant) -> Duration {
        let took = end.saturating_duration_since(started);
        debug_assert!(self.latency.is_some(), "a clock without latency");
        if let Some(rec) = &self.latency {
            rec.record(took);
        }
        took
    }

    fn time(&self, stage: StageId, took: Duration) {
        let rec = self.stages[stage.index()].as_ref();
        // Each thread says which stages it runs when it makes its clock (they count it as a
        // worker from the start): one that records another is a mistake in the stage's code.
        debug_assert!(
            rec.is_some(),
            "{} is not one of this clock's stages",
            stage.name()
        );
        if let Some(rec) = rec {
            rec.record(took);
        }
    }

    fn span(&self, stage: StageId, label: impl Display, start: Instant, end: Instant) {
        if let Some(tracer) = &self.tracer {
            let track = self
                .track
                .get_or_init(|| std::thread::current().name().unwrap_or("main").to_string());
            tracer.span_on(track, stage, label, start, end);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::fmt;

    /// A label that counts how often it is formatted.
    struct Counted<'a>(&'a Cell<usize>);

    impl Display for Counted<'_> {
        fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
            self.0.set(self.0.get() + 1);
            f.write_str("counted#1")
        }
    }

    /// The spans of a finished trace: (name, track, start µs, duration µs), in file order.
    fn spans(path: &std::path::Path) -> Vec<(String, String, f64, f64)> {
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        let events = v["traceEvents"].as_array().unwrap();
        let track = |tid: &serde_json::Value| {
            events
                .iter()
                .find(|e| e["name"] == "thread_name" && e["tid"] == *tid)
                .map(|e| e["args"]["name"].as_str().unwrap().to_string())
                .unwrap()
        };
        events
            .iter()
            .filter(|e| e["ph"] == "X")
            .map(|e| {
                assert_eq!(
                    e["name"].as_str().unwrap(),
                    format!(
                        "{} {}",
                        e["cat"].as_str().unwrap(),
                        e["args"]["slice"].as_str().unwrap()
                    )
                );
                (
                    e["name"].as_str().unwrap().to_string(),
                    track(&e["tid"]),
                    e["ts"].as_f64().unwrap(),
                    e["dur"].as_f64().unwrap(),
                )
            })
            .collect()
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-3
    }

    #[test]
    fn one_call_feeds_the_histogram_and_the_span_with_the_same_interval() {
        let dir = crate::scratch_dir("clock");
        let path = dir.join("t.json");
        let stats = Stats::new();
        let tracer = Arc::new(Tracer::create(&path).unwrap());
        let clock = StageClock::new(
            &stats,
            Some(tracer.clone()),
            &[StageId::Encode, StageId::Write],
        )
        .with_latency(&stats);
        assert!(clock.is_tracing());
        let t0 = Instant::now();
        clock.record(StageId::Encode, "a.dcm#1", t0, t0 + ms(3));
        clock.record(StageId::Write, "a.dcm#1", t0 + ms(3), t0 + ms(5));
        assert_eq!(clock.latency(t0 - ms(10), t0 + ms(5)), ms(15));
        tracer.finish().unwrap();

        let s = stats.snapshot();
        let encode = s.stage(StageId::Encode).unwrap();
        assert_eq!((encode.count, encode.workers), (1, 1));
        assert!(close(encode.busy_s, 0.003), "{}", encode.busy_s);
        // The histogram keeps two significant digits.
        assert!((encode.max_ms - 3.0).abs() < 0.03, "{}", encode.max_ms);
        assert!(close(s.stage(StageId::Write).unwrap().busy_s, 0.002));
        assert_eq!(s.latency.count, 1);
        assert!(close(s.latency.busy_s, 0.015), "{}", s.latency.busy_s);

        let spans = spans(&path);
        let me = std::thread::current().name().unwrap_or("main").to_string();
        assert_eq!(spans.len(), 2, "{spans:?}");
        assert_eq!((spans[0].0.as_str(), &spans[0].1), ("encode a.dcm#1", &me));
        assert_eq!(spans[1].0, "write a.dcm#1");
        // The span lasts what the histogram got, and the next starts where it ends.
        assert!(close(spans[0].3, 3000.0), "{spans:?}");
        assert!(close(spans[1].2 - spans[0].2, 3000.0), "{spans:?}");
        assert!(close(spans[1].3, 2000.0), "{spans:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn without_a_tracer_nothing_is_traced_and_no_label_is_formatted() {
        let stats = Stats::new();
        let clock = StageClock::new(
            &stats,
            None,
            &[StageId::ReadDecode, StageId::TransferIn, StageId::Compute],
        );
        assert!(!clock.is_tracing());
        let formatted = Cell::new(0);
        let label = Counted(&formatted);
        let t0 = Instant::now();
        clock.record(StageId::Compute, &label, t0, t0 + ms(2));
        clock.record_pieces(
            StageId::ReadDecode,
            &[Piece::new(t0, t0 + ms(1)).traced(&label)],
        );
        clock.record_parts(
            &label,
            t0,
            t0 + ms(4),
            Parts {
                leading: &[(StageId::TransferIn, ms(1))],
                middle: (StageId::Compute, ms(3)),
                trailing: &[],
            },
        );
        assert_eq!(formatted.get(), 0);
        // The histograms still got every time.
        let s = stats.snapshot();
        assert_eq!(s.stage(StageId::Compute).unwrap().count, 2);
        assert_eq!(s.stage(StageId::ReadDecode).unwrap().count, 1);
        assert_eq!(s.stage(StageId::TransferIn).unwrap().count, 1);
    }

    #[test]
    fn parts_are_laid_end_to_end_and_each_counted_as_measured() {
        let dir = crate::scratch_dir("clock-parts");
        let path = dir.join("t.json");
        let stats = Stats::new();
        let tracer = Arc::new(Tracer::create(&path).unwrap());
        let render = [
            StageId::TransferIn,
            StageId::GpuDecode,
            StageId::Compute,
            StageId::GpuEncode,
            StageId::TransferOut,
        ];
        let clock = StageClock::new(&stats, Some(tracer.clone()), &render);
        let formatted = Cell::new(0);
        let t0 = Instant::now();
        // A GPU frame: 1 ms in, no decode, 5 ms of kernels, 2 ms of encoding, 1 ms out, in a
        // 10 ms call: the compute span takes the rest (6 ms).
        clock.record_parts(
            Counted(&formatted),
            t0,
            t0 + ms(10),
            Parts {
                leading: &[(StageId::TransferIn, ms(1)), (StageId::GpuDecode, ms(0))],
                middle: (StageId::Compute, ms(5)),
                trailing: &[(StageId::GpuEncode, ms(2)), (StageId::TransferOut, ms(1))],
            },
        );
        // A CPU frame: compute only, over the whole call.
        clock.record_parts(
            "cpu#1",
            t0 + ms(20),
            t0 + ms(24),
            Parts {
                leading: &[(StageId::TransferIn, ms(0))],
                middle: (StageId::Compute, ms(4)),
                trailing: &[(StageId::TransferOut, ms(0))],
            },
        );
        // Parts that measured more than the call took are clamped into it.
        clock.record_parts(
            "long#1",
            t0 + ms(30),
            t0 + ms(32),
            Parts {
                leading: &[(StageId::TransferIn, ms(3))],
                middle: (StageId::Compute, ms(1)),
                trailing: &[(StageId::TransferOut, ms(1))],
            },
        );
        tracer.finish().unwrap();
        // One label formatted per span, not more.
        assert_eq!(formatted.get(), 4);

        let s = stats.snapshot();
        let count = |id| s.stage(id).unwrap().count;
        assert_eq!(
            render.map(count),
            [2, 0, 3, 1, 2],
            "zero parts are not counted, the middle always is"
        );
        let compute = s.stage(StageId::Compute).unwrap();
        assert!(
            close(compute.busy_s, 0.010),
            "measured, not the span: {}",
            compute.busy_s
        );
        assert_eq!(compute.workers, 1);
        assert_eq!(s.stage(StageId::GpuDecode).unwrap().workers, 1);

        let spans = spans(&path);
        let base = spans[0].2;
        let got: Vec<_> = spans
            .iter()
            .map(|(name, _, ts, dur)| (name.as_str(), ((ts - base) / 1e3, dur / 1e3)))
            .collect();
        let expected = [
            ("transfer in counted#1", (0.0, 1.0)),
            ("compute counted#1", (1.0, 6.0)),
            ("gpu encode counted#1", (7.0, 2.0)),
            ("transfer out counted#1", (9.0, 1.0)),
            ("compute cpu#1", (20.0, 4.0)),
            ("transfer in long#1", (30.0, 2.0)),
            ("compute long#1", (32.0, 0.0)),
            ("transfer out long#1", (32.0, 0.0)),
        ];
        assert_eq!(got.len(), expected.len(), "{got:?}");
        for ((name, (at, dur)), (want, (want_at, want_dur))) in got.iter().zip(expected) {
            assert_eq!(*name, want);
            assert!(close(*at, want_at) && close(*dur, want_dur), "{got:?}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn pieces_add_up_and_only_labelled_ones_are_drawn() {
        let dir = crate::scratch_dir("clock-pieces");
        let path = dir.join("t.json");
        let stats = Stats::new();
        let tracer = Arc::new(Tracer::create(&path).unwrap());
        let clock = StageClock::new(&stats, Some(tracer.clone()), &[StageId::ReadDecode]);
        let t0 = Instant::now();
        // 2 ms of header, 5 ms waiting for a slot, 3 ms of reading.
        let header = "a.dcm header";
        clock.record_pieces(
            StageId::ReadDecode,
            &[
                Piece::new(t0, t0 + ms(2)).traced(&header),
                Piece::new(t0 + ms(7), t0 + ms(10)).traced(&"a.dcm#1"),
            ],
        );
        // A later frame: its plan has no span, its read has.
        clock.record_pieces(
            StageId::ReadDecode,
            &[
                Piece::new(t0 + ms(10), t0 + ms(11)),
                Piece::new(t0 + ms(11), t0 + ms(12)).traced(&"a.dcm#2"),
            ],
        );
        tracer.finish().unwrap();
        let s = stats.snapshot();
        let load = s.stage(StageId::ReadDecode).unwrap();
        assert_eq!(load.count, 2);
        assert!(close(load.busy_s, 0.007), "{}", load.busy_s);
        let names: Vec<_> = spans(&path).into_iter().map(|s| s.0).collect();
        assert_eq!(
            names,
            [
                "read+decode a.dcm header",
                "read+decode a.dcm#1",
                "read+decode a.dcm#2"
            ]
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_clock_counts_its_thread_as_a_worker_of_each_stage() {
        let stats = Stats::new();
        let _a = StageClock::new(&stats, None, &[StageId::Encode, StageId::Write]);
        let _b = StageClock::new(&stats, None, &[StageId::Encode, StageId::Encode]);
        let s = stats.snapshot();
        assert_eq!(s.stage(StageId::Encode).unwrap().workers, 2);
        assert_eq!(s.stage(StageId::Write).unwrap().workers, 1);
        assert_eq!(s.latency.workers, 0);
    }
}
