//! The CUDA backend: slots in mapped page-locked memory, one stream per render worker, several
//! workers per device and several devices, device memory from the stream-ordered allocator,
//! kernels compiled by NVRTC and cached. Rendering applies the same tables the CPU reference
//! builds (src/render/table.rs), so its bytes equal the CPU backend's.
//!
//! Nothing in this module touches the driver before [`driver::probe`] succeeded: on a machine
//! without libcuda, `auto` quietly picks the CPU and `cuda` is a clear error.

pub mod decode;
pub mod driver;
pub mod encode;
mod group;
pub mod libs;
pub mod nvcomp;
pub mod nvjpeg;
pub mod nvrtc;
pub mod pinned;
pub mod upload;
mod worker;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::backend::options::{
    GpuEncodeChoice, GpuOptions, GpuSelection, GpuUpload, PageLocking, Transfer,
};
use crate::backend::{Backend, BackendError, BackendInfo, OutputWish, RenderError, RenderWorker};
use crate::memory::{HeapAllocator, HostAllocator, SlotHint};
use crate::observe::stats::{GpuFigures, Stats};
use driver::{Device, MappedRegion, Module};

/// The driver's environment variable for the hardware work queues of a context.
pub const HARDWARE_QUEUES_VAR: &str = "CUDA_DEVICE_MAX_CONNECTIONS";

/// The driver's default number of hardware work queues, and its most.
const DEFAULT_QUEUES: usize = 8;
const MAX_QUEUES: usize = 32;

/// Asks the driver for a hardware work queue per stream (`streams` per device, at most 32)
/// unless the user set [`HARDWARE_QUEUES_VAR`] or the driver's 8 suffice. Streams beyond the
/// queues share them, and work on a shared queue waits for what is ahead of it even when that
/// belongs to another stream: with 16 JPEG 2000 decode streams on the driver's 8 queues, a
/// worker's copy waiting for its kernel held back other workers' decodes (512² on the H200,
/// pipeline 423–797 slices/s against 1464 with 16 or 32 queues; BENCHMARKS.md, "hardware
/// queues"). Not more than needed: each queue costs context creation time and host memory (a
/// context with 32 queues took 0.47 s to create against 0.16 s with 8, and 2000² uncompressed
/// runs of two streams lost 40 % of their whole-command rate to it).
///
/// The variable is read when a context is made, so this runs before any is: on the thread that
/// selects the backend, before the backend (or its warm start) starts threads that call CUDA.
pub fn ask_for_hardware_queues(streams: usize) {
    if streams <= DEFAULT_QUEUES || std::env::var_os(HARDWARE_QUEUES_VAR).is_some() {
        return;
    }
    let queues = streams.min(MAX_QUEUES);
    tracing::debug!("{HARDWARE_QUEUES_VAR}={queues}: a hardware queue per stream");
    std::env::set_var(HARDWARE_QUEUES_VAR, queues.to_string());
}

/// How slices reach the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Kernels read and write the mapped slots directly.
    ZeroCopy,
    /// Async copies between pinned slots and device buffers.
    Pinned,
    /// Synchronous copies between ordinary heap slots and device buffers.
    Pageable,
}

impl Strategy {
    pub fn name(self) -> &'static str {
        match self {
            Strategy::ZeroCopy => "zero-copy",
            Strategy::Pinned => "pinned",
            Strategy::Pageable => "pageable",
        }
    }
}

/// State shared by the workers of a backend.
pub(crate) struct Shared {
    devices: Vec<Arc<Device>>,
    /// The strategy in use; `None` until `auto` has measured.
    chosen: Mutex<Option<Strategy>>,
    calibration: Mutex<Vec<(Strategy, f64)>>,
    frames: Vec<AtomicU64>,
    stats: std::sync::OnceLock<Arc<Stats>>,
    pinned: Arc<dyn HostAllocator>,
    /// The PNG filter the workers apply to each frame's rows (kernels/png.cu), so the writers
    /// only deflate; `None` when the output is not a fast-compressed PNG.
    png_filter: Option<u32>,
    /// The codec libraries for compressed frames (GPU decode).
    codecs: Arc<decode::Codecs>,
    /// Frames decoded on the GPU, and frames a GPU codec left to the CPU decoder.
    gpu_decoded: AtomicU64,
    decode_fallbacks: AtomicU64,
    /// GPU compression calls made for PNG output (fdeflate kernels or nvCOMP), and the frames
    /// they compressed.
    png_calls: Calls,
    /// nvJPEG calls that decoded several frames, and those frames.
    decode_calls: Calls,
    /// The encoder the workers run after rendering, when the GPU encodes.
    encoder: Option<GpuEncoder>,
    /// What [`BackendInfo::encoder`] and `encoder_reason` say.
    encoder_line: (String, String),
    /// The loaders' upload of large native frames (`gpu.upload`), with one GPU.
    uploader: Option<Arc<upload::Uploader>>,
}

