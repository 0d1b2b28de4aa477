//! What the stages report about files and frames, and the collector that turns those events
//! into per-file records, counters and the fail-fast decision.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::backend::BackendInfo;
use crate::error::Stage;
use crate::observe::stats::{ErrorEntry, Stats};
use crate::paths::Escaped;
use crate::pipeline::Sizing;
use crate::render::plan::Window;
use crate::source::live::{Done, LiveInput, Outcome};

/// A stage's report about one file or frame.
#[derive(Debug)]
pub enum Event {
    /// Not DICOM or not an image: listed, not a failure. `id` when the file had one (a
    /// candidate the loader found not to be an image, or a live input).
    Skipped {
        id: Option<usize>,
        path: PathBuf,
        reason: String,
    },
    /// A live input became file `id` (sent before any other event about it).
    Arrived { id: usize, input: LiveInput },
    /// The whole file failed before any frame was produced.
    FileFailed {
        id: Option<usize>,
        path: PathBuf,
        stage: Stage,
        reason: String,
    },
    /// The header was read: `meta.frames_selected` frames will follow as frame events.
    FileStarted {
        id: usize,
        path: PathBuf,
        meta: FileMeta,
    },
    /// A frame's output was written.
    FrameDone {
        id: usize,
        frame: u32,
        output: PathBuf,
        bytes: u64,
        window: Option<Window>,
        device: Option<usize>,
        /// First byte read → output renamed.
        latency: std::time::Duration,
    },
    /// A frame's output already existed (`--skip-existing`).
    FrameExisting {
        id: usize,
        frame: u32,
        output: PathBuf,
    },
    /// A frame failed.
    FrameFailed {
        id: usize,
        frame: u32,
        stage: Stage,
        reason: String,
    },
    /// A frame was decoded despite damage (`--damaged render`): rendered, with a warning.
    FrameWarning {
        id: usize,
        frame: u32,
        warning: String,
    },
    /// A frame was not attempted because the run was cancelled.
    FrameCancelled { id: usize, frame: u32 },
    /// A file found by the scan was not opened because the run was cancelled.
    FileNotStarted { path: PathBuf },
}

impl Event {
    /// The file the event is about, when it has an id.
    pub fn file_id(&self) -> Option<usize> {
        match self {
            Event::FileStarted { id, .. }
            | Event::FrameDone { id, .. }
            | Event::FrameExisting { id, .. }
            | Event::FrameFailed { id, .. }
            | Event::FrameCancelled { id, .. }
            | Event::FrameWarning { id, .. }
            | Event::Arrived { id, .. } => Some(*id),
            Event::FileFailed { id, .. } | Event::Skipped { id, .. } => *id,
            Event::FileNotStarted { .. } => None,
        }
    }
}

/// Header facts kept for the report.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct FileMeta {
    /// Frames in the file.
    pub frames: u32,
    /// Frames the run renders (`render.frames`).
    pub frames_selected: u32,
    pub rows: u32,
    pub cols: u32,
    pub transfer_syntax: String,
    pub photometric: String,
    pub series_uid: Option<String>,
    pub instance_number: Option<i64>,
    pub image_position: Option<[f64; 3]>,
    /// True when stored values were read straight from the file into the slot.
    pub direct_read: bool,
    /// What was wrong with the file but tolerated (see `ImageInfo::warnings`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// Final status of one input file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FileStatus {
    /// Every frame written (or already present).
    Ok,
    /// Not DICOM / not an image.
    Skipped,
    /// Nothing produced.
    Failed,
    /// Some frames written, some failed.
    Partial,
    /// The run was cancelled before this file was finished.
    Cancelled,
}

/// One output file.
#[derive(Debug, Clone, serde::Serialize)]
pub struct OutputRecord {
    pub frame: u32,
    #[serde(serialize_with = "crate::paths::serialize")]
    pub path: PathBuf,
    pub bytes: u64,
    /// True when the file already existed and was kept (`--skip-existing`).
    pub existing: bool,
    pub window: Option<Window>,
    pub device: Option<usize>,
    /// Milliseconds from the first byte read to the output renamed (absent when existing).
    pub latency_ms: Option<f64>,
}

/// One failure.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FailureRecord {
    pub frame: Option<u32>,
    pub stage: Stage,
    pub reason: String,
}

