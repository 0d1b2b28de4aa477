//! `dicomflow bench decode FILES...`: each compressed frame decoded by the CPU decoder of its
//! transfer syntax and by the GPU codec (whatever `gpu.decode` says: lossy frames too), with the
//! stored values compared sample by sample and the 8-bit renderings (the default window)
//! compared pixel by pixel, and the time of each (best of N; GPU time from CUDA events around
//! the codec call, CPU time around the decoder call). The first lines name the libraries and
//! their versions. This is how the lossy deviations in the README were measured, and how a
//! new library version is checked before it is trusted with lossless data.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use dicomflow::backend::cpu::CpuRenderer;
use dicomflow::backend::cuda::decode::{Codecs, Decoded, FrameDecoder};
use dicomflow::backend::cuda::driver::{self, Device, DeviceBuffer, Event, Stream};
use dicomflow::backend::options::{GpuDecode, GpuOptions};
use dicomflow::decode::compressed::{self, EncodedFrame, FrameCoding};
use dicomflow::decode::{probe, DecodeLimits, ImageFile};
use dicomflow::error::FatalError;
use dicomflow::render::plan::{plan_frame, Chain, RenderOptions};

/// What to measure.
#[derive(Debug, Clone)]
pub struct DecodeBenchOptions {
    /// Files or folders (walked recursively, in name order).
    pub inputs: Vec<PathBuf>,
    /// Timed repetitions per frame (the best is kept).
    pub iters: usize,
    /// Frames per file at most.
    pub max_frames: u32,
    /// Folder searched first for the codec libraries.
    pub library_path: Option<PathBuf>,
    pub device: usize,
    /// Row pitch alignment of lossless JPEG output (bytes; 0 = the production default).
    pub lossless_pitch_align: usize,
    /// Frames per call to time nvJPEG's batched decoders with (copies of each frame; empty:
    /// not timed).
    pub batches: Vec<usize>,
}

/// One frame's comparison.
struct Row {
    name: String,
    codec: &'static str,
    lossless: bool,
    /// `None` when the GPU decoded it; else why not.
    refused: Option<String>,
    samples: usize,
    differing: usize,
    /// (row, column) of the first differing sample.
    first: Option<(usize, usize)>,
    max_stored: i64,
    pixels_differing: usize,
    max_8bit: i32,
    cpu_ms: f64,
    gpu_ms: f64,
}

fn files(inputs: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let cancel = std::sync::atomic::AtomicBool::new(false);
    dicomflow::source::scan(inputs, None, &cancel, |item| {
        if let dicomflow::source::ScanItem::Dicom(c) = item {
            out.push(c.path);
        }
        true
    });
    out
}

/// Reads sample `i` of a decoded frame as a signed integer (16-bit samples as two's
/// complement when `signed`).
fn sample(bytes: &[u8], width: usize, signed: bool, i: usize) -> i64 {
    match width {
        1 => bytes[i] as i64,
        _ => {
            let v = u16::from_ne_bytes([bytes[2 * i], bytes[2 * i + 1]]);
            if signed {
                v as i16 as i64
            } else {
                v as i64
            }
        }
    }
}

