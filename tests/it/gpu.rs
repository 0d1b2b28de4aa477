//! GPU backend tests. Each test skips (printing why) on machines without a usable CUDA device;
//! on the GPU machine they check that every transfer strategy produces exactly the CPU
//! reference's bytes — for the render chains, window channels, and every operator (resize with
//! each interpolation and fit, rotations, flips, inversion) — that the GPU encoders (nvCOMP
//! PNG, nvJPEG) give the CPU's pixels and comparable JPEGs, that the kernel cache serves a
//! second process, that several GPUs share the work with identical output, and that
//! `bench transfer` and `bench gpu-encode` print their whole tables.

use crate::common::{
    self, assert_exit, bin, dicomflow, dicomflow_ok, repo_path, stderr, stdout, tempdir,
};

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use dicomflow::backend::cpu::CpuRenderer;
use dicomflow::backend::cuda::{driver, CudaBackend};
use dicomflow::backend::options::{
    GpuEncodeChoice, GpuOptions, GpuSelection, PageLocking, Transfer,
};
use dicomflow::backend::{Backend, Encoded};
use dicomflow::decode::lut::Lut;
use dicomflow::memory::SlotPool;
use dicomflow::output::options::{OutputFormat, OutputOptions, PngCompression, PngFilter};
use dicomflow::output::png::{filter_rows, png_from_zlib};
use dicomflow::pipeline::output_wish;
use dicomflow::render::ops::{Fit, Flip, Interpolation, OperatorOptions, Resize};
use dicomflow::render::plan::{
    AutoWindow, Chain, ColorModel, ColorPlan, FramePlan, GrayPlan, Modality, StoredFormat, Voi,
    Window,
};
use dicomflow::render::spec::VoiFunction;
use dicomflow::render::table::IndexMap;

/// Devices available, or `None` after printing why the test is skipped.
fn gpu_or_skip(test: &str) -> Option<usize> {
    match driver::probe() {
        Ok(n) => Some(n),
        Err(why) => {
            // Written to the stderr handle directly so the harness does not capture it.
            let _ = writeln!(
                std::io::stderr(),
                "skipping {test}: no usable CUDA device ({why})"
            );
            None
        }
    }
}

/// Deterministic pseudo-random bytes (garbage in unused high bits included).
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn stored(bits_allocated: u16, bits_stored: u16, high_bit: u16, signed: bool) -> StoredFormat {
    StoredFormat {
        bits_allocated,
        bits_stored,
        high_bit,
        signed,
    }
}

fn window(center: f64, width: f64, function: VoiFunction) -> Voi {
    Voi::Window(Window {
        center,
        width,
        function,
    })
}

/// A spread of grayscale and colour plans covering the chain's branches.
fn plans() -> Vec<FramePlan> {
    let mut v = Vec::new();
    let formats = [
        stored(8, 8, 7, false),
        stored(16, 12, 11, false),
        stored(16, 12, 11, true),
        stored(16, 16, 15, false),
        stored(16, 16, 15, true),
        stored(16, 12, 15, true),
        stored(32, 16, 15, false),
    ];
    let modalities = [
        Modality::Identity,
        Modality::Rescale {
            slope: 1.0,
            intercept: -1024.0,
        },
        Modality::Rescale {
            slope: 1.7,
            intercept: -1024.3,
        },
        Modality::Lut(Arc::new(Lut::new(
            -100,
            12,
            (0..3000u16).map(|i| (i * 7) % 4096).collect(),
        ))),
    ];
    let vois = [
        window(40.0, 400.0, VoiFunction::Linear),
        window(300.7, 10.3, VoiFunction::Linear),
        window(1000.0, 1.0, VoiFunction::Linear),
        window(40.0, 400.0, VoiFunction::LinearExact),
        window(-600.0, 1500.0, VoiFunction::Sigmoid),
        Voi::Auto(AutoWindow::MinMax, VoiFunction::Linear),
        Voi::Auto(AutoWindow::MinMaxNoExtremes, VoiFunction::Linear),
        Voi::Auto(AutoWindow::Histogram { percent: 5.0 }, VoiFunction::Sigmoid),
        Voi::None,
        Voi::Lut(Arc::new(Lut::new(
            -2048,
            16,
            (0..4096u32).map(|i| (i * 16) as u16).collect(),
        ))),
    ];
    let sizes = [(257u32, 263u32), (512, 512)];
    let mut n = 0;
    for f in formats {
        for m in &modalities {
            for voi in &vois {
                n += 1;
                let (rows, cols) = sizes[n % 2];
                v.push(FramePlan {
                    rows,
                    cols,
                    chain: Chain::Gray(GrayPlan {
                        stored: f,
                        modality: m.clone(),
                        voi: voi.clone(),
                        invert: n % 3 == 0,
                        pixels: rows as u64 * cols as u64,
                    }),
                    ops: None,
                    encoded: None,
                    overlay: None,
                });
            }
        }
    }
    let palette = |bits: u8| {
        Arc::new([
            Lut::new(
                0,
                bits,
                (0..256u32)
                    .map(|i| (i * 257 % 65536) as u16 >> (16 - bits as u32))
                    .collect(),
            ),
            Lut::new(
                0,
                bits,
                (0..256u32)
                    .map(|i| ((255 - i) * 257) as u16 >> (16 - bits as u32))
                    .collect(),
            ),
            Lut::new(
                0,
                bits,
                (0..256u32)
                    .map(|i| ((i * 3 % 256) * 257) as u16 >> (16 - bits as u32))
                    .collect(),
            ),
        ])
    };
    let colors = [
        (stored(8, 8, 7, false), ColorModel::Rgb, false, false),
        (stored(8, 8, 7, false), ColorModel::Rgb, true, false),
        (stored(16, 12, 11, false), ColorModel::Rgb, false, false),
        (stored(8, 6, 5, false), ColorModel::Rgb, false, false),
        (stored(8, 8, 7, true), ColorModel::Rgb, false, false),
        (stored(8, 8, 7, false), ColorModel::YbrFull, false, false),
        (stored(8, 8, 7, false), ColorModel::YbrFull, true, false),
        (stored(16, 16, 15, false), ColorModel::YbrFull, false, false),
        (stored(8, 8, 7, false), ColorModel::YbrFull422, false, true),
        (
            stored(8, 8, 7, false),
            ColorModel::YbrPartial422,
            false,
            true,
        ),
        (
            stored(8, 8, 7, false),
            ColorModel::Palette(palette(8)),
            false,
            false,
        ),
        (
            stored(8, 8, 7, false),
            ColorModel::Palette(palette(16)),
            false,
            false,
        ),
    ];
    for (i, (s, model, planar, subsampled)) in colors.into_iter().enumerate() {
        let (rows, cols) = if i % 2 == 0 { (101, 77) } else { (256, 256) };
        v.push(FramePlan {
            rows,
            cols,
            chain: Chain::Color(ColorPlan {
                stored: s,
                model,
                planar,
                subsampled,
            }),
            ops: None,
            encoded: None,
            overlay: None,
        });
    }
    v
}

/// Window channels (2 and 3, an automatic window among them) and every operator — each
/// interpolation and fit, upscaling and downscaling, rotations, flips, inversion — on grayscale
/// (8 and 16 bits), window channels and colour chains of the plans above.
fn operator_plans(chains: &[FramePlan]) -> Vec<FramePlan> {
    let gray = |bits: u16| {
        chains
            .iter()
            .find(|p| matches!(&p.chain, Chain::Gray(g) if g.stored.bits_allocated == bits))
            .cloned()
            .expect("a grayscale plan")
    };
    let mut bases = vec![gray(8), gray(16)];
    for n in [2usize, 3] {
        let mut p = gray(16);
        let Chain::Gray(g) = &p.chain else {
            unreachable!("grayscale")
        };
        let vois = [
            window(40.0, 80.0, VoiFunction::Linear),
            Voi::Auto(AutoWindow::MinMax, VoiFunction::Linear),
            window(600.0, 2800.0, VoiFunction::Sigmoid),
        ];
        p.chain = Chain::Channels(
            vois[..n]
                .iter()
                .map(|v| GrayPlan {
                    voi: v.clone(),
                    ..g.clone()
                })
                .collect(),
        );
        bases.push(p);
    }
    bases.extend(
        chains
            .iter()
            .filter(|p| matches!(&p.chain, Chain::Color(_)))
            .step_by(5) // RGB, YBR_FULL, an 8-bit palette
            .cloned(),
    );
    let options = [
        OperatorOptions {
            resize: Resize::Exact {
                width: 64,
                height: 48,
            },
            ..OperatorOptions::default()
        },
        OperatorOptions {
            resize: Resize::Exact {
                width: 100,
                height: 100,
            },
            fit: Fit::Pad,
            interpolation: Interpolation::Area,
            invert: true,
            ..OperatorOptions::default()
        },
        OperatorOptions {
            resize: Resize::Exact {
                width: 90,
                height: 40,
            },
            fit: Fit::Crop,
            interpolation: Interpolation::Nearest,
            rotate: 90,
            flip: Flip::Horizontal,
            ..OperatorOptions::default()
        },
        OperatorOptions {
            resize: Resize::Longest(700),
            rotate: 270,
            ..OperatorOptions::default()
        },
        OperatorOptions {
            resize: Resize::Scale(0.3),
            interpolation: Interpolation::Area,
            flip: Flip::Both,
            ..OperatorOptions::default()
        },
        OperatorOptions {
            rotate: 180,
            invert: true,
            ..OperatorOptions::default()
        },
    ];
    let mut v = Vec::new();
    for base in &bases {
        for o in &options {
            let mut p = base.clone();
            p.ops = o.resolve(p.cols, p.rows).unwrap();
            assert!(p.ops.is_some(), "{o:?}");
            v.push(p);
        }
    }
    v
}

