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
    pub kernel_cache: Option<PathBuf>,
    /// Folder searched first for NVIDIA's codec libraries (nvJPEG, nvJPEG2000, nvCOMP).
    pub library_path: Option<PathBuf>,
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
        }
    }
}

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
