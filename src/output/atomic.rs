//! Atomic, durable output files: the bytes go into an unnamed file (`O_TMPFILE`) in the
//! target directory, which is linked into place only once complete. A run killed at any
//! moment leaves either the whole file or nothing (the unnamed file vanishes with the
//! process). When the bytes reach the disk is the [`SyncMode`]'s choice; [`write_atomic`]
//! (reports, traces) syncs the file before linking it and its folder after. Where `O_TMPFILE`
//! is unsupported, a hidden temporary name and `rename` do the same job; what a killed run
//! leaves of those is removed by the next run ([`remove_leftovers`]).

use std::collections::HashSet;
use std::ffi::CString;
use std::fs::File;
use std::io::Write;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes `bytes` to `path` atomically and durably (the folder synced before it returns),
/// creating parent directories. Replaces an existing file.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = write_file(path, bytes, true)?;
    sync_dir(&dir)
}

/// When a run's outputs reach the disk (`output.sync`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SyncMode {
    /// Once, when the run ends (`syncfs` of the output folder's filesystem, before the report
    /// is written): a finished run is on the disk; a power loss during a run can leave outputs
    /// without their bytes, which `--skip-existing` tells from finished ones and renders again.
    Run,
    /// Every output's bytes before its name appears (`fdatasync`), and its folder at the end:
    /// no power loss can leave a named output without its bytes. One device flush per output
    /// (8.5 ms each on the 2-core box's virtual disk: BENCHMARKS.md).
    File,
    /// Left to the operating system, as other converters do.
    None,
}

/// The outputs of one run: writes them atomically and, as [`SyncMode`] says, durably.
pub struct OutputFiles {
    mode: SyncMode,
    /// Folders that got new names (synced once each at the end, in `File` mode).
    dirs: Mutex<HashSet<PathBuf>>,
}

impl OutputFiles {
    pub fn new(mode: SyncMode) -> Self {
        OutputFiles {
            mode,
            dirs: Mutex::new(HashSet::new()),
        }
    }

    /// Writes `bytes` to `path` atomically (in `File` mode, the bytes on the disk before the
    /// name appears).
    pub fn write(&self, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        self.write_parts(path, &[bytes])
    }

    /// [`write`](Self::write) of the concatenation of `parts`, without concatenating them.
    pub fn write_parts(&self, path: &Path, parts: &[&[u8]]) -> std::io::Result<()> {
        let dir = write_file_parts(path, parts, self.mode == SyncMode::File)?;
        if self.mode == SyncMode::File {
            let mut dirs = self.dirs.lock().unwrap_or_else(|e| e.into_inner());
            if !dirs.contains(&dir) {
                dirs.insert(dir);
            }
        }
        Ok(())
    }

    /// Puts what the run wrote under `out_dir` on the disk, as the mode says; the first error.
    pub fn finish(&self, out_dir: &Path) -> std::io::Result<()> {
        match self.mode {
            SyncMode::None => Ok(()),
            SyncMode::Run => {
                let dir = File::open(out_dir)?;
                // SAFETY: syncfs only reads the descriptor, which `dir` keeps open.
                if unsafe { libc::syncfs(dir.as_raw_fd()) } != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            }
            SyncMode::File => {
                let dirs =
                    std::mem::take(&mut *self.dirs.lock().unwrap_or_else(|e| e.into_inner()));
                let mut first = Ok(());
                for dir in &dirs {
                    if let Err(e) = sync_dir(dir) {
                        if first.is_ok() {
                            first = Err(e);
                        }
                    }
                }
                first
            }
        }
    }
}

/// Flushes a folder's entries to the disk.
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// The atomic write behind [`write_atomic`] and [`OutputFiles::write`], the bytes synced
/// before the name appears when `sync`; returns the folder.
fn write_file(path: &Path, bytes: &[u8], sync: bool) -> std::io::Result<PathBuf> {
    // No check for a folder at `path` first (a `stat` per output file): linking over a
    // folder fails, and `finish` names that error.
    write_file_parts(path, &[bytes], sync)
}

