//! `dicomflow report merge`: the reports of a sharded run's tasks as one. Totals are summed,
//! stage statistics recomputed from the stages' histograms added together (percentiles cannot
//! be averaged), failed files listed, and shards that are missing, unreadable or stopped early
//! named. Exit 0 only when all N shards are present and finished and nothing failed; 1
//! otherwise; 2 when the reports do not belong together (other shard counts or plans) or none
//! was found.
//!
//! Reports are read as a stream: of each report's per-file records only the failed ones are
//! kept, so memory follows the failures, not the job's size.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::{Deserializer, SeqAccess, Visitor};
use serde_json::Value;

use dicomflow::error::FatalError;
use dicomflow::observe::hdr::{self, EncodedHistogram};
use dicomflow::observe::stats::{new_histogram, StageId, StageSnapshot};
use dicomflow::pipeline::events::Totals;
use dicomflow::source::shard::Shard;

use crate::app::cli::MergeArgs;

/// Version of the merged report's layout (docs/merged-report-schema.json).
pub const MERGED_REPORT_VERSION: u32 = 1;

// ---- what is read from each shard's report ----

#[derive(serde::Deserialize)]
struct ShardReport {
    shard: Option<ShardDoc>,
    backend: BackendDoc,
    result: ResultDoc,
    statistics: StatisticsDoc,
}

#[derive(serde::Deserialize)]
struct BackendDoc {
    name: String,
}

#[derive(serde::Deserialize)]
struct ShardDoc {
    index: u32,
    count: u32,
    by: String,
    balance: String,
    plan: String,
    #[serde(default)]
    host: String,
    started_unix_s: f64,
    finished_unix_s: f64,
    planned_files: Option<u64>,
    planned_bytes: Option<u64>,
}

#[derive(serde::Deserialize)]
struct ResultDoc {
    files: FailedFiles,
    totals: Totals,
    cancelled: bool,
}

#[derive(serde::Deserialize)]
struct StatisticsDoc {
    elapsed: f64,
    stages: Vec<StageDoc>,
    latency: StageDoc,
    bytes_in: u64,
    bytes_out: u64,
    // Absent from reports of the CPU backend's builds before the GPU codecs: zero.
    #[serde(default)]
    gpu_encoded_frames: u64,
    #[serde(default)]
    gpu_encoded_bytes: u64,
    #[serde(default)]
    gpu: Option<GpuDoc>,
}

/// The GPU codec counts of a report (`statistics.gpu`, null on the CPU backend).
#[derive(serde::Deserialize, Default)]
struct GpuDoc {
    #[serde(default)]
    frames_gpu_decoded: u64,
    #[serde(default)]
    frames_decode_fallback: u64,
}

#[derive(serde::Deserialize)]
struct StageDoc {
    name: String,
    count: u64,
    workers: u64,
    busy_s: f64,
    histogram: Option<EncodedHistogram>,
}

/// The failed and partly failed files of a report's `result.files`; the others are read and
/// dropped one by one.
struct FailedFiles(Vec<Value>);

impl<'de> serde::Deserialize<'de> for FailedFiles {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Keep;
        impl<'de> Visitor<'de> for Keep {
            type Value = FailedFiles;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list of file records")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<FailedFiles, A::Error> {
                let mut kept = Vec::new();
                while let Some(file) = seq.next_element::<Value>()? {
                    if matches!(file["status"].as_str(), Some("failed" | "partial")) {
                        kept.push(file);
                    }
                }
                Ok(FailedFiles(kept))
            }
        }
        d.deserialize_seq(Keep)
    }
}

/// `shard-I-of-N.json`: (I, N).
fn parse_name(path: &Path) -> Option<(u32, u32)> {
    let name = path.file_name()?.to_str()?;
    let rest = name.strip_prefix("shard-")?.strip_suffix(".json")?;
    let (i, n) = rest.split_once("-of-")?;
    Some((i.parse().ok()?, n.parse().ok()?))
}

fn read_report(path: &Path) -> Result<ShardReport, String> {
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    serde_json::from_reader(std::io::BufReader::new(file)).map_err(|e| format!("not a report: {e}"))
}