/// Runs without a GPU: the operator plans the GPU test uses are valid, and the CPU reference
/// renders every one to the output size its plan announces.
#[test]
fn operator_plans_render_on_the_cpu_reference() {
    let chains = plans();
    let plans = operator_plans(&chains);
    assert!(plans.len() >= 40, "{}", plans.len());
    let mut cpu = CpuRenderer::default();
    for (i, plan) in plans.iter().enumerate() {
        let input = noise(i as u64 + 7, plan.input_bytes());
        let mut out = vec![0u8; plan.output_bytes()];
        cpu.render_bytes(plan, &input, &mut out)
            .unwrap_or_else(|e| panic!("plan {i}: {e}"));
        let ops = plan.ops.expect("operators");
        assert_eq!(
            plan.output_bytes(),
            ops.out_w as usize * ops.out_h as usize * plan.channels()
        );
    }
}

#[test]
fn gpu_every_strategy_matches_the_cpu_reference_bit_for_bit() {
    if gpu_or_skip("gpu_every_strategy_matches_the_cpu_reference_bit_for_bit").is_none() {
        return;
    }
    let mut plans = plans();
    plans.extend(operator_plans(&plans));
    let mut cpu = CpuRenderer::default();
    // PNG output (the default) has the GPU filter the rows as well; BMP gets plain pixels.
    for (transfer, page_locking, format) in [
        (Transfer::ZeroCopy, PageLocking::Register, OutputFormat::Png),
        (
            Transfer::ZeroCopy,
            PageLocking::HostAlloc,
            OutputFormat::Png,
        ),
        (Transfer::Pinned, PageLocking::Register, OutputFormat::Png),
        (Transfer::Pinned, PageLocking::HostAlloc, OutputFormat::Png),
        (Transfer::Pageable, PageLocking::Register, OutputFormat::Png),
        (Transfer::ZeroCopy, PageLocking::Register, OutputFormat::Bmp),
        (Transfer::Pinned, PageLocking::Register, OutputFormat::Bmp),
        (Transfer::Pageable, PageLocking::Register, OutputFormat::Bmp),
    ] {
        // The writers encode: this test is about the pixels and rows the GPU leaves.
        let gpu = GpuOptions {
            transfer,
            page_locking,
            gpus: GpuSelection::List(vec![0]),
            encode: GpuEncodeChoice::Cpu,
            ..GpuOptions::default()
        };
        let output = OutputOptions {
            format,
            ..OutputOptions::default()
        };
        let wish = output_wish(&output);
        let backend = CudaBackend::new(&gpu, &wish, "test").expect("CUDA backend");
        let mut worker = backend.worker(0).unwrap();
        let pool = SlotPool::new(2, 0, 0, backend.allocator()).unwrap();
        let mut mismatches = Vec::new();
        for (i, plan) in plans.iter().enumerate() {
            let input = noise(i as u64 + 1, plan.input_bytes());
            let mut expected = vec![0u8; plan.output_bytes()];
            cpu.render_bytes(plan, &input, &mut expected).unwrap();
            let mut slot = pool.take().unwrap();
            slot.reserve(plan.input_bytes(), plan.output_capacity())
                .unwrap();
            slot.input
                .bytes_mut(plan.input_bytes())
                .copy_from_slice(&input);
            slot.output.bytes_mut(plan.output_capacity()).fill(0xAA);
            let outcome = worker.render(plan, &mut slot).unwrap();
            // Stored values deeper than 16 bits take the CPU path inside the worker: pixels.
            let filtered = outcome.png_rows;
            let deep = match &plan.chain {
                Chain::Gray(g) => IndexMap::of(&g.stored).is_none(),
                Chain::Channels(gs) => gs.iter().any(|g| IndexMap::of(&g.stored).is_none()),
                Chain::Color(_) => false,
            };
            assert_eq!(
                filtered,
                format == OutputFormat::Png && !deep,
                "plan {i}: PNG rows from the GPU"
            );
            if filtered {
                let mut rows = Vec::new();
                let row_len = plan.out_cols() as usize * plan.channels();
                filter_rows(
                    PngFilter::Adaptive,
                    &expected,
                    row_len,
                    plan.channels(),
                    &mut rows,
                );
                expected = rows;
            }
            let got = slot.output.bytes(expected.len());
            let diff = got.iter().zip(&expected).filter(|(a, b)| a != b).count();
            if diff > 0 {
                mismatches.push(format!(
                    "{transfer:?}/{page_locking:?}/{format:?} plan {i} ({:?}, {:?}): {diff} bytes \
                     differ",
                    plan.chain, plan.ops
                ));
            }
            pool.give_back(slot);
        }
        assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
        eprintln!(
            "{transfer:?} ({page_locking:?}, {}, {format:?}): {} plans bit-exact with the CPU reference",
            backend.allocator().kind(),
            plans.len()
        );
    }
}

fn outputs(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    files(dir, "png")
        .into_iter()
        .map(|(p, bytes)| (p, image::load_from_memory(&bytes).unwrap().into_bytes()))
        .collect()
}