/// [`write_file`] of the concatenation of `parts` (one `writev` where the file takes it all).
fn write_file_parts(path: &Path, parts: &[&[u8]], sync: bool) -> std::io::Result<PathBuf> {
    let mut pending = PendingFile::start(path, sync)?;
    let mut slices: Vec<std::io::IoSlice> =
        parts.iter().map(|p| std::io::IoSlice::new(p)).collect();
    let mut rest = &mut slices[..];
    // Drops empty leading parts (`write_vectored` of only empty slices would return 0).
    std::io::IoSlice::advance_slices(&mut rest, 0);
    while !rest.is_empty() {
        match pending.file.write_vectored(rest) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => std::io::IoSlice::advance_slices(&mut rest, n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    pending.finish(sync)
}

/// A file being written that appears at its path only when [`persist`](Self::persist)ed:
/// until then it is unnamed (`O_TMPFILE`; or a hidden temporary name where that is
/// unsupported, removed if it is dropped). Creating one proves that the path's folder can
/// take a new file, before anything is written: the report and the trace are created when a
/// run starts.
pub struct PendingFile {
    file: File,
    path: PathBuf,
    dir: PathBuf,
    /// The named fallback's temporary path.
    temp: Option<PathBuf>,
}

impl PendingFile {
    /// Starts a file for `path`, creating its parent folders (synced when `sync`); fails at
    /// once when a folder is in the way.
    pub fn create(path: &Path, sync: bool) -> std::io::Result<PendingFile> {
        if path.is_dir() {
            return Err(folder_in_the_way());
        }
        PendingFile::start(path, sync)
    }

    /// [`create`](Self::create) without the check for a folder at `path`.
    fn start(path: &Path, sync: bool) -> std::io::Result<PendingFile> {
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let open_unnamed = || {
            std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_TMPFILE | libc::O_CLOEXEC)
                .mode(0o644)
                .open(dir)
        };
        // The folder usually exists: try first, and create it only when it is missing (a
        // `stat` less per file).
        let unnamed = match open_unnamed() {
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) && !dir.is_dir() => {
                create_dirs(dir, sync)?;
                open_unnamed()
            }
            other => other,
        };
        let (file, temp) = match unnamed {
            Ok(f) => (f, None),
            Err(e) if unnamed_unsupported(&e) => {
                let tmp = temp_name(path);
                (File::create(&tmp)?, Some(tmp))
            }
            Err(e) => return Err(e),
        };
        Ok(PendingFile {
            file,
            path: path.to_path_buf(),
            dir: dir.to_path_buf(),
            temp,
        })
    }

    /// Makes the file appear at its path, durably: its bytes on the disk first, then the name,
    /// then its folder's entry.
    pub fn persist(self) -> std::io::Result<()> {
        let dir = self.finish(true)?;
        sync_dir(&dir)
    }

    /// Gives the file its name (replacing a file there); with `sync` its bytes reach the disk
    /// first. Returns the folder.
    fn finish(mut self, sync: bool) -> std::io::Result<PathBuf> {
        self.file.flush()?;
        if sync {
            // The bytes reach the disk before the name can: a power loss leaves the whole
            // file or no name, never a name over missing bytes.
            self.file.sync_data()?;
        }
        let named = match self.temp.take() {
            Some(tmp) => std::fs::rename(&tmp, &self.path).inspect_err(|_| {
                let _ = std::fs::remove_file(&tmp);
            }),
            None => link_unnamed(&self.file, &self.path),
        };
        match named {
            Err(e) if e.raw_os_error() == Some(libc::EISDIR) => Err(folder_in_the_way()),
            Err(e) => Err(e),
            Ok(()) => Ok(std::mem::take(&mut self.dir)),
        }
    }
}

impl Write for PendingFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.file.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

impl Drop for PendingFile {
    fn drop(&mut self) {
        // Not persisted: the unnamed file vanishes with its descriptor; a named one is removed.
        if let Some(tmp) = self.temp.take() {
            let _ = std::fs::remove_file(tmp);
        }
    }
}

