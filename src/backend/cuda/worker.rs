//! One CUDA render worker: a thread with its own stream on one device. It moves a slot's
//! stored values to the GPU by the chosen strategy (mapped zero-copy, async copies from pinned
//! memory, or synchronous copies from pageable memory), computes frame statistics on the GPU
//! when automatic windows need them, applies the chain's table (the same table the CPU backend
//! applies, so the bytes are identical; one per channel for window channels), applies the
//! operators (kernels/ops.cu, with the tables `render::ops` builds for the CPU too), PNG-filters
//! the rows when the output is a fast PNG (kernels/png.cu; the writer then only deflates), and
//! brings the result back. CUDA events time the transfer-in, compute and transfer-out parts.
//!
//! A frame that arrives compressed (`plan.encoded`) is first decoded by a GPU codec
//! (decode/) on the worker's stream into device memory, timed by its own pair of events; the
//! chain then reads the decoded values from there whatever the transfer strategy (which still
//! decides how the output travels). A frame the codec cannot take is decoded on the CPU into
//! the slot, and rendered like any other.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::decode::nvjpeg::{BatchPart, BATCH_TIMES};
use super::decode::{Decoded, Failure, FrameDecoder};
use super::driver::{self, Args, CudaError, DeviceBuffer, Event, Function, Module, Stream};
use super::encode::{packed_len, GpuPng, PngInput, PACKED_HEADER};
use super::group::{FrameGroup, GroupKernels, Shape};
use super::nvjpeg::{Chroma, JpegEncoder};
use super::{GpuEncoder, Shared, Strategy, DECODE_BATCH_MAX};
use crate::backend::cpu::CpuRenderer;
use crate::backend::{
    BackendError, BatchFrame, Encoded, RenderError, RenderOutcome, RenderTimings, RenderWorker,
};
use crate::decode::compressed::{EncodedFrame, GpuCodec};
use crate::memory::Slot;
use crate::render::chain::{self, Resolved, ResolvedVoi};
use crate::render::ops::Operators;
use crate::render::plan::{Chain, ColorModel, ColorPlan, FramePlan, GrayPlan, Window};
use crate::render::table::{self, IndexMap};

const BLOCK: u32 = 256;
/// Largest histogram kept in shared memory (bins × 4 bytes ≤ 48 KiB).
const SHARED_HIST_BINS: usize = 12288;

struct Kernels {
    hist_shared_u16: Function,
    hist_global_u16: Function,
    hist_shared_u8: Function,
    hist_global_u32: Function,
    apply_u16: Function,
    apply_u8: Function,
    apply_u32: Function,
    channels: Function,
    color_full: Function,
    color_422: Function,
    palette: Function,
    png_filter_rows: Function,
    copy_bytes: Function,
    ops_gather: Function,
    ops_resample_h: Function,
    ops_resample_v: Function,
}

impl Kernels {
    fn load(m: &Module) -> Result<Kernels, CudaError> {
        Ok(Kernels {
            hist_shared_u16: m.function(c"gray_hist_shared_u16")?,
            hist_global_u16: m.function(c"gray_hist_global_u16")?,
            hist_shared_u8: m.function(c"gray_hist_shared_u8")?,
            hist_global_u32: m.function(c"gray_hist_global_u32")?,
            apply_u16: m.function(c"gray_apply_u16")?,
            apply_u8: m.function(c"gray_apply_u8")?,
            apply_u32: m.function(c"gray_apply_u32")?,
            channels: m.function(c"gray_channels")?,
            color_full: m.function(c"color_full")?,
            color_422: m.function(c"color_422")?,
            palette: m.function(c"palette_apply")?,
            png_filter_rows: m.function(c"png_filter_rows")?,
            copy_bytes: m.function(c"copy_bytes")?,
            ops_gather: m.function(c"ops_gather")?,
            ops_resample_h: m.function(c"ops_resample_h")?,
            ops_resample_v: m.function(c"ops_resample_v")?,
        })
    }
}

/// What the cached device table was built from.
#[derive(PartialEq)]
enum TableKey {
    Gray(GrayPlan, Resolved),
    Channels(Vec<GrayPlan>, Vec<Resolved>),
    Palette(ColorPlan),
}

/// Where each operator table sits in the worker's device buffer of operator tables (in `i32`s).
#[derive(Clone, Copy)]
struct OpsLayout {
    cols_bounds: usize,
    cols_weights: usize,
    cols_ksize: u32,
    rows_bounds: usize,
    rows_weights: usize,
    rows_ksize: u32,
    gather: bool,
}

/// Device pointers of the frame being rendered.
#[derive(Clone, Copy)]
struct Io {
    input: u64,
    output: u64,
}

/// This worker's GPU encoder (scratch memory and library state bound to its stream).
enum WorkerEncoder {
    /// PNG rows filtered with `filter`, compressed on the GPU (fdeflate kernels or nvCOMP).
    Png {
        /// Boxed: its device buffers (cudarc slices) make it far larger than the JPEG variant.
        png: Box<GpuPng>,
        filter: u32,
    },
    Jpeg(JpegEncoder),
}

/// Per-thread GPU state.
pub struct CudaWorker {
    index: usize,
    device_slot: usize,
    shared: Arc<Shared>,
    _module: Arc<Module>,
    stream: Arc<Stream>,
    k: Kernels,
    /// Frames of the batch being built that render and filter in two launches for all
    /// (group.rs), and those launches' kernels; `None` when grouping is off
    /// (`DICOMFLOW_GPU_GROUP=off`, to compare).
    group: FrameGroup,
    group_kernels: Option<GroupKernels>,
    ev: [Event; 5],
    /// The GPU encoder, when the GPU encodes the output.
    encoder: Option<WorkerEncoder>,
    /// Whether this worker has said that a frame fell back to the CPU encoder.
    fallback_noted: bool,
    dev_in: Option<DeviceBuffer>,
    dev_out: Option<DeviceBuffer>,
    /// Rendered 8-bit pixels awaiting the PNG filter kernel.
    dev_pixels: Option<DeviceBuffer>,
    /// Filtered rows of a zero-copy frame, before one wide copy into the mapped slot.
    dev_rows: Option<DeviceBuffer>,
    /// The chain's rendering, awaiting the operators.
    dev_rendered: Option<DeviceBuffer>,
    /// The operators' horizontal pass.
    dev_between: Option<DeviceBuffer>,
    /// The operators' tables (`ops_host` on the device) and what they were built from.
    dev_ops: Option<DeviceBuffer>,
    ops_key: Option<(Operators, OpsLayout)>,
    ops_host: Vec<i32>,
    dev_table: Option<DeviceBuffer>,
    dev_counts: Option<DeviceBuffer>,
    table_key: Option<TableKey>,
    host_table: Vec<u8>,
    /// One channel's table while window channels are concatenated into `host_table`.
    channel_table: Vec<u8>,
    host_counts: Vec<u32>,
    cpu: CpuRenderer,
    last_publish: Instant,
    /// GPU codecs (created on the first compressed frame) and the decoded frame they write.
    decoder: Option<FrameDecoder>,
    dev_decoded: Option<DeviceBuffer>,
    /// Events around the GPU decode of the current frame.
    ev_decode: [Event; 2],
    /// Marks the end of a GPU-decoded frame's work; the worker sleeps on it instead of
    /// spinning (a JPEG 2000 decode takes milliseconds, and many workers decode at once).
    ev_done: Event,
    /// Buffers for the CPU decode of a frame the GPU codec did not take.
    fallback: Vec<u8>,
    fallback_scratch: Vec<u8>,
    /// Slices per compression call when the GPU compresses PNG (`gpu.encode_batch`).
    batch_max: usize,
    /// Whether the last frame was decoded on the GPU: such frames are batched only when nvJPEG
    /// decodes them (`decoding_nvjpeg`), several per call. JPEG 2000 frames are not: a batch
    /// would run their decodes (10–20 ms each for 512²) one after another on this worker's
    /// stream while other workers wait for frames, and the per-call cost that batching spreads
    /// is small beside them (H200, JPEG 2000 512² to GPU PNG on 32 streams: 602 pipeline
    /// slices/s batched, 603 not).
    decoding: bool,
    /// While [`render_batch`](RenderWorker::render_batch) runs: the frames whose PNG
    /// compression waits for the end of the batch.
    batch: Option<Vec<Deferred>>,
    /// Per position in a batch: the frame's filtered rows.
    batch_rows: Vec<Option<DeviceBuffer>>,
    /// Per position in a batch: where a frame decoded on the GPU on its own (not in one call
    /// with others) lands, so that no frame's decode writes where a deferred render of the
    /// batch has yet to read.
    batch_decoded: Vec<Option<DeviceBuffer>>,
    /// The batch position of the last frame decoded on its own in the batch being built: the
    /// next such decode waits for it (its end event). A codec's decode is queued on the stream
    /// but the library's host side reuses its decode state's buffers on the next call: on the
    /// H200, JPEG 2000 frames decoded one after the other into a batch without that wait came
    /// out with another frame's values in 5–47 of 400 frames, whatever buffer they landed in;
    /// outside batches the stream is synchronized after every frame.
    batch_last_decode: Option<usize>,
    /// Per position in a batch: the events around the frame's GPU decode, when it has one on
    /// its own (the batch's other parts are timed for the whole batch: `batch_begin`).
    batch_ev: Vec<[Event; 2]>,
    /// Around a batch's compression: 0 before, 1 compressed, 2 copied to the slots.
    batch_marks: [Event; 3],
    /// Before the batch's first frame: with `batch_marks[0]` it times the batch's transfers
    /// in, renders and filters together, shared by its frames. One event per batch instead of
    /// three per frame: every driver call takes the context's lock, and at 512² the workers'
    /// calls (about 240 000 a second from four threads) bounded the run.
    batch_begin: Event,
    /// nvJPEG frames of a batch decoded in one call ([`CudaWorker::decode_together`]).
    together: DecodedTogether,
    /// Where the frame being rendered was decoded by [`CudaWorker::decode_together`], if it was.
    predecoded: Option<(u64, Decoded)>,
    /// This worker has decoded the start sample of the first file's nvJPEG codec
    /// (`warm_up_codec`); `warming` while it does.
    codec_warm: bool,
    warming: bool,
    /// Whether [`CudaWorker::leave_codec_gate`] ran.
    gate_left: bool,
    /// Whether the last GPU-decoded frame went to nvJPEG, whose batched decoders take
    /// [`DECODE_BATCH_MAX`] frames in about the time of one (`bench decode --batches`).
    decoding_nvjpeg: bool,
}