/// The reports named on the command line: files as given, folders' `shard-I-of-N.json`.
fn candidates(args: &[PathBuf]) -> Result<Vec<PathBuf>, FatalError> {
    let mut out = Vec::new();
    for a in args {
        if a.is_dir() {
            let rd = std::fs::read_dir(a)
                .map_err(|e| FatalError::Other(format!("{}: {e}", a.display())))?;
            let mut found: Vec<PathBuf> = rd
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| parse_name(p).is_some())
                .collect();
            found.sort();
            out.extend(found);
        } else {
            out.push(a.clone());
        }
    }
    Ok(out)
}

// ---- the merged document ----

/// A shard without a usable report.
#[derive(Debug, Clone, serde::Serialize)]
struct MissingShard {
    index: u32,
    reason: String,
}

/// One shard's report, in brief.
#[derive(Debug, Clone, serde::Serialize)]
struct ShardEntry {
    index: u32,
    report: PathBuf,
    host: String,
    backend: String,
    started_unix_s: f64,
    finished_unix_s: f64,
    elapsed_s: f64,
    totals: Totals,
    planned_files: Option<u64>,
    planned_bytes: Option<u64>,
    /// Stopped before every input was done (exit 130).
    cancelled: bool,
}

#[derive(Debug, serde::Serialize)]
struct ShardsSection {
    count: u32,
    by: String,
    balance: String,
    plan: String,
    present: Vec<u32>,
    missing: Vec<MissingShard>,
    /// Present, but stopped before every input was done.
    unfinished: Vec<u32>,
    /// Present, with failed or partly failed files.
    failed: Vec<u32>,
    reports: Vec<ShardEntry>,
}

#[derive(Debug, serde::Serialize)]
struct MergedResult {
    totals: Totals,
    /// The failed and partly failed files of every shard (the report's file records).
    failed_files: Vec<Value>,
}

#[derive(Debug, serde::Serialize)]
struct MergedStatistics {
    /// First shard's start to last shard's report, seconds.
    wall_s: f64,
    /// The longest shard's pipeline time, and the sum over shards.
    elapsed_max_s: f64,
    elapsed_sum_s: f64,
    /// Frames written per second of wall time.
    frames_per_s: f64,
    bytes_in: u64,
    bytes_out: u64,
    /// Sums over the shards of the GPU codec counts (zero where every shard ran on the CPU).
    gpu_encoded_frames: u64,
    gpu_encoded_bytes: u64,
    frames_gpu_decoded: u64,
    frames_decode_fallback: u64,
    /// As in a report, from the added histograms; throughput is per second of wall time and
    /// busy_fraction is busy_s over the shards' thread time.
    stages: Vec<StageSnapshot>,
    latency: StageSnapshot,
}

#[derive(Debug, serde::Serialize)]
struct Merged {
    merged_report_version: u32,
    dicomflow_version: &'static str,
    /// All N shards present and finished.
    complete: bool,
    /// What `report merge` exits with: 0 complete and nothing failed, else 1.
    exit_code: i32,
    shards: ShardsSection,
    result: MergedResult,
    statistics: MergedStatistics,
}

/// Histogram and counters of one stage over the shards.
struct StageSum {
    name: String,
    hist: hdrhistogram::Histogram<u64>,
    count: u64,
    workers: u64,
    busy_s: f64,
    /// Σ elapsed × workers: the thread time the stage's threads had.
    thread_s: f64,
}

impl StageSum {
    fn new(name: &str) -> StageSum {
        StageSum {
            name: name.to_string(),
            hist: new_histogram(),
            count: 0,
            workers: 0,
            busy_s: 0.0,
            thread_s: 0.0,
        }
    }

    fn add(&mut self, s: &StageDoc, elapsed: f64, report: &Path) -> Result<(), FatalError> {
        self.count += s.count;
        self.workers += s.workers;
        self.busy_s += s.busy_s;
        self.thread_s += elapsed * s.workers as f64;
        match &s.histogram {
            Some(e) => {
                let h = hdr::decode(e).map_err(|e| {
                    FatalError::Other(format!("{}: stage {}: {e}", report.display(), s.name))
                })?;
                self.hist.add(&h).map_err(|e| {
                    FatalError::Other(format!("{}: stage {}: {e:?}", report.display(), s.name))
                })
            }
            None if s.count == 0 => Ok(()),
            None => Err(FatalError::Other(format!(
                "{}: stage {} has no histogram (written by an older dicomflow?): its \
                 percentiles cannot be merged; run that shard again",
                report.display(),
                s.name
            ))),
        }
    }