/// A GPU encoder with its library loaded.
#[derive(Clone)]
pub(crate) enum GpuEncoder {
    Png {
        deflater: encode::Deflater,
        filter: u32,
        /// Slices per compression call (`gpu.encode_batch`).
        batch: usize,
    },
    /// One nvJPEG handle per device (in `Shared::devices` order).
    Jpeg {
        nvjpeg: Vec<Arc<nvjpeg::Nvjpeg>>,
        quality: u8,
    },
}

/// The smallest frame (output pixels) whose PNG `gpu.encode = "auto"` compresses with nvCOMP
/// (`balanced` and `best`). nvCOMP costs milliseconds per call, and batching
/// (`gpu.encode_batch`) spreads that over many slices, but on small slices the CUDA backend with
/// the writers compressing stays ahead (H200 host, pipeline slices/s, GPU PNG against CUDA +
/// CPU PNG in the same call: 512² 8500–14700 against 17200–24000; 1024² 4360–4850 against
/// 6490–6820; 1448² 3230–3830 against 3470–3670, a tie; 2000² 2250–2400 against 1800–1920, the
/// GPU 1.25× ahead). The `fast` level's fdeflate kernels have no such floor.
pub const AUTO_GPU_PNG_MIN_PIXELS: u64 = 2000 * 2000;

/// Why `gpu.encode = "auto"` leaves `balanced`/`best` PNG to the CPU encoders (frames under
/// [`AUTO_GPU_PNG_MIN_PIXELS`]). JPEG (nvJPEG, 0.1–0.2 ms per slice) and `fast` PNG (the
/// fdeflate kernels) win at every size and stay on the GPU.
pub const AUTO_PNG_ON_CPU: &str = "gpu.encode = auto: balanced/best PNG of frames under \
    2000 x 2000 pixels stays on the CPU encoders, which beat nvCOMP end to end there \
    (BENCHMARKS.md); gpu.encode = gpu uses nvCOMP";

/// Frames a render worker decodes in one call of nvJPEG's batched decoders: one call of 32
/// 512² lossless frames took 2.0 ms on the H200 against 1.3 ms for one (`bench decode
/// --batches 1,…,64`: 0.064 ms per frame at 32, 0.044 at 64, with the ring's memory growing
/// by as many slots per worker).
pub const DECODE_BATCH_MAX: usize = 32;

/// The frames per render call a CUDA backend made with `gpu` for `wish` will take
/// ([`Backend::frames_per_call`]), decided without loading a library: `gpu.encode_batch` when
/// its workers would compress PNG on the GPU (if nvCOMP then does not load, for balanced/best, the ring is merely
/// larger than needed), [`DECODE_BATCH_MAX`] when they would decode the input with nvJPEG.
pub fn frames_per_call_for(gpu: &GpuOptions, wish: &OutputWish) -> usize {
    let png = matches!(wish.gpu_encode, Ok(encode::GpuEncodeWish::Png { .. }));
    let on_gpu = match gpu.encode {
        GpuEncodeChoice::Gpu => true,
        GpuEncodeChoice::Auto => auto_png_on_gpu(wish),
        GpuEncodeChoice::Cpu => false,
    };
    let encode = if png && on_gpu {
        gpu.encode_batch.max(1)
    } else {
        1
    };
    let decode = if wish.first_frame_decoded_in_batches {
        DECODE_BATCH_MAX
    } else {
        1
    };
    encode.max(decode)
}

/// Whether `gpu.encode = "auto"` compresses this output's PNG on the GPU: always at the `fast`
/// level (the fdeflate kernels), else frames of at least [`AUTO_GPU_PNG_MIN_PIXELS`] (an
/// unknown size counts as small).
fn auto_png_on_gpu(wish: &OutputWish) -> bool {
    matches!(
        wish.gpu_encode,
        Ok(encode::GpuEncodeWish::Png {
            effort: encode::PngEffort::Fast,
            ..
        })
    ) || wish.first_frame_pixels.unwrap_or(0) >= AUTO_GPU_PNG_MIN_PIXELS
}

