//! `dicomflow scan`: list the files under some inputs in a manifest
//! ([`dicomflow::source::manifest`]) once, so the tasks of a sharded run read it instead of
//! each walking the tree; `--plan N` prints how N byte-balanced shards would split it.

use std::fmt::Write;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use dicomflow::error::FatalError;
use dicomflow::source::manifest::{write_manifest, ManifestError, ManifestPlan};
use dicomflow::source::shard::{Shard, ShardBy};

use crate::app::cli::ScanArgs;
use crate::app::signals;

/// Writes the manifest `args` describe; exit 0, 1 when some paths could not be read (they are
/// listed in the manifest too, and the run reports them), 130 when interrupted.
pub fn execute(args: &ScanArgs, quiet: bool) -> Result<i32, FatalError> {
    let by: ShardBy = args
        .shard_by
        .parse()
        .map_err(|e: dicomflow::source::shard::ShardError| FatalError::Config(e.to_string()))?;
    if let Some(n) = args.plan {
        // The same limits as --shard I/N.
        Shard::new(0, n.into()).map_err(|e| FatalError::Config(format!("--plan {n}: {e}")))?;
    }
    if by == ShardBy::Series && !args.with_series {
        return Err(FatalError::Config(
            "--shard-by series needs the UIDs: add --with-series".into(),
        ));
    }
    let cancel = Arc::new(AtomicBool::new(false));
    signals::cancel_on_interrupt(cancel.clone());
    let summary = match write_manifest(&args.output, &args.inputs, args.with_series, &cancel) {
        Ok(s) => s,
        Err(ManifestError::Cancelled) => {
            eprintln!("dicomflow: scan stopped; no manifest was written");
            return Ok(130);
        }
        Err(e) => return Err(FatalError::Other(format!("scan: {e}"))),
    };
    for (path, reason) in &summary.errors {
        eprintln!("dicomflow: {}: {reason}", path.display());
    }
    if !quiet {
        let series = if args.with_series {
            format!(", {} with a series UID", summary.with_series)
        } else {
            String::new()
        };
        eprintln!(
            "dicomflow: listed {} file(s), {:.1} MB{series}, under {} root(s) in {}{}",
            summary.files,
            summary.bytes as f64 / 1e6,
            summary.roots.len(),
            args.output.display(),
            if summary.errors.is_empty() {
                String::new()
            } else {
                format!("; {} path(s) could not be read", summary.errors.len())
            }
        );
    }
    if let Some(n) = args.plan {
        let plan = ManifestPlan::compute(&args.output, n, by)
            .map_err(|e| FatalError::Other(format!("plan: {e}")))?;
        print!("{}", plan_table(&plan));
    }
    Ok(if summary.errors.is_empty() { 0 } else { 1 })
}

/// Files and bytes per shard, and how far the heaviest is above the mean.
fn plan_table(plan: &ManifestPlan) -> String {
    let mut s = String::new();
    let total: u64 = plan.bytes.iter().sum();
    let mean = total as f64 / f64::from(plan.count);
    let _ = writeln!(
        s,
        "{:>6} {:>10} {:>14} {:>10}",
        "shard", "files", "bytes", "% of mean"
    );
    for (i, (files, bytes)) in plan.files.iter().zip(&plan.bytes).enumerate() {
        let pct = if mean > 0.0 {
            *bytes as f64 / mean * 100.0
        } else {
            0.0
        };
        let _ = writeln!(s, "{i:>6} {files:>10} {bytes:>14} {pct:>10.1}");
    }
    let max = plan.bytes.iter().copied().max().unwrap_or(0) as f64;
    let over = if mean > 0.0 {
        (max / mean - 1.0) * 100.0
    } else {
        0.0
    };
    let _ = writeln!(
        s,
        "largest shard: {over:+.1} % of the mean ({} shards by {}, balanced by bytes)",
        plan.count,
        match plan.by {
            ShardBy::Path => "file",
            ShardBy::Series => "series",
        }
    );
    s
}