/// The frames of a batch that nvJPEG decoded in one call.
struct DecodedTogether {
    /// Per position among them: the decoded values.
    buffers: Vec<Option<DeviceBuffer>>,
    /// Around the last such call, whose time its frames share.
    ev: [Event; 2],
    frames: usize,
    /// Whether this worker's frames suit the batched decoders (a frame they refuse, rather
    /// than a damaged one, turns them off: frames are then decoded one by one).
    usable: bool,
}

impl DecodedTogether {
    /// Each frame's share of the last call's time; the stream must have passed its end.
    fn share(&self) -> Result<Duration, CudaError> {
        let ms = Event::elapsed_ms(&self.ev[0], &self.ev[1])?.max(0.0) as f64;
        Ok(Duration::from_secs_f64(
            ms / 1e3 / self.frames.max(1) as f64,
        ))
    }
}

/// A frame of a batch whose filtered rows wait in device memory for the batch's one compression
/// call ([`CudaWorker::render_batch`]).
struct Deferred {
    /// Its position among the batch's frames.
    frame: usize,
    /// Its position in `batch_rows` and `batch_ev`.
    index: usize,
    /// The filtered rows (device memory) and their length, which is also the most the packed
    /// stream may take in the slot, and the length of one row (filter byte included).
    rows: u64,
    cap: usize,
    row_bytes: usize,
    /// Whether a GPU codec decoded it (its decode events hold a time).
    decoded: bool,
    /// Whether it was decoded with other frames of the batch (its share of that call is its
    /// decode time).
    decoded_together: bool,
}

/// Where the frame's stored values are when the chain starts.
#[derive(Clone, Copy)]
enum Source {
    /// In the slot (as the loader or the CPU fallback decoded them).
    Slot,
    /// In device memory, decoded there by a GPU codec.
    Device(u64),
    /// In device memory, where the loader uploaded them (`Slot::on_device`, upload.rs).
    Uploaded(u64),
}

/// Queues `png_filter_rows` (kernels/png.cu): the frame's pixels at `pixels` as rows filtered
/// with `mode` (a filter type, 5 adaptive) at `rows`, both device addresses.
fn launch_filter(
    f: &Function,
    stream: &Stream,
    plan: &FramePlan,
    mode: u32,
    pixels: u64,
    rows: u64,
) -> Result<(), CudaError> {
    let channels = plan.channels() as u32;
    // The output's rows: after the operators, when there are any.
    let (cols, out_rows) = (plan.out_cols(), plan.out_rows());
    let args = Args::default()
        .u64(pixels)
        .u64(rows)
        .u32(cols * channels)
        .u32(out_rows)
        .u32(channels)
        .u32(mode);
    driver::launch(f, out_rows, BLOCK, 0, stream, args)
}

/// The orientation matrix as six `i32` kernel arguments (m0..m5 of kernels/ops.cu).
fn orientation(args: Args, m: [u32; 6]) -> Args {
    m.into_iter().fold(args, Args::u32)
}

/// Whether workers group the frames of a GPU PNG batch (group.rs): on unless the environment
/// says `DICOMFLOW_GPU_GROUP=off`, which keeps a frame-by-frame run at hand for comparisons.
fn grouping_on() -> bool {
    std::env::var("DICOMFLOW_GPU_GROUP").map_or(true, |v| v != "off" && v != "0")
}

fn grid_for(work: u64) -> u32 {
    work.div_ceil(BLOCK as u64).clamp(1, 65_535 * 8) as u32
}

impl CudaWorker {
    pub(super) fn new(
        index: usize,
        device_slot: usize,
        shared: Arc<Shared>,
        module: Arc<Module>,
    ) -> Result<Self, BackendError> {
        let device = shared.devices[device_slot].clone();
        let stream = Stream::new(&device)?;
        let k = Kernels::load(&module)?;
        let group_kernels = if grouping_on() {
            Some(GroupKernels::load(&module)?)
        } else {
            None
        };
        let ev = [
            Event::new(&device)?,
            Event::new(&device)?,
            Event::new(&device)?,
            Event::new(&device)?,
            Event::new(&device)?,
        ];
        let ev_decode = [Event::new(&device)?, Event::new(&device)?];
        let ev_done = Event::blocking(&device)?;
        let batch_marks = [
            Event::new(&device)?,
            Event::new(&device)?,
            Event::new(&device)?,
        ];
        let batch_max = match &shared.encoder {
            Some(GpuEncoder::Png { batch, .. }) => (*batch).max(1),
            _ => 1,
        };
        let encoder = match &shared.encoder {
            None => None,
            Some(GpuEncoder::Png {
                deflater, filter, ..
            }) => Some(WorkerEncoder::Png {
                png: Box::new(
                    GpuPng::new(deflater.clone(), &module, stream.clone())
                        .map_err(BackendError::Unavailable)?,
                ),
                filter: *filter,
            }),
            Some(GpuEncoder::Jpeg { nvjpeg, quality }) => {
                let lib = nvjpeg.get(device_slot).ok_or_else(|| {
                    BackendError::Unavailable(format!("no nvJPEG handle for GPU {device_slot}"))
                })?;
                Some(WorkerEncoder::Jpeg(
                    JpegEncoder::new(lib.clone(), &stream, *quality)
                        .map_err(|e| BackendError::Unavailable(e.to_string()))?,
                ))
            }
        };
        // Last, once nothing can fail: a worker counted and never made would keep nvJPEG's
        // start gate shut (start.rs); `Drop` takes it back out.
        shared.codecs.register_worker();
        Ok(CudaWorker {
            index,
            device_slot,
            ev_done,
            decoder: None,
            dev_decoded: None,
            ev_decode,
            fallback: Vec::new(),
            fallback_scratch: Vec::new(),
            shared,
            _module: module,
            stream,
            k,
            group: FrameGroup::default(),
            group_kernels,
            ev,
            encoder,
            fallback_noted: false,
            dev_in: None,
            dev_out: None,
            dev_pixels: None,
            dev_rows: None,
            dev_rendered: None,
            dev_between: None,
            dev_ops: None,
            ops_key: None,
            ops_host: Vec::new(),
            dev_table: None,
            dev_counts: None,
            table_key: None,
            host_table: Vec::new(),
            channel_table: Vec::new(),
            host_counts: Vec::new(),
            cpu: CpuRenderer::default(),
            last_publish: Instant::now(),
            batch_max,
            decoding: false,
            batch: None,
            batch_rows: Vec::new(),
            batch_decoded: Vec::new(),
            batch_last_decode: None,
            batch_ev: Vec::new(),
            batch_marks,
            batch_begin: Event::new(&device)?,
            together: DecodedTogether {
                buffers: Vec::new(),
                ev: [Event::new(&device)?, Event::new(&device)?],
                frames: 0,
                usable: true,
            },
            predecoded: None,
            codec_warm: false,
            warming: false,
            gate_left: false,
            decoding_nvjpeg: false,
        })
    }

    /// Frees cached device memory (after an out-of-memory error).
    fn release_caches(&mut self) {
        // The group's frames read the table freed below: queued first.
        if let Some(k) = &self.group_kernels {
            self.group.release(k, &self.stream);
        }
        self.dev_decoded = None;
        self.dev_in = None;
        self.dev_out = None;
        self.dev_pixels = None;
        self.dev_rows = None;
        self.dev_rendered = None;
        self.dev_between = None;
        self.dev_ops = None;
        self.ops_key = None;
        self.dev_table = None;
        self.dev_counts = None;
        self.table_key = None;
        if let Some(WorkerEncoder::Png { png, .. }) = &mut self.encoder {
            png.release();
        }
        // The rows of frames already queued in this batch are still to be compressed.
        if self.batch.is_none() {
            self.batch_rows.clear();
            self.batch_decoded.clear();
        }
    }

    /// Queues the input transfer for `strategy` and returns the device pointers to use. Values
    /// already decoded in device memory stay there; only the output follows the strategy.
    fn stage_in(
        &mut self,
        strategy: Strategy,
        source: Source,
        slot: &Slot,
        in_bytes: usize,
        out_bytes: usize,
    ) -> Result<Io, CudaError> {
        if let Source::Device(input) | Source::Uploaded(input) = source {
            let output = match strategy {
                Strategy::ZeroCopy => slot.output.device_ptr(),
                Strategy::Pinned | Strategy::Pageable => {
                    driver::ensure_buffer(&mut self.dev_out, &self.stream, out_bytes)?
                }
            };
            return Ok(Io { input, output });
        }
        match strategy {
            Strategy::ZeroCopy => Ok(Io {
                input: slot.input.device_ptr(),
                output: slot.output.device_ptr(),
            }),
            // The same call for both: from page-locked memory the copy is a true async DMA;
            // from pageable memory the driver stages it through its own pinned buffer (the
            // call returns once staged). On this stream it stays ordered before the kernel,
            // which a legacy synchronous copy would not guarantee.
            Strategy::Pinned | Strategy::Pageable => {
                let input = driver::ensure_buffer(&mut self.dev_in, &self.stream, in_bytes)?;
                let output = driver::ensure_buffer(&mut self.dev_out, &self.stream, out_bytes)?;
                // SAFETY: slot.input holds in_bytes and is not touched until the stream is
                // synchronized, before the slot leaves this worker.
                unsafe {
                    driver::copy_htod_async(input, slot.input.as_ptr(), in_bytes, &self.stream)?
                };
                Ok(Io { input, output })
            }
        }
    }

    /// Queues (or performs) the output transfer.
    fn stage_out(
        &mut self,
        strategy: Strategy,
        io: Io,
        slot: &mut Slot,
        out_bytes: usize,
    ) -> Result<(), CudaError> {
        let dst = slot.output.bytes_mut(out_bytes).as_mut_ptr();
        match strategy {
            Strategy::ZeroCopy => Ok(()),
            // SAFETY: dst holds out_bytes; the stream is synchronized before the slot moves on.
            Strategy::Pinned | Strategy::Pageable => unsafe {
                driver::copy_dtoh_async(dst, io.output, out_bytes, &self.stream)
            },
        }
    }

