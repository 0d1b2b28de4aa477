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

/// Why a job over `inputs` is too small for `auto` to open the GPU (`None`: it is not, or the
/// inputs are not known).
fn too_small_for_the_gpu(settings: &Settings, inputs: &[std::path::PathBuf]) -> Option<String> {
    let threshold = settings
        .auto_min_input_bytes
        .unwrap_or(available_cores() as u64 * (256 << 20));
    if inputs.is_empty() || threshold == 0 {
        return None;
    }
    let total = source::input_bytes(inputs, Some(&settings.output_dir), threshold);
    (total < threshold).then(|| {
        format!(
            "{} MiB of input is below gpu.auto_min_input_mib ({} MiB): opening the GPU would \
             cost more than it saves",
            total >> 20,
            threshold >> 20
        )
    })
}

/// `settings` with `gpu.decode_streams` streams per device when the first input file is JPEG
/// 2000 that the GPU will decode (nvJPEG2000 found, `gpu.decode` not "none"): its decodes take
/// milliseconds each, so many streams keep the GPU busy where two would leave it idle.
fn decode_streams(settings: &Settings, inputs: &[std::path::PathBuf]) -> Option<Settings> {
    if settings.backend == BackendChoice::Cpu
        || settings.gpu_decode == config::GpuDecode::None
        || settings.decode_streams <= settings.streams
        || inputs.is_empty()
    {
        return None;
    }
    let info = pipeline::first_file_info(settings, inputs)?;
    let codec = decode::compressed::GpuCodec::of(&info.transfer_syntax)?;
    if codec != decode::compressed::GpuCodec::Jpeg2000 {
        return None;
    }
    backend::cuda::libs::open(&["libnvjpeg2k.so.0"], settings.library_path.as_deref()).ok()?;
    tracing::info!(
        "first input file is JPEG 2000: {} CUDA streams per device (gpu.decode_streams)",
        settings.decode_streams
    );
    Some(Settings {
        streams: settings.decode_streams,
        ..settings.clone()
    })
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
    let tuned = decode_streams(settings, inputs);
    let settings = tuned.as_ref().unwrap_or(settings);
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
            Ok(()) => match too_small_for_the_gpu(settings, inputs) {
                Some(why) => {
                    tracing::info!("{why}; using the CPU backend");
                    Ok(Arc::new(CpuBackend::new(format!("auto: {why}"))))
                }
                // The driver is there: initialize it in the background while the CPU starts.
                None => Ok(Arc::new(backend::warm::WarmStart::start(settings))),
            },
            Err(why) => {
                tracing::info!("CUDA not usable ({why}); using the CPU backend");
                Ok(Arc::new(CpuBackend::new(format!("auto: {why}"))))
            }
        },
    }
}

/// A fresh, empty scratch folder for a unit test, unique to this process and `name`.
#[cfg(test)]
pub(crate) fn scratch_dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("dicomflow-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_keeps_small_jobs_on_the_cpu() {
        let dir = scratch_dir("auto-size");
        std::fs::write(dir.join("slice.dcm"), vec![0u8; 4096]).unwrap();
        let inputs = [dir.clone()];
        let with = |bytes: Option<u64>| Settings {
            auto_min_input_bytes: bytes,
            output_dir: dir.join("out"),
            ..Settings::default()
        };
        // Default threshold (256 MiB per core): 4 KiB is small.
        let why = too_small_for_the_gpu(&with(None), &inputs).unwrap();
        assert!(why.contains("0 MiB of input"), "{why}");
        assert!(too_small_for_the_gpu(&with(Some(4096)), &inputs).is_none());
        assert!(too_small_for_the_gpu(&with(Some(4097)), &inputs).is_some());
        // 0 = always the GPU; unknown inputs (library callers) = no opinion.
        assert!(too_small_for_the_gpu(&with(Some(0)), &inputs).is_none());
        assert!(too_small_for_the_gpu(&with(None), &[]).is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
