//! End-of-run outputs: the summary table on stderr and the JSON report (`--report`).

use std::fmt::Write;
use std::path::Path;

use crate::config::Settings;
use crate::pipeline::{FileStatus, RunResult};
use crate::stats::Snapshot;

/// Version of the report's layout (docs/report-schema.json).
pub const REPORT_VERSION: u32 = 1;

/// The report document.
#[derive(serde::Serialize)]
pub struct Report<'a> {
    pub report_version: u32,
    pub dicomflow_version: &'static str,
    pub settings: &'a Settings,
    pub result: &'a RunResult,
    pub statistics: &'a Snapshot,
}

/// Writes the JSON report atomically.
pub fn write_report(
    path: &Path,
    settings: &Settings,
    result: &RunResult,
    stats: &Snapshot,
) -> std::io::Result<()> {
    let report = Report {
        report_version: REPORT_VERSION,
        dicomflow_version: env!("CARGO_PKG_VERSION"),
        settings,
        result,
        statistics: stats,
    };
    let bytes = serde_json::to_vec_pretty(&report)?;
    crate::output::atomic::write_atomic(path, &bytes)
}

fn mb(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
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
    let _ = writeln!(s, "  frames: {} written, {} already present, {} failed; {} in {:.2} s ({:.1} frames/s); output {}",
        t.frames_written, t.frames_existing, t.frames_failed, t.frames_written + t.frames_existing,
        secs, t.frames_written as f64 / secs, mb(t.output_bytes));
    let _ = writeln!(
        s,
        "  backend: {} ({}); loaders {}, workers {}, writers {}, slots {} ({} {})",
        result.backend.name,
        result.backend.reason,
        result.sizing.loaders,
        result.sizing.workers,
        result.sizing.writers,
        result.sizing.slots,
        mb(result.slot_memory_bytes),
        result.slot_memory_kind
    );
    let _ = writeln!(
        s,
        "  {:<13} {:>7} {:>9} {:>9} {:>9} {:>9} {:>6}",
        "stage", "slices", "p50 ms", "p95 ms", "max ms", "total s", "busy"
    );
    for st in stats.stages.iter().filter(|st| st.count > 0) {
        let _ = writeln!(
            s,
            "  {:<13} {:>7} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>5.0}%",
            st.name,
            st.count,
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
            "  {:<13} {:>7} {:>9.2} {:>9.2} {:>9.2}   (first byte read -> output renamed)",
            "latency", l.count, l.p50_ms, l.p95_ms, l.max_ms
        );
    }
    let failed: Vec<_> = result.failed().collect();
    if !failed.is_empty() {
        let _ = writeln!(s, "  failed:");
        for f in failed {
            for x in &f.failures {
                let frame = x
                    .frame
                    .map(|n| format!(" (frame {})", n + 1))
                    .unwrap_or_default();
                let _ = writeln!(
                    s,
                    "    {}{}: {}: {}",
                    f.path.display(),
                    frame,
                    x.stage,
                    x.reason
                );
            }
        }
    }
    let skipped: Vec<_> = result
        .files
        .iter()
        .filter(|f| f.status == FileStatus::Skipped)
        .collect();
    if !skipped.is_empty() {
        let _ = writeln!(s, "  skipped (not images):");
        for f in skipped.iter().take(20) {
            let _ = writeln!(
                s,
                "    {}: {}",
                f.path.display(),
                f.skip_reason.as_deref().unwrap_or("")
            );
        }
        if skipped.len() > 20 {
            let _ = writeln!(s, "    ... and {} more (see --report)", skipped.len() - 20);
        }
    }
    s
}
