//! Finding inputs: walk files and folders (recursively, in name order), tell DICOM from other
//! files by their first bytes, and keep each file's path relative to the folder it was found
//! under (for mirrored output names).

mod ahead;
pub mod listen;
pub mod live;
pub mod manifest;
pub mod select;
pub mod series;
pub mod shard;
mod walk;
pub mod watch;

pub use ahead::ListingAhead;
pub use select::Sources;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::decode::probe::{probe, Probe};
use walk::Found;
pub use walk::{key_of, FileKey};

/// One file found by the scan.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// Sequence number in scan order.
    pub id: usize,
    pub path: PathBuf,
    /// Path relative to the input folder it was found under; the file name alone when the
    /// file was given directly.
    pub rel: PathBuf,
    /// What its first bytes say.
    pub kind: Probe,
    /// Device and inode.
    pub key: FileKey,
    /// The output path without extension, once the pipeline has assigned one (the scan
    /// leaves it `None`).
    pub base: Option<PathBuf>,
    /// Keep outputs that already exist (a watched folder's first pass), whatever the run's
    /// `skip_existing` says.
    pub skip_existing: bool,
}

/// What the scan emits.
#[derive(Debug)]
pub enum ScanItem {
    /// A file that looks like DICOM (or a bare data set).
    Dicom(Candidate),
    /// A file that is not DICOM, or not rendered for another reason (a FIFO, a dangling link,
    /// the output folder, a file reached twice): listed, not counted as a failure.
    Skipped { path: PathBuf, reason: String },
    /// A path that could not be read at all (missing input, permission, ...), or a damaged
    /// DICOM image whose start is unreadable: a failure.
    Error { path: PathBuf, reason: String },
    /// A file listed but not opened because the run was cancelled first.
    NotStarted { path: PathBuf },
}

/// Every entry under the inputs, listed (in scan order) before any file is opened: the
/// identities of all input files are then known before the first output is written, so that
/// no output can replace an input, wherever it lies.
pub struct Listing {
    found: Vec<Found>,
    inputs: HashSet<FileKey>,
    /// `--shard-by series` over a walk: a DICOM file is handed on only when its series
    /// hashes to this shard, which takes its header (see [`select`]).
    series_shard: Option<shard::Shard>,
}

/// Lists `inputs` (see [`Listing`]); paths under `exclude` (the output folder) are listed as
/// skipped, not entered. Stops early when `cancel` is set.
pub fn list(inputs: &[PathBuf], exclude: Option<&Path>, cancel: &AtomicBool) -> Listing {
    let mut found = Vec::new();
    let mut keys = HashSet::new();
    walk::walk(inputs, exclude, cancel, |f| {
        if let Found::File { key, .. } = &f {
            keys.insert(*key);
        }
        found.push(f);
        true
    });
    Listing {
        found,
        inputs: keys,
        series_shard: None,
    }
}

impl Listing {
    /// Device and inode of every input file (taken: the listing keeps none after).
    pub fn take_input_files(&mut self) -> HashSet<FileKey> {
        std::mem::take(&mut self.inputs)
    }

    /// Every file listed: its path, and its path relative to the input it was found under.
    pub fn files(&self) -> impl Iterator<Item = (&Path, &Path)> {
        self.found.iter().filter_map(|f| match f {
            Found::File { path, rel, .. } => Some((path.as_path(), rel.as_path())),
            _ => None,
        })
    }

    /// Probes the listed files in order, handing each result to `emit` (which returns false
    /// to stop). Once `cancel` is set the files left are handed on as
    /// [`ScanItem::NotStarted`], unopened: every listed entry is accounted for. Returns the
    /// number of entries handed on.
    pub fn scan(self, cancel: &AtomicBool, mut emit: impl FnMut(ScanItem) -> bool) -> usize {
        let mut next_id = 0usize;
        let mut n = 0;
        for f in self.found {
            let item = match f {
                Found::File { path, .. } if cancel.load(Ordering::Relaxed) => {
                    ScanItem::NotStarted { path }
                }
                f => match self.series_shard {
                    Some(s) => match select::in_series_shard(s, classify(&mut next_id, f)) {
                        Some(item) => item,
                        None => continue,
                    },
                    None => classify(&mut next_id, f),
                },
            };
            n += 1;
            if !emit(item) {
                break;
            }
        }
        n
    }
}

