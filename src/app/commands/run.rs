//! `dicomflow run`: resolve the settings, choose the backend, run the pipeline under the
//! dashboard (or the progress line), then write the trace and the report and print the summary.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use dicomflow::error::FatalError;
use dicomflow::observe::stats::Stats;
use dicomflow::observe::trace::Tracer;
use dicomflow::output::atomic::PendingFile;
use dicomflow::paths::Escaped;

use crate::app::cli::RunArgs;
use crate::app::config::Settings;
use crate::app::report::{self, ProcessTimes};
use crate::app::{dashboard, print, signals};

/// Runs `args`; `started` is when the process started (the report's process times).
///
/// The exit code: 1 when some input failed (also when the run was stopped too), else 130 when
/// it was stopped before every input was done, else 2 when the report or the trace could not
/// be written at the end, else 0. The summary is printed in every case, and the report and
/// trace paths are created before any work, so that a path that cannot be written stops the
/// run at once (exit 2) rather than after it.
pub fn execute(
    args: &RunArgs,
    quiet: bool,
    started: std::time::Instant,
) -> Result<i32, FatalError> {
    let settings = Settings::resolve(args.config.as_deref(), &args.to_raw())?;
    let report_file = match &settings.report {
        Some(path) => Some(PendingFile::create(path, true).map_err(|e| {
            FatalError::Config(format!(
                "--report {}: cannot write there: {e}",
                Escaped(path)
            ))
        })?),
        None => None,
    };
    let tracer = match &settings.trace {
        Some(path) => Some(Arc::new(Tracer::create(path).map_err(|e| {
            FatalError::Config(format!(
                "--trace {}: cannot write there: {e}",
                Escaped(path)
            ))
        })?)),
        None => None,
    };
    let backend =
        dicomflow::pipeline::select_backend(&settings.backend, &settings.job, &args.inputs)?;
    // Kept alive to the end: the process exits without tearing the driver down.
    std::mem::forget(backend.clone());
    let mut process = ProcessTimes {
        backend_ready_s: started.elapsed().as_secs_f64(),
        ..Default::default()
    };
    let stats = Stats::new();
    let cancel = Arc::new(AtomicBool::new(false));
    signals::cancel_on_interrupt(cancel.clone());
    let display = dashboard::Options {
        display: dashboard::Display::choose(
            settings.dashboard.tui,
            quiet,
            std::io::IsTerminal::is_terminal(&std::io::stderr()),
        ),
        tick: std::time::Duration::from_millis(settings.dashboard.tick_ms),
        log_file: (settings.dashboard.log_file.clone())
            .unwrap_or_else(|| settings.job.output.dir.join("dicomflow.log")),
    };
    let result = dashboard::supervise(&display, &stats, &cancel, tracer.as_ref(), || {
        dicomflow::pipeline::run(
            &settings.job,
            &args.inputs,
            backend,
            stats.clone(),
            cancel.clone(),
            tracer.clone(),
        )
    })??;
    process.pipeline_done_s = started.elapsed().as_secs_f64();
    let snapshot = stats.snapshot();
    // Neither file's failure keeps the other from being written, nor the summary from being
    // printed: the run happened, and what it did must be said.
    let mut unwritten = Vec::new();
    if let (Some(path), Some(t)) = (&settings.trace, &tracer) {
        if let Err(e) = t.finish() {
            unwritten.push(format!("trace {}: {e}", Escaped(path)));
        }
    }
    if let (Some(path), Some(file)) = (&settings.report, report_file) {
        process.report_s = started.elapsed().as_secs_f64();
        if let Err(e) = report::write_report(file, &settings, &result, &snapshot, process) {
            unwritten.push(format!("report {}: {e}", Escaped(path)));
        }
    }
    if !quiet {
        print::err(&report::summary(&result, &snapshot));
    } else {
        // -q keeps errors: the failed files, one line each.
        print::err(&report::failures(&result));
    }
    for what in &unwritten {
        print::errln(&format!("dicomflow: error: {what}"));
    }
    let code = result.exit_code();
    Ok(if code == 0 && !unwritten.is_empty() {
        2
    } else {
        code
    })
}