/// Loads the library of the encoder `wish` names (when `gpu.encode` allows it) for `devices`:
/// the encoder, and what the run should say about it. With `gpu.encode = "gpu"` a library that
/// does not load is an error; with `auto` the writers encode and the reason says why, and PNG
/// stays with the writers ([`AUTO_PNG_ON_CPU`]).
fn load_encoder(
    gpu: &GpuOptions,
    wish: &OutputWish,
    devices: &[Arc<Device>],
) -> Result<(Option<GpuEncoder>, (String, String)), String> {
    let cpu = |why: String| Ok((None, ("cpu".to_string(), why)));
    if gpu.encode == GpuEncodeChoice::Cpu {
        return cpu("gpu.encode = cpu".into());
    }
    let want = match &wish.gpu_encode {
        Ok(w) => *w,
        Err(why) if gpu.encode == GpuEncodeChoice::Gpu => {
            return Err(format!("gpu.encode = gpu, but {why}"))
        }
        Err(why) => return cpu(format!("gpu.encode = auto: {why}")),
    };
    if gpu.encode == GpuEncodeChoice::Auto {
        if let encode::GpuEncodeWish::Png { .. } = want {
            if !auto_png_on_gpu(wish) {
                return cpu(AUTO_PNG_ON_CPU.into());
            }
        }
    }
    let mode = match gpu.encode {
        GpuEncodeChoice::Gpu => "gpu.encode = gpu",
        _ => "gpu.encode = auto",
    };
    let loaded = match want {
        encode::GpuEncodeWish::Png {
            filter,
            effort: encode::PngEffort::Fast,
        } => Ok((
            GpuEncoder::Png {
                deflater: encode::Deflater::Fdeflate,
                filter,
                batch: gpu.encode_batch.max(1),
            },
            "gpu: fdeflate kernels (the CPU's fast PNG, byte for byte)".to_string(),
        )),
        encode::GpuEncodeWish::Png { filter, effort } => {
            nvcomp::Nvcomp::load(gpu.library_path.as_deref()).map(|lib| {
                let line = format!(
                    "gpu: nvCOMP {} gzip, algorithm {} ({})",
                    lib.version,
                    effort.algorithm(),
                    lib.path.display()
                );
                (
                    GpuEncoder::Png {
                        deflater: encode::Deflater::Nvcomp {
                            lib: Arc::new(lib),
                            algorithm: effort.algorithm(),
                            zlib_header: effort.zlib_header(),
                        },
                        filter,
                        batch: gpu.encode_batch.max(1),
                    },
                    line,
                )
            })
        }
        encode::GpuEncodeWish::Jpeg { quality } => {
            let mut handles = Vec::new();
            let mut failure = None;
            for d in devices {
                let opened = d
                    .bind()
                    .map_err(|e| e.to_string())
                    .and_then(|()| nvjpeg::Nvjpeg::load(gpu.library_path.as_deref()));
                match opened {
                    Ok(lib) => handles.push(Arc::new(lib)),
                    Err(e) => {
                        failure = Some(e);
                        break;
                    }
                }
            }
            match (failure, handles.first()) {
                (None, Some(first)) => {
                    let line = format!(
                        "gpu: nvJPEG {} baseline, quality {quality} ({})",
                        first.version,
                        first.path.display()
                    );
                    Ok((
                        GpuEncoder::Jpeg {
                            nvjpeg: handles,
                            quality,
                        },
                        line,
                    ))
                }
                (Some(e), _) => Err(e),
                (None, None) => Err("no device".into()),
            }
        }
    };
    match loaded {
        Ok((encoder, line)) => Ok((Some(encoder), (line, mode.to_string()))),
        Err(why) if gpu.encode == GpuEncodeChoice::Gpu => Err(format!("{mode}: {why}")),
        Err(why) => {
            tracing::warn!("{mode}: {why}; the CPU encodes");
            cpu(format!("{mode}: {why}"))
        }
    }
}

impl Shared {
    /// Whether the strategy is known (set, or chosen by the first frame).
    fn decided(&self) -> bool {
        self.chosen.lock().map_or(true, |c| c.is_some())
    }

    /// The strategy to use; the first caller under `auto` takes `preferred` when it has one
    /// (a strategy its frames need, not a measured choice), or measures the candidates with
    /// `measure` while the others wait for its decision.
    fn strategy(
        &self,
        preferred: Option<Strategy>,
        measure: impl FnOnce(&[Strategy]) -> Vec<(Strategy, f64)>,
    ) -> Result<Strategy, RenderError> {
        let mut chosen = self
            .chosen
            .lock()
            .map_err(|_| RenderError::Internal("strategy lock poisoned".into()))?;
        if let Some(s) = *chosen {
            return Ok(s);
        }
        if let Some(s) = preferred {
            tracing::info!(
                "transfer = auto: using {} without measuring: the GPU compresses PNG frames \
                 rendered in groups, which read their values in place",
                s.name()
            );
            *chosen = Some(s);
            return Ok(s);
        }
        let table = measure(&[Strategy::ZeroCopy, Strategy::Pinned]);
        let best = table
            .iter()
            .filter(|(_, ms)| ms.is_finite())
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map(|x| x.0)
            .ok_or(RenderError::NoStrategy)?;
        let summary: Vec<String> = table
            .iter()
            .map(|(s, ms)| format!("{} {:.3} ms", s.name(), ms))
            .collect();
        tracing::info!(
            "transfer = auto: measured on the first frame: {}; using {}",
            summary.join(", "),
            best.name()
        );
        if let Ok(mut c) = self.calibration.lock() {
            *c = table;
        }
        *chosen = Some(best);
        Ok(best)
    }

