//! Benchmarks that are programs, not timed tests: `dicomflow bench encode` (PNG settings:
//! time and size per slice, to choose the default by measurement). `bench transfer` (GPU)
//! is its sibling, [`super::bench_transfer`].

use std::fmt::Write as _;
use std::time::Instant;

use dicomflow::backend::cpu::CpuRenderer;
use dicomflow::output::encode::{EncodeOptions, ImageEncoder};
use dicomflow::output::options::{OutputFormat, PngCompression, PngFilter};
use dicomflow::synth::{phantom_plan, phantom_stored};

/// Renders one phantom slice of `size`² (what `run` would write).
pub fn phantom_slice(size: u32) -> Result<Vec<u8>, String> {
    let plan = phantom_plan(size);
    let mut out = vec![0u8; plan.output_bytes()];
    CpuRenderer::default()
        .render_bytes(&plan, &phantom_stored(size), &mut out)
        .map_err(|e| e.to_string())?;
    Ok(out)
}

/// Times every PNG compression × filter pair on a rendered phantom slice of each size.
pub fn encode_table(sizes: &[u32], iters: usize) -> Result<String, String> {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<10} {:<12} {:<10} {:>10} {:>10} {:>9}",
        "slice", "compression", "filter", "ms/slice", "bytes", "% of raw"
    );
    for &size in sizes {
        let pixels = phantom_slice(size)?;
        for compression in [
            PngCompression::None,
            PngCompression::Fast,
            PngCompression::Balanced,
        ] {
            for filter in [
                PngFilter::None,
                PngFilter::Sub,
                PngFilter::Up,
                PngFilter::Paeth,
                PngFilter::Adaptive,
            ] {
                let mut enc = ImageEncoder::new(EncodeOptions {
                    format: OutputFormat::Png,
                    png_compression: compression,
                    png_filter: filter,
                    jpeg_quality: 90,
                });
                let mut best = f64::INFINITY;
                let mut bytes = 0;
                for _ in 0..iters.max(1) {
                    let t = Instant::now();
                    bytes = enc
                        .encode(size, size, 1, &pixels)
                        .map_err(|e| e.to_string())?
                        .len();
                    best = best.min(t.elapsed().as_secs_f64() * 1e3);
                }
                let _ = writeln!(
                    s,
                    "{:<10} {:<12} {:<10} {:>10.3} {:>10} {:>8.1}%",
                    format!("{size}x{size}"),
                    format!("{compression:?}").to_lowercase(),
                    format!("{filter:?}").to_lowercase(),
                    best,
                    bytes,
                    bytes as f64 * 100.0 / pixels.len() as f64
                );
            }
        }
    }
    Ok(s)
}

/// `dicomflow bench encode`: prints the table.
pub fn execute(a: &crate::app::cli::EncodeArgs) -> Result<i32, dicomflow::error::FatalError> {
    let table = encode_table(&a.sizes, a.iters).map_err(dicomflow::error::FatalError::Other)?;
    crate::app::print::out(&table)
        .map_err(|e| dicomflow::error::FatalError::Other(format!("writing to stdout: {e}")))?;
    Ok(0)
}
