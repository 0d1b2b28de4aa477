//! `dicomflow inspect FILE`: what will be rendered and how — dimensions, frames, transfer
//! syntax, bits, photometric interpretation, series, instance, spacing, rescale and LUTs, every
//! window with its index, overlays, the window the current settings choose, and who would
//! compress the output (GPU or CPU, why). A folder: [`super::inspect_folder`].

use std::fmt::Write;
use std::path::Path;

use dicom_encoding::transfer_syntax::TransferSyntaxIndex;

use dicomflow::backend::cuda::decode::Codecs;
use dicomflow::backend::options::{GpuDecode, GpuEncodeChoice, GpuOptions};
use dicomflow::decode::compressed::{self, FrameCoding};
use dicomflow::decode::{probe, DecodeLimits, ImageFile};
use dicomflow::output::options::{OutputFormat, OutputOptions};
use dicomflow::paths::Escaped;
use dicomflow::render::plan::{
    plan_frame, Chain, ColorModel, GrayPlan, Modality, RenderOptions, Voi,
};
use dicomflow::render::spec::Windows;

/// Who would compress `format` output under `choice` (`gpu.encode`): the GPU encoder and where
/// its library was found, or the CPU and why. Only loads libraries (no device is opened).
pub fn encoder_line(
    format: OutputFormat,
    choice: GpuEncodeChoice,
    library_path: Option<&Path>,
) -> String {
    let output = OutputOptions {
        format,
        ..OutputOptions::default()
    };
    let wish = dicomflow::pipeline::output_wish(&output);
    if choice == GpuEncodeChoice::Cpu {
        return "CPU (gpu.encode = cpu)".into();
    }
    let want = match wish.gpu_encode {
        Ok(w) => w,
        Err(why) => return format!("CPU ({why})"),
    };
    // Under auto, balanced/best PNG (nvCOMP) goes to the GPU only for large frames.
    let when = if choice == GpuEncodeChoice::Auto
        && matches!(
            want,
            dicomflow::backend::cuda::encode::GpuEncodeWish::Png { .. }
        )
        && want.library().is_some()
    {
        let side = (dicomflow::backend::cuda::AUTO_GPU_PNG_MIN_PIXELS as f64).sqrt();
        format!("for frames of {side:.0} x {side:.0} pixels or more ")
    } else {
        String::new()
    };
    if let Err(why) = dicomflow::backend::cuda::driver::libraries() {
        return format!("CPU (no CUDA backend here: {why})");
    }
    let Some(library) = want.library() else {
        return format!(
            "GPU {when}when the CUDA backend renders (dicomflow's fdeflate kernels); CPU otherwise"
        );
    };
    match dicomflow::backend::cuda::libs::open(&[library], library_path) {
        Ok(found) => format!(
            "GPU {when}when the CUDA backend renders ({library} from {}); CPU otherwise",
            found.path.display()
        ),
        Err(why) => format!("CPU ({why})"),
    }
}