    fn snapshot(&self, wall: f64) -> StageSnapshot {
        let mut s = StageSnapshot::from_histogram(
            self.name.clone(),
            &self.hist,
            self.count,
            self.workers,
            self.busy_s,
            Duration::from_secs_f64(wall.max(0.0)),
        );
        s.busy_fraction = if self.thread_s > 0.0 {
            (self.busy_s / self.thread_s).min(1.0)
        } else {
            0.0
        };
        s.histogram = Some(hdr::encode(&self.hist));
        s
    }
}

/// Merges the reports `paths` of an `expected`-shard run (None: what they say).
fn merge(paths: &[PathBuf], expected: Option<u32>) -> Result<Merged, FatalError> {
    let usage = |m: String| FatalError::Config(m);
    // Read every candidate; a name that says another count is another job's (in a folder).
    let mut read: Vec<(PathBuf, Result<ShardReport, String>)> = Vec::new();
    for p in paths {
        if let (Some(n), Some((_, m))) = (expected, parse_name(p)) {
            if n != m {
                tracing::info!("{}: another shard count, left out", p.display());
                continue;
            }
        }
        read.push((p.clone(), read_report(p)));
    }
    // Files that are no shard report at all stop the merge: they were named by mistake.
    for (path, r) in &read {
        match r {
            Err(why) if parse_name(path).is_none() => {
                return Err(FatalError::Other(format!(
                    "cannot read {}: {why}",
                    path.display()
                )))
            }
            Ok(r) if r.shard.is_none() => {
                return Err(usage(format!(
                    "{} is not a shard's report (no shard section; was it written by \
                     `run --shard`?)",
                    path.display()
                )))
            }
            _ => {}
        }
    }
    // The shard count: asked for, or the one the reports (and the unreadable ones' names) say.
    let mut counts: Vec<u32> = read
        .iter()
        .filter_map(|(p, r)| match r {
            Ok(r) => r.shard.as_ref().map(|s| s.count),
            Err(_) => parse_name(p).map(|(_, n)| n),
        })
        .collect();
    counts.sort_unstable();
    counts.dedup();
    let count = match (expected, counts.as_slice()) {
        (Some(n), _) => n,
        (None, [n]) => *n,
        (None, []) => {
            return Err(usage(format!(
                "no shard reports (shard-I-of-N.json) found in {}",
                paths
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )))
        }
        (None, many) => {
            return Err(usage(format!(
                "reports of different shard counts ({}): give --shards N, or keep each job's \
                 reports in its own folder",
                many.iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )))
        }
    };

    // Zero, or more than a plan may have (a corrupt report's count too).
    Shard::new(0, count.into()).map_err(|e| usage(format!("{count} shards: {e}")))?;
    let mut by_index: BTreeMap<u32, (PathBuf, ShardReport)> = BTreeMap::new();
    let mut unreadable: BTreeMap<u32, String> = BTreeMap::new();
    let mut plan: Option<(String, String, String, PathBuf)> = None;
    for (path, r) in read {
        let report = match r {
            Ok(r) => r,
            Err(why) => match parse_name(&path) {
                Some((i, _)) if i < count => {
                    unreadable.insert(i, format!("{}: {why}", path.display()));
                    continue;
                }
                _ => {
                    return Err(FatalError::Other(format!(
                        "cannot read {}: {why}",
                        path.display()
                    )))
                }
            },
        };
        let Some(s) = &report.shard else {
            return Err(usage(format!(
                "{} is not a shard's report (no shard section; was it written by `run --shard`?)",
                path.display()
            )));
        };
        if s.count != count || s.index >= count {
            return Err(usage(format!(
                "{} is shard {} of {}, not of {count}",
                path.display(),
                s.index,
                s.count
            )));
        }
        match &plan {
            None => {
                plan = Some((
                    s.plan.clone(),
                    s.by.clone(),
                    s.balance.clone(),
                    path.clone(),
                ))
            }
            Some((p, _, _, first)) if *p != s.plan => {
                return Err(usage(format!(
                    "{} and {} come from different plans ({} and {p}): their shards were cut \
                     from other inputs, another manifest or another --shard-by, and do not add up",
                    path.display(),
                    first.display(),
                    s.plan
                )))
            }
            Some(_) => {}
        }
        if let Some((other, _)) = by_index.get(&s.index) {
            let same = |p: &Path| p.canonicalize().ok();
            if same(other) == same(&path) {
                continue;
            }
            return Err(usage(format!(
                "two reports for shard {}: {} and {}",
                s.index,
                other.display(),
                path.display()
            )));
        }
        unreadable.remove(&s.index);
        by_index.insert(s.index, (path, report));
    }

    let (plan, by, balance) = plan.map(|(p, b, bal, _)| (p, b, bal)).unwrap_or_default();
    let missing: Vec<MissingShard> = (0..count)
        .filter(|i| !by_index.contains_key(i))
        .map(|index| MissingShard {
            index,
            reason: unreadable.remove(&index).unwrap_or_else(|| {
                format!(
                    "no report (shard-{index}-of-{count}.json): the task did not run or did not \
                     finish"
                )
            }),
        })
        .collect();

    let mut totals = Totals::default();
    let mut failed_files = Vec::new();
    let mut stages: Vec<StageSum> = StageId::ALL
        .iter()
        .map(|s| StageSum::new(s.name()))
        .collect();
    let mut latency = StageSum::new("latency");
    let (mut start, mut end) = (f64::INFINITY, f64::NEG_INFINITY);
    let (mut elapsed_max, mut elapsed_sum, mut bytes_in, mut bytes_out) = (0f64, 0f64, 0u64, 0u64);
    let mut gpu = GpuSums::default();
    let mut entries = Vec::new();
    let (mut unfinished, mut failed) = (Vec::new(), Vec::new());
    for (&index, (path, r)) in &mut by_index {
        let s = r
            .shard
            .as_ref()
            .ok_or_else(|| usage("no shard section".into()))?;
        let t = &r.result.totals;
        totals.add(t);
        failed_files.append(&mut r.result.files.0);
        let elapsed = r.statistics.elapsed;
        for doc in &r.statistics.stages {
            let Some(sum) = stages.iter_mut().find(|x| x.name == doc.name) else {
                continue; // a stage this build does not know
            };
            sum.add(doc, elapsed, path)?;
        }
        latency.add(&r.statistics.latency, elapsed, path)?;
        start = start.min(s.started_unix_s);
        end = end.max(s.finished_unix_s);
        elapsed_max = elapsed_max.max(elapsed);
        elapsed_sum += elapsed;
        bytes_in += r.statistics.bytes_in;
        bytes_out += r.statistics.bytes_out;
        gpu.add(&r.statistics);
        let cancelled = r.result.cancelled || t.files_cancelled > 0;
        if cancelled {
            unfinished.push(index);
        }
        if t.files_failed + t.files_partial > 0 {
            failed.push(index);
        }
        entries.push(ShardEntry {
            index,
            report: path.clone(),
            host: s.host.clone(),
            backend: r.backend.name.clone(),
            started_unix_s: s.started_unix_s,
            finished_unix_s: s.finished_unix_s,
            elapsed_s: elapsed,
            totals: *t,
            planned_files: s.planned_files,
            planned_bytes: s.planned_bytes,
            cancelled,
        });
    }
    let wall = if end >= start { end - start } else { 0.0 };
    let complete = missing.is_empty() && unfinished.is_empty();
    let exit_code = if complete && failed.is_empty() { 0 } else { 1 };
    Ok(Merged {
        merged_report_version: MERGED_REPORT_VERSION,
        dicomflow_version: env!("CARGO_PKG_VERSION"),
        complete,
        exit_code,
        shards: ShardsSection {
            count,
            by,
            balance,
            plan,
            present: by_index.keys().copied().collect(),
            missing,
            unfinished,
            failed,
            reports: entries,
        },
        result: MergedResult {
            totals,
            failed_files,
        },
        statistics: MergedStatistics {
            wall_s: wall,
            elapsed_max_s: elapsed_max,
            elapsed_sum_s: elapsed_sum,
            frames_per_s: totals.frames_written as f64 / wall.max(1e-9),
            bytes_in,
            bytes_out,
            gpu_encoded_frames: gpu.encoded_frames,
            gpu_encoded_bytes: gpu.encoded_bytes,
            frames_gpu_decoded: gpu.decoded,
            frames_decode_fallback: gpu.fallback,
            stages: stages.iter().map(|s| s.snapshot(wall)).collect(),
            latency: latency.snapshot(wall),
        },
    })
}

