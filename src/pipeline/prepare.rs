//! Before a run: choosing the backend for the job at hand. `auto` keeps jobs too small to repay
//! opening the GPU on the CPU, and an explicit CUDA backend prepares slot memory for the first
//! file's frames while the driver starts. This is where the pipeline looks at its inputs on the
//! backend's behalf, so the backend itself never scans or opens input files.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};

use crate::backend::cpu::CpuBackend;
use crate::backend::cuda::encode::GpuEncodeWish;
use crate::backend::cuda::CudaBackend;
use crate::backend::options::{
    BackendChoice, BackendOptions, GpuDecode, GpuDecodeStart, GpuEncodeChoice, SMALL_FRAME_PIXELS,
};
use crate::backend::{Backend, OutputWish};
use crate::decode::compressed::GpuCodec;
use crate::error::FatalError;
use crate::memory::{round_up, SlotHint};
use crate::output::options::{OutputFormat, OutputOptions, PngCompression};
use crate::source::Sources;

use super::options::{Job, PipelineOptions};
use super::Sizing;

/// Chooses the backend `options` ask for, for a run of `job` over `inputs` (empty when the
/// inputs are not known, e.g. a library caller feeding frames itself). `auto` falls back to the
/// CPU, saying why; `cuda` on a machine without a usable GPU is a fatal error.
pub fn select_backend(
    options: &BackendOptions,
    job: &Job,
    inputs: &[PathBuf],
) -> Result<Arc<dyn Backend>, FatalError> {
    select_backend_for(options, job, &Sources::walk(inputs))
}

/// [`select_backend`] for a run over `sources` (a shard reads only its own part of the inputs,
/// and `auto` weighs only that).
pub fn select_backend_for(
    options: &BackendOptions,
    job: &Job,
    sources: &Sources,
) -> Result<Arc<dyn Backend>, FatalError> {
    let inputs = &sources.roots()[..];
    let first = FirstFile::new(job, inputs);
    let mut wish = output_wish(&job.output);
    if options.choice != BackendChoice::Cpu
        && options.gpu.encode == GpuEncodeChoice::Auto
        && matches!(wish.gpu_encode, Ok(GpuEncodeWish::Png { .. }))
    {
        wish.first_frame_pixels = first.frame_pixels();
    }
    if options.choice != BackendChoice::Cpu {
        wish.first_frame_decoded_in_batches = first.decoded_in_batches(options.gpu.decode);
        wish.first_frame_codec = first
            .info()
            .and_then(|info| GpuCodec::of(&info.transfer_syntax));
        if wish.first_frame_decoded_in_batches && options.gpu.decode_start == GpuDecodeStart::Cpu {
            wish.nvjpeg_start_skipped = too_small_for_nvjpeg(&job.output.dir, sources);
            if wish.nvjpeg_start_skipped.is_some() {
                // Its frames all decode on the CPU: no batches to make room for.
                wish.first_frame_decoded_in_batches = false;
            }
        }
    }
    let jpeg2000_tuned = with_decode_streams(options, &first);
    let jpeg2000_on_gpu = jpeg2000_tuned.is_some();
    let tuned = jpeg2000_tuned.or_else(|| with_encode_streams(options, &first, &wish));
    wish.ring_batches = ring_batches(options, &first, &wish);
    let options = tuned.as_ref().unwrap_or(options);
    if options.choice != BackendChoice::Cpu {
        // Before any CUDA context exists (the driver reads it then).
        crate::backend::cuda::ask_for_hardware_queues(options.gpu.streams);
    }
    match options.choice {
        BackendChoice::Cpu => Ok(Arc::new(CpuBackend::new("requested (backend = cpu)"))),
        BackendChoice::Cuda => {
            // The ring's every slot, room for the workers' batches included: slots made
            // during the run are page-locked under the driver's lock while the first frames
            // flow (H200, 1000 × 512² JPEG lossless: 62 slots for nvJPEG's batches took
            // 618 ms of the loaders' time when made on demand).
            let per_call = crate::backend::cuda::frames_per_call_for(&options.gpu, &wish);
            let batches = wish.ring_batches;
            let hint = move |workers: usize| first.slot_hint(workers, per_call, batches);
            CudaBackend::new_prepared(
                &options.gpu,
                &wish,
                "requested (backend = cuda)",
                (!inputs.is_empty()).then_some(&hint as _),
            )
            .map(|b| Arc::new(b) as Arc<dyn Backend>)
            .map_err(|why| {
                FatalError::Backend(format!("backend = \"cuda\" is not usable here: {why}"))
            })
        }
        BackendChoice::Auto => match crate::backend::cuda::driver::libraries() {
            Ok(()) => {
                match too_small_for_the_gpu(options, &job.output.dir, sources, jpeg2000_on_gpu) {
                    Some(why) => {
                        tracing::info!("{why}; using the CPU backend");
                        Ok(Arc::new(CpuBackend::new(format!("auto: {why}"))))
                    }
                    // The driver is there: initialize it in the background while the CPU starts.
                    None => Ok(Arc::new(crate::backend::warm::WarmStart::start(
                        &options.gpu,
                        &wish,
                    ))),
                }
            }
            Err(why) => {
                tracing::info!("CUDA not usable ({why}); using the CPU backend");
                Ok(Arc::new(CpuBackend::new(format!("auto: {why}"))))
            }
        },
    }
}

