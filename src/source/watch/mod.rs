//! `dicomflow watch DIR…`: render what the folders hold (keeping outputs that exist), then
//! every DICOM file written or moved into them, once it is complete. Events come from inotify
//! (the `notify` crate): a closed file or one renamed in is a candidate, a folder created or
//! moved in is walked (inotify says nothing of the files a moved folder brings, nor of files
//! created in a new folder before its watch exists), and a periodic rescan catches whatever
//! events were lost. [`tracker`] decides when a file is ready and that each version is
//! rendered once.

pub mod tracker;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use notify::event::{AccessKind, AccessMode, CreateKind, ModifyKind, RenameMode};
use notify::{EventKind, RecursiveMode, Watcher as _};

use crate::source::live::{Feed, LiveInput};
use tracker::{Ready, Tracker, Version};

/// How the watcher behaves (config `[watch]`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct WatchOptions {
    /// A file must stay unchanged this long before it is checked.
    #[serde(serialize_with = "crate::source::live::serialize_secs")]
    pub settle: Duration,
    /// A file still incomplete this long after its last change is rendered as it is (and
    /// reported by the pipeline when it cannot be read).
    #[serde(serialize_with = "crate::source::live::serialize_secs")]
    pub give_up: Duration,
    /// Every folder is walked again this often, for events the kernel dropped (zero: never).
    #[serde(serialize_with = "crate::source::live::serialize_secs")]
    pub rescan: Duration,
    /// The decoder's limits, for the completeness check (the pipeline's `max_frame_mib`).
    #[serde(skip)]
    pub limits: crate::decode::DecodeLimits,
}

impl Default for WatchOptions {
    fn default() -> Self {
        WatchOptions {
            settle: Duration::from_millis(300),
            give_up: Duration::from_secs(60),
            rescan: Duration::from_secs(30),
            limits: crate::decode::DecodeLimits {
                max_frame_bytes: 1024 << 20,
                ..Default::default()
            },
        }
    }
}

/// Why watching cannot start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WatchError {
    /// A folder to watch is missing or not a folder.
    #[error("{path}: not a folder that can be watched ({reason})")]
    NotAFolder { path: PathBuf, reason: String },
    /// inotify refused (too many watches, no permission, ...).
    #[error("cannot watch {path}: {source}")]
    Notify {
        path: PathBuf,
        source: notify::Error,
    },
    /// The watcher thread could not start.
    #[error("cannot start the watch thread: {0}")]
    Thread(std::io::Error),
}

