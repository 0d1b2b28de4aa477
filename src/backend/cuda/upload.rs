//! The loaders' upload of large native frames (`gpu.upload = "auto"`): a loader reads the
//! frame from its file in 256 KiB chunks into four page-locked, mapped staging chunks of its
//! own, and one GPU block (`pull_frame`, kernels/pull.cu), launched once per frame on the
//! loader's stream, copies each chunk into device memory kept for the frame's slot as soon as
//! the loader has written it. The render worker then reads the frame from device memory.
//!
//! Why: at 2000² the GPU PNG pipeline was bound by host memory traffic, 24 MB per 8 MB slice (the
//! page cache read, the slot written, the GPU reading the slot over PCIe). Here the frame is read
//! from the page cache once, and the staging chunks are small enough to stay in the CPU's caches
//! (1 MiB per loader), where the GPU's reads can find them. Measured on the H200 host, 14 threads,
//! 1000 files of 8 MB in `/dev/shm` (ad hoc, session 26): 5669–6052 files/s into device memory this
//! way, against 4408–4974 reading into page-locked memory and copying with `cuMemcpyHtoDAsync`;
//! registering the page cache (`cuMemHostRegister` on a mapping of the file) managed 1207–1938,
//! since the registrations serialize. A copy per chunk from each loader (session 25's attempt) made
//! a quarter of a million driver calls a second and lost; here a frame costs one launch.
//!
//! In the pipeline the gain is smaller than in isolation (1000 × 2000², pipeline slices/s, runs
//! next to `gpu.upload = "off"` in four calls, three on the H200 and one on an H100): GPU PNG
//! 4164–4504 against 3331–4566, ahead by 3–28 % in all pairings but one (−2 %); the CUDA backend
//! with the writers compressing 2085–2629 against 2069–2289, −1 to +16 %. While they read, the 14
//! loaders ask for more than PCIe carries (~50 GB/s for the SMs' reads of host memory), so each
//! waits 0.4–0.9 ms a frame for the GPU to take its chunks; more blocks per pull or more hardware
//! queues changed nothing.
//!
//! Why a loader waits for its pull to finish before it hands the slot on: a pull kernel waits
//! for its loader, and the driver maps more streams than it has hardware queues (8 by default)
//! onto shared queues, so a pull can sit behind another loader's. While every loader feeds the
//! one pull it launched and waits for nothing else, the pull at the head of each queue always
//! progresses. A build that handed the slot on at once (the worker's stream waiting on an event
//! after the pull, 48 staging chunks so loaders rarely wait) broke that: a loader could wait for
//! ring space behind a pull stuck behind another's, and 1000 × 2000² hung (session 26).
//!
//! Only frames of [`MIN_UPLOAD_BYTES`] and more go this way (small frames are cheap to read and
//! their count would make the launches the cost: with the limit lifted, H200 host, 4000 × 512² GPU
//! PNG ran at 25 146–29 377 pipeline slices/s against 25 576–39 270, with 1 to 8 blocks per pull,
//! though the loaders waited 0.0 ms a frame; session 27), on a backend with one GPU, for chains the
//! GPU renders from the stored values (grayscale and window channels up to 16 bits, no overlay). A
//! failure on the GPU side (a stall, a launch or an allocation that fails) reads that frame into
//! the slot as before and stops the uploads for the run, with one warning.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::driver::{
    self, Args, CudaError, Device, DeviceBuffer, Function, HostMapped, Module, Stream,
};
use crate::backend::{FrameUpload, UploadError};
use crate::memory::Slot;
use crate::render::plan::{Chain, FramePlan};
use crate::render::table::IndexMap;

/// Bytes per staging chunk, and chunks per loader (the ad hoc sweep: 256 KiB × 4 gave
/// 6033/6051 files/s, 256 KiB × 8 5949–5956, 1 MiB × 4 5858–5865, 128 KiB × 8 5669–5691).
pub const CHUNK: usize = 256 << 10;
pub const STAGING_CHUNKS: usize = 4;
/// Threads per pulling block (1024 gave no more: 5712–5727 files/s).
const THREADS: u32 = 512;
/// Blocks per frame's pull, each copying its share of every chunk (the kernel and the control
/// block take up to 62). More did not help in the pipeline (H200, 1000 × 2000², GPU PNG,
/// pipeline slices/s: 1 block 4164, 2 blocks 3977 / 4042, 4 blocks 4050 / 4011 / 4172,
/// 8 blocks 3381 / 3395); the loaders' wait for the GPU stayed 0.5–0.9 ms a frame.
const BLOCKS: usize = 1;
/// The smallest frame the loaders upload: where streamed reads start to pay for large frames
/// too (`memory::streaming`), for the same reason: below it a frame is cheap to read.
pub const MIN_UPLOAD_BYTES: usize = crate::memory::streaming::MIN_STREAMED;
/// A GPU that takes no chunk for this long is taken as stuck.
const STALL: Duration = Duration::from_secs(10);
/// Words of the control block (kernels/pull.cu): produced, stop, and per block consumed.
const PRODUCED: usize = 0;
const STOP: usize = 8;
const CONSUMED: usize = 16;