/// Walks and probes `inputs` as it goes (no listing first), handing what it finds to `emit`
/// (which returns false to stop) until done or `cancel` is set. Paths under `exclude` (the
/// output directory) are not entered. Returns the number of entries seen.
pub fn scan(
    inputs: &[PathBuf],
    exclude: Option<&Path>,
    cancel: &AtomicBool,
    mut emit: impl FnMut(ScanItem) -> bool,
) -> usize {
    let mut next_id = 0usize;
    walk::walk(inputs, exclude, cancel, |found| {
        emit(classify(&mut next_id, found))
    })
}

/// Total size in bytes of the files under `inputs` (outside `exclude`), counting stops as soon
/// as it reaches `limit`: enough to tell a small job from a large one without reading a file.
pub fn input_bytes(inputs: &[PathBuf], exclude: Option<&Path>, limit: u64) -> u64 {
    let mut total = 0u64;
    let never = AtomicBool::new(false);
    walk::walk(inputs, exclude, &never, |found| {
        if let Found::File { len, .. } = found {
            total += len;
        }
        total < limit
    });
    total
}

/// Probes one file found by the walk (the others pass through).
fn classify(next_id: &mut usize, found: Found) -> ScanItem {
    let (path, rel, key) = match found {
        Found::File { path, rel, key, .. } => (path, rel, key),
        Found::Skipped { path, reason } => return ScanItem::Skipped { path, reason },
        Found::Error { path, reason } => return ScanItem::Error { path, reason },
    };
    match probe(&path) {
        Ok(Probe::NotDicom(reason)) => match crate::decode::probe::damaged_evidence(&path) {
            // A damaged image is a failure, not "not an image".
            Some(reason) => ScanItem::Error { path, reason },
            None => ScanItem::Skipped { path, reason },
        },
        Ok(kind) => {
            let id = *next_id;
            *next_id += 1;
            ScanItem::Dicom(Candidate {
                id,
                path,
                rel,
                kind,
                key,
                base: None,
                skip_existing: false,
            })
        }
        Err(e) => ScanItem::Error {
            path,
            reason: format!("cannot open: {e}"),
        },
    }
}

/// Probes one file that is to be candidate `id` if it is DICOM: an input that arrived while
/// the run goes on (see [`live`]), not found by a walk.
pub fn classify_as(id: usize, path: PathBuf, rel: PathBuf) -> ScanItem {
    let meta = match std::fs::metadata(&path) {
        Ok(m) if m.is_file() => m,
        Ok(_) => {
            return ScanItem::Skipped {
                path,
                reason: "not a regular file".into(),
            }
        }
        Err(e) => {
            return ScanItem::Error {
                path,
                reason: format!("cannot open: {e}"),
            }
        }
    };
    let mut next_id = id;
    classify(
        &mut next_id,
        Found::File {
            key: key_of(&meta),
            len: meta.len(),
            path,
            rel,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_bytes_sums_files_skips_the_output_and_stops_at_the_limit() {
        let dir = crate::scratch_dir("input-bytes");
        std::fs::create_dir_all(dir.join("a/b")).unwrap();
        std::fs::create_dir_all(dir.join("out")).unwrap();
        std::fs::write(dir.join("a/one"), vec![0u8; 1000]).unwrap();
        std::fs::write(dir.join("a/b/two"), vec![0u8; 500]).unwrap();
        std::fs::write(dir.join("out/old.png"), vec![0u8; 7000]).unwrap();
        let inputs = [dir.clone()];
        assert_eq!(input_bytes(&inputs, Some(&dir.join("out")), u64::MAX), 1500);
        assert_eq!(input_bytes(&inputs, None, u64::MAX), 8500);
        // Stops once the limit is reached: a folder's files come before its subfolders, so
        // a/one (1000 bytes) alone reaches 600 and a/b is never listed.
        assert_eq!(input_bytes(&inputs, Some(&dir.join("out")), 600), 1000);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
