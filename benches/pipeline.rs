//! `cargo bench --bench pipeline`: a program, not a timed test. Times the CPU-side work per
//! slice (render chain, PNG encoding) at 512² and 2000², then the whole CPU pipeline on a
//! synthesized 200-slice 512² series, and prints a table. Ratios against peers are measured
//! with whole commands (hyperfine; scripts/bench_host.py) — see BENCHMARKS.md.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use dicomflow::backend::cpu::{CpuBackend, CpuRenderer};
use dicomflow::output::encode::{EncodeOptions, ImageEncoder};
use dicomflow::output::options::{OutputFormat, OutputOptions};
use dicomflow::pipeline::options::Job;
use dicomflow::synth::{phantom_plan, phantom_stored, write_series, SynthOptions};

/// Best of `iters` runs of `f`, in milliseconds.
fn best_ms(iters: usize, mut f: impl FnMut()) -> f64 {
    (0..iters)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e3
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    println!("{:<34} {:>10} {:>12}", "what", "size", "ms/slice");
    for size in [512u32, 2000] {
        let p = phantom_plan(size);
        let stored = phantom_stored(size);
        let mut out = vec![0u8; p.output_bytes()];
        let mut cpu = CpuRenderer::default();
        let ms = best_ms(20, || {
            cpu.render_bytes(&p, &stored, &mut out).unwrap_or_default();
        });
        println!(
            "{:<34} {:>10} {:>12.3}",
            "render chain (table, CPU)",
            format!("{size}²"),
            ms
        );
        let mut enc = ImageEncoder::new(EncodeOptions {
            format: OutputFormat::Png,
            png_compression: OutputOptions::default().png_compression,
            png_filter: OutputOptions::default().png_filter,
            jpeg_quality: 90,
        });
        let ms = best_ms(10, || {
            let _ = enc.encode(size, size, 1, &out);
        });
        println!(
            "{:<34} {:>10} {:>12.3}",
            "PNG encode (default settings)",
            format!("{size}²"),
            ms
        );
    }

    let dir = std::env::temp_dir().join(format!("dicomflow-bench-{}", std::process::id()));
    let series = dir.join("series");
    let slices = 200;
    if let Err(e) = write_series(
        &series,
        &SynthOptions {
            size: 512,
            slices,
            ..Default::default()
        },
    ) {
        eprintln!("cannot synthesize the series: {e}");
        return;
    }
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let job = Job {
            output: OutputOptions {
                dir: dir.join("out"),
                ..OutputOptions::default()
            },
            ..Job::default()
        };
        let _ = std::fs::remove_dir_all(&job.output.dir);
        let stats = dicomflow::observe::stats::Stats::new();
        let t = Instant::now();
        let result = dicomflow::pipeline::run(
            &job,
            std::slice::from_ref(&series),
            Arc::new(CpuBackend::new("bench")),
            stats,
            Arc::new(AtomicBool::new(false)),
            None,
        );
        let secs = t.elapsed().as_secs_f64();
        match result {
            Ok(r) if r.totals.frames_written == slices as usize => best = best.min(secs),
            Ok(r) => eprintln!(
                "only {} of {slices} frames written",
                r.totals.frames_written
            ),
            Err(e) => eprintln!("pipeline failed: {e}"),
        }
    }
    println!(
        "{:<34} {:>10} {:>12.3}   ({:.0} slices/s, best of 5, {} cores)",
        "whole CPU pipeline, 200 slices",
        "512²",
        best * 1e3 / slices as f64,
        slices as f64 / best,
        dicomflow::host::available_cores()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
