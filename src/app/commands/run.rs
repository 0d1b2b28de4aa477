//! `dicomflow run`: resolve the settings, choose the backend, run the pipeline under the
//! dashboard (or the progress line), then write the trace and the report and print the summary.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use dicomflow::error::FatalError;
use dicomflow::observe::stats::Stats;
use dicomflow::paths::Escaped;
use dicomflow::source::manifest::ManifestPlan;
use dicomflow::source::shard::{Shard, ShardBy, ShardRequest};
use dicomflow::source::{ListingAhead, Sources};

use crate::app::cli::RunArgs;
use crate::app::commands::{record, single};
use crate::app::config::Settings;
use crate::app::report::{self, ProcessTimes, RunFiles, ShardSection};
use crate::app::{dashboard, print, signals};

/// Where a shard's report goes unless `--report` says otherwise, under the output folder.
pub const SHARD_REPORTS: &str = ".dicomflow/reports";

/// What the run reads, from `--manifest`, `--shard`, `--shard-count` and `--shard-by`.
fn sources(args: &RunArgs, inputs: &[PathBuf]) -> Result<Sources, FatalError> {
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
            inputs: inputs.to_vec(),
            shard: shard.map(|s| (s, by)),
        },
    })
}

/// Stops a run whose input path does not exist before any work, as a usage error (exit 2):
/// a mistyped path is not a file that failed to render.
pub fn check_inputs(inputs: &[PathBuf]) -> Result<(), FatalError> {
    let dashes = inputs.iter().filter(|p| single::is_dash(p)).count();
    if dashes > 1 {
        return Err(FatalError::Config(
            "input - (stdin) given more than once".into(),
        ));
    }
    for input in inputs.iter().filter(|p| !single::is_dash(p)) {
        if let Err(e) = std::fs::metadata(input) {
            if e.kind() == std::io::ErrorKind::NotFound {
                return Err(FatalError::Config(format!(
                    "input {}: no such file or folder",
                    Escaped(input)
                )));
            }
        }
    }
    Ok(())
}

/// The line said when the inputs held no file at all (an empty folder), which is no error but
/// rarely what was meant.
pub fn nothing_found(inputs: &[PathBuf]) -> String {
    let names: Vec<String> = inputs.iter().map(|p| Escaped(p).to_string()).collect();
    format!(
        "dicomflow: warning: no input files found in {}",
        names.join(", ")
    )
}

fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

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
    let started_at = SystemTime::now()
        .checked_sub(started.elapsed())
        .unwrap_or(UNIX_EPOCH);
    check_inputs(&args.inputs)?;
    let mut raw = args.to_raw();
    // `-o name.png` / `-o -`: the run renders into a scratch folder, then the image is moved.
    let single = match single::target(args)? {
        Some((target, format)) => {
            let scratch = single::scratch_for(&target)?;
            raw.output.dir = Some(scratch.0.clone());
            if let Some(f) = format {
                raw.output.format = Some(f.to_string());
            }
            Some((target, scratch))
        }
        None => None,
    };
    // `-` as input: stdin, copied to a scratch file first (the pipeline reads files).
    let mut inputs = args.inputs.clone();
    let mut _stdin_copy = None;
    let mut stdin_file = None;
    if let Some(dash) = inputs.iter_mut().find(|p| single::is_dash(p)) {
        let (scratch, file) = single::stdin_to_file()?;
        *dash = file.clone();
        stdin_file = Some(file);
        _stdin_copy = Some(scratch);
    }
    // The files named as inputs (not found in a folder), as the records name them (stdin as
    // `-`): each must render.
    let named_files: Vec<PathBuf> = args
        .inputs
        .iter()
        .filter(|p| single::is_dash(p) || p.is_file())
        .cloned()
        .collect();
    let mut settings = Settings::resolve(args.job.config.as_deref(), &raw)?;
    if let Some(file) = &stdin_file {
        settings
            .job
            .pipeline
            .shown_as
            .push((file.clone(), PathBuf::from("-")));
    }
    let sources = sources(args, &inputs)?;
    // The settings that made the images already in the output folder (a named image or
    // stdout has no folder to keep them in).
    let recording = single.is_none();
    let asked_skip_existing = settings.job.output.skip_existing;
    let mut settings_changed = false;
    if recording {
        if let record::Verdict::Changed(changed) =
            record::check(&settings.job.output.dir, &settings.job)?
        {
            settings_changed = true;
            if settings.job.output.skip_existing {
                if !args.rerender_changed {
                    return Err(record::refusal(&settings.job.output.dir, &changed));
                }
                // Every image rendered again: none of those present was made this way.
                settings.job.output.skip_existing = false;
                if !quiet {
                    print::errln(&format!(
                        "dicomflow: the settings changed ({}): rendering every image again",
                        changed.join("; ")
                    ));
                }
            }
        }
    }
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
    let RunFiles {
        report: report_file,
        tracer,
    } = RunFiles::create(report_path.as_deref(), settings.trace.as_deref())?;
    // The inputs are listed while the backend starts (the CUDA backend takes ~240 ms); the
    // output folder first, so that the listing leaves it out.
    let out_dir = &settings.job.output.dir;
    // The folders this run is about to make (the output folder and missing parents).
    let made: Vec<PathBuf> = out_dir
        .ancestors()
        .take_while(|d| !d.as_os_str().is_empty() && !d.exists())
        .map(PathBuf::from)
        .collect();
    dicomflow::pipeline::prepare_output_dir(&settings.job, &sources)?;
    let ahead = ListingAhead::start(&sources, out_dir);
    let backend =
        match dicomflow::pipeline::select_backend_for(&settings.backend, &settings.job, &sources) {
            Ok(backend) => backend,
            Err(e) => {
                // A run that never started leaves no empty folder behind (`remove_dir` only
                // removes empty ones).
                drop(ahead);
                for dir in &made {
                    if std::fs::remove_dir(dir).is_err() {
                        break;
                    }
                }
                return Err(e);
            }
        };
    // Kept alive to the end: the process exits without tearing the driver down.
    std::mem::forget(backend.clone());
    let mut process = ProcessTimes {
        backend_ready_s: started.elapsed().as_secs_f64(),
        ..Default::default()
    };
    let stats = Stats::new();
    let cancel = Arc::new(AtomicBool::new(false));
    signals::cancel_on_interrupt(cancel.clone());
    let mut display = dashboard::Options::of(&settings, quiet, None);
    if single.is_some() && settings.dashboard.log_file.is_none() {
        // The scratch output folder is removed at the end: the log goes to the state folder.
        display.log_file = dashboard::state_log_file();
    }
    let result = dashboard::supervise(&display, &stats, &cancel, tracer.as_ref(), || {
        dicomflow::pipeline::run_sources(
            &settings.job,
            &sources,
            ahead,
            backend,
            stats.clone(),
            cancel.clone(),
            tracer.clone(),
        )
    })??;
    let mut result = result;
    // Only a skipped named file can be owed, and the check canonicalizes every rendered path
    // (a getcwd and a readlink per component each), so it runs only when a named file was
    // skipped: never in a run over folders, where it took 0.08–0.15 s of a 16 000-file run
    // on the dev box, between the pipeline's end and the report (0.02–0.05 s without it).
    let named: std::collections::HashSet<&std::path::Path> =
        named_files.iter().map(PathBuf::as_path).collect();
    let owed = result.files.iter().any(|f| {
        f.status == dicomflow::pipeline::events::FileStatus::Skipped
            && named.contains(f.path.as_path())
    });
    if args.manifest.is_none() && owed {
        // A named file also found another way (given twice, or inside a folder input) was
        // rendered under that path: its skip is no failure.
        let rendered: std::collections::HashSet<PathBuf> = result
            .files
            .iter()
            .filter(|f| f.status != dicomflow::pipeline::events::FileStatus::Skipped)
            .filter_map(|f| std::fs::canonicalize(&f.path).ok())
            .collect();
        let must_render = |p: &std::path::Path| {
            named_files.iter().any(|n| n == p)
                && !std::fs::canonicalize(p).is_ok_and(|c| rendered.contains(&c))
        };
        for e in result.fail_skipped(must_render) {
            stats.push_error(e);
        }
    }
    process.pipeline_done_s = started.elapsed().as_secs_f64();
    // With the histograms: a shard's report is merged with the others'.
    let snapshot = stats.snapshot_with_histograms();
    // Neither file's failure keeps the other from being written, nor the summary from being
    // printed: the run happened, and what it did must be said.
    let mut unwritten = Vec::new();
    if let (Some(path), Some(t)) = (&settings.trace, &tracer) {
        if let Err(e) = t.finish() {
            unwritten.push(format!("trace {}: {e}", Escaped(path)));
        }
    }
    if let (Some(path), Some(file)) = (&report_path, report_file) {
        process.report_s = started.elapsed().as_secs_f64();
        let shard = sources.plan_info().map(|plan| ShardSection {
            plan,
            host: dicomflow::host::name(),
            started_unix_s: unix_seconds(started_at),
            finished_unix_s: unix_seconds(SystemTime::now()),
        });
        if let Err(e) = report::write_report(
            file,
            &settings,
            &result,
            &snapshot,
            process,
            shard.as_ref(),
            None,
        ) {
            unwritten.push(format!("report {}: {e}", Escaped(path)));
        }
    }
    if !quiet {
        print::err(&report::summary(&result, &snapshot));
        if let (Some(info), Some(path)) = (sources.plan_info(), &report_path) {
            // Which part of the job this was, and where the merge will find its report.
            print::errln(&format!(
                "  shard {} of {} (by {}, plan {}); report {}",
                info.index,
                info.count,
                match info.by {
                    ShardBy::Path => "path",
                    ShardBy::Series => "series",
                },
                info.plan,
                Escaped(path)
            ));
        }
    } else {
        // -q keeps errors: the failed files, one line each.
        print::err(&report::failures(&result));
    }
    if result.totals.files == 0 && args.manifest.is_none() && args.shard.is_none() {
        print::errln(&nothing_found(&args.inputs));
    }
    // Every run that wrote into a folder (or kept its record) says how its images were made,
    // so that a later `--skip-existing` run with other settings is refused, whatever came first.
    let wrote = result.totals.frames_written > 0 || result.totals.frames_existing > 0;
    if recording && (wrote || asked_skip_existing || record::exists(&settings.job)) {
        // A run that changed the settings and did not render every input (stopped, or some
        // failed and kept their old images) leaves images of both kinds.
        let incomplete = result.cancelled
            || result.totals.files_cancelled > 0
            || result.totals.files_failed + result.totals.files_partial > 0;
        if let Err(e) = record::write(&settings.job, incomplete && settings_changed) {
            print::errln(&format!(
                "dicomflow: warning: the record of the settings: {e}"
            ));
        }
    }
    let mut undelivered = false;
    if let Some((target, scratch)) = &single {
        if let Err(e) = single::deliver(scratch, target) {
            print::errln(&format!("dicomflow: error: {e}"));
            undelivered = true;
        }
    }
    for what in &unwritten {
        print::errln(&format!("dicomflow: error: {what}"));
    }
    let code = result.exit_code();
    if code == 0 && undelivered {
        return Ok(1);
    }
    Ok(if code == 0 && !unwritten.is_empty() {
        2
    } else {
        code
    })
}