/// What the writers want from a GPU render worker for `output`: rows PNG-filtered for a fast
/// PNG the writers deflate, and the encoder the GPU could run instead (when `gpu.encode`
/// allows it): the fdeflate kernels for fast PNG, nvCOMP for balanced/best PNG, nvJPEG for
/// JPEG; none for TIFF, BMP and uncompressed PNG.
pub fn output_wish(output: &OutputOptions) -> OutputWish {
    use crate::backend::cuda::encode::{GpuEncodeWish, PngEffort};
    let encode = output.encode();
    let gpu_encode = match output.format {
        OutputFormat::Png => match output.png_compression {
            PngCompression::None => Err("png_compression = none has nothing to compress".into()),
            compression => Ok(GpuEncodeWish::Png {
                filter: crate::output::encode::png_filter_type(output.png_filter),
                effort: if compression == PngCompression::Fast {
                    PngEffort::Fast
                } else {
                    PngEffort::Strong
                },
            }),
        },
        OutputFormat::Jpeg => Ok(GpuEncodeWish::Jpeg {
            quality: output.jpeg_quality,
        }),
        other => Err(format!("no GPU encoder for {} output", other.extension())),
    };
    OutputWish {
        png_filter: crate::output::encode::png_filter_mode(&encode),
        gpu_encode,
        first_frame_pixels: None,
        first_frame_decoded_in_batches: false,
        first_frame_codec: None,
        nvjpeg_start_skipped: None,
        ring_batches: 1,
    }
}

/// Why a job over `inputs` is too small for `auto` to open the GPU (`None`: it is not, or the
/// inputs are not known).
fn too_small_for_the_gpu(
    options: &BackendOptions,
    output_dir: &Path,
    sources: &Sources,
    jpeg2000_on_gpu: bool,
) -> Option<String> {
    let default = crate::host::available_cores() as u64 * (256 << 20);
    // The default weighs uncompressed input. A byte of JPEG 2000 costs the CPU far more: on
    // the H200 host 54 ms of a core per 160 KiB 512² slice against 1.3 ms per 512 KiB
    // uncompressed one (render and PNG), about 130× per byte, while the GPU decodes it 8× as
    // fast as the 16 cores (BENCHMARKS.md, "the cause, hardware queues").
    let (threshold, what) = match options.gpu.auto_min_input_bytes {
        Some(bytes) => (bytes, ""),
        None if jpeg2000_on_gpu => (default / JPEG2000_CPU_COST_PER_BYTE, " for JPEG 2000"),
        None => (default, ""),
    };
    if sources.roots().is_empty() || threshold == 0 {
        return None;
    }
    let total = sources.input_bytes(Some(output_dir), threshold);
    (total < threshold).then(|| {
        format!(
            "{} MiB of input is below gpu.auto_min_input_mib ({} MiB{what}): opening the GPU \
             would cost more than it saves",
            total >> 20,
            threshold >> 20
        )
    })
}