/// What happened to one input file.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FileRecord {
    #[serde(serialize_with = "crate::paths::serialize")]
    pub path: PathBuf,
    pub status: FileStatus,
    /// Reason for a skip.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skip_reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub meta: Option<FileMeta>,
    pub outputs: Vec<OutputRecord>,
    pub failures: Vec<FailureRecord>,
    #[serde(skip)]
    cancelled_frames: u32,
    #[serde(skip)]
    not_started: bool,
}

impl FileRecord {
    fn new(path: PathBuf) -> Self {
        FileRecord {
            path,
            status: FileStatus::Failed,
            skip_reason: None,
            meta: None,
            outputs: Vec::new(),
            failures: Vec::new(),
            cancelled_frames: 0,
            not_started: false,
        }
    }

    /// True once every frame is accounted for (or the file ended before its frames): no
    /// further event can change its status.
    fn complete(&self) -> bool {
        if self.skip_reason.is_some() || self.not_started {
            return true;
        }
        // A failure of the whole file (before or, after a caught panic, during its frames).
        if self.failures.iter().any(|f| f.frame.is_none()) {
            return true;
        }
        let Some(meta) = &self.meta else {
            return false;
        };
        let failed = self.failures.iter().filter(|f| f.frame.is_some()).count();
        self.outputs.len() + failed + self.cancelled_frames as usize >= meta.frames as usize
    }

    fn settle(&mut self) {
        if self.skip_reason.is_some() {
            self.status = FileStatus::Skipped;
            return;
        }
        if self.not_started {
            self.status = FileStatus::Cancelled;
            return;
        }
        let frames = self.meta.as_ref().map(|m| m.frames_selected).unwrap_or(0) as usize;
        let ok = self.outputs.len();
        self.status = if self.failures.is_empty() && self.meta.is_some() && ok == frames {
            FileStatus::Ok
        } else if self.failures.is_empty() && self.cancelled_frames > 0 {
            FileStatus::Cancelled
        } else if ok > 0 {
            FileStatus::Partial
        } else {
            FileStatus::Failed
        };
    }
}

/// The outcome of a run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RunResult {
    pub files: Vec<FileRecord>,
    pub backend: BackendInfo,
    pub sizing: Sizing,
    #[serde(serialize_with = "ser_secs")]
    pub elapsed: Duration,
    pub cancelled: bool,
    pub slot_memory_bytes: u64,
    pub slot_memory_kind: String,
    pub totals: Totals,
    /// Frames rendered per GPU (device ordinal as text); empty for the CPU backend.
    pub frames_per_device: std::collections::BTreeMap<String, u64>,
}

fn ser_secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// Counts over all files. Read back from reports too, to merge the shards of a job.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Totals {
    pub files: usize,
    pub files_ok: usize,
    pub files_failed: usize,
    pub files_partial: usize,
    pub files_skipped: usize,
    pub files_cancelled: usize,
    pub frames_written: usize,
    pub frames_existing: usize,
    pub frames_failed: usize,
    pub output_bytes: u64,
}

impl Totals {
    /// Adds the counts of another run over other files (another shard of the same job).
    pub fn add(&mut self, o: &Totals) {
        self.files += o.files;
        self.files_ok += o.files_ok;
        self.files_failed += o.files_failed;
        self.files_partial += o.files_partial;
        self.files_skipped += o.files_skipped;
        self.files_cancelled += o.files_cancelled;
        self.frames_written += o.frames_written;
        self.frames_existing += o.frames_existing;
        self.frames_failed += o.frames_failed;
        self.output_bytes += o.output_bytes;
    }
}

/// The exit status of a run stopped before every input was done.
pub const EXIT_INTERRUPTED: i32 = 130;

impl RunResult {
    /// Files that failed wholly or partly.
    pub fn failed(&self) -> impl Iterator<Item = &FileRecord> {
        self.files
            .iter()
            .filter(|f| matches!(f.status, FileStatus::Failed | FileStatus::Partial))
    }

    /// Turns the skips of the files `named` picks into failures. A folder walk passes over what
    /// is not DICOM (a README, a DICOMDIR's neighbours); a file the user named as an input was
    /// meant to be rendered, so that it could not be is an error, as it is for `dcm2pnm`.
    /// Returns the failures made, for the error log.
    pub fn fail_skipped(&mut self, named: impl Fn(&std::path::Path) -> bool) -> Vec<ErrorEntry> {
        let mut made = Vec::new();
        for f in self.files.iter_mut() {
            if f.status != FileStatus::Skipped || !named(&f.path) {
                continue;
            }
            f.status = FileStatus::Failed;
            let reason = f
                .skip_reason
                .take()
                .unwrap_or_else(|| "not rendered".into());
            made.push(ErrorEntry {
                path: f.path.clone(),
                stage: Stage::Scan.name().into(),
                reason: reason.clone(),
            });
            f.failures.push(FailureRecord {
                frame: None,
                stage: Stage::Scan,
                reason,
            });
            self.totals.files_skipped = self.totals.files_skipped.saturating_sub(1);
            self.totals.files_failed += 1;
        }
        made
    }

