//! The CUDA driver as dicomflow uses it: thin newtypes over cudarc's safe API (context, streams,
//! events, stream-ordered device buffers, modules, launches). What cudarc has no safe form of
//! lives beside it: `raw.rs` (copies between raw pointers, 2-D copies, 32-bit memsets, pool
//! attributes) and `mapped.rs` (host memory mapped for the device). Every failure names the call. Nothing here is
//! reached unless [`probe`] found libcuda, NVRTC and a device: cudarc panics on the first driver
//! call when libcuda is absent.
//!
//! cudarc's cross-stream event tracking is switched off on every context ([`Device::open`]): our
//! code orders work explicitly (one stream per worker, events and synchronizations where the
//! host reads), so the tracking would only add event records and waits to every launch.

use std::ffi::CStr;
use std::sync::Arc;

use cudarc::driver::{
    result, sys, CudaContext, CudaEvent, CudaFunction, CudaModule, CudaSlice, CudaStream,
    DevicePtr, DriverError, LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::Ptx;

mod mapped;
mod raw;
mod staging;

pub use mapped::{alloc_host_mapped, free_host, HostMapped, MappedRegion};
pub use raw::{
    copy_2d_dtod_async, copy_dtoh_async, copy_htod_async, memset_u32_async, pool_stats,
    set_release_threshold, PoolStats,
};
pub use staging::Staging;

/// A failed driver call: which call, which error.
#[derive(Debug, Clone)]
pub struct CudaError {
    pub call: &'static str,
    pub code: sys::CUresult,
}

impl CudaError {
    /// True for CUDA_ERROR_OUT_OF_MEMORY.
    pub fn is_out_of_memory(&self) -> bool {
        self.code == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY
    }
}

impl std::fmt::Display for CudaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match DriverError(self.code).error_name() {
            Ok(name) => write!(f, "{} failed: {}", self.call, name.to_string_lossy()),
            Err(_) => write!(f, "{} failed: {:?}", self.call, self.code),
        }
    }
}

impl std::error::Error for CudaError {}

/// Names the call that failed for a cudarc error: `.map_err(named("cuStreamCreate"))`.
fn named(call: &'static str) -> impl Fn(DriverError) -> CudaError {
    move |e| CudaError { call, code: e.0 }
}

/// Turns a `CUresult` into a `Result`.
pub fn check(call: &'static str, r: sys::CUresult) -> Result<(), CudaError> {
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(CudaError { call, code: r })
    }
}

/// Whether libcuda and libnvrtc can be loaded (cheap: no driver call).
pub fn libraries() -> Result<(), String> {
    // SAFETY: these only try to dlopen the libraries; no driver call is made.
    let libs = unsafe { sys::is_culib_present() && cudarc::nvrtc::sys::is_culib_present() };
    if libs {
        Ok(())
    } else {
        Err("libcuda or libnvrtc not found".into())
    }
}

/// Whether CUDA is usable here: libcuda and libnvrtc load, the driver initialises, and at
/// least one device exists. Returns the device count, or why not.
pub fn probe() -> Result<usize, String> {
    // Checked first: cudarc panics on its first driver call when libcuda is absent.
    libraries()?;
    result::init().map_err(|e| named("cuInit")(e).to_string())?;
    let n = result::device::get_count().map_err(|e| named("cuDeviceGetCount")(e).to_string())?;
    if n <= 0 {
        return Err("no CUDA device".into());
    }
    Ok(n as usize)
}

/// One GPU and its primary context.
pub struct Device {
    pub ordinal: usize,
    pub name: String,
    pub compute_capability: (i32, i32),
    /// Streaming multiprocessors.
    pub multiprocessors: u32,
    pub total_mem: usize,
    ctx: Arc<CudaContext>,
}

