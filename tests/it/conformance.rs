//! DCMTK conformance: renders every case of `tests/fixtures/conformance/cases.toml` with the real
//! `dicomflow` binary and compares every pixel with the golden PNGs that DCMTK 3.6.7 wrote
//! (`tests/fixtures/make_conformance.sh` regenerates fixtures, goldens and manifest).
//!
//! All cases run; the failures are collected and reported together at the end (case name, tool
//! that made the input, number of differing pixels and the first few differences).
//! `CONFORMANCE_FILTER=substr` restricts the run to the cases whose name contains `substr`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize;

use crate::common::{bin, repo_path, stderr, stdout, tempdir};

#[derive(Debug, Deserialize)]
struct Manifest {
    #[serde(rename = "case", default)]
    cases: Vec<Case>,
}

#[derive(Debug, Deserialize)]
#[allow(dead_code)] // note/dcmtk are documentation, shown in failure messages only in part
struct Case {
    name: String,
    input: String,
    #[serde(default)]
    args: Vec<String>,
    golden: Vec<String>,
    reference: String,
    tool: String,
    #[serde(default)]
    dcmtk: String,
    #[serde(default)]
    note: String,
}

fn fixture_dir() -> PathBuf {
    repo_path("tests/fixtures/conformance")
}

fn load_manifest() -> Manifest {
    let path = fixture_dir().join("cases.toml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run tests/fixtures/make_conformance.sh)",
            path.display()
        )
    });
    toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A decoded 8-bit image: width, height, samples per pixel, samples.
struct Img {
    width: u32,
    height: u32,
    channels: usize,
    data: Vec<u8>,
}

fn decode_png(path: &Path) -> Result<Img, String> {
    let img = image::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let (width, height) = (img.width(), img.height());
    let (channels, data) = match img {
        image::DynamicImage::ImageLuma8(b) => (1, b.into_raw()),
        image::DynamicImage::ImageRgb8(b) => (3, b.into_raw()),
        other => {
            return Err(format!(
                "{}: unexpected colour type {:?} (want 8-bit grey or RGB)",
                path.display(),
                other.color()
            ))
        }
    };
    Ok(Img {
        width,
        height,
        channels,
        data,
    })
}

/// Compares one output frame with its golden; `None` when identical.
fn compare(out: &Img, gold: &Img) -> Option<String> {
    if (out.width, out.height) != (gold.width, gold.height) {
        return Some(format!(
            "size {}x{} != golden {}x{}",
            out.width, out.height, gold.width, gold.height
        ));
    }
    if out.channels != gold.channels {
        return Some(format!(
            "{} samples/pixel != golden {} samples/pixel",
            out.channels, gold.channels
        ));
    }
    let ch = gold.channels;
    let mut count = 0usize;
    let mut max_abs = 0i32;
    let mut first = String::new();
    for (i, (o, g)) in out
        .data
        .chunks_exact(ch)
        .zip(gold.data.chunks_exact(ch))
        .enumerate()
    {
        if o != g {
            count += 1;
            for (a, b) in o.iter().zip(g) {
                max_abs = max_abs.max((*a as i32 - *b as i32).abs());
            }
            if count <= 6 {
                let (x, y) = (i as u32 % gold.width, i as u32 / gold.width);
                let _ = write!(first, " ({x},{y}): got {o:?} want {g:?};");
            }
        }
    }
    (count > 0).then(|| {
        format!(
            "{count} of {} pixels differ (max |diff| {max_abs}); first:{first}",
            gold.width as usize * gold.height as usize
        )
    })
}