    /// Uploads the table if it changed since the last frame.
    fn ensure_table(&mut self, key: TableKey) -> Result<u64, CudaError> {
        if self.table_key.as_ref() != Some(&key) || self.dev_table.is_none() {
            // Frames collected for a grouped launch read the table about to be replaced.
            self.flush_group()?;
            let ptr =
                driver::ensure_buffer(&mut self.dev_table, &self.stream, self.host_table.len())?;
            // Ordered on this stream, before the kernel that reads the table. (A synchronous
            // copy from pageable memory runs on the legacy stream and may return before its DMA
            // lands: a kernel on this non-blocking stream could then read a stale table.)
            // SAFETY: host_table is not modified until the stream is synchronized at the end of
            // the frame.
            unsafe {
                driver::copy_htod_async(
                    ptr,
                    self.host_table.as_ptr(),
                    self.host_table.len(),
                    &self.stream,
                )?
            };
            self.table_key = Some(key);
        }
        Ok(self.dev_table.as_ref().map(|b| b.ptr()).unwrap_or(0))
    }

    /// GPU histogram of table indices, read back for the automatic window.
    fn histogram(
        &mut self,
        g: &GrayPlan,
        map: IndexMap,
        io: Io,
        pixels: u64,
    ) -> Result<chain::FrameStats, CudaError> {
        let bins = map.len();
        let counts = driver::ensure_buffer(&mut self.dev_counts, &self.stream, bins * 4)?;
        driver::memset_u32_async(counts, bins, &self.stream)?;
        let args = Args::default()
            .u64(io.input)
            .u64(pixels)
            .u32(map.shift)
            .u32(map.mask)
            .u64(counts);
        // Shared-memory sub-histograms where the bins fit, global atomics otherwise.
        let shared = (bins * 4) as u32;
        let (f, grid, shmem) = match g.stored.bytes() {
            1 => (&self.k.hist_shared_u8, grid_for(pixels).min(1024), shared),
            2 if bins <= SHARED_HIST_BINS => {
                (&self.k.hist_shared_u16, grid_for(pixels).min(1024), shared)
            }
            2 => (&self.k.hist_global_u16, grid_for(pixels), 0),
            _ => (&self.k.hist_global_u32, grid_for(pixels), 0),
        };
        driver::launch(f, grid, BLOCK, shmem, &self.stream, args)?;
        self.host_counts.clear();
        self.host_counts.resize(bins, 0);
        // SAFETY: host_counts holds `bins` u32 and is read only after the stream sync below.
        unsafe {
            driver::copy_dtoh_async(
                self.host_counts.as_mut_ptr() as *mut u8,
                counts,
                bins * 4,
                &self.stream,
            )?
        };
        self.stream.synchronize()?;
        Ok(table::frame_stats(g, &self.host_counts))
    }

    fn render_gray(
        &mut self,
        g: &GrayPlan,
        map: IndexMap,
        pixels: u64,
        io: Io,
    ) -> Result<Option<Window>, RenderError> {
        let (table_ptr, window) = self.gray_table(g, map, pixels, io)?;
        let args = Args::default()
            .u64(io.input)
            .u64(io.output)
            .u64(pixels)
            .u32(map.shift)
            .u32(map.mask)
            .u64(table_ptr);
        let (f, per_thread) = match g.stored.bytes() {
            1 => (&self.k.apply_u8, 16),
            2 => (&self.k.apply_u16, 8),
            _ => (&self.k.apply_u32, 1),
        };
        driver::launch(
            f,
            grid_for(pixels.div_ceil(per_thread)),
            BLOCK,
            0,
            &self.stream,
            args,
        )
        .map_err(RenderError::Cuda)?;
        Ok(window)
    }

    /// The device table of a grayscale frame (its statistics first, on the GPU, when its
    /// window needs them) and the window it applies.
    fn gray_table(
        &mut self,
        g: &GrayPlan,
        map: IndexMap,
        pixels: u64,
        io: Io,
    ) -> Result<(u64, Option<Window>), RenderError> {
        let cuda = RenderError::Cuda;
        let stats = if chain::needs_statistics(g) {
            Some(self.histogram(g, map, io, pixels).map_err(cuda)?)
        } else {
            None
        };
        let resolved = chain::resolve(g, stats.as_ref()).map_err(RenderError::Plan)?;
        let window = match resolved.voi {
            ResolvedVoi::Window(w) => Some(w),
            _ => None,
        };
        let key = TableKey::Gray(g.clone(), resolved);
        if self.table_key.as_ref() != Some(&key) {
            if let TableKey::Gray(g, resolved) = &key {
                table::build_gray_table(g, resolved, map, &mut self.host_table);
            }
        }
        let table_ptr = self.ensure_table(key).map_err(cuda)?;
        Ok((table_ptr, window))
    }