    /// 0 every input done, 1 some inputs failed, 130 (128 + SIGINT, the shell's convention)
    /// stopped (Ctrl-C, SIGTERM, `q`) before every input was done, so a script's `&&` does not
    /// go on with half the outputs; `--skip-existing` completes such a run.
    pub fn exit_code(&self) -> i32 {
        if self.totals.files_failed + self.totals.files_partial > 0 {
            1
        } else if self.cancelled || self.totals.files_cancelled > 0 {
            // `cancelled` too: a stopped scan leaves files it never found, which no count has.
            EXIT_INTERRUPTED
        } else {
            0
        }
    }
}

/// Folds events into records as they arrive.
pub struct Collector {
    by_id: HashMap<usize, FileRecord>,
    others: Vec<FileRecord>,
    fail_fast: bool,
    cancel: Arc<AtomicBool>,
    stats: Arc<Stats>,
    live: Option<LiveRecords>,
    /// How often each (stage, reason) was logged: a setting that fails the same way for every
    /// file is logged a few times, not once per file (the summary counts them all).
    logged: HashMap<(Stage, String), usize>,
    /// Inputs logged under another name (`PipelineOptions::shown_as`).
    shown_as: Vec<(PathBuf, PathBuf)>,
}

/// Identical failures (same stage and reason) logged before the rest are only counted.
const LOGGED_PER_REASON: usize = 3;

/// Distinct failure reasons remembered for that; beyond, every failure is logged (a live run
/// without end keeps bounded memory).
const LOGGED_REASONS: usize = 1024;

/// Failed files a live run keeps for its report; beyond these only the counts grow.
const LIVE_KEPT_FAILURES: usize = 1000;

/// What a run of live inputs keeps: its inputs until they are done, then only their counts
/// (and the first failures), so that a run without end holds bounded memory.
struct LiveRecords {
    done: crossbeam_channel::Sender<Done>,
    inputs: HashMap<usize, LiveInput>,
    settled: Totals,
    frames_per_device: std::collections::BTreeMap<String, u64>,
    /// Failed files kept for the report (already counted in `settled`).
    failures: Vec<FileRecord>,
}

impl Collector {
    pub fn new(fail_fast: bool, cancel: Arc<AtomicBool>, stats: Arc<Stats>) -> Self {
        Collector {
            by_id: HashMap::new(),
            others: Vec::new(),
            fail_fast,
            cancel,
            stats,
            live: None,
            logged: HashMap::new(),
            shown_as: Vec::new(),
        }
    }

    /// Logs the inputs of `names` (file, shown as) under their second name.
    pub fn shown_as(mut self, names: Vec<(PathBuf, PathBuf)>) -> Self {
        self.shown_as = names;
        self
    }

    /// A collector for live inputs: each file, once done, is reported on `done` and folded
    /// into the totals.
    pub fn live(mut self, done: crossbeam_channel::Sender<Done>) -> Self {
        self.live = Some(LiveRecords {
            done,
            inputs: HashMap::new(),
            settled: Totals::default(),
            frames_per_device: Default::default(),
            failures: Vec::new(),
        });
        self
    }

    /// For a live run: sends file `id`'s outcome once it is complete and forgets it (failed
    /// files stay for the report, up to [`LIVE_KEPT_FAILURES`]).
    fn settle_live(&mut self, id: usize) {
        let Some(live) = self.live.as_mut() else {
            return;
        };
        if !self.by_id.get(&id).is_some_and(FileRecord::complete) {
            return;
        }
        let Some(mut record) = self.by_id.remove(&id) else {
            return;
        };
        record.settle();
        add_to_totals(&record, &mut live.settled, &mut live.frames_per_device);
        if let Some(input) = live.inputs.remove(&id) {
            let outcome = match record.status {
                FileStatus::Ok => Outcome::Rendered,
                FileStatus::Skipped => Outcome::Skipped,
                FileStatus::Failed | FileStatus::Partial => Outcome::Failed,
                FileStatus::Cancelled => Outcome::Cancelled,
            };
            let _ = live.done.send(Done {
                input,
                outcome,
                at: std::time::Instant::now(),
            });
        }
        let failed = matches!(record.status, FileStatus::Failed | FileStatus::Partial);
        if failed && live.failures.len() < LIVE_KEPT_FAILURES {
            record.outputs.sort_by_key(|o| o.frame);
            live.failures.push(record);
        }
    }

