//! `dicomflow bench gpu-encode`: the GPU encoders against the CPU's, on rendered phantom CT
//! slices. For PNG, the fdeflate kernels (algorithm -1) and each nvCOMP algorithm: time per
//! call (CUDA events: the compression, then for nvCOMP the checksum and the gzip-to-zlib
//! rewrite), sustained slices/s on several streams,
//! output size against the CPU encoder's `fast` PNG, whether every file decodes to the same
//! pixels, and the layout of the Deflate stream nvCOMP made. For JPEG, nvJPEG against the
//! `image` crate at the same quality: time, sustained rate, size, PSNR. Optionally writes
//! sample outputs to a folder.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use dicomflow::backend::cpu::CpuRenderer;
use dicomflow::backend::cuda::driver::{
    self, Args, CudaError, Device, DeviceBuffer, Event, Module, Stream,
};
use dicomflow::backend::cuda::encode::{packed_len, Deflater, GpuPng, PngInput, PACKED_HEADER};
use dicomflow::backend::cuda::nvcomp::Nvcomp;
use dicomflow::backend::cuda::nvjpeg::{Chroma, JpegEncoder, Nvjpeg};
use dicomflow::backend::cuda::nvrtc;
use dicomflow::output::encode::{EncodeOptions, ImageEncoder};
use dicomflow::output::options::{OutputFormat, PngCompression, PngFilter};
use dicomflow::output::png::{filter_rows, png_from_zlib};
use dicomflow::output::zlib;
use dicomflow::synth::{phantom_plan, slice_pixels, SynthOptions};

/// What to measure.
#[derive(Debug, Clone)]
pub struct GpuEncodeBenchOptions {
    /// Square slice sizes.
    pub sizes: Vec<u32>,
    /// Distinct phantom slices per size.
    pub slices: usize,
    /// Stream counts (threads) for the sustained runs.
    pub streams: Vec<usize>,
    /// Slices each stream encodes in a sustained run.
    pub rounds: usize,
    /// nvCOMP algorithms to try.
    pub algorithms: Vec<i32>,
    /// Slices per nvCOMP call to try.
    pub batches: Vec<usize>,
    /// Folder for sample outputs (none when `None`).
    pub out: Option<PathBuf>,
    pub library_path: Option<PathBuf>,
    pub device: usize,
}

fn e(err: CudaError) -> String {
    err.to_string()
}

/// Rendered phantom slices of `size`² (different z, as a series has them).
fn phantom_series(size: u32, count: usize) -> Result<Vec<Vec<u8>>, String> {
    let plan = phantom_plan(size);
    let opts = SynthOptions {
        size,
        slices: count as u32 + 2,
        ..Default::default()
    };
    let mut cpu = CpuRenderer::default();
    (0..count)
        .map(|z| {
            let stored = slice_pixels(&opts, z as u32 + 1);
            let mut out = vec![0u8; plan.output_bytes()];
            cpu.render_bytes(&plan, &stored, &mut out)
                .map_err(|e| e.to_string())?;
            Ok(out)
        })
        .collect()
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// PSNR of `b` against `a` in dB (infinite when equal).
fn psnr(a: &[u8], b: &[u8]) -> f64 {
    let mse = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| (f64::from(x) - f64::from(y)).powi(2))
        .sum::<f64>()
        / a.len().max(1) as f64;
    if mse == 0.0 {
        f64::INFINITY
    } else {
        10.0 * (255.0f64 * 255.0 / mse).log10()
    }
}

fn decode_png(bytes: &[u8]) -> Result<Vec<u8>, String> {
    let mut dec = png::Decoder::new(std::io::Cursor::new(bytes))
        .read_info()
        .map_err(|e| format!("png decode: {e}"))?;
    let mut out = vec![0; dec.output_buffer_size().unwrap_or(0)];
    dec.next_frame(&mut out)
        .map_err(|e| format!("png decode: {e}"))?;
    Ok(out)
}

