//! The findings of the adversarial pass of issue 22, one test each, through the real binary:
//! hostile inputs (a FIFO, a decompression bomb, special files and links in a folder, names
//! that are not UTF-8) and careless users (an output folder that holds the inputs, a closed
//! pipe, a report path that cannot be written, a resume over broken outputs, a naming pattern
//! that cannot work). Each test names the finding it pins.

use crate::common::{
    assert_no_panic_text, bin, code, dicomflow, hostile, read_json, reasons, run_limited, stderr,
    synth, tempdir, Outcome,
};

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The longest any run here may take: a hang fails the test instead of blocking it.
const LIMIT: Duration = Duration::from_secs(60);

/// `dicomflow ARGS...` with a time limit, stdout and stderr captured.
fn run<S: AsRef<OsStr>>(args: &[S]) -> Outcome {
    let out = run_limited(Command::new(bin()).args(args), LIMIT);
    assert_no_panic_text(&out.stderr);
    out
}

fn os(s: &str) -> OsString {
    OsString::from(s)
}

/// `dicomflow run INPUT -o OUT EXTRA...` (see [`run`]).
fn run_to(input: &Path, out: &Path, extra: &[OsString]) -> Outcome {
    let mut args = vec![os("run"), input.into(), os("-o"), out.into()];
    args.extend_from_slice(extra);
    run(&args)
}

/// A path from bytes (names that are not UTF-8).
fn bytes_path(b: &[u8]) -> PathBuf {
    PathBuf::from(OsString::from_vec(b.to_vec()))
}

/// The report's record for input `path` (paths in the report are escaped: see
/// `dicomflow::paths`).
fn record<'a>(report: &'a serde_json::Value, path: &Path) -> &'a serde_json::Value {
    report["result"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| {
            f["path"]
                .as_str()
                .and_then(dicomflow::paths::unescape)
                .is_some_and(|p| p == path)
        })
        .unwrap_or_else(|| panic!("{} is not in the report: {report}", path.display()))
}

/// Every reason a record gives (its skip reason and its failures'), in one line.
fn said(rec: &serde_json::Value) -> String {
    reasons(rec).join("; ")
}

/// Width and height of a PNG file (from its header).
fn png_size(path: &Path) -> (u32, u32) {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let reader = png::Decoder::new(std::io::BufReader::new(file))
        .read_info()
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (reader.info().width, reader.info().height)
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0, "mkfifo");
}

/// One slice of `size`² written by `dicomflow synth` into `dir`, at `dir/name`.
fn slice(dir: &Path, name: &str, size: u32) -> PathBuf {
    let tmp = dir.join(format!(".synth-{name}"));
    let files = synth(&tmp, &["--size", &size.to_string(), "--slices", "1"]);
    std::fs::create_dir_all(dir).unwrap();
    let to = dir.join(name);
    std::fs::rename(&files[0], &to).unwrap();
    std::fs::remove_dir_all(&tmp).unwrap();
    to
}