    /// Publishes device names, strategy, pool statistics and per-device counts.
    fn publish(&self) {
        let Some(stats) = self.stats.get() else {
            return;
        };
        let pools = self
            .devices
            .iter()
            .map(|d| {
                driver::pool_stats(d)
                    .map(|p| {
                        [
                            p.reserved_current,
                            p.used_current,
                            p.reserved_high,
                            p.used_high,
                        ]
                    })
                    .unwrap_or_default()
            })
            .collect();
        let strategy = self
            .chosen
            .lock()
            .ok()
            .and_then(|c| *c)
            .map(|s| s.name().to_string())
            .unwrap_or_else(|| "auto (measuring)".into());
        stats.set_gpu(GpuFigures {
            devices: self
                .devices
                .iter()
                .map(|d| format!("{}: {}", d.ordinal, d.name))
                .collect(),
            strategy,
            pools,
            pinned_bytes: self.pinned.bytes_in_use(),
            pinned_alloc_ms: self.pinned.allocation_time().as_secs_f64() * 1e3,
            frames_per_device: self
                .frames
                .iter()
                .map(|f| f.load(Ordering::Relaxed))
                .collect(),
            decode: self.codecs.describe(),
            codecs: self.codecs.short(),
            frames_gpu_decoded: self.gpu_decoded.load(Ordering::Relaxed),
            frames_decode_fallback: self.decode_fallbacks.load(Ordering::Relaxed),
            frames_uploaded: self
                .uploader
                .as_ref()
                .map_or(0, |u| u.frames.load(Ordering::Relaxed)),
            encoder: match &self.encoder {
                None => "CPU".into(),
                Some(GpuEncoder::Png { deflater, .. }) => format!("GPU, {}", deflater.describe()),
                Some(GpuEncoder::Jpeg { nvjpeg, .. }) => format!(
                    "GPU, nvJPEG {}",
                    nvjpeg.first().map(|l| l.version.as_str()).unwrap_or("?")
                ),
            },
        });
    }
}

/// Runs the apply kernel once on a scrap device buffer from the stream-ordered pool. The first
/// launch in a context costs ~12 ms on the H200 (lazy driver set-up); paid here, during start-up,
/// it no longer delays the pipeline's first frames on every stream at once.
fn warm_up(device: &Arc<Device>, module: &Module) -> Result<(), driver::CudaError> {
    device.bind()?;
    let stream = driver::Stream::new(device)?;
    let f = module.function(c"gray_apply_u16")?;
    {
        let scrap = driver::DeviceBuffer::alloc(&stream, 64 << 10)?;
        let p = scrap.ptr();
        let args = driver::Args::default()
            .u64(p)
            .u64(p + (16 << 10))
            .u64(64)
            .u32(0)
            .u32(0xffff)
            .u64(p + (32 << 10));
        driver::launch(&f, 1, 256, 0, &stream, args)?;
    }
    stream.synchronize()
}

/// Maps and faults in slot memory for `hint` (input and output buffer of every slot, within
/// `budget` bytes). Needs no CUDA context; the regions are registered once the backend is up.
fn prefault_slots(hint: SlotHint, budget: u64) -> Vec<MappedRegion> {
    let mut regions = Vec::with_capacity(2 * hint.count);
    let mut total = 0u64;
    for _ in 0..hint.count {
        for len in [hint.input, hint.output] {
            total += MappedRegion::mapped_size(len) as u64;
            if total > budget {
                return regions;
            }
            match MappedRegion::new(len) {
                Ok(r) => regions.push(r),
                Err(_) => return regions,
            }
        }
    }
    regions
}

/// GPUs this process will see, counted without touching the driver (0 if unknown): the
/// `/dev/nvidiaN` device nodes, or fewer when `CUDA_VISIBLE_DEVICES` lists fewer.
pub(crate) fn visible_gpus() -> usize {
    let nodes = std::fs::read_dir("/dev")
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter(|e| {
                    let n = e.file_name();
                    let n = n.to_string_lossy();
                    n.strip_prefix("nvidia")
                        .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
                })
                .count()
        })
        .unwrap_or(0);
    visible_of(nodes, std::env::var("CUDA_VISIBLE_DEVICES").ok().as_deref())
}

/// `nodes` device nodes, limited by a `CUDA_VISIBLE_DEVICES` list when there is one.
fn visible_of(nodes: usize, cuda_visible_devices: Option<&str>) -> usize {
    match cuda_visible_devices {
        Some(list) => nodes.min(list.split(',').filter(|d| !d.trim().is_empty()).count()),
        None => nodes,
    }
}

/// The pinned-memory budget in bytes.
fn pinned_budget(gpu: &GpuOptions) -> u64 {
    if gpu.pinned_budget_bytes > 0 {
        gpu.pinned_budget_bytes
    } else {
        pinned::default_budget()
    }
}

/// Library calls that took several frames each, counted across the workers.
#[derive(Default)]
struct Calls {
    calls: AtomicU64,
    frames: AtomicU64,
}

impl Calls {
    /// One call for `frames` frames.
    fn add(&self, frames: usize) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.frames.fetch_add(frames as u64, Ordering::Relaxed);
    }

    /// "WHAT: F frames in C CALLS (X per call)", when there was a call (the tests read it).
    fn said(&self, what: &str, calls_of: &str) -> Option<String> {
        let (calls, frames) = (
            self.calls.load(Ordering::Relaxed),
            self.frames.load(Ordering::Relaxed),
        );
        (calls > 0).then(|| {
            format!(
                "{what}: {frames} frames in {calls} {calls_of} ({:.1} per call)",
                frames as f64 / calls as f64
            )
        })
    }
}

