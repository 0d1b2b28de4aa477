//! Atomic output files: the bytes go into an unnamed file (`O_TMPFILE`) in the target
//! directory, which is linked into place only once complete. A run killed at any moment
//! leaves either the whole file or nothing (the unnamed file vanishes with the process).
//! Where `O_TMPFILE` is unsupported, a hidden temporary name and `rename` do the same job.

use std::ffi::CString;
use std::fs::File;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes `bytes` to `path` atomically, creating parent directories. Replaces an existing file.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    match write_unnamed(dir, path, bytes) {
        Ok(()) => Ok(()),
        Err(e) if unnamed_unsupported(&e) => write_named_temp(dir, path, bytes),
        Err(e) => Err(e),
    }
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
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(
        ".{name}.{}.{}.dicomflow-tmp",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ))
}

fn write_unnamed(dir: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_TMPFILE)
        .mode(0o644)
        .open(dir)?;
    file.write_all(bytes)?;
    let proc_path = cstr(Path::new(&format!("/proc/self/fd/{}", file.as_raw_fd())))?;
    let target = cstr(path)?;
    // SAFETY: both arguments are valid NUL-terminated paths; linkat does not retain them.
    let rc = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            proc_path.as_ptr(),
            libc::AT_FDCWD,
            target.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() != Some(libc::EEXIST) {
        // /proc not mounted or linking refused: let the caller use a named temporary.
        return Err(std::io::Error::from_raw_os_error(libc::EOPNOTSUPP));
    }
    // The target exists: link under a temporary name, then rename over it (atomic replace).
    let tmp = temp_name(path);
    let tmp_c = cstr(&tmp)?;
    // SAFETY: as above.
    let rc = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            proc_path.as_ptr(),
            libc::AT_FDCWD,
            tmp_c.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

fn write_named_temp(_dir: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = temp_name(path);
    let result = (|| {
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        drop(f);
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// True for leftovers of the named-temporary fallback (removed by `--skip-existing` runs).
pub fn is_temp_leftover(name: &str) -> bool {
    name.starts_with('.') && name.ends_with(".dicomflow-tmp")
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn named_fallback_also_replaces() {
        let dir = std::env::temp_dir().join(format!("dicomflow-atomic2-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("y.png");
        write_named_temp(&dir, &path, b"a").unwrap();
        write_named_temp(&dir, &path, b"bb").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"bb");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