/// Describes `path` as text; `opts` is the window choice to explain, `gpu` the GPU decode
/// options (policy, where the codec libraries are).
pub fn describe(path: &Path, opts: &RenderOptions, gpu: &GpuOptions) -> Result<String, String> {
    let kind = probe(path).map_err(|e| format!("{}: {e}", Escaped(path)))?;
    let file = ImageFile::open(
        path,
        kind,
        // The run's default limit: what `run` would refuse, `inspect` refuses too (and a
        // deflated data set is inflated whole here as well).
        DecodeLimits {
            max_frame_bytes: dicomflow::pipeline::options::PipelineOptions::default()
                .max_frame_bytes,
            damaged: Default::default(),
        },
    )
    .map_err(|e| format!("{}: {e}", Escaped(path)))?;
    let i = &file.info;
    let ts_name = dicom_transfer_syntax_registry::TransferSyntaxRegistry
        .get(&i.transfer_syntax)
        .map(|t| t.name().to_string())
        .unwrap_or_else(|| "unknown".into());
    let mut s = String::new();
    let _ = writeln!(s, "file               {}", Escaped(path));
    let _ = writeln!(
        s,
        "transfer syntax    {} ({}){}",
        ts_name,
        i.transfer_syntax,
        if file.bare_dataset {
            ", no file meta"
        } else {
            ""
        }
    );
    let _ = writeln!(
        s,
        "pixel read         {}",
        if file.is_direct() {
            "direct into slot (uncompressed)"
        } else {
            "decoded (codec or full parse)"
        }
    );
    if let Some(line) = gpu_decode_line(&file, gpu) {
        let _ = writeln!(s, "gpu decode         {line}");
    }
    let _ = writeln!(
        s,
        "dimensions         {} x {} (cols x rows), {} frame(s)",
        i.cols, i.rows, i.frames
    );
    let _ = writeln!(
        s,
        "samples            {} per pixel{}",
        i.samples_per_pixel,
        match (i.samples_per_pixel, i.planar_configuration) {
            (3, 1) => ", planar",
            (3, _) => ", interleaved",
            _ => "",
        }
    );
    let _ = writeln!(
        s,
        "bits               allocated {}, stored {}, high bit {}, {}",
        i.bits_allocated,
        i.bits_stored,
        i.high_bit,
        if i.signed { "signed" } else { "unsigned" }
    );
    let _ = writeln!(s, "photometric        {}", i.photometric.as_str());
    if let Some(m) = &i.modality {
        let _ = writeln!(s, "modality           {m}");
    }
    let value = |k: &str| i.naming.get(k).map(String::as_str).unwrap_or("-");
    let _ = writeln!(
        s,
        "series             {} (number {}{})",
        value("SeriesInstanceUID"),
        value("SeriesNumber"),
        i.naming
            .get("SeriesDescription")
            .map(|d| format!(", \"{d}\""))
            .unwrap_or_default(),
    );
    let _ = writeln!(
        s,
        "instance           {} (SOP {})",
        value("InstanceNumber"),
        value("SOPInstanceUID"),
    );
    // Row spacing, then column spacing, as the standard orders them.
    match i.naming.get("PixelSpacing") {
        Some(sp) => {
            let thickness = i
                .naming
                .get("SliceThickness")
                .map(|t| format!(", slice thickness {t} mm"))
                .unwrap_or_default();
            let _ = writeln!(
                s,
                "spacing            {} mm (row x column){thickness}",
                sp.replace('\\', " x ")
            );
        }
        None => {
            let _ = writeln!(s, "spacing            none in file");
        }
    }
    let a = &i.attrs;
    match (&i.modality_lut, a.rescale) {
        (Some(l), _) => {
            let _ = writeln!(
                s,
                "modality LUT       sequence: {} entries from {}, {} bits",
                l.data.len(),
                l.first(i.signed),
                l.bits
            );
        }
        (None, Some(r)) => {
            let _ = writeln!(
                s,
                "rescale            slope {} intercept {}",
                r.slope, r.intercept
            );
        }
        (None, None) => {
            let _ = writeln!(s, "rescale            none (identity)");
        }
    }
    if a.windows.is_empty() {
        let _ = writeln!(s, "windows            none in file");
    }
    for (n, w) in a.windows.iter().enumerate() {
        let _ = writeln!(
            s,
            "window file:{:<6} center {} width {}{}{}",
            n + 1,
            w.center,
            w.width,
            w.explanation
                .as_ref()
                .map(|e| format!(" ({e})"))
                .unwrap_or_default(),
            if w.width < 1.0 {
                " [invalid: width < 1]"
            } else {
                ""
            }
        );
    }
    if let Some(f) = &a.voi_function {
        let _ = writeln!(s, "VOI LUT function   {f}");
    }
    for (n, l) in i.voi_luts.iter().enumerate() {
        let _ = writeln!(
            s,
            "VOI LUT voi-lut:{:<2} {} entries from {}, {} bits{}",
            n + 1,
            l.data.len(),
            l.first_raw,
            l.bits,
            i.voi_lut_explanations
                .get(n)
                .filter(|e| !e.is_empty())
                .map(|e| format!(" ({e})"))
                .unwrap_or_default()
        );
    }
    if !i.per_frame.is_empty() {
        let _ = writeln!(
            s,
            "functional groups  {} per-frame item(s)",
            i.per_frame.len()
        );
    }
    if let Some(p) = &i.presentation_lut_shape {
        let _ = writeln!(s, "presentation LUT   {p}");
    }
    if i.overlays.is_empty() {
        let _ = writeln!(s, "overlays           none");
    }
    for (k, o) in i.overlays.iter().enumerate() {
        let _ = writeln!(
            s,
            "{}{}{}",
            if k == 0 {
                "overlays           "
            } else {
                "                   "
            },
            o.describe(),
            if i.photometric.is_gray() {
                ""
            } else {
                " (not drawn on colour images)"
            }
        );
    }
    for w in &i.warnings {
        let _ = writeln!(s, "warning            {w}");
    }
    let _ = writeln!(s, "requested window   {}", opts.windows_for(i));
    match plan_frame(i, 0, opts) {
        Ok(plan) => {
            let gray = |g: &GrayPlan| {
                let m = match &g.modality {
                    Modality::Identity => "identity".to_string(),
                    Modality::Rescale { slope, intercept } => {
                        format!("rescale {}", linear(*slope, *intercept))
                    }
                    Modality::Lut(_) => "modality LUT".to_string(),
                };
                let v = match &g.voi {
                    Voi::Window(w) => format!(
                        "window center {} width {} ({})",
                        w.center, w.width, w.function
                    ),
                    Voi::Lut(l) => format!("VOI LUT ({} entries)", l.data.len()),
                    Voi::Auto(a, f) => format!("{a:?} computed from each frame ({f})"),
                    Voi::None => "none (full range scaled)".to_string(),
                };
                format!(
                    "{m}; {v}{}",
                    if g.invert {
                        "; inverted (MONOCHROME1)"
                    } else {
                        ""
                    }
                )
            };
            let chosen = match &plan.chain {
                Chain::Gray(g) => gray(g),
                Chain::Channels(gs) => {
                    let parts: Vec<String> = gs
                        .iter()
                        .zip(["R", "G", "B"])
                        .map(|(g, c)| format!("{c}: {}", gray(g)))
                        .collect();
                    format!("window channels: {}", parts.join(" | "))
                }
                Chain::Color(c) => colour_line(&c.model),
            };
            let _ = writeln!(s, "chosen             {chosen}");
        }
        Err(e) => {
            let _ = writeln!(s, "chosen             cannot render: {e}");
        }
    }
    Ok(s)
}