impl Device {
    /// Retains the primary context of device `ordinal` (after a successful [`probe`]) and makes
    /// it current on the calling thread.
    pub fn open(ordinal: usize) -> Result<Arc<Device>, CudaError> {
        // Checked on its own so a bad ordinal is reported as before (CudaContext::new repeats it).
        result::device::get(ordinal as i32).map_err(named("cuDeviceGet"))?;
        let ctx = CudaContext::new(ordinal).map_err(named("cuDevicePrimaryCtxRetain"))?;
        // SAFETY: we manage ordering between streams ourselves: each buffer is used on the
        // stream that allocated it (and freed there, stream-ordered), and every hand-over to the
        // host or another stream goes through an event or stream synchronization. Called before
        // any stream or buffer of this context exists, so no buffer is tracked.
        unsafe { ctx.disable_event_tracking() };
        let name = ctx.name().map_err(named("cuDeviceGetName"))?;
        let compute_capability = ctx
            .compute_capability()
            .map_err(named("cuDeviceGetAttribute"))?;
        let multiprocessors = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(named("cuDeviceGetAttribute"))?
            .max(1) as u32;
        let total_mem = ctx.total_mem().map_err(named("cuDeviceTotalMem"))?;
        Ok(Arc::new(Device {
            ordinal,
            name,
            compute_capability,
            multiprocessors,
            total_mem,
            ctx,
        }))
    }

    /// Makes this device's context current on the calling thread (a no-op when it already is).
    pub fn bind(&self) -> Result<(), CudaError> {
        self.ctx.bind_to_thread().map_err(named("cuCtxSetCurrent"))
    }

    /// The device handle (for pool queries).
    pub fn raw(&self) -> sys::CUdevice {
        self.ctx.cu_device()
    }
}

/// A non-blocking stream.
pub struct Stream {
    inner: Arc<CudaStream>,
    pub device: Arc<Device>,
}

impl Stream {
    pub fn new(device: &Arc<Device>) -> Result<Arc<Stream>, CudaError> {
        // No context-wide synchronization here: cudarc only adds one while it tracks events.
        let inner = device.ctx.new_stream().map_err(named("cuStreamCreate"))?;
        Ok(Arc::new(Stream {
            inner,
            device: device.clone(),
        }))
    }

    /// The raw handle, for the codec libraries (owned by this `Stream`: never destroy it).
    pub fn raw(&self) -> sys::CUstream {
        self.inner.cu_stream()
    }

    /// Waits for all work queued on the stream.
    pub fn synchronize(&self) -> Result<(), CudaError> {
        self.inner
            .synchronize()
            .map_err(named("cuStreamSynchronize"))
    }
}

impl Drop for Stream {
    /// Waits for the stream's work before it goes (cudarc's `CudaStream` destroys without
    /// waiting): host memory a kernel still reads may be freed right after. Every
    /// [`DeviceBuffer`] holds its `Arc<Stream>`, so this runs after their stream-ordered frees.
    fn drop(&mut self) {
        let _ = self.inner.synchronize();
    }
}

/// A timing event.
pub struct Event {
    inner: CudaEvent,
}

impl Event {
    pub fn new(device: &Arc<Device>) -> Result<Event, CudaError> {
        // CU_EVENT_DEFAULT keeps timing on (cudarc's `None` would disable it).
        Self::with_flags(device, sys::CUevent_flags::CU_EVENT_DEFAULT)
    }

    /// A timing event whose [`synchronize`](Self::synchronize) sleeps instead of spinning
    /// (`CU_EVENT_BLOCKING_SYNC`): for waits long enough that a spinning thread would take a
    /// core from the threads that have work.
    pub fn blocking(device: &Arc<Device>) -> Result<Event, CudaError> {
        Self::with_flags(device, sys::CUevent_flags::CU_EVENT_BLOCKING_SYNC)
    }

    fn with_flags(device: &Arc<Device>, flags: sys::CUevent_flags) -> Result<Event, CudaError> {
        let inner = device
            .ctx
            .new_event(Some(flags))
            .map_err(named("cuEventCreate"))?;
        Ok(Event { inner })
    }

    pub fn record(&self, stream: &Stream) -> Result<(), CudaError> {
        self.inner
            .record(&stream.inner)
            .map_err(named("cuEventRecord"))
    }

