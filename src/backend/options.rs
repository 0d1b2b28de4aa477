//! Which backend renders, and how the CUDA backend uses the GPUs: transfer strategy, devices,
//! streams, page-locked memory, the memory pool, the kernel cache and where codec libraries are.

use std::path::PathBuf;

/// Which compute backend runs the render chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendChoice {
    Auto,
    Cuda,
    Cpu,
}

/// How slices reach the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Transfer {
    Auto,
    ZeroCopy,
    Pinned,
    Pageable,
}

/// How slot memory is page-locked for the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PageLocking {
    /// Ordinary memory on transparent huge pages, faulted in by the thread that needs it, then
    /// `cuMemHostRegister`ed: the driver's lock is held only for the short registration.
    Register,
    /// `cuMemHostAlloc`: the driver zeroes and pins every 4 KiB page under its lock.
    HostAlloc,
}

/// Which compressed frames the GPU decodes (`gpu.decode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum GpuDecode {
    /// Only codestreams whose decoded values equal the CPU decoders' bit for bit on every
    /// conforming decoder (reversible JPEG 2000 and HTJ2K): the output stays byte-identical to
    /// the CPU backend's.
    Lossless,
    /// Lossy codestreams too (JPEG baseline/extended, irreversible JPEG 2000), whose values may
    /// differ from the CPU decoders' (README: measured deviations), and lossless JPEG (exact
    /// from 256×256, but slower on nvJPEG than on the CPU decoders of a 16-core host).
    All,
    /// Every frame decodes on the CPU.
    None,
}

impl GpuDecode {
    /// The configuration spelling.
    pub fn name(self) -> &'static str {
        match self {
            GpuDecode::Lossless => "lossless",
            GpuDecode::All => "all",
            GpuDecode::None => "none",
        }
    }
}

/// What the loaders do with frames of the first input file's nvJPEG syntax (JPEG lossless or
/// baseline/extended, with `gpu.decode = "all"`) while nvJPEG starts (`gpu.decode_start`): a
/// handle takes about 280 ms on the H200 host and the run's first decode 320 ms, as long as
/// the CPU decoders of 16 cores need for 1500 slices of 512² JPEG lossless.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GpuDecodeStart {
    /// Decode them on the CPU until the handles exist and every render worker has decoded a
    /// copy of one of them; then the GPU takes the rest. A job under 16 MiB of input per core
    /// stays on the CPU decoders (the start would not pay). Other syntaxes wait (JPEG 2000's
    /// CPU decoder is 10–35× slower per frame than its GPU start).
    Cpu,
    /// Leave them compressed for the GPU, which decodes them once it is ready (every frame
    /// of such a syntax then goes through the GPU: what the GPU tests check).
    Wait,
}

impl GpuDecodeStart {
    /// The configuration spelling.
    pub fn name(self) -> &'static str {
        match self {
            GpuDecodeStart::Cpu => "cpu",
            GpuDecodeStart::Wait => "wait",
        }
    }
}

/// How large native frames reach the GPU (`gpu.upload`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GpuUpload {
    /// The loaders read frames of 3 MiB and more straight into GPU memory through small
    /// page-locked chunks that a kernel pulls (backend/cuda/upload.rs), on one GPU: the
    /// frame is read from the page cache once and never written to a slot.
    Auto,
    /// Every frame is read into its slot, and the render worker moves it.
    Off,
}

impl GpuUpload {
    /// The configuration spelling.
    pub fn name(self) -> &'static str {
        match self {
            GpuUpload::Auto => "auto",
            GpuUpload::Off => "off",
        }
    }
}

/// Who compresses the output images when the CUDA backend renders (`gpu.encode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GpuEncodeChoice {
    /// The GPU when the format has a GPU encoder and its library loads (fast PNG: our own
    /// kernels, no library; balanced/best PNG: nvCOMP, for frames of 2000 x 2000 pixels or
    /// more; JPEG: nvJPEG); the CPU otherwise, saying why.
    Auto,
    /// The GPU: the CUDA backend fails to start when the encoder's library does not load.
    Gpu,
    /// The writer threads, on the CPU.
    Cpu,
}

/// Which GPUs to use.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GpuSelection {
    All,
    List(Vec<usize>),
}