/// Why a job whose first file is for nvJPEG is too small for its start to pay, if it is:
/// under [`NVJPEG_START_MIN_INPUT_PER_CORE`] of input per core. Starting nvJPEG costs one
/// render worker about 0.3 s (start.rs), and the end of a run waits for it: on the H200 host
/// 1000 × 512² JPEG lossless slices (170 MB), which 16 cores decode in 0.4 s, went from 2292 to
/// 1239 pipeline slices/s when the workers started nvJPEG, while 3000 (510 MB) went from 2234
/// to 2837. `DICOMFLOW_NVJPEG_START_MIN_MIB` sets the threshold in MiB for the whole job
/// instead (tests and measurements; 0 always starts it).
fn too_small_for_nvjpeg(output_dir: &Path, sources: &Sources) -> Option<String> {
    let threshold = std::env::var("DICOMFLOW_NVJPEG_START_MIN_MIB")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map(|mib| mib << 20)
        .unwrap_or(crate::host::available_cores() as u64 * NVJPEG_START_MIN_INPUT_PER_CORE);
    if threshold == 0 {
        return None;
    }
    let total = sources.input_bytes(Some(output_dir), threshold);
    (total < threshold).then(|| {
        format!(
            "{} MiB of input is below the {} MiB for which starting nvJPEG pays",
            total >> 20,
            threshold >> 20
        )
    })
}

/// Input per core from which starting nvJPEG beside the CPU decoders pays: 16 MiB, 256 MiB on
/// 16 cores, about 1500 slices of 512² JPEG lossless or 0.55 s of the 16 cores' decoding
/// (see [`too_small_for_nvjpeg`]).
const NVJPEG_START_MIN_INPUT_PER_CORE: u64 = 16 << 20;

/// How much more CPU time a byte of JPEG 2000 input costs than a byte of uncompressed input,
/// rounded down to a power of two (measured: about 130×; see [`too_small_for_the_gpu`]).
const JPEG2000_CPU_COST_PER_BYTE: u64 = 128;

/// The first DICOM file of a job, opened once, when first asked for, by whichever step needs
/// it first (the JPEG 2000 stream count, `auto`'s PNG encoder choice, the slot hint sized
/// while the driver starts).
struct FirstFile<'a> {
    job: &'a Job,
    inputs: &'a [PathBuf],
    info: OnceLock<Option<crate::decode::ImageInfo>>,
}

impl<'a> FirstFile<'a> {
    fn new(job: &'a Job, inputs: &'a [PathBuf]) -> Self {
        FirstFile {
            job,
            inputs,
            info: OnceLock::new(),
        }
    }

    fn info(&self) -> Option<&crate::decode::ImageInfo> {
        self.info
            .get_or_init(|| first_file_info(self.job, self.inputs))
            .as_ref()
    }

    /// Slots for its frames, for a ring beside `workers` render workers that take up to
    /// `per_call` frames per call, with room for `batches` calls each.
    fn slot_hint(&self, workers: usize, per_call: usize, batches: usize) -> Option<SlotHint> {
        let info = self.info()?;
        // The output holds what the operators make of the frame (e.g. a resize), not the
        // frame.
        let output = crate::render::plan_frame(info, 0, &self.job.render)
            .map(|p| p.output_capacity() as u64)
            .unwrap_or(info.output_capacity());
        Some(SlotHint {
            count: slots_beside(&self.job.pipeline, workers, per_call, batches),
            input: round_up(info.frame_bytes() as usize),
            output: round_up(output as usize),
        })
    }

    /// Whether its frames go to nvJPEG's batched decoders under `policy`: JPEG lossless and
    /// baseline/extended DCT, which only "all" sends to the GPU (`GpuRoute::codec`).
    fn decoded_in_batches(&self, policy: GpuDecode) -> bool {
        policy == GpuDecode::All
            && self.info().is_some_and(|info| {
                matches!(
                    GpuCodec::of(&info.transfer_syntax),
                    Some(GpuCodec::JpegLossless | GpuCodec::JpegDct)
                )
            })
    }