    /// True for an event about a live file already settled (a frame still in flight when a
    /// caught panic failed its file): it changes nothing any more.
    fn is_late(&self, event: &Event) -> bool {
        match (&self.live, event) {
            (_, Event::Arrived { .. }) => false,
            (Some(live), event) => event
                .file_id()
                .is_some_and(|id| !live.inputs.contains_key(&id)),
            (None, _) => false,
        }
    }

    fn failure(&mut self, path: &std::path::Path, stage: Stage, reason: &str) {
        let shown = self.shown(path);
        let path = shown.as_path();
        self.stats.push_error(ErrorEntry {
            path: path.to_path_buf(),
            stage: stage.name().into(),
            reason: reason.into(),
        });
        let seen = if self.logged.len() < LOGGED_REASONS {
            let n = self.logged.entry((stage, reason.to_string())).or_insert(0);
            *n += 1;
            *n
        } else {
            self.logged
                .get_mut(&(stage, reason.to_string()))
                .map(|n| {
                    *n += 1;
                    *n
                })
                .unwrap_or(1)
        };
        if seen <= LOGGED_PER_REASON {
            tracing::warn!(path = %Escaped(path), %stage, "{reason}");
        } else if seen == LOGGED_PER_REASON + 1 {
            tracing::warn!(
                %stage,
                "{reason}: more files fail the same way; the summary counts them"
            );
        }
        if self.fail_fast {
            self.cancel.store(true, Ordering::Relaxed);
        }
    }

    /// The name `path` is shown by (`PipelineOptions::shown_as`), in logs and records alike.
    fn shown(&self, path: &std::path::Path) -> PathBuf {
        self.shown_as
            .iter()
            .find(|(file, _)| file == path)
            .map_or(path, |(_, shown)| shown.as_path())
            .to_path_buf()
    }

    fn record(&mut self, id: usize, path: Option<&PathBuf>) -> &mut FileRecord {
        let path = path.map(|p| self.shown(p)).unwrap_or_default();
        self.by_id
            .entry(id)
            .or_insert_with(|| FileRecord::new(path))
    }

    /// File `id`'s record, or a new record of its own for a file without an id.
    fn record_or_new(&mut self, id: Option<usize>, path: PathBuf) -> &mut FileRecord {
        match id {
            Some(id) => self.record(id, Some(&path)),
            None => {
                let path = self.shown(&path);
                self.others.push(FileRecord::new(path));
                self.others
                    .last_mut()
                    .unwrap_or_else(|| unreachable!("just pushed"))
            }
        }
    }

    /// Takes one event into account.
    pub fn handle(&mut self, event: Event) {
        if self.is_late(&event) {
            tracing::debug!("late event for a file already done: {event:?}");
            return;
        }
        let id = event.file_id();
        self.take(event);
        if let Some(id) = id {
            self.settle_live(id);
        }
    }

