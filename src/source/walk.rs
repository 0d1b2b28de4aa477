//! The walk over the inputs: folders recursively in name order (a folder's files before its
//! subfolders), telling regular files from everything else by their metadata before anything
//! is opened, so that a FIFO, a socket or a device never blocks the run. Everything that is not
//! rendered is said: special files, dangling links, the output folder, a folder reached twice
//! (a symlink loop), a file reached twice (a folder given twice, a link to a file already seen).
//!
//! Hand-written rather than `walkdir`: the order (files before subfolders, which the scan's
//! consumers and the fail-fast test rely on) and one listed reason per entry not rendered are
//! the whole job, and `walkdir` would need as much code around it.

use std::collections::HashMap;
use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::decode::probe::special_kind;
use crate::paths::Escaped;

/// Device and inode: what makes two paths the same file.
pub type FileKey = (u64, u64);

/// The key of `meta`.
pub fn key_of(meta: &Metadata) -> FileKey {
    (meta.dev(), meta.ino())
}

/// What the walk finds.
#[derive(Debug)]
pub(crate) enum Found {
    /// A regular file (or a link to one), with its path relative to the input it was found
    /// under, its identity and its size.
    File {
        path: PathBuf,
        rel: PathBuf,
        key: FileKey,
        len: u64,
    },
    /// Something that is not rendered, and why (not a failure).
    Skipped { path: PathBuf, reason: String },
    /// A path that could not be read at all (missing input, permission, ...).
    Error { path: PathBuf, reason: String },
}

/// State of one walk: what was seen, to report loops and duplicates once.
struct Walk<'a> {
    /// The output folder (device, inode), when it exists: never scanned.
    exclude: Option<FileKey>,
    /// Folders entered, with the path they were first entered by.
    dirs: HashMap<FileKey, PathBuf>,
    /// Files found, with their first path.
    files: HashMap<FileKey, PathBuf>,
    cancel: &'a AtomicBool,
    seen: usize,
    /// Whether each folder input is mirrored under its own name (several inputs, as `cp -r a
    /// b OUT/` does), so that `a/x.dcm` and `b/x.dcm` do not both want `OUT/x.png`.
    named: bool,
    /// What the relative paths of the folder input being walked begin with (empty for a single
    /// input: its contents go directly under the output folder).
    prefix: PathBuf,
}

/// Walks `inputs` in order, handing what it finds to `visit` (which returns false to stop)
/// until done or `cancel` is set. Paths under `exclude` (the output folder) are listed once as
/// skipped, not entered. Symbolic links are followed, to files and to folders; a folder or a
/// file reached a second time is listed as skipped with the path it was first reached by.
/// Returns the number of entries visited.
///
/// A file's relative path (its output name) is its path under the folder input it was found
/// in; with several inputs it begins with that folder's own name (`a/x.dcm` under input `a`
/// is `a/x.dcm`), as `cp -r a b OUT/` would lay them out. A file given directly is its name.
pub(crate) fn walk(
    inputs: &[PathBuf],
    exclude: Option<&Path>,
    cancel: &AtomicBool,
    mut visit: impl FnMut(Found) -> bool,
) -> usize {
    let mut w = Walk {
        exclude: exclude
            .and_then(|p| std::fs::metadata(p).ok())
            .map(|m| key_of(&m)),
        dirs: HashMap::new(),
        files: HashMap::new(),
        cancel,
        seen: 0,
        named: inputs.len() > 1,
        prefix: PathBuf::new(),
    };
    for input in inputs {
        if w.cancelled() || !w.input(input, &mut visit) {
            break;
        }
    }
    w.seen
}

/// The name a folder input is mirrored under: its last component (`scans/a/` → `a`), or for
/// `.`, `..` and the like the name of the folder they resolve to; empty for `/`.
fn folder_name(input: &Path) -> PathBuf {
    match input.file_name() {
        Some(name) => PathBuf::from(name),
        None => std::fs::canonicalize(input)
            .ok()
            .and_then(|p| p.file_name().map(PathBuf::from))
            .unwrap_or_default(),
    }
}

