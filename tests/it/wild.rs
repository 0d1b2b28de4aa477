//! Conformance in the wild (issue 16): what a golden comparison alone cannot show.
//!
//! * Decoded stored values against the true pixels, for the causes that used to render
//!   wrong without a word (a JPEG Lossless point transform, explicit big endian pixel data that
//!   is not 16-bit): the fixtures come from `tests/fixtures/make_conformance.sh`, which also
//!   compares their renderings with DCMTK's (`tests/it/conformance.rs`).
//! * Damaged images are failures with a reason, never "skipped (not an image)"
//!   (`tests/fixtures/damaged`, made by the same script).

use std::path::{Path, PathBuf};

use dicomflow::decode::{probe, DecodeLimits, ImageFile, ImageInfo};

use crate::common::{self, repo_path, stdout};

fn conformance(name: &str) -> PathBuf {
    repo_path("tests/fixtures/conformance").join(name)
}

/// The header and every frame's stored values, as the pipeline decodes them into slots.
fn decode(path: &Path) -> (ImageInfo, Vec<Vec<u8>>) {
    let kind = probe(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let limits = DecodeLimits {
        max_frame_bytes: 1 << 30,
        damaged: Default::default(),
    };
    let mut file =
        ImageFile::open(path, kind, limits).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let info = file.info.clone();
    let mut scratch = Vec::new();
    let frames = (0..info.frames)
        .map(|f| {
            let mut dst = vec![0u8; info.frame_bytes() as usize];
            file.read_frame(f, &mut dst, &mut scratch)
                .unwrap_or_else(|e| panic!("{} frame {}: {e}", path.display(), f + 1));
            dst
        })
        .collect();
    (info, frames)
}

fn u16s(bytes: &[u8]) -> Vec<u16> {
    bytes
        .chunks_exact(2)
        .map(|b| u16::from_ne_bytes([b[0], b[1]]))
        .collect()
}

/// Cause 1: a JPEG Lossless point transform Pt drops the Pt low bits; what remains must be
/// the source's value exactly (the decoder used to ignore Pt: noise, reported as success).
#[test]
fn jpeg_lossless_point_transform_gives_the_true_pixels() {
    for (compressed, source, pt) in [
        ("jpeg_lossless_pt2.dcm", "mammo16.dcm", 2),
        ("jpeg_lossless_sv6_pt3.dcm", "ts_explicit_le.dcm", 3),
    ] {
        let (info, got) = decode(&conformance(compressed));
        let (_, want) = decode(&conformance(source));
        assert_eq!(info.bits_allocated, 16);
        let mask = !((1u16 << pt) - 1);
        let want: Vec<u16> = u16s(&want[0]).iter().map(|v| v & mask).collect();
        let got = u16s(&got[0]);
        let differing = got.iter().zip(&want).filter(|(a, b)| a != b).count();
        assert_eq!(
            differing,
            0,
            "{compressed}: {differing} of {} samples differ from {source} with the low {pt} \
             bits cleared",
            want.len()
        );
    }
}

/// Cause 2: Explicit VR Big Endian pixel data that is not 16-bit OW (8-bit OW used to come out
/// with neighbouring samples swapped, 32-bit OW scrambled in every pixel, 16-bit OB swapped):
/// every byte-order fixture decodes to the stored values of the little-endian file that
/// `dcmconv +tb` converted, through the in-place read and through the parsed object alike.
#[test]
fn big_endian_pixel_data_gives_the_true_pixels() {
    let cases = [
        ("be_ow8_mf.dcm", "be_ow8_mf.le.dcm"),
        ("be_ow8_mf_trailing.dcm", "be_ow8_mf.le.dcm"),
        ("be_ow8.dcm", "be_ow8.le.dcm"),
        ("be_ob8_odd.dcm", "be_ob8_odd.le.dcm"),
        ("be_ow8_rgb.dcm", "be_ow8_rgb.le.dcm"),
        ("be_ow8_palette.dcm", "be_ow8_palette.le.dcm"),
        ("be_ob16_odd.dcm", "be_ob16_odd.le.dcm"),
        ("be_ow16_odd.dcm", "be_ow16_odd.le.dcm"),
        ("be_ow32_odd.dcm", "be_ow32_odd.le.dcm"),
        ("be_ow32.dcm", "be_ow32.le.dcm"),
        ("be_ob32.dcm", "be_ob32.le.dcm"),
    ];
    let mut paths = std::collections::HashSet::new();
    for (be, le) in cases {
        let (info, got) = decode(&conformance(be));
        let (_, want) = decode(&conformance(le));
        assert_eq!(info.transfer_syntax, "1.2.840.10008.1.2.2", "{be}");
        assert_eq!(got.len(), want.len(), "{be}: frames");
        for (f, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                g == w,
                "{be} frame {}: stored values differ from {le}",
                f + 1
            );
        }
        let kind = probe(&conformance(be)).unwrap();
        let file = ImageFile::open(
            &conformance(be),
            kind,
            DecodeLimits {
                max_frame_bytes: 1 << 30,
                damaged: Default::default(),
            },
        )
        .unwrap();
        paths.insert(file.is_direct());
    }
    assert_eq!(
        paths.len(),
        2,
        "both the in-place read and the parsed object are covered"
    );
}