/// Runs the comparison and returns the table.
pub fn run(opts: &DecodeBenchOptions) -> Result<String, String> {
    let gpu = GpuOptions {
        decode: GpuDecode::All,
        library_path: opts.library_path.clone(),
        ..GpuOptions::default()
    };
    let mut out = String::new();
    let mut codecs = Codecs::load(&gpu, 1, None, None);
    if opts.lossless_pitch_align > 0 {
        codecs.set_lossless_pitch_align(opts.lossless_pitch_align);
    }
    let codecs = Arc::new(codecs);
    for line in codecs.describe() {
        let _ = writeln!(out, "# {line}");
    }
    let n = driver::probe()?;
    if opts.device >= n {
        return Err(format!(
            "GPU {} requested, this machine has {n}",
            opts.device
        ));
    }
    let device: Arc<Device> = Device::open(opts.device).map_err(|e| e.to_string())?;
    let _ = writeln!(out, "# GPU {}: {}", device.ordinal, device.name);
    driver::set_release_threshold(&device, 256 << 20).map_err(|e| e.to_string())?;
    let stream = Stream::new(&device).map_err(|e| e.to_string())?;
    let ev = [
        Event::new(&device).map_err(|e| e.to_string())?,
        Event::new(&device).map_err(|e| e.to_string())?,
    ];
    let mut decoder = FrameDecoder::new(codecs.clone(), 0, stream.clone());
    // First use of each codec: handle creation, a worker's first frame, a second worker's.
    let mut startup: Vec<String> = Vec::new();
    let mut started: std::collections::HashSet<&'static str> = Default::default();
    let render = RenderOptions {
        overlays: false,
        ..RenderOptions::default()
    };
    let mut rows = Vec::new();
    let mut dev: Option<DeviceBuffer> = None;
    let (mut batch_lines, mut dev_batch) = (Vec::new(), None);
    let (mut cpu_vals, mut gpu_vals, mut code, mut scratch) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut cpu = CpuRenderer::default();
    for path in files(&opts.inputs) {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let Ok(kind) = probe(&path) else { continue };
        let limits = DecodeLimits {
            max_frame_bytes: u64::MAX,
            ..DecodeLimits::default()
        };
        let Ok(mut file) = ImageFile::open(&path, kind, limits) else {
            continue;
        };
        let Some(coding) = FrameCoding::of(&file.info).map(Arc::new) else {
            continue;
        };
        let info = file.info.clone();
        for frame in 0..info.frames.min(opts.max_frames.max(1)) {
            let label = if info.frames > 1 {
                format!("{name}#{}", frame + 1)
            } else {
                name.clone()
            };
            let bytes = coding.decoded_bytes();
            cpu_vals.resize(bytes, 0);
            let mut cpu_ms = f64::INFINITY;
            let mut cpu_err = None;
            for _ in 0..opts.iters.max(1) {
                let t = Instant::now();
                if let Err(e) = file.read_frame(frame, &mut cpu_vals, &mut scratch) {
                    cpu_err = Some(e);
                    break;
                }
                cpu_ms = cpu_ms.min(t.elapsed().as_secs_f64() * 1e3);
            }
            if let Err(e) = file.read_encoded_frame(frame, &mut code) {
                cpu_err.get_or_insert(e);
            }
            let facts = compressed::inspect(&coding, &code);
            let encoded = EncodedFrame {
                coding: coding.clone(),
                len: code.len(),
                lossless: facts.lossless,
            };
            let mut row = Row {
                name: label,
                codec: coding.codec.name(),
                lossless: facts.lossless,
                refused: facts.unsupported.clone(),
                samples: bytes / (info.bits_allocated as usize / 8),
                differing: 0,
                first: None,
                max_stored: 0,
                pixels_differing: 0,
                max_8bit: 0,
                cpu_ms,
                gpu_ms: f64::NAN,
            };
            if let Some(e) = cpu_err {
                row.refused = Some(format!("CPU decoder: {e}"));
                rows.push(row);
                continue;
            }
            if row.refused.is_some() {
                rows.push(row);
                continue;
            }
            let dst = driver::ensure_buffer(&mut dev, &stream, bytes).map_err(|e| e.to_string())?;
            if started.insert(coding.codec.name()) {
                let ms = |t: Instant| t.elapsed().as_secs_f64() * 1e3;
                let t = Instant::now();
                let handle = match coding.codec {
                    compressed::GpuCodec::Jpeg2000 => codecs
                        .j2k_handle(0, &device)
                        .map(|_| ())
                        .map_err(|e| e.to_string()),
                    compressed::GpuCodec::JpegLossless => codecs
                        .lossless_handle(0, &device)
                        .map(|_| ())
                        .map_err(|e| e.to_string()),
                    compressed::GpuCodec::JpegDct => Ok(()),
                };
                let handle_ms = ms(t);
                let t = Instant::now();
                let first = decoder
                    .decode(&encoded, &code, dst)
                    .map(|_| stream.synchronize());
                let first_ms = ms(t);
                let stream2 = Stream::new(&device).map_err(|e| e.to_string())?;
                let mut second = FrameDecoder::new(codecs.clone(), 0, stream2.clone());
                let t = Instant::now();
                let again = second
                    .decode(&encoded, &code, dst)
                    .map(|_| stream2.synchronize());
                let second_ms = ms(t);
                startup.push(format!(
                    "# startup {}: handle {handle_ms:.1} ms{}; first frame of a worker {first_ms:.1} ms{}; \
                     of a second worker {second_ms:.1} ms{}",
                    coding.codec.name(),
                    handle.err().map(|e| format!(" ({e})")).unwrap_or_default(),
                    first.err().map(|e| format!(" ({e})")).unwrap_or_default(),
                    again.err().map(|e| format!(" ({e})")).unwrap_or_default(),
                ));
                drop(second);
            }
            let mut layout = Decoded::AsPlanned;
            let mut gpu_ms = f64::INFINITY;
            for _ in 0..opts.iters.max(1) {
                ev[0].record(&stream).map_err(|e| e.to_string())?;
                match decoder.decode(&encoded, &code, dst) {
                    Ok(l) => layout = l,
                    Err(e) => {
                        row.refused = Some(e.to_string());
                        break;
                    }
                }
                ev[1].record(&stream).map_err(|e| e.to_string())?;
                stream.synchronize().map_err(|e| e.to_string())?;
                let ms = Event::elapsed_ms(&ev[0], &ev[1]).map_err(|e| e.to_string())?;
                gpu_ms = gpu_ms.min(ms as f64);
            }
            let _ = stream.synchronize();
            if row.refused.is_some() {
                rows.push(row);
                continue;
            }
            row.gpu_ms = gpu_ms;
            gpu_vals.resize(bytes, 0);
            // SAFETY: gpu_vals holds `bytes` bytes; synchronized right after.
            unsafe { driver::copy_dtoh_async(gpu_vals.as_mut_ptr(), dst, bytes, &stream) }
                .map_err(|e| e.to_string())?;
            stream.synchronize().map_err(|e| e.to_string())?;
            let mut plan = plan_frame(&info, frame, &render).map_err(|e| e.to_string())?;
            if layout == Decoded::Planar {
                // Bring the planes back to interleaved samples for the comparison.
                let plane = bytes / 3;
                let planar = gpu_vals.clone();
                for i in 0..plane {
                    for c in 0..3 {
                        gpu_vals[3 * i + c] = planar[c * plane + i];
                    }
                }
            }
            let width = info.bits_allocated as usize / 8;
            for i in 0..row.samples {
                let (a, b) = (
                    sample(&cpu_vals, width, info.signed, i),
                    sample(&gpu_vals, width, info.signed, i),
                );
                if a != b {
                    let px = i / coding.samples_per_pixel as usize;
                    row.first
                        .get_or_insert((px / info.cols as usize, px % info.cols as usize));
                    row.differing += 1;
                    row.max_stored = row.max_stored.max((a - b).abs());
                }
            }
            plan.encoded = None;
            let deep = matches!(&plan.chain, Chain::Gray(g) if g.stored.bits_allocated > 16);
            if !deep {
                let mut a = vec![0u8; plan.output_bytes()];
                let mut b = vec![0u8; plan.output_bytes()];
                cpu.render_bytes(&plan, &cpu_vals, &mut a)
                    .map_err(|e| e.to_string())?;
                cpu.render_bytes(&plan, &gpu_vals, &mut b)
                    .map_err(|e| e.to_string())?;
                for (x, y) in a.iter().zip(&b) {
                    if x != y {
                        row.pixels_differing += 1;
                        row.max_8bit = row.max_8bit.max((*x as i32 - *y as i32).abs());
                    }
                }
            }
            if !opts.batches.is_empty() && coding.codec != compressed::GpuCodec::Jpeg2000 {
                let single = read_back(dst, bytes, &stream)?;
                for &k in &opts.batches {
                    batch_lines.push(time_batch(
                        &mut decoder,
                        &encoded,
                        &code,
                        k,
                        opts.iters,
                        &single,
                        &row.name,
                        (&stream, &ev, &mut dev_batch),
                    )?);
                }
            }
            rows.push(row);
        }
    }
    let _ = writeln!(
        out,
        "# DCT frames on the hardware JPEG engines: {}",
        if decoder.dct_hardware() { "yes" } else { "no" }
    );
    for line in startup.iter().chain(&batch_lines) {
        let _ = writeln!(out, "{line}");
    }
    let _ = writeln!(
        out,
        "{:<28} {:<22} {:>8} {:>9} {:>10} {:>9} {:>6} {:>9} {:>6} {:>8} {:>8}  note",
        "frame",
        "codec",
        "lossless",
        "samples",
        "differing",
        "first Δ",
        "max|Δ|",
        "8-bit Δpx",
        "max|Δ|",
        "cpu ms",
        "gpu ms"
    );
    for r in &rows {
        let _ = writeln!(
            out,
            "{:<28} {:<22} {:>8} {:>9} {:>10} {:>9} {:>6} {:>9} {:>6} {:>8.3} {:>8.3}  {}",
            r.name,
            r.codec,
            if r.lossless { "yes" } else { "no" },
            r.samples,
            r.differing,
            r.first
                .map(|(y, x)| format!("{y},{x}"))
                .unwrap_or_else(|| "-".into()),
            r.max_stored,
            r.pixels_differing,
            r.max_8bit,
            r.cpu_ms,
            r.gpu_ms,
            r.refused
                .as_deref()
                .map(|w| format!("CPU only: {w}"))
                .unwrap_or_default()
        );
    }
    let exact_failures = rows
        .iter()
        .filter(|r| r.lossless && r.refused.is_none() && r.differing > 0)
        .count();
    let _ = writeln!(
        out,
        "# {} frame(s); {} decoded on the GPU; lossless frames with differences: {exact_failures}",
        rows.len(),
        rows.iter().filter(|r| r.refused.is_none()).count()
    );
    Ok(out)
}

