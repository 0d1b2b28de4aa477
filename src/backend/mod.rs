//! Backends execute frame plans: the CPU reference backend, and (when a usable NVIDIA GPU is
//! present) the CUDA backend. Both implement [`Backend`]; the pipeline neither knows nor cares
//! which one it drives.

pub mod cpu;
pub mod cuda;
pub mod options;
pub mod warm;

use std::sync::Arc;
use std::time::Duration;

use crate::decode::compressed::GpuRoute;
use crate::memory::{AllocError, HostAllocator, Slot};
use crate::render::plan::{FramePlan, Window};

/// What a backend tells the user and the report about itself.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BackendInfo {
    /// "cpu" or "cuda".
    pub name: String,
    /// Devices in use (GPU names) or the CPU description.
    pub devices: Vec<String>,
    /// Transfer strategy (GPU) or "none".
    pub transfer: String,
    /// Why this backend was chosen (e.g. "auto: no libcuda").
    pub reason: String,
    /// Which compressed transfer syntaxes the GPU decodes, with the codec libraries found
    /// (name, version, path) or why one is missing; empty for the CPU backend.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub decode: Vec<String>,
    /// Who compresses the output: "cpu", or the GPU encoder and its library.
    pub encoder: String,
    /// Why that encoder (e.g. "gpu.encode = auto: libnvcomp.so.6 not found (...)").
    pub encoder_reason: String,
}

/// Time spent in the parts of rendering one frame.
#[derive(Debug, Clone, Copy, Default)]
pub struct RenderTimings {
    /// Host-to-device transfer (zero for the CPU, for mapped memory, and for frames whose PNG
    /// the GPU compresses in a batch: their copies in are timed with the batch's compute).
    pub transfer_in: Duration,
    /// GPU decode of a compressed frame (codec library, CUDA events; zero otherwise).
    pub decode: Duration,
    /// The chain itself.
    pub compute: Duration,
    /// Compression on the GPU (zero when the writers encode).
    pub encode: Duration,
    /// Device-to-host transfer.
    pub transfer_out: Duration,
}

/// Compressed bytes a GPU encoder left in the output slot instead of pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoded {
    /// A zlib stream of the PNG-filtered rows, `len` bytes at `slot.output[offset..]`: the
    /// writer wraps it in the PNG container.
    PngZlib { offset: usize, len: usize },
    /// A complete JPEG file, `len` bytes at the start of `slot.output`.
    Jpeg { len: usize },
}

/// What the writers want in a slot's output, as the pipeline derives it from the output
/// options: the render workers' side of the contract.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputWish {
    /// The PNG row filter a GPU applies after rendering so that the writers only deflate (fast
    /// PNG; see `output::encode::png_filter_mode`), `None` for plain pixels.
    pub png_filter: Option<u32>,
    /// The encoder a GPU could run for this output instead (when `gpu.encode` allows it), or
    /// why there is none.
    pub gpu_encode: Result<cuda::encode::GpuEncodeWish, String>,
    /// Output pixels of the job's first frame, when known: `gpu.encode = "auto"` compresses PNG
    /// on the GPU only for frames large enough for that to pay.
    pub first_frame_pixels: Option<u64>,
    /// Whether the job's first frame is compressed in a syntax the GPU decodes several frames
    /// at a time (nvJPEG: JPEG lossless, and baseline/extended when `gpu.decode = "all"`):
    /// the ring then holds room for such batches.
    pub first_frame_decoded_in_batches: bool,
    /// The GPU codec family of the job's first file's syntax, if it has one: with nvJPEG under
    /// `gpu.decode_start = "cpu"` its handles are made first and its start is paid off the
    /// pipeline (backend/cuda/decode/start.rs).
    pub first_frame_codec: Option<crate::decode::compressed::GpuCodec>,
    /// With `gpu.decode_start = "cpu"`: why nvJPEG is not worth starting for this job (too
    /// little input: the CPU decodes all of it), or `None` to start it.
    pub nvjpeg_start_skipped: Option<String>,
    /// Batches of room per render worker in the ring ([`Backend::ring_batches`]): 2 for small
    /// uncompressed first frames whose PNG the GPU compresses, 1 otherwise.
    pub ring_batches: usize,
}

