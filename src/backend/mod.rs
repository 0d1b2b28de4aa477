//! Backends execute frame plans: the CPU reference backend, and (when a usable NVIDIA GPU is
//! present) the CUDA backend. Both implement [`Backend`]; the pipeline neither knows nor cares
//! which one it drives.

pub mod cpu;
pub mod cuda;
pub mod options;
pub mod warm;

use std::sync::Arc;
use std::time::Duration;

use crate::memory::{HostAllocator, Slot};
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
}

/// Time spent in the parts of rendering one frame.
#[derive(Debug, Clone, Copy, Default)]
pub struct RenderTimings {
    /// Host-to-device transfer (zero for the CPU, or for mapped memory).
    pub transfer_in: Duration,
    /// The chain itself.
    pub compute: Duration,
    /// Device-to-host transfer.
    pub transfer_out: Duration,
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
}

/// A compute backend.
pub trait Backend: Send + Sync {
    /// Name, devices, strategy.
    fn info(&self) -> BackendInfo;
    /// Where slot memory must come from for this backend.
    fn allocator(&self) -> Arc<dyn HostAllocator>;
    /// Creates the per-thread worker `index` (a GPU worker owns a stream).
    fn worker(&self, index: usize) -> Result<Box<dyn RenderWorker>, String>;
    /// Render worker threads this backend wants by default; 0 = none, the writer threads
    /// render each frame themselves (each with its own [`Backend::worker`]).
    fn default_workers(&self) -> usize;
    /// Gives the backend the run's statistics (GPU figures are published there).
    fn attach_stats(&self, _stats: Arc<crate::observe::stats::Stats>) {}
    /// Called once after the last frame (final statistics).
    fn finish(&self) {}
}

/// Renders frames on one thread (one CUDA stream for the GPU backend).
pub trait RenderWorker: Send {
    /// Reads `plan.input_bytes()` from `slot.input`, writes `plan.output_bytes()` pixels to
    /// `slot.output` (or `plan.output_capacity()` bytes of filtered PNG rows, as the outcome
    /// says).
    fn render(&mut self, plan: &FramePlan, slot: &mut Slot) -> Result<RenderOutcome, String>;
}