/// Device copies of the slices: pixels and their PNG-filtered rows (GPU kernel).
struct DeviceSlices {
    pixels: Vec<DeviceBuffer>,
    rows: Vec<DeviceBuffer>,
    rows_len: usize,
}

fn upload(
    stream: &Arc<Stream>,
    module: &Module,
    size: u32,
    slices: &[Vec<u8>],
) -> Result<DeviceSlices, String> {
    let filter = module.function(c"png_filter_rows").map_err(e)?;
    let row_len = size as usize;
    let rows_len = (row_len + 1) * size as usize;
    let mut out = DeviceSlices {
        pixels: Vec::new(),
        rows: Vec::new(),
        rows_len,
    };
    for px in slices {
        let p = DeviceBuffer::alloc(stream, px.len()).map_err(e)?;
        let r = DeviceBuffer::alloc(stream, rows_len).map_err(e)?;
        // SAFETY: p holds px.len() bytes; px outlives the synchronize below.
        unsafe { driver::copy_htod_async(p.ptr(), px.as_ptr(), px.len(), stream).map_err(e)? };
        let args = Args::default()
            .u64(p.ptr())
            .u64(r.ptr())
            .u32(row_len as u32)
            .u32(size)
            .u32(1)
            .u32(5);
        driver::launch(&filter, size, 256, 0, stream, args).map_err(e)?;
        out.pixels.push(p);
        out.rows.push(r);
    }
    stream.synchronize().map_err(e)?;
    Ok(out)
}

/// Copies `len` bytes of device memory to a new vector (synchronous).
fn download(stream: &Stream, src: u64, len: usize) -> Result<Vec<u8>, String> {
    let mut v = vec![0u8; len];
    // SAFETY: v holds len bytes; synchronized before it is read.
    unsafe { driver::copy_dtoh_async(v.as_mut_ptr(), src, len, stream).map_err(e)? };
    stream.synchronize().map_err(e)?;
    Ok(v)
}

/// One PNG configuration's results.
struct PngRow {
    size: u32,
    algorithm: i32,
    /// Slices per nvCOMP call.
    batch: usize,
    /// Per call (batch slices).
    compress_ms: f64,
    finish_ms: f64,
    per_s: Vec<f64>,
    bytes: usize,
    cpu_bytes: usize,
    identical: String,
    layout: String,
}

/// The Deflate stream inside a zlib stream: blocks by type (nvCOMP joins the parts it
/// compressed in parallel with empty stored blocks).
fn describe_zlib(z: &[u8]) -> String {
    match z.get(2..z.len().saturating_sub(4)).map(zlib::scan) {
        Some(Ok(l)) => format!(
            "one Deflate stream, {} blocks (stored/fixed/dynamic {:?})",
            l.blocks, l.block_types
        ),
        Some(Err(err)) => format!("Deflate stream does not scan: {err}"),
        None => "too short".into(),
    }
}

/// Runs `work(thread, stream)` on `streams` threads at once, each with its own stream on
/// `device`, and returns `streams × rounds` slices over the wall time.
fn on_streams(
    device: &Arc<Device>,
    streams: usize,
    rounds: usize,
    work: impl Fn(usize, &Arc<Stream>) -> Result<(), String> + Sync,
) -> Result<f64, String> {
    let started = Instant::now();
    let work = &work;
    let results: Vec<Result<(), String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..streams)
            .map(|t| {
                s.spawn(move || -> Result<(), String> {
                    device.bind().map_err(e)?;
                    let stream = Stream::new(device).map_err(e)?;
                    work(t, &stream)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("thread panicked".into())))
            .collect()
    });
    for r in results {
        r?;
    }
    Ok((streams * rounds) as f64 / started.elapsed().as_secs_f64())
}