/// The CUDA backend.
pub struct CudaBackend {
    shared: Arc<Shared>,
    pinned: Arc<pinned::PinnedAllocator>,
    modules: Vec<Arc<Module>>,
    allocator: Arc<dyn HostAllocator>,
    streams: usize,
    transfer: Transfer,
    kernels: String,
    reason: String,
    /// Frames per call of the nvJPEG batched decoders the first file's syntax asks for
    /// ([`DECODE_BATCH_MAX`], else 1): the ring holds room for such batches.
    decode_batch: usize,
    /// [`Backend::ring_batches`] when the workers compress PNG (`OutputWish::ring_batches`).
    ring_batches: usize,
    /// Render workers whose run is over ([`Backend::retire`]), kept until the backend goes.
    retired: std::sync::Mutex<Vec<Box<dyn RenderWorker>>>,
}

/// The most retired workers a backend keeps (each holds its batch buffers in device memory): a
/// process that runs the pipeline again and again with one backend (the command line runs it
/// once) frees the oldest as it goes.
const RETIRED_MAX: usize = 16;

impl CudaBackend {
    /// Opens the selected devices, compiles or loads the kernels, sets up the pools, and loads
    /// the GPU encoder `wish` asks for (when `gpu.encode` allows it). Without a GPU encoder the
    /// workers leave pixels, or rows filtered with `wish.png_filter` for the writers to deflate.
    /// Fails (with the reason) when CUDA is not usable here.
    pub fn new(gpu: &GpuOptions, wish: &OutputWish, reason: &str) -> Result<CudaBackend, String> {
        let started = std::time::Instant::now();
        let count = driver::probe()?;
        let probed = started.elapsed();
        let ordinals: Vec<usize> = match &gpu.gpus {
            GpuSelection::All => (0..count).collect(),
            GpuSelection::List(l) => {
                if let Some(bad) = l.iter().find(|&&i| i >= count) {
                    return Err(format!("GPU {bad} requested, this machine has {count}"));
                }
                l.clone()
            }
        };
        let mut devices = Vec::new();
        for &i in &ordinals {
            let d = Device::open(i).map_err(|e| format!("GPU {i}: {e}"))?;
            driver::set_release_threshold(&d, gpu.release_threshold_bytes)
                .map_err(|e| format!("GPU {i}: {e}"))?;
            devices.push(d);
        }
        let opened = started.elapsed();
        let cache = nvrtc::cache_dir(gpu.kernel_cache.as_deref());
        let mut modules = Vec::new();
        let mut kernels = String::new();
        for d in &devices {
            let (image, origin) = nvrtc::module_image(d.compute_capability, &cache)?;
            if kernels.is_empty() {
                kernels = if origin.cache_hit {
                    format!("kernel cache hit ({})", origin.cache_file.display())
                } else {
                    format!(
                        "kernels compiled in {:.0} ms, cached at {}",
                        origin.compile_ms,
                        origin.cache_file.display()
                    )
                };
                tracing::info!("{kernels}");
            }
            modules.push(Module::load(d, &image).map_err(|e| format!("GPU {}: {e}", d.ordinal))?);
        }
        let modules_loaded = started.elapsed();
        for (d, m) in devices.iter().zip(&modules) {
            warm_up(d, m).map_err(|e| format!("GPU {}: first launch: {e}", d.ordinal))?;
        }
        let (encoder, encoder_line) = load_encoder(gpu, wish, &devices)?;
        let loaded = started.elapsed();
        tracing::info!("encoder: {} ({})", encoder_line.0, encoder_line.1);
        tracing::info!(
            "CUDA ready in {:.0} ms (driver {:.0} ms, devices {:.0} ms, kernels {:.0} ms, \
             first launch {:.0} ms)",
            loaded.as_secs_f64() * 1e3,
            probed.as_secs_f64() * 1e3,
            (opened - probed).as_secs_f64() * 1e3,
            (modules_loaded - opened).as_secs_f64() * 1e3,
            (loaded - modules_loaded).as_secs_f64() * 1e3
        );
        kernels.push_str(&format!(
            "; CUDA ready in {:.0} ms",
            loaded.as_secs_f64() * 1e3
        ));
        let budget = pinned_budget(gpu);
        let pinned = Arc::new(pinned::PinnedAllocator::new(
            devices[0].clone(),
            gpu.page_locking,
            budget,
        ));
        let allocator: Arc<dyn HostAllocator> = if gpu.transfer == Transfer::Pageable {
            Arc::new(HeapAllocator::default())
        } else {
            pinned.clone()
        };
        let chosen = match gpu.transfer {
            Transfer::Auto => None,
            Transfer::ZeroCopy => Some(Strategy::ZeroCopy),
            Transfer::Pinned => Some(Strategy::Pinned),
            Transfer::Pageable => Some(Strategy::Pageable),
        };
        let codecs = Arc::new(decode::Codecs::load(
            gpu,
            devices.len(),
            wish.first_frame_codec,
            wish.nvjpeg_start_skipped.clone(),
        ));
        codecs.prewarm(&devices);
        for line in codecs.describe() {
            tracing::info!("decode: {line}");
        }
        // One GPU only: the loader does not know which GPU's worker will render the frame.
        let uploader = match (&devices[..], &modules[..]) {
            ([device], [module])
                if gpu.upload == GpuUpload::Auto && gpu.transfer != Transfer::Pageable =>
            {
                match upload::Uploader::new(device.clone(), module.clone()) {
                    Ok(u) => Some(Arc::new(u)),
                    Err(e) => {
                        tracing::warn!("the loaders will not upload frames to the GPU: {e}");
                        None
                    }
                }
            }
            _ => None,
        };
        let shared = Arc::new(Shared {
            frames: devices.iter().map(|_| AtomicU64::new(0)).collect(),
            devices,
            chosen: Mutex::new(chosen),
            calibration: Mutex::new(Vec::new()),
            stats: std::sync::OnceLock::new(),
            pinned: allocator.clone(),
            png_filter: wish.png_filter,
            codecs,
            gpu_decoded: AtomicU64::new(0),
            decode_fallbacks: AtomicU64::new(0),
            png_calls: Calls::default(),
            decode_calls: Calls::default(),
            encoder,
            encoder_line,
            uploader,
        });
        shared.publish();
        Ok(CudaBackend {
            shared,
            pinned,
            modules,
            allocator,
            streams: gpu.streams,
            transfer: gpu.transfer,
            kernels,
            reason: reason.to_string(),
            decode_batch: if wish.first_frame_decoded_in_batches {
                DECODE_BATCH_MAX
            } else {
                1
            },
            ring_batches: wish.ring_batches.max(1),
            retired: std::sync::Mutex::new(Vec::new()),
        })
    }

