//! `dicomflow watch` (issue 19, acceptance 5): files written slowly in chunks are rendered
//! once complete and never before; a finished folder moved in is walked; 300 files copied
//! quickly into new subfolders are all rendered; every file exactly once.

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common::peers::*;
use crate::common::{all_files, assert_exit, bin, stderr, tempdir};

/// Every output under `dir`, recursively.
fn outputs(dir: &Path) -> Vec<std::path::PathBuf> {
    if !dir.exists() {
        return Vec::new();
    }
    all_files(dir)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "png"))
        .collect()
}

#[test]
fn chunked_writes_moved_folders_and_fast_copies_are_each_rendered_once_when_complete() {
    let dir = tempdir("watch");
    let watched = dir.join("in");
    let out = dir.join("out");
    std::fs::create_dir_all(&watched).unwrap();
    // Something already there: rendered by the first pass.
    let first = synth(&dir.join("first"), 64, 3, 41);
    for f in &first {
        std::fs::copy(f, watched.join(f.file_name().unwrap())).unwrap();
    }
    let report = dir.join("report.json");
    let mut cmd = Command::new(bin());
    cmd.args(["watch", "--no-tui", "-v", "--settle-ms", "200", "-o"])
        .arg(&out)
        .arg("--report")
        .arg(&report)
        .arg(&watched);
    let mut watch = Proc::spawn("dicomflow watch", cmd, &dir.join("watch.log"));
    assert!(
        wait_until(Duration::from_secs(30), || outputs(&out).len() == 3),
        "first pass:\n{}",
        watch.output()
    );

    // 1. A file written slowly, in chunks (the writer closes it between chunks, so inotify
    //    reports a close-write after each): no output before the last chunk.
    let slow = synth(&dir.join("slow"), 128, 1, 43).remove(0);
    let bytes = std::fs::read(&slow).unwrap();
    let target = watched.join("slow.dcm");
    let chunks = 5;
    for (i, chunk) in bytes.chunks(bytes.len().div_ceil(chunks)).enumerate() {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&target)
            .unwrap();
        f.write_all(chunk).unwrap();
        drop(f);
        std::thread::sleep(Duration::from_millis(600));
        if i + 1 < chunks {
            assert!(
                !out.join("slow.png").exists(),
                "rendered after chunk {} of {chunks}",
                i + 1
            );
        }
    }
    assert!(
        wait_until(Duration::from_secs(20), || out.join("slow.png").exists()),
        "the slow file was never rendered:\n{}",
        watch.output()
    );

    // 2. A finished folder moved in: one event for the folder, none for its 20 files.
    let staged = dir.join("staged/series-a");
    let moved = synth(&staged, 64, 20, 47);
    std::fs::rename(&staged, watched.join("series-a")).unwrap();

    // 3. 300 files copied quickly into new subfolders (created just before their files).
    let many = synth(&dir.join("many"), 64, 300, 53);
    for (i, f) in many.iter().enumerate() {
        let sub = watched.join(format!("batch-{:02}", i / 30));
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::copy(f, sub.join(f.file_name().unwrap())).unwrap();
    }
    let expected = 3 + 1 + moved.len() + many.len();
    let all = wait_until(Duration::from_secs(120), || outputs(&out).len() == expected);
    assert!(
        all,
        "{} of {expected} outputs:\n{}",
        outputs(&out).len(),
        watch.output()
    );
    // A rescan or a late event must not render anything again.
    std::thread::sleep(Duration::from_millis(800));
    let status = watch.terminate();
    let text = watch.output();
    assert!(status.success(), "{text}");
    assert!(!text.contains("panicked"), "{text}");
    for p in outputs(&out) {
        assert!(decodes_completely(&p), "{} is partial", p.display());
    }
    // Exactly once: the report counts every file rendered, and there are as many as files.
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let totals = &r["result"]["totals"];
    assert_eq!(totals["files"], expected, "{totals}");
    assert_eq!(totals["files_ok"], expected, "{totals}");
    assert_eq!(r["live"]["arrivals"], expected);
    // Mirrored names: the moved folder and the batches keep their relative paths.
    assert!(out.join("series-a").join("IM00001.png").is_file());
    assert!(out.join("batch-09").is_dir());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn several_watched_folders_are_mirrored_under_their_names_and_the_settings_record_is_kept() {
    let dir = tempdir("watch-several");
    let (a, b) = (dir.join("in/a"), dir.join("in/b"));
    // Two series whose files have the same names.
    synth(&a, 64, 2, 61);
    synth(&b, 64, 2, 62);
    let out = dir.join("out");
    // A run made images here with the default window...
    let o = Command::new(bin())
        .args(["run", "-q", "--no-tui", "-o"])
        .arg(&out)
        .arg(&a)
        .output()
        .unwrap();
    assert_exit(&o, 0);
    // ...so watching into the same folder with --skip-existing and another window is refused
    // before any work, naming what changed.
    let o = Command::new(bin())
        .args([
            "watch",
            "--no-tui",
            "--skip-existing",
            "--window",
            "100,200",
            "-o",
        ])
        .arg(&out)
        .arg(&a)
        .arg(&b)
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("window:"), "{err}");
    // Two folders, each under its own name (as `run a b -o OUT` lays them out).
    let out2 = dir.join("out2");
    let mut cmd = Command::new(bin());
    cmd.args(["watch", "--no-tui", "--settle-ms", "100", "-o"])
        .arg(&out2)
        .arg(&a)
        .arg(&b);
    let mut watch = Proc::spawn("dicomflow watch", cmd, &dir.join("watch.log"));
    assert!(
        wait_until(Duration::from_secs(30), || outputs(&out2).len() == 4),
        "{:?}\n{}",
        outputs(&out2),
        watch.output()
    );
    let status = watch.terminate();
    assert!(status.success(), "{}", watch.output());
    for series in ["a", "b"] {
        for name in ["IM00001.png", "IM00002.png"] {
            assert!(out2.join(series).join(name).is_file(), "{series}/{name}");
        }
    }
    // The watch recorded its settings, as a run does.
    assert!(out2.join(".dicomflow/run.json").is_file());
    std::fs::remove_dir_all(&dir).unwrap();
}