/// A running watcher.
pub struct Watcher {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Watcher {
    /// Starts watching `roots` (paths under `exclude`, the output folder, are ignored);
    /// ready files go to `feed`.
    pub fn start(
        roots: &[PathBuf],
        exclude: &[PathBuf],
        feed: Arc<Feed>,
        options: WatchOptions,
    ) -> Result<Watcher, WatchError> {
        let mut canonical = Vec::new();
        for r in roots {
            let c = r.canonicalize().map_err(|e| WatchError::NotAFolder {
                path: r.clone(),
                reason: e.to_string(),
            })?;
            if !c.is_dir() {
                return Err(WatchError::NotAFolder {
                    path: r.clone(),
                    reason: "not a directory".into(),
                });
            }
            canonical.push(c);
        }
        let exclude: Vec<PathBuf> = exclude
            .iter()
            .filter_map(|p| p.canonicalize().ok())
            .collect();
        let (tx, rx) = crossbeam_channel::unbounded();
        let mut notifier = notify::recommended_watcher(move |res| {
            let _ = tx.send(res);
        })
        .map_err(|source| WatchError::Notify {
            path: roots.first().cloned().unwrap_or_default(),
            source,
        })?;
        // Watches first, then the first walk: a file written in between is seen twice at
        // worst (and rendered once), never missed.
        for (root, given) in canonical.iter().zip(roots) {
            notifier
                .watch(root, RecursiveMode::Recursive)
                .map_err(|source| WatchError::Notify {
                    path: given.clone(),
                    source,
                })?;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let mut state = State {
            roots: canonical,
            exclude,
            tracker: Tracker::new(options.settle, options.give_up),
            feed,
            options,
        };
        let thread = {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("watch".into())
                .spawn(move || {
                    // Dropping the notifier ends its inotify thread.
                    let _keep = notifier;
                    state.run(&rx, &stop);
                })
                .map_err(WatchError::Thread)?
        };
        Ok(Watcher {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops watching; files not yet handed on wait for the next start.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Stops and waits for the watch thread.
    pub fn join(mut self) {
        self.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Whether a settled file can be handed on: a complete DICOM file, or a file that is plainly
/// not DICOM (the pipeline lists it as skipped). A file too short for the DICOM preamble may
/// be one still being written.
fn completeness(path: &Path, len: u64, limits: crate::decode::DecodeLimits) -> Result<(), String> {
    if len >= 132 {
        if let Ok(crate::decode::Probe::NotDicom(_)) = crate::decode::probe(path) {
            return Ok(());
        }
    }
    crate::decode::check_complete(path, limits)
}

/// How often the watch thread looks at due files and the stop flag.
const TICK: Duration = Duration::from_millis(25);

struct State {
    roots: Vec<PathBuf>,
    exclude: Vec<PathBuf>,
    tracker: Tracker,
    feed: Arc<Feed>,
    options: WatchOptions,
}

impl State {
    fn run(
        &mut self,
        events: &crossbeam_channel::Receiver<notify::Result<notify::Event>>,
        stop: &AtomicBool,
    ) {
        let roots = self.roots.clone();
        for root in &roots {
            self.walk(root, true);
        }
        let mut next_rescan = Instant::now() + self.options.rescan;
        while !stop.load(Ordering::Relaxed) {
            match events.recv_timeout(TICK) {
                Ok(ev) => {
                    self.event(ev);
                    // Take everything already queued before looking at due files.
                    while let Ok(ev) = events.try_recv() {
                        self.event(ev);
                    }
                }
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return,
            }
            if !self.options.rescan.is_zero() && Instant::now() >= next_rescan {
                for root in &roots {
                    self.walk(root, false);
                }
                next_rescan = Instant::now() + self.options.rescan;
            }
            self.hand_on_ready(stop);
        }
    }

    fn excluded(&self, path: &Path) -> bool {
        self.exclude.iter().any(|e| path.starts_with(e))
    }

    /// One inotify event.
    fn event(&mut self, ev: notify::Result<notify::Event>) {
        let ev = match ev {
            Ok(ev) => ev,
            Err(e) => {
                // Watches could not be added (limit reached) or the queue overflowed: the
                // rescans still find the files.
                tracing::warn!("watch: {e}; relying on rescans");
                return;
            }
        };
        if ev.need_rescan() {
            tracing::warn!("watch: events were lost (inotify queue overflow); rescanning");
            let roots = self.roots.clone();
            for root in &roots {
                self.walk(root, false);
            }
            return;
        }
        match ev.kind {
            // A writer closed the file, or it appeared by a link: check it once settled.
            EventKind::Access(AccessKind::Close(AccessMode::Write))
            | EventKind::Create(CreateKind::File)
            | EventKind::Modify(ModifyKind::Metadata(_)) => {
                for p in &ev.paths {
                    self.seen(p, false);
                }
            }
            // Renamed in: a file, or a folder with everything in it.
            EventKind::Modify(ModifyKind::Name(RenameMode::To))
            | EventKind::Modify(ModifyKind::Name(RenameMode::Both)) => {
                if let Some(p) = ev.paths.last() {
                    self.seen_or_walk(p);
                }
            }
            EventKind::Create(CreateKind::Folder) => {
                for p in &ev.paths {
                    self.walk(p, false);
                }
            }
            EventKind::Modify(ModifyKind::Name(RenameMode::From)) | EventKind::Remove(_) => {
                for p in &ev.paths {
                    self.tracker.forget(p);
                }
            }
            _ => {}
        }
    }

    fn seen_or_walk(&mut self, path: &Path) {
        if path.is_dir() {
            self.walk(path, false);
        } else {
            self.seen(path, false);
        }
    }

    /// A regular file (or a link to one) to track.
    fn seen(&mut self, path: &Path, first: bool) {
        if self.excluded(path) {
            return;
        }
        match std::fs::metadata(path) {
            Ok(meta) if meta.is_file() => {
                let (version, age) = Version::of(&meta);
                self.tracker.saw(path, version, age, Instant::now(), first);
            }
            _ => {}
        }
    }

    /// Every file under `dir` (real folders only, as the scan of `run`).
    fn walk(&mut self, dir: &Path, first: bool) {
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            if self.excluded(&d) {
                continue;
            }
            let Ok(entries) = std::fs::read_dir(&d) else {
                continue;
            };
            for entry in entries.flatten() {
                let Ok(ft) = entry.file_type() else { continue };
                let path = entry.path();
                if ft.is_dir() {
                    stack.push(path);
                } else {
                    self.seen(&path, first);
                }
            }
        }
    }

    /// The file's path relative to the watched folder it is under; with several folders it
    /// begins with that folder's own name, as `run a b -o OUT` mirrors them (so that `a/x.dcm`
    /// and `b/x.dcm` do not both want `OUT/x.png`).
    fn rel(&self, path: &Path) -> PathBuf {
        let named = self.roots.len() > 1;
        self.roots
            .iter()
            .find_map(|r| {
                let rest = path.strip_prefix(r).ok()?;
                Some(match r.file_name().filter(|_| named) {
                    Some(name) => Path::new(name).join(rest),
                    None => rest.to_path_buf(),
                })
            })
            .unwrap_or_else(|| PathBuf::from(path.file_name().unwrap_or(path.as_os_str())))
    }

    fn origin(&self, path: &Path) -> Arc<str> {
        let root = self.roots.iter().find(|r| path.starts_with(r));
        Arc::from(
            root.map(|r| r.display().to_string())
                .unwrap_or_default()
                .as_str(),
        )
    }

    /// Checks the files that are due and hands on those that are ready.
    fn hand_on_ready(&mut self, stop: &AtomicBool) {
        for path in self.tracker.due(Instant::now()) {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            let version = std::fs::metadata(&path)
                .ok()
                .filter(|m| m.is_file())
                .map(|m| Version::of(&m).0);
            let complete = match version {
                Some(v) => completeness(&path, v.len, self.options.limits),
                None => Ok(()),
            };
            let Some(ready) = self
                .tracker
                .checked(&path, version, complete, Instant::now())
            else {
                continue;
            };
            let first_pass = match ready {
                Ready::Complete { first_pass } => first_pass,
                Ready::GaveUp { first_pass, reason } => {
                    tracing::warn!(
                        "{}: still incomplete {} s after its last change ({reason}); rendering it \
                         as it is",
                        path.display(),
                        self.options.give_up.as_secs()
                    );
                    first_pass
                }
            };
            let bytes = version.map_or(0, |v| v.len);
            let origin = self.origin(&path);
            self.feed.stats().arrived(&origin, bytes);
            let input = LiveInput {
                rel: self.rel(&path),
                path,
                arrived: Instant::now(),
                origin,
                skip_existing: first_pass,
            };
            if self.feed.submit(input).is_err() {
                return;
            }
        }
    }
}