    /// [`CudaBackend::new`], while another thread asks `hint` how large the first frames'
    /// slots will be (given the render worker count) and faults in slot memory for them, so
    /// that the first frames do not wait for it (`register` page-locking, transfers that use
    /// pinned slots; the ring has `streams` × GPUs render workers, the GPUs of `gpus = "all"`
    /// counted from their device nodes before the driver can say).
    pub fn new_prepared(
        gpu: &GpuOptions,
        wish: &OutputWish,
        reason: &str,
        hint: Option<&(dyn Fn(usize) -> Option<SlotHint> + Sync)>,
    ) -> Result<CudaBackend, String> {
        let hint = hint.filter(|_| {
            gpu.page_locking == PageLocking::Register
                && gpu.transfer != Transfer::Pageable
                && driver::libraries().is_ok()
        });
        let workers = gpu.streams
            * match &gpu.gpus {
                GpuSelection::All => visible_gpus().max(1),
                GpuSelection::List(l) => l.len().max(1),
            };
        std::thread::scope(|s| {
            let prefault = hint.map(|hint| {
                s.spawn(move || {
                    hint(workers)
                        .map(|h| prefault_slots(h, pinned_budget(gpu)))
                        .unwrap_or_default()
                })
            });
            let backend = CudaBackend::new(gpu, wish, reason)?;
            if let Some(handle) = prefault {
                let regions = handle.join().unwrap_or_default();
                let (count, t) = (regions.len(), std::time::Instant::now());
                backend.pinned.stock(regions);
                tracing::info!(
                    "slot memory faulted in during start-up: {count} buffers, registered in {:.1} ms",
                    t.elapsed().as_secs_f64() * 1e3
                );
            }
            Ok(backend)
        })
    }

    /// Frames rendered per device so far.
    pub fn frames_per_device(&self) -> Vec<(usize, u64)> {
        self.shared
            .devices
            .iter()
            .zip(&self.shared.frames)
            .map(|(d, f)| (d.ordinal, f.load(Ordering::Relaxed)))
            .collect()
    }
}

impl Backend for CudaBackend {
    fn info(&self) -> BackendInfo {
        let chosen = self.shared.chosen.lock().ok().and_then(|c| *c);
        let calibration = self
            .shared
            .calibration
            .lock()
            .map(|c| c.clone())
            .unwrap_or_default();
        let transfer = match (self.transfer, chosen) {
            (Transfer::Auto, Some(s)) if calibration.is_empty() => {
                format!(
                    "auto -> {} (frames rendered in groups, not measured)",
                    s.name()
                )
            }
            (Transfer::Auto, Some(s)) => {
                let t: Vec<String> = calibration
                    .iter()
                    .map(|(s, ms)| format!("{} {:.3} ms", s.name(), ms))
                    .collect();
                format!("auto -> {} ({})", s.name(), t.join(", "))
            }
            (Transfer::Auto, None) => "auto".into(),
            (_, Some(s)) => s.name().into(),
            (_, None) => "auto".into(),
        };
        BackendInfo {
            name: "cuda".into(),
            devices: self
                .shared
                .devices
                .iter()
                .map(|d| {
                    format!(
                        "GPU {}: {} (sm_{}{}, {} GiB)",
                        d.ordinal,
                        d.name,
                        d.compute_capability.0,
                        d.compute_capability.1,
                        d.total_mem >> 30
                    )
                })
                .collect(),
            transfer,
            reason: format!("{}; {}", self.reason, self.kernels),
            decode: self.shared.codecs.describe(),
            encoder: self.shared.encoder_line.0.clone(),
            encoder_reason: self.shared.encoder_line.1.clone(),
        }
    }

    fn gpu_route(&self) -> crate::decode::compressed::GpuRoute {
        self.shared.codecs.route()
    }