/// Runs one case; `Err` holds the failure description.
fn run_case(bin: &Path, case: &Case, scratch: &Path) -> Result<(), String> {
    let dir = fixture_dir();
    let input = dir.join(&case.input);
    let out_dir = scratch.join(&case.name);
    let _ = std::fs::remove_dir_all(&out_dir);
    std::fs::create_dir_all(&out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    let output = Command::new(bin)
        .arg("run")
        .arg(&input)
        .arg("-o")
        .arg(&out_dir)
        .args(["-q", "--no-tui"])
        .args(&case.args)
        .output()
        .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
    if !output.status.success() {
        let mut why = stderr(&output).trim().to_string();
        if why.is_empty() {
            // `-q` may swallow the per-file failure: ask again without it, keep the end.
            if let Ok(again) = Command::new(bin)
                .arg("run")
                .arg(&input)
                .arg("-o")
                .arg(&out_dir)
                .arg("--no-tui")
                .args(&case.args)
                .output()
            {
                let text = format!("{}{}", stdout(&again), stderr(&again));
                let lines: Vec<&str> = text
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .collect();
                let tail = lines.len().saturating_sub(2);
                why = format!(
                    "(nothing on stderr with -q; without -q:) {}",
                    lines[tail..].join(" | ")
                );
            }
        }
        let _ = std::fs::remove_dir_all(&out_dir);
        return Err(format!("dicomflow exited with {}: {why}", output.status));
    }
    let stem = input
        .file_stem()
        .and_then(|s| s.to_str())
        .ok_or("input without a file stem")?;
    let multi = case.golden.len() > 1;
    let mut problems = Vec::new();
    for (k, golden) in case.golden.iter().enumerate() {
        let name = if multi {
            format!("{stem}_f{:04}.png", k + 1)
        } else {
            format!("{stem}.png")
        };
        let out_path = out_dir.join(&name);
        if !out_path.exists() {
            let produced: Vec<String> = std::fs::read_dir(&out_dir)
                .map(|rd| {
                    rd.filter_map(|e| e.ok())
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default();
            problems.push(format!("no output {name} (produced: {produced:?})"));
            continue;
        }
        let result = decode_png(&out_path)
            .and_then(|out| decode_png(&dir.join(golden)).map(|gold| compare(&out, &gold)));
        match result {
            Ok(None) => {}
            Ok(Some(diff)) => problems.push(format!("{name} vs {golden}: {diff}")),
            Err(e) => problems.push(e),
        }
    }
    let _ = std::fs::remove_dir_all(&out_dir);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n      "))
    }
}

#[test]
fn manifest_is_complete() {
    let manifest = load_manifest();
    assert!(!manifest.cases.is_empty(), "cases.toml has no [[case]]");
    let dir = fixture_dir();
    let mut missing = Vec::new();
    let mut names = std::collections::HashSet::new();
    for case in &manifest.cases {
        assert!(
            names.insert(case.name.as_str()),
            "duplicate case name {}",
            case.name
        );
        assert!(
            !case.golden.is_empty(),
            "case {} lists no golden",
            case.name
        );
        assert!(
            matches!(
                case.reference.as_str(),
                "dcmtk" | "dcmtk-decompressed" | "dcmtk-equivalent"
            ),
            "case {}: unknown reference {:?}",
            case.name,
            case.reference
        );
        for p in std::iter::once(&case.input).chain(&case.golden) {
            if !dir.join(p).is_file() {
                missing.push(format!("{}: {p}", case.name));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "missing fixture files:\n  {}",
        missing.join("\n  ")
    );
}

#[test]
fn dcmtk_conformance() {
    let manifest = load_manifest();
    assert!(!manifest.cases.is_empty(), "cases.toml has no [[case]]");
    let bin = PathBuf::from(bin());
    let filter = std::env::var("CONFORMANCE_FILTER").unwrap_or_default();
    let scratch = tempdir("conformance");
    let mut passed = Vec::new();
    let mut failed = Vec::new();
    for case in manifest.cases.iter().filter(|c| c.name.contains(&filter)) {
        match run_case(&bin, case, &scratch) {
            Ok(()) => passed.push(case.name.as_str()),
            Err(e) => failed.push(format!(
                "  {} [tool: {}; reference: {}; args: {:?}; golden by: {}]\n      {e}",
                case.name, case.tool, case.reference, case.args, case.dcmtk
            )),
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    eprintln!(
        "conformance: {} passed, {} failed{}",
        passed.len(),
        failed.len(),
        if filter.is_empty() {
            String::new()
        } else {
            format!(" (CONFORMANCE_FILTER={filter})")
        }
    );
    eprintln!("passed: {}", passed.join(", "));
    assert!(
        !passed.is_empty() || !failed.is_empty(),
        "no case matches CONFORMANCE_FILTER={filter:?}"
    );
    assert!(
        failed.is_empty(),
        "{} of {} conformance cases differ from DCMTK:\n{}",
        failed.len(),
        passed.len() + failed.len(),
        failed.join("\n")
    );
}