    /// Window channels: one histogram when a channel's window needs it, one table per channel
    /// (concatenated), one kernel writing interleaved RGB.
    fn render_channels(
        &mut self,
        gs: &[GrayPlan],
        map: IndexMap,
        pixels: u64,
        io: Io,
    ) -> Result<Option<Window>, RenderError> {
        let cuda = RenderError::Cuda;
        let Some(first) = gs.first() else {
            return Err(RenderError::Internal(
                "window channels without a window".into(),
            ));
        };
        let stats = if gs.iter().any(chain::needs_statistics) {
            Some(self.histogram(first, map, io, pixels).map_err(cuda)?)
        } else {
            None
        };
        let resolved = gs
            .iter()
            .map(|g| chain::resolve(g, stats.as_ref()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(RenderError::Plan)?;
        let key = TableKey::Channels(gs.to_vec(), resolved.clone());
        if self.table_key.as_ref() != Some(&key) {
            self.host_table.clear();
            for (g, r) in gs.iter().zip(&resolved) {
                table::build_gray_table(g, r, map, &mut self.channel_table);
                self.host_table.extend_from_slice(&self.channel_table);
            }
        }
        let table_ptr = self.ensure_table(key).map_err(cuda)?;
        let args = Args::default()
            .u64(io.input)
            .u64(io.output)
            .u64(pixels)
            .u32(first.stored.bytes() as u32)
            .u32(map.shift)
            .u32(map.mask)
            .u64(table_ptr)
            .u32(map.len() as u32)
            .u32(gs.len() as u32);
        driver::launch(
            &self.k.channels,
            grid_for(pixels),
            BLOCK,
            0,
            &self.stream,
            args,
        )
        .map_err(cuda)?;
        Ok(match resolved.first().map(|r| &r.voi) {
            Some(ResolvedVoi::Window(w)) => Some(*w),
            _ => None,
        })
    }

    /// The operators: the rendering at `src` (device memory) to the output size at `dst`, by one
    /// gather kernel when every output reads one pixel, else the two resampling passes.
    fn apply_ops(
        &mut self,
        op: &Operators,
        channels: usize,
        src: u64,
        dst: u64,
    ) -> Result<(), CudaError> {
        let layout = match self.ops_key {
            Some((key, layout)) if key == *op && self.dev_ops.is_some() => layout,
            _ => {
                let t = op.tables();
                self.ops_host.clear();
                let at = |v: &[i32], host: &mut Vec<i32>| {
                    let start = host.len();
                    host.extend_from_slice(v);
                    start
                };
                let layout = OpsLayout {
                    cols_bounds: at(&t.cols.bounds, &mut self.ops_host),
                    cols_weights: at(&t.cols.weights, &mut self.ops_host),
                    cols_ksize: t.cols.ksize as u32,
                    rows_bounds: at(&t.rows.bounds, &mut self.ops_host),
                    rows_weights: at(&t.rows.weights, &mut self.ops_host),
                    rows_ksize: t.rows.ksize as u32,
                    gather: t.gather,
                };
                let bytes = self.ops_host.len() * 4;
                let ptr = driver::ensure_buffer(&mut self.dev_ops, &self.stream, bytes)?;
                // SAFETY: ops_host is not modified until the stream is synchronized at the end
                // of the frame (it changes only when the operators do, in a later frame).
                unsafe {
                    driver::copy_htod_async(
                        ptr,
                        self.ops_host.as_ptr() as *const u8,
                        bytes,
                        &self.stream,
                    )?
                };
                self.ops_key = Some((*op, layout));
                layout
            }
        };
        let base = self.dev_ops.as_ref().map(|b| b.ptr()).unwrap_or(0);
        let at = |i: usize| base + 4 * i as u64;
        let m = op.orient.map(|v| v as u32);
        let ch = channels as u32;
        if layout.gather {
            let args = Args::default()
                .u64(src)
                .u64(dst)
                .u32(op.src_w)
                .u32(ch)
                .u32(op.out_w)
                .u32(op.out_h)
                .u64(at(layout.cols_bounds))
                .u64(at(layout.rows_bounds));
            let args = orientation(args, m).u32(op.invert as u32);
            let n = op.out_w as u64 * op.out_h as u64;
            return driver::launch(
                &self.k.ops_gather,
                grid_for(n),
                BLOCK,
                0,
                &self.stream,
                args,
            );
        }
        let between = driver::ensure_buffer(
            &mut self.dev_between,
            &self.stream,
            op.intermediate_bytes(channels),
        )?;
        let args = Args::default()
            .u64(src)
            .u64(between)
            .u32(op.src_w)
            .u32(ch)
            .u32(op.out_w)
            .u32(op.oriented_h)
            .u64(at(layout.cols_bounds))
            .u64(at(layout.cols_weights))
            .u32(layout.cols_ksize);
        let args = orientation(args, m).u32(op.invert as u32);
        let n = op.out_w as u64 * op.oriented_h as u64;
        driver::launch(
            &self.k.ops_resample_h,
            grid_for(n),
            BLOCK,
            0,
            &self.stream,
            args,
        )?;
        let args = Args::default()
            .u64(between)
            .u64(dst)
            .u32(op.out_w)
            .u32(ch)
            .u32(op.out_h)
            .u64(at(layout.rows_bounds))
            .u64(at(layout.rows_weights))
            .u32(layout.rows_ksize);
        let n = op.out_w as u64 * ch as u64 * op.out_h as u64;
        driver::launch(
            &self.k.ops_resample_v,
            grid_for(n),
            BLOCK,
            0,
            &self.stream,
            args,
        )
    }

    fn render_color(&mut self, c: &ColorPlan, pixels: u64, io: Io) -> Result<(), RenderError> {
        let cuda = RenderError::Cuda;
        let map = IndexMap::of(&c.stored).ok_or_else(|| {
            RenderError::Plan(crate::render::error::PlanError::Unsupported(
                "colour samples deeper than 16 bits".into(),
            ))
        })?;
        let bytes = c.stored.bytes() as u32;
        if let ColorModel::Palette(_) = c.model {
            let key = TableKey::Palette(c.clone());
            if self.table_key.as_ref() != Some(&key) {
                table::build_palette_table(c, map, &mut self.host_table);
            }
            let t = self.ensure_table(key).map_err(cuda)?;
            let args = Args::default()
                .u64(io.input)
                .u64(io.output)
                .u64(pixels)
                .u32(bytes)
                .u32(map.shift)
                .u32(map.mask)
                .u64(t);
            return driver::launch(
                &self.k.palette,
                grid_for(pixels),
                BLOCK,
                0,
                &self.stream,
                args,
            )
            .map_err(cuda);
        }
        let bits = c.stored.bits_stored as u32;
        let model = match c.model {
            ColorModel::Rgb => 0,
            ColorModel::YbrFull | ColorModel::YbrFull422
                if bits == 8 && !c.stored.signed && !c.subsampled =>
            {
                2
            }
            ColorModel::YbrFull | ColorModel::YbrFull422 => 1,
            ColorModel::YbrPartial422 => 3,
            ColorModel::Palette(_) => unreachable!("handled above"),
        };
        let base = Args::default()
            .u64(io.input)
            .u64(io.output)
            .u64(pixels)
            .u32(bytes)
            .u32(map.shift)
            .u32(map.mask)
            .u32(bits)
            .u32(c.stored.signed as u32);
        if c.subsampled {
            driver::launch(
                &self.k.color_422,
                grid_for(pixels / 2),
                BLOCK,
                0,
                &self.stream,
                base.u32(model),
            )
            .map_err(cuda)
        } else {
            let args = base.u32(c.planar as u32).u32(model);
            driver::launch(
                &self.k.color_full,
                grid_for(pixels),
                BLOCK,
                0,
                &self.stream,
                args,
            )
            .map_err(cuda)
        }
    }

    /// Renders with one strategy, timing each part.
    fn render_with(
        &mut self,
        strategy: Strategy,
        source: Source,
        plan: &FramePlan,
        slot: &mut Slot,
    ) -> Result<RenderOutcome, RenderError> {
        let cuda = RenderError::Cuda;
        self.shared.devices[self.device_slot].bind().map_err(cuda)?;
        // A frame with overlay planes leaves the GPU as pixels, neither encoded nor filtered:
        // the overlays are drawn on the host by the CPU backend's code (see `render`), and the
        // writer encodes the frame.
        if self.encoder.is_some() && plan.overlay.is_none() {
            return self.render_encoded(strategy, source, plan, slot);
        }
        let in_bytes = plan.input_bytes();
        let png_filter = match plan.overlay {
            Some(_) => None,
            None => self.shared.png_filter,
        };
        // With the PNG filter, the slot receives filtered rows (one filter byte more per row).
        let out_bytes = match png_filter {
            Some(_) => plan.output_capacity(),
            None => plan.output_bytes(),
        };
        let pixels = plan.pixels() as u64;
        self.ev[0].record(&self.stream).map_err(cuda)?;
        let staged = self
            .stage_in(strategy, source, slot, in_bytes, out_bytes)
            .map_err(cuda)?;
        // The final pixels (the output size) go where the filter kernel will read them, or
        // straight to the output when there is no filter.
        let io = match png_filter {
            Some(_) => Io {
                input: staged.input,
                output: driver::ensure_buffer(
                    &mut self.dev_pixels,
                    &self.stream,
                    plan.output_bytes(),
                )
                .map_err(cuda)?,
            },
            None => staged,
        };
        self.ev[1].record(&self.stream).map_err(cuda)?;
        let window = self.render_output(plan, pixels, io)?;
        if let Some(mode) = png_filter {
            self.filter_rows(strategy, plan, mode, io.output, staged.output)
                .map_err(cuda)?;
        }
        self.ev[2].record(&self.stream).map_err(cuda)?;
        self.stage_out(strategy, staged, slot, out_bytes)
            .map_err(cuda)?;
        self.ev[3].record(&self.stream).map_err(cuda)?;
        self.finish_frame(source).map_err(cuda)?;
        let ms = |a, b| self.between(a, b);
        // Every transfer is queued on this stream, so its events time all three parts (the
        // GPU decode, when there was one, is timed by its own events: `render_frame`).
        let timings = RenderTimings {
            transfer_in: ms(0, 1).map_err(cuda)?,
            decode: Duration::ZERO,
            compute: ms(1, 2).map_err(cuda)?,
            encode: Duration::ZERO,
            transfer_out: ms(2, 3).map_err(cuda)?,
        };
        Ok(RenderOutcome {
            window,
            timings,
            device: Some(self.shared.devices[self.device_slot].ordinal),
            png_rows: png_filter.is_some(),
            encoded: None,
        })
    }

    /// Renders into device memory and encodes there (GPU PNG or nvJPEG): the output slot
    /// receives the compressed bytes only. A frame the GPU cannot encode (the GPU compressor failed, or the
    /// result does not fit the slot) goes back as filtered rows or pixels, for the writer to
    /// encode; each worker says so once. PNG frames are compressed in batches (a frame alone is
    /// a batch of one): [`render_deferred`](Self::render_deferred); JPEG frames one by one here.
    fn render_encoded(
        &mut self,
        strategy: Strategy,
        source: Source,
        plan: &FramePlan,
        slot: &mut Slot,
    ) -> Result<RenderOutcome, RenderError> {
        if matches!(self.encoder, Some(WorkerEncoder::Png { .. })) {
            return match self.batch.as_ref().map(Vec::len) {
                Some(index) => self.render_deferred(strategy, source, plan, slot, index),
                None => self.render_png_alone(strategy, source, plan, slot),
            };
        }
        let cuda = RenderError::Cuda;
        let pixels = plan.pixels() as u64;
        let cap = plan.output_capacity();
        self.ev[0].record(&self.stream).map_err(cuda)?;
        let staged = self
            .stage_in(strategy, source, slot, plan.input_bytes(), 0)
            .map_err(cuda)?;
        let dev_pixels =
            driver::ensure_buffer(&mut self.dev_pixels, &self.stream, plan.output_bytes())
                .map_err(cuda)?;
        let io = Io {
            input: staged.input,
            output: dev_pixels,
        };
        self.ev[1].record(&self.stream).map_err(cuda)?;
        let window = self.render_output(plan, pixels, io)?;
        let device = Some(self.shared.devices[self.device_slot].ordinal);
        let mut outcome = RenderOutcome {
            window,
            timings: RenderTimings::default(),
            device,
            png_rows: false,
            encoded: None,
        };
        match self.encoder.as_mut() {
            Some(WorkerEncoder::Jpeg(jpeg)) => {
                self.ev[2].record(&self.stream).map_err(cuda)?;
                // SAFETY: the pixels stay in dev_pixels until the stream is synchronized
                // (length() synchronizes it).
                unsafe {
                    jpeg.encode(
                        dev_pixels,
                        plan.out_cols(),
                        plan.out_rows(),
                        plan.channels(),
                        Chroma::Full444,
                    )
                }
                .map_err(|e| RenderError::Internal(e.to_string()))?;
                self.ev[3].record(&self.stream).map_err(cuda)?;
                let len = jpeg
                    .length()
                    .map_err(|e| RenderError::Internal(e.to_string()))?;
                let t = Instant::now();
                if len <= cap {
                    let got = jpeg
                        .retrieve(slot.output.bytes_mut(len))
                        .map_err(|e| RenderError::Internal(e.to_string()))?;
                    outcome.encoded = Some(Encoded::Jpeg { len: got });
                } else {
                    self.note_fallback("JPEG: the bitstream is larger than the slot");
                    let out = slot.output.bytes_mut(plan.output_bytes()).as_mut_ptr();
                    // SAFETY: the slot holds the frame's pixels; synchronized below.
                    unsafe {
                        driver::copy_dtoh_async(out, dev_pixels, plan.output_bytes(), &self.stream)
                    }
                    .map_err(cuda)?;
                    self.stream.synchronize().map_err(cuda)?;
                }
                let ms = |a, b| self.between(a, b);
                outcome.timings = RenderTimings {
                    transfer_in: ms(0, 1).map_err(cuda)?,
                    decode: Duration::ZERO,
                    compute: ms(1, 2).map_err(cuda)?,
                    encode: ms(2, 3).map_err(cuda)?,
                    transfer_out: t.elapsed(),
                };
            }
            Some(WorkerEncoder::Png { .. }) | None => {
                return Err(RenderError::Internal("no GPU JPEG encoder".into()))
            }
        }
        Ok(outcome)
    }

    /// [`render_encoded`](Self::render_encoded) for a frame of a batch: renders and filters
    /// its rows into device memory of their own and leaves them for
    /// [`compress_batch`](Self::compress_batch); nothing is waited for. The outcome's timings
    /// and encoded bytes are filled in there.
    fn render_deferred(
        &mut self,
        strategy: Strategy,
        source: Source,
        plan: &FramePlan,
        slot: &mut Slot,
        index: usize,
    ) -> Result<RenderOutcome, RenderError> {
        let cuda = RenderError::Cuda;
        let Some(WorkerEncoder::Png { filter, .. }) = &self.encoder else {
            return Err(RenderError::Internal("no GPU PNG encoder".into()));
        };
        let filter = *filter;
        let (Some(_), Some(_)) = (self.batch_ev.get(index), self.batch_rows.get(index)) else {
            return Err(RenderError::Internal(format!(
                "batch position {index} has no events"
            )));
        };
        let cap = plan.output_capacity();
        if let Some(outcome) = self.render_grouped(strategy, source, plan, slot, index, filter)? {
            return Ok(outcome);
        }
        // Launched now: anything the group holds goes first (the order of the frames' work on
        // the stream does not matter, but the table they read must still be theirs).
        self.flush_group().map_err(cuda)?;
        // The pixels and a staged input are this worker's buffers, reused frame after frame:
        // the next frame's work on this stream only starts once this frame's kernels are done.
        let staged = self
            .stage_in(strategy, source, slot, plan.input_bytes(), 0)
            .map_err(cuda)?;
        let dev_pixels =
            driver::ensure_buffer(&mut self.dev_pixels, &self.stream, plan.output_bytes())
                .map_err(cuda)?;
        let io = Io {
            input: staged.input,
            output: dev_pixels,
        };
        let window = self.render_output(plan, plan.pixels() as u64, io)?;
        let rows =
            driver::ensure_buffer(&mut self.batch_rows[index], &self.stream, cap).map_err(cuda)?;
        launch_filter(
            &self.k.png_filter_rows,
            &self.stream,
            plan,
            filter,
            dev_pixels,
            rows,
        )
        .map_err(cuda)?;
        Ok(self.defer(plan, index, rows, window))
    }

    /// Leaves a frame whose filtered rows are queued at `rows` (its batch position `index`) for
    /// [`compress_batch`](Self::compress_batch), and returns its outcome so far.
    fn defer(
        &mut self,
        plan: &FramePlan,
        index: usize,
        rows: u64,
        window: Option<Window>,
    ) -> RenderOutcome {
        if let Some(batch) = self.batch.as_mut() {
            batch.push(Deferred {
                frame: usize::MAX,
                index,
                rows,
                cap: plan.output_capacity(),
                row_bytes: plan.out_cols() as usize * plan.channels() + 1,
                decoded: false,
                decoded_together: false,
            });
        }
        RenderOutcome {
            window,
            timings: RenderTimings::default(),
            device: Some(self.shared.devices[self.device_slot].ordinal),
            png_rows: false,
            encoded: None,
        }
    }

    /// [`render_deferred`](Self::render_deferred) for a frame that joins the batch's group
    /// (group.rs): its table is made ready now, its window and filter are launched later with
    /// the group's other frames. `None` when the frame does not qualify (not read in place from
    /// its mapped slot, operators, statistics, a color or deep chain, a large frame, or grouping
    /// off); nothing was queued then.
    fn render_grouped(
        &mut self,
        strategy: Strategy,
        source: Source,
        plan: &FramePlan,
        slot: &mut Slot,
        index: usize,
        filter: u32,
    ) -> Result<Option<RenderOutcome>, RenderError> {
        let cuda = RenderError::Cuda;
        let input = slot.input.device_ptr();
        if strategy != Strategy::ZeroCopy {
            return Ok(None);
        }
        let Some((g, map, mut shape)) = self.group_shape(source, plan, input, filter) else {
            return Ok(None);
        };
        let pixels = shape.pixels;
        let (table, window) = self.gray_table(g, map, pixels, Io { input, output: 0 })?;
        shape.table = table;
        if !self.group.accepts(&shape) {
            self.flush_group().map_err(cuda)?;
        }
        let cap = plan.output_capacity();
        let rows =
            driver::ensure_buffer(&mut self.batch_rows[index], &self.stream, cap).map_err(cuda)?;
        // Last, once nothing can fail: a frame whose render failed is dropped from the batch.
        self.group.push(shape, input, rows);
        Ok(Some(self.defer(plan, index, rows, window)))
    }

    /// The group shape of a frame read in place from its slot (device address `input`), with
    /// its table still to be filled in, or `None` when such a frame is not grouped (grouping
    /// off, not in its slot, operators, overlays, statistics, a color or deep chain, a large
    /// frame).
    fn group_shape<'p>(
        &self,
        source: Source,
        plan: &'p FramePlan,
        input: u64,
        filter: u32,
    ) -> Option<(&'p GrayPlan, IndexMap, Shape)> {
        let plain = self.group_kernels.is_some()
            && matches!(source, Source::Slot)
            && input != 0
            && plan.ops.is_none()
            && plan.overlay.is_none()
            && plan.channels() == 1;
        let Chain::Gray(g) = &plan.chain else {
            return None;
        };
        let map = IndexMap::of(&g.stored)?;
        if !plain || chain::needs_statistics(g) {
            return None;
        }
        let pixels = plan.pixels() as u64;
        let shape = Shape {
            stored_bytes: g.stored.bytes() as u8,
            pixels,
            shift: map.shift,
            mask: map.mask,
            table: 0,
            row_len: plan.out_cols(),
            rows: plan.out_rows(),
            filter,
        };
        (shape.groupable() && plan.output_bytes() as u64 == pixels).then_some((g, map, shape))
    }

    /// Whether `auto` should take zero-copy without measuring: this worker batches GPU PNG
    /// frames and this one would be grouped, which only zero-copy does (one launch per group
    /// instead of a copy and two launches per frame). The first frame measured alone cannot
    /// show that: on the H200 host pinned won that measurement at 512² in most runs.
    fn groups_zero_copy(&self, source: Source, plan: &FramePlan, slot: &Slot) -> bool {
        let Some(WorkerEncoder::Png { filter, .. }) = &self.encoder else {
            return false;
        };
        self.batch_max > 1
            && self
                .group_shape(source, plan, slot.input.device_ptr(), *filter)
                .is_some()
    }

    /// Queues the grouped launches of the frames collected so far (none: nothing to do).
    fn flush_group(&mut self) -> Result<(), CudaError> {
        match &self.group_kernels {
            Some(k) if !self.group.is_empty() => self.group.flush(k, &self.stream),
            _ => Ok(()),
        }
    }

    /// A PNG frame rendered on its own (a worker that is not batching, or one measuring the
    /// transfer strategies): a batch of one, waited for. It uses the rows and events of the
    /// position after the largest batch, so that a batch being built (calibration can happen
    /// in its middle) keeps its own.
    fn render_png_alone(
        &mut self,
        strategy: Strategy,
        source: Source,
        plan: &FramePlan,
        slot: &mut Slot,
    ) -> Result<RenderOutcome, RenderError> {
        let index = self.batch_max;
        self.ensure_batch_room(index + 1)
            .map_err(RenderError::Cuda)?;
        self.batch_begin
            .record(&self.stream)
            .map_err(RenderError::Cuda)?;
        self.batch = Some(Vec::with_capacity(1));
        let rendered = self.render_deferred(strategy, source, plan, slot, index);
        let pending = self.batch.take().unwrap_or_default();
        let mut outcome = rendered?;
        let pending: Vec<Deferred> = pending
            .into_iter()
            .map(|d| Deferred { frame: 0, ..d })
            .collect();
        let mut frames = [BatchFrame { plan, slot }];
        let done = self.compress_batch(&pending, &mut frames)?;
        if let Some((timings, len)) = done.into_iter().next() {
            compressed(&mut outcome, timings, len);
        }
        Ok(outcome)
    }

    /// Compresses the batch's deferred frames in one compression call, copies each packed stream
    /// to its slot, waits, and returns per frame its timings and the zlib stream's length
    /// (`None`: the GPU could not encode it and its filtered rows are in the slot instead).
    /// The compression and the copies are timed once for the batch and shared equally by its
    /// frames.
    fn compress_batch(
        &mut self,
        pending: &[Deferred],
        frames: &mut [BatchFrame<'_>],
    ) -> Result<Vec<(RenderTimings, Option<usize>)>, RenderError> {
        let cuda = RenderError::Cuda;
        // The group's frames are rendered and filtered first; a failed grouped launch since
        // the batch began leaves some frames without their rows: the batch fails.
        self.flush_group().map_err(cuda)?;
        if let Some(e) = self.group.failure() {
            return Err(cuda(e));
        }
        let Some(WorkerEncoder::Png { png, .. }) = self.encoder.as_mut() else {
            return Err(RenderError::Internal("no GPU PNG encoder".into()));
        };
        let inputs: Vec<PngInput> = pending
            .iter()
            .map(|d| PngInput {
                rows: d.rows,
                len: d.cap,
                row_bytes: d.row_bytes,
                cap: d.cap,
                out: frames
                    .get(d.frame)
                    .map_or(0, |f| f.slot.output.device_ptr()),
            })
            .collect();
        self.batch_marks[0].record(&self.stream).map_err(cuda)?;
        let packed = png
            .queue_batch(&inputs, None)
            .map_err(|e| RenderError::Internal(format!("GPU PNG encoder: {e}")))?;
        self.batch_marks[1].record(&self.stream).map_err(cuda)?;
        self.shared.png_calls.add(inputs.len());
        // Mapped slots: one launch for the batch when the encoder can.
        let copied_out = png.queue_copy_out().map_err(cuda)?;
        // Mapped slots get exactly the stream; heap slots (pageable) the length word first.
        let mut heap = Vec::new();
        for (d, &src) in pending.iter().zip(&packed) {
            let frame = frames
                .get_mut(d.frame)
                .ok_or_else(|| RenderError::Internal("deferred frame out of range".into()))?;
            let dst = frame.slot.output.device_ptr();
            if dst != 0 {
                if !copied_out {
                    png.copy_packed_from(src, dst, d.cap).map_err(cuda)?;
                }
            } else {
                let out = frame.slot.output.bytes_mut(d.cap).as_mut_ptr();
                // SAFETY: the slot holds cap >= 8 bytes; the stream is synchronized below,
                // before the slot is read or leaves this worker.
                unsafe { driver::copy_dtoh_async(out, src, PACKED_HEADER, &self.stream) }
                    .map_err(cuda)?;
                heap.push((d.frame, src));
            }
        }
        self.batch_marks[2].record(&self.stream).map_err(cuda)?;
        // Sleep on an event rather than spin: a batch takes milliseconds.
        self.ev_done.record(&self.stream).map_err(cuda)?;
        self.ev_done.synchronize().map_err(cuda)?;
        if !heap.is_empty() {
            for &(frame, src) in &heap {
                let slot = &mut frames[frame].slot;
                if let Some(len) = packed_len(slot.output.bytes(PACKED_HEADER)) {
                    let out = slot.output.bytes_mut(PACKED_HEADER + len).as_mut_ptr();
                    // SAFETY: 8 + len <= cap (the packing checked it), which the slot holds;
                    // synchronized below.
                    unsafe {
                        driver::copy_dtoh_async(
                            out.add(PACKED_HEADER),
                            src + PACKED_HEADER as u64,
                            len,
                            &self.stream,
                        )
                    }
                    .map_err(cuda)?;
                }
            }
            self.stream.synchronize().map_err(cuda)?;
        }
        let share = |a: &Event, b: &Event| -> Result<Duration, CudaError> {
            let ms = Event::elapsed_ms(a, b)?.max(0.0) as f64;
            Ok(Duration::from_secs_f64(
                ms / 1e3 / pending.len().max(1) as f64,
            ))
        };
        let encode = share(&self.batch_marks[0], &self.batch_marks[1]).map_err(cuda)?;
        let transfer_out = share(&self.batch_marks[1], &self.batch_marks[2]).map_err(cuda)?;
        // Each frame's GPU decode (when it had one on its own) is timed by its events; the
        // rest of the span before the compression (transfers in, renders, filters) is shared.
        let mut decodes = Vec::with_capacity(pending.len());
        for d in pending {
            decodes.push(if d.decoded_together {
                self.together.share().map_err(cuda)?
            } else if d.decoded {
                let ev = &self.batch_ev[d.index];
                Event::elapsed_ms(&ev[0], &ev[1])
                    .map(|m| Duration::from_secs_f64(m.max(0.0) as f64 / 1e3))
                    .map_err(cuda)?
            } else {
                Duration::ZERO
            });
        }
        let span = Event::elapsed_ms(&self.batch_begin, &self.batch_marks[0])
            .map(|m| Duration::from_secs_f64(m.max(0.0) as f64 / 1e3))
            .map_err(cuda)?;
        let decoded_alone: Duration = pending
            .iter()
            .zip(&decodes)
            .filter(|(d, _)| !d.decoded_together)
            .map(|(_, t)| *t)
            .sum();
        let compute = span.saturating_sub(decoded_alone) / pending.len().max(1) as u32;
        let mut done = Vec::with_capacity(pending.len());
        for (d, decode) in pending.iter().zip(decodes) {
            // The transfers in are queued between the renders: timed with them, as compute.
            let timings = RenderTimings {
                transfer_in: Duration::ZERO,
                decode,
                compute,
                encode,
                transfer_out,
            };
            done.push((
                timings,
                packed_len(frames[d.frame].slot.output.bytes(PACKED_HEADER)),
            ));
        }
        // Frames the GPU could not encode go to the writers as filtered rows.
        for (d, (_, len)) in pending.iter().zip(&done) {
            if len.is_none() {
                self.note_fallback(
                    "PNG: the GPU compressor failed, or its stream would not fit the slot or \
                     would be larger than stored blocks",
                );
                self.rows_to_slot(d.rows, d.cap, frames[d.frame].slot)
                    .map_err(cuda)?;
            }
        }
        Ok(done)
    }

    /// Makes sure a batch of `frames` has events and a rows buffer entry per position.
    fn ensure_batch_room(&mut self, frames: usize) -> Result<(), CudaError> {
        let device = self.shared.devices[self.device_slot].clone();
        while self.batch_ev.len() < frames {
            self.batch_ev
                .push([Event::new(&device)?, Event::new(&device)?]);
        }
        if self.batch_rows.len() < frames {
            self.batch_rows.resize_with(frames, || None);
        }
        if self.batch_decoded.len() < frames {
            self.batch_decoded.resize_with(frames, || None);
        }
        Ok(())
    }

    /// The events around the current frame's GPU decode: while a batch is built, those of
    /// the frame's position in it (the batch reads them once the work is done).
    fn decode_marks(&self) -> (&Event, &Event) {
        if let Some(index) = self.batch.as_ref().map(Vec::len) {
            if let Some(ev) = self.batch_ev.get(index) {
                return (&ev[0], &ev[1]);
            }
        }
        (&self.ev_decode[0], &self.ev_decode[1])
    }

    /// Runs the plan's chain: pixels from `io.input` to `io.output`; the window applied.
    fn render_chain(
        &mut self,
        plan: &FramePlan,
        pixels: u64,
        io: Io,
    ) -> Result<Option<Window>, RenderError> {
        Ok(match &plan.chain {
            Chain::Gray(g) => match IndexMap::of(&g.stored) {
                Some(map) => self.render_gray(g, map, pixels, io)?,
                None => {
                    return Err(RenderError::Internal(
                        "deep grayscale routed to the GPU".into(),
                    ))
                }
            },
            Chain::Channels(gs) => match gs.first().and_then(|g| IndexMap::of(&g.stored)) {
                Some(map) => self.render_channels(gs, map, pixels, io)?,
                None => {
                    return Err(RenderError::Internal(
                        "deep grayscale routed to the GPU".into(),
                    ))
                }
            },
            Chain::Color(c) => {
                self.render_color(c, pixels, io)?;
                None
            }
        })
    }

    /// The frame's output pixels at `io.output` (device memory or a mapped slot, the output's
    /// size): the chain writes them, or, with operators, the chain renders into device memory
    /// and the operators write them.
    fn render_output(
        &mut self,
        plan: &FramePlan,
        pixels: u64,
        io: Io,
    ) -> Result<Option<Window>, RenderError> {
        let Some(op) = &plan.ops else {
            return self.render_chain(plan, pixels, io);
        };
        let rendered =
            driver::ensure_buffer(&mut self.dev_rendered, &self.stream, plan.rendered_bytes())
                .map_err(RenderError::Cuda)?;
        let window = self.render_chain(
            plan,
            pixels,
            Io {
                input: io.input,
                output: rendered,
            },
        )?;
        self.apply_ops(op, plan.channels(), rendered, io.output)
            .map_err(RenderError::Cuda)?;
        Ok(window)
    }

    /// Waits for the frame's queued work: a GPU-decoded frame by sleeping on an event (many
    /// workers wait milliseconds for their decodes at once; spinning would hold every core),
    /// others by synchronizing the stream.
    fn finish_frame(&self, source: Source) -> Result<(), CudaError> {
        match source {
            Source::Device(_) => {
                self.ev_done.record(&self.stream)?;
                self.ev_done.synchronize()
            }
            Source::Slot | Source::Uploaded(_) => self.stream.synchronize(),
        }
    }

    /// Copies a frame's values that a loader uploaded (`slot.on_device`) back into the slot,
    /// for code that reads them on the host.
    fn values_to_slot(&self, plan: &FramePlan, slot: &mut Slot) -> Result<(), RenderError> {
        let Some(values) = slot.on_device.take() else {
            return Ok(());
        };
        let cuda = RenderError::Cuda;
        self.shared.devices[self.device_slot].bind().map_err(cuda)?;
        let bytes = plan.input_bytes();
        let dst = slot.input.bytes_mut(bytes).as_mut_ptr();
        // SAFETY: the slot holds `bytes`; the stream is synchronized before it is read.
        unsafe { driver::copy_dtoh_async(dst, values, bytes, &self.stream) }.map_err(cuda)?;
        self.stream.synchronize().map_err(cuda)
    }

    /// Time between the completed events `a` and `b` of this frame.
    fn between(&self, a: usize, b: usize) -> Result<Duration, CudaError> {
        Event::elapsed_ms(&self.ev[a], &self.ev[b])
            .map(|m| Duration::from_secs_f64(m.max(0.0) as f64 / 1e3))
    }

    /// Queues a copy of `bytes` from `src` to `dst` (device-visible addresses, a mapped slot
    /// included) with 16-byte loads and stores: a mapped slot receives full-width PCIe writes.
    fn copy_on_device(&self, src: u64, dst: u64, bytes: usize) -> Result<(), CudaError> {
        let args = Args::default().u64(src).u64(dst).u64(bytes as u64);
        driver::launch(
            &self.k.copy_bytes,
            grid_for((bytes as u64).div_ceil(16)),
            BLOCK,
            0,
            &self.stream,
            args,
        )
    }

    /// The fallback of a frame the GPU could not encode: its filtered rows into the slot.
    fn rows_to_slot(&mut self, rows: u64, cap: usize, slot: &mut Slot) -> Result<(), CudaError> {
        let slot_dev = slot.output.device_ptr();
        if slot_dev != 0 {
            self.copy_on_device(rows, slot_dev, cap)?;
        } else {
            let out = slot.output.bytes_mut(cap).as_mut_ptr();
            // SAFETY: the slot holds cap bytes; synchronized below.
            unsafe { driver::copy_dtoh_async(out, rows, cap, &self.stream)? };
        }
        self.stream.synchronize()
    }

    fn note_fallback(&mut self, what: &str) {
        if !self.fallback_noted {
            self.fallback_noted = true;
            tracing::warn!(
                "CUDA worker {}: the GPU could not encode a frame ({what}); the CPU encodes such \
                 frames (said once per worker)",
                self.index
            );
        }
    }

    /// PNG-filters the rendered pixels at `pixels` (device memory) into `output`: directly
    /// when `output` is device memory, through device memory and one 16-byte-wide copy when it
    /// is a mapped slot (rows of `cols + 1` bytes would make narrow, unaligned PCIe writes).
    fn filter_rows(
        &mut self,
        strategy: Strategy,
        plan: &FramePlan,
        mode: u32,
        pixels: u64,
        output: u64,
    ) -> Result<(), CudaError> {
        let bytes = plan.output_capacity();
        let rows_at = match strategy {
            Strategy::ZeroCopy => driver::ensure_buffer(&mut self.dev_rows, &self.stream, bytes)?,
            Strategy::Pinned | Strategy::Pageable => output,
        };
        launch_filter(
            &self.k.png_filter_rows,
            &self.stream,
            plan,
            mode,
            pixels,
            rows_at,
        )?;
        if rows_at != output {
            self.copy_on_device(rows_at, output, bytes)?;
        }
        Ok(())
    }

    fn publish(&mut self) {
        if self.last_publish.elapsed() < Duration::from_millis(200) {
            return;
        }
        self.last_publish = Instant::now();
        self.shared.publish();
    }
}

impl CudaWorker {
    /// [`RenderWorker::render`], also for a frame of a batch (which may be deferred).
    fn render_one(
        &mut self,
        plan: &FramePlan,
        slot: &mut Slot,
    ) -> Result<RenderOutcome, RenderError> {
        // Stored values deeper than 16 bits have no table: the CPU reference renders them
        // (decoding them first when they arrive compressed).
        let deep = match &plan.chain {
            Chain::Gray(g) => IndexMap::of(&g.stored).is_none(),
            Chain::Channels(gs) => gs.iter().any(|g| IndexMap::of(&g.stored).is_none()),
            Chain::Color(_) => false,
        };
        // Overlays are drawn on the rendering before the operators (which the host cannot do
        // after the GPU applied them): such frames, rare, render on the CPU reference too.
        let overlay_under_ops = plan.overlay.is_some() && plan.ops.is_some();
        if deep || overlay_under_ops || plan.overlay.is_some() {
            // The loaders upload only frames the GPU renders from their values (upload.rs);
            // should one reach the host's code anyway, its values come back first.
            self.values_to_slot(plan, slot)
                .map_err(|e| self.on_gpu(e))?;
        }
        if deep || overlay_under_ops {
            return self.cpu.render(plan, slot);
        }
        let mut current = std::borrow::Cow::Borrowed(plan);
        let result = match self.render_frame(&mut current, slot) {
            Err(e) if e.is_out_of_memory() => {
                // Give the pool back what this worker caches, then try once more (from the
                // codestream again when the GPU had decoded it: its buffer is gone).
                self.release_caches();
                let _ = self.stream.synchronize();
                self.render_frame(&mut current, slot).map_err(|e| match e {
                    RenderError::Cuda(e) => RenderError::CudaAfterRetry(e),
                    other => other,
                })
            }
            other => other,
        };
        if result.is_ok() {
            self.shared.frames[self.device_slot].fetch_add(1, Ordering::Relaxed);
            if let Some(overlay) = &plan.overlay {
                // The same code as the CPU backend's, on the rendered pixels in the slot.
                crate::backend::cpu::draw_overlay(
                    plan,
                    overlay,
                    slot.input.bytes(plan.input_bytes()),
                    slot.output.bytes_mut(plan.output_bytes()),
                );
            }
        }
        self.publish();
        result.map_err(|e| self.on_gpu(e))
    }
}

/// A worker warms nvJPEG up only when the frames left would take longer than this at the
/// run's rate so far: its warm-up takes about 0.3 s, one worker at a time.
const WARM_UP_PAYS_AFTER: Duration = Duration::from_secs(1);

impl CudaWorker {
    /// While the first file's nvJPEG codec starts (start.rs), decodes the loaders' sample
    /// once on this thread and stream when it is this worker's turn, so that its first frames
    /// later do not pay the library's per-thread start (about 300 ms on the H200).
    fn warm_up_codec(&mut self) {
        if self.codec_warm || !self.shared.codecs.warm_up_wanted() || !self.warm_up_pays() {
            return;
        }
        let Some(sample) = self.shared.codecs.warm_turn() else {
            return;
        };
        self.codec_warm = true;
        self.warming = true;
        let t = Instant::now();
        let done = self.decode_sample(&sample);
        self.warming = false;
        self.shared.codecs.worker_warmed();
        match done {
            Ok(parts) => tracing::info!(
                "render worker {}: nvJPEG warmed up in {:.0} ms ({parts})",
                self.index,
                t.elapsed().as_secs_f64() * 1e3
            ),
            // The gate opens all the same: the other frames may decode (each one the codec
            // refuses goes to the CPU decoder, as always), and the start is paid.
            Err(e) => tracing::warn!(
                "render worker {}: nvJPEG's first decode failed: {e}",
                self.index
            ),
        }
    }

    /// Whether the run looks long enough for a warm-up to pay: the scan is still listing, or
    /// the frames it found and not yet done would take, at the rate so far, longer than
    /// [`WARM_UP_PAYS_AFTER`] (the end of the run waits for a worker that is warming up, about
    /// 300 ms: H200, 1000 × 512² JPEG lossless went from 2292 to 1230 pipeline slices/s when
    /// the workers warmed up regardless).
    fn warm_up_pays(&self) -> bool {
        let Some(stats) = self.shared.stats.get() else {
            return true;
        };
        let t = &stats.totals;
        if !t.scan_done.load(Ordering::Relaxed) {
            return true;
        }
        let done = t.frames_done.load(Ordering::Relaxed);
        // Files found (one frame each at least), or the frames of the files opened so far.
        let left = t
            .files_found
            .load(Ordering::Relaxed)
            .max(t.frames_planned.load(Ordering::Relaxed))
            .saturating_sub(done);
        let rate = done as f64 / stats.elapsed().as_secs_f64().max(1e-3);
        done == 0 || left as f64 > rate * WARM_UP_PAYS_AFTER.as_secs_f64()
    }

    /// Decodes the sample; on success, where the time went (buffer, decoder, decode call,
    /// the wait for the stream, and the codec library's page-locked allocations meanwhile,
    /// which every thread adds to).
    fn decode_sample(
        &mut self,
        sample: &crate::decode::compressed::Sample,
    ) -> Result<String, String> {
        let ms = |t: Instant| t.elapsed().as_secs_f64() * 1e3;
        let pinned_before = super::decode::alloc::millis()[2];
        let device = &self.shared.devices[self.device_slot];
        device.bind().map_err(|e| e.to_string())?;
        let t = Instant::now();
        let bytes = sample.frame.coding.decoded_bytes();
        let dst = driver::ensure_buffer(&mut self.dev_decoded, &self.stream, bytes)
            .map_err(|e| e.to_string())?;
        let buffer = ms(t);
        let t = Instant::now();
        let decoder = self.frame_decoder();
        let made = ms(t);
        let t = Instant::now();
        let decoded = decoder
            .decode(&sample.frame, &sample.bytes, dst)
            .map_err(|e| e.to_string());
        let call = ms(t);
        let t = Instant::now();
        self.stream.synchronize().map_err(|e| e.to_string())?;
        let wait = ms(t);
        let pinned = super::decode::alloc::millis()[2] - pinned_before;
        decoded.map(|_| {
            format!(
                "buffer {buffer:.1} ms, decoder {made:.1} ms, decode call {call:.1} ms, \
                 stream wait {wait:.1} ms; page-locked allocations meanwhile {pinned:.1} ms"
            )
        })
    }
}

impl RenderWorker for CudaWorker {
    fn render(&mut self, plan: &FramePlan, slot: &mut Slot) -> Result<RenderOutcome, RenderError> {
        // A frame on its own is never deferred: a batch left behind (only a panic inside
        // `render_batch` could leave one) must not swallow it, nor a group left with it.
        self.batch = None;
        self.group.clear();
        self.render_one(plan, slot)
    }

    fn batch_size(&self) -> usize {
        if self.decoding {
            return if self.decoding_nvjpeg && self.together.usable {
                DECODE_BATCH_MAX
            } else {
                1
            };
        }
        match self.encoder {
            Some(WorkerEncoder::Png { .. }) => self.batch_max,
            _ => 1,
        }
    }

    /// With the GPU compressing PNG, renders and filters each frame on the stream without
    /// waiting, then compresses them all in one call (nvCOMP's cost is per call: 2.2–5 ms
    /// for one slice or thirty-two) and waits once. Frames that do not go through the GPU PNG
    /// encoder (overlays, values deeper than 16 bits) are rendered on their own as usual.
    fn render_batch(
        &mut self,
        frames: &mut [BatchFrame<'_>],
    ) -> Vec<Result<RenderOutcome, RenderError>> {
        self.batch = None;
        if frames.len() < 2 {
            return frames
                .iter_mut()
                .map(|f| self.render(f.plan, f.slot))
                .collect();
        }
        let whole = Instant::now();
        let predecoded = self.decode_together(frames);
        let together = predecoded.iter().any(Option::is_some);
        let png = matches!(self.encoder, Some(WorkerEncoder::Png { .. }))
            && self.ensure_batch_room(frames.len()).is_ok();
        if !png {
            let rendering = Instant::now();
            let results = frames
                .iter_mut()
                .zip(predecoded)
                .map(|(f, done)| {
                    self.predecoded = done;
                    let result = self.render_one(f.plan, f.slot);
                    self.predecoded = None;
                    result
                })
                .collect();
            if together {
                BATCH_TIMES.add(BatchPart::Render, rendering);
                BATCH_TIMES.add(BatchPart::Whole, whole);
            }
            return results;
        }
        self.batch = Some(Vec::with_capacity(frames.len()));
        self.group.clear();
        self.batch_last_decode = None;
        if let Err(e) = self.batch_begin.record(&self.stream) {
            self.batch = None;
            let e = self.on_gpu(RenderError::Cuda(e)).to_string();
            return frames
                .iter()
                .map(|_| Err(RenderError::Internal(e.clone())))
                .collect();
        }
        let mut results = Vec::with_capacity(frames.len());
        for ((i, f), done) in frames.iter_mut().enumerate().zip(predecoded) {
            let before = self.batch.as_ref().map_or(0, Vec::len);
            self.predecoded = done;
            let result = self.render_one(f.plan, f.slot);
            self.predecoded = None;
            if let Some(batch) = self.batch.as_mut() {
                if batch.len() > before {
                    if result.is_err() {
                        batch.pop();
                    } else if let Some(d) = batch.last_mut() {
                        d.frame = i;
                    }
                }
            }
            results.push(result);
        }
        let pending = self.batch.take().unwrap_or_default();
        if pending.is_empty() {
            return results;
        }
        match self.compress_batch(&pending, frames) {
            Ok(done) => {
                for (d, (timings, len)) in pending.iter().zip(done) {
                    if let Some(Ok(outcome)) = results.get_mut(d.frame) {
                        compressed(outcome, timings, len);
                    }
                }
            }
            Err(e) => {
                let why = e.to_string();
                let is_oom = e.is_out_of_memory();
                if is_oom {
                    self.release_caches();
                }
                for d in &pending {
                    if let Some(slot) = results.get_mut(d.frame) {
                        *slot = Err(self.on_gpu(RenderError::Internal(format!(
                            "compressing a batch of {} PNG frames: {why}",
                            pending.len()
                        ))));
                    }
                }
            }
        }
        if together {
            BATCH_TIMES.add(BatchPart::Whole, whole);
        }
        results
    }

    fn between_calls(&mut self) {
        self.warm_up_codec();
    }

    fn retire(&mut self) {
        self.leave_codec_gate();
    }
}

/// A compressed frame's outcome: its timings, and its zlib stream in the slot (`Some(len)`)
/// or, when the GPU could not encode it, its filtered rows there for the writer.
fn compressed(outcome: &mut RenderOutcome, timings: RenderTimings, len: Option<usize>) {
    outcome.timings = timings;
    match len {
        Some(len) => {
            outcome.encoded = Some(Encoded::PngZlib {
                offset: PACKED_HEADER,
                len,
            })
        }
        None => outcome.png_rows = true,
    }
}

impl Drop for CudaWorker {
    fn drop(&mut self) {
        self.leave_codec_gate();
    }
}

impl CudaWorker {
    /// A worker that ends without having warmed nvJPEG up (or panics while it does) no longer
    /// counts for its start gate; once, at retirement or drop.
    fn leave_codec_gate(&mut self) {
        if !self.gate_left && (!self.codec_warm || self.warming) {
            self.shared.codecs.unregister_worker(self.warming);
        }
        self.gate_left = true;
    }
}

impl CudaWorker {
    /// `e`, said to have happened on this worker's GPU.
    fn on_gpu(&self, e: RenderError) -> RenderError {
        RenderError::OnGpu {
            worker: self.index,
            gpu: self.shared.devices[self.device_slot].ordinal,
            source: Box::new(e),
        }
    }
}

impl CudaWorker {
    /// Decodes the frame when it is compressed (GPU codec, else the CPU into the slot, after
    /// which `plan` describes a decoded frame), then renders it with the strategy in use.
    fn render_frame(
        &mut self,
        plan: &mut std::borrow::Cow<'_, FramePlan>,
        slot: &mut Slot,
    ) -> Result<RenderOutcome, RenderError> {
        let mut source = match slot.on_device {
            Some(values) => Source::Uploaded(values),
            None => Source::Slot,
        };
        let mut decode_time = Duration::ZERO;
        let mut together = false;
        let mut nvjpeg = false;
        if let Some(encoded) = plan.encoded.clone() {
            nvjpeg = matches!(
                encoded.coding.codec,
                GpuCodec::JpegLossless | GpuCodec::JpegDct
            );
            let decoded = match self.predecoded.take() {
                Some(done) => {
                    together = true;
                    Ok(done)
                }
                None => self.gpu_decode(&encoded, slot),
            };

            match decoded {
                Ok((ptr, layout)) => {
                    source = Source::Device(ptr);
                    if layout == Decoded::Planar {
                        if let Chain::Color(c) = &mut plan.to_mut().chain {
                            c.planar = true;
                        }
                    }
                }
                Err(why) => {
                    self.shared.decode_fallbacks.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(
                        "worker {}: {why}; decoding this frame on the CPU",
                        self.index
                    );
                    // The codec may still read the slot's codestream: let it finish first.
                    let _ = self.stream.synchronize();
                    crate::decode::compressed::decode_slot_on_cpu(
                        &encoded,
                        slot,
                        &mut self.fallback,
                        &mut self.fallback_scratch,
                    )
                    .map_err(|e| {
                        RenderError::Decode(format!(
                            "{e} (after the GPU codec refused the frame: {why})"
                        ))
                    })?;
                    plan.to_mut().encoded = None;
                }
            }
        }
        let plan: &FramePlan = plan;
        self.decoding = matches!(source, Source::Device(_));
        self.decoding_nvjpeg = self.decoding && nvjpeg;
        let shared = self.shared.clone();
        let preferred = (!shared.decided() && self.groups_zero_copy(source, plan, slot))
            .then_some(Strategy::ZeroCopy);
        let strategy = shared.strategy(preferred, |candidates| {
            self.calibrate(candidates, source, plan, slot)
        })?;
        let before = self.batch.as_ref().map_or(0, Vec::len);
        let mut outcome = self.render_with(strategy, source, plan, slot)?;
        if let Source::Device(_) = source {
            match self.batch.as_mut() {
                // Deferred to the batch's end: its decode is timed there.
                Some(batch) if batch.len() > before => {
                    if let Some(d) = batch.last_mut() {
                        d.decoded = true;
                        d.decoded_together = together;
                    }
                }
                // The stream was synchronized at the end of render_with: the decode's events
                // are complete.
                _ if together => decode_time = self.together.share()?,
                _ => {
                    let (a, b) = self.decode_marks();
                    decode_time = Event::elapsed_ms(a, b)
                        .map(|m| Duration::from_secs_f64(m.max(0.0) as f64 / 1e3))?;
                }
            }
            self.shared.gpu_decoded.fetch_add(1, Ordering::Relaxed);
        }
        outcome.timings.decode = decode_time;
        Ok(outcome)
    }

    /// Queues the GPU decode of the frame's codestream (in `slot.input`) into this worker's
    /// device buffer (while a batch is built, that of the frame's position in it), between the
    /// two decode events.
    fn gpu_decode(
        &mut self,
        encoded: &crate::decode::compressed::EncodedFrame,
        slot: &Slot,
    ) -> Result<(u64, Decoded), String> {
        let device = &self.shared.devices[self.device_slot];
        device.bind().map_err(|e| e.to_string())?;
        let bytes = encoded.coding.decoded_bytes();
        let index = self.batch.as_ref().map(Vec::len);
        if let Some(last) = index.and(self.batch_last_decode) {
            if let Some(ev) = self.batch_ev.get(last) {
                ev[1].synchronize().map_err(|e| e.to_string())?;
            }
        }
        let buffer = match index.and_then(|i| self.batch_decoded.get_mut(i)) {
            Some(own) => own,
            None => &mut self.dev_decoded,
        };
        let dst = driver::ensure_buffer(buffer, &self.stream, bytes).map_err(|e| e.to_string())?;
        self.decode_marks()
            .0
            .record(&self.stream)
            .map_err(|e| e.to_string())?;
        let layout = self
            .frame_decoder()
            .decode(encoded, slot.input.bytes(encoded.len), dst)
            .map_err(|e| e.to_string())?;
        self.decode_marks()
            .1
            .record(&self.stream)
            .map_err(|e| e.to_string())?;
        if index.is_some() {
            self.batch_last_decode = index;
        }
        Ok((dst, layout))
    }
}

impl CudaWorker {
    /// This worker's GPU codecs, made on the first compressed frame.
    fn frame_decoder(&mut self) -> &mut FrameDecoder {
        let (codecs, slot, stream) = (&self.shared.codecs, self.device_slot, &self.stream);
        self.decoder
            .get_or_insert_with(|| FrameDecoder::new(codecs.clone(), slot, stream.clone()))
    }

    /// Queues the decode of the batch's frames that nvJPEG's batched decoders take — those
    /// compressed like the first compressed frame, when there are two or more — in one call
    /// (about the time of one frame's: `bench decode --batches`). Returns per frame where its
    /// values are; `None` for a frame decoded on its own later (by the GPU or, refused there,
    /// the CPU), which is every frame when the call fails (a damaged frame among them).
    fn decode_together(&mut self, frames: &[BatchFrame<'_>]) -> Vec<Option<(u64, Decoded)>> {
        let mut done = vec![None; frames.len()];
        if !self.together.usable {
            return done;
        }
        let Some(first) = frames.iter().find_map(|f| f.plan.encoded.clone()) else {
            return done;
        };
        if !matches!(
            first.coding.codec,
            GpuCodec::JpegLossless | GpuCodec::JpegDct
        ) {
            return done;
        }
        let members: Vec<usize> = (0..frames.len())
            .filter(|&i| {
                frames[i]
                    .plan
                    .encoded
                    .as_ref()
                    .is_some_and(|e| e.coding == first.coding)
            })
            .collect();
        if members.len() < 2 {
            return done;
        }
        match self.decode_members(&first, frames, &members) {
            Ok(dsts) => {
                for (&i, d) in members.iter().zip(dsts) {
                    done[i] = Some(d);
                }
            }
            Err(Failure::Unsupported(why)) => {
                self.together.usable = false;
                tracing::debug!(
                    "worker {}: frames decoded one by one from now on: {why}",
                    self.index
                );
            }
            Err(why) => tracing::debug!(
                "worker {}: {} frames refused together ({why}); decoding them one by one",
                self.index,
                members.len()
            ),
        }
        done
    }

    /// [`decode_together`](Self::decode_together)'s call for `members` of `frames`, coded as
    /// `first`.
    fn decode_members(
        &mut self,
        first: &EncodedFrame,
        frames: &[BatchFrame<'_>],
        members: &[usize],
    ) -> Result<Vec<(u64, Decoded)>, Failure> {
        let device = |e: CudaError| Failure::Device(e.to_string());
        self.shared.devices[self.device_slot]
            .bind()
            .map_err(device)?;
        let bytes = first.coding.decoded_bytes();
        if self.together.buffers.len() < members.len() {
            self.together.buffers.resize_with(members.len(), || None);
        }
        let mut dsts = Vec::with_capacity(members.len());
        for buffer in &mut self.together.buffers[..members.len()] {
            dsts.push(driver::ensure_buffer(buffer, &self.stream, bytes).map_err(device)?);
        }
        let mut data = Vec::with_capacity(members.len());
        for &i in members {
            let len = frames[i].plan.encoded.as_ref().map_or(0, |e| e.len);
            data.push(frames[i].slot.input.bytes(len));
        }
        self.together.ev[0].record(&self.stream).map_err(device)?;
        let layout = self.frame_decoder().decode_batch(first, &data, &dsts)?;
        self.together.ev[1].record(&self.stream).map_err(device)?;
        self.together.frames = members.len();
        self.shared.decode_calls.add(members.len());
        Ok(dsts.into_iter().map(|d| (d, layout)).collect())
    }

    /// Times each candidate strategy on this real frame (best of three) for `transfer = auto`.
    fn calibrate(
        &mut self,
        candidates: &[Strategy],
        source: Source,
        plan: &FramePlan,
        slot: &mut Slot,
    ) -> Vec<(Strategy, f64)> {
        // Each measurement must wait for its own frame: no batch while measuring.
        let batch = self.batch.take();
        let mut table = Vec::new();
        for &s in candidates {
            let mut best = f64::INFINITY;
            for _ in 0..3 {
                let t = Instant::now();
                if self.render_with(s, source, plan, slot).is_err() {
                    best = f64::INFINITY;
                    break;
                }
                best = best.min(t.elapsed().as_secs_f64() * 1e3);
            }
            table.push((s, best));
        }
        self.batch = batch;
        table
    }
}