#[test]
fn gpu_conformance_fixtures_match_the_cpu_for_every_strategy() {
    if gpu_or_skip("gpu_conformance_fixtures_match_the_cpu_for_every_strategy").is_none() {
        return;
    }
    let fixtures = repo_path("tests/fixtures/conformance");
    let root = tempdir("gpu-conformance");
    let cpu_out = root.join("cpu");
    let f = fixtures.to_str().unwrap();
    dicomflow_ok(&[
        "run",
        f,
        "-o",
        cpu_out.to_str().unwrap(),
        "-q",
        "--no-tui",
        "--backend",
        "cpu",
    ]);
    let expected = outputs(&cpu_out);
    assert!(!expected.is_empty(), "no conformance fixtures rendered");
    for transfer in ["zero-copy", "pinned", "pageable"] {
        let out = root.join(transfer);
        dicomflow_ok(&[
            "run",
            f,
            "-o",
            out.to_str().unwrap(),
            "-q",
            "--no-tui",
            "--backend",
            "cuda",
            "--transfer",
            transfer,
        ]);
        let got = outputs(&out);
        assert_eq!(got.len(), expected.len(), "{transfer}: output count");
        for ((p, a), (_, b)) in got.iter().zip(&expected) {
            assert!(
                a == b,
                "{transfer}: {} differs from the CPU backend",
                p.display()
            );
        }
        eprintln!(
            "{transfer}: {} fixture outputs identical to the CPU backend",
            got.len()
        );
    }
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn gpu_operators_through_the_binary_match_the_cpu_for_every_strategy() {
    if gpu_or_skip("gpu_operators_through_the_binary_match_the_cpu_for_every_strategy").is_none() {
        return;
    }
    let root = tempdir("gpu-operators");
    let input = root.join("in");
    for (dir, extra) in [
        ("ct", &["--size", "96", "--slices", "3"][..]),
        ("mf", &["--size", "64", "--slices", "3", "--multiframe"]),
        ("rgb", &["--size", "48", "--slices", "2", "--rgb"]),
    ] {
        let d = input.join(dir);
        let mut args = vec!["synth", d.to_str().unwrap(), "-q"];
        args.extend_from_slice(extra);
        dicomflow_ok(&args);
    }
    let cases: &[&[&str]] = &[
        &["--resize", "64x48"],
        &[
            "--resize",
            "100x100",
            "--fit",
            "pad",
            "--interpolation",
            "area",
            "--invert",
        ],
        &[
            "--resize",
            "90x40",
            "--fit",
            "crop",
            "--interpolation",
            "nearest",
            "--rotate",
            "90",
            "--flip",
            "h",
        ],
        &["--scale", "2.5", "--rotate", "270"],
        &["--rotate", "180", "--flip", "v", "--invert"],
        &[
            "--window", "40,80", "--window", "80,200", "--window", "600,2800", "--resize", "32",
        ],
    ];
    for (n, case) in cases.iter().enumerate() {
        // Window channels need grayscale: the colour series only takes the other cases.
        let inputs = if case.contains(&"--window") {
            vec![input.join("ct"), input.join("mf")]
        } else {
            vec![input.clone()]
        };
        let render = |out: &Path, backend: &[&str]| {
            for inp in &inputs {
                let mut args = vec![
                    "run",
                    inp.to_str().unwrap(),
                    "-o",
                    out.to_str().unwrap(),
                    "-q",
                    "--no-tui",
                ];
                args.extend_from_slice(backend);
                args.extend_from_slice(case);
                dicomflow_ok(&args);
            }
        };
        let cpu_out = root.join(format!("cpu-{n}"));
        render(&cpu_out, &["--backend", "cpu"]);
        let expected = outputs(&cpu_out);
        assert!(!expected.is_empty(), "{case:?}: no outputs");
        // Fast PNG has the GPU filter the rows; balanced PNG takes its pixels; with nvCOMP the
        // GPU also compresses them (the PNG decodes to the same pixels).
        let nvcomp = dicomflow::backend::cuda::libs::open(&["libnvcomp.so.6"], None).is_ok();
        let mut encodings = vec![
            (
                "fast",
                &["--png-compression", "fast", "--gpu-encode", "cpu"][..],
            ),
            (
                "balanced",
                &["--png-compression", "balanced", "--gpu-encode", "cpu"],
            ),
        ];
        if nvcomp {
            encodings.push(("nvcomp", &["--gpu-encode", "gpu"]));
        }
        for transfer in ["zero-copy", "pinned", "pageable"] {
            for (label, encoding) in &encodings {
                let out = root.join(format!("{transfer}-{label}-{n}"));
                let mut args = vec!["--backend", "cuda", "--transfer", transfer];
                args.extend_from_slice(encoding);
                render(&out, &args);
                let got = outputs(&out);
                assert_eq!(
                    got.len(),
                    expected.len(),
                    "{transfer} {label} {case:?}: output count"
                );
                for ((p, a), (_, b)) in got.iter().zip(&expected) {
                    assert!(
                        a == b,
                        "{transfer} {label} {case:?}: {} differs",
                        p.display()
                    );
                }
            }
        }
        eprintln!(
            "{case:?}: {} outputs identical on the CPU and every GPU strategy",
            expected.len()
        );
    }
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn gpu_second_process_start_uses_the_kernel_cache() {
    if gpu_or_skip("gpu_second_process_start_uses_the_kernel_cache").is_none() {
        return;
    }
    let root = tempdir("gpu-cache");
    let input = root.join("in");
    dicomflow_ok(&[
        "synth",
        input.to_str().unwrap(),
        "--size",
        "64",
        "--slices",
        "2",
        "-q",
    ]);
    let cache = root.join("kernel-cache");
    let mut reasons = Vec::new();
    for i in 0..2 {
        let cfg = root.join("c.toml");
        std::fs::write(
            &cfg,
            format!("[gpu]\nkernel_cache = \"{}\"\n", cache.display()),
        )
        .unwrap();
        let report = root.join(format!("r{i}.json"));
        dicomflow_ok(&[
            "run",
            input.to_str().unwrap(),
            "-o",
            root.join("out").to_str().unwrap(),
            "-c",
            cfg.to_str().unwrap(),
            "--backend",
            "cuda",
            "-q",
            "--no-tui",
            "--report",
            report.to_str().unwrap(),
        ]);
        let r: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
        reasons.push(
            r["result"]["backend"]["reason"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    assert!(
        reasons[0].contains("compiled"),
        "first start: {}",
        reasons[0]
    );
    assert!(
        reasons[1].contains("cache hit"),
        "second start: {}",
        reasons[1]
    );
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn gpu_all_devices_share_the_work_with_identical_output() {
    let Some(n) = gpu_or_skip("gpu_all_devices_share_the_work_with_identical_output") else {
        return;
    };
    if n < 2 {
        let _ = writeln!(
            std::io::stderr(),
            "skipping gpu_all_devices_share_the_work_with_identical_output: {n} GPU(s), need 2"
        );
        return;
    }
    let root = tempdir("gpu-multi");
    let input = root.join("in");
    dicomflow_ok(&[
        "synth",
        input.to_str().unwrap(),
        "--size",
        "256",
        "--slices",
        "64",
        "-q",
    ]);
    let one = root.join("one");
    let all = root.join("all");
    let report = root.join("r.json");
    let i = input.to_str().unwrap();
    dicomflow_ok(&[
        "run",
        i,
        "-o",
        one.to_str().unwrap(),
        "-q",
        "--no-tui",
        "--backend",
        "cuda",
        "--gpus",
        "0",
    ]);
    dicomflow_ok(&[
        "run",
        i,
        "-o",
        all.to_str().unwrap(),
        "-q",
        "--no-tui",
        "--backend",
        "cuda",
        "--gpus",
        "all",
        "--report",
        report.to_str().unwrap(),
    ]);
    assert_eq!(outputs(&one), outputs(&all));
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let per_device = &r["result"]["frames_per_device"];
    eprintln!("frames per device: {per_device}");
    let counts: Vec<u64> = per_device
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert!(
        counts.len() >= 2 && counts.iter().all(|&c| c > 0),
        "{per_device}"
    );
    std::fs::remove_dir_all(&root).unwrap();
}

/// `bench transfer` prints every strategy beside the ceiling, the traffic probes and the
/// floor they imply; without a GPU it fails with a clear error and exit status 2.
#[test]
fn gpu_bench_transfer_prints_every_strategy_and_the_zero_copy_floor() {
    let args = [
        "bench",
        "transfer",
        "--sizes",
        "512",
        "--iters",
        "3",
        "--streams",
        "2",
    ];
    if gpu_or_skip("gpu_bench_transfer_prints_every_strategy_and_the_zero_copy_floor").is_none() {
        let out = dicomflow(&args);
        assert_exit(&out, 2);
        let err = stderr(&out);
        assert!(err.contains("libcuda") || err.contains("device"), "{err}");
        return;
    }
    let out = dicomflow_ok(&args);
    let table = stdout(&out);
    let row = |strategy: &str, mode: &str| {
        table.lines().any(|l| {
            l.starts_with("512x512") && l.contains(strategy) && l.contains(mode) && l.ends_with('x')
        })
    };
    assert!(table.contains("ceiling (pinned 256 MiB copies"), "{table}");
    for strategy in ["pageable", "pinned", "zero-copy", "zero-copy wc-in"] {
        assert!(row(strategy, "single"), "{strategy} single:\n{table}");
    }
    for strategy in ["pinned", "zero-copy", "zero-copy (registered)"] {
        assert!(row(strategy, "sustained 2 streams"), "{strategy}:\n{table}");
    }
    for probe in [
        "gray_apply_u16",
        "probe_read_u16",
        "probe_write_u16",
        "probe_read_128of256",
        "copy engines, H2D + D2H (no kernel)",
        "SM reads:",
        "floor through the mapping",
    ] {
        assert!(table.contains(probe), "{probe}:\n{table}");
    }
}

#[test]
fn gpu_damaged_images_fail_as_on_the_cpu() {
    if gpu_or_skip("gpu_damaged_images_fail_as_on_the_cpu").is_none() {
        return;
    }
    // Issue 16 causes 3 and 9: damaged images and cut frames are failures on every backend.
    let damaged = repo_path("tests/fixtures/damaged");
    let root = tempdir("gpu-damaged");
    let mut reports = Vec::new();
    for backend in ["cpu", "cuda"] {
        let report = root.join(format!("{backend}.json"));
        let out = Command::new(bin())
            .arg("run")
            .arg(&damaged)
            .arg("-o")
            .arg(root.join(backend))
            .args(["-q", "--no-tui", "--backend", backend, "--report"])
            .arg(&report)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{backend}: exit code");
        let json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
        let mut files: Vec<(String, String)> = json["result"]["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                (
                    f["path"].as_str().unwrap().to_string(),
                    f["status"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        files.sort();
        // A multi-frame file with one cut frame is `partial` (its other frames render); every
        // other damaged file fails whole.
        assert!(
            files.iter().all(
                |(p, s)| s == "failed" || (s == "partial" && p.ends_with("jpeg_frame_cut.dcm"))
            ),
            "{backend}: {files:?}"
        );
        reports.push(files);
    }
    assert_eq!(reports[0], reports[1]);
    std::fs::remove_dir_all(&root).unwrap();
}

/// The codec libraries load here (else prints why the GPU decode tests skip).
fn codecs_or_skip(test: &str) -> bool {
    if gpu_or_skip(test).is_none() {
        return false;
    }
    let codecs = dicomflow::backend::cuda::decode::Codecs::load(
        &dicomflow::backend::options::GpuOptions::default(),
        1,
        None,
        None,
    );
    let route = codecs.route();
    if route.jpeg2000 && route.jpeg_lossless {
        return true;
    }
    let _ = writeln!(
        std::io::stderr(),
        "skipping {test}: codec libraries missing ({})",
        codecs.describe().join("; ")
    );
    false
}

/// Runs dicomflow over `inputs` into `out` with `extra` options, a report in `out`; returns
/// the process output and the report.
fn run_report(
    inputs: &[&Path],
    out: &Path,
    extra: &[&str],
) -> (std::process::Output, serde_json::Value) {
    run_report_env(inputs, out, extra, &[])
}

/// [`run_report`] with environment variables set for the run.
fn run_report_env(
    inputs: &[&Path],
    out: &Path,
    extra: &[&str],
    env: &[(&str, &str)],
) -> (std::process::Output, serde_json::Value) {
    let report = out.with_extension("json");
    let mut args: Vec<String> = vec!["run".into()];
    args.extend(inputs.iter().map(|p| p.display().to_string()));
    for a in ["-o", out.to_str().unwrap(), "--no-tui", "--report"] {
        args.push(a.into());
    }
    args.push(report.display().to_string());
    args.extend(extra.iter().map(|s| s.to_string()));
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_dicomflow"))
        .args(&args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let text = std::fs::read_to_string(&report).unwrap_or_else(|e| {
        panic!(
            "no report from dicomflow {args:?} ({e}): {}",
            stderr(&output)
        )
    });
    (output, serde_json::from_str(&text).unwrap())
}

/// `copies` copies of the files of the folder `from`, in `into/copyNN` (series of hundreds of
/// slices from a few fixtures).
fn replicate(from: &Path, into: &Path, copies: usize) {
    for copy in 0..copies {
        let dir = into.join(format!("copy{copy:02}"));
        std::fs::create_dir_all(&dir).unwrap();
        for e in std::fs::read_dir(from).unwrap().flatten() {
            std::fs::copy(e.path(), dir.join(e.file_name())).unwrap();
        }
    }
}

/// The CPU backend's outputs for `inputs`, written to `out`: what the GPU runs must match.
fn cpu_outputs(inputs: &Path, out: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let (o, _) = run_report(&[inputs], out, &["--backend", "cpu"]);
    assert_exit(&o, 0);
    outputs(out)
}

/// Frames the GPU decoded, and frames a GPU codec handed back to the CPU, from a report.
fn gpu_decode_counts(report: &serde_json::Value) -> (u64, u64) {
    let gpu = &report["backend"]["gpu"];
    (
        gpu["frames_gpu_decoded"].as_u64().unwrap_or(0),
        gpu["frames_decode_fallback"].as_u64().unwrap_or(0),
    )
}

fn assert_same_outputs(got: &[(PathBuf, Vec<u8>)], expected: &[(PathBuf, Vec<u8>)], what: &str) {
    assert_eq!(
        got.iter().map(|x| &x.0).collect::<Vec<_>>(),
        expected.iter().map(|x| &x.0).collect::<Vec<_>>(),
        "{what}: output files"
    );
    for ((p, a), (_, b)) in got.iter().zip(expected) {
        assert!(
            a == b,
            "{what}: {} differs from the CPU backend",
            p.display()
        );
    }
}

#[test]
fn gpu_decode_lossless_fixtures_match_the_cpu_backend_for_every_strategy() {
    let test = "gpu_decode_lossless_fixtures_match_the_cpu_backend_for_every_strategy";
    if !codecs_or_skip(test) {
        return;
    }
    let here = repo_path("tests/fixtures");
    let root = tempdir("gpu-decode-lossless");
    let inputs = root.join("in");
    std::fs::create_dir_all(&inputs).unwrap();
    // Every lossless compressed conformance fixture (the GPU takes some, hands the others,
    // e.g. predictor 6 or RGB lossless JPEG, to the CPU), and the GPU decode fixtures.
    let lossless = [
        "conformance/jpeg_lossless_sv1.dcm",
        "conformance/jpeg_lossless_sv6.dcm",
        "conformance/jpeg_lossless_frag.dcm",
        "conformance/jpeg_lossless_rgb.dcm",
        "conformance/mf_jpeg_lossless.dcm",
        "conformance/j2k_gray.dcm",
        "conformance/j2k_rgb.dcm",
        "gpu_decode/htj2k_lossless.dcm",
        "gpu_decode/signed16_j2k.dcm",
        "gpu_decode/signed16_jls.dcm",
    ];
    for f in lossless {
        std::fs::copy(here.join(f), inputs.join(f.replace('/', "_"))).unwrap();
    }
    let cpu_out = root.join("cpu");
    let (o, _) = run_report(&[&inputs], &cpu_out, &["--backend", "cpu"]);
    assert_exit(&o, 0);
    let expected = outputs(&cpu_out);
    // Default policy: JPEG 2000 (gray, RCT colour, HTJ2K, signed 16-bit) on the GPU; "all"
    // adds lossless JPEG of 256x256 and more (signed16_jls). Every output stays identical.
    let runs = [
        ("zero-copy", "lossless", 4),
        ("pinned", "lossless", 4),
        ("pageable", "lossless", 4),
        ("zero-copy", "all", 5),
    ];
    for (transfer, policy, at_least) in runs {
        let what = format!("{transfer}, gpu.decode = {policy}");
        let out = root.join(format!("{transfer}-{policy}"));
        let (o, report) = run_report(
            &[&inputs],
            &out,
            &[
                "--backend",
                "cuda",
                "--transfer",
                transfer,
                "--gpu-decode",
                policy,
                // Every frame a GPU codec takes goes to it (not the CPU while nvJPEG starts).
                "--gpu-decode-start",
                "wait",
            ],
        );
        assert_exit(&o, 0);
        assert_same_outputs(&outputs(&out), &expected, &what);
        let (decoded, fallback) = gpu_decode_counts(&report);
        assert!(
            decoded >= at_least,
            "{what}: only {decoded} frames decoded on the GPU"
        );
        eprintln!(
            "{what}: {} outputs identical to the CPU backend; {decoded} frames decoded on the \
             GPU, {fallback} handed back to the CPU decoder",
            expected.len()
        );
    }
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn gpu_decode_200_slice_lossless_series_match_the_cpu_backend() {
    let test = "gpu_decode_200_slice_lossless_series_match_the_cpu_backend";
    if !codecs_or_skip(test) {
        return;
    }
    let here = repo_path("tests/fixtures/gpu_decode");
    let root = tempdir("gpu-decode-series");
    // 10 distinct slices per syntax, each copied into 20 folders: 200 slices per series.
    for series in ["series_j2k", "series_jls"] {
        replicate(&here.join(series), &root.join("in").join(series), 20);
    }
    let inputs = root.join("in");
    let expected = cpu_outputs(&inputs, &root.join("cpu"));
    assert_eq!(expected.len(), 400);
    // "all": lossless JPEG goes to the GPU only then (JPEG 2000 goes with the default too).
    let (o, report) = run_report(
        &[&inputs],
        &root.join("cuda"),
        &[
            "--backend",
            "cuda",
            "--gpu-decode",
            "all",
            "--gpu-decode-start",
            "wait",
        ],
    );
    assert_exit(&o, 0);
    assert_same_outputs(&outputs(&root.join("cuda")), &expected, "200-slice series");
    let (decoded, fallback) = gpu_decode_counts(&report);
    assert_eq!(
        (decoded, fallback),
        (400, 0),
        "every slice decoded on the GPU"
    );
    let stage = report["statistics"]["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "gpu decode")
        .cloned()
        .unwrap_or_default();
    eprintln!(
        "200 JPEG 2000 + 200 JPEG lossless slices identical to the CPU backend; gpu decode \
         stage: {} slices, p50 {} ms",
        stage["count"], stage["p50_ms"]
    );
    std::fs::remove_dir_all(&root).unwrap();
}

/// With the default `gpu.decode_start = "cpu"` (and the input threshold off), JPEG lossless
/// frames bound for nvJPEG are decoded on the CPU until the render workers have started nvJPEG:
/// 400 slices render to the CPU backend's output, none goes through the CPU fallback, the
/// frames the GPU did not decode are exactly those the closing line says the CPU decoded while
/// nvJPEG started, and when the GPU took over it decoded some. (400 small slices may all be
/// decoded before the start ends; the H200 benchmarks show the takeover on 3000 and more.)
#[test]
fn gpu_decode_start_on_the_cpu_renders_what_arrives_before_nvjpeg_is_ready() {
    let test = "gpu_decode_start_on_the_cpu_renders_what_arrives_before_nvjpeg_is_ready";
    if !codecs_or_skip(test) {
        return;
    }
    let here = repo_path("tests/fixtures/gpu_decode/series_jls");
    let root = tempdir("gpu-decode-start");
    let inputs = root.join("in");
    replicate(&here, &inputs, 40);
    let expected = cpu_outputs(&inputs, &root.join("cpu"));
    assert_eq!(expected.len(), 400);
    let (o, report) = run_report_env(
        &[&inputs],
        &root.join("cuda"),
        &["-v", "--backend", "cuda", "--gpu-decode", "all"],
        &[("DICOMFLOW_NVJPEG_START_MIN_MIB", "0")],
    );
    assert_exit(&o, 0);
    assert_same_outputs(
        &outputs(&root.join("cuda")),
        &expected,
        "decode start on the CPU",
    );
    let (decoded, fallback) = gpu_decode_counts(&report);
    assert_eq!(fallback, 0);
    let err = stderr(&o);
    let meanwhile = err
        .lines()
        .find_map(|l| {
            let rest = l.split("GPU decode start: ").nth(1)?;
            rest.split_whitespace().next()?.parse::<u64>().ok()
        })
        .unwrap_or(0);
    assert_eq!(
        decoded + meanwhile,
        400,
        "GPU decoded {decoded}, CPU meanwhile {meanwhile}: {err}"
    );
    assert!(!err.contains("nvJPEG not started"), "{err}");
    if err.contains("the GPU took over") {
        assert!(decoded > 0, "{err}");
    }
    eprintln!("{decoded} slices decoded on the GPU, {meanwhile} on the CPU while nvJPEG started");
    std::fs::remove_dir_all(&root).unwrap();
}

/// JPEG lossless frames go to nvJPEG several per call once a worker has decoded one (one
/// call costs about as much for 32 frames as for one): 200 slices on one stream, with the
/// writers compressing and with nvCOMP, decode in fewer calls than frames (the backend's
/// closing line says how many) and render to the CPU backend's pixels.
#[test]
fn gpu_decode_jpeg_lossless_in_batches_matches_the_cpu_backend() {
    let test = "gpu_decode_jpeg_lossless_in_batches_matches_the_cpu_backend";
    if !codecs_or_skip(test) {
        return;
    }
    let here = repo_path("tests/fixtures/gpu_decode/series_jls");
    let root = tempdir("gpu-decode-batches");
    let inputs = root.join("in");
    replicate(&here, &inputs, 20);
    let expected = cpu_outputs(&inputs, &root.join("cpu"));
    assert_eq!(expected.len(), 200);
    let png_on_gpu = dicomflow::backend::cuda::libs::open(&["libnvcomp.so.6"], None).is_ok();
    let encoders: &[&str] = if png_on_gpu {
        &["cpu", "gpu"]
    } else {
        &["cpu"]
    };
    for encoder in encoders {
        let out = root.join(format!("cuda-{encoder}"));
        let (o, report) = run_report(
            &[&inputs],
            &out,
            &[
                "-v",
                "--backend",
                "cuda",
                "--gpu-decode",
                "all",
                "--gpu-decode-start",
                "wait",
                "--streams",
                "1",
                "--gpu-encode",
                encoder,
            ],
        );
        assert_exit(&o, 0);
        let (line, frames, calls) = batched_calls(&stderr(&o), "GPU decode: ", encoder);
        assert!(calls < frames && frames >= 100, "{encoder}: {line}");
        assert_eq!(gpu_decode_counts(&report), (200, 0), "{encoder}: {line}");
        // Pixels (GPU PNG files differ from the CPU's in their bytes, not their pixels).
        assert_same_outputs(&outputs(&out), &expected, encoder);
        eprintln!("{encoder} encoder: {line}");
    }
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn gpu_decode_damaged_frames_are_reported_alone_and_the_run_goes_on() {
    let test = "gpu_decode_damaged_frames_are_reported_alone_and_the_run_goes_on";
    if !codecs_or_skip(test) {
        return;
    }
    let here = repo_path("tests/fixtures");
    let root = tempdir("gpu-decode-damaged");
    let inputs = root.join("in");
    std::fs::create_dir_all(&inputs).unwrap();
    for e in std::fs::read_dir(here.join("gpu_decode/damaged"))
        .unwrap()
        .flatten()
    {
        std::fs::copy(e.path(), inputs.join(e.file_name())).unwrap();
    }
    for good in [
        "conformance/j2k_gray.dcm",
        "conformance/jpeg_lossless_sv1.dcm",
    ] {
        std::fs::copy(here.join(good), inputs.join(good.replace('/', "_"))).unwrap();
    }
    let damaged = std::fs::read_dir(here.join("gpu_decode/damaged"))
        .unwrap()
        .count();
    // "all": the damaged baseline frames go to nvJPEG too.
    let (o, report) = run_report(
        &[&inputs],
        &root.join("cuda"),
        &[
            "--backend",
            "cuda",
            "--gpu-decode",
            "all",
            "--gpu-decode-start",
            "wait",
        ],
    );
    let stderr = stderr(&o);
    assert!(
        matches!(o.status.code(), Some(0) | Some(1)),
        "exit {:?}: {stderr}",
        o.status.code()
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    let written = outputs(&root.join("cuda"));
    let names: Vec<String> = written
        .iter()
        .map(|(p, _)| p.display().to_string())
        .collect();
    for good in [
        "conformance_j2k_gray.png",
        "conformance_jpeg_lossless_sv1.png",
    ] {
        assert!(names.iter().any(|n| n == good), "{good} missing: {names:?}");
    }
    let failed = report["result"]["files"]
        .as_array()
        .map(|files| {
            files
                .iter()
                .filter(|f| f["status"] != "ok")
                .map(|f| f["path"].as_str().unwrap_or_default().to_string())
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    // Each damaged file is either rendered (GPU, or the CPU decoder after the GPU codec refused
    // it) or reported as failed by itself; nothing else fails.
    assert_eq!(
        written.len() + failed.len(),
        damaged + 2,
        "{names:?} {failed:?}"
    );
    assert!(
        failed
            .iter()
            .all(|p| p.contains("damaged") || p.contains("_truncate") || p.contains("_bitflip")),
        "{failed:?}"
    );
    let (decoded, fallback) = gpu_decode_counts(&report);
    eprintln!(
        "{} damaged + 2 good files: {} rendered, {} failed alone ({failed:?}); {decoded} GPU \
         decodes, {fallback} handed to the CPU decoder",
        damaged,
        written.len(),
        failed.len()
    );
    // Truncated codestreams (no end marker) stay with the CPU decoder, which reports them.
    for kind in ["j2k_truncate", "jls_truncate", "base_truncate"] {
        assert!(
            failed.iter().any(|p| p.contains(kind)),
            "{kind} not reported: {failed:?}"
        );
    }
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn gpu_bench_decode_finds_no_difference_on_lossless_frames() {
    let test = "gpu_bench_decode_finds_no_difference_on_lossless_frames";
    if !codecs_or_skip(test) {
        return;
    }
    let here = repo_path("tests/fixtures");
    let out = Command::new(bin())
        .args(["bench", "decode", "--iters", "3"])
        .arg(here.join("conformance"))
        .arg(here.join("gpu_decode"))
        .output()
        .unwrap();
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    eprintln!("{text}");
    assert!(
        text.contains("lossless frames with differences: 0"),
        "{text}"
    );
    assert!(text.contains("nvJPEG2000"), "{text}");
}

/// Whether the GPU encoder for `format` can load here (else the test says why it skips).
fn gpu_encoder_or_skip(test: &str, library: &str) -> bool {
    match dicomflow::backend::cuda::libs::open(&[library], None) {
        Ok(_) => true,
        Err(why) => {
            let _ = writeln!(std::io::stderr(), "skipping {test}: {why}");
            false
        }
    }
}

/// Decodes a PNG strictly with the `png` crate (CRC and Adler-32 checked) and with `image`;
/// both must agree.
fn decode_png_both(bytes: &[u8], what: &str) -> Vec<u8> {
    let mut dec = png::Decoder::new(std::io::Cursor::new(bytes))
        .read_info()
        .unwrap_or_else(|e| panic!("{what}: png crate: {e}"));
    let mut px = vec![0; dec.output_buffer_size().unwrap()];
    dec.next_frame(&mut px)
        .unwrap_or_else(|e| panic!("{what}: png crate: {e}"));
    let img = image::load_from_memory(bytes)
        .unwrap_or_else(|e| panic!("{what}: image crate: {e}"))
        .into_bytes();
    assert_eq!(img, px, "{what}: png and image decode differently");
    px
}

/// Every plan and transfer strategy with the GPU encoders: a compressed PNG decodes to the
/// CPU reference's pixels (a frame the GPU cannot compress, such as noise that does not
/// shrink, comes back as filtered rows); a JPEG decodes to the frame's size.
#[test]
fn gpu_encoders_compress_every_plan_to_the_cpu_pixels() {
    let test = "gpu_encoders_compress_every_plan_to_the_cpu_pixels";
    if gpu_or_skip(test).is_none() || !gpu_encoder_or_skip(test, "libnvcomp.so.6") {
        return;
    }
    let plans = plans();
    let mut cpu = CpuRenderer::default();
    for (transfer, format, compression) in [
        (Transfer::ZeroCopy, OutputFormat::Png, PngCompression::Fast),
        (Transfer::Pinned, OutputFormat::Png, PngCompression::Fast),
        (Transfer::Pageable, OutputFormat::Png, PngCompression::Fast),
        (Transfer::ZeroCopy, OutputFormat::Png, PngCompression::Best),
        (Transfer::ZeroCopy, OutputFormat::Jpeg, PngCompression::Fast),
        (Transfer::Pageable, OutputFormat::Jpeg, PngCompression::Fast),
    ] {
        let gpu = GpuOptions {
            transfer,
            gpus: GpuSelection::List(vec![0]),
            encode: GpuEncodeChoice::Gpu,
            ..GpuOptions::default()
        };
        let output = OutputOptions {
            format,
            png_compression: compression,
            ..OutputOptions::default()
        };
        let backend = CudaBackend::new(&gpu, &output_wish(&output), "test")
            .expect("CUDA backend with its GPU encoder");
        assert!(
            backend.info().encoder.starts_with("gpu: "),
            "{:?}",
            backend.info()
        );
        let mut worker = backend.worker(0).unwrap();
        let pool = SlotPool::new(2, 0, 0, backend.allocator()).unwrap();
        let (mut encoded, mut fallback, mut cpu_only) = (0, 0, 0);
        for (i, plan) in plans.iter().enumerate() {
            let what = format!("{transfer:?}/{format:?}/{compression:?} plan {i}");
            let input = noise(i as u64 + 1, plan.input_bytes());
            let mut expected = vec![0u8; plan.output_bytes()];
            cpu.render_bytes(plan, &input, &mut expected).unwrap();
            let mut slot = pool.take().unwrap();
            slot.reserve(plan.input_bytes(), plan.output_capacity())
                .unwrap();
            slot.input
                .bytes_mut(plan.input_bytes())
                .copy_from_slice(&input);
            let outcome = worker.render(plan, &mut slot).unwrap();
            let (w, h, ch) = (plan.cols, plan.rows, plan.channels());
            match outcome.encoded {
                Some(Encoded::PngZlib { offset, len }) => {
                    encoded += 1;
                    let mut file = Vec::new();
                    png_from_zlib(
                        &mut file,
                        w,
                        h,
                        ch,
                        &slot.output.bytes(offset + len)[offset..],
                    )
                    .unwrap();
                    assert_eq!(decode_png_both(&file, &what), expected, "{what}");
                    assert!(!outcome.timings.encode.is_zero(), "{what}: encode time");
                }
                Some(Encoded::Jpeg { len }) => {
                    encoded += 1;
                    let img = image::load_from_memory(slot.output.bytes(len))
                        .unwrap_or_else(|e| panic!("{what}: {e}"));
                    assert_eq!((img.width(), img.height()), (w, h), "{what}");
                }
                None if outcome.png_rows => {
                    fallback += 1;
                    let mut rows = Vec::new();
                    filter_rows(
                        PngFilter::Adaptive,
                        &expected,
                        w as usize * ch,
                        ch,
                        &mut rows,
                    );
                    assert_eq!(slot.output.bytes(rows.len()), &rows[..], "{what}: rows");
                }
                None => {
                    // Deep grayscale (the CPU path inside the worker), or a JPEG larger
                    // than the slot: pixels.
                    cpu_only += 1;
                    assert_eq!(slot.output.bytes(expected.len()), &expected[..], "{what}");
                }
            }
            pool.give_back(slot);
        }
        eprintln!(
            "{transfer:?}/{format:?}/{compression:?}: {encoded} frames encoded on the GPU, \
             {fallback} fell back to rows, {cpu_only} pixels ({} plans)",
            plans.len()
        );
        assert!(
            encoded > plans.len() / 2,
            "too few frames encoded on the GPU"
        );
    }
}

/// PSNR of `b` against `a`, dB.
fn psnr(a: &[u8], b: &[u8]) -> f64 {
    assert_eq!(a.len(), b.len());
    let mse = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| (f64::from(x) - f64::from(y)).powi(2))
        .sum::<f64>()
        / a.len() as f64;
    if mse == 0.0 {
        f64::INFINITY
    } else {
        10.0 * (255.0f64 * 255.0 / mse).log10()
    }
}

/// Files under `dir` with extension `ext`, relative path → bytes.
fn files(dir: &Path, ext: &str) -> Vec<(PathBuf, Vec<u8>)> {
    common::files_under(dir)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .map(|p| {
            let bytes = std::fs::read(dir.join(&p)).unwrap();
            (p, bytes)
        })
        .collect()
}

/// The acceptance run: every conformance fixture and the 200-slice sample series, CUDA
/// backend with the GPU encoders against the CPU backend. PNG (`fast`, the fdeflate kernels):
/// files identical byte for byte, every file decoded strictly by the png crate and by image
/// (and Pillow and pngcheck where installed); the report
/// says the GPU encoded them. JPEG at the same quality: PSNR against the CPU's at least 40 dB
/// per file, total size within 15 %. With DICOMFLOW_GPU_SAMPLES set, a few GPU files are
/// copied there (for pngcheck on another machine).
#[test]
fn gpu_encoded_fixtures_and_series_match_the_cpu_backend() {
    let test = "gpu_encoded_fixtures_and_series_match_the_cpu_backend";
    if gpu_or_skip(test).is_none() || !gpu_encoder_or_skip(test, "libnvjpeg.so.13") {
        return;
    }
    let root = tempdir("gpu-encode");
    let samples = std::env::var_os("DICOMFLOW_GPU_SAMPLES").map(PathBuf::from);
    for (name, input) in [
        ("fixtures", repo_path("tests/fixtures/conformance")),
        ("series", repo_path("assets/sample")),
    ] {
        let i = input.to_str().unwrap();
        for (format, ext) in [("png", "png"), ("jpeg", "jpg")] {
            let cpu = root.join(format!("{name}-{format}-cpu"));
            dicomflow_ok(&[
                "run",
                i,
                "-o",
                cpu.to_str().unwrap(),
                "-q",
                "--no-tui",
                "--backend",
                "cpu",
                "--format",
                format,
            ]);
            let expected = files(&cpu, ext);
            assert!(!expected.is_empty(), "{name}: nothing rendered");
            let transfers: &[&str] = if name == "fixtures" && format == "png" {
                &["zero-copy", "pinned", "pageable"]
            } else {
                &["auto"]
            };
            for transfer in transfers {
                let gpu = root.join(format!("{name}-{format}-gpu-{transfer}"));
                let report = root.join(format!("{name}-{format}-{transfer}.json"));
                dicomflow_ok(&[
                    "run",
                    i,
                    "-o",
                    gpu.to_str().unwrap(),
                    "-q",
                    "--no-tui",
                    "--backend",
                    "cuda",
                    "--gpu-encode",
                    "gpu",
                    "--transfer",
                    transfer,
                    "--format",
                    format,
                    "--report",
                    report.to_str().unwrap(),
                ]);
                let r: serde_json::Value =
                    serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
                let encoder = r["result"]["backend"]["encoder"]
                    .as_str()
                    .unwrap()
                    .to_string();
                assert!(encoder.starts_with("gpu: "), "{name} {format}: {encoder}");
                let gpu_frames = r["statistics"]["gpu_encoded_frames"].as_u64().unwrap();
                let got = files(&gpu, ext);
                assert_eq!(
                    got.len(),
                    expected.len(),
                    "{name} {format} {transfer}: file count"
                );
                let (mut worst, mut size_cpu, mut size_gpu) = (f64::INFINITY, 0usize, 0usize);
                for ((p, g), (_, c)) in got.iter().zip(&expected) {
                    let what = format!("{name} {format} {transfer} {}", p.display());
                    size_cpu += c.len();
                    size_gpu += g.len();
                    if format == "png" {
                        assert_eq!(
                            decode_png_both(g, &what),
                            decode_png_both(c, &what),
                            "{what}"
                        );
                        assert!(g == c, "{what}: not the CPU's bytes");
                    } else {
                        let gi =
                            image::load_from_memory(g).unwrap_or_else(|e| panic!("{what}: {e}"));
                        let ci = image::load_from_memory(c).unwrap();
                        assert_eq!(
                            (gi.width(), gi.height()),
                            (ci.width(), ci.height()),
                            "{what}"
                        );
                        let (gb, cb) = (gi.into_bytes(), ci.into_bytes());
                        worst = worst.min(psnr(&cb, &gb));
                    }
                }
                let ratio = size_gpu as f64 / size_cpu as f64;
                eprintln!(
                    "{name} {format} {transfer}: {} files, {gpu_frames} frames encoded on the GPU \
                     ({encoder}); size GPU/CPU {ratio:.3}{}",
                    got.len(),
                    if format == "jpeg" {
                        format!("; worst PSNR {worst:.1} dB")
                    } else {
                        String::new()
                    }
                );
                assert!(
                    gpu_frames > 0,
                    "{name} {format}: no frame encoded on the GPU"
                );
                if format == "png" {
                    assert!(encoder.contains("fdeflate"), "{name}: {encoder}");
                }
                if format == "jpeg" {
                    assert!(worst >= 40.0, "{name}: worst PSNR {worst:.1} dB");
                    assert!(
                        (0.85..=1.15).contains(&ratio),
                        "{name}: size ratio {ratio:.3}"
                    );
                }
                if let Some(dir) = samples.as_ref().filter(|_| format == "png") {
                    std::fs::create_dir_all(dir).unwrap();
                    for (p, g) in got.iter().take(2) {
                        let flat = p.to_string_lossy().replace('/', "_");
                        std::fs::write(dir.join(format!("{name}-{transfer}-{flat}")), g).unwrap();
                    }
                }
                if format == "png" && *transfer == transfers[0] {
                    png_tools_check(&gpu, &got);
                }
            }
        }
    }
    std::fs::remove_dir_all(&root).unwrap();
}

/// GPU PNG in batches: one render worker that takes up to 16 waiting frames per compression
/// call compresses the 200-slice series in fewer calls than frames (the backend's closing line
/// says how many), with the slots mapped (zero-copy) and on the heap (pageable: the length word
/// is read first). `fast` (the fdeflate kernels): every file is the CPU backend's, byte for
/// byte. `balanced` (nvCOMP, where installed): every file decodes to the CPU backend's pixels.
#[test]
fn gpu_png_batches_compress_several_frames_per_call_to_the_cpu_pixels() {
    let test = "gpu_png_batches_compress_several_frames_per_call_to_the_cpu_pixels";
    if gpu_or_skip(test).is_none() {
        return;
    }
    let root = tempdir("gpu-png-batches");
    let input = repo_path("assets/sample");
    let i = input.to_str().unwrap();
    let cpu = root.join("cpu");
    dicomflow_ok(&[
        "run",
        i,
        "-o",
        cpu.to_str().unwrap(),
        "-q",
        "--no-tui",
        "--backend",
        "cpu",
    ]);
    let expected = files(&cpu, "png");
    assert_eq!(expected.len(), 200);
    let mut levels = vec!["fast"];
    if gpu_encoder_or_skip(&format!("{test} (balanced)"), "libnvcomp.so.6") {
        levels.push("balanced");
    }
    for level in levels {
        for transfer in ["zero-copy", "pageable"] {
            let gpu = root.join(format!("{level}-{transfer}"));
            let out = dicomflow_ok(&[
                "-v",
                "run",
                i,
                "-o",
                gpu.to_str().unwrap(),
                "--no-tui",
                "--backend",
                "cuda",
                "--gpu-encode",
                "gpu",
                "--png-compression",
                level,
                "--streams",
                "1",
                "--encode-batch",
                "16",
                "--transfer",
                transfer,
            ]);
            let run = format!("{level} {transfer}");
            let (line, frames, calls) = batched_calls(&stderr(&out), "GPU PNG: ", &run);
            assert_eq!(frames, 200, "{line}");
            assert!(calls < frames, "{run}: no batch formed: {line}");
            eprintln!("{run}: {line}");
            let got = files(&gpu, "png");
            assert_eq!(got.len(), expected.len(), "{run}: file count");
            png_tools_check(&gpu, &got);
            for ((p, g), (_, c)) in got.iter().zip(&expected) {
                let what = format!("{run} {}", p.display());
                assert_eq!(
                    decode_png_both(g, &what),
                    decode_png_both(c, &what),
                    "{what}"
                );
                if level == "fast" {
                    assert!(g == c, "{what}: not the CPU's bytes");
                }
            }
        }
    }
    std::fs::remove_dir_all(&root).unwrap();
}

/// `gpu.encode = auto`: `fast` PNG (the default) goes to the fdeflate kernels at every frame
/// size, byte-identical to the CPU backend's; `balanced` PNG goes to nvCOMP for 2000² frames
/// (where nvCOMP in batches beat the writers on the H200; pixels identical) and stays with the
/// CPU encoders for 512² frames, saying why.
#[test]
fn gpu_auto_encodes_fast_png_at_every_size_and_balanced_png_for_large_frames_only() {
    let test = "gpu_auto_encodes_fast_png_at_every_size_and_balanced_png_for_large_frames_only";
    if gpu_or_skip(test).is_none() {
        return;
    }
    let nvcomp = gpu_encoder_or_skip(&format!("{test} (balanced)"), "libnvcomp.so.6");
    let root = tempdir("gpu-auto-png");
    let large = root.join("large");
    common::synth(&large, &["--size", "2000", "--slices", "6"]);
    for level in ["fast", "balanced"] {
        if level == "balanced" && !nvcomp {
            continue;
        }
        for (input, large_frames) in [(large.clone(), true), (repo_path("assets/sample"), false)] {
            let name = format!("{level} {}", if large_frames { "large" } else { "small" });
            let tag = name.replace(' ', "-");
            let report = root.join(format!("{tag}.json"));
            let out = root.join(format!("{tag}-out"));
            let cpu = root.join(format!("{tag}-cpu"));
            for (backend, dir) in [("cuda", &out), ("cpu", &cpu)] {
                let mut args = vec![
                    "run",
                    input.to_str().unwrap(),
                    "-o",
                    dir.to_str().unwrap(),
                    "-q",
                    "--no-tui",
                    "--backend",
                    backend,
                    "--png-compression",
                    level,
                ];
                if backend == "cuda" {
                    args.extend(["--report", report.to_str().unwrap()]);
                }
                dicomflow_ok(&args);
            }
            let r: serde_json::Value =
                serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
            let backend = &r["result"]["backend"];
            let encoder = backend["encoder"].as_str().unwrap();
            let (got, expected) = (files(&out, "png"), files(&cpu, "png"));
            assert_eq!(got.len(), expected.len(), "{name}");
            match (level, large_frames) {
                ("fast", _) => {
                    assert!(encoder.starts_with("gpu: fdeflate"), "{name}: {backend}");
                    for ((p, g), (_, c)) in got.iter().zip(&expected) {
                        assert!(g == c, "{name} {}: not the CPU's bytes", p.display());
                    }
                }
                (_, true) => {
                    assert!(encoder.starts_with("gpu: nvCOMP"), "{name}: {backend}");
                    for ((p, g), (_, c)) in got.iter().zip(&expected) {
                        let what = format!("{name} {}", p.display());
                        assert_eq!(
                            decode_png_both(g, &what),
                            decode_png_both(c, &what),
                            "{what}"
                        );
                    }
                }
                (_, false) => {
                    assert_eq!(encoder, "cpu", "{name}: {backend}");
                    let why = backend["encoder_reason"].as_str().unwrap_or_default();
                    assert!(why.contains("2000 x 2000"), "{name}: {backend}");
                }
            }
        }
    }
    std::fs::remove_dir_all(&root).unwrap();
}

/// The backend's closing line about batched library calls ("WHAT: F frames in C … calls (X per
/// call)", `what` = "GPU PNG: " or "GPU decode: ") in `err`, with F and C.
fn batched_calls(err: &str, what: &str, run: &str) -> (String, u64, u64) {
    let line = err
        .lines()
        .find(|l| l.contains(what))
        .unwrap_or_else(|| panic!("{run}: no `{what}` line:\n{err}"));
    let after = &line[line.find(what).unwrap() + what.len()..];
    let words: Vec<&str> = after.split_whitespace().collect();
    let frames: u64 = words[0].parse().unwrap();
    let calls: u64 = words[3].parse().unwrap();
    (line.to_string(), frames, calls)
}

/// Opens every file with Pillow and runs pngcheck on them, where installed (says so otherwise).
fn png_tools_check(dir: &Path, got: &[(PathBuf, Vec<u8>)]) {
    // Warnings (a chunk Pillow finds odd) fail the check like errors.
    let script = "import sys, warnings\nwarnings.simplefilter('error')\nfrom PIL import Image\nfor p in sys.argv[1:]:\n    im = Image.open(p); im.load()\nprint(len(sys.argv) - 1)";
    let paths: Vec<PathBuf> = got.iter().map(|(p, _)| dir.join(p)).collect();
    pngcheck(&paths);
    match Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(&paths)
        .output()
    {
        Ok(out) if out.status.success() => {
            eprintln!("Pillow opened {} GPU PNGs", stdout(&out).trim())
        }
        Ok(out) => {
            let err = stderr(&out);
            assert!(err.contains("No module named"), "Pillow failed: {err}");
            eprintln!("Pillow not installed here: not checked");
        }
        Err(e) => eprintln!("python3 not available ({e}): Pillow not checked"),
    }
}

/// libpng's `pngcheck` (Debian's package; carried to the GPU host) on every file, quiet mode:
/// it prints only files with errors or warnings, so any output fails.
fn pngcheck(paths: &[PathBuf]) {
    match Command::new("pngcheck").arg("-q").args(paths).output() {
        Ok(out) => {
            let said = format!("{}{}", stdout(&out), stderr(&out));
            assert!(
                out.status.success() && said.trim().is_empty(),
                "pngcheck: {said}"
            );
            eprintln!(
                "pngcheck: {} GPU PNGs without errors or warnings",
                paths.len()
            );
        }
        Err(e) => eprintln!("pngcheck not available ({e}): not checked"),
    }
}

/// `bench gpu-encode` prints the PNG table (with identical pixels) and the JPEG lines; without
/// a GPU it fails with a clear error and exit status 2.
#[test]
fn gpu_bench_gpu_encode_prints_png_and_jpeg_rows() {
    let args = [
        "bench",
        "gpu-encode",
        "--sizes",
        "256",
        "--slices",
        "2",
        "--rounds",
        "10",
        "--streams",
        "2",
        "--algorithms",
        "-1,1",
        "--batches",
        "1,4",
    ];
    let test = "gpu_bench_gpu_encode_prints_png_and_jpeg_rows";
    if gpu_or_skip(test).is_none() {
        let out = dicomflow(&args);
        assert_exit(&out, 2);
        let err = stderr(&out);
        assert!(err.contains("libcuda") || err.contains("device"), "{err}");
        return;
    }
    let out = dicomflow_ok(&args);
    let table = stdout(&out);
    let nvcomp = gpu_encoder_or_skip(&format!("{test} (nvCOMP rows)"), "libnvcomp.so.6");
    for alg in ["-1", "1"].iter().filter(|a| **a == "-1" || nvcomp) {
        let row = |batch: &str, same: &str| {
            table.lines().any(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                w.len() > 3
                    && w[0] == "256"
                    && w[1] == *alg
                    && w[2] == batch
                    && w.last() == Some(&same)
            })
        };
        assert!(row("1", "2/2"), "{alg}: {table}");
        // Four slices in one call, each decoding to its own pixels.
        assert!(row("4", "4/4"), "{alg}: {table}");
    }
    // The fdeflate kernels write the CPU's fast PNG, byte for byte.
    assert!(
        table.contains("256² -1: 2/2 files byte-identical to the CPU's fast PNG"),
        "{table}"
    );
    assert!(table.contains("one Deflate stream"), "{table}");
    assert!(table.contains("256² gray q90"), "{table}");
}

/// The loaders' upload (`gpu.upload = "auto"`): large native frames go from the file straight
/// into GPU memory through the pull kernel (backend/cuda/upload.rs). Every output must be the
/// CPU backend's bytes, for signed and unsigned values, one multi-frame file, a window the GPU
/// computes from the uploaded values (histogram), window channels, overlay-free TIFF pixels,
/// PNG compressed by the GPU or by the writers, and every transfer strategy; the report counts
/// the uploaded frames, and `--gpu-upload off` uploads none.
#[test]
fn gpu_loaders_upload_large_native_frames_to_the_cpu_bytes() {
    let test = "gpu_loaders_upload_large_native_frames_to_the_cpu_bytes";
    if gpu_or_skip(test).is_none() {
        return;
    }
    let root = tempdir("gpu-upload");
    let series = [
        ("ct2000", vec!["--size", "2000", "--slices", "5"], 5u64),
        (
            "signed1448",
            vec!["--size", "1448", "--slices", "3", "--signed"],
            3,
        ),
        (
            "multi",
            vec!["--size", "1448", "--slices", "3", "--multiframe"],
            3,
        ),
    ];
    let runs: [&[&str]; 7] = [
        &[],
        &["--transfer", "pinned"],
        &["--transfer", "zero-copy", "--gpu-encode", "cpu"],
        &["--window", "histogram:1"],
        &["--window", "40,400", "--window", "-600,1500"],
        &["--format", "tiff"],
        &["--gpu-upload", "off"],
    ];
    for (name, synth_args, frames) in &series {
        let input = root.join(name);
        common::synth(&input, synth_args);
        for (i, extra) in runs.iter().enumerate() {
            let what = format!("{name} {extra:?}");
            let cpu_dir = root.join(format!("{name}-{i}-cpu"));
            let gpu_dir = root.join(format!("{name}-{i}-gpu"));
            // The CPU backend takes neither --transfer nor --gpu-* values: drop them with theirs.
            let cpu_args = strip_gpu_options(extra, &["--backend", "cpu"]);
            let (o, _) = run_report(&[&input], &cpu_dir, &cpu_args);
            assert_exit(&o, 0);
            let mut gpu_args: Vec<&str> = vec!["--backend", "cuda"];
            gpu_args.extend(extra.iter().copied());
            let (o, report) = run_report(&[&input], &gpu_dir, &gpu_args);
            assert_exit(&o, 0);
            assert_same_outputs(&outputs(&gpu_dir), &outputs(&cpu_dir), &what);
            let uploaded = report["backend"]["gpu"]["frames_uploaded"]
                .as_u64()
                .unwrap_or(0);
            let expected = if extra.contains(&"off") { 0 } else { *frames };
            assert_eq!(
                uploaded,
                expected,
                "{what}: frames uploaded; {}",
                stderr(&o)
            );
        }
    }
    std::fs::remove_dir_all(&root).unwrap();
}

/// `extra` without the options the CPU backend has no use for (`--transfer X`, `--gpu-* X`),
/// after `head`.
fn strip_gpu_options<'a>(extra: &[&'a str], head: &[&'a str]) -> Vec<&'a str> {
    let mut out = head.to_vec();
    let mut skip = false;
    for a in extra {
        if skip {
            skip = false;
        } else if a.starts_with("--transfer") || a.starts_with("--gpu-") {
            skip = true;
        } else {
            out.push(a);
        }
    }
    out
}