/// Runs the binary over `dir` with a JSON report; returns (exit code, report).
pub fn run_with_report(dir: &Path, extra: &[&str]) -> (Option<i32>, serde_json::Value) {
    let out = common::tempdir(&format!(
        "wild-{}",
        dir.file_name().unwrap().to_string_lossy()
    ));
    let report = out.join("report.json");
    let status = std::process::Command::new(common::bin())
        .arg("run")
        .arg(dir)
        .arg("-o")
        .arg(out.join("png"))
        .args(["-q", "--no-tui", "--report"])
        .arg(&report)
        .args(extra)
        .status()
        .unwrap();
    let json = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let _ = std::fs::remove_dir_all(&out);
    (status.code(), json)
}

/// (status, first failure reason) of every file in a report, by file name.
pub fn statuses(
    report: &serde_json::Value,
) -> std::collections::BTreeMap<String, (String, String)> {
    report["result"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let name = Path::new(f["path"].as_str().unwrap())
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let reason = f["failures"]
                .get(0)
                .map(|x| x["reason"].as_str().unwrap_or_default().to_string())
                .unwrap_or_default();
            (name, (f["status"].as_str().unwrap().to_string(), reason))
        })
        .collect()
}

fn damaged() -> PathBuf {
    repo_path("tests/fixtures/damaged")
}