/// The GPU codec counts added over the shards.
#[derive(Default)]
struct GpuSums {
    encoded_frames: u64,
    encoded_bytes: u64,
    decoded: u64,
    fallback: u64,
}

impl GpuSums {
    fn add(&mut self, st: &StatisticsDoc) {
        self.encoded_frames += st.gpu_encoded_frames;
        self.encoded_bytes += st.gpu_encoded_bytes;
        if let Some(g) = &st.gpu {
            self.decoded += g.frames_gpu_decoded;
            self.fallback += g.frames_decode_fallback;
        }
    }
}

/// What the merge says on stderr: the shards' state, the totals, the stages, the failures.
fn summary(m: &Merged) -> String {
    let mut s = String::new();
    let sh = &m.shards;
    let _ = writeln!(
        s,
        "dicomflow: merged {} of {} shard report(s) (by {}, plan {}){}",
        sh.present.len(),
        sh.count,
        if sh.by.is_empty() { "?" } else { &sh.by },
        if sh.plan.is_empty() { "?" } else { &sh.plan },
        if m.complete { "" } else { ": incomplete" }
    );
    for x in &sh.missing {
        let _ = writeln!(
            s,
            "  missing: shard {}: {}; run index {} again with --skip-existing",
            x.index, x.reason, x.index
        );
    }
    for i in &sh.unfinished {
        let _ = writeln!(
            s,
            "  unfinished: shard {i}: stopped before every input was done; run index {i} again \
             with --skip-existing"
        );
    }
    let t = &m.result.totals;
    let _ = writeln!(
        s,
        "  {} file(s): {} ok, {} failed, {} partial, {} skipped, {} cancelled",
        t.files, t.files_ok, t.files_failed, t.files_partial, t.files_skipped, t.files_cancelled
    );
    let st = &m.statistics;
    let _ = writeln!(
        s,
        "  frames: {} written, {} already present, {} failed; output {:.1} MB; wall {:.2} s \
         ({:.1} frames/s over the shards)",
        t.frames_written,
        t.frames_existing,
        t.frames_failed,
        t.output_bytes as f64 / 1e6,
        st.wall_s,
        st.frames_per_s
    );
    if st.frames_gpu_decoded + st.frames_decode_fallback + st.gpu_encoded_frames > 0 {
        let _ = writeln!(
            s,
            "  GPU codecs: {} frame(s) decoded on a GPU ({} taken over by the CPU decoder), {} \
             compressed on a GPU ({:.1} MB)",
            st.frames_gpu_decoded,
            st.frames_decode_fallback,
            st.gpu_encoded_frames,
            st.gpu_encoded_bytes as f64 / 1e6
        );
    }
    let _ = writeln!(
        s,
        "  {:<13} {:>8} {:>9} {:>9} {:>9} {:>9} {:>6}",
        "stage", "slices", "p50 ms", "p95 ms", "p99 ms", "max ms", "busy"
    );
    for x in st
        .stages
        .iter()
        .chain([&st.latency])
        .filter(|x| x.count > 0)
    {
        let _ = writeln!(
            s,
            "  {:<13} {:>8} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>5.0}%",
            x.name,
            x.count,
            x.p50_ms,
            x.p95_ms,
            x.p99_ms,
            x.max_ms,
            x.busy_fraction * 100.0
        );
    }
    s.push_str(&failures(m));
    s
}

