//! Helpers shared by the integration tests: the binary under test, scratch folders, the
//! files a run wrote, and runs bounded in time whose peak memory is measured.
#![allow(dead_code)] // each test crate uses a different subset

pub mod schema;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The `dicomflow` binary cargo built for these tests.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_dicomflow")
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

/// A fresh, empty scratch folder unique to this test process and `name`.
pub fn tempdir(name: &str) -> PathBuf {
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