/// Cause 3: a file with Pixel Data (or an image SOP class) that cannot be rendered is a
/// failure with a reason and exit code 1, never "skipped (not an image)" with exit 0.
#[test]
fn damaged_images_are_failures_not_skips() {
    let (code, report) = run_with_report(&damaged(), &["--backend", "cpu"]);
    assert_eq!(code, Some(1), "some inputs failed: exit 1");
    let got = statuses(&report);
    for (file, want, reason) in [
        (
            "no_rows_columns.dcm",
            "failed",
            "Pixel Data without Rows and Columns",
        ),
        ("no_pixel_data.dcm", "failed", "no Pixel Data"),
        ("damaged_preamble.dcm", "failed", "damaged DICOM file"),
        // Cause 9: the cut frame fails, the others are rendered.
        ("jpeg_frame_cut.dcm", "partial", "truncated JPEG stream"),
        ("jpeg_baseline_cut.dcm", "failed", "truncated JPEG stream"),
    ] {
        let (status, why) = got
            .get(file)
            .unwrap_or_else(|| panic!("{file} missing from the report"));
        assert_eq!(status, want, "{file}: {why}");
        assert!(why.contains(reason), "{file}: reason {why:?}");
    }
    let cut = report["result"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"].as_str().unwrap().ends_with("jpeg_frame_cut.dcm"))
        .unwrap();
    assert_eq!(cut["failures"].as_array().unwrap().len(), 1);
    assert_eq!(
        cut["failures"][0]["frame"], 1,
        "the second frame (0-based 1)"
    );
    assert_eq!(cut["outputs"].as_array().unwrap().len(), 2);
}

/// Cause 9 with `--damaged render`: every frame of the cut files is written (the pixels are
/// compared with DCMTK's `+wi` decoding in `tests/it/conformance.rs`), and the report says which
/// frame was incomplete and how much of it decoded.
#[test]
fn damaged_render_renders_cut_frames_with_a_warning() {
    let dir = common::tempdir("wild-render");
    for name in ["jpeg_frame_cut.dcm", "jpeg_baseline_cut.dcm"] {
        std::fs::copy(damaged().join(name), dir.join(name)).unwrap();
    }
    let (code, report) = run_with_report(&dir, &["--backend", "cpu", "--damaged", "render"]);
    assert_eq!(code, Some(0));
    for f in report["result"]["files"].as_array().unwrap() {
        let path = f["path"].as_str().unwrap();
        assert_eq!(f["status"], "ok", "{path}");
        let warnings = f["meta"]["warnings"].to_string();
        let expect = if path.ends_with("jpeg_frame_cut.dcm") {
            "frame 2: JPEG data ends early: 31 of 64 rows decoded"
        } else {
            "frame 1: JPEG data ends early"
        };
        assert!(warnings.contains(expect), "{path}: {warnings}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Causes 4–7: what DCMTK tolerates is rendered (the pixels are compared with DCMTK's in
/// `tests/it/conformance.rs`), and every file says in the report what was tolerated.
#[test]
fn tolerated_damage_is_rendered_with_a_warning() {
    let dir = common::tempdir("wild-lenient");
    for name in [
        "long_meta.dcm",
        "empty_modality_lut.dcm",
        "un_undefined_length.dcm",
        "un_attributes.dcm",
    ] {
        std::fs::copy(conformance(name), dir.join(name)).unwrap();
    }
    let (code, report) = run_with_report(&dir, &["--backend", "cpu"]);
    assert_eq!(code, Some(0));
    for f in report["result"]["files"].as_array().unwrap() {
        let path = f["path"].as_str().unwrap();
        assert_eq!(f["status"], "ok", "{path}");
        let warnings: Vec<&str> = f["meta"]["warnings"]
            .as_array()
            .unwrap_or_else(|| panic!("{path}: no warnings in the report"))
            .iter()
            .map(|w| w.as_str().unwrap())
            .collect();
        let expect = match Path::new(path).file_name().unwrap().to_str().unwrap() {
            "long_meta.dcm" => "longer than AE allows",
            "empty_modality_lut.dcm" => "LUT ignored",
            "un_undefined_length.dcm" => "CP-246",
            _ => "(0028,1053) stored as UN: read as DS",
        };
        assert!(
            warnings.iter().any(|w| w.contains(expect)),
            "{path}: {warnings:?}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `inspect` lists a file's overlay planes (the pixels are compared with DCMTK's in
/// `tests/it/conformance.rs`).
#[test]
fn inspect_lists_overlay_planes() {
    let out = std::process::Command::new(common::bin())
        .arg("inspect")
        .arg(conformance("overlays.dcm"))
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = stdout(&out);
    for plane in [
        "6000: 30x40 at row 5, column 10, graphics, Overlay Data \"MARKER\"",
        "6002: 20x20 at row 30, column 35, region of interest",
        "6004: 20x20 at row -3, column 50, graphics",
    ] {
        assert!(text.contains(plane), "{plane} missing from:\n{text}");
    }
    let out = std::process::Command::new(common::bin())
        .arg("inspect")
        .arg(conformance("overlays_embedded.dcm"))
        .output()
        .unwrap();
    assert!(stdout(&out).contains("bit 15 of the pixel data"));
}
