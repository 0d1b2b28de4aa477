//! The command-line contract scripts rely on: output names (mirrored tree, extension replaced,
//! direct files, multi-frame suffixes, naming patterns), configuration errors (exit code 2,
//! naming the key, value and file), and `inspect`.

mod common;
use common::{bin, tempdir};

use std::path::Path;
use std::process::{Command, Output};

fn dicomflow(args: &[&str]) -> Output {
    Command::new(bin()).args(args).output().unwrap()
}

fn synth(dir: &Path, extra: &[&str]) {
    let mut args = vec!["synth", dir.to_str().unwrap(), "--size", "32", "-q"];
    args.extend_from_slice(extra);
    let out = dicomflow(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn files_under(dir: &Path) -> Vec<String> {
    common::files_under(dir)
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect()
}

#[test]
fn output_names_mirror_the_input_tree() {
    let root = tempdir("cli-mirror");
    let input = root.join("in");
    synth(&input.join("a/b"), &["--slices", "2"]);
    synth(&input.join("mf"), &["--slices", "3", "--multiframe"]);
    // No extension, and a UID-like name whose numeric suffix is not an extension.
    std::fs::copy(input.join("a/b/IM00001.dcm"), input.join("a/plain")).unwrap();
    std::fs::copy(input.join("a/b/IM00002.dcm"), input.join("a/1.2.840.99.7")).unwrap();
    let out = root.join("out");
    let o = dicomflow(&[
        "run",
        input.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "-q",
        "--no-tui",
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(
        files_under(&out),
        [
            "a/1.2.840.99.7.png",
            "a/b/IM00001.png",
            "a/b/IM00002.png",
            "a/plain.png",
            "mf/MF00001_f0001.png",
            "mf/MF00001_f0002.png",
            "mf/MF00001_f0003.png",
        ]
    );
    // A file given directly lands at the top of the output directory.
    let direct = root.join("direct");
    let f = input.join("a/b/IM00002.dcm");
    let o = dicomflow(&[
        "run",
        f.to_str().unwrap(),
        "-o",
        direct.to_str().unwrap(),
        "-q",
        "--no-tui",
    ]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(files_under(&direct), ["IM00002.png"]);
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn naming_patterns_use_sanitized_header_values() {
    let root = tempdir("cli-pattern");
    let input = root.join("in");
    synth(&input, &["--slices", "2"]);
    let out = root.join("out");
    let o = dicomflow(&[
        "run",
        input.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "-q",
        "--no-tui",
        "--naming",
        "{PatientID}/{SeriesNumber}/{InstanceNumber:04}",
        "--format",
        "jpeg",
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(
        files_under(&out),
        ["PHANTOM1/1/0001.jpg", "PHANTOM1/1/0002.jpg"]
    );
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn configuration_errors_exit_2_naming_key_value_and_file() {
    let root = tempdir("cli-config");
    let cfg = root.join("bad.toml");
    std::fs::write(&cfg, "[output]\nformat = \"gif\"\n").unwrap();
    let o = dicomflow(&[
        "run",
        "assets/sample",
        "-o",
        root.join("out").to_str().unwrap(),
        "-c",
        cfg.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    for needle in ["bad.toml", "output.format", "gif"] {
        assert!(err.contains(needle), "{needle} not in: {err}");
    }
    std::fs::write(&cfg, "[render]\nwindw = \"file\"\n").unwrap();
    let o = dicomflow(&[
        "run",
        "assets/sample",
        "-o",
        root.join("out").to_str().unwrap(),
        "-c",
        cfg.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("windw"));
    // A bad flag value is a usage error too.
    let o = dicomflow(&[
        "run",
        "assets/sample",
        "-o",
        root.join("out").to_str().unwrap(),
        "--window",
        "file:0",
    ]);
    assert_eq!(o.status.code(), Some(2));
    // The shipped default configuration is accepted as is.
    let default = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/default.toml");
    let one = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/sample/IM00001.dcm");
    let o = dicomflow(&[
        "run",
        one.to_str().unwrap(),
        "-o",
        root.join("ok").to_str().unwrap(),
        "-c",
        default.to_str().unwrap(),
        "-q",
        "--no-tui",
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn inspect_explains_windows_and_the_choice() {
    let f = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/sample/IM00001.dcm");
    let o = dicomflow(&["inspect", f.to_str().unwrap(), "--window", "file:2"]);
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout);
    for needle in [
        "Explicit VR Little Endian",
        "128 x 128",
        "stored 12",
        "MONOCHROME2",
        "slope 1 intercept -1024",
        "window file:1",
        "window file:2",
        "center -600 width 1500",
    ] {
        assert!(text.contains(needle), "{needle} not in:\n{text}");
    }
}

#[test]
fn every_thread_layout_writes_the_same_bytes() {
    // The shared layout is the default (on the CPU backend its threads load, render, encode
    // and write); `--layout stages` gives loaders and writers that render, and `--workers N`
    // separate render workers, in either layout. All must write the same files.
    let root = tempdir("cli-render-on-writers");
    let input = root.join("in");
    synth(&input.join("ct"), &["--slices", "6"]);
    synth(&input.join("rgb"), &["--slices", "2", "--rgb"]);
    synth(&input.join("cine"), &["--multiframe", "--slices", "5"]);
    let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/sample");
    let run = |out: &Path, extra: &[&str]| {
        let mut args = vec!["run", "--no-tui", "--backend", "cpu", "--writers", "2"];
        args.extend_from_slice(extra);
        args.extend([
            input.to_str().unwrap(),
            sample.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ]);
        let o = dicomflow(&args);
        let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(o.status.success(), "{stderr}");
        stderr
    };
    // Each layout: its arguments, and the thread line of its summary.
    let layouts: [(&str, &[&str], &str); 6] = [
        (
            "shared",
            &[],
            "2 shared (each loads, renders, encodes and writes)",
        ),
        (
            "shared-2-slots",
            &["--slots", "2"],
            "2 shared (each loads, renders, encodes and writes); slots 2",
        ),
        (
            "shared-workers-2-slots",
            &["--workers", "3", "--slots", "2"],
            "2 shared (each loads, encodes and writes), workers 3; slots 2",
        ),
        (
            "stages",
            &["--layout", "stages", "--loaders", "1"],
            "loaders 1, writers 2 (each renders, encodes and writes)",
        ),
        (
            "stages-workers",
            &["--layout", "stages", "--workers", "2"],
            "workers 2, writers 2",
        ),
        (
            "shared-workers",
            &["--workers", "2"],
            "2 shared (each loads, encodes and writes), workers 2",
        ),
    ];
    let reference = root.join(layouts[0].0);
    let mut files = Vec::new();
    for (name, extra, threads) in layouts {
        let out = root.join(name);
        let summary = run(&out, extra);
        assert!(summary.contains(threads), "{name}: {summary}");
        if files.is_empty() {
            files = files_under(&out);
            assert_eq!(files.len(), 6 + 2 + 5 + 200, "{files:?}");
            continue;
        }
        assert_eq!(files, files_under(&out), "{name}");
        for f in &files {
            assert!(
                std::fs::read(reference.join(f)).unwrap() == std::fs::read(out.join(f)).unwrap(),
                "{name}: {f} differs"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn inspect_says_where_compressed_frames_decode() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let j2k = fixtures.join("conformance/j2k_gray.dcm");
    // An empty folder as gpu.library_path, so the answer does not depend on this machine.
    let none = tempdir("inspect-nolib");
    let out = dicomflow(&[
        "inspect",
        j2k.to_str().unwrap(),
        "--library-path",
        none.to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("gpu decode"))
        .unwrap_or_else(|| panic!("no gpu decode line:\n{text}"));
    assert!(line.contains("lossless codestream"), "{line}");
    // Where the library is missing, the CPU and why; where it is found, the GPU and its version.
    assert!(
        line.contains("CPU (") || line.contains("GPU when the CUDA backend runs"),
        "{line}"
    );
    let off = dicomflow(&["inspect", j2k.to_str().unwrap(), "--gpu-decode", "none"]);
    let text = String::from_utf8_lossy(&off.stdout);
    assert!(text.contains("gpu.decode = \"none\""), "{text}");
    // Small lossless JPEG stays on the CPU whatever the policy (nvJPEG decodes it wrongly).
    let sv1 = fixtures.join("conformance/jpeg_lossless_sv1.dcm");
    let out = dicomflow(&["inspect", sv1.to_str().unwrap(), "--gpu-decode", "all"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("gpu decode         CPU"), "{text}");
    // Uncompressed files have no such line.
    let raw = fixtures.join("conformance/gray8.dcm");
    let out = dicomflow(&["inspect", raw.to_str().unwrap()]);
    assert!(!String::from_utf8_lossy(&out.stdout).contains("gpu decode"));
    std::fs::remove_dir_all(&none).unwrap();
}

#[test]
fn the_summary_says_gpu_decode_is_off_on_the_cpu_backend() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/conformance");
    let out_dir = tempdir("summary-decode-off");
    let j2k = fixtures.join("j2k_gray.dcm");
    let out = dicomflow(&[
        "run",
        j2k.to_str().unwrap(),
        "-o",
        out_dir.to_str().unwrap(),
        "--no-tui",
        "--backend",
        "cpu",
    ]);
    assert!(out.status.success());
    let summary = String::from_utf8_lossy(&out.stderr);
    assert!(
        summary.contains("gpu decode: off: the cpu backend decodes every frame"),
        "{summary}"
    );
    // Uncompressed input: nothing to say.
    let raw = fixtures.join("gray8.dcm");
    let out = dicomflow(&[
        "run",
        raw.to_str().unwrap(),
        "-o",
        out_dir.to_str().unwrap(),
        "--no-tui",
        "--backend",
        "cpu",
    ]);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("gpu decode"));
    std::fs::remove_dir_all(&out_dir).unwrap();
}
