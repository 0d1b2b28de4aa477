//! `dicomflow run`: resolve the settings, choose the backend, run the pipeline under the
//! dashboard (or the progress line), then write the trace and the report and print the summary.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use dicomflow::error::FatalError;
use dicomflow::observe::stats::Stats;
use dicomflow::observe::trace::Tracer;
use dicomflow::source::manifest::ManifestPlan;
use dicomflow::source::shard::{Shard, ShardBy, ShardRequest};
use dicomflow::source::Sources;

use crate::app::cli::RunArgs;
use crate::app::config::Settings;
use crate::app::report::{self, ProcessTimes, ShardSection};
use crate::app::{dashboard, signals};

/// Where a shard's report goes unless `--report` says otherwise, under the output folder.
pub const SHARD_REPORTS: &str = ".dicomflow/reports";

/// What the run reads, from `--manifest`, `--shard`, `--shard-count` and `--shard-by`.
fn sources(args: &RunArgs) -> Result<Sources, FatalError> {
    let config = |e: &dyn std::fmt::Display| FatalError::Config(e.to_string());
    let shard = match &args.shard {
        Some(spec) => {
            let request: ShardRequest = spec.parse().map_err(|e| config(&e))?;
            let env = |k: &str| std::env::var(k).ok();
            Some(
                request
                    .resolve(args.shard_count, &env)
                    .map_err(|e| config(&e))?,
            )
        }
        None => None,
    };
    let by: ShardBy = match &args.shard_by {
        Some(b) => b.parse().map_err(|e| config(&e))?,
        None => ShardBy::Path,
    };
    Ok(match &args.manifest {
        Some(path) => {
            let shard = shard.unwrap_or(Shard { index: 0, count: 1 });
            let plan = ManifestPlan::compute(path, shard.count, by)
                .map_err(|e| FatalError::Other(format!("--manifest: {e}")))?;
            Sources::Manifest {
                plan: Arc::new(plan),
                index: shard.index,
            }
        }
        None => Sources::Walk {
            inputs: args.inputs.clone(),
            shard: shard.map(|s| (s, by)),
        },
    })
}

fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Runs `args`; `started` is when the process started (the report's process times).
pub fn execute(
    args: &RunArgs,
    quiet: bool,
    started: std::time::Instant,
) -> Result<i32, FatalError> {
    let started_at = SystemTime::now()
        .checked_sub(started.elapsed())
        .unwrap_or(UNIX_EPOCH);
    let settings = Settings::resolve(args.job.config.as_deref(), &args.to_raw())?;
    let sources = sources(args)?;
    // A shard's report is written whether asked for or not: the merge needs every shard's.
    let report_path: Option<PathBuf> = settings.report.clone().or_else(|| {
        let shard = sources.shard().filter(|_| args.shard.is_some())?;
        Some(
            settings
                .job
                .output
                .dir
                .join(SHARD_REPORTS)
                .join(shard.report_name()),
        )
    });
    if let Some(s) = sources.shard().filter(|_| args.shard.is_some()) {
        tracing::info!(shard = %s, "rendering shard {} of {}", s.index, s.count);
    }
    let backend =
        dicomflow::pipeline::select_backend_for(&settings.backend, &settings.job, &sources)?;
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
    let display = dashboard::Options::of(&settings, quiet, None);
    let result = dashboard::supervise(&display, &stats, &cancel, tracer.as_ref(), || {
        dicomflow::pipeline::run_sources(
            &settings.job,
            &sources,
            backend,
            stats.clone(),
            cancel.clone(),
            tracer.clone(),
        )
    })??;
    process.pipeline_done_s = started.elapsed().as_secs_f64();
    // With the histograms: a shard's report is merged with the others'.
    let snapshot = stats.snapshot_with_histograms();
    if let (Some(path), Some(t)) = (&settings.trace, &tracer) {
        t.write(path)
            .map_err(|e| FatalError::Other(format!("trace {}: {e}", path.display())))?;
    }
    if let Some(path) = &report_path {
        process.report_s = started.elapsed().as_secs_f64();
        let shard = sources.plan_info().map(|plan| ShardSection {
            plan,
            host: dicomflow::host::name(),
            started_unix_s: unix_seconds(started_at),
            finished_unix_s: unix_seconds(SystemTime::now()),
        });
        report::write_report(
            path,
            &settings,
            &result,
            &snapshot,
            process,
            shard.as_ref(),
            None,
        )
        .map_err(|e| FatalError::Other(format!("report {}: {e}", path.display())))?;
    }
    if !quiet {
        eprint!("{}", report::summary(&result, &snapshot));
        if let (Some(info), Some(path)) = (sources.plan_info(), &report_path) {
            // Which part of the job this was, and where the merge will find its report.
            eprintln!(
                "  shard {} of {} (by {}, plan {}); report {}",
                info.index,
                info.count,
                match info.by {
                    ShardBy::Path => "path",
                    ShardBy::Series => "series",
                },
                info.plan,
                path.display()
            );
        }
    } else {
        // -q keeps errors: the failed files, one line each.
        eprint!("{}", report::failures(&result));
    }
    Ok(result.exit_code())
}