/// One line per failure, under a heading; empty when nothing failed.
fn failures(m: &Merged) -> String {
    let mut s = String::new();
    if m.result.failed_files.is_empty() {
        return s;
    }
    let _ = writeln!(s, "  failed:");
    for f in &m.result.failed_files {
        let path = f["path"].as_str().unwrap_or("?");
        let list = f["failures"].as_array().cloned().unwrap_or_default();
        for x in list {
            let frame = x["frame"]
                .as_u64()
                .map(|n| format!(" (frame {})", n + 1))
                .unwrap_or_default();
            let _ = writeln!(
                s,
                "    {path}{frame}: {}: {}",
                x["stage"].as_str().unwrap_or("?"),
                x["reason"].as_str().unwrap_or("?")
            );
        }
    }
    s
}

/// Runs `report merge`.
pub fn execute(args: &MergeArgs, quiet: bool) -> Result<i32, FatalError> {
    let paths = candidates(&args.reports)?;
    if paths.is_empty() && args.shards.is_none() {
        return Err(FatalError::Config(format!(
            "no shard reports (shard-I-of-N.json) in {}; give --shards N to name the missing ones",
            args.reports
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    let merged = merge(&paths, args.shards)?;
    if let Some(out) = &args.output {
        let bytes = serde_json::to_vec_pretty(&merged)
            .map_err(|e| FatalError::Other(format!("merged report: {e}")))?;
        dicomflow::output::atomic::write_atomic(out, &bytes)
            .map_err(|e| FatalError::Other(format!("{}: {e}", out.display())))?;
    }
    if quiet {
        // -q keeps what is wrong: missing and unfinished shards, failed files.
        let full = summary(&merged);
        for line in full.lines().filter(|l| {
            l.starts_with("  missing") || l.starts_with("  unfinished") || l.starts_with("    ")
        }) {
            eprintln!("{line}");
        }
    } else {
        eprint!("{}", summary(&merged));
    }
    Ok(merged.exit_code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn hist(values: &[u64]) -> Value {
        let mut h = new_histogram();
        for &v in values {
            h.record(v).unwrap();
        }
        serde_json::to_value(hdr::encode(&h)).unwrap()
    }

    /// A shard's report with the fields the merge reads.
    fn report(index: u32, count: u32, plan: &str, encode_us: &[u64], failed: bool) -> Value {
        let stage = |name: &str, values: &[u64]| {
            json!({"name": name, "count": values.len(), "workers": 2, "busy_s": 0.5,
                   "histogram": hist(values)})
        };
        let stages: Vec<Value> = StageId::ALL
            .iter()
            .map(|s| {
                if *s == StageId::Encode {
                    stage(s.name(), encode_us)
                } else {
                    stage(s.name(), &[])
                }
            })
            .collect();
        let mut files = vec![json!({"path": format!("ok-{index}.dcm"), "status": "ok",
                                    "outputs": [], "failures": []})];
        if failed {
            files.push(
                json!({"path": format!("bad-{index}.dcm"), "status": "failed",
                "outputs": [], "failures": [{"frame": null, "stage": "decode", "reason": "cut"}]}),
            );
        }
        json!({
            "report_version": 1,
            "shard": {"index": index, "count": count, "by": "path", "balance": "hash",
                      "plan": plan, "host": "node", "started_unix_s": 100.0 + index as f64,
                      "finished_unix_s": 110.0 + index as f64, "planned_files": null,
                      "planned_bytes": null},
            "backend": {"name": "cpu"},
            "result": {"files": files, "cancelled": false,
                "totals": {"files": 1 + failed as u64, "files_ok": 1,
                    "files_failed": failed as u64, "files_partial": 0, "files_skipped": 0,
                    "files_cancelled": 0, "frames_written": encode_us.len(),
                    "frames_existing": 0, "frames_failed": 0, "output_bytes": 1000}},
            "statistics": {"elapsed": 10.0, "stages": stages, "latency": stage("latency", encode_us),
                           "bytes_in": 10, "bytes_out": 20,
                           "gpu_encoded_frames": 3 * index, "gpu_encoded_bytes": 1000 * index,
                           "gpu": if index == 0 { Value::Null } else {
                               json!({"frames_gpu_decoded": 5 * index, "frames_decode_fallback": index})
                           }}
        })
    }

    fn write(dir: &Path, name: &str, v: &Value) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, serde_json::to_vec(v).unwrap()).unwrap();
        p
    }

    #[test]
    fn merges_histograms_not_percentiles_and_names_what_is_missing() {
        let dir = std::env::temp_dir().join(format!("dicomflow-merge-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // Shard 0: 90 fast slices; shard 1: 10 slow ones. The averaged p95 of the shards
        // would be ~(100 + 10000)/2 µs; the merged histogram's p95 is that of all 100 slices.
        let fast: Vec<u64> = vec![100; 90];
        let slow: Vec<u64> = vec![10_000; 10];
        write(&dir, "shard-0-of-3.json", &report(0, 3, "p", &fast, false));
        write(&dir, "shard-1-of-3.json", &report(1, 3, "p", &slow, true));
        std::fs::write(dir.join("notes.txt"), "not a report").unwrap();
        let m = merge(&candidates(std::slice::from_ref(&dir)).unwrap(), None).unwrap();
        assert_eq!(m.shards.present, [0, 1]);
        assert_eq!(m.shards.missing.len(), 1);
        assert_eq!(m.shards.missing[0].index, 2);
        assert_eq!(m.shards.failed, [1]);
        assert!(!m.complete);
        assert_eq!(m.exit_code, 1);
        assert_eq!(m.result.totals.files, 3);
        assert_eq!(m.result.totals.frames_written, 100);
        assert_eq!(m.result.failed_files.len(), 1);
        let enc = &m.statistics.stages[StageId::Encode as usize];
        assert_eq!(enc.count, 100);
        assert_eq!(enc.workers, 4);
        assert!((enc.p50_ms - 0.1).abs() < 0.001, "{}", enc.p50_ms);
        assert!((enc.p95_ms - 10.0).abs() < 0.1, "{}", enc.p95_ms);
        // busy 0.5 + 0.5 s over 2 × (10 s × 2 workers).
        assert!(
            (enc.busy_fraction - 0.025).abs() < 1e-9,
            "{}",
            enc.busy_fraction
        );
        assert!((m.statistics.wall_s - 11.0).abs() < 1e-9);
        // GPU codec counts add up (shard 0 ran on the CPU: no gpu section).
        let st = &m.statistics;
        assert_eq!(
            (st.gpu_encoded_frames, st.gpu_encoded_bytes),
            (3, 1000),
            "encoded"
        );
        assert_eq!((st.frames_gpu_decoded, st.frames_decode_fallback), (5, 1));
        let text = summary(&m);
        assert!(
            text.contains("GPU codecs: 5 frame(s) decoded on a GPU (1 taken over"),
            "{text}"
        );
        assert!(text.contains("missing: shard 2"), "{text}");
        assert!(text.contains("bad-1.dcm: decode: cut"), "{text}");

        // With the last shard (and a corrupt extra file named like a report) it is complete,
        // though one file failed: still exit 1.
        write(&dir, "shard-2-of-3.json", &report(2, 3, "p", &[50], false));
        let m = merge(&candidates(std::slice::from_ref(&dir)).unwrap(), None).unwrap();
        assert!(m.complete && m.shards.missing.is_empty());
        assert_eq!(m.exit_code, 1);
        write(&dir, "shard-1-of-3.json", &report(1, 3, "p", &slow, false));
        let m = merge(&candidates(std::slice::from_ref(&dir)).unwrap(), None).unwrap();
        assert_eq!((m.complete, m.exit_code), (true, 0));

        // An unreadable report is named as missing, with its reason.
        std::fs::write(dir.join("shard-1-of-3.json"), "{").unwrap();
        let m = merge(&candidates(std::slice::from_ref(&dir)).unwrap(), None).unwrap();
        assert_eq!(m.shards.missing[0].index, 1);
        assert!(
            m.shards.missing[0].reason.contains("not a report"),
            "{:?}",
            m.shards.missing
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn refuses_reports_that_do_not_belong_together() {
        let dir = std::env::temp_dir().join(format!("dicomflow-merge-bad-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let a = write(&dir, "a.json", &report(0, 2, "p", &[1], false));
        let other_plan = write(&dir, "b.json", &report(1, 2, "q", &[1], false));
        let other_count = write(&dir, "c.json", &report(1, 4, "p", &[1], false));
        let twin = write(&dir, "d.json", &report(0, 2, "p", &[1], false));
        let mut plain = report(0, 2, "p", &[1], false);
        plain.as_object_mut().unwrap().remove("shard");
        let plain = write(&dir, "e.json", &plain);
        let msg = |paths: &[&PathBuf], n: Option<u32>| {
            let v: Vec<PathBuf> = paths.iter().map(|p| (*p).clone()).collect();
            match merge(&v, n) {
                Err(e) => e.to_string(),
                Ok(_) => "merged".into(),
            }
        };
        assert!(msg(&[&a, &other_plan], None).contains("different plans"));
        assert!(msg(&[&a, &other_count], None).contains("different shard counts"));
        assert!(msg(&[&a, &other_count], Some(2)).contains("not of 2"));
        assert!(msg(&[&a, &twin], None).contains("two reports for shard 0"));
        assert!(msg(&[&a, &a], None) == "merged");
        assert!(msg(&[&plain], None).contains("not a shard's report"));
        assert!(msg(&[&a, &plain], None).contains("not a shard's report"));
        assert!(msg(&[&dir.join("empty")], None).contains("cannot read"));
        std::fs::create_dir_all(dir.join("empty-dir")).unwrap();
        let none = candidates(&[dir.join("empty-dir")]).unwrap();
        assert!(none.is_empty());
        assert!(matches!(merge(&none, None), Err(e) if e.to_string().contains("no shard reports")));
        assert!(msg(&[&dir.join("nothing.json")], None).contains("cannot read"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
