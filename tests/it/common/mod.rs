//! Helpers shared by the integration tests: the binary under test and runs of it (with the
//! exit code asserted, stderr in the message), scratch folders, the files a run wrote, and
//! runs bounded in time whose peak memory is measured. `hostile` makes the hostile corpus,
//! `peers` runs real DICOM peers and long-running processes, `schema` validates reports.

pub mod hostile;
pub mod peers;
pub mod schema;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::io::{Read, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The `dicomflow` binary cargo built for these tests.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_dicomflow")
}

/// A file or folder of this repository (fixtures, assets, docs, examples), by its path from
/// the root.
pub fn repo_path(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// `dicomflow ARGS...` run to its end: stdin empty, stdout and stderr captured.
pub fn dicomflow<S: AsRef<OsStr>>(args: &[S]) -> Output {
    Command::new(bin())
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin()))
}

/// `dicomflow ARGS...` (see [`dicomflow`]) that must exit 0; the failure names the arguments
/// and carries stderr.
#[track_caller]
pub fn dicomflow_ok<S: AsRef<OsStr>>(args: &[S]) -> Output {
    let out = dicomflow(args);
    let shown: Vec<_> = args.iter().map(|a| a.as_ref().to_string_lossy()).collect();
    assert_eq!(
        out.status.code(),
        Some(0),
        "dicomflow {shown:?} exited with {}; stderr:\n{}",
        out.status,
        stderr(&out)
    );
    out
}

/// Asserts that `out` exited with `code`; the message carries what the process said on stderr
/// (why it failed), which a bare comparison of codes would lose.
#[track_caller]
pub fn assert_exit(out: &Output, code: i32) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "exited with {} instead of {code}; stderr:\n{}",
        out.status,
        stderr(out)
    );
}

/// The exit code (-1 when the process was killed by a signal).
pub fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

/// What the process wrote on stderr, as text.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// What the process wrote on stdout, as text.
pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A path as the `&str` an argument list of [`dicomflow`] takes (test paths are UTF-8).
pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `dicomflow -q synth DIR EXTRA...` (a phantom series), which must succeed; the files it
/// wrote directly in `dir`, sorted.
pub fn synth(dir: &Path, extra: &[&str]) -> Vec<PathBuf> {
    let mut args = vec![OsStr::new("-q"), OsStr::new("synth"), dir.as_os_str()];
    args.extend(extra.iter().map(OsStr::new));
    dicomflow_ok(&args);
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    v
}

/// Every file under `dir`, recursively (links not followed), as full paths, sorted; a folder
/// that cannot be read (or is gone) is left out.
pub fn all_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The `.png` files directly in `dir` (none when it does not exist), sorted.
pub fn pngs(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    v.retain(|p| p.extension().is_some_and(|e| e == "png"));
    v.sort();
    v
}

/// Every file under `dir` (recursively), as paths relative to it, sorted; not the run's state
/// folder `dir/.dicomflow` (its settings record, reports), which tests look at by name.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut v = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    let state = dir.join(".dicomflow");
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p == state {
                continue;
            }
            if p.is_dir() {
                stack.push(p);
            } else {
                v.push(p.strip_prefix(dir).unwrap().to_path_buf());
            }
        }
    }
    v.sort();
    v
}

