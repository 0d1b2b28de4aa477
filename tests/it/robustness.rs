//! Hostile input: a folder mixing good files with the corpus of `common::hostile` is rendered by
//! the real binary. Good frames must come out as decodable PNGs; every bad file must be in the
//! report as failed (or skipped when it is not an image) with a reason, and in the summary;
//! nothing may panic, hang, or leave temporary files behind; `--fail-fast` stops early.

use crate::common::{
    all_files, assert_no_panic_text, bin, hostile, reasons, repo_path, run_limited, synth, tempdir,
    Outcome,
};

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::common::hostile::{Case, Expect};

/// The longest a run over the corpus may take (a hang or a bomb shows up here).
const RUN_LIMIT: Duration = Duration::from_secs(30);

/// Runs the binary, killing it (and failing the test) when it takes longer than `limit`.
fn run_with_limit(args: &[&std::ffi::OsStr], limit: Duration) -> Outcome {
    run_limited(Command::new(bin()).args(args), limit)
}

fn os(s: &Path) -> &std::ffi::OsStr {
    s.as_os_str()
}

/// Decodes a PNG completely; returns (width, height).
fn decode_png(path: &Path) -> Result<(u32, u32), String> {
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let decoder = png::Decoder::new(std::io::BufReader::new(file));
    let mut reader = decoder.read_info().map_err(|e| e.to_string())?;
    let size = reader.output_buffer_size().ok_or("no buffer size")?;
    let mut buf = vec![0; size];
    let info = reader.next_frame(&mut buf).map_err(|e| e.to_string())?;
    reader.finish().map_err(|e| e.to_string())?;
    Ok((info.width, info.height))
}

fn assert_no_temporaries(out: &Path) {
    let leftovers: Vec<_> = all_files(out)
        .into_iter()
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().ends_with(".dicomflow-tmp"))
        })
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
}

/// The input tree: good single-frame slices, a good multi-frame file, the hostile corpus.
struct Corpus {
    input: PathBuf,
    /// Expected output (relative to the output folder) of every good frame.
    good_outputs: Vec<PathBuf>,
    good_inputs: Vec<PathBuf>,
    cases: Vec<Case>,
}

fn build(root: &Path) -> Corpus {
    let input = root.join("in");
    let slices = synth(&input.join("good"), &["--size", "64", "--slices", "3"]);
    assert_eq!(slices.len(), 3);
    let multi = synth(
        &input.join("multi"),
        &["--size", "64", "--slices", "4", "--multiframe"],
    );
    assert_eq!(multi.len(), 1);
    let mut cases = hostile::build_corpus(&input.join("hostile"), &slices[0]);
    // A DICOMDIR made by DCMTK's dcmmkdir (tests/fixtures/make_hostile.sh).
    let fixture = repo_path("tests/fixtures/hostile/DICOMDIR");
    let dcmmkdir = input.join("hostile/dcmmkdir/DICOMDIR");
    std::fs::create_dir_all(dcmmkdir.parent().unwrap()).unwrap();
    std::fs::copy(&fixture, &dcmmkdir).expect("tests/fixtures/hostile/DICOMDIR");
    cases.push(Case {
        name: "dcmmkdir_DICOMDIR",
        path: dcmmkdir,
        expect: Expect::Skipped,
        what: "a DICOMDIR written by dcmmkdir",
    });
    // A good deflated file (stored deflate blocks), so the deflate checks meet a valid one.
    let deflated = input.join("deflated/DEFL.dcm");
    std::fs::create_dir_all(deflated.parent().unwrap()).unwrap();
    let valid = hostile::Dicom::parse(&std::fs::read(&slices[0]).unwrap());
    std::fs::write(&deflated, hostile::deflated(&valid)).unwrap();
    let mut good_outputs: Vec<PathBuf> = (1..=3)
        .map(|i| PathBuf::from(format!("good/IM{i:05}.png")))
        .collect();
    good_outputs.extend((1..=4).map(|f| PathBuf::from(format!("multi/MF00001_f{f:04}.png"))));
    good_outputs.push(PathBuf::from("deflated/DEFL.png"));
    let mut good_inputs = slices;
    good_inputs.extend(multi);
    good_inputs.push(deflated);
    Corpus {
        input,
        good_outputs,
        good_inputs,
        cases,
    }
}

