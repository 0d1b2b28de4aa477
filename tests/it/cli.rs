//! The command-line contract scripts rely on: output names (mirrored tree, extension replaced,
//! direct files, several folders each under its own name, one file to a named image, to stdout
//! and from stdin, multi-frame suffixes, naming patterns), configuration errors (exit code 2,
//! naming the key, value and file), and `inspect`.

use crate::common::{
    self, assert_exit, bin, dicomflow, file_names, repo_path, stderr, stdout, tempdir,
};

use std::path::Path;
use std::process::Command;

/// A series of 32² slices in `dir`, with `extra` arguments to `synth`.
fn synth(dir: &Path, extra: &[&str]) {
    common::synth(dir, &[&["--size", "32"], extra].concat());
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
    assert_exit(&o, 0);
    assert_eq!(
        file_names(&out),
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
    assert_exit(&o, 0);
    assert_eq!(file_names(&direct), ["IM00002.png"]);
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
    assert_exit(&o, 0);
    assert_eq!(
        file_names(&out),
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
    assert_exit(&o, 2);
    let err = stderr(&o);
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
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("windw"));
    // A bad flag value is a usage error too.
    let o = dicomflow(&[
        "run",
        "assets/sample",
        "-o",
        root.join("out").to_str().unwrap(),
        "--window",
        "file:0",
    ]);
    assert_exit(&o, 2);
    // The shipped default configuration is accepted as is.
    let default = repo_path("config/default.toml");
    let one = repo_path("assets/sample/IM00001.dcm");
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
    assert_exit(&o, 0);
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn inspect_explains_windows_and_the_choice() {
    let f = repo_path("assets/sample/IM00001.dcm");
    let o = dicomflow(&["inspect", f.to_str().unwrap(), "--window", "file:2"]);
    assert!(o.status.success());
    let text = stdout(&o);
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
    let sample = repo_path("assets/sample");
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
        let stderr = stderr(&o);
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
            files = file_names(&out);
            assert_eq!(files.len(), 6 + 2 + 5 + 200, "{files:?}");
            continue;
        }
        assert_eq!(files, file_names(&out), "{name}");
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
    let fixtures = repo_path("tests/fixtures");
    let j2k = fixtures.join("conformance/j2k_gray.dcm");
    // An empty folder as gpu.library_path, so the answer does not depend on this machine.
    let none = tempdir("inspect-nolib");
    let out = dicomflow(&[
        "inspect",
        j2k.to_str().unwrap(),
        "--library-path",
        none.to_str().unwrap(),
    ]);
    let text = stdout(&out);
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
    let text = stdout(&off);
    assert!(text.contains("gpu.decode = \"none\""), "{text}");
    // Small lossless JPEG stays on the CPU whatever the policy (nvJPEG decodes it wrongly).
    let sv1 = fixtures.join("conformance/jpeg_lossless_sv1.dcm");
    let out = dicomflow(&["inspect", sv1.to_str().unwrap(), "--gpu-decode", "all"]);
    let text = stdout(&out);
    assert!(text.contains("gpu decode         CPU"), "{text}");
    // Uncompressed files have no such line.
    let raw = fixtures.join("conformance/gray8.dcm");
    let out = dicomflow(&["inspect", raw.to_str().unwrap()]);
    assert!(!stdout(&out).contains("gpu decode"));
    std::fs::remove_dir_all(&none).unwrap();
}

#[test]
fn the_summary_says_gpu_decode_is_off_on_the_cpu_backend() {
    let fixtures = repo_path("tests/fixtures/conformance");
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
    let summary = stderr(&out);
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
    assert!(!stderr(&out).contains("gpu decode"));
    std::fs::remove_dir_all(&out_dir).unwrap();
}

#[test]
fn several_folder_inputs_are_each_mirrored_under_their_own_name() {
    let root = tempdir("cli-multi");
    // Two series whose files have the same names.
    synth(&root.join("in/a"), &["--slices", "2"]);
    synth(&root.join("in/b"), &["--slices", "2"]);
    let (a, b) = (root.join("in/a"), root.join("in/b"));
    let single = root.join("in/b/IM00002.dcm");
    let out = root.join("out");
    let o = dicomflow(&[
        "run",
        &format!("{}/", a.display()),
        b.to_str().unwrap(),
        single.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "-q",
        "--no-tui",
    ]);
    assert_exit(&o, 0);
    // As `cp -r a/ b OUT/` lays them out; the file given directly (also under b, so rendered
    // once) keeps b's name.
    assert_eq!(
        file_names(&out),
        [
            "a/IM00001.png",
            "a/IM00002.png",
            "b/IM00001.png",
            "b/IM00002.png"
        ]
    );
    // Two folders of the same name still collide: the message names both inputs.
    let other = root.join("other/a");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::copy(root.join("in/b/IM00001.dcm"), other.join("IM00001.dcm")).unwrap();
    let o = dicomflow(&[
        "run",
        a.to_str().unwrap(),
        other.to_str().unwrap(),
        "-o",
        root.join("out2").to_str().unwrap(),
        "-q",
        "--no-tui",
    ]);
    assert_exit(&o, 1);
    let err = stderr(&o);
    let first = a.join("IM00001.dcm");
    let second = other.join("IM00001.dcm");
    let line = err
        .lines()
        .find(|l| l.contains("is already the output of"))
        .unwrap_or_else(|| panic!("no collision in:\n{err}"));
    assert!(line.contains(second.to_str().unwrap()), "{line}");
    assert!(line.contains(first.to_str().unwrap()), "{line}");
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn one_file_to_a_named_image_to_stdout_and_from_stdin() {
    let root = tempdir("cli-single");
    let f = repo_path("assets/sample/IM00100.dcm");
    let folder = root.join("folder");
    let o = dicomflow(&[
        "run",
        f.to_str().unwrap(),
        "-o",
        folder.to_str().unwrap(),
        "-q",
        "--no-tui",
    ]);
    assert_exit(&o, 0);
    let expected = std::fs::read(folder.join("IM00100.png")).unwrap();
    // -o name.png: exactly that file, nothing else beside it.
    let named = root.join("sub/name.png");
    let o = dicomflow(&[
        "run",
        f.to_str().unwrap(),
        "-o",
        named.to_str().unwrap(),
        "-q",
        "--no-tui",
    ]);
    assert_exit(&o, 0);
    assert!(named.is_file(), "{} is not a file", named.display());
    assert_eq!(std::fs::read(&named).unwrap(), expected);
    assert_eq!(file_names(&root.join("sub")), ["name.png"]);
    // The name's extension picks the format; --format may not contradict it.
    let jpg = root.join("name.jpg");
    let o = dicomflow(&[
        "run",
        f.to_str().unwrap(),
        "-o",
        jpg.to_str().unwrap(),
        "-q",
    ]);
    assert_exit(&o, 0);
    assert_eq!(&std::fs::read(&jpg).unwrap()[..2], &[0xFF, 0xD8]);
    let o = dicomflow(&[
        "run",
        f.to_str().unwrap(),
        "-o",
        root.join("x.png").to_str().unwrap(),
        "--format",
        "jpeg",
    ]);
    assert_exit(&o, 2);
    // -o -: the image on stdout.
    let o = dicomflow(&["run", f.to_str().unwrap(), "-o", "-", "-q", "--no-tui"]);
    assert_exit(&o, 0);
    assert_eq!(o.stdout, expected);
    // - as input: one DICOM file from stdin, to stdout or to a folder (as `stdin.png`).
    let piped = |out: &str| {
        Command::new(bin())
            .args(["run", "-", "-o", out, "-q", "--no-tui"])
            .stdin(std::fs::File::open(&f).unwrap())
            .output()
            .unwrap()
    };
    let o = piped("-");
    assert_exit(&o, 0);
    assert_eq!(o.stdout, expected);
    let o = piped(root.join("from-stdin").to_str().unwrap());
    assert_exit(&o, 0);
    assert_eq!(file_names(&root.join("from-stdin")), ["stdin.png"]);
    // What comes through stdin must be DICOM: anything else fails the run (exit 1), and the
    // messages name the input `-`, not the scratch copy it was read from.
    let o = Command::new(bin())
        .args([
            "run",
            "-",
            "-o",
            root.join("g.png").to_str().unwrap(),
            "--no-tui",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            if let Some(mut input) = child.stdin.take() {
                input.write_all(b"garbage\n")?;
            }
            child.wait_with_output()
        })
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("    -: scan: not DICOM"), "{err}");
    assert!(!err.contains("dicomflow-stdin"), "{err}");
    assert!(!root.join("g.png").exists());
    // So must a file named as an input (a folder walk passes over what is not DICOM).
    let text = root.join("notes.txt");
    std::fs::write(&text, "not DICOM").unwrap();
    let o = dicomflow(&[
        "run",
        text.to_str().unwrap(),
        "-o",
        root.join("notes").to_str().unwrap(),
        "-q",
    ]);
    assert_exit(&o, 1);
    assert!(stderr(&o).contains("notes.txt: scan: not DICOM"));
    // -o - takes one image: a folder input is a usage error, and so is a multi-frame file
    // without --frames (its frames cannot all go to one file).
    let o = dicomflow(&["run", "assets/sample", "-o", "-", "-q"]);
    assert_exit(&o, 2);
    synth(&root.join("mf"), &["--slices", "3", "--multiframe"]);
    let mf = root.join("mf/MF00001.dcm");
    let one = root.join("frame.png");
    let o = dicomflow(&[
        "run",
        mf.to_str().unwrap(),
        "-o",
        one.to_str().unwrap(),
        "-q",
    ]);
    assert_exit(&o, 1);
    assert!(stderr(&o).contains("--frames"));
    assert!(!one.exists());
    let o = dicomflow(&[
        "run",
        mf.to_str().unwrap(),
        "-o",
        one.to_str().unwrap(),
        "--frames",
        "2",
        "-q",
    ]);
    assert_exit(&o, 0);
    assert!(one.is_file());
    std::fs::remove_dir_all(&root).unwrap();
}