impl Default for OutputWish {
    fn default() -> Self {
        OutputWish {
            png_filter: None,
            gpu_encode: Err("no output format given".into()),
            first_frame_pixels: None,
            first_frame_decoded_in_batches: false,
            first_frame_codec: None,
            nvjpeg_start_skipped: None,
            ring_batches: 1,
        }
    }
}

/// What rendering one frame produced besides pixels.
#[derive(Debug, Clone, Default)]
pub struct RenderOutcome {
    /// The window actually applied (automatic windows resolved), if any.
    pub window: Option<Window>,
    pub timings: RenderTimings,
    /// Device index that rendered the frame (GPU), for per-device counts.
    pub device: Option<usize>,
    /// The output slot holds the frame's rows PNG-filtered (filter type byte + residuals per
    /// row, `output_capacity` bytes) instead of pixels: the writer only deflates them.
    pub png_rows: bool,
    /// The output slot holds compressed bytes made on the GPU (takes precedence over
    /// `png_rows`).
    pub encoded: Option<Encoded>,
}

/// Why one frame could not be rendered. The pipeline reports it as that frame's failure and
/// goes on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RenderError {
    /// The plan cannot be evaluated for this frame's values (e.g. a window that does not
    /// resolve, a LUT that does not cover them).
    #[error(transparent)]
    Plan(#[from] crate::render::error::PlanError),
    /// Slot memory could not be had.
    #[error(transparent)]
    Memory(#[from] AllocError),
    /// A CUDA driver call failed.
    #[error(transparent)]
    Cuda(#[from] cuda::driver::CudaError),
    /// A CUDA call failed again after the worker freed its cached device memory.
    #[error("{0} (after freeing cached device memory)")]
    CudaAfterRetry(cuda::driver::CudaError),
    /// No transfer strategy worked on the first frame (`transfer = auto`).
    #[error("no transfer strategy worked on the first frame")]
    NoStrategy,
    /// A GPU worker's failure, naming the worker and the GPU.
    #[error("CUDA worker {worker} on GPU {gpu}: {source}")]
    OnGpu {
        worker: usize,
        gpu: usize,
        source: Box<RenderError>,
    },
    /// A compressed frame could not be decoded (the GPU codec refused it and so did the CPU
    /// decoder of its transfer syntax).
    #[error("{0}")]
    Decode(String),
    /// An invariant between the pipeline and the backend did not hold (a bug: please report).
    #[error("internal: {0}")]
    Internal(String),
}

impl RenderError {
    /// True when the GPU ran out of memory (worth freeing caches and trying once more).
    pub fn is_out_of_memory(&self) -> bool {
        match self {
            RenderError::Cuda(e) => e.is_out_of_memory(),
            RenderError::OnGpu { source, .. } => source.is_out_of_memory(),
            _ => false,
        }
    }
}

/// Why a backend or one of its workers cannot start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackendError {
    /// A CUDA driver call failed.
    #[error(transparent)]
    Cuda(#[from] cuda::driver::CudaError),
    /// The backend cannot be used here (the message says why: no driver, no device, ...).
    #[error("{0}")]
    Unavailable(String),
}

/// A compute backend.
pub trait Backend: Send + Sync {
    /// Name, devices, strategy.
    fn info(&self) -> BackendInfo;
    /// Where slot memory must come from for this backend.
    fn allocator(&self) -> Arc<dyn HostAllocator>;
    /// Creates the per-thread worker `index` (a GPU worker owns a stream).
    fn worker(&self, index: usize) -> Result<Box<dyn RenderWorker>, BackendError>;
    /// Render worker threads this backend wants by default; 0 = none, the writer threads
    /// render each frame themselves (each with its own [`Backend::worker`]).
    fn default_workers(&self) -> usize;
    /// Gives the backend the run's statistics (GPU figures are published there).
    fn attach_stats(&self, _stats: Arc<crate::observe::stats::Stats>) {}
    /// Called once after the last frame (final statistics).
    fn finish(&self) {}
    /// Takes back a render worker whose thread is done. The default drops it; the CUDA
    /// backend keeps it until the backend itself goes (never, in the command line: the
    /// process exits without tearing the driver down), so that freeing its stream, events
    /// and page-locked buffers does not hold up the end of the run.
    fn retire(&self, worker: Box<dyn RenderWorker>) {
        drop(worker);
    }
    /// Which compressed frames the loaders should leave compressed for this backend to decode
    /// (GPU codecs). The CPU backend decodes nothing itself: the loaders decode on the CPU.
    fn gpu_route(&self) -> GpuRoute {
        GpuRoute::NONE
    }
    /// What the loaders do with a file of `codec` that the route takes; asked once per such
    /// file. While the codec starts (`gpu.decode_start = "cpu"`) they decode it on the CPU.
    fn gpu_start(
        &self,
        _codec: crate::decode::compressed::GpuCodec,
    ) -> crate::decode::compressed::GpuStart {
        crate::decode::compressed::GpuStart::Now
    }
    /// A loader's copy of a frame whose codec starts ([`Backend::gpu_start`] asked for one).
    fn gpu_sample(&self, _sample: crate::decode::compressed::Sample) {}
    /// The most frames a render worker takes in one [`RenderWorker::render_batch`] call (the
    /// ring needs that many slots per worker, and one more for the frame being loaded).
    fn frames_per_call(&self) -> usize {
        1
    }
    /// How many calls' worth of frames ([`frames_per_call`](Self::frames_per_call)) the ring
    /// holds per render worker: 1, or 2 where a worker's batch is quick and its frames small,
    /// so that the next batch is loaded while one is on the GPU (`OutputWish::ring_batches`).
    fn ring_batches(&self) -> usize {
        1
    }
    /// Where the loaders can put a native frame's stored values straight into the memory of
    /// the GPU that will render it, instead of the slot (`gpu.upload`); `None` for the CPU.
    fn uploader(&self) -> Option<Arc<dyn FrameUpload>> {
        None
    }
}

/// The loaders' upload of native frames to the GPU ([`Backend::uploader`]).
pub trait FrameUpload: Send + Sync {
    /// Whether `plan`'s frame, about to be read into `slot`, goes to the GPU this way: a large
    /// frame whose stored values the GPU renders as they are.
    fn wants(&self, plan: &FramePlan, slot: &Slot) -> bool;
    /// Reads `len` bytes at `offset` of `file` into device memory kept for `slot` and returns
    /// its device address, which the loader puts in [`Slot::on_device`].
    fn upload(
        &self,
        file: &std::fs::File,
        offset: u64,
        len: usize,
        slot: &Slot,
    ) -> Result<u64, UploadError>;
}

/// Why an upload did not happen.
#[derive(Debug)]
pub enum UploadError {
    /// Reading the file failed: the frame fails as any read does.
    Read(std::io::Error),
    /// The GPU side failed: the frame is read into the slot instead, and uploads stop.
    Gpu(String),
}

/// One frame of a [`RenderWorker::render_batch`] call.
pub struct BatchFrame<'a> {
    pub plan: &'a FramePlan,
    pub slot: &'a mut Slot,
}

/// Renders frames on one thread (one CUDA stream for the GPU backend).
pub trait RenderWorker: Send {
    /// Reads `plan.input_bytes()` from `slot.input` (or, when `plan.encoded` is set, the
    /// frame's codestream, which it decodes first), writes `plan.output_bytes()` pixels to
    /// `slot.output` (or `plan.output_capacity()` bytes of filtered PNG rows, or at most that
    /// many compressed bytes, as the outcome says).
    fn render(&mut self, plan: &FramePlan, slot: &mut Slot) -> Result<RenderOutcome, RenderError>;

    /// The most frames this worker would take in one [`render_batch`](Self::render_batch)
    /// call: more than 1 where a step costs per call rather than per frame (PNG compression
    /// on the GPU, nvJPEG's batched decodes).
    fn batch_size(&self) -> usize {
        1
    }

    /// Renders several frames, as [`render`](Self::render) does each, and returns their
    /// outcomes in order. The default renders them one by one.
    fn render_batch(
        &mut self,
        frames: &mut [BatchFrame<'_>],
    ) -> Vec<Result<RenderOutcome, RenderError>> {
        frames
            .iter_mut()
            .map(|f| self.render(f.plan, f.slot))
            .collect()
    }

    /// Called by the render stage after it has handed the last call's frames on: work that
    /// would otherwise delay them (the CUDA worker's start of nvJPEG, start.rs).
    fn between_calls(&mut self) {}

    /// Called when the worker's run is over, before [`Backend::retire`] keeps it: what other
    /// workers wait for is given back now (the CUDA worker's place at nvJPEG's start gate),
    /// the memory when it is dropped.
    fn retire(&mut self) {}
}