fn file_records(report: &serde_json::Value) -> &Vec<serde_json::Value> {
    report["result"]["files"]
        .as_array()
        .expect("result.files in the report")
}

fn record_for<'a>(report: &'a serde_json::Value, path: &Path) -> Option<&'a serde_json::Value> {
    let want = path.to_string_lossy();
    file_records(report)
        .iter()
        .find(|f| f["path"].as_str() == Some(&*want))
}

#[test]
fn hostile_files_are_reported_and_good_frames_are_rendered() {
    let root = tempdir("robustness");
    let corpus = build(&root);
    let out = root.join("out");
    let report_path = root.join("r.json");

    // Run 1: quiet, with the JSON report.
    let run = run_with_limit(
        &[
            os(Path::new("run")),
            os(&corpus.input),
            os(Path::new("-o")),
            os(&out),
            os(Path::new("--report")),
            os(&report_path),
            os(Path::new("-q")),
        ],
        RUN_LIMIT,
    );
    assert_no_panic_text(&run.stderr);
    // Bombs and absurd lengths are refused before anything is allocated for them.
    assert!(
        run.max_rss_bytes < 512 << 20,
        "peak RSS {} MiB on the hostile corpus",
        run.max_rss_bytes >> 20
    );
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report_path).expect("report written"))
            .expect("report is JSON");

    // Per case: expected vs observed, collected so that one run shows every mismatch.
    let mut table = String::new();
    let mut mismatches = Vec::new();
    for case in &corpus.cases {
        let rec = record_for(&report, &case.path);
        let status = rec
            .and_then(|r| r["status"].as_str())
            .unwrap_or("<missing>");
        let why = rec.map(reasons).unwrap_or_default();
        let first = why.first().cloned().unwrap_or_default();
        table.push_str(&format!(
            "  {:<24} expect {:<8} got {:<10} {}\n",
            case.name,
            case.expect.as_str(),
            status,
            first.chars().take(110).collect::<String>()
        ));
        if status != case.expect.as_str() {
            mismatches.push(format!(
                "{} ({}): expected {}, got {status}",
                case.name,
                case.what,
                case.expect.as_str()
            ));
        }
        if why.is_empty() || why.iter().any(|r| r.trim().is_empty()) {
            mismatches.push(format!("{}: empty or missing reason", case.name));
        }
        // A failed file fails once, as a file: not a failure per claimed frame.
        if let Some(n) = rec.and_then(|r| r["failures"].as_array()).map(|a| a.len()) {
            if n > 4 {
                mismatches.push(format!("{}: {n} failure records", case.name));
            }
        }
    }
    eprintln!(
        "hostile corpus ({} cases, run took {:?}):\n{table}",
        corpus.cases.len(),
        run.elapsed
    );
    assert!(
        mismatches.is_empty(),
        "mismatches:\n  {}\n{table}",
        mismatches.join("\n  ")
    );

    // Good files: ok, every frame written and decodable.
    for input in &corpus.good_inputs {
        let rec = record_for(&report, input)
            .unwrap_or_else(|| panic!("{} not in report", input.display()));
        assert_eq!(rec["status"], "ok", "{}: {rec}", input.display());
    }
    for rel in &corpus.good_outputs {
        let p = out.join(rel);
        assert!(p.is_file(), "missing output {}", p.display());
        assert_eq!(decode_png(&p), Ok((64, 64)), "{}", p.display());
    }
    let pngs = all_files(&out)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "png"))
        .count();
    assert_eq!(
        pngs,
        corpus.good_outputs.len(),
        "outputs other than the good frames' were written: {:?}",
        all_files(&out)
    );
    assert_eq!(run.code, Some(1), "exit code; stderr:\n{}", run.stderr);
    assert_no_temporaries(&out);
    let totals = &report["result"]["totals"];
    let failed = corpus
        .cases
        .iter()
        .filter(|c| c.expect == Expect::Failed)
        .count();
    let skipped = corpus.cases.len() - failed;
    assert_eq!(totals["files_failed"], failed, "{totals}");
    assert_eq!(totals["files_skipped"], skipped, "{totals}");
    assert_eq!(totals["files_ok"], corpus.good_inputs.len(), "{totals}");

    // Run 2: not quiet, to a fresh output folder: the summary lists every failed file.
    let out2 = root.join("out2");
    let run2 = run_with_limit(
        &[
            os(Path::new("run")),
            os(&corpus.input),
            os(Path::new("-o")),
            os(&out2),
            os(Path::new("--no-tui")),
        ],
        RUN_LIMIT,
    );
    assert_eq!(run2.code, Some(1), "stderr:\n{}", run2.stderr);
    assert_no_panic_text(&run2.stderr);
    assert_no_temporaries(&out2);
    let failed_section = run2
        .stderr
        .split_once("\n  failed:\n")
        .map(|(_, rest)| rest)
        .unwrap_or_else(|| panic!("no `failed:` section in the summary:\n{}", run2.stderr));
    for case in corpus.cases.iter().filter(|c| c.expect == Expect::Failed) {
        let shown = format!("    {}", case.path.display());
        assert!(
            failed_section.lines().any(|l| l.starts_with(&shown)),
            "{} is not listed among the failed files:\n{}",
            case.name,
            run2.stderr
        );
    }
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn fail_fast_stops_at_the_first_failure() {
    let root = tempdir("robustness-failfast");
    let input = root.join("in");
    const SLICES: usize = 300;
    let series = input.join("series");
    let good = synth(&series, &["--size", "128", "--slices", &SLICES.to_string()]);
    assert_eq!(good.len(), SLICES);
    // The failing file sorts first in the same folder as the good slices: the scan lists every
    // input before it opens one, so those slices are always "found", and the ones the loader
    // had not started must be listed as cancelled.
    let valid = std::fs::read(&good[0]).unwrap();
    let d = hostile::Dicom::parse(&valid);
    let mut bad = d.clone();
    // Bits Allocated 24 is no layout DICOM defines (1, 8, 12, 16 and 32 are read).
    bad.set_us(0x0028, 0x0100, 24);
    let bad_path = series.join("0000_bits24.dcm");
    assert!(good
        .iter()
        .all(|g| g.file_name().unwrap() > bad_path.file_name().unwrap()));
    std::fs::write(&bad_path, bad.to_bytes()).unwrap();
    let out = root.join("out");
    let report_path = root.join("r.json");
    let run = run_with_limit(
        &[
            os(Path::new("run")),
            os(&input),
            os(Path::new("-o")),
            os(&out),
            os(Path::new("--report")),
            os(&report_path),
            os(Path::new("--fail-fast")),
            os(Path::new("--loaders")),
            os(Path::new("1")),
            os(Path::new("-q")),
        ],
        RUN_LIMIT,
    );
    assert_eq!(run.code, Some(1), "stderr:\n{}", run.stderr);
    assert_no_panic_text(&run.stderr);
    assert_no_temporaries(&out);
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report_path).unwrap()).unwrap();
    assert_eq!(report["result"]["cancelled"], true);
    let rec = record_for(&report, &bad_path).expect("bad file in report");
    assert_eq!(rec["status"], "failed");
    // Files found but not started are listed as cancelled, not silently dropped.
    let files = report["result"]["files"].as_array().unwrap();
    let cancelled = files.iter().filter(|f| f["status"] == "cancelled").count();
    let done = files.iter().filter(|f| f["status"] == "ok").count();
    assert!(cancelled > 0, "no cancelled files listed");
    assert_eq!(
        report["result"]["totals"]["files_cancelled"]
            .as_u64()
            .unwrap() as usize,
        cancelled
    );
    // Every good slice is accounted for: rendered, or listed as cancelled.
    assert_eq!(done + cancelled, SLICES, "stderr:\n{}", run.stderr);
    let written = all_files(&out)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "png"))
        .count();
    assert!(
        written < SLICES / 2,
        "--fail-fast went on to write {written} of {SLICES} slices"
    );
    // Whatever was written is complete.
    for p in all_files(&out) {
        decode_png(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    }
    // Control: without --fail-fast the same input is rendered in full (so the early stop
    // above is the option's doing), with the same exit code.
    let out_all = root.join("out-all");
    let run = run_with_limit(
        &[
            os(Path::new("run")),
            os(&input),
            os(Path::new("-o")),
            os(&out_all),
            os(Path::new("--loaders")),
            os(Path::new("1")),
            os(Path::new("-q")),
        ],
        RUN_LIMIT,
    );
    assert_eq!(run.code, Some(1), "stderr:\n{}", run.stderr);
    let written_all = all_files(&out_all)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "png"))
        .count();
    assert_eq!(written_all, SLICES);
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn fuzz_findings_fail_cleanly() {
    // Inputs the fuzzer (fuzz/README.md) found to panic or exhaust memory before the fixes.
    let root = tempdir("robustness-fuzz");
    let regressions = repo_path("fuzz/regressions");
    let report_path = root.join("r.json");
    let run = run_with_limit(
        &[
            os(Path::new("run")),
            os(&regressions),
            os(Path::new("-o")),
            os(&root.join("out")),
            os(Path::new("--report")),
            os(&report_path),
            os(Path::new("-q")),
        ],
        RUN_LIMIT,
    );
    assert_no_panic_text(&run.stderr);
    assert!(matches!(run.code, Some(0 | 1)), "stderr:\n{}", run.stderr);
    // Several findings made dicom-rs allocate 2–4 GiB for a declared length; memory stays
    // bounded now (the run needs a few MB).
    assert!(
        run.max_rss_bytes < 512 << 20,
        "peak RSS {} MiB on the fuzz findings",
        run.max_rss_bytes >> 20
    );
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report_path).unwrap()).unwrap();
    let files = all_files(&regressions);
    assert!(files.len() >= 3);
    for f in &files {
        let rec = record_for(&report, f).unwrap_or_else(|| panic!("{} not reported", f.display()));
        if rec["status"] != "ok" {
            assert!(!reasons(rec).is_empty(), "{}: no reason", f.display());
        }
    }

    // A 32-bit image with a histogram window: the window search walked every value of the
    // range (minutes for 32-bit data) before the fix.
    let ba32 = repo_path("tests/fixtures/conformance/ba32.dcm");
    let run = run_with_limit(
        &[
            os(Path::new("run")),
            os(&ba32),
            os(Path::new("-o")),
            os(&root.join("out32")),
            os(Path::new("--window")),
            os(Path::new("histogram:5")),
            os(Path::new("-q")),
        ],
        Duration::from_secs(10),
    );
    assert_eq!(run.code, Some(0), "stderr:\n{}", run.stderr);
    let _ = std::fs::remove_dir_all(&root);
}

