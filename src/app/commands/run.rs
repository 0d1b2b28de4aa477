//! `dicomflow run`: resolve the settings, choose the backend, run the pipeline under the
//! dashboard (or the progress line), then write the trace and the report and print the summary.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use dicomflow::error::FatalError;
use dicomflow::observe::stats::Stats;
use dicomflow::observe::trace::Tracer;

use crate::app::cli::RunArgs;
use crate::app::config::Settings;
use crate::app::report::{self, ProcessTimes};
use crate::app::{dashboard, signals};

/// Runs `args`; `started` is when the process started (the report's process times).
pub fn execute(
    args: &RunArgs,
    quiet: bool,
    started: std::time::Instant,
) -> Result<i32, FatalError> {
    let settings = Settings::resolve(args.config.as_deref(), &args.to_raw())?;
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
    let tracer = settings.trace.as_ref().map(|_| Arc::new(Tracer::new()));
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
    if let (Some(path), Some(t)) = (&settings.trace, &tracer) {
        t.write(path)
            .map_err(|e| FatalError::Other(format!("trace {}: {e}", path.display())))?;
    }
    if let Some(path) = &settings.report {
        process.report_s = started.elapsed().as_secs_f64();
        report::write_report(path, &settings, &result, &snapshot, process)
            .map_err(|e| FatalError::Other(format!("report {}: {e}", path.display())))?;
    }
    if !quiet {
        eprint!("{}", report::summary(&result, &snapshot));
    } else {
        // -q keeps errors: the failed files, one line each.
        eprint!("{}", report::failures(&result));
    }
    Ok(result.exit_code())
}