    /// Output pixels of its first frame (after the operators, e.g. a resize).
    fn frame_pixels(&self) -> Option<u64> {
        let plan = crate::render::plan_frame(self.info()?, 0, &self.job.render).ok()?;
        Some(u64::from(plan.out_cols()) * u64::from(plan.out_rows()))
    }
}

/// Opens the first DICOM file found under `inputs` and sizes slots for its frames, for a ring
/// beside `workers` render workers; `None` when there is none or it cannot be read (the
/// pipeline then reports it as usual).
pub fn first_file_slot_hint(job: &Job, inputs: &[PathBuf], workers: usize) -> Option<SlotHint> {
    FirstFile::new(job, inputs).slot_hint(workers, 1, 1)
}

/// The header of the first DICOM file found under `inputs`; `None` when there is none or it
/// cannot be read (the loaders will open it again and report it).
fn first_file_info(job: &Job, inputs: &[PathBuf]) -> Option<crate::decode::ImageInfo> {
    let mut first = None;
    let never = AtomicBool::new(false);
    crate::source::scan(inputs, Some(&job.output.dir), &never, |item| {
        if let crate::source::ScanItem::Dicom(c) = item {
            first = Some(c);
            return false;
        }
        true
    });
    let c = first?;
    let limits = crate::decode::DecodeLimits {
        max_frame_bytes: job.pipeline.max_frame_bytes,
        damaged: job.decode.damaged,
    };
    // A hostile first file must not take the run down before it starts: the loaders will
    // open it again and report it.
    let info = std::panic::catch_unwind(|| {
        crate::decode::ImageFile::open(&c.path, c.kind.clone(), limits)
            .ok()
            .map(|f| f.info.clone())
    })
    .ok()??;
    Some(info)
}

/// `options` with `gpu.decode_streams` streams per GPU when the job's first file is JPEG 2000
/// that the GPU will decode (nvJPEG2000 found, `gpu.decode` not "none"): one decode takes
/// milliseconds on a few multiprocessors, so throughput comes from many at once, where the two
/// streams that suit uncompressed slices would leave the GPU idle.
fn with_decode_streams(options: &BackendOptions, first: &FirstFile) -> Option<BackendOptions> {
    let gpu = &options.gpu;
    if options.choice == BackendChoice::Cpu
        || gpu.decode == GpuDecode::None
        || gpu.decode_streams <= gpu.streams
        || first.inputs.is_empty()
    {
        return None;
    }
    let info = first.info()?;
    if GpuCodec::of(&info.transfer_syntax) != Some(GpuCodec::Jpeg2000) {
        return None;
    }
    crate::backend::cuda::libs::open(&["libnvjpeg2k.so.0"], gpu.library_path.as_deref()).ok()?;
    tracing::info!(
        "first input file is JPEG 2000: {} CUDA streams per GPU if the CUDA backend starts \
         (gpu.decode_streams)",
        gpu.decode_streams
    );
    let mut tuned = options.clone();
    tuned.gpu.streams = gpu.decode_streams;
    Some(tuned)
}

/// `options` with `gpu.encode_streams` streams per GPU when the GPU will compress fast PNG
/// (`gpu.encode` not "cpu") and the job's first frame is small and stored natively (at most
/// [`SMALL_FRAME_PIXELS`] pixels read and written): each slice then costs the shared threads
/// only a read and a write, and two render workers leave them waiting. Compressed first files
/// keep their streams: their decoders, not the workers, bound them, and the figures measured
/// for them are on `gpu.streams` (and JPEG 2000 has its own, `gpu.decode_streams`).
fn with_encode_streams(
    options: &BackendOptions,
    first: &FirstFile,
    wish: &OutputWish,
) -> Option<BackendOptions> {
    let gpu = &options.gpu;
    if gpu.encode_streams <= gpu.streams {
        return None;
    }
    let pixels = gpu_fast_png_frame_pixels(options, first, wish)?;
    if pixels > SMALL_FRAME_PIXELS {
        return None;
    }
    tracing::info!(
        "first frame has {pixels} pixels and the GPU would compress its PNG: {} CUDA streams per \
         GPU if the CUDA backend starts (gpu.encode_streams)",
        gpu.encode_streams
    );
    let mut tuned = options.clone();
    tuned.gpu.streams = gpu.encode_streams;
    Some(tuned)
}

