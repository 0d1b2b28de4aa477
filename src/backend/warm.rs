//! `backend = "auto"` with a warm start. Opening the CUDA driver, the device's context and the
//! kernels takes about a quarter of a second on the H200 host, as long as rendering a thousand
//! 512×512 slices. So `auto` starts rendering on the CPU reference at once while CUDA
//! initializes on a background thread, and each render worker moves to the GPU as soon as it is
//! ready. Both produce identical bytes, so where a frame was rendered changes nothing in the
//! output; the report says how many frames the CPU rendered during the warm-up. When CUDA turns
//! out to be unusable, the run simply stays on the CPU (and says why).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::backend::cpu::{CpuBackend, CpuRenderer};
use crate::backend::cuda::CudaBackend;
use crate::backend::options::{GpuOptions, Transfer};
use crate::backend::{
    Backend, BackendError, BackendInfo, BatchFrame, OutputWish, RenderError, RenderOutcome,
    RenderWorker,
};
use crate::memory::{AllocError, HeapAllocator, HostAllocator, HostBuffer, Slot};
use crate::observe::stats::Stats;

type Ready = Arc<OnceLock<Result<Arc<CudaBackend>, String>>>;

/// The warm-starting backend.
pub struct WarmStart {
    cpu: CpuBackend,
    cuda: Ready,
    init: Mutex<Option<std::thread::JoinHandle<()>>>,
    allocator: Arc<SwitchAllocator>,
    stats: Arc<OnceLock<Arc<Stats>>>,
    workers: usize,
    /// What the CUDA backend's workers will take per call (the ring is sized before CUDA is
    /// ready).
    frames_per_call: usize,
    /// [`Backend::ring_batches`], decided as [`CudaBackend`] will.
    ring_batches: usize,
    cpu_frames: Arc<AtomicU64>,
}

