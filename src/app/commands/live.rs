//! What `listen` and `watch` share: a pipeline fed while it runs, shown live until SIGTERM,
//! Ctrl-C or `q`; then the sources stop, what arrived is finished, the report is written and
//! the process exits 0 (failures of single files are in the summary and the report).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use dicomflow::backend::Backend;
use dicomflow::error::FatalError;
use dicomflow::observe::stats::Stats;
use dicomflow::paths::Escaped;
use dicomflow::source::live::{Done, FeedReceiver, LiveStats};

use crate::app::config::Settings;
use crate::app::report::{self, ProcessTimes, RunFiles};
use crate::app::{dashboard, print, signals};

/// The parts of a live run that differ between commands.
pub struct LiveSources<'a> {
    /// What the sources count into (shown live, and in the report).
    pub stats: Arc<LiveStats>,
    /// Stops the sources and waits until they can submit no more (a listener's associations
    /// finish the message in progress; a watcher stops looking).
    pub stop: Box<dyn FnOnce() + Send + 'a>,
    /// Handles each input's outcome (ends when the pipeline has finished).
    pub on_done: Box<dyn FnOnce(Receiver<Done>) + Send + 'a>,
    /// Closes the feed once the sources have stopped.
    pub close: Box<dyn FnOnce() + Send + 'a>,
}

/// The backend of a live run, opened before its sources start; when the process started and
/// when the backend was ready.
pub struct OpenedBackend {
    backend: Arc<dyn Backend>,
    started: Instant,
    ready_s: f64,
}

/// Opens the backend before the caller starts its sources. With `backend = "cuda"` the first
/// arrivals then do not wait for CUDA's start: on the H200 host, paced at 200 instances/s over
/// one association, a listener that started CUDA (~0.35 s) while the first instances came in
/// had arrival → PNG p99 173–200 ms and max 222–249 ms, against p99 2.6–4.6 ms with the CPU
/// backend (BENCHMARKS.md, "Real-time ingest", session 21); and a backend that cannot start
/// fails before anything is accepted. `auto` returns at once (it renders on the CPU while the
/// GPU starts; no inputs size the job, so it opens the GPU when there is one: a receiver runs
/// long enough to repay it).
pub fn open_backend(settings: &Settings, started: Instant) -> Result<OpenedBackend, FatalError> {
    let backend = dicomflow::pipeline::select_backend(&settings.backend, &settings.job, &[])?;
    // Kept alive to the end: the process exits without tearing the driver down.
    std::mem::forget(backend.clone());
    Ok(OpenedBackend {
        backend,
        started,
        ready_s: started.elapsed().as_secs_f64(),
    })
}

/// Runs the pipeline on `feed` until `stop` is set (by a signal or `q`), showing `live`.
pub fn run(
    settings: &Settings,
    quiet: bool,
    opened: OpenedBackend,
    files: RunFiles,
    stop: Arc<AtomicBool>,
    feed: &FeedReceiver,
    sources: LiveSources,
) -> Result<i32, FatalError> {
    let live = sources.stats.clone();
    let job = &settings.job;
    let OpenedBackend {
        backend,
        started,
        ready_s,
    } = opened;
    let mut process = ProcessTimes {
        backend_ready_s: ready_s,
        ..Default::default()
    };
    let stats = Stats::new();
    let RunFiles {
        report: report_file,
        tracer,
    } = files;
    let display = dashboard::Options::of(settings, quiet, Some(live.clone()));
    // The pipeline's own cancel is never set here: stopping closes the feed instead, so that
    // everything that arrived is rendered. A second signal exits at once (the spool or the
    // folder keeps what was not rendered).
    let pipeline_cancel = Arc::new(AtomicBool::new(false));
    let (done_tx, done_rx) = crossbeam_channel::unbounded();
    let LiveSources {
        stats: _,
        stop: stop_sources,
        on_done,
        close,
    } = sources;
    let result = dashboard::supervise(&display, &stats, &stop, tracer.as_ref(), || {
        let ended = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(move || on_done(done_rx));
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) && !ended.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(50));
                }
                tracing::info!("stopping: no new arrivals; finishing what arrived");
                stop_sources();
                close();
            });
            let r = dicomflow::pipeline::run_live(
                job,
                feed,
                done_tx,
                backend,
                stats.clone(),
                pipeline_cancel,
                tracer.clone(),
            );
            ended.store(true, Ordering::Relaxed);
            r
        })
    })??;
    process.pipeline_done_s = started.elapsed().as_secs_f64();
    let snapshot = stats.snapshot();
    let live_snapshot = live.snapshot();
    // As for `run`: neither file's failure keeps the other from being written, nor the summary
    // from being printed.
    let mut unwritten = Vec::new();
    if let (Some(path), Some(t)) = (&settings.trace, &tracer) {
        if let Err(e) = t.finish() {
            unwritten.push(format!("trace {}: {e}", Escaped(path)));
        }
    }
    if let (Some(path), Some(file)) = (&settings.report, report_file) {
        process.report_s = started.elapsed().as_secs_f64();
        let live = Some(&live_snapshot);
        if let Err(e) =
            report::write_report(file, settings, &result, &snapshot, process, None, live)
        {
            unwritten.push(format!("report {}: {e}", Escaped(path)));
        }
    }
    if !quiet {
        print::err(&report::live_summary(&live_snapshot));
        print::err(&report::summary(&result, &snapshot));
    } else {
        print::err(&report::failures(&result));
    }
    for what in &unwritten {
        print::errln(&format!("dicomflow: error: {what}"));
    }
    // A stop is the normal end of a run without an end: 0, failures of single files being in
    // the summary and the report; 2 when the report or the trace could not be written.
    Ok(if unwritten.is_empty() { 0 } else { 2 })
}

/// Creates the output folder and checks and writes its settings record, before any source
/// starts (a refusal must come before a listener accepts anything).
pub fn open_output(job: &dicomflow::pipeline::options::Job) -> Result<(), FatalError> {
    let out = &job.output.dir;
    std::fs::create_dir_all(out).map_err(|source| FatalError::OutputDir {
        path: out.clone(),
        source,
    })?;
    super::record::live_start(job)
}

/// Installs the signal handlers that set `stop` (SIGINT, SIGTERM; a second one exits at once).
pub fn stop_on_signal() -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    signals::cancel_on_interrupt(stop.clone());
    stop
}