/// The largest first frame (pixels read or written) given room for two batches per render
/// worker in the ring ([`ring_batches`]): 512², where it was measured.
pub const RING_SMALL_FRAME_PIXELS: u64 = 512 * 512;

/// Batches of room per render worker in the ring (`OutputWish::ring_batches`): 2 when the GPU
/// compresses the fast PNG of a small uncompressed first frame (at most
/// [`RING_SMALL_FRAME_PIXELS`]), 1 otherwise. Such a frame's GPU work is short (a call of 16
/// slices of 512² takes 1.1–1.4 ms on the H200), and with room for one batch per worker the
/// workers waited for slots: in a 4000 × 512² trace every slot was in flight while the four
/// workers were 72–78 % busy, and 160 slots instead of 82 kept a full batch waiting for each
/// (session 25: 16 000 × 512², 33 713 / 36 438 against 29 400 / 31 582 slices/s; session 24,
/// call 3: +22–26 % past the first round). At 1024² it gained nothing, so larger frames keep one
/// batch.
fn ring_batches(options: &BackendOptions, first: &FirstFile, wish: &OutputWish) -> usize {
    match gpu_fast_png_frame_pixels(options, first, wish) {
        Some(pixels) if pixels <= RING_SMALL_FRAME_PIXELS => 2,
        _ => 1,
    }
}

/// The first frame's pixels (the larger of those read and those written: a 2000² slice resized
/// to 512² still costs its 8 MB read, the bound at 2000²) when the GPU will compress fast PNG
/// (`gpu.encode` not "cpu") and the first file is stored natively; `None` otherwise. Compressed
/// first files are bound by their decoders, not by the render workers.
fn gpu_fast_png_frame_pixels(
    options: &BackendOptions,
    first: &FirstFile,
    wish: &OutputWish,
) -> Option<u64> {
    use crate::backend::cuda::encode::PngEffort;
    let fast_png = matches!(
        wish.gpu_encode,
        Ok(GpuEncodeWish::Png {
            effort: PngEffort::Fast,
            ..
        })
    );
    if options.choice == BackendChoice::Cpu
        || options.gpu.encode == GpuEncodeChoice::Cpu
        || !fast_png
        || first.inputs.is_empty()
    {
        return None;
    }
    let info = first.info()?;
    if !crate::decode::is_native(&info.transfer_syntax) {
        return None;
    }
    Some(
        first
            .frame_pixels()?
            .max(u64::from(info.rows) * u64::from(info.cols)),
    )
}