/// A fresh, empty scratch folder unique to this test process and `name`. Every test of the
/// harness runs in the same process: a name asked for twice would be one folder for two tests
/// running at once, so it fails the second test instead.
pub fn tempdir(name: &str) -> PathBuf {
    static TAKEN: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
    let fresh = TAKEN
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .insert(name.to_string());
    assert!(
        fresh,
        "tempdir({name:?}) was already given to another test: pick a name of its own"
    );
    let d = std::env::temp_dir().join(format!("dicomflow-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A PNG that decodes to its end (not cut short).
pub fn decodes_completely(path: &std::path::Path) -> bool {
    let Ok(file) = std::fs::File::open(path) else {
        return false;
    };
    let decoder = png::Decoder::new(std::io::BufReader::new(file));
    let Ok(mut reader) = decoder.read_info() else {
        return false;
    };
    let Some(size) = reader.output_buffer_size() else {
        return false;
    };
    let mut buf = vec![0; size];
    reader.next_frame(&mut buf).is_ok() && reader.finish().is_ok()
}

/// Every file under `dir` (relative path → bytes), leaving out the run's own `.dicomflow`
/// folder (shard reports): what two runs' outputs are compared by.
pub fn output_files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.file_name().is_some_and(|n| n == ".dicomflow") {
                continue;
            }
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap().to_path_buf();
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

/// A JSON file, parsed.
pub fn read_json(path: &Path) -> serde_json::Value {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&bytes).unwrap()
}

/// [`files_under`] as text, for comparing with lists of names.
pub fn file_names(dir: &Path) -> Vec<String> {
    files_under(dir)
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect()
}

/// What a bounded run of the binary did.
pub struct Outcome {
    /// The exit code (`None` when killed by a signal).
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
    /// The child's peak resident memory (wait4's `ru_maxrss`, this child only).
    pub max_rss_bytes: u64,
}

/// Reaps `child` without blocking: its exit code (`None` when killed by a signal) and peak
/// resident memory, or `None` while it runs. (`Child::try_wait` cannot return the rusage.)
fn try_reap(child: &std::process::Child) -> Option<(Option<i32>, u64)> {
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to overwrite.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: plain syscall on our own child's pid, with valid out pointers.
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, libc::WNOHANG, &mut usage) };
    if pid <= 0 {
        return None;
    }
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    Some((code, usage.ru_maxrss as u64 * 1024))
}

/// Runs `cmd` (stdin empty, stdout and stderr captured), killing it and failing the test when
/// it takes longer than `limit` (a hang shows up here, with what it printed).
// The child is reaped by `try_reap` (wait4, for its rusage), which clippy cannot see.
#[allow(clippy::zombie_processes)]
pub fn run_limited(cmd: &mut Command, limit: Duration) -> Outcome {
    let started = Instant::now();
    let mut child = cmd
        .env_remove("RUST_LOG")
        .env_remove("RUST_BACKTRACE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn dicomflow");
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut b = Vec::new();
            let _ = pipe.read_to_end(&mut b);
            String::from_utf8_lossy(&b).into_owned()
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let (code, max_rss_bytes) = loop {
        if let Some(reaped) = try_reap(&child) {
            break reaped;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            let stderr = err.join().unwrap_or_default();
            panic!("{cmd:?} ran for more than {limit:?} (a hang?); stderr:\n{stderr}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Outcome {
        code,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
        elapsed: started.elapsed(),
        max_rss_bytes,
    }
}

/// Fails when `stderr` shows a panic, a backtrace hint, or an abort's message.
pub fn assert_no_panic_text(stderr: &str) {
    for needle in [
        "panicked",
        "RUST_BACKTRACE",
        "stack overflow",
        "memory allocation of",
    ] {
        assert!(
            !stderr.contains(needle),
            "stderr contains `{needle}`:\n{stderr}"
        );
    }
}

/// The reasons a record gives (skip reason and every failure reason).
pub fn reasons(rec: &serde_json::Value) -> Vec<String> {
    let mut v: Vec<String> = rec["failures"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|f| f["reason"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default();
    if let Some(s) = rec["skip_reason"].as_str() {
        v.push(s.to_string());
    }
    v
}

/// Compiles `source` (C++ that includes files of `kernels/`, the repository's kernel folder
/// being `{kernels}` in it) into an executable `name` in `dir`; `None`, after saying why on
/// stderr, where there is no C++ compiler (`test` names the skipped test). A source that does
/// not compile fails the test.
pub fn compile_cpp(dir: &Path, name: &str, source: &str, test: &str) -> Option<PathBuf> {
    let kernels = repo_path("kernels");
    let path = dir.join(format!("{name}.cpp"));
    std::fs::write(
        &path,
        source.replace("{kernels}", &kernels.display().to_string()),
    )
    .unwrap();
    let exe = dir.join(name);
    match Command::new("c++")
        .arg("-O2")
        .arg("-o")
        .arg(&exe)
        .arg(&path)
        .output()
    {
        Err(e) => {
            let _ = writeln!(
                std::io::stderr(),
                "skipping {test}: no C++ compiler (c++: {e})"
            );
            None
        }
        Ok(o) => {
            assert!(
                o.status.success(),
                "{test}: the kernels do not compile as host C++:\n{}",
                stderr(&o)
            );
            Some(exe)
        }
    }
}
