//! End-of-run outputs: the summary table on stderr and the JSON report (`--report`).

use std::fmt::Write as _;
use std::io::Write as _;

use crate::app::config::Settings;
use dicomflow::backend::BackendInfo;
use dicomflow::error::FatalError;
use dicomflow::observe::stats::{GpuFigures, Snapshot};
use dicomflow::observe::trace::Tracer;
use dicomflow::output::atomic::PendingFile;
use dicomflow::paths::Escaped;
use dicomflow::pipeline::{FileStatus, RunResult};
use dicomflow::source::live::LiveSnapshot;
use dicomflow::source::select::ShardPlanInfo;

/// Version of the report's layout (docs/report-schema.json). Fields may be added without a
/// change of version; removing or changing one changes it.
pub const REPORT_VERSION: u32 = 1;

/// Version of the dicom-rs crates this build uses (pinned with `=` in Cargo.toml).
pub const DICOM_RS_VERSION: &str = "0.10.1";

/// Versions of what produced a report.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Versions {
    pub dicomflow: &'static str,
    /// The compiler, when the build recorded it (`DICOMFLOW_RUSTC_VERSION` at build time).
    pub rustc: Option<&'static str>,
    /// Minimum supported Rust version of the crate.
    pub rust_version_min: &'static str,
    pub dicom_rs: &'static str,
    pub target_os: &'static str,
    pub target_arch: &'static str,
    /// "release" or "debug".
    pub profile: &'static str,
}

impl Versions {
    /// The versions of this build.
    pub fn current() -> Versions {
        Versions {
            dicomflow: env!("CARGO_PKG_VERSION"),
            rustc: option_env!("DICOMFLOW_RUSTC_VERSION"),
            rust_version_min: env!("CARGO_PKG_RUST_VERSION"),
            dicom_rs: DICOM_RS_VERSION,
            target_os: std::env::consts::OS,
            target_arch: std::env::consts::ARCH,
            profile: if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            },
        }
    }
}

/// What the summary says about GPU decoding: for a run with frames of a transfer syntax a GPU
/// codec exists for, where each family decoded (the CUDA backend's lines: library, version, or
/// why it is off) and how many frames the GPU decoded; for the CPU backend, that it is off and
/// why. Nothing for runs without such frames.
fn gpu_decode_lines(result: &RunResult, stats: &Snapshot) -> Vec<String> {
    let compressed = result.files.iter().any(|f| {
        f.meta.as_ref().is_some_and(|m| {
            dicomflow::decode::compressed::GpuCodec::of(&m.transfer_syntax).is_some()
        })
    });
    if !compressed {
        return Vec::new();
    }
    if result.backend.decode.is_empty() {
        return vec![format!(
            "off: the {} backend decodes every frame ({})",
            result.backend.name, result.backend.reason
        )];
    }
    let mut lines = result.backend.decode.clone();
    if let Some(g) = &stats.gpu {
        lines.push(format!(
            "{} frame(s) decoded on the GPU, {} handed to the CPU decoder",
            g.frames_gpu_decoded, g.frames_decode_fallback
        ));
    }
    lines
}

/// The backend as the report shows it: what it said about itself, the line the dashboard
/// showed, and the GPU figures when there is a GPU.
#[derive(serde::Serialize)]
pub struct BackendSection<'a> {
    #[serde(flatten)]
    pub info: &'a BackendInfo,
    pub display: &'a str,
    pub gpu: Option<&'a GpuFigures>,
}

/// When the process reached each phase, in seconds since `main` started: what the pipeline's
/// own clock (`statistics.elapsed`) leaves out, such as opening the GPU. The process's exit,
/// after the report, is not in it: compare with the wall time measured outside.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct ProcessTimes {
    /// Configuration read and the backend ready (for CUDA: driver, contexts, kernels).
    pub backend_ready_s: f64,
    /// The last slice finished (pipeline threads joined).
    pub pipeline_done_s: f64,
    /// This report about to be written (after the trace, if any).
    pub report_s: f64,
}

/// A sharded run's part of the report: how its files were chosen (what `report merge` checks
/// every shard agrees on), where and when it ran (what the merge's wall time comes from).
#[derive(Debug, Clone, serde::Serialize)]
pub struct ShardSection {
    #[serde(flatten)]
    pub plan: ShardPlanInfo,
    /// The machine that ran it.
    pub host: String,
    /// When the process started and when this report was written, seconds since the Unix
    /// epoch.
    pub started_unix_s: f64,
    pub finished_unix_s: f64,
}