/// A loader's staging ring: its stream, chunks and control block.
struct Channel {
    // Field order matters: the stream (whose drop waits for its kernels) goes first.
    stream: Arc<Stream>,
    staging: HostMapped,
    ctrl: HostMapped,
    /// Chunks this loader has produced on this ring (the kernel's `first`).
    produced: u64,
    /// Time spent waiting for the GPU to take chunks, since the ring was last given back.
    waited: Duration,
}

impl Channel {
    fn new(device: &Arc<Device>) -> Result<Channel, CudaError> {
        Ok(Channel {
            stream: Stream::new(device)?,
            staging: HostMapped::new(device, CHUNK * STAGING_CHUNKS)?,
            ctrl: HostMapped::new(device, 4096)?,
            produced: 0,
            waited: Duration::ZERO,
        })
    }

    fn counter(&self, word: usize) -> &AtomicU64 {
        debug_assert!((word + 1) * 8 <= self.ctrl.len());
        // SAFETY: the control block is page-aligned and 4 KiB long, so the word is aligned and
        // inside it; the GPU writes it only with whole, aligned 64-bit stores.
        unsafe { &*(self.ctrl.as_ptr() as *const AtomicU64).add(word) }
    }

    /// Waits until `done` holds for the kernel's consumed count: spinning briefly, then
    /// yielding the core (the loaders share cores with the writers).
    /// Chunks every block has consumed.
    fn consumed(&self) -> u64 {
        (0..BLOCKS)
            .map(|b| self.counter(CONSUMED + 8 * b).load(Ordering::Acquire))
            .min()
            .unwrap_or(0)
    }

    fn wait(&mut self, done: impl Fn(u64) -> bool) -> Result<(), UploadError> {
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            if done(self.consumed()) {
                if spins > 0 {
                    self.waited += start.elapsed();
                }
                return Ok(());
            }
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
                continue;
            }
            if start.elapsed() > STALL {
                return Err(UploadError::Gpu(format!(
                    "the GPU took no chunk of a frame for {} s",
                    STALL.as_secs()
                )));
            }
            std::thread::yield_now();
        }
    }

    /// Stops the running kernel after a failed read and waits for it; the ring is then idle.
    fn abort(&mut self) -> Result<(), UploadError> {
        self.counter(STOP).store(1, Ordering::Release);
        self.stream
            .synchronize()
            .map_err(|e| UploadError::Gpu(e.to_string()))?;
        self.counter(STOP).store(0, Ordering::Relaxed);
        for b in 0..BLOCKS {
            self.counter(CONSUMED + 8 * b)
                .store(self.produced, Ordering::Release);
        }
        Ok(())
    }

    /// Streams `len` bytes at `offset` of `file` to the device at `dst` through this ring.
    fn pull(
        &mut self,
        kernel: &Function,
        file: &File,
        offset: u64,
        len: usize,
        dst: u64,
    ) -> Result<(), UploadError> {
        let gpu = |e: CudaError| UploadError::Gpu(e.to_string());
        let first = self.produced;
        let args = Args::default()
            .u64(self.ctrl.device_ptr())
            .u64(self.staging.device_ptr())
            .u64(CHUNK as u64)
            .u32(STAGING_CHUNKS as u32)
            .u64(first)
            .u64(dst)
            .u64(len as u64);
        driver::launch(kernel, BLOCKS as u32, THREADS, 0, &self.stream, args).map_err(gpu)?;
        for (j, at) in (0..len).step_by(CHUNK).enumerate() {
            let produced = first + j as u64;
            self.wait(|consumed| produced - consumed < STAGING_CHUNKS as u64)?;
            let n = CHUNK.min(len - at);
            let place = (produced % STAGING_CHUNKS as u64) as usize * CHUNK;
            // SAFETY: place + n ≤ the staging length; the kernel has consumed this staging
            // chunk (the wait above) and reads it again only after the counter below moves.
            let chunk =
                unsafe { std::slice::from_raw_parts_mut(self.staging.as_ptr().add(place), n) };
            if let Err(e) = file.read_exact_at(chunk, offset + at as u64) {
                self.abort()?;
                return Err(UploadError::Read(e));
            }
            self.produced = produced + 1;
            self.counter(PRODUCED)
                .store(self.produced, Ordering::Release);
        }
        let end = self.produced;
        self.wait(|consumed| consumed == end)
    }
}

/// The CUDA backend's [`FrameUpload`].
pub(crate) struct Uploader {
    device: Arc<Device>,
    _module: Arc<Module>,
    kernel: Function,
    /// Idle rings; a loader takes one per frame (at most one per loader exists).
    channels: Mutex<Vec<Channel>>,
    /// Per slot (by index): the device memory its uploaded frames go to.
    buffers: Mutex<Vec<Option<DeviceBuffer>>>,
    broken: AtomicBool,
    /// Frames uploaded so far.
    pub frames: AtomicU64,
    /// Nanoseconds the loaders waited for the GPU to take chunks.
    waited_ns: AtomicU64,
}