impl Walk<'_> {
    fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }

    /// Hands `found` to `visit`; false to stop.
    fn emit(&mut self, found: Found, visit: &mut impl FnMut(Found) -> bool) -> bool {
        self.seen += 1;
        visit(found)
    }

    /// One input given on the command line.
    fn input(&mut self, input: &Path, visit: &mut impl FnMut(Found) -> bool) -> bool {
        // `metadata` follows a link: an input named through a link is what it points to.
        let meta = match std::fs::metadata(input) {
            Ok(m) => m,
            Err(e) => {
                let dangling = std::fs::symlink_metadata(input).is_ok();
                let reason = if dangling {
                    format!("cannot read input: dangling symbolic link ({e})")
                } else {
                    format!("cannot read input: {e}")
                };
                return self.emit(
                    Found::Error {
                        path: input.to_path_buf(),
                        reason,
                    },
                    visit,
                );
            }
        };
        if meta.is_dir() {
            self.prefix = if self.named {
                folder_name(input)
            } else {
                PathBuf::new()
            };
            return self.folder(input, input, &meta, visit);
        }
        let rel = PathBuf::from(input.file_name().unwrap_or(input.as_os_str()));
        self.file(input.to_path_buf(), rel, &meta, visit)
    }

    /// A regular file, a special file, or one seen before.
    fn file(
        &mut self,
        path: PathBuf,
        rel: PathBuf,
        meta: &Metadata,
        visit: &mut impl FnMut(Found) -> bool,
    ) -> bool {
        let ft = meta.file_type();
        if !ft.is_file() {
            let reason = format!("{}, not a regular file: not opened", special_kind(&ft));
            return self.emit(Found::Skipped { path, reason }, visit);
        }
        let key = key_of(meta);
        if let Some(first) = self.files.get(&key) {
            let reason = format!(
                "the same file as {} (given twice, or a link to it): rendered once",
                Escaped(first)
            );
            return self.emit(Found::Skipped { path, reason }, visit);
        }
        self.files.insert(key, path.clone());
        let len = meta.len();
        self.emit(
            Found::File {
                path,
                rel,
                key,
                len,
            },
            visit,
        )
    }

    /// A folder: its files in name order, then its subfolders in name order, depth first
    /// (with a stack, not recursion: a deep tree cannot overflow the thread's stack).
    fn folder(
        &mut self,
        root: &Path,
        dir: &Path,
        meta: &Metadata,
        visit: &mut impl FnMut(Found) -> bool,
    ) -> bool {
        let mut stack = vec![(dir.to_path_buf(), key_of(meta))];
        while let Some((dir, key)) = stack.pop() {
            if self.cancelled() {
                return false;
            }
            let subdirs = match self.list(root, dir, key, visit) {
                Some(s) => s,
                None => return false,
            };
            // Reversed, so that the stack pops them in name order.
            stack.extend(subdirs.into_iter().rev());
        }
        true
    }

    /// Lists one folder: emits its files and returns its subfolders (`None`: stop).
    fn list(
        &mut self,
        root: &Path,
        dir: PathBuf,
        key: FileKey,
        visit: &mut impl FnMut(Found) -> bool,
    ) -> Option<Vec<(PathBuf, FileKey)>> {
        let skip = |w: &mut Self, path: PathBuf, reason: String, visit: &mut _| {
            w.emit(Found::Skipped { path, reason }, visit)
                .then(Vec::new)
        };
        if Some(key) == self.exclude {
            let reason = "the output folder: not scanned for inputs".to_string();
            return skip(self, dir, reason, visit);
        }
        if let Some(first) = self.dirs.get(&key) {
            let reason = format!(
                "a folder already scanned as {} (a symbolic link loop, or given twice): not \
                 scanned again",
                Escaped(first)
            );
            return skip(self, dir, reason, visit);
        }
        self.dirs.insert(key, dir.clone());
        let mut entries: Vec<_> = match std::fs::read_dir(&dir) {
            Ok(rd) => rd.filter_map(|e| e.ok()).collect(),
            Err(e) => {
                let reason = format!("cannot list folder: {e}");
                return self
                    .emit(Found::Error { path: dir, reason }, visit)
                    .then(Vec::new);
            }
        };
        // `file_name` allocates: once per entry, not once per comparison (a folder of 2000
        // slices took 1.2 ms to sort, before the first file reached a loader).
        entries.sort_by_cached_key(|e| e.file_name());
        let mut subdirs = Vec::new();
        for entry in entries {
            if self.cancelled() {
                return None;
            }
            let path = entry.path();
            // The entry's own type comes with the listing (no open); a link is followed.
            let meta = match entry.file_type() {
                Ok(ft) if ft.is_symlink() => std::fs::metadata(&path).map_err(|e| {
                    let target = std::fs::read_link(&path)
                        .map(|t| Escaped(&t).to_string())
                        .unwrap_or_else(|_| "?".into());
                    (true, format!("dangling symbolic link to {target} ({e})"))
                }),
                Ok(_) => entry
                    .metadata()
                    .map_err(|e| (false, format!("cannot read: {e}"))),
                Err(e) => Err((false, format!("cannot read: {e}"))),
            };
            let ok = match meta {
                Ok(m) if m.is_dir() => {
                    subdirs.push((path, key_of(&m)));
                    true
                }
                Ok(m) => {
                    let rel = self.prefix.join(path.strip_prefix(root).unwrap_or(&path));
                    self.file(path, rel, &m, visit)
                }
                Err((true, reason)) => self.emit(Found::Skipped { path, reason }, visit),
                Err((false, reason)) => self.emit(Found::Error { path, reason }, visit),
            };
            if !ok {
                return None;
            }
        }
        Some(subdirs)
    }
}
