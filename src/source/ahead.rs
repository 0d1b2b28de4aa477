//! The listing of a run's inputs, made on a thread of its own while the backend starts.
//!
//! Every output waits for the whole listing (no output may replace an input, wherever it lies:
//! [`Listing`]), and the listing costs 2–3 µs a file: 8.5–13 ms for 4000 files on the H200 host
//! (so about 0.25 s for a folder of 100 000). The CUDA backend takes ~240 ms to start (driver,
//! device, kernels), during which nothing else ran, so `run` starts the listing first and the
//! scan stage takes it when the pipeline starts. Splitting a folder's `stat`s among 16 threads
//! was tried and left out: 6.7–8.0 ms against 8.7–8.8 ms for those 4000 files.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};

use super::{Listing, Sources};

/// A listing under way (see the module's doc).
pub struct ListingAhead {
    /// The output folder it leaves out (the scan stage checks it is the run's).
    exclude: PathBuf,
    done: Receiver<(Listing, Duration)>,
    /// Set when the run no longer wants it (cancelled, or ended before its scan).
    stop: Arc<AtomicBool>,
}

impl ListingAhead {
    /// Starts listing `sources`, leaving out `exclude` (the output folder, which must exist by
    /// now: a folder made after the walk passed its place would not be left out). `None` when
    /// no thread could be started: the scan stage then lists as it always did.
    pub fn start(sources: &Sources, exclude: &Path) -> Option<ListingAhead> {
        let (tx, done) = crossbeam_channel::bounded(1);
        let stop = Arc::new(AtomicBool::new(false));
        let (s, x, flag) = (sources.clone(), exclude.to_path_buf(), stop.clone());
        std::thread::Builder::new()
            .name("list".into())
            .spawn(move || {
                let t0 = Instant::now();
                let listing = s.list(Some(&x), &flag);
                let _ = tx.send((listing, t0.elapsed()));
            })
            .ok()?;
        Some(ListingAhead {
            exclude: exclude.to_path_buf(),
            done,
            stop,
        })
    }

    /// Whether it leaves out `exclude`.
    pub fn excludes(&self, exclude: &Path) -> bool {
        self.exclude == exclude
    }

    /// The listing and how long it took, once done; when `cancel` is set meanwhile, the
    /// listing stops where it is (as the scan stage's own listing would). `None` if its
    /// thread ended without one.
    pub fn take(self, cancel: &AtomicBool) -> Option<(Listing, Duration)> {
        loop {
            if cancel.load(Ordering::Relaxed) {
                self.stop.store(true, Ordering::Relaxed);
            }
            match self.done.recv_timeout(Duration::from_millis(10)) {
                Ok(done) => return Some(done),
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => return None,
            }
        }
    }
}

impl Drop for ListingAhead {
    fn drop(&mut self) {
        // Not taken (the run ended first): its thread stops at the next entry.
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listing_made_ahead_is_the_one_made_in_place() {
        let dir = crate::scratch_dir("listing-ahead");
        std::fs::create_dir_all(dir.join("in/a")).unwrap();
        std::fs::create_dir_all(dir.join("in/out")).unwrap();
        std::fs::write(dir.join("in/one"), b"1").unwrap();
        std::fs::write(dir.join("in/a/two"), b"2").unwrap();
        std::fs::write(dir.join("in/out/old.png"), b"3").unwrap();
        let sources = Sources::walk(&[dir.join("in")]);
        let exclude = dir.join("in/out");
        let never = AtomicBool::new(false);
        let ahead = ListingAhead::start(&sources, &exclude).unwrap();
        assert!(ahead.excludes(&exclude));
        assert!(!ahead.excludes(&dir.join("elsewhere")));
        let (mut listed, _) = ahead.take(&never).unwrap();
        let mut here = sources.list(Some(&exclude), &never);
        let files = |l: &Listing| -> Vec<(PathBuf, PathBuf)> {
            l.files()
                .map(|(p, r)| (p.to_path_buf(), r.to_path_buf()))
                .collect()
        };
        assert_eq!(files(&listed), files(&here));
        assert_eq!(files(&listed).len(), 2);
        assert_eq!(listed.take_input_files(), here.take_input_files());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