/// `slope·x + intercept` as one would write it: `1·x - 1024`, not `1·x + -1024`.
fn linear(slope: f64, intercept: f64) -> String {
    if intercept < 0.0 {
        format!("{slope}·x - {}", -intercept)
    } else {
        format!("{slope}·x + {intercept}")
    }
}

/// The colour conversion, named as the standard names the photometric interpretation.
fn colour_line(model: &ColorModel) -> String {
    match model {
        ColorModel::Rgb => "colour RGB as stored".into(),
        ColorModel::YbrFull => "colour YBR_FULL -> RGB".into(),
        ColorModel::YbrFull422 => "colour YBR_FULL_422 -> RGB".into(),
        ColorModel::YbrPartial422 => "colour YBR_PARTIAL_422 -> RGB".into(),
        ColorModel::Palette(_) => "colour PALETTE COLOR -> RGB".into(),
    }
}

/// `dicomflow inspect`: prints what `run` would do with the file; exit 1 when it cannot be read.
/// Where frame 1 of a compressed file would be decoded by the CUDA backend under `gpu`: the
/// GPU codec and library, or the CPU and why; `None` for syntaxes without a GPU codec.
fn gpu_decode_line(file: &ImageFile, gpu: &GpuOptions) -> Option<String> {
    let coding = FrameCoding::of(&file.info)?;
    let mut code = Vec::new();
    if let Err(e) = file.read_encoded_frame(0, &mut code) {
        return Some(format!("CPU (frame 1: {e})"));
    }
    let facts = compressed::inspect(&coding, &code);
    let kind = if facts.lossless {
        "lossless codestream"
    } else {
        "lossy codestream"
    };
    let codecs = Codecs::load(gpu, 1, None, None);
    let route = codecs.route();
    let lines = codecs.describe();
    let family = lines
        .iter()
        .find(|l| l.starts_with(coding.codec.name()))
        .cloned()
        .unwrap_or_else(|| lines.join("; "));
    Some(match route.accepts(coding.codec, &facts) {
        Ok(()) => format!("GPU when the CUDA backend runs ({kind}); {family}"),
        Err(why) => format!("CPU ({kind}: {why}); {family}"),
    })
}

pub fn execute(a: &crate::app::cli::InspectArgs) -> Result<i32, dicomflow::error::FatalError> {
    use dicomflow::error::FatalError;
    let decode = match a.gpu_decode.as_str() {
        "lossless" => GpuDecode::Lossless,
        "all" => GpuDecode::All,
        "none" => GpuDecode::None,
        other => {
            return Err(FatalError::Config(format!(
                "--gpu-decode: `{other}`: use lossless, all or none"
            )))
        }
    };
    let gpu = GpuOptions {
        decode,
        library_path: a.library_path.clone(),
        ..GpuOptions::default()
    };
    let window = a
        .window
        .parse()
        .map(Windows::one)
        .map_err(|e: String| FatalError::Config(format!("--window: {e}")))?;
    let voi_function = match &a.voi_function {
        Some(v) => dicomflow::render::spec::parse_voi_override(v)
            .map_err(|e| FatalError::Config(format!("--voi-function: {e}")))?,
        None => None,
    };
    let format = match a.format.as_str() {
        "png" => OutputFormat::Png,
        "jpeg" | "jpg" => OutputFormat::Jpeg,
        "tiff" => OutputFormat::Tiff,
        "bmp" => OutputFormat::Bmp,
        other => {
            return Err(FatalError::Config(format!(
                "--format {other}: use png, jpeg, tiff or bmp"
            )))
        }
    };
    let choice = match a.gpu_encode.as_str() {
        "auto" => GpuEncodeChoice::Auto,
        "gpu" => GpuEncodeChoice::Gpu,
        "cpu" => GpuEncodeChoice::Cpu,
        other => {
            return Err(FatalError::Config(format!(
                "--gpu-encode {other}: use auto, gpu or cpu"
            )))
        }
    };
    if a.file.is_dir() {
        crate::app::print::out(&super::inspect_folder::describe(&a.file))
            .map_err(|e| FatalError::Other(format!("writing to stdout: {e}")))?;
        return Ok(0);
    }
    match describe(
        &a.file,
        &RenderOptions {
            window,
            voi_function,
            overlays: true,
            ..RenderOptions::default()
        },
        &gpu,
    ) {
        Ok(text) => {
            crate::app::print::out(&format!(
                "{text}encoder            {}\n",
                encoder_line(format, choice, a.library_path.as_deref())
            ))
            .map_err(|e| FatalError::Other(format!("writing to stdout: {e}")))?;
            Ok(0)
        }
        Err(e) => {
            crate::app::print::errln(&format!("dicomflow: {e}"));
            Ok(1)
        }
    }
}
