//! Checked, RAII wrappers over the CUDA driver API calls dicomflow uses (cudarc's raw `sys`
//! bindings, loaded at run time). Every failure names the call; every handle is released with
//! its matching call. Nothing here is reached unless [`probe`] found libcuda, NVRTC and a device:
//! cudarc panics on the first driver call when libcuda is absent.

use std::ffi::{c_void, CStr};
use std::sync::Arc;

use cudarc::driver::sys;

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
        let mut name: *const std::ffi::c_char = std::ptr::null();
        // SAFETY: cuGetErrorName writes a pointer to a static string (or leaves it null).
        let ok =
            unsafe { sys::cuGetErrorName(self.code, &mut name) } == sys::CUresult::CUDA_SUCCESS;
        if ok && !name.is_null() {
            // SAFETY: the driver returned a NUL-terminated static string.
            let s = unsafe { CStr::from_ptr(name) }.to_string_lossy();
            write!(f, "{} failed: {s}", self.call)
        } else {
            write!(f, "{} failed: {:?}", self.call, self.code)
        }
    }
}

impl std::error::Error for CudaError {}

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
    libraries()?;
    // SAFETY: the library is present (checked above); cuInit has no preconditions.
    check("cuInit", unsafe { sys::cuInit(0) }).map_err(|e| e.to_string())?;
    let mut n = 0;
    // SAFETY: n is a valid out pointer.
    check("cuDeviceGetCount", unsafe { sys::cuDeviceGetCount(&mut n) })
        .map_err(|e| e.to_string())?;
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
    dev: sys::CUdevice,
    ctx: sys::CUcontext,
}

// SAFETY: driver API handles (device, primary context) may be used from any thread once the
// context is made current on it, which `bind` does before every use.
unsafe impl Send for Device {}
// SAFETY: as above; the struct has no interior mutability.
unsafe impl Sync for Device {}

