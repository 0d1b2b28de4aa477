//! The CUDA backend: slots in mapped page-locked memory, one stream per render worker, several
//! workers per device and several devices, device memory from the stream-ordered allocator,
//! kernels compiled by NVRTC and cached. Rendering applies the same tables the CPU reference
//! builds (src/render/table.rs), so its bytes equal the CPU backend's.
//!
//! Nothing in this module touches the driver before [`driver::probe`] succeeded: on a machine
//! without libcuda, `auto` quietly picks the CPU and `cuda` is a clear error.

pub mod bench;
pub mod driver;
pub mod nvrtc;
pub mod pinned;
mod worker;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::backend::{Backend, BackendInfo, RenderWorker};
use crate::config::{GpuSelection, Settings, Transfer};
use crate::pipeline::slot::{HeapAllocator, HostAllocator};
use crate::stats::{GpuFigures, Stats};
use driver::{Device, Module};

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
}

impl Shared {
    /// The strategy to use; the first caller under `auto` measures the candidates with
    /// `measure` while the others wait for its decision.
    fn strategy(
        &self,
        measure: impl FnOnce(&[Strategy]) -> Vec<(Strategy, f64)>,
    ) -> Result<Strategy, String> {
        let mut chosen = self.chosen.lock().map_err(|_| "strategy lock poisoned")?;
        if let Some(s) = *chosen {
            return Ok(s);
        }
        let table = measure(&[Strategy::ZeroCopy, Strategy::Pinned]);
        let best = table
            .iter()
            .filter(|(_, ms)| ms.is_finite())
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map(|x| x.0)
            .ok_or("no transfer strategy worked on the first frame")?;
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
            frames_per_device: self
                .frames
                .iter()
                .map(|f| f.load(Ordering::Relaxed))
                .collect(),
        });
    }
}

/// The CUDA backend.
pub struct CudaBackend {
    shared: Arc<Shared>,
    modules: Vec<Arc<Module>>,
    allocator: Arc<dyn HostAllocator>,
    streams: usize,
    transfer: Transfer,
    kernels: String,
    reason: String,
}

impl CudaBackend {
    /// Opens the selected devices, compiles or loads the kernels, and sets up the pools.
    /// Fails (with the reason) when CUDA is not usable here.
    pub fn new(settings: &Settings, reason: &str) -> Result<CudaBackend, String> {
        let started = std::time::Instant::now();
        let count = driver::probe()?;
        let probed = started.elapsed();
        let ordinals: Vec<usize> = match &settings.gpus {
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
            driver::set_release_threshold(&d, settings.release_threshold_bytes)
                .map_err(|e| format!("GPU {i}: {e}"))?;
            devices.push(d);
        }
        let opened = started.elapsed();
        let cache = nvrtc::cache_dir(settings.kernel_cache.as_deref());
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
        let loaded = started.elapsed();
        tracing::info!(
            "CUDA ready in {:.0} ms (driver {:.0} ms, devices {:.0} ms, kernels {:.0} ms)",
            loaded.as_secs_f64() * 1e3,
            probed.as_secs_f64() * 1e3,
            (opened - probed).as_secs_f64() * 1e3,
            (loaded - opened).as_secs_f64() * 1e3
        );
        kernels.push_str(&format!(
            "; CUDA ready in {:.0} ms",
            loaded.as_secs_f64() * 1e3
        ));
        let budget = if settings.pinned_budget_bytes > 0 {
            settings.pinned_budget_bytes
        } else {
            pinned::default_budget()
        };
        let pinned: Arc<dyn HostAllocator> =
            Arc::new(pinned::PinnedAllocator::new(devices[0].clone(), budget));
        let allocator: Arc<dyn HostAllocator> = if settings.transfer == Transfer::Pageable {
            Arc::new(HeapAllocator::default())
        } else {
            pinned.clone()
        };
        let chosen = match settings.transfer {
            Transfer::Auto => None,
            Transfer::ZeroCopy => Some(Strategy::ZeroCopy),
            Transfer::Pinned => Some(Strategy::Pinned),
            Transfer::Pageable => Some(Strategy::Pageable),
        };
        let shared = Arc::new(Shared {
            frames: devices.iter().map(|_| AtomicU64::new(0)).collect(),
            devices,
            chosen: Mutex::new(chosen),
            calibration: Mutex::new(Vec::new()),
            stats: std::sync::OnceLock::new(),
            pinned: allocator.clone(),
        });
        shared.publish();
        Ok(CudaBackend {
            shared,
            modules,
            allocator,
            streams: settings.streams,
            transfer: settings.transfer,
            kernels,
            reason: reason.to_string(),
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
        }
    }

    fn allocator(&self) -> Arc<dyn HostAllocator> {
        self.allocator.clone()
    }

    fn worker(&self, index: usize) -> Result<Box<dyn RenderWorker>, String> {
        let slot = index % self.shared.devices.len();
        let w =
            worker::CudaWorker::new(index, slot, self.shared.clone(), self.modules[slot].clone())?;
        Ok(Box::new(w))
    }

    fn default_workers(&self) -> usize {
        self.streams * self.shared.devices.len()
    }

    fn attach_stats(&self, stats: Arc<Stats>) {
        let _ = self.shared.stats.set(stats);
        self.shared.publish();
    }

    fn finish(&self) {
        self.shared.publish();
    }
}
