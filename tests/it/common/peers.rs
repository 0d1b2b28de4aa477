//! Helpers for the tests that run dicomflow beside real peers (DCMTK, Orthanc) or as a
//! long-running process (`listen`, `watch`): processes killed by PID when the test ends, also
//! on failure; waiting with a deadline; test series and their SOP Instance UIDs; reference
//! outputs from `dicomflow run`.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::common::{all_files, bin};

/// A child process killed (SIGKILL, by its PID) and reaped when dropped, so that a failing
/// test leaves no peer running.
pub struct Proc {
    pub child: Child,
    pub name: String,
    /// Where its stdout and stderr go.
    pub log: PathBuf,
}

impl Proc {
    /// Starts `cmd` with stdout and stderr in `log`.
    pub fn spawn(name: &str, mut cmd: Command, log: &Path) -> Proc {
        let out = std::fs::File::create(log).unwrap();
        let err = out.try_clone().unwrap();
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        Proc {
            child,
            name: name.to_string(),
            log: log.to_path_buf(),
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// What it wrote so far.
    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends `signal` to it.
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill only sends a signal to the process we started (its PID is ours until
        // we reap it).
        unsafe {
            libc::kill(self.pid(), signal);
        }
    }

    /// Waits up to `limit` for it to exit.
    pub fn wait_for(&mut self, limit: Duration) -> Option<ExitStatus> {
        let end = Instant::now() + limit;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if Instant::now() >= end {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, then its exit status (panics, killing it, when it does not exit in 60 s).
    pub fn terminate(&mut self) -> ExitStatus {
        self.signal(libc::SIGTERM);
        match self.wait_for(Duration::from_secs(60)) {
            Some(status) => status,
            None => panic!(
                "{} did not exit within 60 s of SIGTERM; output:\n{}",
                self.name,
                self.output()
            ),
        }
    }

    /// Resident memory, KiB (`VmRSS`).
    pub fn rss_kib(&self) -> u64 {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.signal(libc::SIGKILL);
            let _ = self.child.wait();
        }
    }
}

pub use crate::common::decodes_completely;
pub use dicomflow::source::live::wait_until;

/// True when every program is installed (an absolute path, or a name found on PATH); else
/// says which one is missing, for the test to print why it skips.
pub fn missing(programs: &[&str]) -> Option<String> {
    for p in programs {
        let found = if p.starts_with('/') {
            Path::new(p).is_file()
        } else {
            std::env::var_os("PATH")
                .map(|paths| std::env::split_paths(&paths).any(|d| d.join(p).is_file()))
                .unwrap_or(false)
        };
        if !found {
            return Some(format!("{p} is not installed"));
        }
    }
    None
}

/// A free TCP port on loopback (bound and released: good enough for a test's peers).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Writes a `slices`-slice phantom series of `size`² into `dir`; its files, in order.
pub fn synth(dir: &Path, size: u32, slices: u32, seed: u64) -> Vec<PathBuf> {
    let (size, slices, seed) = (size.to_string(), slices.to_string(), seed.to_string());
    crate::common::synth(
        dir,
        &["--size", &size, "--slices", &slices, "--seed", &seed],
    )
}

/// The SOP Instance UID in a file's meta group.
pub fn sop_instance_uid(path: &Path) -> String {
    let obj = dicom_object::OpenFileOptions::new()
        .read_until(dicom_dictionary_std::tags::PIXEL_DATA)
        .open_file(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    obj.meta()
        .media_storage_sop_instance_uid()
        .trim_end_matches(['\0', ' '])
        .to_string()
}

/// `dicomflow run` over `inputs` into `out`; the reference outputs by SOP Instance UID of the
/// input (each input a single-frame file given directly, or found under a folder).
pub fn reference_outputs(inputs: &[PathBuf], out: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut refs = BTreeMap::new();
    for (i, input) in inputs.iter().enumerate() {
        // One file per run into its own folder: names never collide across syntaxes.
        let dir = out.join(format!("{i:05}"));
        let status = Command::new(bin())
            .arg("run")
            .arg(input)
            .arg("-o")
            .arg(&dir)
            .args(["-q", "--no-tui"])
            .status()
            .unwrap();
        assert!(status.success(), "run {}", input.display());
        let png = all_files(&dir)
            .into_iter()
            .find(|p| p.extension().is_some_and(|e| e == "png"))
            .unwrap_or_else(|| panic!("no output for {}", input.display()));
        refs.insert(sop_instance_uid(input), std::fs::read(png).unwrap());
    }
    refs
}

/// A running `dicomflow listen`, on the port it reports.
pub struct Listening {
    pub proc: Proc,
    pub port: u16,
}

/// Starts `dicomflow listen` on a free loopback port with outputs in `out` and `extra`
/// arguments; waits until it listens.
pub fn start_listen(dir: &Path, out: &Path, extra: &[&str]) -> Listening {
    let mut cmd = Command::new(bin());
    cmd.args([
        "listen",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--no-tui",
        "-v",
        "-o",
    ])
    .arg(out)
    .args(extra);
    let n = std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0);
    let proc = Proc::spawn(
        "dicomflow listen",
        cmd,
        &dir.join(format!("listen-{n}.log")),
    );
    let mut port = 0;
    let up = wait_until(Duration::from_secs(30), || {
        let text = proc.output();
        port = text
            .lines()
            .find_map(|l| l.strip_prefix("dicomflow: listening on 127.0.0.1:"))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        port != 0
    });
    assert!(up, "listen did not start:\n{}", proc.output());
    Listening { proc, port }
}

/// Runs DCMTK's `program` (full path: pip's pynetdicom installs shims of the same names) with
/// `TCP_NODELAY=1`; exit status and output.
pub fn dcmtk(program: &str, args: &[&str]) -> (ExitStatus, String) {
    let mut child = Command::new(program)
        .args(args)
        .env("TCP_NODELAY", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    let mut text = String::new();
    let mut err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let _ = child.stdout.take().unwrap().read_to_string(&mut text);
    let status = child.wait().unwrap();
    text.push_str(&reader.join().unwrap());
    (status, text)
}

/// Files named in `storescu -v` output whose store was answered with success.
pub fn acknowledged(storescu_log: &str) -> Vec<PathBuf> {
    let mut current: Option<PathBuf> = None;
    let mut done = Vec::new();
    for line in storescu_log.lines() {
        if let Some(f) = line.strip_prefix("I: Sending file: ") {
            current = Some(PathBuf::from(f.trim()));
        } else if line.contains("Received Store Response (Success)") {
            if let Some(f) = current.take() {
                done.push(f);
            }
        }
    }
    done
}