    fn gpu_start(
        &self,
        codec: crate::decode::compressed::GpuCodec,
    ) -> crate::decode::compressed::GpuStart {
        self.shared.codecs.start(codec)
    }

    fn gpu_sample(&self, sample: crate::decode::compressed::Sample) {
        self.shared.codecs.offer(sample);
    }

    fn uploader(&self) -> Option<Arc<dyn crate::backend::FrameUpload>> {
        self.shared
            .uploader
            .clone()
            .map(|u| u as Arc<dyn crate::backend::FrameUpload>)
    }

    fn ring_batches(&self) -> usize {
        match &self.shared.encoder {
            Some(GpuEncoder::Png { .. }) => self.ring_batches,
            _ => 1,
        }
    }

    fn frames_per_call(&self) -> usize {
        let encode = match &self.shared.encoder {
            Some(GpuEncoder::Png { batch, .. }) => *batch,
            _ => 1,
        };
        // As `frames_per_call_for` says for the warm start: a CUDA backend asked for by name
        // left the ring at 20 slots for nvJPEG's batches of up to 32 (H200, 3000 × 512² JPEG
        // lossless: 9.3 frames per call, 2296 pipeline slices/s, against 31.9 and 2850 with
        // room for full batches).
        encode.max(self.decode_batch)
    }

    fn allocator(&self) -> Arc<dyn HostAllocator> {
        self.allocator.clone()
    }

    fn worker(&self, index: usize) -> Result<Box<dyn RenderWorker>, BackendError> {
        let slot = index % self.shared.devices.len();
        let w =
            worker::CudaWorker::new(index, slot, self.shared.clone(), self.modules[slot].clone())?;
        Ok(Box::new(w))
    }

    fn default_workers(&self) -> usize {
        self.streams * self.shared.devices.len()
    }

    /// Kept, not dropped: a GPU PNG worker's teardown (its stream, events, page-locked staging,
    /// each freed under the driver's lock, four workers at once) took 0.7–1.6 ms after the last
    /// file of a 4000 × 512² run on the H200, against ~0.1 ms kept (session 33).
    fn retire(&self, mut worker: Box<dyn RenderWorker>) {
        worker.retire();
        let mut retired = self.retired.lock().unwrap_or_else(|e| e.into_inner());
        if retired.len() >= RETIRED_MAX {
            let oldest = retired.remove(0);
            drop(retired);
            drop(oldest);
            return;
        }
        retired.push(worker);
    }

    fn attach_stats(&self, stats: Arc<Stats>) {
        let _ = self.shared.stats.set(stats);
        self.shared.publish();
    }

    fn finish(&self) {
        if let Some(u) = &self.shared.uploader {
            u.said();
        }
        let (sync, stream, pinned) = decode::alloc::calls();
        if sync + stream + pinned > 0 {
            let [t_sync, t_stream, t_pinned, t_free] = decode::alloc::millis();
            tracing::info!(
                "codec library allocations: {sync} device (synchronous, {t_sync:.1} ms), \
                 {stream} device (stream-ordered, {t_stream:.1} ms), {pinned} page-locked \
                 ({t_pinned:.1} ms); page-locked frees {t_free:.1} ms"
            );
        }
        for line in [
            self.shared.codecs.start_said(),
            decode::nvjpeg::BATCH_TIMES.said(),
            self.shared.png_calls.said("GPU PNG", "compression calls"),
            self.shared
                .decode_calls
                .said("GPU decode", "batched nvJPEG calls"),
        ]
        .into_iter()
        .flatten()
        {
            tracing::info!("{line}");
        }
        self.pinned.clear_stock();
        self.shared.publish();
        tracing::info!(
            "slot memory: {} MiB {} in {:.1} ms",
            self.allocator.bytes_in_use() >> 20,
            self.allocator.kind(),
            self.allocator.allocation_time().as_secs_f64() * 1e3
        );
    }
}

#[cfg(test)]
mod tests {
    use super::visible_of;

    #[test]
    fn visible_gpus_respect_cuda_visible_devices() {
        assert_eq!(visible_of(2, None), 2);
        assert_eq!(visible_of(2, Some("1")), 1);
        assert_eq!(visible_of(2, Some("0,1")), 2);
        assert_eq!(visible_of(1, Some("0,1,2")), 1);
        assert_eq!(visible_of(2, Some("")), 0);
        assert_eq!(visible_of(0, None), 0);
    }