/// `create_dir_all`; with `sync`, syncing the parent of every folder it creates (so that the
/// new folders' names are on the disk before files appear in them).
fn create_dirs(dir: &Path, sync: bool) -> std::io::Result<()> {
    if !sync {
        return std::fs::create_dir_all(dir);
    }
    let mut missing = Vec::new();
    let mut cur = dir;
    while !cur.as_os_str().is_empty() && !cur.is_dir() {
        missing.push(cur);
        match cur.parent() {
            Some(p) => cur = p,
            None => break,
        }
    }
    std::fs::create_dir_all(dir)?;
    for d in missing.iter().rev() {
        if let Some(parent) = d.parent().filter(|p| !p.as_os_str().is_empty()) {
            sync_dir(parent)?;
        }
    }
    Ok(())
}

fn folder_in_the_way() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::IsADirectory, "a folder is in the way")
}

fn unnamed_unsupported(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EOPNOTSUPP) | Some(libc::EISDIR) | Some(libc::EINVAL) | Some(libc::ENOENT)
    )
}

fn cstr(p: &Path) -> std::io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "path contains NUL"))
}

fn temp_name(path: &Path) -> PathBuf {
    let mut name = b".".to_vec();
    name.extend_from_slice(path.file_name().unwrap_or_default().as_bytes());
    name.extend_from_slice(
        format!(
            ".{}.{}.dicomflow-tmp",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        )
        .as_bytes(),
    );
    path.with_file_name(std::ffi::OsString::from_vec(name))
}

/// Whether `linkat(fd, "", …, AT_EMPTY_PATH)` links unnamed files here: it needs
/// `CAP_DAC_READ_SEARCH` before Linux 6.10. Cleared at its first refusal; the `/proc/self/fd`
/// path (a procfs lookup per file, ~3 µs more on the 2-core box) is used from then on.
static EMPTY_PATH_LINKS: AtomicBool = AtomicBool::new(true);

/// Links the unnamed `file` at `path`, replacing a file there.
fn link_unnamed(file: &File, path: &Path) -> std::io::Result<()> {
    let target = cstr(path)?;
    let link = |to: &CString| -> std::io::Result<()> {
        if EMPTY_PATH_LINKS.load(Ordering::Relaxed) {
            // SAFETY: `file` is open; both paths are valid NUL-terminated strings that linkat
            // does not retain.
            let rc = unsafe {
                libc::linkat(
                    file.as_raw_fd(),
                    c"".as_ptr(),
                    libc::AT_FDCWD,
                    to.as_ptr(),
                    libc::AT_EMPTY_PATH,
                )
            };
            if rc == 0 {
                return Ok(());
            }
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                // Not allowed (or not known) here: the `/proc` path from now on.
                Some(libc::ENOENT) | Some(libc::EPERM) | Some(libc::EINVAL) => {
                    EMPTY_PATH_LINKS.store(false, Ordering::Relaxed)
                }
                _ => return Err(e),
            }
        }
        let proc_path = cstr(Path::new(&format!("/proc/self/fd/{}", file.as_raw_fd())))?;
        // SAFETY: both arguments are valid NUL-terminated paths; linkat does not retain them.
        let rc = unsafe {
            libc::linkat(
                libc::AT_FDCWD,
                proc_path.as_ptr(),
                libc::AT_FDCWD,
                to.as_ptr(),
                libc::AT_SYMLINK_FOLLOW,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    };
    match link(&target) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
            // The target exists: link under a temporary name, then rename over it (atomic
            // replace).
            let tmp = temp_name(path);
            link(&cstr(&tmp)?)?;
            std::fs::rename(&tmp, path).inspect_err(|_| {
                let _ = std::fs::remove_file(&tmp);
            })
        }
        Err(e) => Err(e),
    }
}

/// The process id in the name of a temporary of the named fallback (`.NAME.PID.N.dicomflow-tmp`),
/// or `None` when `name` is not one.
pub fn temp_owner(name: &[u8]) -> Option<i32> {
    let inner = name.strip_prefix(b".")?.strip_suffix(b".dicomflow-tmp")?;
    let mut parts = inner.rsplitn(3, |&b| b == b'.');
    let counter = parts.next()?;
    let pid = parts.next()?;
    parts.next()?; // the output's name
    if counter.is_empty() || !counter.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(pid).ok()?.parse().ok()
}