fn slots_beside(opts: &PipelineOptions, workers: usize, per_call: usize, batches: usize) -> usize {
    Sizing::with_workers(opts, workers)
        .with_frames_per_call(opts, per_call, batches, crate::host::available_cores())
        .slots
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::options::GpuOptions;

    #[test]
    fn auto_keeps_small_jobs_on_the_cpu() {
        let dir = crate::scratch_dir("auto-size");
        std::fs::write(dir.join("slice.dcm"), vec![0u8; 4096]).unwrap();
        let inputs = Sources::walk(std::slice::from_ref(&dir));
        let out = dir.join("out");
        let with = |bytes: Option<u64>| BackendOptions {
            gpu: GpuOptions {
                auto_min_input_bytes: bytes,
                ..GpuOptions::default()
            },
            ..BackendOptions::default()
        };
        // Default threshold (256 MiB per core): 4 KiB is small.
        let why = too_small_for_the_gpu(&with(None), &out, &inputs, false).unwrap();
        assert!(why.contains("0 MiB of input"), "{why}");
        assert!(too_small_for_the_gpu(&with(Some(4096)), &out, &inputs, false).is_none());
        assert!(too_small_for_the_gpu(&with(Some(4097)), &out, &inputs, false).is_some());
        // 0 = always the GPU; unknown inputs (library callers) = no opinion.
        assert!(too_small_for_the_gpu(&with(Some(0)), &out, &inputs, false).is_none());
        assert!(too_small_for_the_gpu(&with(None), &out, &Sources::walk(&[]), false).is_none());
        // JPEG 2000 that the GPU decodes: the default threshold is 128 times smaller; a set one
        // stays as set.
        let big = vec![0u8; (crate::host::available_cores() * (2 << 20)) + 1];
        std::fs::write(dir.join("slice.dcm"), big).unwrap();
        assert!(too_small_for_the_gpu(&with(None), &out, &inputs, true).is_none());
        assert!(too_small_for_the_gpu(&with(None), &out, &inputs, false).is_some());
        let why = too_small_for_the_gpu(&with(Some(1 << 40)), &out, &inputs, true).unwrap();
        assert!(!why.contains("JPEG 2000"), "{why}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn small_frames_compressed_on_the_gpu_get_the_encode_streams() {
        // A folder holding one synth slice of `size`².
        let slice = |name: &str, size: u32| {
            let dir = crate::scratch_dir(name);
            let opts = crate::synth::SynthOptions {
                size,
                slices: 1,
                ..Default::default()
            };
            crate::synth::write_series(&dir, &opts).unwrap();
            dir
        };
        let dir = slice("encode-streams", 64);
        let inputs = std::slice::from_ref(&dir);
        let job = Job::default();
        let png = output_wish(&OutputOptions::default());
        let streams = |options: &BackendOptions, job: &Job, wish: &OutputWish| {
            with_encode_streams(options, &FirstFile::new(job, inputs), wish).map(|o| o.gpu.streams)
        };
        let with = |f: &dyn Fn(&mut BackendOptions)| {
            let mut o = BackendOptions::default();
            f(&mut o);
            o
        };
        let defaults = BackendOptions::default();
        assert_eq!(streams(&defaults, &job, &png), Some(4));
        // Not when the writers compress, the CPU renders, the output is not fast PNG, the
        // streams are already as many, or nothing is known of the inputs.
        let cpu_encode = with(&|o| o.gpu.encode = GpuEncodeChoice::Cpu);
        assert_eq!(streams(&cpu_encode, &job, &png), None);
        let cpu = with(&|o| o.choice = BackendChoice::Cpu);
        assert_eq!(streams(&cpu, &job, &png), None);
        let more = with(&|o| o.gpu.streams = 4);
        assert_eq!(streams(&more, &job, &png), None);
        let jpeg = output_wish(&OutputOptions {
            format: OutputFormat::Jpeg,
            ..OutputOptions::default()
        });
        assert_eq!(streams(&defaults, &job, &jpeg), None);
        let balanced = output_wish(&OutputOptions {
            png_compression: PngCompression::Balanced,
            ..OutputOptions::default()
        });
        assert_eq!(streams(&defaults, &job, &balanced), None);
        assert!(with_encode_streams(&defaults, &FirstFile::new(&job, &[]), &png).is_none());
        // The larger of the input's and the output's pixels decides: resized past 1024², the
        // default streams stay, and so do large inputs resized down (below).
        let resized = |width, height| Job {
            render: crate::render::RenderOptions {
                ops: crate::render::ops::OperatorOptions {
                    resize: crate::render::ops::Resize::Exact { width, height },
                    ..Default::default()
                },
                ..Default::default()
            },
            ..Job::default()
        };
        assert_eq!(streams(&defaults, &resized(1024, 1024), &png), Some(4));
        assert_eq!(streams(&defaults, &resized(1025, 1024), &png), None);

        // Room for two batches per worker: the same frames up to 512² only.
        let batches = |options: &BackendOptions, job: &Job, wish: &OutputWish| {
            ring_batches(options, &FirstFile::new(job, inputs), wish)
        };
        assert_eq!(batches(&defaults, &job, &png), 2);
        assert_eq!(batches(&defaults, &resized(512, 512), &png), 2);
        assert_eq!(batches(&defaults, &resized(513, 512), &png), 1);
        // Whatever the streams (the rule is about the ring, not the workers' count).
        assert_eq!(batches(&more, &job, &png), 2);
        for (options, wish) in [
            (&cpu_encode, &png),
            (&cpu, &png),
            (&defaults, &jpeg),
            (&defaults, &balanced),
        ] {
            assert_eq!(batches(options, &job, wish), 1);
        }
        assert_eq!(ring_batches(&defaults, &FirstFile::new(&job, &[]), &png), 1);
        std::fs::remove_dir_all(&dir).unwrap();

        // A 1100² input resized down to 256², and a compressed (RLE) 64² input, keep theirs.
        let large = slice("encode-streams-large", 1100);
        let down = resized(256, 256);
        let first = FirstFile::new(&down, std::slice::from_ref(&large));
        assert!(with_encode_streams(&defaults, &first, &png).is_none());
        assert_eq!(ring_batches(&defaults, &first, &png), 1);
        std::fs::remove_dir_all(&large).unwrap();
        let rle = crate::scratch_dir("encode-streams-rle");
        let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/conformance/rle_gray16.dcm");
        std::fs::copy(fixture, rle.join("rle_gray16.dcm")).unwrap();
        let first = FirstFile::new(&job, std::slice::from_ref(&rle));
        assert!(first.info().is_some());
        assert!(with_encode_streams(&defaults, &first, &png).is_none());
        assert_eq!(ring_batches(&defaults, &first, &png), 1);
        std::fs::remove_dir_all(&rle).unwrap();
    }

    #[test]
    fn a_small_job_does_not_start_nvjpeg() {
        let dir = crate::scratch_dir("nvjpeg-start-size");
        std::fs::write(dir.join("slice.dcm"), vec![0u8; 4096]).unwrap();
        let inputs = Sources::walk(std::slice::from_ref(&dir));
        // 4 KiB against 16 MiB per core (the test process does not set the variable that
        // overrides it).
        if std::env::var_os("DICOMFLOW_NVJPEG_START_MIN_MIB").is_none() {
            let why = too_small_for_nvjpeg(&dir.join("out"), &inputs).unwrap_or_default();
            assert!(
                why.contains("0 MiB of input is below the")
                    && why.contains(&format!(
                        "{} MiB",
                        crate::host::available_cores() as u64 * 16
                    )),
                "{why}"
            );
        }
    }

    #[test]
    fn slot_hint_sizes_slots_for_the_first_dicom_file() {
        let dir = crate::scratch_dir("slot-hint");
        std::fs::write(dir.join("0-notes.txt"), b"not DICOM").unwrap();
        let opts = crate::synth::SynthOptions {
            size: 96,
            slices: 2,
            rgb: true,
            ..Default::default()
        };
        crate::synth::write_series(&dir.join("series"), &opts).unwrap();
        let job = Job {
            pipeline: PipelineOptions {
                loaders: 1,
                writers: 2,
                ..PipelineOptions::default()
            },
            ..Job::default()
        };
        let hint = first_file_slot_hint(&job, std::slice::from_ref(&dir), 3).unwrap();
        // RGB 8-bit: 3 bytes per pixel in, 3 out and a PNG filter byte per row; one loader +
        // 2 × 3 workers + 2 writers + 2.
        assert_eq!(hint.input, round_up(96 * 96 * 3));
        assert_eq!(hint.output, round_up(96 * 96 * 3 + 96));
        assert_eq!(hint.count, 1 + 2 * 3 + 2 + 2);
        // Workers that take 32 frames per call (nvJPEG's batches) hold 31 more slots each:
        // the hint faults them in too.
        let batched = FirstFile::new(&job, std::slice::from_ref(&dir)).slot_hint(3, 32, 1);
        assert_eq!(batched.map(|h| h.count), Some(hint.count + 3 * 31));
        // Room for two batches of 16 (small frames the GPU compresses): 31 more each.
        let two = FirstFile::new(&job, std::slice::from_ref(&dir)).slot_hint(3, 16, 2);
        assert_eq!(two.map(|h| h.count), Some(hint.count + 3 * 31));

        // Operators size the output: a resize to 300x200 needs that many pixels per slot.
        let resized = Job {
            render: crate::render::RenderOptions {
                ops: crate::render::ops::OperatorOptions {
                    resize: crate::render::ops::Resize::Exact {
                        width: 300,
                        height: 200,
                    },
                    ..Default::default()
                },
                ..Default::default()
            },
            ..job.clone()
        };
        let hint = first_file_slot_hint(&resized, std::slice::from_ref(&dir), 3).unwrap();
        assert_eq!(hint.input, round_up(96 * 96 * 3));
        assert_eq!(hint.output, round_up(300 * 200 * 3 + 200));
        // What `gpu.encode = auto` weighs for PNG: the output's pixels (after the operators).
        assert_eq!(
            FirstFile::new(&job, std::slice::from_ref(&dir)).frame_pixels(),
            Some(96 * 96)
        );
        assert_eq!(
            FirstFile::new(&resized, std::slice::from_ref(&dir)).frame_pixels(),
            Some(300 * 200)
        );

        // One open serves every step of a run: what was read stays when the file goes.
        let first = FirstFile::new(&job, std::slice::from_ref(&dir));
        assert!(first.info().is_some());
        let kept = dir.with_extension("moved");
        std::fs::rename(dir.join("series"), &kept).unwrap();
        assert_eq!(first.frame_pixels(), Some(96 * 96));
        assert_eq!(
            first.slot_hint(3, 1, 1).map(|h| h.input),
            Some(round_up(96 * 96 * 3))
        );
        std::fs::rename(&kept, dir.join("series")).unwrap();

        std::fs::remove_dir_all(dir.join("series")).unwrap();
        assert_eq!(
            first_file_slot_hint(&job, std::slice::from_ref(&dir), 3),
            None
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_output_says_which_gpu_encoder_could_run() {
        use crate::backend::cuda::encode::{GpuEncodeWish, PngEffort};
        use crate::output::options::PngFilter;
        let out = |format, png_compression, png_filter| OutputOptions {
            format,
            png_compression,
            png_filter,
            jpeg_quality: 85,
            ..OutputOptions::default()
        };
        let w = output_wish(&out(
            OutputFormat::Png,
            PngCompression::Fast,
            PngFilter::Adaptive,
        ));
        assert_eq!(w.png_filter, Some(5));
        assert_eq!(
            w.gpu_encode,
            Ok(GpuEncodeWish::Png {
                filter: 5,
                effort: PngEffort::Fast
            })
        );
        // Balanced PNG: no rows for the writers (they use the png crate on pixels), but the
        // GPU filters and compresses harder.
        let w = output_wish(&out(
            OutputFormat::Png,
            PngCompression::Balanced,
            PngFilter::Paeth,
        ));
        assert_eq!(w.png_filter, None);
        assert_eq!(
            w.gpu_encode,
            Ok(GpuEncodeWish::Png {
                filter: 4,
                effort: PngEffort::Strong
            })
        );
        let w = output_wish(&out(
            OutputFormat::Jpeg,
            PngCompression::Fast,
            PngFilter::Adaptive,
        ));
        assert_eq!(w.png_filter, None);
        assert_eq!(w.gpu_encode, Ok(GpuEncodeWish::Jpeg { quality: 85 }));
        let none = output_wish(&out(
            OutputFormat::Png,
            PngCompression::None,
            PngFilter::Adaptive,
        ));
        assert!(none
            .gpu_encode
            .unwrap_err()
            .contains("png_compression = none"));
        let tiff = output_wish(&out(
            OutputFormat::Tiff,
            PngCompression::Fast,
            PngFilter::Adaptive,
        ));
        assert!(tiff
            .gpu_encode
            .unwrap_err()
            .contains("no GPU encoder for tiff"));
    }
}