/// The report document.
#[derive(serde::Serialize)]
pub struct Report<'a> {
    pub report_version: u32,
    pub dicomflow_version: &'static str,
    pub versions: Versions,
    pub settings: &'a Settings,
    pub backend: BackendSection<'a>,
    /// Per-file results (`result.files`), totals and sizing.
    pub result: &'a RunResult,
    /// Per-stage statistics, gauges at the end, counters.
    pub statistics: &'a Snapshot,
    pub process: ProcessTimes,
    /// With --shard: which shard, of which plan (null otherwise).
    pub shard: Option<&'a ShardSection>,
    /// Arrivals of a run without an end (`listen`, `watch`): associations, senders,
    /// arrival → output latency.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub live: Option<&'a LiveSnapshot>,
}

/// Where a run's report goes.
pub enum ReportSink {
    /// A file created when the run starts, appearing complete at its path when it ends.
    File(PendingFile),
    /// Standard output (`--report -`), written when the run ends; the summary goes to
    /// standard error as always.
    Stdout,
}

/// The report and trace files of a run, created before any work: a path that cannot be
/// written stops the command at once (exit 2) rather than after the run.
pub struct RunFiles {
    pub report: Option<ReportSink>,
    pub tracer: Option<std::sync::Arc<Tracer>>,
}

impl RunFiles {
    /// Creates the report at `report` and the trace at `trace`, when given.
    pub fn create(
        report: Option<&std::path::Path>,
        trace: Option<&std::path::Path>,
    ) -> Result<RunFiles, FatalError> {
        let report = match report {
            Some(path) if path.as_os_str() == "-" => Some(ReportSink::Stdout),
            Some(path) => Some(ReportSink::File(PendingFile::create(path, true).map_err(
                |e| {
                    FatalError::Config(format!(
                        "--report {}: cannot write there: {e}",
                        Escaped(path)
                    ))
                },
            )?)),
            None => None,
        };
        let tracer = match trace {
            Some(path) => Some(std::sync::Arc::new(Tracer::create(path).map_err(|e| {
                FatalError::Config(format!(
                    "--trace {}: cannot write there: {e}",
                    Escaped(path)
                ))
            })?)),
            None => None,
        };
        Ok(RunFiles { report, tracer })
    }
}

/// Writes the JSON report into `sink`: a file (created when the run started) appears,
/// complete, at its path; standard output gets the document and a newline.
pub fn write_report(
    sink: ReportSink,
    settings: &Settings,
    result: &RunResult,
    stats: &Snapshot,
    process: ProcessTimes,
    shard: Option<&ShardSection>,
    live: Option<&LiveSnapshot>,
) -> std::io::Result<()> {
    let report = Report {
        report_version: REPORT_VERSION,
        dicomflow_version: env!("CARGO_PKG_VERSION"),
        versions: Versions::current(),
        settings,
        backend: BackendSection {
            info: &result.backend,
            display: &stats.backend,
            gpu: stats.gpu.as_ref(),
        },
        result,
        statistics: stats,
        process,
        shard,
        live,
    };
    match sink {
        ReportSink::File(file) => {
            let mut out = std::io::BufWriter::new(file);
            serde_json::to_writer_pretty(&mut out, &report)?;
            out.write_all(b"\n")?;
            out.into_inner().map_err(|e| e.into_error())?.persist()
        }
        ReportSink::Stdout => {
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            serde_json::to_writer_pretty(&mut out, &report)?;
            out.write_all(b"\n")?;
            out.flush()
        }
    }
}

fn mb(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}

/// What a run without an end received, before its [`summary`].
pub fn live_summary(l: &LiveSnapshot) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "dicomflow: {} arrival(s) in {:.1} s: {} rendered, {} skipped, {} failed, {} refused; {} association(s), {} refused or dropped",
        l.arrivals,
        l.elapsed_s,
        l.rendered,
        l.skipped,
        l.failed,
        l.refused,
        l.associations_total,
        l.associations_refused
    );
    if let Some([p50, p95, p99, max]) = l.latency_ms {
        let _ = writeln!(
            s,
            "  arrival → output: p50 {p50:.2} ms, p95 {p95:.2} ms, p99 {p99:.2} ms, max {max:.2} ms"
        );
    }
    for (sender, c) in &l.senders {
        let _ = writeln!(
            s,
            "  {sender}: {} received ({}), {} refused",
            c.received,
            mb(c.bytes),
            c.refused
        );
    }
    s
}