/// True when process `pid` is gone (a temporary it left can be removed). A live process, or
/// one we may not signal, is not gone.
fn process_gone(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists; nothing is sent.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

/// Removes the temporaries of the named fallback that processes no longer running left under
/// `dir` (a run killed between writing one and renaming it); returns how many. A concurrent
/// run's temporaries are left alone (its process is alive).
pub fn remove_leftovers(dir: &Path) -> usize {
    let mut removed = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let Ok(ft) = e.file_type() else {
                continue;
            };
            if ft.is_dir() {
                stack.push(e.path());
            } else if ft.is_file() {
                let name = e.file_name();
                if temp_owner(name.as_bytes()).is_some_and(process_gone)
                    && std::fs::remove_file(e.path()).is_ok()
                {
                    removed += 1;
                }
            }
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_output_over_a_folder_fails_naming_it_and_leaves_the_folder() {
        let dir = std::env::temp_dir().join(format!("dicomflow-atomic-dir-{}", std::process::id()));
        let path = dir.join("x.png");
        std::fs::create_dir_all(path.join("inner")).unwrap();
        for sync in [false, true] {
            let files = OutputFiles::new(if sync { SyncMode::File } else { SyncMode::Run });
            let e = files.write(&path, b"bytes").unwrap_err();
            assert_eq!(e.to_string(), "a folder is in the way");
            assert!(path.join("inner").is_dir());
        }
        // Nothing else was left in the folder (the temporary link is removed).
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("x.png")]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn writes_and_replaces_atomically() {
        let dir = std::env::temp_dir().join(format!("dicomflow-atomic-{}", std::process::id()));
        let path = dir.join("sub/x.png");
        write_atomic(&path, b"first").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"first");
        write_atomic(&path, b"second").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"second");
        let leftovers: Vec<_> = std::fs::read_dir(dir.join("sub"))
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name() != "x.png")
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn parts_are_written_as_one_file_and_replace_atomically() {
        let dir = std::env::temp_dir().join(format!("dicomflow-parts-{}", std::process::id()));
        let files = OutputFiles::new(SyncMode::None);
        let path = dir.join("y.png");
        let big = vec![7u8; 300_000];
        files
            .write_parts(&path, &[b"head", &big, b"", b"tail"])
            .unwrap();
        assert_eq!(
            std::fs::read(&path).unwrap(),
            [&b"head"[..], &big, b"tail"].concat()
        );
        // Over an existing file (the link under a temporary name, then the rename).
        files.write_parts(&path, &[b"second"]).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"second");
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name())
            .collect();
        assert_eq!(names, ["y.png"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn leftovers_of_dead_processes_are_removed_and_others_kept() {
        assert_eq!(temp_owner(b".x.png.123.7.dicomflow-tmp"), Some(123));
        assert_eq!(temp_owner(b".a.b.png.9.0.dicomflow-tmp"), Some(9));
        assert_eq!(temp_owner(b"x.png.123.7.dicomflow-tmp"), None);
        assert_eq!(temp_owner(b".x.png"), None);
        let dir = crate::scratch_dir("atomic-leftovers");
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        // A pid above the kernel's limit (4194304) never runs.
        let dead = dir.join("sub/.x.png.999999999.0.dicomflow-tmp");
        let alive = dir.join(format!(".y.png.{}.0.dicomflow-tmp", std::process::id()));
        let output = dir.join("sub/x.png");
        for p in [&dead, &alive, &output] {
            std::fs::write(p, b"x").unwrap();
        }
        assert_eq!(remove_leftovers(&dir), 1);
        assert!(!dead.exists() && alive.exists() && output.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn named_fallback_also_replaces_and_vanishes_when_dropped() {
        let dir = crate::scratch_dir("atomic2");
        let path = dir.join("y.png");
        let named = |bytes: &[u8]| {
            let tmp = temp_name(&path);
            let mut p = PendingFile {
                file: File::create(&tmp).unwrap(),
                path: path.clone(),
                dir: dir.clone(),
                temp: Some(tmp),
            };
            p.write_all(bytes).unwrap();
            p
        };
        named(b"a").persist().unwrap();
        named(b"bb").persist().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"bb");
        drop(named(b"never"));
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        // An unnamed one dropped leaves nothing either.
        let mut p = PendingFile::create(&dir.join("z.png"), false).unwrap();
        p.write_all(b"never").unwrap();
        drop(p);
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        assert!(
            PendingFile::create(&dir, false).is_err(),
            "a folder is in the way"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