    #[test]
    fn the_encoder_choice_says_why_the_cpu_encodes() {
        use super::encode::{GpuEncodeWish, PngEffort};
        use super::{load_encoder, GpuEncodeChoice, GpuOptions, OutputWish};
        let dir = crate::scratch_dir("encoder-choice");
        let png = OutputWish {
            png_filter: Some(5),
            gpu_encode: Ok(GpuEncodeWish::Png {
                filter: 5,
                effort: PngEffort::Fast,
            }),
            first_frame_pixels: Some(512 * 512),
            first_frame_decoded_in_batches: false,
            first_frame_codec: None,
            nvjpeg_start_skipped: None,
            ring_batches: 1,
        };
        let gpu = |encode| GpuOptions {
            encode,
            library_path: Some(dir.clone()),
            ..GpuOptions::default()
        };
        let (enc, (line, why)) = load_encoder(&gpu(GpuEncodeChoice::Cpu), &png, &[]).unwrap();
        assert!(enc.is_none());
        assert_eq!((line.as_str(), why.as_str()), ("cpu", "gpu.encode = cpu"));
        let tiff = OutputWish {
            gpu_encode: Err("no GPU encoder for tiff output".into()),
            ..png.clone()
        };
        let (_, (line, why)) = load_encoder(&gpu(GpuEncodeChoice::Auto), &tiff, &[]).unwrap();
        assert_eq!(line, "cpu");
        assert_eq!(why, "gpu.encode = auto: no GPU encoder for tiff output");
        let err = load_encoder(&gpu(GpuEncodeChoice::Gpu), &tiff, &[])
            .err()
            .unwrap();
        assert!(
            err.contains("gpu.encode = gpu, but no GPU encoder"),
            "{err}"
        );
        // Fast PNG: the fdeflate kernels under auto and gpu, whatever the frame size, with no
        // library to load.
        for choice in [GpuEncodeChoice::Auto, GpuEncodeChoice::Gpu] {
            let (enc, (line, _)) = load_encoder(&gpu(choice), &png, &[]).unwrap();
            assert!(
                matches!(
                    enc,
                    Some(super::GpuEncoder::Png {
                        deflater: super::encode::Deflater::Fdeflate,
                        ..
                    })
                ),
                "{choice:?}"
            );
            assert!(line.contains("fdeflate kernels"), "{line}");
        }
        // Balanced PNG of small frames under auto: the CPU encoders, measured faster than
        // nvCOMP, whether it loads or not; so too when the frame size is not known.
        let strong = OutputWish {
            gpu_encode: Ok(GpuEncodeWish::Png {
                filter: 5,
                effort: PngEffort::Strong,
            }),
            ..png.clone()
        };
        let (enc, (line, why)) = load_encoder(&gpu(GpuEncodeChoice::Auto), &strong, &[]).unwrap();
        assert!(enc.is_none());
        assert_eq!(line, "cpu");
        assert_eq!(why, super::AUTO_PNG_ON_CPU);
        let unknown = OutputWish {
            first_frame_pixels: None,
            ..strong.clone()
        };
        let (enc, (_, why)) = load_encoder(&gpu(GpuEncodeChoice::Auto), &unknown, &[]).unwrap();
        assert!(enc.is_none());
        assert_eq!(why, super::AUTO_PNG_ON_CPU);
        // The ring is sized for batches exactly where the GPU would compress PNG.
        let batch = GpuOptions::default().encode_batch;
        assert_eq!(
            super::frames_per_call_for(&gpu(GpuEncodeChoice::Auto), &png),
            batch
        );
        assert_eq!(
            super::frames_per_call_for(&gpu(GpuEncodeChoice::Auto), &strong),
            1
        );
        assert_eq!(
            super::frames_per_call_for(&gpu(GpuEncodeChoice::Gpu), &strong),
            batch
        );
        assert_eq!(
            super::frames_per_call_for(&gpu(GpuEncodeChoice::Gpu), &tiff),
            1
        );
        assert_eq!(
            super::frames_per_call_for(&gpu(GpuEncodeChoice::Cpu), &png),
            1
        );
        // Input that nvJPEG decodes in batches: room for a batch whatever the encoder.
        let decoded = |w: &OutputWish| OutputWish {
            first_frame_decoded_in_batches: true,
            ..w.clone()
        };
        assert_eq!(
            super::frames_per_call_for(&gpu(GpuEncodeChoice::Cpu), &decoded(&tiff)),
            super::DECODE_BATCH_MAX
        );
        assert_eq!(
            super::frames_per_call_for(&gpu(GpuEncodeChoice::Gpu), &decoded(&png)),
            batch.max(super::DECODE_BATCH_MAX)
        );
        // Large balanced frames under auto: nvCOMP when it loads; where it does not (CI), the
        // CPU, saying which library is missing.
        let large = OutputWish {
            first_frame_pixels: Some(super::AUTO_GPU_PNG_MIN_PIXELS),
            ..strong.clone()
        };
        assert_eq!(
            super::frames_per_call_for(&gpu(GpuEncodeChoice::Auto), &large),
            batch
        );
        if super::nvcomp::Nvcomp::load(Some(&dir)).is_err() {
            let (enc, (line, why)) =
                load_encoder(&gpu(GpuEncodeChoice::Auto), &large, &[]).unwrap();
            assert!(enc.is_none());
            assert_eq!(line, "cpu");
            assert!(why.contains("libnvcomp.so.6 not found"), "{why}");
        }
        // Where libnvcomp is missing (CI), gpu refuses balanced PNG, naming the library.
        if super::nvcomp::Nvcomp::load(Some(&dir)).is_err() {
            let err = load_encoder(&gpu(GpuEncodeChoice::Gpu), &strong, &[])
                .err()
                .unwrap();
            assert!(err.contains("libnvcomp.so.6 not found"), "{err}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
