//! A run killed with SIGKILL leaves no partial output file, and `--skip-existing` then
//! completes exactly the missing outputs (issue: foundation, acceptance 4); it never keeps
//! images rendered with other settings (issue 21: a new window silently kept the old images).

use crate::common::{
    assert_exit, bin, decodes_completely, pngs, repo_path, stderr, synth, tempdir,
};

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

/// The entries of `dir`, less the run's own state folder (`.dicomflow`: the settings record).
fn all_entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n != ".dicomflow")
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// A series of `slices` 128² slices in `input`.
fn synth_series(input: &Path, slices: usize) {
    synth(input, &["--size", "128", "--slices", &slices.to_string()]);
}

/// `dicomflow run INPUT -o OUT --no-tui`, to which a test adds its flags.
fn run_command(input: &Path, out: &Path) -> Command {
    let mut c = Command::new(bin());
    c.args([
        "run",
        input.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--no-tui",
    ]);
    c
}

/// Waits until `child` has written `n` outputs to `out`; fails if it ends first.
fn wait_for_outputs(child: &mut Child, out: &Path, n: usize) {
    let start = Instant::now();
    while pngs(out).len() < n {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "run produced no output"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "run ended before it could be stopped"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The outputs in `out` after a stopped run, asserting that they are nothing but complete
/// PNGs: no partial file, no temporary name left behind.
fn complete_outputs_after(out: &Path, what: &str) -> Vec<PathBuf> {
    for name in all_entries(out) {
        assert!(
            name.ends_with(".png"),
            "unexpected file after {what}: {name}"
        );
    }
    let written = pngs(out);
    for p in &written {
        assert!(decodes_completely(p), "partial output {}", p.display());
    }
    written
}

#[test]
fn kill_9_leaves_no_partial_output_and_skip_existing_completes_the_rest() {
    const SLICES: usize = 600;
    let root = tempdir("resume");
    let input = root.join("in");
    let out = root.join("out");
    synth_series(&input, SLICES);

    // One writer and the slowest PNG setting keep the run going long enough to be killed in
    // the middle; the kill lands while writers are busy.
    let mut child = run_command(&input, &out)
        .args(["-q", "--writers", "1", "--png-compression", "best"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_outputs(&mut child, &out, 40);
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();

    let before = complete_outputs_after(&out, "kill");
    assert!(
        before.len() < SLICES,
        "the run finished before the kill ({} outputs)",
        before.len()
    );
    let stamps: Vec<SystemTime> = before
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().modified().unwrap())
        .collect();

    let report = root.join("report.json");
    let status = run_command(&input, &out)
        .args(["-q", "--skip-existing"])
        .arg("--report")
        .arg(&report)
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(0));

    let after = pngs(&out);
    assert_eq!(after.len(), SLICES);
    for p in &after {
        assert!(decodes_completely(p), "{}", p.display());
    }
    // Outputs that existed were kept as they were.
    for (p, t) in before.iter().zip(&stamps) {
        assert_eq!(
            std::fs::metadata(p).unwrap().modified().unwrap(),
            *t,
            "{} was rewritten",
            p.display()
        );
    }
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let totals = &r["result"]["totals"];
    assert_eq!(
        totals["frames_existing"].as_u64().unwrap() as usize,
        before.len()
    );
    assert_eq!(
        totals["frames_written"].as_u64().unwrap() as usize,
        SLICES - before.len()
    );
    assert_eq!(totals["files_failed"].as_u64().unwrap(), 0);
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn sigterm_finishes_the_slices_in_flight_exits_130_and_skip_existing_completes_the_run() {
    const SLICES: usize = 600;
    let root = tempdir("sigterm");
    let input = root.join("in");
    let out = root.join("out");
    synth_series(&input, SLICES);

    // The default (shared) layout, slowed by the slowest PNG setting and held to two threads
    // (what a 2-core machine gets anyway) so that the signal lands in the middle of the run:
    // with a thread per core, a 32-core host finished all 600 slices in 0.04 s, before it.
    let report = root.join("stopped.json");
    let mut child = run_command(&input, &out)
        .args(["--png-compression", "best", "--writers", "2", "--report"])
        .arg(&report)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_outputs(&mut child, &out, 40);
    // SAFETY: kill(2) on our own child's pid; no memory is involved.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let stopped = child.wait_with_output().unwrap();
    let summary = stderr(&stopped);
    assert_eq!(
        stopped.status.code(),
        Some(130),
        "a stopped run is not a success:\n{summary}"
    );
    assert!(
        summary.contains("stopped before every input was done")
            && summary.contains("--skip-existing"),
        "{summary}"
    );

    // Only complete outputs, and the report accounts for every file: written or cancelled.
    let written = complete_outputs_after(&out, "SIGTERM");
    assert!(written.len() < SLICES, "the run finished before the signal");
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let totals = &r["result"]["totals"];
    assert_eq!(r["result"]["cancelled"], true);
    assert_eq!(totals["files_failed"].as_u64(), Some(0));
    assert_eq!(
        totals["frames_written"].as_u64().unwrap() as usize,
        written.len()
    );
    let cancelled = totals["files_cancelled"].as_u64().unwrap() as usize;
    assert!(cancelled > 0);
    assert!(written.len() + cancelled <= SLICES);

    // The rest, later: exit 0 and every slice present.
    let status = run_command(&input, &out)
        .args(["-q", "--skip-existing"])
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(0));
    assert_eq!(pngs(&out).len(), SLICES);
    std::fs::remove_dir_all(&root).unwrap();
}

fn run_sample(out: &Path, extra: &[&str]) -> std::process::Output {
    let sample = repo_path("assets/sample");
    Command::new(bin())
        .args(["run", sample.to_str().unwrap(), "-o", out.to_str().unwrap()])
        .args(["--no-tui", "--skip-existing"])
        .args(extra)
        .output()
        .unwrap()
}

#[test]
fn skip_existing_refuses_images_of_other_settings_or_renders_them_again() {
    let root = tempdir("resume-settings");
    let out = root.join("out");
    let o = run_sample(&out, &["-q"]);
    assert_exit(&o, 0);
    assert!(out.join(".dicomflow/run.json").is_file());
    let first = std::fs::read(out.join("IM00001.png")).unwrap();
    // The same settings: everything is skipped.
    let o = run_sample(&out, &[]);
    assert_exit(&o, 0);
    assert!(
        stderr(&o).contains("0 written, 200 already present"),
        "{}",
        stderr(&o)
    );
    // Another window: refused before any work, naming what changed; the images stay.
    let o = run_sample(&out, &["--window", "100,200", "-q"]);
    assert_exit(&o, 2);
    let err = stderr(&o);
    assert!(err.contains("window:"), "{err}");
    assert!(err.contains("--rerender-changed"), "{err}");
    assert_eq!(std::fs::read(out.join("IM00001.png")).unwrap(), first);
    // --rerender-changed renders every image again, and the record follows.
    let o = run_sample(&out, &["--window", "100,200", "--rerender-changed"]);
    assert_exit(&o, 0);
    assert!(stderr(&o).contains("200 written"), "{}", stderr(&o));
    assert_ne!(std::fs::read(out.join("IM00001.png")).unwrap(), first);
    let o = run_sample(&out, &["--window", "100,200", "-q"]);
    assert_exit(&o, 0);
    // A run without --skip-existing keeps an existing record up to date.
    let o = Command::new(bin())
        .args([
            "run",
            "assets/sample",
            "-o",
            out.to_str().unwrap(),
            "-q",
            "--no-tui",
        ])
        .args(["--format", "jpeg"])
        .output()
        .unwrap();
    assert_exit(&o, 0);
    let o = run_sample(&out, &["--window", "100,200", "-q"]);
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("format:"));
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn a_plain_first_run_is_recorded_so_skip_existing_with_another_window_is_refused() {
    let root = tempdir("resume-plain-first");
    let out = root.join("out");
    // The first run has no --skip-existing: its settings are recorded all the same.
    let o = Command::new(bin())
        .args(["run", "assets/sample", "-o", out.to_str().unwrap()])
        .args(["-q", "--no-tui"])
        .output()
        .unwrap();
    assert_exit(&o, 0);
    assert!(out.join(".dicomflow/run.json").is_file());
    let first = std::fs::read(out.join("IM00001.png")).unwrap();
    let o = run_sample(&out, &["--window", "100,200", "-q"]);
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("window:"));
    assert_eq!(std::fs::read(out.join("IM00001.png")).unwrap(), first);
    std::fs::remove_dir_all(&root).unwrap();
}