/// Sustained PNG encoding: each stream queues `rounds` slices, `batch` per nvCOMP call, and
/// copies the packed streams to mapped host memory, synchronizing per call as a render worker
/// does.
#[allow(clippy::too_many_arguments)]
fn png_sustained(
    device: &Arc<Device>,
    module: &Arc<Module>,
    deflater: &Deflater,
    rows: &[u64],
    rows_len: usize,
    row_bytes: usize,
    batch: usize,
    streams: usize,
    rounds: usize,
) -> Result<f64, String> {
    let calls = rounds.div_ceil(batch);
    let rate = on_streams(device, streams, calls * batch, |t, stream| {
        let mut enc = GpuPng::new(deflater.clone(), module, stream.clone())?;
        let stride = (rows_len + 64).div_ceil(256) * 256;
        let mut host = driver::MappedRegion::new(stride * batch).map_err(e)?;
        let dst = host.register().map_err(e)?;
        for c in 0..calls {
            let inputs: Vec<PngInput> = (0..batch)
                .map(|b| PngInput {
                    rows: rows[(t + c * batch + b) % rows.len()],
                    len: rows_len,
                    row_bytes,
                    cap: rows_len,
                    out: dst + (b * stride) as u64,
                })
                .collect();
            let packed = enc.queue_batch(&inputs, None)?;
            // One launch for the batch's copies where the encoder can (as the workers do).
            let copied = enc.queue_copy_out().map_err(e)?;
            for (b, src) in packed.iter().enumerate().filter(|_| !copied) {
                enc.copy_packed_from(*src, dst + (b * stride) as u64, rows_len)
                    .map_err(e)?;
            }
            stream.synchronize().map_err(e)?;
        }
        Ok(())
    })?;
    Ok(rate)
}

/// One nvCOMP call for `batch` of the slices (cycled): its time (CUDA events around the
/// call) and whether every packed stream decodes to its slice's pixels.
#[allow(clippy::too_many_arguments)]
fn png_batch_check(
    enc: &mut GpuPng,
    stream: &Arc<Stream>,
    marks: &[Event; 3],
    dev: &DeviceSlices,
    slices: &[Vec<u8>],
    size: u32,
    batch: usize,
) -> Result<(f64, usize), String> {
    let inputs: Vec<PngInput> = (0..batch)
        .map(|b| PngInput {
            rows: dev.rows[b % dev.rows.len()].ptr(),
            len: dev.rows_len,
            row_bytes: size as usize + 1,
            cap: dev.rows_len,
            out: 0,
        })
        .collect();
    let mut times = Vec::new();
    let mut same = 0;
    for round in 0..3 {
        marks[0].record(stream).map_err(e)?;
        let packed = enc.queue_batch(&inputs, Some(&marks[1]))?;
        stream.synchronize().map_err(e)?;
        times.push(f64::from(
            Event::elapsed_ms(&marks[0], &marks[1]).map_err(e)?,
        ));
        if round > 0 {
            continue;
        }
        for (b, src) in packed.iter().enumerate() {
            let head = download(stream, *src, PACKED_HEADER)?;
            let Some(zlen) = packed_len(&head) else {
                continue;
            };
            let z = download(stream, src + PACKED_HEADER as u64, zlen)?;
            let mut file = Vec::new();
            png_from_zlib(&mut file, size, size, 1, &z).map_err(|e| e.to_string())?;
            if decode_png(&file).ok().as_ref() == Some(&slices[b % slices.len()]) {
                same += 1;
            }
        }
    }
    Ok((median(&mut times), same))
}