/// One line per pool whose threads reported their CPU time (observe::cpu): how much of their
/// lives they were on a CPU, and how much of that in the kernel, beside the busy fractions
/// above (wall-clock time in the stages, which counts waiting on the GPU as busy).
fn cpu_lines(stats: &Snapshot) -> Vec<String> {
    stats
        .pools
        .iter()
        .filter_map(|p| {
            let c = p.cpu?;
            let on = c.user_s + c.system_s;
            let kernel = if on > 0.0 { c.system_s / on } else { 0.0 };
            let waiting = c.runqueue_fraction.map_or(String::new(), |f| {
                format!("; waiting for a CPU {:.0}% of their time", f * 100.0)
            });
            Some(format!(
                "cpu: {} ({}) on a CPU {:.0}% of their time: {:.2} s, {:.0}% of it in the \
                 kernel{waiting}",
                p.pool.name(),
                c.threads,
                c.on_cpu_fraction * 100.0,
                on,
                kernel * 100.0
            ))
        })
        .collect()
}

/// The end-of-run summary (stderr), the same in TUI and plain modes.
pub fn summary(result: &RunResult, stats: &Snapshot) -> String {
    let t = &result.totals;
    let mut s = String::new();
    let secs = result.elapsed.as_secs_f64().max(1e-9);
    let _ = writeln!(
        s,
        "dicomflow: {} file(s): {} ok, {} failed, {} partial, {} skipped{}",
        t.files,
        t.files_ok,
        t.files_failed,
        t.files_partial,
        t.files_skipped,
        if t.files_cancelled > 0 {
            format!(", {} cancelled", t.files_cancelled)
        } else {
            String::new()
        }
    );
    if result.exit_code() == dicomflow::pipeline::events::EXIT_INTERRUPTED {
        let _ = writeln!(
            s,
            "  stopped before every input was done (exit 130); run again with --skip-existing to complete it"
        );
    }
    let _ = writeln!(s, "  frames: {} written, {} already present, {} failed; {} in {:.2} s ({:.1} frames/s); output {}",
        t.frames_written, t.frames_existing, t.frames_failed, t.frames_written + t.frames_existing,
        secs, t.frames_written as f64 / secs, mb(t.output_bytes));
    let z = &result.sizing;
    let threads = match (z.shared, z.workers) {
        (true, 0) => format!(
            "{} shared (each loads, renders, encodes and writes)",
            z.writers
        ),
        (true, workers) => format!(
            "{} shared (each loads, encodes and writes), workers {workers}",
            z.writers
        ),
        (false, 0) => format!(
            "loaders {}, writers {} (each renders, encodes and writes)",
            z.loaders, z.writers
        ),
        (false, workers) => format!(
            "loaders {}, workers {workers}, writers {}",
            z.loaders, z.writers
        ),
    };
    let _ = writeln!(
        s,
        "  backend: {} ({})\n  threads: {threads}; slots {} ({} {})",
        result.backend.name,
        result.backend.reason,
        z.slots,
        mb(result.slot_memory_bytes),
        result.slot_memory_kind
    );
    for line in gpu_decode_lines(result, stats) {
        let _ = writeln!(s, "  gpu decode: {line}");
    }
    if let Some(g) = stats.gpu.as_ref().filter(|g| g.frames_uploaded > 0) {
        let _ = writeln!(
            s,
            "  upload: {} frames read straight into GPU memory by the loaders (gpu.upload)",
            g.frames_uploaded
        );
    }
    let gpu_encoded = if stats.gpu_encoded_frames > 0 {
        format!(
            "; {} frames compressed on the GPU, {} back ({:.0} KB per frame)",
            stats.gpu_encoded_frames,
            mb(stats.gpu_encoded_bytes),
            stats.gpu_encoded_bytes as f64 / 1e3 / stats.gpu_encoded_frames as f64
        )
    } else {
        String::new()
    };
    let _ = writeln!(
        s,
        "  encoder: {} ({}){gpu_encoded}",
        result.backend.encoder, result.backend.encoder_reason
    );
    let _ = writeln!(
        s,
        "  {:<13} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>6}",
        "stage", "slices", "slices/s", "p50 ms", "p95 ms", "max ms", "total s", "busy"
    );
    for st in stats.stages.iter().filter(|st| st.count > 0) {
        let _ = writeln!(
            s,
            "  {:<13} {:>7} {:>9.1} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>5.0}%",
            st.name,
            st.count,
            st.count as f64 / secs,
            st.p50_ms,
            st.p95_ms,
            st.max_ms,
            st.busy_s,
            st.busy_fraction * 100.0
        );
    }
    if stats.latency.count > 0 {
        let l = &stats.latency;
        let _ = writeln!(
            s,
            "  {:<13} {:>7} {:>9} {:>9.2} {:>9.2} {:>9.2}   (first read -> output renamed)",
            "latency", l.count, "", l.p50_ms, l.p95_ms, l.max_ms
        );
    }
    if let Some(b) = stats.bottleneck() {
        let _ = writeln!(
            s,
            "  bottleneck: {} ({:.0}% busy); errors: {}",
            b.name,
            b.busy_fraction * 100.0,
            stats.error_count
        );
    } else {
        let _ = writeln!(s, "  errors: {}", stats.error_count);
    }
    if let Some(o) = stats.overlap {
        let busy = stats
            .pools
            .iter()
            .find(|p| p.pool == o.busiest)
            .map_or(0.0, |p| p.busy_fraction);
        let _ = writeln!(
            s,
            "  overlap: {:.2} (elapsed / busy time per thread of the busiest pool, {}: {:.0}% busy)",
            o.ratio,
            o.busiest.name(),
            busy * 100.0
        );
    }
    for line in cpu_lines(stats) {
        let _ = writeln!(s, "  {line}");
    }
    s.push_str(&failures(result));
    let skipped: Vec<_> = result
        .files
        .iter()
        .filter(|f| f.status == FileStatus::Skipped)
        .collect();
    if !skipped.is_empty() {
        let _ = writeln!(s, "  skipped (not rendered, not failures):");
        for f in skipped.iter().take(20) {
            let _ = writeln!(
                s,
                "    {}: {}",
                Escaped(&f.path),
                f.skip_reason.as_deref().unwrap_or("")
            );
        }
        if skipped.len() > 20 {
            let _ = writeln!(s, "    ... and {} more (see --report)", skipped.len() - 20);
        }
    }
    s
}