impl WarmStart {
    /// Starts CUDA initialization in the background and returns at once (`wish` as for
    /// [`CudaBackend::new`]).
    pub fn start(gpu: &GpuOptions, wish: &OutputWish) -> WarmStart {
        let cuda: Ready = Arc::new(OnceLock::new());
        let stats: Arc<OnceLock<Arc<Stats>>> = Arc::new(OnceLock::new());
        let init = {
            let (cuda, stats, gpu, wish) = (cuda.clone(), stats.clone(), gpu.clone(), wish.clone());
            std::thread::Builder::new()
                .name("cuda-init".into())
                .spawn(move || {
                    let result =
                        CudaBackend::new(&gpu, &wish, "auto: CUDA device found").map(Arc::new);
                    if let (Ok(b), Some(s)) = (&result, stats.get()) {
                        b.attach_stats(s.clone());
                        s.set_backend(format!("cuda ({})", b.info().transfer));
                    }
                    if let Err(why) = &result {
                        tracing::info!("CUDA not usable ({why}); staying on the CPU backend");
                    }
                    let _ = cuda.set(result);
                })
                .ok()
        };
        if init.is_none() {
            let _ = cuda.set(Err("cannot start the CUDA initialization thread".into()));
        }
        // Render workers for whichever backend ends up rendering: the GPU wants one per stream
        // per device, and the CPU phase at least a quarter of the cores (these workers switch
        // backends, so the writers cannot render themselves as with the plain CPU backend).
        let devices = super::cuda::visible_gpus().max(1);
        let workers = (gpu.streams * devices).max((crate::host::available_cores() / 4).max(1));
        WarmStart {
            cpu: CpuBackend::new("auto: CUDA still initializing"),
            allocator: Arc::new(SwitchAllocator {
                heap: HeapAllocator::default(),
                cuda: cuda.clone(),
                pageable: gpu.transfer == Transfer::Pageable,
            }),
            cuda,
            init: Mutex::new(init),
            stats,
            workers,
            frames_per_call: super::cuda::frames_per_call_for(gpu, wish),
            ring_batches: wish.ring_batches.max(1),
            cpu_frames: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Waits for the CUDA initialization to end (either way).
    pub fn wait_ready(&self) {
        if let Some(h) = self.init.lock().ok().and_then(|mut g| g.take()) {
            let _ = h.join();
        }
    }
}

impl Backend for WarmStart {
    fn info(&self) -> BackendInfo {
        let cpu_frames = self.cpu_frames.load(Ordering::Relaxed);
        match self.cuda.get() {
            Some(Ok(b)) => {
                let mut info = b.info();
                if cpu_frames > 0 {
                    info.reason.push_str(&format!(
                        "; warm start: {cpu_frames} frame(s) rendered on the CPU while CUDA initialized"
                    ));
                    if info.encoder != "cpu" {
                        info.encoder_reason.push_str(&format!(
                            "; the {cpu_frames} warm-start frame(s) were encoded on the CPU"
                        ));
                    }
                }
                info
            }
            Some(Err(why)) => {
                let mut info = self.cpu.info();
                info.reason = format!("auto: {why}");
                info
            }
            None => self.cpu.info(),
        }
    }

    fn allocator(&self) -> Arc<dyn HostAllocator> {
        self.allocator.clone()
    }

    fn worker(&self, index: usize) -> Result<Box<dyn RenderWorker>, BackendError> {
        Ok(Box::new(WarmWorker {
            index,
            cpu: CpuRenderer::default(),
            gpu: None,
            gpu_failed: false,
            cuda: self.cuda.clone(),
            pageable: self.allocator.pageable,
            cpu_frames: self.cpu_frames.clone(),
        }))
    }

    fn default_workers(&self) -> usize {
        self.workers
    }

    fn frames_per_call(&self) -> usize {
        self.frames_per_call
    }

    fn ring_batches(&self) -> usize {
        self.ring_batches
    }

    fn attach_stats(&self, stats: Arc<Stats>) {
        let _ = self.stats.set(stats.clone());
        if let Some(Ok(b)) = self.cuda.get() {
            b.attach_stats(stats.clone());
            stats.set_backend(format!("cuda ({})", b.info().transfer));
        }
    }

    fn gpu_route(&self) -> crate::decode::compressed::GpuRoute {
        // Until CUDA is ready the loaders decode on the CPU; a frame left compressed that a
        // worker still renders on the CPU is decoded there (CpuRenderer).
        match self.cuda.get() {
            Some(Ok(b)) => b.gpu_route(),
            _ => crate::decode::compressed::GpuRoute::NONE,
        }
    }

    fn gpu_start(
        &self,
        codec: crate::decode::compressed::GpuCodec,
    ) -> crate::decode::compressed::GpuStart {
        match self.cuda.get() {
            Some(Ok(b)) => b.gpu_start(codec),
            _ => crate::decode::compressed::GpuStart::Meanwhile { sample: false },
        }
    }

    fn gpu_sample(&self, sample: crate::decode::compressed::Sample) {
        if let Some(Ok(b)) = self.cuda.get() {
            b.gpu_sample(sample);
        }
    }

    fn uploader(&self) -> Option<Arc<dyn crate::backend::FrameUpload>> {
        match self.cuda.get() {
            Some(Ok(b)) => b.uploader(),
            _ => None,
        }
    }

    fn finish(&self) {
        // A job shorter than the driver's start does not wait for it: the binary leaves with
        // _exit, and library users may call `wait_ready`.
        if let Some(Ok(b)) = self.cuda.get() {
            b.finish();
        }
    }
}

/// Heap memory until CUDA is ready, mapped page-locked memory afterwards; heap slots are
/// replaced by pinned ones the next time they are reserved.
struct SwitchAllocator {
    heap: HeapAllocator,
    cuda: Ready,
    pageable: bool,
}

impl HostAllocator for SwitchAllocator {
    fn allocate(&self, len: usize) -> Result<HostBuffer, AllocError> {
        match self.cuda.get() {
            Some(Ok(b)) => b.allocator().allocate(len),
            _ => self.heap.allocate(len),
        }
    }

    fn kind(&self) -> &'static str {
        match self.cuda.get() {
            Some(Ok(b)) => b.allocator().kind(),
            _ => self.heap.kind(),
        }
    }

    fn bytes_in_use(&self) -> u64 {
        let gpu = match self.cuda.get() {
            Some(Ok(b)) => b.allocator().bytes_in_use(),
            _ => 0,
        };
        self.heap.bytes_in_use() + gpu
    }

    fn allocation_time(&self) -> std::time::Duration {
        match self.cuda.get() {
            Some(Ok(b)) => b.allocator().allocation_time(),
            _ => std::time::Duration::ZERO,
        }
    }

    fn should_replace(&self, buf: &HostBuffer) -> bool {
        !self.pageable
            && buf.capacity() > 0
            && buf.device_ptr() == 0
            && matches!(self.cuda.get(), Some(Ok(_)))
    }
}

/// A render worker that starts on the CPU and moves to the GPU when CUDA is ready.
struct WarmWorker {
    index: usize,
    cpu: CpuRenderer,
    gpu: Option<Box<dyn RenderWorker>>,
    gpu_failed: bool,
    cuda: Ready,
    pageable: bool,
    cpu_frames: Arc<AtomicU64>,
}

impl RenderWorker for WarmWorker {
    fn render(
        &mut self,
        plan: &crate::render::plan::FramePlan,
        slot: &mut Slot,
    ) -> Result<RenderOutcome, RenderError> {
        if self.gpu.is_none() && !self.gpu_failed {
            if let Some(Ok(b)) = self.cuda.get() {
                match b.worker(self.index) {
                    Ok(w) => self.gpu = Some(w),
                    Err(e) => {
                        tracing::warn!("render worker {} stays on the CPU: {e}", self.index);
                        self.gpu_failed = true;
                    }
                }
            }
        }
        // A slot allocated before CUDA was ready is ordinary heap memory: the GPU cannot map
        // it, so the CPU renders that frame (the slot becomes pinned at its next reserve).
        match &mut self.gpu {
            Some(g) if self.pageable || mapped(slot) => g.render(plan, slot),
            // The loaders upload only once CUDA is ready (Backend::uploader); a worker whose
            // GPU half could not start has no way to the values.
            _ if slot.on_device.is_some() => Err(RenderError::Internal(
                "the frame was read into GPU memory, and this render worker has no GPU".into(),
            )),
            _ => {
                self.cpu_frames.fetch_add(1, Ordering::Relaxed);
                self.cpu.render(plan, slot)
            }
        }
    }

    fn batch_size(&self) -> usize {
        self.gpu.as_ref().map_or(1, |g| g.batch_size())
    }

    /// The GPU worker's batch when every slot can go to the GPU; frame by frame otherwise.
    fn render_batch(
        &mut self,
        frames: &mut [BatchFrame<'_>],
    ) -> Vec<Result<RenderOutcome, RenderError>> {
        let pageable = self.pageable;
        match &mut self.gpu {
            Some(g) if pageable || frames.iter().all(|f| mapped(f.slot)) => g.render_batch(frames),
            _ => frames
                .iter_mut()
                .map(|f| self.render(f.plan, f.slot))
                .collect(),
        }
    }

    fn between_calls(&mut self) {
        if let Some(g) = &mut self.gpu {
            g.between_calls();
        }
    }
}

/// Whether both halves of the slot are mapped for the GPU.
fn mapped(slot: &Slot) -> bool {
    slot.input.device_ptr() != 0 && slot.output.device_ptr() != 0
}