/// Runs the benchmark and returns the printed report.
pub fn run(opts: &GpuEncodeBenchOptions) -> Result<String, String> {
    driver::probe()?;
    let device = Device::open(opts.device).map_err(e)?;
    let cache = nvrtc::cache_dir(None);
    let t = Instant::now();
    let (image, origin) = nvrtc::module_image(device.compute_capability, &cache)?;
    let compile_ms = t.elapsed().as_secs_f64() * 1e3;
    let module = Module::load(&device, &image).map_err(e)?;
    let stream = Stream::new(&device).map_err(e)?;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "GPU {} (sm_{}{}); kernels {} in {compile_ms:.0} ms",
        device.name,
        device.compute_capability.0,
        device.compute_capability.1,
        if origin.cache_hit {
            "from cache"
        } else {
            "compiled"
        }
    );
    let t = Instant::now();
    let nvcomp = Nvcomp::load(opts.library_path.as_deref()).map(Arc::new);
    let nvcomp_ms = t.elapsed().as_secs_f64() * 1e3;
    match &nvcomp {
        Ok(n) => {
            let _ = writeln!(
                s,
                "nvCOMP {} from {} (loaded in {nvcomp_ms:.0} ms)",
                n.version,
                n.path.display()
            );
        }
        Err(err) => {
            let _ = writeln!(s, "nvCOMP: {err}");
        }
    }
    let t = Instant::now();
    let nvjpeg = Nvjpeg::load(opts.library_path.as_deref()).map(Arc::new);
    let nvjpeg_ms = t.elapsed().as_secs_f64() * 1e3;
    match &nvjpeg {
        Ok(n) => {
            let _ = writeln!(
                s,
                "nvJPEG {} from {} (loaded + handle in {nvjpeg_ms:.0} ms)",
                n.version,
                n.path.display()
            );
        }
        Err(err) => {
            let _ = writeln!(s, "nvJPEG: {err}");
        }
    }
    if let Some(dir) = &opts.out {
        std::fs::create_dir_all(dir).map_err(|err| format!("{}: {err}", dir.display()))?;
    }
    let mut png_rows: Vec<PngRow> = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    let mut jpeg_lines: Vec<String> = Vec::new();
    for &size in &opts.sizes {
        let t = Instant::now();
        let slices = phantom_series(size, opts.slices.max(1))?;
        let _ = writeln!(
            s,
            "{size}²: {} phantom slices rendered in {:.0} ms",
            slices.len(),
            t.elapsed().as_secs_f64() * 1e3
        );
        // The CPU encoder's fast PNG: the reference for pixels, size and time.
        let mut cpu = ImageEncoder::new(EncodeOptions {
            format: OutputFormat::Png,
            png_compression: PngCompression::Fast,
            png_filter: PngFilter::Adaptive,
            jpeg_quality: 90,
        });
        let (mut cpu_bytes, mut cpu_ms, mut cpu_files) = (0usize, Vec::new(), Vec::new());
        for px in &slices {
            let t = Instant::now();
            let file = cpu.encode(size, size, 1, px).map_err(|e| e.to_string())?;
            cpu_ms.push(t.elapsed().as_secs_f64() * 1e3);
            cpu_bytes += file.len();
            cpu_files.push(file.to_vec());
        }
        let cpu_ms = median(&mut cpu_ms);
        let dev = upload(&stream, &module, size, &slices)?;
        // The GPU filter matches the CPU's (the pipeline relies on it).
        let mut cpu_rows = Vec::new();
        filter_rows(
            PngFilter::Adaptive,
            &slices[0],
            size as usize,
            1,
            &mut cpu_rows,
        );
        let gpu_rows = download(&stream, dev.rows[0].ptr(), dev.rows_len)?;
        if gpu_rows != cpu_rows {
            notes.push(format!("{size}²: GPU filtered rows differ from the CPU's"));
        }
        let _ = writeln!(
            s,
            "{size}²: CPU fast PNG {cpu_ms:.2} ms/slice (one core), {:.1} % of raw",
            cpu_bytes as f64 * 100.0 / (slices.len() * slices[0].len()) as f64
        );
        {
            let marks = [
                Event::new(&device).map_err(e)?,
                Event::new(&device).map_err(e)?,
                Event::new(&device).map_err(e)?,
            ];
            for &algorithm in &opts.algorithms {
                // -1: the fdeflate kernels; 0..5: nvCOMP's algorithms.
                let deflater = match (algorithm, &nvcomp) {
                    (-1, _) => Deflater::Fdeflate,
                    (_, Ok(lib)) => Deflater::Nvcomp {
                        lib: lib.clone(),
                        algorithm,
                        zlib_header: [0x78, 0x01],
                    },
                    (_, Err(err)) => {
                        notes.push(format!("algorithm {algorithm}: {err}"));
                        continue;
                    }
                };
                let mut enc = match GpuPng::new(deflater.clone(), &module, stream.clone()) {
                    Ok(enc) => enc,
                    Err(err) => {
                        notes.push(format!("algorithm {algorithm}: {err}"));
                        continue;
                    }
                };
                let (mut c_ms, mut f_ms) = (Vec::new(), Vec::new());
                let (mut bytes, mut same, mut failed) = (0usize, 0usize, Vec::new());
                let mut same_bytes = 0usize;
                let mut layout = String::new();
                for (i, px) in slices.iter().enumerate() {
                    let cap = dev.rows_len;
                    marks[0].record(&stream).map_err(e)?;
                    let input = PngInput {
                        rows: dev.rows[i].ptr(),
                        len: dev.rows_len,
                        row_bytes: size as usize + 1,
                        cap,
                        out: 0,
                    };
                    let packed = match enc.queue(input, Some(&marks[1])) {
                        Ok(p) => p,
                        Err(err) => {
                            failed.push(err);
                            break;
                        }
                    };
                    marks[2].record(&stream).map_err(e)?;
                    stream.synchronize().map_err(e)?;
                    let ms = |a: &Event, b: &Event| {
                        Event::elapsed_ms(a, b).map(f64::from).unwrap_or(f64::NAN)
                    };
                    c_ms.push(ms(&marks[0], &marks[1]));
                    f_ms.push(ms(&marks[1], &marks[2]));
                    let head = download(&stream, packed, PACKED_HEADER)?;
                    let Some(zlen) = packed_len(&head) else {
                        failed.push(format!("slice {i}: the GPU did not encode"));
                        continue;
                    };
                    let z = download(&stream, packed + PACKED_HEADER as u64, zlen)?;
                    let mut file = Vec::new();
                    png_from_zlib(&mut file, size, size, 1, &z).map_err(|e| e.to_string())?;
                    bytes += file.len();
                    if cpu_files.get(i) == Some(&file) {
                        same_bytes += 1;
                    }
                    match decode_png(&file) {
                        Ok(back) if &back == px => same += 1,
                        Ok(_) => failed.push(format!("slice {i}: pixels differ")),
                        Err(err) => failed.push(format!("slice {i}: {err}")),
                    }
                    if i == 0 {
                        layout = describe_zlib(&z);
                        if let Some(dir) = &opts.out {
                            if algorithm == -1 || algorithm == 1 {
                                let _ = std::fs::write(
                                    dir.join(format!("gpu_{size}_alg{algorithm}.png")),
                                    &file,
                                );
                            }
                        }
                    }
                }
                let rows: Vec<u64> = dev.rows.iter().map(|b| b.ptr()).collect();
                if !failed.is_empty() {
                    notes.push(format!("{size}² {algorithm}: {}", failed.join("; ")));
                }
                notes.push(format!(
                    "{size}² {algorithm}: {same_bytes}/{} files byte-identical to the CPU's fast PNG",
                    slices.len()
                ));
                for &batch in &opts.batches {
                    let (call_ms, identical) = if batch == 1 {
                        (median(&mut c_ms), format!("{same}/{}", slices.len()))
                    } else {
                        match png_batch_check(&mut enc, &stream, &marks, &dev, &slices, size, batch)
                        {
                            Ok((ms, same)) => (ms, format!("{same}/{batch}")),
                            Err(err) => {
                                notes.push(format!("{size}² {algorithm} batch {batch}: {err}"));
                                continue;
                            }
                        }
                    };
                    let per_s = opts
                        .streams
                        .iter()
                        .map(|&streams| {
                            if !failed.is_empty() {
                                return f64::NAN;
                            }
                            png_sustained(
                                &device,
                                &module,
                                &deflater,
                                &rows,
                                dev.rows_len,
                                size as usize + 1,
                                batch,
                                streams,
                                opts.rounds,
                            )
                            .unwrap_or_else(|err| {
                                notes.push(format!("sustained: {err}"));
                                f64::NAN
                            })
                        })
                        .collect();
                    png_rows.push(PngRow {
                        size,
                        algorithm,
                        batch,
                        compress_ms: call_ms,
                        finish_ms: median(&mut f_ms),
                        per_s,
                        bytes,
                        cpu_bytes,
                        identical,
                        layout: layout.clone(),
                    });
                }
            }
        }
        if let Ok(nvjpeg) = &nvjpeg {
            jpeg_lines.extend(jpeg_bench(
                &device, nvjpeg, &stream, size, &slices, &dev, opts,
            )?);
        }
    }
    let streams: Vec<String> = opts.streams.iter().map(|n| format!("{n} str/s")).collect();
    let _ = writeln!(
        s,
        "\nPNG on the GPU: alg -1 dicomflow's fdeflate kernels, 0..5 nvCOMP gzip (one member per \
         slice); `batch` slices per call \
         (call ms: CUDA events around one call; sustained: N streams × {} slices each, \
         synchronized per call, packed streams copied to mapped host memory; slices/s)",
        opts.rounds
    );
    let _ = writeln!(
        s,
        "{:<6} {:>4} {:>5} {:>11} {:>10} {}  {:>9} {:>8}",
        "slice",
        "alg",
        "batch",
        "call ms",
        "finish ms",
        streams
            .iter()
            .map(|h| format!("{h:>10}"))
            .collect::<Vec<_>>()
            .join(" "),
        "size/CPU",
        "same px"
    );
    for r in &png_rows {
        let _ = writeln!(
            s,
            "{:<6} {:>4} {:>5} {:>11.3} {:>10.3} {}  {:>9.3} {:>8}",
            r.size,
            r.algorithm,
            r.batch,
            r.compress_ms,
            r.finish_ms,
            r.per_s
                .iter()
                .map(|v| format!("{v:>10.0}"))
                .collect::<Vec<_>>()
                .join(" "),
            r.bytes as f64 / r.cpu_bytes.max(1) as f64,
            r.identical
        );
    }
    let _ = writeln!(s, "\nDeflate layout (first slice of each row):");
    for r in png_rows.iter().filter(|r| r.batch == 1) {
        let _ = writeln!(s, "{} {}: {}", r.size, r.algorithm, r.layout);
    }
    if !jpeg_lines.is_empty() {
        let _ = writeln!(s, "\nJPEG on the GPU (nvJPEG) against the image crate");
        for l in jpeg_lines {
            let _ = writeln!(s, "{l}");
        }
    }
    if !notes.is_empty() {
        let _ = writeln!(s, "\nnotes:");
        for n in notes {
            let _ = writeln!(s, "  {n}");
        }
    }
    Ok(s)
}