    pub fn synchronize(&self) -> Result<(), CudaError> {
        self.inner
            .synchronize()
            .map_err(named("cuEventSynchronize"))
    }

    /// Milliseconds between two recorded, completed events. Unlike cudarc's `elapsed_ms` this
    /// does not synchronize both events first: callers have synchronized, and an event never
    /// recorded must fail here rather than be waited on.
    pub fn elapsed_ms(start: &Event, end: &Event) -> Result<f32, CudaError> {
        // SAFETY: both are live events of this process; the driver checks that they were
        // recorded and completed (CUDA_ERROR_NOT_READY / INVALID_HANDLE otherwise).
        unsafe { result::event::elapsed(start.inner.cu_event(), end.inner.cu_event()) }
            .map_err(named("cuEventElapsedTime"))
    }
}

/// Device memory from the stream-ordered allocator (`cuMemAllocAsync` on the device's default
/// pool, through cudarc's `CudaStream::alloc`), freed with `cuMemFreeAsync` on the same stream.
pub struct DeviceBuffer {
    // Field order matters: the slice (its stream-ordered free) drops before the stream, whose
    // last owner synchronizes it.
    _slice: CudaSlice<u8>,
    ptr: u64,
    len: usize,
    stream: Arc<Stream>,
}

impl DeviceBuffer {
    pub fn alloc(stream: &Arc<Stream>, len: usize) -> Result<DeviceBuffer, CudaError> {
        // SAFETY: the memory is left uninitialized; it holds plain bytes (any bit pattern is a
        // valid u8) and our kernels and copies write it before anything reads it.
        let slice =
            unsafe { stream.inner.alloc::<u8>(len.max(1)) }.map_err(named("cuMemAllocAsync"))?;
        // Without event tracking the returned guard records nothing; the address is fixed for
        // the slice's life, so it is read once here.
        let ptr = {
            let (ptr, _no_record) = slice.device_ptr(&stream.inner);
            ptr
        };
        Ok(DeviceBuffer {
            ptr,
            _slice: slice,
            len,
            stream: stream.clone(),
        })
    }

    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // cudarc's CudaSlice frees with cuMemFreeAsync on its stream without binding a context
        // first; bind as the old wrapper did, so the free never meets a thread with none.
        let _ = self.stream.device.bind();
    }
}

/// Grows `buf` to at least `len` bytes (stream-ordered), keeping it when large enough.
pub fn ensure_buffer(
    buf: &mut Option<DeviceBuffer>,
    stream: &Arc<Stream>,
    len: usize,
) -> Result<u64, CudaError> {
    if buf.as_ref().is_none_or(|b| b.len() < len) {
        *buf = None; // free first (stream-ordered) so the pool can reuse the memory
        *buf = Some(DeviceBuffer::alloc(stream, len)?);
    }
    Ok(buf.as_ref().map(|b| b.ptr()).unwrap_or(0))
}

/// A loaded module (CUBIN).
pub struct Module {
    inner: Arc<CudaModule>,
    device: Arc<Device>,
}

impl Module {
    /// Loads a CUBIN image on `device`.
    pub fn load(device: &Arc<Device>, image: &[u8]) -> Result<Arc<Module>, CudaError> {
        // `Ptx::from_binary` hands the image to cuModuleLoadData (a copy, once per device).
        let inner = device
            .ctx
            .load_module(Ptx::from_binary(image.to_vec()))
            .map_err(named("cuModuleLoadData"))?;
        Ok(Arc::new(Module {
            inner,
            device: device.clone(),
        }))
    }

    /// Looks up a kernel.
    pub fn function(&self, name: &'static CStr) -> Result<Function, CudaError> {
        self.device.bind()?;
        let name = name.to_str().unwrap_or("kernel");
        let inner = self
            .inner
            .load_function(name)
            .map_err(named("cuModuleGetFunction"))?;
        Ok(Function { inner, name })
    }
}