/// Writes hostile fuzz seeds into `$HOSTILE_SEED_OUT` (run by tests/fixtures/make_hostile.sh).
#[test]
#[ignore]
fn write_fuzz_seeds() {
    let Some(dest) = std::env::var_os("HOSTILE_SEED_OUT") else {
        return;
    };
    let root = tempdir("robustness-seeds");
    let valid = synth(&root.join("s"), &["--size", "64", "--slices", "1"]);
    let cases = hostile::build_corpus(&root.join("h"), &valid[0]);
    let name = "bomb_jpeg_ll_sof";
    let case = cases.iter().find(|c| c.name == name).unwrap();
    std::fs::copy(&case.path, Path::new(&dest).join(format!("{name}.dcm"))).unwrap();
    // The shape of the deflate bomb of issue 22 (a 1 x 1 image whose deflated Pixel Data
    // declares and holds far more), small enough for -max_len=40000: 32 MiB in 32 KB.
    let bomb = hostile::deflate_bomb(
        &hostile::Dicom::parse(&std::fs::read(&valid[0]).unwrap()),
        32 << 20,
    );
    assert!(bomb.len() < 40_000, "{} bytes", bomb.len());
    std::fs::write(Path::new(&dest).join("deflate_bomb_32mib.dcm"), bomb).unwrap();
    let _ = std::fs::remove_dir_all(&root);
}
