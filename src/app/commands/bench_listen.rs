//! `dicomflow bench listen`: send DICOM files to a Storage SCP over N associations, as fast as
//! they are acknowledged or at a fixed rate, and print instances/s and store round trips. The
//! sender of `scripts/bench_listen.sh` where DCMTK's `storescu` is not installed, and the
//! paced sender of its latency runs.

use dicomflow::error::FatalError;
use dicomflow::source::listen::scu::{send_files, Outgoing, ScuOptions};
use dicomflow::source::{scan, ScanItem};

use crate::app::cli::BenchListenArgs;

/// Runs `args`; exit 1 when any store failed.
pub fn execute(args: &BenchListenArgs) -> Result<i32, FatalError> {
    let mut files = Vec::new();
    let never = std::sync::atomic::AtomicBool::new(false);
    scan(&args.inputs, None, &never, |item| {
        if let ScanItem::Dicom(c) = item {
            files.push(c.path);
        }
        true
    });
    let outgoing: Vec<Outgoing> = files
        .iter()
        .filter_map(|p| match Outgoing::open(p) {
            Ok(o) => Some(o),
            Err(e) => {
                eprintln!("dicomflow: skipping {e}");
                None
            }
        })
        .collect();
    if outgoing.is_empty() {
        return Err(FatalError::Config(
            "no DICOM files with file meta to send".into(),
        ));
    }
    let opts = ScuOptions {
        addr: args.to.clone(),
        called_ae: args.called_ae.clone(),
        calling_ae: args.calling_ae.clone(),
        ..Default::default()
    };
    let rate = (args.rate > 0.0).then_some(args.rate);
    let report = send_files(&opts, &outgoing, args.associations, rate);
    let mut rtt: Vec<f64> = report
        .round_trips
        .iter()
        .map(|d| d.as_secs_f64() * 1e3)
        .collect();
    rtt.sort_by(f64::total_cmp);
    let q = |p: f64| {
        rtt.get(((rtt.len() as f64 - 1.0) * p).round() as usize)
            .copied()
            .unwrap_or(0.0)
    };
    let secs = report.elapsed.as_secs_f64().max(1e-9);
    println!(
        "sent {} of {} instance(s) over {} association(s) in {:.3} s: {:.1} instances/s; store round trip p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        report.stored,
        outgoing.len(),
        args.associations,
        secs,
        report.stored as f64 / secs,
        q(0.5),
        q(0.99),
        rtt.last().copied().unwrap_or(0.0)
    );
    for (path, why) in report.failed.iter().take(20) {
        eprintln!("dicomflow: failed {}: {why}", path.display());
    }
    Ok(if report.failed.is_empty() { 0 } else { 1 })
}