/// A kernel of a loaded module (keeps the module loaded).
#[derive(Clone)]
pub struct Function {
    inner: CudaFunction,
    pub name: &'static str,
}

/// Most arguments a kernel of ours takes (ops_resample_h has 16).
const MAX_ARGS: usize = 24;

// Args stores a u32 in the low half of a u64 cell and lets the driver read the first 4 bytes.
const _: () = assert!(cfg!(target_endian = "little"));

/// Kernel arguments: each value lives in its own 8-byte cell; the driver copies as many bytes
/// as the kernel's parameter has (4 for `u32`, 8 for `u64`/pointers), which on little-endian
/// targets reads the value's low bytes. The cells are inline (no allocation per launch).
pub struct Args {
    cells: [u64; MAX_ARGS],
    len: usize,
}

impl Default for Args {
    fn default() -> Self {
        Args {
            cells: [0; MAX_ARGS],
            len: 0,
        }
    }
}

impl Args {
    pub fn u64(mut self, v: u64) -> Self {
        // Past MAX_ARGS the count still grows so `launch` can refuse the call.
        if let Some(c) = self.cells.get_mut(self.len) {
            *c = v;
        }
        self.len += 1;
        self
    }

    pub fn u32(self, v: u32) -> Self {
        self.u64(u64::from(v))
    }

    /// The values pushed, or an error when there were more than the cells hold.
    fn cells(&self) -> Result<&[u64], CudaError> {
        self.cells.get(..self.len).ok_or(CudaError {
            call: "cuLaunchKernel (more than 24 arguments)",
            code: sys::CUresult::CUDA_ERROR_INVALID_VALUE,
        })
    }
}

/// Launches `f` on `stream` with a 1-D grid.
pub fn launch(
    f: &Function,
    grid: u32,
    block: u32,
    shared: u32,
    stream: &Stream,
    args: Args,
) -> Result<(), CudaError> {
    launch_grid(f, (grid, 1), block, shared, stream, args)
}

/// Launches `f` on `stream` with a 2-D grid of `(x, y)` blocks (a frame per `y` in the group
/// kernels).
pub fn launch_grid(
    f: &Function,
    (grid, grid_y): (u32, u32),
    block: u32,
    shared: u32,
    stream: &Stream,
    args: Args,
) -> Result<(), CudaError> {
    let cells = args.cells()?;
    let mut builder = stream.inner.launch_builder(&f.inner);
    for cell in cells {
        builder.arg(cell);
    }
    let cfg = LaunchConfig {
        grid_dim: (grid.max(1), grid_y.max(1), 1),
        block_dim: (block, 1, 1),
        shared_mem_bytes: shared,
    };
    // SAFETY: the cells outlive the call (the driver copies parameters at launch); the argument
    // list matches the kernel signature (callers pass them in declaration order, each a u32 or a
    // u64/device pointer); the pointers passed are live allocations the kernel may touch.
    unsafe { builder.launch(cfg) }
        .map(|_| ())
        .map_err(named("cuLaunchKernel"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_keep_each_value_in_its_own_cell_with_u32_in_the_low_bytes() {
        let args = Args::default().u64(0x1122_3344_5566_7788).u32(7).u64(9);
        let cells = args.cells().unwrap();
        assert_eq!(cells, &[0x1122_3344_5566_7788, 7, 9]);
        // The driver reads a u32 parameter as the cell's first 4 bytes.
        assert_eq!(cells[1].to_ne_bytes()[..4], 7u32.to_le_bytes());
    }

    #[test]
    fn more_arguments_than_cells_are_refused_not_truncated() {
        let full = (0..MAX_ARGS as u32).fold(Args::default(), Args::u32);
        assert_eq!(full.cells().unwrap().len(), MAX_ARGS);
        let over = full.u32(1);
        let err = over.cells().unwrap_err();
        assert_eq!(err.code, sys::CUresult::CUDA_ERROR_INVALID_VALUE);
        assert!(err.call.contains("more than 24"));
    }
}