/// nvJPEG against the `image` crate's encoder at quality 90: grayscale slices, and one colour
/// image at 4:4:4 and 4:2:0.
fn jpeg_bench(
    device: &Arc<Device>,
    nvjpeg: &Arc<Nvjpeg>,
    stream: &Arc<Stream>,
    size: u32,
    slices: &[Vec<u8>],
    dev: &DeviceSlices,
    opts: &GpuEncodeBenchOptions,
) -> Result<Vec<String>, String> {
    let quality = 90u8;
    let mut lines = Vec::new();
    let mut enc = JpegEncoder::new(nvjpeg.clone(), stream, quality).map_err(|e| e.to_string())?;
    let mut cpu = ImageEncoder::new(EncodeOptions {
        format: OutputFormat::Jpeg,
        png_compression: PngCompression::Fast,
        png_filter: PngFilter::Adaptive,
        jpeg_quality: quality,
    });
    let (mut gpu_ms, mut cpu_ms) = (Vec::new(), Vec::new());
    let (mut gpu_bytes, mut cpu_bytes) = (0usize, 0usize);
    let (mut psnr_cross, mut psnr_gpu, mut psnr_cpu) =
        (f64::INFINITY, f64::INFINITY, f64::INFINITY);
    let mut out = vec![0u8; slices[0].len() * 2 + 65_536];
    for (i, px) in slices.iter().enumerate() {
        let t = Instant::now();
        // SAFETY: the pixels live in dev.pixels[i] until the retrieve below synchronizes.
        unsafe { enc.encode(dev.pixels[i].ptr(), size, size, 1, Chroma::Full444) }
            .map_err(|e| e.to_string())?;
        let len = enc.length().map_err(|e| e.to_string())?;
        if len > out.len() {
            out.resize(len, 0);
        }
        let len = enc.retrieve(&mut out[..len]).map_err(|e| e.to_string())?;
        gpu_ms.push(t.elapsed().as_secs_f64() * 1e3);
        let gpu_jpeg = out[..len].to_vec();
        gpu_bytes += len;
        let t = Instant::now();
        let cpu_jpeg = cpu
            .encode(size, size, 1, px)
            .map_err(|e| e.to_string())?
            .to_vec();
        cpu_ms.push(t.elapsed().as_secs_f64() * 1e3);
        cpu_bytes += cpu_jpeg.len();
        let g = image::load_from_memory(&gpu_jpeg)
            .map_err(|e| format!("GPU JPEG does not decode: {e}"))?
            .to_luma8()
            .into_raw();
        let c = image::load_from_memory(&cpu_jpeg)
            .map_err(|e| format!("CPU JPEG does not decode: {e}"))?
            .to_luma8()
            .into_raw();
        psnr_cross = psnr_cross.min(psnr(&c, &g));
        psnr_gpu = psnr_gpu.min(psnr(px, &g));
        psnr_cpu = psnr_cpu.min(psnr(px, &c));
        if i == 0 {
            if let Some(dir) = &opts.out {
                let _ = std::fs::write(dir.join(format!("gpu_{size}.jpg")), &gpu_jpeg);
            }
        }
    }
    let mut sustained = Vec::new();
    for &streams in &opts.streams {
        match jpeg_sustained(device, nvjpeg, dev, size, streams, opts.rounds) {
            Ok(v) => sustained.push(format!("{v:.0}/s on {streams}")),
            Err(err) => lines.push(format!("  sustained on {streams} streams: {err}")),
        }
    }
    lines.push(format!(
        "{size}² gray q{quality}: GPU {:.3} ms/slice (encode + retrieve), sustained {}; CPU {:.2} ms/slice; size GPU/CPU {:.3}; worst PSNR GPU vs CPU {:.1} dB, GPU vs pixels {:.1} dB, CPU vs pixels {:.1} dB",
        median(&mut gpu_ms),
        sustained.join(", "),
        median(&mut cpu_ms),
        gpu_bytes as f64 / cpu_bytes.max(1) as f64,
        psnr_cross,
        psnr_gpu,
        psnr_cpu
    ));
    // Colour: the gray slice tinted into RGB (a colour image with structure), 4:4:4 and 4:2:0.
    let px = &slices[0];
    let rgb: Vec<u8> = px
        .iter()
        .enumerate()
        .flat_map(|(i, &v)| {
            let x = (i % size as usize) as u32;
            [v, (u32::from(v) * 3 / 4 + x % 64) as u8, 255 - v]
        })
        .collect();
    let d = DeviceBuffer::alloc(stream, rgb.len()).map_err(e)?;
    // SAFETY: d holds rgb.len() bytes; synchronized by the retrieve below.
    unsafe { driver::copy_htod_async(d.ptr(), rgb.as_ptr(), rgb.len(), stream).map_err(e)? };
    let cpu_jpeg = cpu
        .encode(size, size, 3, &rgb)
        .map_err(|e| e.to_string())?
        .to_vec();
    let c = image::load_from_memory(&cpu_jpeg)
        .map_err(|e| e.to_string())?
        .to_rgb8()
        .into_raw();
    for chroma in [Chroma::Full444, Chroma::Half420] {
        // SAFETY: d lives until after the retrieve.
        unsafe { enc.encode(d.ptr(), size, size, 3, chroma) }.map_err(|e| e.to_string())?;
        let len = enc.length().map_err(|e| e.to_string())?;
        let mut buf = vec![0u8; len];
        let len = enc.retrieve(&mut buf).map_err(|e| e.to_string())?;
        buf.truncate(len);
        let g = image::load_from_memory(&buf)
            .map_err(|e| format!("GPU colour JPEG does not decode: {e}"))?
            .to_rgb8()
            .into_raw();
        lines.push(format!(
            "{size}² RGB q{quality} {chroma:?}: size GPU/CPU(4:4:4) {:.3}; PSNR GPU vs CPU {:.1} dB, GPU vs pixels {:.1} dB, CPU vs pixels {:.1} dB",
            len as f64 / cpu_jpeg.len() as f64,
            psnr(&c, &g),
            psnr(&rgb, &g),
            psnr(&rgb, &c)
        ));
    }
    Ok(lines)
}

