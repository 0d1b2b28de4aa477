//! Building a dataset, through the binary: the operators (resize with its fits and
//! interpolations, rotation, flips, inversion) against their definitions and against Pillow,
//! `--frames`, window channels, per-modality and per-series windows from the config, DICOM
//! output checked with DCMTK, GDCM, dicom3tools and pydicom (each check skips, saying so, where
//! its tool is missing), and the slot sizing operators need (outputs larger than inputs, in
//! every thread layout).

use crate::common::{
    assert_exit, dicomflow, dicomflow_ok, file_names, repo_path, s, stderr, stdout, synth, tempdir,
};

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use dicom_core::value::PrimitiveValue;
use dicom_core::{DataElement, VR};
use dicom_dictionary_std::{tags, uids};
use dicom_object::meta::FileMetaTableBuilder;
use dicom_object::InMemDicomObject;

/// Renders `input` into `out` on the CPU backend with `extra` arguments.
fn render(input: &Path, out: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "run",
        s(input),
        "-o",
        s(out),
        "-q",
        "--no-tui",
        "--backend",
        "cpu",
    ];
    args.extend_from_slice(extra);
    dicomflow_ok(&args)
}

/// A decoded image: width, height, channels, samples.
#[derive(Debug, PartialEq)]
struct Img {
    w: usize,
    h: usize,
    ch: usize,
    px: Vec<u8>,
}

fn png(path: &Path) -> Img {
    let img = image::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let (w, h) = (img.width() as usize, img.height() as usize);
    let ch = img.color().channel_count() as usize;
    Img {
        w,
        h,
        ch,
        px: img.into_bytes(),
    }
}

/// Says why a check did not run; under `DICOMFLOW_REQUIRE_TOOLS=1` (set by .ci/run, which
/// installs every tool these tests use) a missing tool is a failure instead.
fn skip(test: &str, why: &str) {
    assert!(
        std::env::var_os("DICOMFLOW_REQUIRE_TOOLS").is_none(),
        "DICOMFLOW_REQUIRE_TOOLS is set, but {test} cannot run: {why}"
    );
    let _ = writeln!(std::io::stderr(), "skipping {test}: {why}");
}

/// Writes a non-square 16-bit CT-like image (`w`×`h`, rescale -1024) with edges and ramps, so
/// that resampling has something to do; synth series are square.
fn write_ct(path: &Path, w: u16, h: u16) {
    let mut px = Vec::with_capacity(w as usize * h as usize);
    for y in 0..h as u32 {
        for x in 0..w as u32 {
            let ramp = (x * 37 + y * 91) % 400;
            let check = if (x / 7 + y / 5) % 2 == 0 { 700 } else { 0 };
            px.push((824 + ramp + check) as u16);
        }
    }
    let rescale = Some(("-1024", "1"));
    write_gray(
        path,
        (w, h),
        16,
        12,
        rescale,
        PrimitiveValue::U16(px.into()),
    );
}

/// Writes a MONOCHROME2 CT image of `size` (columns, rows), unsigned, `bits_stored` of
/// `bits_allocated` (high bit `bits_stored - 1`), with an optional (intercept, slope).
fn write_gray(
    path: &Path,
    (w, h): (u16, u16),
    bits_allocated: u16,
    bits_stored: u16,
    rescale: Option<(&str, &str)>,
    pixels: PrimitiveValue,
) {
    let mut obj = InMemDicomObject::new_empty();
    let put = |obj: &mut InMemDicomObject, tag, vr, v: PrimitiveValue| {
        obj.put(DataElement::new(tag, vr, v));
    };
    put(
        &mut obj,
        tags::SOP_CLASS_UID,
        VR::UI,
        uids::CT_IMAGE_STORAGE.into(),
    );
    put(&mut obj, tags::SOP_INSTANCE_UID, VR::UI, "2.25.4242".into());
    put(&mut obj, tags::STUDY_INSTANCE_UID, VR::UI, "2.25.42".into());
    put(
        &mut obj,
        tags::SERIES_INSTANCE_UID,
        VR::UI,
        "2.25.4243".into(),
    );
    put(&mut obj, tags::MODALITY, VR::CS, "CT".into());
    put(&mut obj, tags::SAMPLES_PER_PIXEL, VR::US, 1u16.into());
    put(
        &mut obj,
        tags::PHOTOMETRIC_INTERPRETATION,
        VR::CS,
        "MONOCHROME2".into(),
    );
    put(&mut obj, tags::ROWS, VR::US, h.into());
    put(&mut obj, tags::COLUMNS, VR::US, w.into());
    put(
        &mut obj,
        tags::BITS_ALLOCATED,
        VR::US,
        bits_allocated.into(),
    );
    put(&mut obj, tags::BITS_STORED, VR::US, bits_stored.into());
    put(&mut obj, tags::HIGH_BIT, VR::US, (bits_stored - 1).into());
    put(&mut obj, tags::PIXEL_REPRESENTATION, VR::US, 0u16.into());
    if let Some((intercept, slope)) = rescale {
        put(&mut obj, tags::RESCALE_INTERCEPT, VR::DS, intercept.into());
        put(&mut obj, tags::RESCALE_SLOPE, VR::DS, slope.into());
    }
    put(&mut obj, tags::PIXEL_DATA, VR::OW, pixels);
    let meta = FileMetaTableBuilder::new()
        .transfer_syntax(uids::EXPLICIT_VR_LITTLE_ENDIAN)
        .media_storage_sop_class_uid(uids::CT_IMAGE_STORAGE)
        .media_storage_sop_instance_uid("2.25.4242")
        .build()
        .unwrap();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    obj.with_exact_meta(meta).write_to_file(path).unwrap();
}

