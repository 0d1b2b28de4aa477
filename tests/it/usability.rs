//! What the user sees when something is off (issue 21, "rough edges"): a failure every file
//! shares said once, a mistyped input path or an empty input said before or instead of a
//! performance table, `run --help` with defaults and its tuning flags apart, flag names (not
//! configuration keys) in the errors of flags, `inspect`'s wording and its folder view, and
//! naming patterns with any keyword of the DICOM dictionary.

use crate::common::{assert_exit, bin, dicomflow, file_names, repo_path, stderr, stdout, tempdir};

use std::path::PathBuf;
use std::process::Command;

fn sample() -> PathBuf {
    repo_path("assets/sample")
}

#[test]
fn a_failure_every_file_shares_is_said_once_with_its_count() {
    let root = tempdir("use-aggregate");
    let out = root.join("out");
    let s = sample();
    let args = [
        "run",
        s.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--no-tui",
        "--window",
        "file:3",
    ];
    // -q: only the failures, and these as one line with the count.
    let mut quiet = args.to_vec();
    quiet.push("-q");
    let o = dicomflow(&quiet);
    assert_exit(&o, 1);
    let err = stderr(&o);
    assert!(
        err.contains("200 failures: render: window 3 requested, the file has 2 window(s)"),
        "{err}"
    );
    assert!(err.lines().count() < 5, "{err}");
    // Without -q the log says it a few times, then that the rest fail the same way.
    let o = dicomflow(&args);
    assert_exit(&o, 1);
    let err = stderr(&o);
    let said = err.matches("window 3 requested").count();
    assert!((2..=6).contains(&said), "said {said} times:\n{err}");
    assert!(err.contains("more files fail the same way"), "{err}");
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn a_mistyped_input_path_is_a_usage_error_before_any_work() {
    let root = tempdir("use-missing");
    let out = root.join("out");
    let s = sample();
    let missing = root.join("no-such-folder");
    let o = dicomflow(&[
        "run",
        s.to_str().unwrap(),
        missing.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--no-tui",
    ]);
    assert_exit(&o, 2);
    let err = stderr(&o);
    assert!(
        err.contains("no-such-folder: no such file or folder"),
        "{err}"
    );
    // No per-file failure and no performance table: nothing ran.
    assert!(!err.contains("slices/s"), "{err}");
    assert!(!out.exists(), "the output folder was created");
    std::fs::remove_dir_all(&root).unwrap();
}

/// The output folder is made before the backend starts (the inputs are listed meanwhile); a
/// backend that cannot start leaves none of the folders it made. GPU 63 exists on no machine
/// that runs these tests; without CUDA the backend fails sooner, the same way.
#[test]
fn a_backend_that_cannot_start_leaves_no_output_folder() {
    let root = tempdir("use-no-backend");
    let out = root.join("new/out");
    let s = sample();
    let o = dicomflow(&[
        "run",
        s.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--backend",
        "cuda",
        "--gpus",
        "63",
        "--no-tui",
    ]);
    assert_exit(&o, 2);
    let err = stderr(&o);
    assert!(err.contains("backend"), "{err}");
    assert!(
        !root.join("new").exists(),
        "the folders made for the output remain"
    );
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn an_empty_input_says_so() {
    let root = tempdir("use-empty");
    let empty = root.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let o = dicomflow(&[
        "run",
        empty.to_str().unwrap(),
        "-o",
        root.join("out").to_str().unwrap(),
        "--no-tui",
        "-q",
    ]);
    assert_exit(&o, 0);
    assert!(
        stderr(&o).contains("no input files found in"),
        "{}",
        stderr(&o)
    );
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn run_help_shows_defaults_and_puts_the_tuning_flags_apart() {
    let o = dicomflow(&["run", "--help"]);
    assert!(o.status.success());
    let help = stdout(&o);
    let (general, tuning) = help
        .split_once("Tuning (threads, backend, GPUs):")
        .unwrap_or_else(|| panic!("no tuning heading:\n{help}"));
    for flag in [
        "--layout",
        "--loaders",
        "--workers",
        "--writers",
        "--slots",
        "--backend",
        "--transfer",
        "--gpus",
        "--streams",
    ] {
        let shown = format!("{flag} <");
        assert!(tuning.contains(&shown), "{flag} not under the heading");
        assert!(!general.contains(&shown), "{flag} also among the others");
    }
    for default in [
        "[default: png]",
        "[default: file]",
        "[default: mirror]",
        "[default: 2]",
    ] {
        assert!(help.contains(default), "{default} not in:\n{help}");
    }
}

#[test]
fn a_bad_flag_value_names_the_flag_not_the_configuration_key() {
    let root = tempdir("use-flagname");
    let out = root.join("out");
    let s = sample();
    for (flag, value, key) in [
        ("--window", "file:0", "render.window"),
        ("--jpeg-quality", "0", "output.jpeg_quality"),
        ("--slots", "1", "pipeline.slots"),
    ] {
        let o = dicomflow(&[
            "run",
            s.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            flag,
            value,
        ]);
        assert_exit(&o, 2);
        let err = stderr(&o);
        assert!(err.contains(&format!("for `{flag}`")), "{err}");
        assert!(!err.contains(key), "{err}");
    }
    // In a configuration file the key is named, as before.
    let cfg = root.join("c.toml");
    std::fs::write(&cfg, "[output]\njpeg_quality = 0\n").unwrap();
    let o = dicomflow(&[
        "run",
        s.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "-c",
        cfg.to_str().unwrap(),
    ]);
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("output.jpeg_quality"), "{}", stderr(&o));
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn inspect_reads_as_written_by_hand() {
    let f = sample().join("IM00001.dcm");
    let o = dicomflow(&["inspect", f.to_str().unwrap()]);
    assert_exit(&o, 0);
    let text = stdout(&o);
    for needle in [
        "samples            1 per pixel\n",
        "rescale 1·x - 1024",
        "series             2.25.",
        "instance           1 (SOP 2.25.",
        "spacing            3.90625 x 3.90625 mm (row x column), slice thickness 1.25 mm",
    ] {
        assert!(text.contains(needle), "{needle:?} not in:\n{text}");
    }
    assert!(!text.contains("+ -"), "{text}");
    let root = tempdir("use-inspect-rgb");
    let o = dicomflow(&[
        "synth",
        root.to_str().unwrap(),
        "--rgb",
        "--slices",
        "1",
        "--size",
        "16",
        "-q",
    ]);
    assert_exit(&o, 0);
    let o = dicomflow(&["inspect", root.join("IM00001.dcm").to_str().unwrap()]);
    assert_exit(&o, 0);
    let text = stdout(&o);
    assert!(text.contains("3 per pixel, interleaved"), "{text}");
    assert!(
        text.contains("chosen             colour RGB as stored"),
        "{text}"
    );
    assert!(!text.contains("Rgb"), "{text}");
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn naming_patterns_take_any_dictionary_keyword() {
    let root = tempdir("use-naming");
    let input = root.join("in");
    let o = dicomflow(&[
        "synth",
        input.to_str().unwrap(),
        "--size",
        "32",
        "--slices",
        "2",
        "-q",
    ]);
    assert_exit(&o, 0);
    let out = root.join("out");
    let o = dicomflow(&[
        "run",
        input.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "-q",
        "--no-tui",
        "--naming",
        "{Modality}_{Rows}/{BitsStored}/{InstanceNumber:04}",
    ]);
    assert_exit(&o, 0);
    assert_eq!(file_names(&out), ["CT_32/12/0001.png", "CT_32/12/0002.png"]);
    // A keyword the dictionary does not know is a usage error naming it.
    let o = dicomflow(&[
        "run",
        input.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--naming",
        "{SeriesDescriptoin}",
    ]);
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("SeriesDescriptoin"), "{}", stderr(&o));
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn inspect_of_a_folder_lists_each_series_and_a_total() {
    let root = tempdir("use-inspect-folder");
    for (dir, extra) in [
        ("a", &["--slices", "3"][..]),
        ("b", &["--slices", "2", "--seed", "7", "--rgb"][..]),
    ] {
        let mut args = vec![
            "synth".to_string(),
            root.join(dir).to_str().unwrap().to_owned(),
            "--size".into(),
            "16".into(),
            "-q".into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let o = Command::new(bin()).args(&args).output().unwrap();
        assert_exit(&o, 0);
    }
    std::fs::write(root.join("notes.txt"), "not DICOM").unwrap();
    let o = dicomflow(&["inspect", root.to_str().unwrap()]);
    assert_exit(&o, 0);
    let text = stdout(&o);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    let ct = lines
        .iter()
        .find(|l| l.contains(" CT "))
        .unwrap_or_else(|| panic!("{text}"));
    for needle in [
        "series 2.25.",
        "study 2.25.",
        "16x16",
        "3 file(s), 3 frame(s)",
        "Explicit VR Little Endian",
        "windows 40,400 -600,1500",
    ] {
        assert!(ct.contains(needle), "{needle:?} not in {ct}");
    }
    let ot = lines
        .iter()
        .find(|l| l.contains(" OT "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        ot.contains("2 file(s), 2 frame(s)") && ot.contains("windows none"),
        "{ot}"
    );
    assert_eq!(
        lines[2],
        "total: 2 series, 5 DICOM file(s), 5 frame(s); 1 other file(s); 0 unreadable"
    );
    std::fs::remove_dir_all(&root).unwrap();
}