impl Device {
    /// Retains the primary context of device `ordinal` (after a successful [`probe`]).
    pub fn open(ordinal: usize) -> Result<Arc<Device>, CudaError> {
        let mut dev = 0;
        // SAFETY: out pointer valid; probe() ran cuInit.
        check("cuDeviceGet", unsafe {
            sys::cuDeviceGet(&mut dev, ordinal as i32)
        })?;
        let mut name = [0 as std::ffi::c_char; 256];
        // SAFETY: the buffer holds 256 chars and the driver NUL-terminates within it.
        check("cuDeviceGetName", unsafe {
            sys::cuDeviceGetName(name.as_mut_ptr(), 256, dev)
        })?;
        // SAFETY: NUL-terminated by the driver (buffer zeroed beforehand).
        let name = unsafe { CStr::from_ptr(name.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        let attr = |a: sys::CUdevice_attribute| -> Result<i32, CudaError> {
            let mut v = 0;
            // SAFETY: out pointer valid, dev valid.
            check("cuDeviceGetAttribute", unsafe {
                sys::cuDeviceGetAttribute(&mut v, a, dev)
            })?;
            Ok(v)
        };
        let major = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
        let minor = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
        let multiprocessors =
            attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?.max(1) as u32;
        let mut total_mem = 0usize;
        // SAFETY: out pointer valid.
        check("cuDeviceTotalMem", unsafe {
            sys::cuDeviceTotalMem_v2(&mut total_mem, dev)
        })?;
        let mut ctx = std::ptr::null_mut();
        // SAFETY: out pointer valid; released in Drop.
        check("cuDevicePrimaryCtxRetain", unsafe {
            sys::cuDevicePrimaryCtxRetain(&mut ctx, dev)
        })?;
        let device = Arc::new(Device {
            ordinal,
            name,
            compute_capability: (major, minor),
            multiprocessors,
            total_mem,
            dev,
            ctx,
        });
        device.bind()?;
        Ok(device)
    }

    /// Makes this device's context current on the calling thread.
    pub fn bind(&self) -> Result<(), CudaError> {
        // SAFETY: ctx is a retained primary context, alive as long as self.
        check("cuCtxSetCurrent", unsafe { sys::cuCtxSetCurrent(self.ctx) })
    }

    /// The device handle (for pool queries).
    pub fn raw(&self) -> sys::CUdevice {
        self.dev
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: balances the retain in open().
        unsafe {
            sys::cuDevicePrimaryCtxRelease_v2(self.dev);
        }
    }
}

/// A non-blocking stream.
pub struct Stream {
    raw: sys::CUstream,
    pub device: Arc<Device>,
}

// SAFETY: streams are driver handles usable from any thread with the context bound.
unsafe impl Send for Stream {}
// SAFETY: as above.
unsafe impl Sync for Stream {}

impl Stream {
    pub fn new(device: &Arc<Device>) -> Result<Arc<Stream>, CudaError> {
        device.bind()?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: out pointer valid, context current; destroyed in Drop.
        check("cuStreamCreate", unsafe {
            sys::cuStreamCreate(&mut raw, sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32)
        })?;
        Ok(Arc::new(Stream {
            raw,
            device: device.clone(),
        }))
    }

    pub fn raw(&self) -> sys::CUstream {
        self.raw
    }

    /// Waits for all work queued on the stream.
    pub fn synchronize(&self) -> Result<(), CudaError> {
        // SAFETY: raw is a live stream.
        check("cuStreamSynchronize", unsafe {
            sys::cuStreamSynchronize(self.raw)
        })
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        let _ = self.device.bind();
        // SAFETY: raw was created by cuStreamCreate and is destroyed once.
        unsafe {
            sys::cuStreamSynchronize(self.raw);
            sys::cuStreamDestroy_v2(self.raw);
        }
    }
}

/// A timing event.
pub struct Event {
    raw: sys::CUevent,
    device: Arc<Device>,
}

// SAFETY: events are driver handles usable from any thread with the context bound.
unsafe impl Send for Event {}

impl Event {
    pub fn new(device: &Arc<Device>) -> Result<Event, CudaError> {
        device.bind()?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: out pointer valid; CU_EVENT_DEFAULT keeps timing enabled.
        check("cuEventCreate", unsafe {
            sys::cuEventCreate(&mut raw, sys::CUevent_flags::CU_EVENT_DEFAULT as u32)
        })?;
        Ok(Event {
            raw,
            device: device.clone(),
        })
    }

    /// A timing event whose [`synchronize`](Self::synchronize) sleeps instead of spinning
    /// (`CU_EVENT_BLOCKING_SYNC`): for waits long enough that a spinning thread would take a
    /// core from the threads that have work.
    pub fn blocking(device: &Arc<Device>) -> Result<Event, CudaError> {
        device.bind()?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: out pointer valid; timing stays enabled (no DISABLE_TIMING flag).
        check("cuEventCreate", unsafe {
            sys::cuEventCreate(&mut raw, sys::CUevent_flags::CU_EVENT_BLOCKING_SYNC as u32)
        })?;
        Ok(Event {
            raw,
            device: device.clone(),
        })
    }

    pub fn record(&self, stream: &Stream) -> Result<(), CudaError> {
        // SAFETY: both handles live.
        check("cuEventRecord", unsafe {
            sys::cuEventRecord(self.raw, stream.raw())
        })
    }

    pub fn synchronize(&self) -> Result<(), CudaError> {
        // SAFETY: live event.
        check("cuEventSynchronize", unsafe {
            sys::cuEventSynchronize(self.raw)
        })
    }

    /// Milliseconds between two recorded, completed events.
    pub fn elapsed_ms(start: &Event, end: &Event) -> Result<f32, CudaError> {
        let mut ms = 0f32;
        // SAFETY: both events recorded and completed (caller synchronized).
        check("cuEventElapsedTime", unsafe {
            sys::cuEventElapsedTime_v2(&mut ms, start.raw, end.raw)
        })?;
        Ok(ms)
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        let _ = self.device.bind();
        // SAFETY: created by cuEventCreate, destroyed once.
        unsafe {
            sys::cuEventDestroy_v2(self.raw);
        }
    }
}

/// Device memory from the stream-ordered allocator (`cuMemAllocAsync`), freed with
/// `cuMemFreeAsync` on the same stream.
pub struct DeviceBuffer {
    ptr: sys::CUdeviceptr,
    len: usize,
    stream: Arc<Stream>,
}

// SAFETY: a device address plus the stream that frees it; moved between threads, not shared.
unsafe impl Send for DeviceBuffer {}

impl DeviceBuffer {
    pub fn alloc(stream: &Arc<Stream>, len: usize) -> Result<DeviceBuffer, CudaError> {
        stream.device.bind()?;
        let mut ptr = 0;
        // SAFETY: out pointer valid, stream live; freed in Drop on the same stream.
        check("cuMemAllocAsync", unsafe {
            sys::cuMemAllocAsync(&mut ptr, len.max(1), stream.raw())
        })?;
        Ok(DeviceBuffer {
            ptr,
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
        let _ = self.stream.device.bind();
        // SAFETY: allocated by cuMemAllocAsync; freed once, ordered on its stream.
        unsafe {
            sys::cuMemFreeAsync(self.ptr, self.stream.raw());
        }
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

/// Copies host memory to the device on a stream (asynchronous for page-locked memory).
///
/// # Safety
/// `src` must be valid for `len` bytes until the copy completes (the caller synchronizes).
pub unsafe fn copy_htod_async(
    dst: u64,
    src: *const u8,
    len: usize,
    stream: &Stream,
) -> Result<(), CudaError> {
    // SAFETY: forwarded contract.
    check("cuMemcpyHtoDAsync", unsafe {
        sys::cuMemcpyHtoDAsync_v2(dst, src as *const c_void, len, stream.raw())
    })
}

/// Copies device memory to the host on a stream.
///
/// # Safety
/// `dst` must be valid for `len` writable bytes until the copy completes.
pub unsafe fn copy_dtoh_async(
    dst: *mut u8,
    src: u64,
    len: usize,
    stream: &Stream,
) -> Result<(), CudaError> {
    // SAFETY: forwarded contract.
    check("cuMemcpyDtoHAsync", unsafe {
        sys::cuMemcpyDtoHAsync_v2(dst as *mut c_void, src, len, stream.raw())
    })
}

/// Copies `rows` rows of `width` bytes between device buffers of different pitches, on a stream.
pub fn copy_2d_dtod_async(
    dst: u64,
    dst_pitch: usize,
    src: u64,
    src_pitch: usize,
    width: usize,
    rows: usize,
    stream: &Stream,
) -> Result<(), CudaError> {
    let c = sys::CUDA_MEMCPY2D {
        srcXInBytes: 0,
        srcY: 0,
        srcMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
        srcHost: std::ptr::null(),
        srcDevice: src,
        srcArray: std::ptr::null_mut(),
        srcPitch: src_pitch,
        dstXInBytes: 0,
        dstY: 0,
        dstMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
        dstHost: std::ptr::null_mut(),
        dstDevice: dst,
        dstArray: std::ptr::null_mut(),
        dstPitch: dst_pitch,
        WidthInBytes: width,
        Height: rows,
    };
    // SAFETY: both buffers hold `rows` rows at their pitches (caller's invariant); the descriptor
    // is read during the call.
    check("cuMemcpy2DAsync", unsafe {
        sys::cuMemcpy2DAsync_v2(&c, stream.raw())
    })
}

/// Zeroes `count` 32-bit words on a stream.
pub fn memset_u32_async(dst: u64, count: usize, stream: &Stream) -> Result<(), CudaError> {
    // SAFETY: dst is a device allocation of at least count words (caller's invariant).
    check("cuMemsetD32Async", unsafe {
        sys::cuMemsetD32Async(dst, 0, count, stream.raw())
    })
}

/// A loaded module (CUBIN).
pub struct Module {
    raw: sys::CUmodule,
    device: Arc<Device>,
}

// SAFETY: module handles are usable from any thread with the context bound.
unsafe impl Send for Module {}
// SAFETY: as above; functions are looked up read-only.
unsafe impl Sync for Module {}

impl Module {
    /// Loads a CUBIN image on `device`.
    pub fn load(device: &Arc<Device>, image: &[u8]) -> Result<Arc<Module>, CudaError> {
        device.bind()?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: image is a complete CUBIN; the driver copies what it needs.
        check("cuModuleLoadData", unsafe {
            sys::cuModuleLoadData(&mut raw, image.as_ptr() as *const c_void)
        })?;
        Ok(Arc::new(Module {
            raw,
            device: device.clone(),
        }))
    }

    /// Looks up a kernel.
    pub fn function(&self, name: &'static CStr) -> Result<Function, CudaError> {
        self.device.bind()?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: module live, name NUL-terminated.
        check("cuModuleGetFunction", unsafe {
            sys::cuModuleGetFunction(&mut raw, self.raw, name.as_ptr())
        })?;
        Ok(Function {
            raw,
            name: name.to_str().unwrap_or("kernel"),
        })
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        let _ = self.device.bind();
        // SAFETY: loaded by cuModuleLoadData, unloaded once.
        unsafe {
            sys::cuModuleUnload(self.raw);
        }
    }
}

/// A kernel of a loaded module (valid while the module lives: workers keep both).
#[derive(Clone, Copy)]
pub struct Function {
    raw: sys::CUfunction,
    pub name: &'static str,
}

// SAFETY: function handles are immutable driver handles.
unsafe impl Send for Function {}

/// Kernel arguments: each value lives in its own 8-byte cell; the driver copies as many bytes
/// as the kernel's parameter has (4 for `u32`, 8 for `u64`/pointers), which on little-endian
/// x86-64 reads the value's low bytes.
#[derive(Default)]
pub struct Args {
    cells: Vec<[u8; 8]>,
}

impl Args {
    pub fn u64(mut self, v: u64) -> Self {
        self.cells.push(v.to_le_bytes());
        self
    }

    pub fn u32(mut self, v: u32) -> Self {
        let mut c = [0u8; 8];
        c[..4].copy_from_slice(&v.to_le_bytes());
        self.cells.push(c);
        self
    }
}

/// Launches `f` on `stream` with a 1-D grid.
pub fn launch(
    f: Function,
    grid: u32,
    block: u32,
    shared: u32,
    stream: &Stream,
    args: Args,
) -> Result<(), CudaError> {
    let mut cells = args.cells;
    let mut ptrs: Vec<*mut c_void> = cells
        .iter_mut()
        .map(|c| c.as_mut_ptr() as *mut c_void)
        .collect();
    // SAFETY: ptrs point to `cells`, alive for the call (the driver copies parameters at launch);
    // the argument list matches the kernel signature (callers pass them in declaration order).
    check("cuLaunchKernel", unsafe {
        sys::cuLaunchKernel(
            f.raw,
            grid.max(1),
            1,
            1,
            block,
            1,
            1,
            shared,
            stream.raw(),
            ptrs.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    })
}

/// Statistics of a device's default memory pool (bytes).
#[derive(Debug, Clone, Copy, Default)]
pub struct PoolStats {
    pub reserved_current: u64,
    pub used_current: u64,
    pub reserved_high: u64,
    pub used_high: u64,
}

fn default_pool(device: &Device) -> Result<sys::CUmemoryPool, CudaError> {
    let mut pool = std::ptr::null_mut();
    // SAFETY: out pointer valid, device handle valid.
    check("cuDeviceGetDefaultMemPool", unsafe {
        sys::cuDeviceGetDefaultMemPool(&mut pool, device.raw())
    })?;
    Ok(pool)
}

/// Sets the release threshold of the device's default pool: memory up to this many bytes stays
/// reserved across synchronizations instead of going back to the driver each time.
pub fn set_release_threshold(device: &Device, bytes: u64) -> Result<(), CudaError> {
    device.bind()?;
    let pool = default_pool(device)?;
    let mut v = bytes;
    // SAFETY: the attribute takes a cuuint64_t.
    check("cuMemPoolSetAttribute(RELEASE_THRESHOLD)", unsafe {
        sys::cuMemPoolSetAttribute(
            pool,
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            &mut v as *mut u64 as *mut c_void,
        )
    })
}

/// Reads the default pool's reserved/used, current/high statistics.
pub fn pool_stats(device: &Device) -> Result<PoolStats, CudaError> {
    device.bind()?;
    let pool = default_pool(device)?;
    let get = |a: sys::CUmemPool_attribute| -> Result<u64, CudaError> {
        let mut v = 0u64;
        // SAFETY: these attributes are cuuint64_t.
        check("cuMemPoolGetAttribute", unsafe {
            sys::cuMemPoolGetAttribute(pool, a, &mut v as *mut u64 as *mut c_void)
        })?;
        Ok(v)
    };
    use sys::CUmemPool_attribute as A;
    Ok(PoolStats {
        reserved_current: get(A::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)?,
        used_current: get(A::CU_MEMPOOL_ATTR_USED_MEM_CURRENT)?,
        reserved_high: get(A::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)?,
        used_high: get(A::CU_MEMPOOL_ATTR_USED_MEM_HIGH)?,
    })
}

/// Page-locked host memory mapped into the device address space.
///
/// # Safety
/// The returned pointer must be freed exactly once with [`free_host`].
pub unsafe fn alloc_host_mapped(len: usize) -> Result<(*mut u8, u64), CudaError> {
    let mut p: *mut c_void = std::ptr::null_mut();
    let flags = sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE;
    // SAFETY: out pointer valid; a context is current (caller bound a device).
    check("cuMemHostAlloc", unsafe {
        sys::cuMemHostAlloc(&mut p, len.max(1), flags)
    })?;
    let mut dptr = 0;
    // SAFETY: p is mapped memory just allocated with DEVICEMAP.
    let r = check("cuMemHostGetDevicePointer", unsafe {
        sys::cuMemHostGetDevicePointer_v2(&mut dptr, p, 0)
    });
    if let Err(e) = r {
        // SAFETY: p came from cuMemHostAlloc above.
        unsafe { sys::cuMemFreeHost(p) };
        return Err(e);
    }
    Ok((p as *mut u8, dptr))
}

/// Frees page-locked memory from [`alloc_host_mapped`].
///
/// # Safety
/// `p` must come from `alloc_host_mapped` and not be used afterwards.
pub unsafe fn free_host(p: *mut u8) {
    // SAFETY: forwarded contract.
    unsafe {
        sys::cuMemFreeHost(p as *mut c_void);
    }
}

/// Ordinary anonymous memory, aligned to 2 MiB with transparent huge pages requested and every
/// page faulted in, that can then be page-locked and mapped for the GPU with
/// `cuMemHostRegister` — an alternative to `cuMemHostAlloc` whose cost `bench transfer`
/// measures (faulting can happen before a context exists, registering cannot).
pub struct MappedRegion {
    base: *mut c_void,
    mapped_len: usize,
    ptr: *mut u8,
    len: usize,
    device_ptr: u64,
    registered: bool,
}

// SAFETY: a MappedRegion exclusively owns its mapping (like a Box<[u8]>); moving it to another
// thread moves that ownership, and registration is process-wide, not per thread.
unsafe impl Send for MappedRegion {}

const HUGE_PAGE: usize = 2 << 20;

impl MappedRegion {
    /// The length a region for `len` bytes gets (whole 4 KiB pages).
    pub fn mapped_size(len: usize) -> usize {
        len.max(1).div_ceil(4096) * 4096
    }

    /// Maps and faults in `len` bytes (not yet registered). Needs no CUDA context, so it can
    /// run while the driver initializes.
    pub fn new(len: usize) -> Result<MappedRegion, CudaError> {
        let len = Self::mapped_size(len);
        let mapped_len = len + HUGE_PAGE;
        // SAFETY: anonymous private mapping, no address hint; checked for MAP_FAILED.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mapped_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(CudaError {
                call: "mmap",
                code: sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY,
            });
        }
        let offset = (HUGE_PAGE - base as usize % HUGE_PAGE) % HUGE_PAGE;
        // SAFETY: offset < HUGE_PAGE, so ptr..ptr+len lies inside the mapping.
        let ptr = unsafe { (base as *mut u8).add(offset) };
        // SAFETY: the range is inside our mapping; the advice is only a hint (errors ignored).
        unsafe { libc::madvise(ptr as *mut c_void, len, libc::MADV_HUGEPAGE) };
        for page in (0..len).step_by(4096) {
            // SAFETY: page < len, inside our writable mapping.
            unsafe { std::ptr::write_volatile(ptr.add(page), 0) };
        }
        Ok(MappedRegion {
            base,
            mapped_len,
            ptr,
            len,
            device_ptr: 0,
            registered: false,
        })
    }

    /// Page-locks the region and maps it for every context (a context must be current).
    pub fn register(&mut self) -> Result<u64, CudaError> {
        if !self.registered {
            let flags = sys::CU_MEMHOSTREGISTER_DEVICEMAP | sys::CU_MEMHOSTREGISTER_PORTABLE;
            // SAFETY: ptr..ptr+len is our mapping, page-aligned, and stays mapped until Drop,
            // which unregisters first.
            check("cuMemHostRegister", unsafe {
                sys::cuMemHostRegister_v2(self.ptr as *mut c_void, self.len, flags)
            })?;
            self.registered = true;
            let mut dptr = 0;
            // SAFETY: the region was just registered with DEVICEMAP.
            check("cuMemHostGetDevicePointer", unsafe {
                sys::cuMemHostGetDevicePointer_v2(&mut dptr, self.ptr as *mut c_void, 0)
            })?;
            self.device_ptr = dptr;
        }
        Ok(self.device_ptr)
    }

    /// Host address of the region.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Length in bytes (a multiple of 4 KiB).
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty region (never: lengths are rounded up to a page).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for MappedRegion {
    fn drop(&mut self) {
        if self.registered {
            // SAFETY: registered by `register` with this pointer.
            unsafe { sys::cuMemHostUnregister(self.ptr as *mut c_void) };
        }
        // SAFETY: base/mapped_len are exactly what mmap returned.
        unsafe { libc::munmap(self.base, self.mapped_len) };
    }
}