impl Uploader {
    pub fn new(device: Arc<Device>, module: Arc<Module>) -> Result<Uploader, CudaError> {
        let kernel = module.function(c"pull_frame")?;
        Ok(Uploader {
            device,
            _module: module,
            kernel,
            channels: Mutex::new(Vec::new()),
            buffers: Mutex::new(Vec::new()),
            broken: AtomicBool::new(false),
            frames: AtomicU64::new(0),
            waited_ns: AtomicU64::new(0),
        })
    }

    /// The device memory of slot `index`, at least `len` bytes.
    fn buffer(&self, index: usize, len: usize, stream: &Arc<Stream>) -> Result<u64, CudaError> {
        let mut buffers = self.buffers.lock().unwrap_or_else(|p| p.into_inner());
        if buffers.len() <= index {
            buffers.resize_with(index + 1, || None);
        }
        driver::ensure_buffer(&mut buffers[index], stream, len)
    }

    fn stop(&self, why: &str) {
        if !self.broken.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "the loaders stop uploading frames to the GPU ({why}); they read them into the \
                 slots from now on"
            );
        }
    }
}

impl Uploader {
    /// Says (at info level) how many frames went up and how long the loaders waited.
    pub fn said(&self) {
        let frames = self.frames.load(Ordering::Relaxed);
        if frames > 0 {
            tracing::info!(
                "upload: {frames} frames by the loaders, who waited {:.1} ms per frame for the GPU \
                 to take their chunks ({} blocks per pull)",
                self.waited_ns.load(Ordering::Relaxed) as f64 / 1e6 / frames as f64,
                BLOCKS
            );
        }
    }
}

/// Whether the GPU renders `plan` from its stored values as they are: the chains whose
/// values a table maps (grayscale and window channels up to 16 bits), without overlays (drawn
/// on the host from the stored values) and not compressed.
pub fn renders_from_values(plan: &FramePlan) -> bool {
    let tabled = match &plan.chain {
        Chain::Gray(g) => IndexMap::of(&g.stored).is_some(),
        Chain::Channels(gs) => {
            !gs.is_empty() && gs.iter().all(|g| IndexMap::of(&g.stored).is_some())
        }
        Chain::Color(_) => false,
    };
    tabled && plan.overlay.is_none() && plan.encoded.is_none()
}

impl FrameUpload for Uploader {
    fn wants(&self, plan: &FramePlan, slot: &Slot) -> bool {
        !self.broken.load(Ordering::Relaxed)
            && plan.input_bytes() >= MIN_UPLOAD_BYTES
            && renders_from_values(plan)
            // A slot the GPU maps is one the render workers take (under `backend = "auto"`,
            // slots made before CUDA was ready go to the CPU).
            && slot.input.device_ptr() != 0
            && slot.output.device_ptr() != 0
    }

    fn upload(
        &self,
        file: &File,
        offset: u64,
        len: usize,
        slot: &Slot,
    ) -> Result<u64, UploadError> {
        let gpu = |e: CudaError| UploadError::Gpu(e.to_string());
        let result = (|| {
            self.device.bind().map_err(gpu)?;
            let taken = self
                .channels
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .pop();
            let mut channel = match taken {
                Some(c) => c,
                None => Channel::new(&self.device).map_err(gpu)?,
            };
            let dst = match self.buffer(slot.index, len, &channel.stream) {
                Ok(dst) => dst,
                Err(e) => {
                    self.give_back(channel);
                    return Err(gpu(e));
                }
            };
            match channel.pull(&self.kernel, file, offset, len, dst) {
                Ok(()) => {
                    self.give_back(channel);
                    Ok(dst)
                }
                Err(UploadError::Read(e)) => {
                    self.give_back(channel);
                    Err(UploadError::Read(e))
                }
                Err(UploadError::Gpu(why)) => {
                    // A kernel may still wait on this ring, or not have started (queued behind
                    // another): told to stop, it ends when it runs instead of holding its
                    // hardware queue for ever. The ring is never used or freed again (its
                    // stream's drop would wait for that kernel).
                    channel.counter(STOP).store(1, Ordering::Release);
                    std::mem::forget(channel);
                    Err(UploadError::Gpu(why))
                }
            }
        })();
        match &result {
            Ok(_) => {
                self.frames.fetch_add(1, Ordering::Relaxed);
            }
            Err(UploadError::Gpu(why)) => self.stop(why),
            Err(UploadError::Read(_)) => {}
        }
        result
    }
}

impl Uploader {
    fn give_back(&self, mut channel: Channel) {
        let waited = std::mem::take(&mut channel.waited);
        self.waited_ns
            .fetch_add(waited.as_nanos() as u64, Ordering::Relaxed);
        self.channels
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(channel);
    }
}