#[test]
fn finding_01_a_fifo_is_skipped_without_opening_it() {
    let root = tempdir("adv-fifo");
    let sp = root.join("sp");
    let good = slice(&sp, "good.dcm", 16);
    let fifo = sp.join("fifo.dcm");
    mkfifo(&fifo);
    let report = root.join("r.json");
    // Given directly, after a good file: the good file is rendered, the FIFO listed, no hang.
    let o = run(&[
        os("run"),
        good.clone().into(),
        fifo.clone().into(),
        os("-o"),
        root.join("out").into(),
        os("--report"),
        report.clone().into(),
        os("--no-tui"),
    ]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let r = read_json(&report);
    assert_eq!(record(&r, &good)["status"], "ok");
    let rec = record(&r, &fifo);
    assert_eq!(rec["status"], "skipped");
    assert!(said(rec).contains("FIFO"), "{rec}");
    assert!(o.stderr.contains("fifo.dcm: a FIFO"), "{}", o.stderr);
    // `inspect` says what it is instead of waiting for a writer.
    let o = run(&[os("inspect"), fifo.into()]);
    assert_eq!(o.code, Some(1));
    assert!(o.stderr.contains("FIFO"), "{}", o.stderr);
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn finding_02_a_decompression_bomb_fails_within_bounded_memory() {
    let root = tempdir("adv-bomb");
    let input = root.join("in");
    // The largest legitimate frame: 2048² at 16 bits, 8 MiB.
    const SIZE: u32 = 2048;
    let frame_bytes = (SIZE * SIZE * 2) as u64;
    let legit = slice(&input, "legit.dcm", SIZE);
    let valid = hostile::Dicom::parse(&std::fs::read(slice(&root, "small.dcm", 64)).unwrap());
    // 3 GB of zeros declared and present, in a 3 MB file; three of them at once.
    let bomb = hostile::deflate_bomb(&valid, 3_000_000_000);
    assert!(bomb.len() < 4 << 20, "{} bytes", bomb.len());
    let bombs: Vec<PathBuf> = (1..=3)
        .map(|i| input.join(format!("bomb{i}.dcm")))
        .collect();
    for b in &bombs {
        std::fs::write(b, &bomb).unwrap();
    }

    // The process alone: a run over a folder with nothing to render.
    let empty = root.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let idle = run_to(&empty, &root.join("out0"), &[os("-q")]);
    assert_eq!(idle.code, Some(0), "{}", idle.stderr);

    let report = root.join("r.json");
    let o = run_to(
        &input,
        &root.join("out"),
        &[os("--report"), report.clone().into(), os("-q")],
    );
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    let r = read_json(&report);
    assert_eq!(record(&r, &legit)["status"], "ok");
    for b in &bombs {
        let rec = record(&r, b);
        assert_eq!(rec["status"], "failed");
        assert!(said(rec).contains("decompression bomb"), "{rec}");
    }
    let ring = r["result"]["slot_memory_bytes"].as_u64().unwrap();
    let bound = idle.max_rss_bytes + 2 * frame_bytes + ring;
    eprintln!(
        "peak RSS {} MiB; bound {} MiB (process {} MiB + 2 x {} MiB frame + ring {} MiB)",
        o.max_rss_bytes >> 20,
        bound >> 20,
        idle.max_rss_bytes >> 20,
        frame_bytes >> 20,
        ring >> 20
    );
    assert!(o.max_rss_bytes <= bound, "peak RSS over the bound");

    // `inspect` refuses it as cheaply.
    let o = run(&[os("inspect"), bombs[0].clone().into()]);
    assert_eq!(o.code, Some(1));
    assert!(o.stderr.contains("decompression bomb"), "{}", o.stderr);
    assert!(
        o.max_rss_bytes <= idle.max_rss_bytes + 2 * frame_bytes,
        "inspect: peak RSS {} MiB",
        o.max_rss_bytes >> 20
    );
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn finding_03_an_output_never_replaces_an_input() {
    let root = tempdir("adv-overwrite");
    let d = root.join("d");
    let input = slice(&d, "scan.png", 16);
    let before = std::fs::read(&input).unwrap();
    let report = root.join("r.json");
    let o = run_to(
        &input,
        &d,
        &[os("--report"), report.clone().into(), os("--no-tui")],
    );
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    assert_eq!(
        std::fs::read(&input).unwrap(),
        before,
        "the input was replaced"
    );
    let r = read_json(&report);
    let rec = record(&r, &input);
    assert_eq!(rec["status"], "failed");
    assert!(said(rec).contains("is an input file"), "{rec}");
    // The same when the input is found in a folder and a pattern names it.
    let o = run_to(&d, &root, &[os("--naming"), os("d/{stem}"), os("-q")]);
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    assert!(o.stderr.contains("is an input file"), "{}", o.stderr);
    assert_eq!(
        std::fs::read(&input).unwrap(),
        before,
        "the input was replaced"
    );
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn finding_04_an_output_folder_that_is_or_holds_inputs_is_said() {
    let root = tempdir("adv-outdir");
    let same = root.join("same");
    slice(&same, "a.dcm", 16);
    let o = run(&[os("run"), same.clone().into(), os("-o"), same.into()]);
    assert_eq!(o.code, Some(2), "{}", o.stderr);
    assert!(o.stderr.contains("is the input folder"), "{}", o.stderr);

    // An output folder inside the input: listed as skipped, with what it holds unread.
    let data = root.join("dataX");
    let top = slice(&data, "top.dcm", 16);
    slice(&data.join("d1"), "inside.dcm", 16);
    let report = root.join("r.json");
    let o = run_to(
        &data,
        &data.join("d1"),
        &[os("--report"), report.clone().into(), os("--no-tui")],
    );
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let r = read_json(&report);
    assert_eq!(record(&r, &top)["status"], "ok");
    let rec = record(&r, &data.join("d1"));
    assert_eq!(rec["status"], "skipped");
    assert!(said(rec).contains("output folder"), "{rec}");
    assert!(o.stderr.contains("the output folder"), "{}", o.stderr);
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn finding_05_a_closed_pipe_loses_neither_the_report_nor_the_exit_code() {
    let root = tempdir("adv-pipe");
    let input = root.join("big");
    synth(&input, &["--size", "64", "--slices", "150"]);
    let report = root.join("r.json");
    // `-v`: an early log line for `head` to take; everything after it meets a closed pipe.
    let script = format!(
        "'{bin}' -v run '{i}' -o '{o}' --report '{r}' --no-tui 2>&1 | head -1; \
         echo \"${{PIPESTATUS[0]}}\" > '{rc}'",
        bin = bin(),
        i = input.display(),
        o = root.join("o").display(),
        r = report.display(),
        rc = root.join("rc").display(),
    );
    let o = run_limited(Command::new("bash").args(["-c", &script]), LIMIT);
    let rc = std::fs::read_to_string(root.join("rc")).unwrap();
    assert_eq!(rc.trim(), "0", "exit code; printed:\n{}", o.stdout);
    let r = read_json(&report);
    assert_eq!(r["result"]["totals"]["files_ok"], 150);
    // `inspect … | true`: the reader is gone before anything is written.
    let script = format!(
        "'{bin}' inspect '{f}' | true; echo \"${{PIPESTATUS[0]}}\" > '{rc}'",
        bin = bin(),
        f = input.join("IM00001.dcm").display(),
        rc = root.join("rc2").display(),
    );
    run_limited(Command::new("bash").args(["-c", &script]), LIMIT);
    let rc = std::fs::read_to_string(root.join("rc2")).unwrap();
    assert_eq!(rc.trim(), "0");
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn finding_06_names_that_are_not_utf8_round_trip() {
    let root = tempdir("adv-latin1");
    let input = root.join("in");
    let names: [&[u8]; 3] = [b"ok\xff.dcm", b"a\xff.dcm", b"a\xfe.dcm"];
    let mut inputs = Vec::new();
    for (i, n) in names.iter().enumerate() {
        let p = input.join(bytes_path(n));
        std::fs::create_dir_all(&input).unwrap();
        std::fs::rename(slice(&root, &format!("s{i}.dcm"), 16), &p).unwrap();
        inputs.push(p);
    }
    let out = root.join(bytes_path(b"out\xe9"));
    let report = root.join(bytes_path(b"r\xe9.json"));
    let o = run_to(
        &input,
        &out,
        &[os("--report"), report.clone().into(), os("--no-tui")],
    );
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    // Faithful output names: no two inputs share one.
    for n in [&b"ok\xff.png"[..], b"a\xff.png", b"a\xfe.png"] {
        assert_eq!(png_size(&out.join(bytes_path(n))), (16, 16));
    }
    let r = read_json(&report);
    for p in &inputs {
        let rec = record(&r, p);
        assert_eq!(rec["status"], "ok", "{rec}");
        let written = dicomflow::paths::unescape(rec["outputs"][0]["path"].as_str().unwrap());
        assert!(written.unwrap().exists());
    }
    let out_dir = r["settings"]["output_dir"].as_str().unwrap();
    assert_eq!(out_dir, format!("{}/out\\xe9", root.display()));
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn finding_07_a_report_or_trace_that_cannot_be_written_is_said_up_front() {
    let root = tempdir("adv-report");
    let input = root.join("in");
    synth(&input, &["--size", "16", "--slices", "2"]);
    for flag in ["--report", "--trace"] {
        let out = root.join(format!("out{flag}"));
        let o = run_to(&input, &out, &[os(flag), os("/proc/rep.json")]);
        assert_eq!(o.code, Some(2), "{flag}: {}", o.stderr);
        assert!(o.stderr.contains("/proc/rep.json"), "{}", o.stderr);
        assert!(!out.exists(), "{flag}: the run went ahead");
    }
    let _ = std::fs::remove_dir_all(&root);
}

/// Mounts a tmpfs of `size` (mount's spelling: "2m", "600k") on `dir`, made first; false,
/// after saying the test skips, where this machine does not let us (not root).
fn mount_tmpfs(dir: &Path, size: &str) -> bool {
    std::fs::create_dir_all(dir).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
        .arg(dir)
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!("skipped: cannot mount a {size} tmpfs here (not root, or no mount rights)");
    }
    mounted
}

/// The names in `dir` (none when it cannot be read).
fn names_in(dir: &Path) -> Vec<OsString> {
    std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default()
}

#[test]
fn finding_07_a_full_disk_at_the_end_keeps_the_summary_and_the_exit_code() {
    let root = tempdir("adv-enospc");
    let input = root.join("in");
    synth(&input, &["--size", "256", "--slices", "60"]);
    let small = root.join("small");
    if !mount_tmpfs(&small, "2m") {
        return;
    }
    let report = root.join("r.json");
    // The outputs and the trace fill the tmpfs; the report lives elsewhere.
    let o = run_to(
        &input,
        &small.join("out"),
        &[
            os("--trace"),
            small.join("t.json").into(),
            os("--report"),
            report.clone().into(),
            os("--png-compression"),
            os("none"),
            os("--no-tui"),
        ],
    );
    let _ = Command::new("umount").arg(&small).status();
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    assert!(o.stderr.contains("\n  failed:\n"), "{}", o.stderr);
    assert!(o.stderr.contains("error: trace"), "{}", o.stderr);
    let r = read_json(&report);
    assert!(r["result"]["totals"]["frames_failed"].as_u64().unwrap() > 0);
    let _ = std::fs::remove_dir_all(&root);
}

/// A disk so full that the record of the settings cannot be written either: a warning names
/// it, and its temporary file does not stay behind (it did: an empty `.run.json.PID`); nor does
/// a manifest's that `scan` cannot finish there (it did: `.m.tsv.PID.dicomflow-tmp`).
#[test]
fn a_full_disk_leaves_no_temporary_files() {
    let root = tempdir("adv-enospc-record");
    let input = root.join("in");
    // Outputs of under a page each fill the disk page by page, to its last: then the record
    // cannot fit whatever the order the writers finished in.
    synth(&input, &["--size", "16", "--slices", "400"]);
    let small = root.join("small");
    if !mount_tmpfs(&small, "600k") {
        return;
    }
    let o = run_to(&input, &small.join("out"), &[os("--no-tui")]);
    let left = names_in(&small.join("out/.dicomflow"));
    let scan = dicomflow(&[
        OsStr::new("scan"),
        input.as_os_str(),
        OsStr::new("-o"),
        small.join("m.tsv").as_os_str(),
    ]);
    let beside = names_in(&small);
    let _ = Command::new("umount").arg(&small).status();
    assert_eq!(code(&scan), 2, "{}", stderr(&scan));
    assert!(stderr(&scan).contains("No space left"), "{}", stderr(&scan));
    assert_eq!(beside, [OsString::from("out")], "left beside the outputs");
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    assert!(
        o.stderr.contains("warning: the record of the settings"),
        "{}",
        o.stderr
    );
    assert!(left.is_empty(), "left in .dicomflow: {left:?}");
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn finding_08_the_first_input_in_name_order_keeps_a_shared_output_name() {
    let root = tempdir("adv-collide");
    let input = root.join("in");
    let big = slice(&input, "x.dcm", 512);
    let small = slice(&input, "x.dicom", 16);
    let out = root.join("out");
    for (i, writers) in ["1", "2", "1", "2"].iter().enumerate() {
        let _ = std::fs::remove_dir_all(&out);
        let report = root.join(format!("r{i}.json"));
        let o = run_to(
            &input,
            &out,
            &[
                os("--writers"),
                os(writers),
                os("--report"),
                report.clone().into(),
                os("-q"),
            ],
        );
        assert_eq!(o.code, Some(1), "{}", o.stderr);
        assert_eq!(
            png_size(&out.join("x.png")),
            (512, 512),
            "writers {writers}"
        );
        let r = read_json(&report);
        assert_eq!(record(&r, &big)["status"], "ok");
        let rec = record(&r, &small);
        assert_eq!(rec["status"], "failed");
        // The other input is named (not the output twice).
        assert!(said(rec).contains("in/x.dcm"), "{rec}");
    }
    // Resume says the same.
    let report = root.join("resume.json");
    let o = run_to(
        &input,
        &out,
        &[
            os("--skip-existing"),
            os("--report"),
            report.clone().into(),
            os("-q"),
        ],
    );
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    let r = read_json(&report);
    let rec = record(&r, &big);
    assert_eq!(rec["status"], "ok");
    assert_eq!(rec["outputs"][0]["existing"], true);
    assert_eq!(record(&r, &small)["status"], "failed");
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn finding_09_resume_renders_broken_outputs_again() {
    let root = tempdir("adv-resume");
    let input = root.join("in");
    synth(&input, &["--size", "32", "--slices", "5"]);
    let out = root.join("out");
    let o = run_to(&input, &out, &[os("-q")]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let good = std::fs::read(out.join("IM00001.png")).unwrap();
    std::fs::write(out.join("IM00001.png"), b"").unwrap(); // zero bytes
    std::fs::write(out.join("IM00002.png"), &good[..good.len() - 20]).unwrap(); // truncated
    std::fs::write(out.join("IM00003.png"), vec![0u8; good.len()]).unwrap(); // zeros
    std::fs::remove_file(out.join("IM00004.png")).unwrap();
    std::fs::create_dir(out.join("IM00004.png")).unwrap(); // a folder
    let report = root.join("r.json");
    let o = run_to(
        &input,
        &out,
        &[
            os("--skip-existing"),
            os("--report"),
            report.clone().into(),
            os("-q"),
        ],
    );
    // The folder cannot be replaced: that frame fails, saying so.
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    let r = read_json(&report);
    let t = &r["result"]["totals"];
    assert_eq!(t["frames_written"], 3, "{t}");
    assert_eq!(t["frames_existing"], 1, "{t}");
    assert_eq!(t["frames_failed"], 1, "{t}");
    for n in 1..=3 {
        assert_eq!(png_size(&out.join(format!("IM0000{n}.png"))), (32, 32));
    }
    let rec = record(&r, &input.join("IM00004.dcm"));
    assert_eq!(rec["status"], "failed");
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn finding_10_everything_the_scan_does_not_render_is_listed() {
    let root = tempdir("adv-scan");
    let data = root.join("data");
    let good = slice(&data, "good.dcm", 16);
    let series = root.join("elsewhere");
    let linked = slice(&series, "linked.dcm", 16);
    std::os::unix::fs::symlink(&series, data.join("series")).unwrap();
    std::os::unix::fs::symlink(data.join("missing.dcm"), data.join("dangling.dcm")).unwrap();
    std::os::unix::fs::symlink(&data, data.join("loop")).unwrap();
    mkfifo(&data.join("fifo"));
    let sock = data.join("sock");
    let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let report = root.join("r.json");
    let o = run_to(
        &data,
        &root.join("out"),
        &[os("--report"), report.clone().into(), os("--no-tui")],
    );
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let r = read_json(&report);
    assert_eq!(record(&r, &good)["status"], "ok");
    // A symlinked folder is followed (its files keep the link's path).
    assert_eq!(record(&r, &data.join("series/linked.dcm"))["status"], "ok");
    assert!(linked.exists());
    for (name, says) in [
        ("dangling.dcm", "dangling symbolic link"),
        ("loop", "already scanned"),
        ("fifo", "FIFO"),
        ("sock", "socket"),
    ] {
        let rec = record(&r, &data.join(name));
        assert_eq!(rec["status"], "skipped", "{name}");
        assert!(said(rec).contains(says), "{name}: {rec}");
    }
    assert_eq!(r["result"]["totals"]["files"], 6);
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn finding_11_a_naming_pattern_that_cannot_work_is_refused_up_front() {
    let root = tempdir("adv-naming");
    let input = root.join("in");
    synth(&input, &["--size", "16", "--slices", "2"]);
    let out = root.join("out");
    for (pattern, says) in [
        ("{InstanceNumber:65536}", "width"),
        (".", "hidden"),
        ("a/.{stem}", "hidden"),
    ] {
        let o = run_to(&input, &out, &[os("--naming"), os(pattern)]);
        assert_eq!(o.code, Some(2), "{pattern:?}: {}", o.stderr);
        assert!(o.stderr.contains(says), "{pattern:?}: {}", o.stderr);
        assert!(!out.exists());
    }
    // A NUL cannot be in an argument, but it can be in a config file.
    let config = root.join("nul.toml");
    std::fs::write(&config, "[output]\nnaming = \"{stem}\\u0000x\"\n").unwrap();
    let o = run_to(&input, &out, &[os("-c"), config.into()]);
    assert_eq!(o.code, Some(2), "{}", o.stderr);
    assert!(o.stderr.contains("control character"), "{}", o.stderr);
    assert!(!o.stderr.contains('\0'), "a raw NUL was printed");
    assert!(!out.exists());
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn finding_12_trace_memory_does_not_grow_with_the_run() {
    let root = tempdir("adv-trace");
    let input = root.join("in");
    const FILES: usize = 3000;
    synth(&input, &["--size", "8", "--slices", &FILES.to_string()]);
    let peak = |trace: bool| {
        let mut args = vec![
            os("run"),
            input.clone().into(),
            os("-o"),
            root.join(format!("out{trace}")).into(),
            os("-q"),
        ];
        if trace {
            args.extend([os("--trace"), root.join("t.json").into()]);
        }
        let o = run(&args);
        assert_eq!(o.code, Some(0), "{}", o.stderr);
        o.max_rss_bytes
    };
    let (without, with) = (peak(false), peak(true));
    eprintln!(
        "{FILES} files: peak RSS {} MiB without --trace, {} MiB with",
        without >> 20,
        with >> 20
    );
    // Kept in memory, the spans took about 25 KB per file (75 MB here).
    assert!(with <= without + (16 << 20), "the trace grew memory");
    let t: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root.join("t.json")).unwrap()).unwrap();
    let spans = t["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X")
        .count();
    assert!(spans >= 4 * FILES, "{spans} spans");
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn finding_13_the_smaller_ones() {
    let root = tempdir("adv-small");
    let input = root.join("in");
    synth(&input, &["--size", "16", "--slices", "3"]);

    // The same folder twice: rendered once, the repeat listed; nothing fails.
    let report = root.join("twice.json");
    let o = run(&[
        os("run"),
        input.clone().into(),
        input.clone().into(),
        os("-o"),
        root.join("out").into(),
        os("--report"),
        report.clone().into(),
        os("-q"),
    ]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let t = &read_json(&report)["result"]["totals"];
    assert_eq!(
        (t["files_ok"].as_u64(), t["files_failed"].as_u64()),
        (Some(3), Some(0))
    );

    // Leftover temporaries of a run that is gone are removed; a live process's are kept.
    let out = root.join("out2");
    std::fs::create_dir_all(out.join("sub")).unwrap();
    let dead = out.join("sub/.IM00001.png.999999999.3.dicomflow-tmp");
    let alive = out.join(format!(".x.png.{}.0.dicomflow-tmp", std::process::id()));
    std::fs::write(&dead, b"partial").unwrap();
    std::fs::write(&alive, b"partial").unwrap();
    let o = run_to(&input, &out, &[os("-q")]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    assert!(!dead.exists() && alive.exists());

    // -c: only a regular file of sane size is read.
    let fifo = root.join("fifo.toml");
    mkfifo(&fifo);
    let big = root.join("big.toml");
    std::fs::write(&big, vec![b'#'; 2 << 20]).unwrap();
    for (config, says) in [
        (PathBuf::from("/dev/zero"), "character device"),
        (fifo, "FIFO"),
        (big, "larger than"),
    ] {
        let o = run_to(
            &input,
            &root.join("out3"),
            &[os("-c"), config.clone().into()],
        );
        assert_eq!(o.code, Some(2), "{}: {}", config.display(), o.stderr);
        assert!(
            o.stderr.contains(says),
            "{}: {}",
            config.display(),
            o.stderr
        );
    }
    let _ = std::fs::remove_dir_all(&root);
}
