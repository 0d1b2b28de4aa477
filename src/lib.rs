//! dicomflow turns folders of DICOM images into 8-bit images through an overlapped pipeline:
//! loader threads decode stored values straight into a ring of reusable slots, a backend (CPU
//! reference, or CUDA when a GPU is usable) executes the render chain, and writer threads
//! encode and atomically write the outputs. Rendering is bit-exact with DCMTK.
//!
//! Reading order: [`config`] (settings) → [`source`] (finding files) → [`decode`] (header and
//! stored values) → [`render`] (the chain as data) → [`backend`] (executing it) →
//! [`pipeline`] (stages, slots, channels) → [`output`] (encoding, atomic writes) →
//! [`stats`] / [`report`] (what happened).

pub mod backend;
pub mod bench;
pub mod config;
pub mod decode;
pub mod error;
pub mod inspect;
pub mod output;
pub mod pipeline;
pub mod render;
pub mod report;
pub mod source;
pub mod stats;
pub mod synth;
pub mod trace;

use std::sync::Arc;

use backend::cpu::CpuBackend;
use backend::cuda::CudaBackend;
use backend::Backend;
use config::{BackendChoice, Settings};
use error::FatalError;

/// Cores available to this process.
pub fn available_cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// Chooses the backend the settings ask for. `auto` falls back to the CPU (saying why);
/// `cuda` on a machine without a usable GPU is a fatal error.
pub fn select_backend(settings: &Settings) -> Result<Arc<dyn Backend>, FatalError> {
    select_backend_for(settings, &[])
}

/// [`select_backend`] for a run over `inputs`: an explicit CUDA backend prepares slot memory
/// for the first file's frames while the driver starts.
pub fn select_backend_for(
    settings: &Settings,
    inputs: &[std::path::PathBuf],
) -> Result<Arc<dyn Backend>, FatalError> {
    match settings.backend {
        BackendChoice::Cpu => Ok(Arc::new(CpuBackend::new("requested (backend = cpu)"))),
        BackendChoice::Cuda => {
            CudaBackend::new_prepared(settings, "requested (backend = cuda)", inputs)
                .map(|b| Arc::new(b) as Arc<dyn Backend>)
                .map_err(|why| {
                    FatalError::Backend(format!("backend = \"cuda\" is not usable here: {why}"))
                })
        }
        BackendChoice::Auto => match backend::cuda::driver::libraries() {
            // The driver is there: initialize it in the background while the CPU starts.
            Ok(()) => Ok(Arc::new(backend::warm::WarmStart::start(settings))),
            Err(why) => {
                tracing::info!("CUDA not usable ({why}); using the CPU backend");
                Ok(Arc::new(CpuBackend::new(format!("auto: {why}"))))
            }
        },
    }
}