/// Regression: unsigned 32-bit stored values >= 2^31 went through an `i32` and came out
/// negative, so the brightest pixels rendered black, silently. A frame with values near 0 and
/// near 2^32 - 1, through a fixed window and min-max: against DCMTK's LINEAR formula, and
/// against `dcm2pnm` itself when DCMTK is installed.
#[test]
fn unsigned_32_bit_gray_near_2_pow_32_renders_bright() {
    let root = tempdir("ds-u32");
    let input = root.join("u32.dcm");
    let (w, h) = (16u16, 4u16);
    // Row 0 ramps up from 0, rows 1-3 sit near 2^31 and up to 2^32 - 1.
    let bases = [0u32, 0x7fff_fff8, 0xc000_0000, u32::MAX - 15];
    let raw: Vec<u32> = bases
        .iter()
        .flat_map(|&b| (0..w as u32).map(move |x| b + x))
        .collect();
    write_gray(
        &input,
        (w, h),
        32,
        32,
        None,
        PrimitiveValue::U32(raw.clone().into()),
    );
    // DCMTK's LINEAR window (docs/dcmtk-render-notes.md §6.2) on the raw values.
    let linear = |c: f64, width: f64, x: u32| -> u8 {
        let x = x as f64;
        if x <= c - 0.5 - (width - 1.0) / 2.0 {
            0
        } else if x > c - 0.5 + (width - 1.0) / 2.0 {
            255
        } else {
            (((x - (c - 0.5)) / (width - 1.0) + 0.5) * 255.0).trunc() as u8
        }
    };
    let (c, width) = (3_221_225_472.0, 2_147_483_648.0);
    // Min-max: center (min + max + 1) / 2, width max - min + 1.
    let (lo, hi) = (raw[0] as f64, *raw.last().unwrap() as f64);
    let (mc, mw) = ((lo + hi + 1.0) / 2.0, hi - lo + 1.0);
    // (name, our arguments, dcm2pnm's, the window expected).
    type Case<'a> = (&'a str, &'a [&'a str], &'a [&'a str], f64, f64);
    let cases: [Case; 2] = [
        (
            "window",
            &["--window", "3221225472,2147483648"],
            &["+Ww", "3221225472", "2147483648"],
            c,
            width,
        ),
        ("minmax", &["--window", "minmax"], &["+Wm"], mc, mw),
    ];
    for (name, ours_args, dcmtk_args, c, width) in cases {
        let out = root.join(name);
        render(&input, &out, ours_args);
        let ours = png(&out.join("u32.png"));
        assert_eq!((ours.w, ours.h, ours.ch), (w as usize, h as usize, 1));
        let want: Vec<u8> = raw.iter().map(|&x| linear(c, width, x)).collect();
        assert_eq!(ours.px, want, "{name}: against the formula");
        assert_eq!(*ours.px.last().unwrap(), 255, "{name}: 2^32 - 1 is white");
        match tool("dcm2pnm", &["--version"]) {
            None => skip("dcm2pnm", "dcmtk not installed"),
            Some(_) => {
                let dcmtk = root.join(format!("{name}-dcmtk.png"));
                let args = [&["--write-png"], dcmtk_args, &[s(&input), s(&dcmtk)]].concat();
                let o = tool("dcm2pnm", &args).unwrap();
                assert!(o.status.success(), "dcm2pnm: {}", stderr(&o));
                assert_eq!(png(&dcmtk), ours, "{name}: against dcm2pnm");
            }
        }
    }
}