/// `bytes` bytes of device memory at `src`, copied back.
fn read_back(src: u64, bytes: usize, stream: &Stream) -> Result<Vec<u8>, String> {
    let mut v = vec![0u8; bytes];
    // SAFETY: v holds `bytes` bytes; synchronized right after.
    unsafe { driver::copy_dtoh_async(v.as_mut_ptr(), src, bytes, stream) }
        .map_err(|e| e.to_string())?;
    stream.synchronize().map_err(|e| e.to_string())?;
    Ok(v)
}

/// Times `k` copies of one frame decoded in one batched call (best of `iters`): the GPU time
/// between events around the call, the host time the call took to return, and the wall time
/// to the end of the work; checks the last copy against the frame decoded alone (`single`).
#[allow(clippy::too_many_arguments)]
fn time_batch(
    decoder: &mut FrameDecoder,
    encoded: &EncodedFrame,
    code: &[u8],
    k: usize,
    iters: usize,
    single: &[u8],
    name: &str,
    (stream, ev, buf): (&Arc<Stream>, &[Event; 2], &mut Option<DeviceBuffer>),
) -> Result<String, String> {
    let k = k.max(1);
    let bytes = single.len();
    let step = bytes.div_ceil(256) * 256;
    let base = driver::ensure_buffer(buf, stream, step * k).map_err(|e| e.to_string())?;
    let dsts: Vec<u64> = (0..k).map(|i| base + (i * step) as u64).collect();
    let data = vec![code; k];
    let (mut gpu, mut host, mut wall) = (f64::INFINITY, f64::INFINITY, f64::INFINITY);
    for _ in 0..iters.max(1) {
        let t = Instant::now();
        ev[0].record(stream).map_err(|e| e.to_string())?;
        if let Err(e) = decoder.decode_batch(encoded, &data, &dsts) {
            let _ = stream.synchronize();
            return Ok(format!("# batch {name}: {k} per call refused: {e}"));
        }
        let returned = t.elapsed();
        ev[1].record(stream).map_err(|e| e.to_string())?;
        stream.synchronize().map_err(|e| e.to_string())?;
        let ms = Event::elapsed_ms(&ev[0], &ev[1]).map_err(|e| e.to_string())? as f64;
        gpu = gpu.min(ms);
        host = host.min(returned.as_secs_f64() * 1e3);
        wall = wall.min(t.elapsed().as_secs_f64() * 1e3);
    }
    let last = read_back(dsts[k - 1], bytes, stream)?;
    Ok(format!(
        "# batch {name}: {k} per call: GPU {gpu:.3} ms, returned after {host:.3} ms, done after \
         {wall:.3} ms = {:.3} ms per frame ({:.0} frames/s on one stream); last copy {}",
        wall / k as f64,
        k as f64 * 1e3 / wall,
        if last == single {
            "identical to the frame decoded alone"
        } else {
            "DIFFERS from the frame decoded alone"
        }
    ))
}

/// `dicomflow bench decode`./// `dicomflow bench decode`.
pub fn execute(a: &crate::app::cli::DecodeArgs) -> Result<i32, FatalError> {
    let opts = DecodeBenchOptions {
        inputs: a.inputs.clone(),
        iters: a.iters,
        max_frames: a.max_frames,
        library_path: a.library_path.clone(),
        device: a.device,
        lossless_pitch_align: a.lossless_pitch_align,
        batches: a.batches.clone(),
    };
    let table = run(&opts).map_err(FatalError::Backend)?;
    print!("{table}");
    Ok(0)
}