    fn take(&mut self, event: Event) {
        let t = &self.stats.totals;
        match event {
            Event::Arrived { id, input } => {
                if let Some(live) = self.live.as_mut() {
                    live.inputs.insert(id, input);
                }
            }
            Event::Skipped { id, path, reason } => {
                t.files_skipped.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(path = %Escaped(&path), "skipped: {reason}");
                self.record_or_new(id, path).skip_reason = Some(reason);
            }
            Event::FileFailed {
                id,
                path,
                stage,
                reason,
            } => {
                t.files_failed.fetch_add(1, Ordering::Relaxed);
                self.failure(&path, stage, &reason);
                self.record_or_new(id, path).failures.push(FailureRecord {
                    frame: None,
                    stage,
                    reason,
                });
            }
            Event::FileStarted { id, path, meta } => {
                t.frames_planned
                    .fetch_add(meta.frames_selected as u64, Ordering::Relaxed);
                self.record(id, Some(&path)).meta = Some(meta);
            }
            Event::FrameDone {
                id,
                frame,
                output,
                bytes,
                window,
                device,
                latency,
            } => {
                t.frames_done.fetch_add(1, Ordering::Relaxed);
                t.bytes_out.fetch_add(bytes, Ordering::Relaxed);
                self.record(id, None).outputs.push(OutputRecord {
                    frame,
                    path: output,
                    bytes,
                    existing: false,
                    window,
                    device,
                    latency_ms: Some(latency.as_secs_f64() * 1e3),
                });
            }
            Event::FrameExisting { id, frame, output } => {
                t.frames_existing.fetch_add(1, Ordering::Relaxed);
                let bytes = std::fs::metadata(&output).map(|m| m.len()).unwrap_or(0);
                self.record(id, None).outputs.push(OutputRecord {
                    frame,
                    path: output,
                    bytes,
                    existing: true,
                    window: None,
                    device: None,
                    latency_ms: None,
                });
            }
            Event::FrameFailed {
                id,
                frame,
                stage,
                reason,
            } => {
                t.frames_failed.fetch_add(1, Ordering::Relaxed);
                let path = self.record(id, None).path.clone();
                self.failure(&path, stage, &format!("frame {}: {reason}", frame + 1));
                self.record(id, None).failures.push(FailureRecord {
                    frame: Some(frame),
                    stage,
                    reason,
                });
            }
            Event::FrameWarning { id, frame, warning } => {
                let rec = self.record(id, None);
                tracing::warn!(path = %rec.path.display(), "frame {}: {warning}", frame + 1);
                if let Some(meta) = rec.meta.as_mut() {
                    meta.warnings
                        .push(format!("frame {}: {warning}", frame + 1));
                }
            }
            Event::FrameCancelled { id, .. } => {
                self.record(id, None).cancelled_frames += 1;
            }
            Event::FileNotStarted { path } => {
                let mut r = FileRecord::new(self.shown(&path));
                r.not_started = true;
                self.others.push(r);
            }
        }
    }

    /// Settles every record and computes totals.
    pub fn finish(
        mut self,
        backend: BackendInfo,
        sizing: Sizing,
        elapsed: Duration,
        slot_memory_bytes: u64,
        slot_memory_kind: &str,
    ) -> RunResult {
        let mut files: Vec<FileRecord> = self.by_id.drain().map(|(_, r)| r).collect();
        files.append(&mut self.others);
        let (mut totals, mut frames_per_device, kept) = match self.live.take() {
            Some(live) => (live.settled, live.frames_per_device, live.failures),
            None => Default::default(),
        };
        for f in &mut files {
            f.settle();
            f.outputs.sort_by_key(|o| o.frame);
            add_to_totals(f, &mut totals, &mut frames_per_device);
        }
        // Failed files a live run kept are already in its totals.
        files.extend(kept);
        files.sort_by(|a, b| {
            fn key(r: &FileRecord) -> crate::source::series::SeriesKey<'_> {
                crate::source::series::SeriesKey {
                    series_uid: r.meta.as_ref().and_then(|m| m.series_uid.as_deref()),
                    instance_number: r.meta.as_ref().and_then(|m| m.instance_number),
                    position: r.meta.as_ref().and_then(|m| m.image_position),
                    path: &r.path,
                }
            }
            // Images grouped by series first; skipped and failed files after, by path.
            (a.meta.is_none(), a.status == FileStatus::Skipped)
                .cmp(&(b.meta.is_none(), b.status == FileStatus::Skipped))
                .then_with(|| crate::source::series::compare(&key(a), &key(b)))
        });
        RunResult {
            files,
            backend,
            sizing,
            elapsed,
            cancelled: self.cancel.load(Ordering::Relaxed),
            slot_memory_bytes,
            slot_memory_kind: slot_memory_kind.to_string(),
            totals,
            frames_per_device,
        }
    }
}

/// Adds one settled file to `totals` (and its frames to the per-device counts).
fn add_to_totals(
    f: &FileRecord,
    totals: &mut Totals,
    frames_per_device: &mut std::collections::BTreeMap<String, u64>,
) {
    for o in f.outputs.iter().filter(|o| !o.existing) {
        if let Some(d) = o.device {
            *frames_per_device.entry(d.to_string()).or_insert(0u64) += 1;
        }
    }
    totals.files += 1;
    match f.status {
        FileStatus::Ok => totals.files_ok += 1,
        FileStatus::Failed => totals.files_failed += 1,
        FileStatus::Partial => totals.files_partial += 1,
        FileStatus::Skipped => totals.files_skipped += 1,
        FileStatus::Cancelled => totals.files_cancelled += 1,
    }
    for o in &f.outputs {
        if o.existing {
            totals.frames_existing += 1;
        } else {
            totals.frames_written += 1;
            totals.output_bytes += o.bytes;
        }
    }
    totals.frames_failed += f.failures.iter().filter(|x| x.frame.is_some()).count();
}
