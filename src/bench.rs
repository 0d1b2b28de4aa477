//! Benchmarks that are programs, not timed tests: `dicomflow bench encode` (PNG settings:
//! time and size per slice, to choose the default by measurement). `bench transfer` (GPU)
//! lives with the CUDA backend.

use std::fmt::Write as _;
use std::time::Instant;

use crate::backend::cpu::CpuRenderer;
use crate::config::{OutputFormat, PngCompression, PngFilter};
use crate::output::encode::{EncodeOptions, ImageEncoder};
use crate::render::plan::{Chain, FramePlan, GrayPlan, Modality, StoredFormat, Voi, Window};
use crate::render::spec::VoiFunction;
use crate::synth::{slice_pixels, SynthOptions};

/// The plan `run` uses for a `synth` CT slice of `size`²: 12 bits stored, rescale -1024, the
/// soft-tissue window.
pub fn phantom_plan(size: u32) -> FramePlan {
    FramePlan {
        rows: size,
        cols: size,
        chain: Chain::Gray(GrayPlan {
            stored: StoredFormat {
                bits_allocated: 16,
                bits_stored: 12,
                high_bit: 11,
                signed: false,
            },
            modality: Modality::Rescale {
                slope: 1.0,
                intercept: -1024.0,
            },
            voi: Voi::Window(Window {
                center: 40.0,
                width: 400.0,
                function: VoiFunction::Linear,
            }),
            invert: false,
            pixels: size as u64 * size as u64,
        }),
        encoded: None,
    }
}

/// Stored values of one phantom slice of `size`².
pub fn phantom_stored(size: u32) -> Vec<u8> {
    slice_pixels(
        &SynthOptions {
            size,
            slices: 3,
            ..Default::default()
        },
        1,
    )
}

/// Renders one phantom slice of `size`² (what `run` would write).
pub fn phantom_slice(size: u32) -> Result<Vec<u8>, String> {
    let plan = phantom_plan(size);
    let mut out = vec![0u8; plan.output_bytes()];
    CpuRenderer::default().render_bytes(&plan, &phantom_stored(size), &mut out)?;
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
                    bytes = enc.encode(size, size, 1, &pixels)?.len();
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
