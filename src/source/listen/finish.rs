//! Ending spool entries once the pipeline is done with them. Outputs are written atomically
//! but not fsynced one by one (that would cost a disk flush per image); before an entry leaves
//! the spool, one `syncfs` of the output file system makes every output written so far
//! durable, for a whole batch of entries at once. So at every moment an acknowledged
//! instance exists durably as a spool entry or as its outputs.
//!
//! With `listen.durable = false` nothing is synced: an entry ends as soon as its outputs are
//! written (they survive a crash of dicomflow, as the entry did), so its file is usually
//! written over by a later instance while still in the page cache, before the kernel's
//! writeback (the spool keeps up to 64 ended files for reuse). A `syncfs` every batch there
//! wrote every spool file and output out at once and made the spool create a new file for
//! most instances (its free list refills only as entries end): about a third of the
//! listener's CPU time on the 2-core box (BENCHMARKS.md, session 21).
//!
//! Rendered entries are removed (or moved to `keep_received`); entries that failed or are not
//! images move to `SPOOL/unrendered/` (acknowledged data is never deleted unrendered); a
//! cancelled entry stays for the next start.

use std::fs::File;
use std::os::unix::io::AsRawFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};

use super::spool::{Spool, SpoolEntry};
use crate::source::live::{Done, Feed, Outcome};

/// Entries ended together after one sync, at most this long after the first is done.
const BATCH_WAIT: Duration = Duration::from_millis(200);
/// ... or as soon as this many are waiting.
const BATCH_MAX: usize = 256;
/// Where acknowledged instances that were not rendered are kept.
pub const UNRENDERED: &str = "unrendered";

/// Flushes every file written on the file system holding `dir` (`syncfs`).
fn sync_filesystem(dir: &File) -> std::io::Result<()> {
    // SAFETY: syncfs only reads the descriptor, which `dir` keeps open for the call.
    let rc = unsafe { libc::syncfs(dir.as_raw_fd()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Ends spool entries as the pipeline reports them done.
pub struct Finisher {
    pub spool: Arc<Spool>,
    pub feed: Arc<Feed>,
    /// The output folder (when durable, its file system is synced before entries leave the
    /// spool).
    pub output_dir: PathBuf,
    /// Where rendered instances are kept, when they are.
    pub keep: Option<PathBuf>,
}

impl Finisher {
    /// Handles `done` until the pipeline closes it, then ends what is left.
    pub fn run(&self, done: &Receiver<Done>) {
        if !self.spool.is_durable() {
            // Nothing to sync: each entry ends as soon as its outputs are written.
            for d in done {
                self.feed.done(&d.input, d.outcome, d.at);
                self.end(d);
            }
            return;
        }
        let out = match File::open(&self.output_dir) {
            Ok(f) => Some(f),
            Err(e) => {
                tracing::warn!(
                    "cannot open {} to sync it ({e}); spool entries stay until the next start",
                    self.output_dir.display()
                );
                None
            }
        };
        let mut batch: Vec<Done> = Vec::new();
        let mut first: Option<Instant> = None;
        loop {
            let wait = first.map_or(Duration::from_secs(3600), |t| {
                BATCH_WAIT.saturating_sub(t.elapsed())
            });
            let closed = match done.recv_timeout(wait) {
                Ok(d) => {
                    // At once: latency, counts, and the next arrival of the same name.
                    self.feed.done(&d.input, d.outcome, d.at);
                    first.get_or_insert_with(Instant::now);
                    batch.push(d);
                    false
                }
                Err(RecvTimeoutError::Timeout) => false,
                Err(RecvTimeoutError::Disconnected) => true,
            };
            let due = first.is_some_and(|t| t.elapsed() >= BATCH_WAIT);
            if !batch.is_empty() && (due || closed || batch.len() >= BATCH_MAX) {
                self.end_batch(out.as_ref(), std::mem::take(&mut batch));
                first = None;
            }
            if closed {
                return;
            }
        }
    }

    fn end_batch(&self, out: Option<&File>, batch: Vec<Done>) {
        let Some(out) = out else {
            return;
        };
        if let Err(e) = sync_filesystem(out) {
            tracing::warn!(
                "cannot sync the outputs ({e}); {} spool entries stay until the next start",
                batch.len()
            );
            return;
        }
        for d in batch {
            self.end(d);
        }
        if let Err(e) = self.spool.sync() {
            tracing::warn!("spool: {e}");
        }
    }

    /// Ends one entry whose outputs are written (and, when durable, synced).
    fn end(&self, d: Done) {
        let entry = SpoolEntry {
            path: d.input.path.clone(),
            rel: d.input.rel.clone(),
            bytes: 0,
        };
        let result = match d.outcome {
            Outcome::Rendered => self.spool.finish(&entry, self.keep.as_deref()),
            Outcome::Skipped | Outcome::Failed => {
                let dir = self.spool.root().join(UNRENDERED);
                tracing::warn!(
                    "{} was acknowledged but not rendered; kept as {}",
                    entry.rel.display(),
                    dir.join(&entry.rel).display()
                );
                self.spool.finish(&entry, Some(&dir))
            }
            Outcome::Cancelled => return,
        };
        if let Err(e) = result {
            tracing::warn!("spool: {e}; the entry stays until the next start");
        }
    }
}