fn jpeg_sustained(
    device: &Arc<Device>,
    nvjpeg: &Arc<Nvjpeg>,
    dev: &DeviceSlices,
    size: u32,
    streams: usize,
    rounds: usize,
) -> Result<f64, String> {
    let pixels: Vec<u64> = dev.pixels.iter().map(|b| b.ptr()).collect();
    on_streams(device, streams, rounds, |t, stream| {
        let mut enc = JpegEncoder::new(nvjpeg.clone(), stream, 90).map_err(|e| e.to_string())?;
        let mut host = driver::MappedRegion::new(size as usize * size as usize * 2).map_err(e)?;
        host.register().map_err(e)?;
        // SAFETY: the region is ours, mapped and registered, len bytes.
        let out = unsafe { std::slice::from_raw_parts_mut(host.as_ptr(), host.len()) };
        for r in 0..rounds {
            let px = pixels[(t + r) % pixels.len()];
            // SAFETY: the pixels outlive the threads (scoped).
            unsafe { enc.encode(px, size, size, 1, Chroma::Full444) }.map_err(|e| e.to_string())?;
            let len = enc.length().map_err(|e| e.to_string())?;
            let room = out.len();
            enc.retrieve(&mut out[..len.min(room)])
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    })
}

/// `dicomflow bench gpu-encode`: prints the report.
pub fn execute(a: &crate::app::cli::GpuEncodeArgs) -> Result<i32, dicomflow::error::FatalError> {
    let opts = GpuEncodeBenchOptions {
        sizes: a.sizes.clone(),
        slices: a.slices.max(1),
        streams: a.streams.iter().map(|&n| n.max(1)).collect(),
        rounds: a.rounds.max(1),
        algorithms: a.algorithms.clone(),
        batches: a.batches.iter().map(|&n| n.max(1)).collect(),
        out: a.out.clone(),
        library_path: a.library_path.clone(),
        device: a.device,
    };
    let report = run(&opts).map_err(dicomflow::error::FatalError::Backend)?;
    print!("{report}");
    Ok(0)
}