/// The CUDA backend's options.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct GpuOptions {
    pub transfer: Transfer,
    pub gpus: GpuSelection,
    /// Streams (render workers) per GPU.
    pub streams: usize,
    /// Page-locked slot memory allowed; 0 = a quarter of physical memory.
    pub pinned_budget_bytes: u64,
    pub page_locking: PageLocking,
    /// `auto` uses the GPU only for jobs with at least this much input; `None` = 256 MiB per
    /// core, 0 = always.
    pub auto_min_input_bytes: Option<u64>,
    /// Memory the stream-ordered pool keeps reserved across synchronizations.
    pub release_threshold_bytes: u64,
    /// Where compiled kernels are cached; `None` = `$XDG_CACHE_HOME/dicomflow`.
    #[serde(serialize_with = "crate::paths::serialize_opt")]
    pub kernel_cache: Option<PathBuf>,
    /// Folder searched first for NVIDIA's codec libraries (nvJPEG, nvJPEG2000, nvCOMP).
    #[serde(serialize_with = "crate::paths::serialize_opt")]
    pub library_path: Option<PathBuf>,
    /// Which compressed frames the GPU decodes.
    pub decode: GpuDecode,
    /// Who decodes nvJPEG's frames while its codec starts.
    pub decode_start: GpuDecodeStart,
    /// Streams per GPU when the job's first file is JPEG 2000 for the GPU to decode (each
    /// nvJPEG2000 decode takes milliseconds on a few multiprocessors, so many run at once: 32
    /// gave 1.66× the slices/s of 16 at 512², the same at 2000²); at least `streams`. The
    /// driver gives each stream a hardware queue of its own up to `CUDA_DEVICE_MAX_CONNECTIONS`,
    /// which [`crate::backend::cuda::ask_for_hardware_queues`] raises to the streams.
    pub decode_streams: usize,
    /// Streams per GPU when the GPU compresses fast PNG and the job's first frame is stored
    /// uncompressed with at most [`SMALL_FRAME_PIXELS`] pixels in and out: the shared threads then
    /// only read and write, and more workers keep them fed (H200 host: 16 000 × 512² +20–23 %
    /// pipeline slices/s on 4 streams against 2, 4000 × 1024² +4–15 %; at 2000² 4–9 % fewer, so
    /// larger frames keep `streams`; BENCHMARKS.md, "GPU encoders"). More do not help: at 4000 ×
    /// 512², 8 streams, or (an ad hoc build) 8 or 12 render workers sharing 4 streams, ran
    /// 25 244–28 305 pipeline slices/s against 4 streams' 33 482–40 617 (session 27). At least
    /// `streams`. Under `backend = "auto"` the render workers are also at least a quarter of the
    /// cores.
    pub encode_streams: usize,
    /// Who compresses PNG and JPEG output when the CUDA backend renders.
    pub encode: GpuEncodeChoice,
    /// Slices per compression call when the GPU compresses PNG: a render worker takes up to
    /// this many frames that wait in its queue and compresses them together, since nvCOMP's
    /// compression costs 2–4 ms per call whatever the slices (`bench gpu-encode --batches`,
    /// BENCHMARKS.md) and the fdeflate kernels make three launches per call. 1 compresses
    /// each slice alone.
    pub encode_batch: usize,
    /// How large native frames reach the GPU.
    pub upload: GpuUpload,
}

impl Default for GpuOptions {
    fn default() -> Self {
        GpuOptions {
            transfer: Transfer::Auto,
            gpus: GpuSelection::All,
            streams: 2,
            pinned_budget_bytes: 0,
            page_locking: PageLocking::Register,
            auto_min_input_bytes: None,
            release_threshold_bytes: 256 << 20,
            kernel_cache: None,
            library_path: None,
            decode: GpuDecode::Lossless,
            decode_start: GpuDecodeStart::Cpu,
            decode_streams: 32,
            encode_streams: 4,
            encode: GpuEncodeChoice::Auto,
            encode_batch: 16,
            upload: GpuUpload::Auto,
        }
    }
}

/// Largest first frame (output pixels) for which [`GpuOptions::encode_streams`] applies: 1024²,
/// four times the 512² slices it was measured on and a quarter of the 2000² ones it would slow.
pub const SMALL_FRAME_PIXELS: u64 = 1 << 20;

/// Which backend to use, and the GPU's options when it is CUDA.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct BackendOptions {
    #[serde(rename = "backend")]
    pub choice: BackendChoice,
    #[serde(flatten)]
    pub gpu: GpuOptions,
}

impl Default for BackendOptions {
    fn default() -> Self {
        BackendOptions {
            choice: BackendChoice::Auto,
            gpu: GpuOptions::default(),
        }
    }
}