/// Failures sharing one stage and reason beyond which they are said once, with a count.
const SAME_FAILURE_LISTED: usize = 10;

/// One line per failure (`path (frame n): stage: reason`), under a `failed:` heading; empty
/// when nothing failed. Printed even with `-q`: failures are errors. A failure shared by more
/// than [`SAME_FAILURE_LISTED`] files (a setting that fails the same way for every file, such as
/// `--window file:3` on a series with two windows) is one line with the count and the first
/// file; the report lists every one.
pub fn failures(result: &RunResult) -> String {
    let mut s = String::new();
    let failed: Vec<_> = result.failed().collect();
    if failed.is_empty() {
        return s;
    }
    let mut files_per_reason: std::collections::HashMap<(dicomflow::error::Stage, &str), usize> =
        std::collections::HashMap::new();
    for f in &failed {
        for x in &f.failures {
            *files_per_reason
                .entry((x.stage, x.reason.as_str()))
                .or_default() += 1;
        }
    }
    let _ = writeln!(s, "  failed:");
    let mut said = std::collections::HashSet::new();
    for f in failed {
        for x in &f.failures {
            let frame = x
                .frame
                .map(|n| format!(" (frame {})", n + 1))
                .unwrap_or_default();
            let key = (x.stage, x.reason.as_str());
            let n = files_per_reason.get(&key).copied().unwrap_or(1);
            if n > SAME_FAILURE_LISTED {
                if said.insert(key) {
                    let _ = writeln!(
                        s,
                        "    {n} failures: {}: {} (the first: {}{frame}; every one in --report)",
                        x.stage,
                        x.reason,
                        Escaped(&f.path),
                    );
                }
                continue;
            }
            let _ = writeln!(
                s,
                "    {}{}: {}: {}",
                Escaped(&f.path),
                frame,
                x.stage,
                x.reason
            );
        }
    }
    s
}