/// Rotation (clockwise) and flips by their definition, on an interleaved image.
fn orient(img: &Img, rotate: u16, flip: &str) -> Img {
    let (w, h, ch) = (img.w, img.h, img.ch);
    let (rw, rh) = if rotate % 180 == 90 { (h, w) } else { (w, h) };
    let mut px = vec![0u8; w * h * ch];
    for v in 0..rh {
        for u in 0..rw {
            let uu = if flip.contains('h') { rw - 1 - u } else { u };
            let vv = if flip.contains('v') { rh - 1 - v } else { v };
            let (x, y) = match rotate {
                90 => (vv, h - 1 - uu),
                180 => (w - 1 - uu, h - 1 - vv),
                270 => (w - 1 - vv, uu),
                _ => (uu, vv),
            };
            let (d, s) = ((v * rw + u) * ch, (y * w + x) * ch);
            px[d..d + ch].copy_from_slice(&img.px[s..s + ch]);
        }
    }
    Img {
        w: rw,
        h: rh,
        ch,
        px,
    }
}

#[test]
fn rotation_flips_and_inversion_match_their_definitions() {
    let root = tempdir("ds-orient");
    let input = root.join("ct.dcm");
    write_ct(&input, 23, 11);
    let base_dir = root.join("base");
    render(&input, &base_dir, &["--window", "0,1200"]);
    let base = png(&base_dir.join("ct.png"));
    assert_eq!((base.w, base.h, base.ch), (23, 11, 1));
    for rotate in [0u16, 90, 180, 270] {
        for flip in ["none", "h", "v", "hv"] {
            for invert in [false, true] {
                let out = root.join(format!("r{rotate}-{flip}-{invert}"));
                let r = rotate.to_string();
                let mut args = vec!["--window", "0,1200", "--rotate", &r, "--flip", flip];
                if invert {
                    args.push("--invert");
                }
                render(&input, &out, &args);
                let mut want = orient(&base, rotate, flip);
                if invert {
                    want.px.iter_mut().for_each(|v| *v = 255 - *v);
                }
                assert_eq!(
                    png(&out.join("ct.png")),
                    want,
                    "rotate {rotate} flip {flip} invert {invert}"
                );
            }
        }
    }
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn overlays_are_drawn_before_the_operators() {
    // The overlay planes turn with the image: rotating the output with overlays equals the
    // rotated rendering with overlays (and differs from it without them).
    let root = tempdir("ds-overlays");
    let fixtures = repo_path("tests/fixtures/conformance");
    for name in ["overlays.dcm", "overlays_embedded.dcm"] {
        let input = fixtures.join(name);
        let stem = name.trim_end_matches(".dcm");
        let base = root.join(format!("{stem}-base"));
        render(&input, &base, &[]);
        let turned = root.join(format!("{stem}-turned"));
        render(&input, &turned, &["--rotate", "90", "--flip", "h"]);
        let want = orient(&png(&base.join(format!("{stem}.png"))), 90, "h");
        assert_eq!(png(&turned.join(format!("{stem}.png"))), want, "{name}");
        let plain = root.join(format!("{stem}-plain"));
        render(
            &input,
            &plain,
            &["--rotate", "90", "--flip", "h", "--overlays", "off"],
        );
        assert_ne!(png(&plain.join(format!("{stem}.png"))), want, "{name}");
    }
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn output_sizes_follow_resize_fit_and_scale() {
    let root = tempdir("ds-sizes");
    let input = root.join("ct.dcm");
    write_ct(&input, 200, 100);
    for (args, size) in [
        (vec!["--resize", "64x64"], (64, 64)),
        (vec!["--resize", "64x64", "--fit", "pad"], (64, 64)),
        (vec!["--resize", "64x64", "--fit", "crop"], (64, 64)),
        (vec!["--resize", "50"], (50, 25)),
        (vec!["--resize", "50", "--rotate", "90"], (25, 50)),
        (vec!["--scale", "0.5"], (100, 50)),
        (
            vec!["--scale", "1.5", "--interpolation", "nearest"],
            (300, 150),
        ),
        (vec!["--resize", "30x40", "--rotate", "270"], (30, 40)),
    ] {
        let out = root.join("o");
        let _ = std::fs::remove_dir_all(&out);
        render(&input, &out, &args);
        let img = png(&out.join("ct.png"));
        assert_eq!((img.w, img.h), size, "{args:?}");
    }
    // Padding is black: a 2:1 image padded into a square leaves the top and bottom quarters 0.
    let out = root.join("pad");
    render(
        &input,
        &out,
        &["--resize", "64x64", "--fit", "pad", "--window", "0,100"],
    );
    let img = png(&out.join("ct.png"));
    assert!(img.px[..16 * 64].iter().all(|&v| v == 0));
    assert!(img.px[48 * 64..].iter().all(|&v| v == 0));
    assert!(img.px[16 * 64..48 * 64].iter().any(|&v| v > 0));
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn bad_operator_values_are_usage_errors_naming_the_flag() {
    // The flag the user typed (issue 21), except where two settings disagree: that message
    // names both configuration keys.
    let root = tempdir("ds-bad");
    let input = root.join("ct.dcm");
    write_ct(&input, 8, 8);
    let out = root.join("o");
    for (args, key) in [
        (vec!["--rotate", "45"], "--rotate"),
        (vec!["--resize", "0x5"], "--resize"),
        (vec!["--flip", "x"], "--flip"),
        (vec!["--interpolation", "cubic"], "--interpolation"),
        (vec!["--scale", "0"], "--scale"),
        (vec!["--frames", "0"], "--frames"),
        (vec!["--resize", "64", "--fit", "pad"], "render.fit"),
        (
            vec![
                "--window", "1,2", "--window", "1,2", "--window", "1,2", "--window", "1,2",
            ],
            "--window",
        ),
    ] {
        let mut a = vec!["run", s(&input), "-o", s(&out), "--no-tui"];
        a.extend_from_slice(&args);
        let o = dicomflow(&a);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(key), "{args:?}: {err}");
    }
    std::fs::remove_dir_all(&root).unwrap();
}

/// True when `python3` can import every module named.
fn python_has(modules: &str) -> bool {
    Command::new("python3")
        .args(["-c", &format!("import {modules}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn resize_matches_pillow() {
    if !python_has("PIL, numpy") {
        skip(
            "resize_matches_pillow",
            "python3 with Pillow and numpy not found",
        );
        return;
    }
    let root = tempdir("ds-pillow");
    let ct = root.join("in/ct.dcm");
    write_ct(&ct, 173, 97);
    let series = root.join("series");
    synth(&series, &["--size", "256", "--slices", "1"]);
    let slice = series.join("IM00001.dcm");
    // (input, window arguments, operator cases)
    let gray_ct: &[&str] = &["--window", "0,1200"];
    let gray_synth: &[&str] = &["--window", "40,400"];
    let channels: &[&str] = &[
        "--window", "40,80", "--window", "80,200", "--window", "600,2800",
    ];
    let ops: &[&[&str]] = &[
        &["--resize", "64x64", "--interpolation", "bilinear"],
        &["--resize", "64x64", "--interpolation", "area"],
        &["--resize", "64x64", "--interpolation", "nearest"],
        &["--resize", "61x97", "--interpolation", "bilinear"],
        &["--resize", "120x80", "--fit", "pad"],
        &[
            "--resize",
            "120x80",
            "--fit",
            "crop",
            "--interpolation",
            "area",
        ],
        &["--resize", "100"],
        &["--scale", "0.37", "--interpolation", "area"],
        &["--scale", "1.7"],
        &["--resize", "300x250", "--interpolation", "area"],
        &[
            "--resize", "90x50", "--rotate", "90", "--flip", "h", "--invert",
        ],
        &[
            "--resize",
            "50",
            "--rotate",
            "270",
            "--interpolation",
            "area",
        ],
    ];
    let mut cases = Vec::new();
    for (name, input, window) in [
        ("ct", &ct, gray_ct),
        ("synth", &slice, gray_synth),
        ("rgb", &slice, channels),
    ] {
        let base_dir = root.join(format!("{name}-base"));
        render(input, &base_dir, window);
        let stem = input.file_stem().unwrap().to_str().unwrap();
        let base = base_dir.join(format!("{stem}.png"));
        for (i, op) in ops.iter().enumerate() {
            let out = root.join(format!("{name}-{i}"));
            let mut args = window.to_vec();
            args.extend_from_slice(op);
            render(input, &out, &args);
            let get = |flag: &str, default: &str| -> String {
                op.iter()
                    .position(|a| *a == flag)
                    .map(|p| op[p + 1].to_string())
                    .unwrap_or_else(|| default.to_string())
            };
            let resize = match op.iter().position(|a| *a == "--scale") {
                Some(p) => format!("scale:{}", op[p + 1]),
                None => get("--resize", "none"),
            };
            cases.push(serde_json::json!({
                "base": base,
                "ours": out.join(format!("{stem}.png")),
                "invert": op.contains(&"--invert"),
                "rotate": get("--rotate", "0").parse::<u32>().unwrap(),
                "flip": get("--flip", "none"),
                "resize": resize,
                "fit": get("--fit", "stretch"),
                "interpolation": get("--interpolation", "bilinear"),
            }));
        }
    }
    let list = root.join("cases.json");
    std::fs::write(&list, serde_json::to_vec(&cases).unwrap()).unwrap();
    let script = repo_path("tests/pillow_ops.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg(&list)
        .output()
        .unwrap();
    assert_exit(&out, 0);
    let text = stdout(&out);
    let mut worst = 0;
    let mut exact = 0;
    for line in text.lines() {
        let r: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(r["want_size"], r["got_size"], "{line}");
        let max = r["max_diff"].as_i64().unwrap();
        assert!(max <= 1, "more than ±1 from Pillow: {line}");
        // Pillow 4-12 run the horizontal pass first, as dicomflow does: identical. Pillow 13
        // runs the vertical one first when the height shrinks more: near-ties move by 1.
        let pillow_13 = r["pillow"]
            .as_str()
            .and_then(|v| v.split('.').next())
            .and_then(|m| m.parse::<u32>().ok())
            .is_some_and(|m| m >= 13);
        assert!(
            max == 0 || (pillow_13 && r["height_shrinks_more"] == true),
            "not identical to Pillow: {line}"
        );
        worst = worst.max(max);
        exact += (max == 0) as usize;
    }
    assert_eq!(text.lines().count(), cases.len());
    eprintln!(
        "resize_matches_pillow: {} cases, {exact} identical to Pillow, the others within ±{worst}",
        cases.len()
    );
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn frames_pick_frames_of_multiframe_files_and_skip_files_without_them() {
    let root = tempdir("ds-frames");
    let input = root.join("in");
    synth(
        &input.join("mf"),
        &["--size", "32", "--slices", "6", "--multiframe"],
    );
    synth(&input.join("single"), &["--size", "32", "--slices", "1"]);
    let all = root.join("all");
    render(&input, &all, &[]);
    let out = root.join("out");
    let report = root.join("r.json");
    render(
        &input,
        &out,
        &["--frames", "1,3-4,last", "--report", s(&report)],
    );
    assert_eq!(
        file_names(&out),
        [
            "mf/MF00001_f0001.png",
            "mf/MF00001_f0003.png",
            "mf/MF00001_f0004.png",
            "mf/MF00001_f0006.png",
            "single/IM00001.png",
        ]
    );
    // The same frames as rendering everything.
    for f in file_names(&out) {
        assert_eq!(
            std::fs::read(out.join(&f)).unwrap(),
            std::fs::read(all.join(&f)).unwrap(),
            "{f}"
        );
    }
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let mf = r["result"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"].as_str().unwrap().contains("MF00001"))
        .unwrap();
    assert_eq!(mf["status"], "ok");
    assert_eq!(mf["meta"]["frames"], 6);
    assert_eq!(mf["meta"]["frames_selected"], 4);
    assert_eq!(r["settings"]["frames"], "1,3-4,last");
    // A single-frame file has no frame 2: skipped, said why, and the run succeeds.
    let out2 = root.join("out2");
    let report2 = root.join("r2.json");
    render(
        &input.join("single"),
        &out2,
        &["--frames", "2", "--report", s(&report2)],
    );
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report2).unwrap()).unwrap();
    let f = &r["result"]["files"][0];
    assert_eq!(f["status"], "skipped", "{f}");
    assert!(
        f["skip_reason"].as_str().unwrap().contains("selects none"),
        "{f}"
    );
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn window_channels_are_the_frame_through_each_window() {
    let root = tempdir("ds-channels");
    let input = root.join("in");
    synth(&input, &["--size", "48", "--slices", "2"]);
    let windows = ["40,80", "80,200", "600,2800"];
    let gray: Vec<Img> = windows
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let out = root.join(format!("w{i}"));
            render(&input, &out, &["--window", w]);
            png(&out.join("IM00002.png"))
        })
        .collect();
    for n in [2usize, 3] {
        let out = root.join(format!("c{n}"));
        let mut args = Vec::new();
        for w in &windows[..n] {
            args.extend_from_slice(&["--window", w]);
        }
        render(&input, &out, &args);
        let rgb = png(&out.join("IM00002.png"));
        assert_eq!((rgb.w, rgb.h, rgb.ch), (48, 48, 3));
        for c in 0..3 {
            let channel: Vec<u8> = rgb.px.iter().skip(c).step_by(3).copied().collect();
            match gray.get(c).filter(|_| c < n) {
                Some(g) => assert_eq!(channel, g.px, "{n} windows, channel {c}"),
                None => assert!(channel.iter().all(|&v| v == 0), "blue is black with 2"),
            }
        }
    }
    // Channels with operators and automatic windows: still one window per channel.
    let out = root.join("auto");
    render(
        &input,
        &out,
        &[
            "--window", "minmax", "--window", "40,400", "--window", "file:2", "--resize", "24x24",
        ],
    );
    let img = png(&out.join("IM00002.png"));
    assert_eq!((img.w, img.h, img.ch), (24, 24, 3));
    // A colour image cannot take window channels: that file fails, saying why; exit 1.
    let rgb_in = root.join("rgb");
    synth(&rgb_in, &["--size", "16", "--slices", "1", "--rgb"]);
    let o = dicomflow(&[
        "run",
        s(&rgb_in),
        "-o",
        s(&root.join("rgb-out")),
        "--no-tui",
        "--window",
        "40,80",
        "--window",
        "80,200",
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("need a grayscale image"), "{err}");
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn windows_by_modality_and_series_come_from_the_config() {
    let root = tempdir("ds-bymod");
    let ct = root.join("in/ct");
    synth(&ct, &["--size", "32", "--slices", "2"]);
    // A second series (CT too, series UID 2.25.4243).
    let other = root.join("in/other.dcm");
    write_ct(&other, 20, 10);
    let rendered = |name: &str, args: &[&str]| -> (Vec<u8>, Vec<u8>) {
        let out = root.join(name);
        render(&root.join("in"), &out, args);
        (
            std::fs::read(out.join("ct/IM00001.png")).unwrap(),
            std::fs::read(out.join("other.png")).unwrap(),
        )
    };
    let (ct_narrow, other_narrow) = rendered("narrow", &["--window", "40,80"]);
    let (ct_wide, other_wide) = rendered("wide", &["--window", "-600,1500"]);
    let (_, other_min) = rendered("minmax", &["--window", "minmax"]);
    // The synth series' UID, from the report.
    let report = root.join("r.json");
    render(&ct, &root.join("uid"), &["--report", s(&report)]);
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let series = r["result"]["files"][0]["meta"]["series_uid"]
        .as_str()
        .unwrap()
        .to_string();
    let config = |text: &str| -> PathBuf {
        let p = root.join("c.toml");
        std::fs::write(&p, text).unwrap();
        p
    };
    // By modality (the key is case-insensitive), and by series for the other file.
    let c = config(
        "[render]\nwindow = \"minmax\"\n[render.window_by_modality]\nct = \"40,80\"\n\
         [render.window_by_series]\n\"2.25.4243\" = \"-600,1500\"\n",
    );
    assert_eq!(
        rendered("c1", &["-c", s(&c)]),
        (ct_narrow.clone(), other_wide.clone())
    );
    // The series entry wins over the modality's.
    let c = config(&format!(
        "[render.window_by_modality]\nCT = \"40,80\"\n[render.window_by_series]\n\"{series}\" = \
         \"-600,1500\"\n"
    ));
    assert_eq!(
        rendered("c2", &["-c", s(&c)]),
        (ct_wide.clone(), other_narrow.clone())
    );
    // `--window` on the command line applies to every file.
    assert_eq!(
        rendered("c3", &["-c", s(&c), "--window", "minmax"]).1,
        other_min
    );
    // A bad value in a table names its key.
    let c = config("[render.window_by_modality]\nMR = \"wide\"\n");
    let o = dicomflow(&["run", s(&ct), "-o", s(&root.join("x")), "-c", s(&c)]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("render.window_by_modality.MR"), "{err}");
    std::fs::remove_dir_all(&root).unwrap();
}

/// Runs an external tool; `None` when it is not installed.
fn tool(name: &str, args: &[&str]) -> Option<Output> {
    Command::new(name).args(args).output().ok()
}

#[test]
fn dicom_output_is_valid_secondary_capture_and_renders_back_to_the_same_pixels() {
    let root = tempdir("ds-dcm");
    let input = root.join("in");
    synth(&input.join("ct"), &["--size", "64", "--slices", "2"]);
    synth(
        &input.join("mf"),
        &["--size", "32", "--slices", "3", "--multiframe"],
    );
    let ops: &[&str] = &["--resize", "48x40", "--fit", "pad", "--rotate", "90"];
    let png_out = root.join("png");
    let dcm_out = root.join("dcm");
    render(&input, &png_out, &[&["--window", "40,400"], ops].concat());
    render(
        &input,
        &dcm_out,
        &[&["--window", "40,400", "--format", "dcm"], ops].concat(),
    );
    let rgb_out = root.join("rgb");
    render(
        &input.join("ct"),
        &rgb_out,
        &[
            "--window", "40,80", "--window", "80,200", "--window", "600,2800", "--format", "dcm",
        ],
    );
    let files = file_names(&dcm_out);
    assert_eq!(
        files,
        [
            "ct/IM00001.dcm",
            "ct/IM00002.dcm",
            "mf/MF00001_f0001.dcm",
            "mf/MF00001_f0002.dcm",
            "mf/MF00001_f0003.dcm",
        ]
    );
    let all: Vec<PathBuf> = files
        .iter()
        .map(|f| dcm_out.join(f))
        .chain([rgb_out.join("IM00001.dcm")])
        .collect();

    // dicomflow reads them back: the default window (the file's, 127.5/256) gives the pixels.
    let again = root.join("again");
    render(&dcm_out, &again, &[]);
    for f in &files {
        let png_name = f.replace(".dcm", ".png");
        assert_eq!(
            png(&again.join(&png_name)),
            png(&png_out.join(&png_name)),
            "{f} re-rendered"
        );
    }

    // The header: derived, new UIDs, the source referenced, patient and study carried.
    let source = dicom_object::open_file(input.join("ct/IM00001.dcm")).unwrap();
    let derived = dicom_object::open_file(dcm_out.join("ct/IM00001.dcm")).unwrap();
    let text = |o: &dicom_object::DefaultDicomObject, t| {
        o.element(t).unwrap().to_str().unwrap().trim().to_string()
    };
    assert_eq!(
        text(&derived, tags::SOP_CLASS_UID),
        uids::SECONDARY_CAPTURE_IMAGE_STORAGE
    );
    for t in [
        tags::PATIENT_NAME,
        tags::PATIENT_ID,
        tags::STUDY_INSTANCE_UID,
    ] {
        assert_eq!(text(&derived, t), text(&source, t));
    }
    assert_ne!(
        text(&derived, tags::SOP_INSTANCE_UID),
        text(&source, tags::SOP_INSTANCE_UID)
    );
    assert_ne!(
        text(&derived, tags::SERIES_INSTANCE_UID),
        text(&source, tags::SERIES_INSTANCE_UID)
    );
    let second = dicom_object::open_file(dcm_out.join("ct/IM00002.dcm")).unwrap();
    assert_eq!(
        text(&derived, tags::SERIES_INSTANCE_UID),
        text(&second, tags::SERIES_INSTANCE_UID),
        "one source series, one derived series"
    );
    assert_eq!(text(&derived, tags::IMAGE_TYPE), "DERIVED\\SECONDARY");
    let description = text(&derived, tags::DERIVATION_DESCRIPTION);
    assert!(description.contains("window 40/400"), "{description}");
    let item = &derived
        .element(tags::SOURCE_IMAGE_SEQUENCE)
        .unwrap()
        .items()
        .unwrap()[0];
    assert_eq!(
        item.element(tags::REFERENCED_SOP_INSTANCE_UID)
            .unwrap()
            .to_str()
            .unwrap()
            .trim(),
        text(&source, tags::SOP_INSTANCE_UID)
    );
    // Resuming keeps complete DICOM outputs of the right size; a truncated one is redone.
    let report = root.join("resume.json");
    let full = std::fs::read(dcm_out.join("ct/IM00002.dcm")).unwrap();
    std::fs::write(dcm_out.join("ct/IM00002.dcm"), &full[..full.len() / 2]).unwrap();
    render(
        &input,
        &dcm_out,
        &[
            &["--window", "40,400", "--format", "dcm", "--skip-existing"],
            ops,
            &["--report", s(&report)],
        ]
        .concat(),
    );
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(
        r["result"]["totals"]["frames_existing"], 4,
        "{}",
        r["result"]["totals"]
    );
    assert_eq!(r["result"]["totals"]["frames_written"], 1);
    assert_eq!(std::fs::read(dcm_out.join("ct/IM00002.dcm")).unwrap(), full);
    // Running again writes the same UIDs (derived, not random).
    let rerun = root.join("rerun");
    render(
        &input.join("ct"),
        &rerun,
        &[&["--window", "40,400", "--format", "dcm"], ops].concat(),
    );
    let again = dicom_object::open_file(rerun.join("IM00001.dcm")).unwrap();
    assert_eq!(
        text(&again, tags::SOP_INSTANCE_UID),
        text(&derived, tags::SOP_INSTANCE_UID)
    );

    // dicom3tools: no errors from the IOD and module checks.
    match tool("dciodvfy", &["-h"]) {
        None => skip("dciodvfy", "dicom3tools not installed"),
        Some(_) => {
            for f in &all {
                let o = tool("dciodvfy", &[s(f)]).unwrap();
                let report = stderr(&o).to_string() + &stdout(&o);
                assert!(
                    !report.lines().any(|l| l.starts_with("Error")),
                    "{}:\n{report}",
                    f.display()
                );
                assert!(report.contains("SCImage"), "{report}");
            }
        }
    }
    // DCMTK: dcmdump parses them; dcm2pnm renders them to our pixels (no VOI: 8 bits as is).
    match tool("dcm2pnm", &["--version"]) {
        None => skip("dcm2pnm", "dcmtk not installed"),
        Some(_) => {
            for f in &all {
                let o = tool("dcmdump", &["-q", s(f)]).unwrap();
                assert!(o.status.success(), "dcmdump {}", f.display());
                let out = root.join("dcmtk.png");
                let o = tool("dcm2pnm", &["--write-png", s(f), s(&out)]).unwrap();
                assert!(
                    o.status.success(),
                    "dcm2pnm {}: {}",
                    f.display(),
                    stderr(&o)
                );
                let ours = if f.starts_with(&rgb_out) {
                    let p = root.join("rgb-png");
                    render(
                        &input.join("ct"),
                        &p,
                        &[
                            "--window", "40,80", "--window", "80,200", "--window", "600,2800",
                        ],
                    );
                    png(&p.join("IM00001.png"))
                } else {
                    let rel = f.strip_prefix(&dcm_out).unwrap();
                    png(&png_out.join(rel.with_extension("png")))
                };
                assert_eq!(png(&out), ours, "dcm2pnm {}", f.display());
                // And with the file's window (+Wi 1) the same.
                if ours.ch == 1 {
                    let o = tool("dcm2pnm", &["--write-png", "+Wi", "1", s(f), s(&out)]).unwrap();
                    assert!(o.status.success());
                    assert_eq!(png(&out), ours, "dcm2pnm +Wi 1 {}", f.display());
                }
            }
        }
    }
    // GDCM reads them.
    match tool("gdcminfo", &["--version"]) {
        None => skip("gdcminfo", "libgdcm-tools not installed"),
        Some(_) => {
            for f in &all {
                let o = tool("gdcminfo", &[s(f)]).unwrap();
                let info = stdout(&o);
                assert!(o.status.success(), "gdcminfo {}", f.display());
                assert!(
                    info.contains("1.2.840.10008.5.1.4.1.1.7"),
                    "gdcminfo {}: {info}",
                    f.display()
                );
            }
        }
    }
    // pydicom: parses them and decodes the pixels to what the PNG holds.
    if python_has("pydicom, numpy, PIL") {
        let script = "import sys, pydicom, numpy, PIL.Image as I\n\
                      d = pydicom.dcmread(sys.argv[1])\n\
                      a = numpy.asarray(I.open(sys.argv[2]))\n\
                      assert d.pixel_array.shape == a.shape, (d.pixel_array.shape, a.shape)\n\
                      assert (d.pixel_array == a).all()\n\
                      print(d.SOPClassUID, d.file_meta.TransferSyntaxUID)\n";
        for f in &files {
            let png_path = png_out.join(f.replace(".dcm", ".png"));
            let o = Command::new("python3")
                .args(["-c", script, s(&dcm_out.join(f)), s(&png_path)])
                .output()
                .unwrap();
            assert!(o.status.success(), "pydicom {f}: {}", stderr(&o));
        }
    } else {
        skip(
            "pydicom",
            "python3 with pydicom, numpy and Pillow not found",
        );
    }
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn operators_write_the_same_bytes_in_every_layout_with_outputs_larger_than_inputs() {
    // Upscaling makes every output larger than its slot's input: the ring must size outputs
    // from the plan's output dimensions (and the PNG filter rows from them too).
    let root = tempdir("ds-layouts");
    let input = root.join("in");
    synth(&input, &["--size", "40", "--slices", "6"]);
    write_ct(&input.join("wide.dcm"), 30, 7);
    let ops: &[&str] = &["--scale", "2.5", "--rotate", "90", "--window", "40,400"];
    let mut first: Option<Vec<(String, Vec<u8>)>> = None;
    for layout in [
        &["--layout", "shared"][..],
        &["--layout", "stages", "--loaders", "2", "--writers", "2"],
        &["--layout", "shared", "--slots", "2", "--writers", "1"],
        &["--png-compression", "balanced"],
    ] {
        let out = root.join(format!("o{}", layout.join("")));
        render(&input, &out, &[ops, layout].concat());
        let got: Vec<(String, Vec<u8>)> = file_names(&out)
            .into_iter()
            .filter(|f| f.ends_with(".png"))
            .map(|f| {
                let img = png(&out.join(&f));
                (f, img.px)
            })
            .collect();
        assert_eq!(got.len(), 7, "{layout:?}");
        match &first {
            None => first = Some(got),
            Some(want) => assert_eq!(&got, want, "{layout:?}"),
        }
    }
    let img = png(&root.join("o--layoutshared").join("wide.png"));
    assert_eq!((img.w, img.h), (18, 75));
    // Resuming recognizes the outputs by the operators' size: nothing is rendered again.
    let report = root.join("resume.json");
    render(
        &input,
        &root.join("o--layoutshared"),
        &[ops, &["--skip-existing", "--report", s(&report)]].concat(),
    );
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(
        r["result"]["totals"]["frames_existing"], 7,
        "{}",
        r["result"]["totals"]
    );
    assert_eq!(r["result"]["totals"]["frames_written"], 0);
    std::fs::remove_dir_all(&root).unwrap();
}
