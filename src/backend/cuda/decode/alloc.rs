//! The memory the codec libraries ask for. Device scratch requested during a decode comes from
//! the stream-ordered allocator (`cuMemAllocAsync` on the decode's stream, the pool whose
//! release threshold the backend sets, so scratch is reused across frames instead of going back
//! to the driver); staging buffers from `cuMemHostAlloc`.
//!
//! nvJPEG and nvJPEG2000 take the same "V2" allocator shape: `malloc(ctx, &ptr, size, stream)`
//! and `free(ctx, ptr, size, stream)`, returning 0 on success. A null `stream` (allocations
//! made while a handle or state is created, frees when it is destroyed) is ordered with nothing
//! the workers queue, so those allocations are synchronous (`cuMemAlloc`, remembered here) and
//! those frees wait for the device first.

use std::collections::HashSet;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::driver::sys;

use crate::backend::cuda::driver::Device;

/// Calls the codec libraries made to each callback during this process: device allocations
/// (synchronous, outside a stream), device allocations on a stream, and page-locked ones. A
/// library that allocates per frame shows here (a synchronous free or a page-locked one waits
/// for the device, which would serialize the workers); logged when the backend finishes.
pub static CALLS: [AtomicU64; 3] = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];

/// Nanoseconds spent in the callbacks of [`CALLS`], in the same order, and (last) in the frees
/// (a page-locked free first waits for its stream). Where a library's start goes (session 21:
/// a render worker's first nvJPEG decode takes ~300 ms).
pub static NANOS: [AtomicU64; 4] = [
    AtomicU64::new(0),
    AtomicU64::new(0),
    AtomicU64::new(0),
    AtomicU64::new(0),
];

/// The counts of [`CALLS`]: (synchronous device, stream-ordered device, page-locked).
pub fn calls() -> (u64, u64, u64) {
    (
        CALLS[0].load(Ordering::Relaxed),
        CALLS[1].load(Ordering::Relaxed),
        CALLS[2].load(Ordering::Relaxed),
    )
}

/// Milliseconds of [`NANOS`], summed over every thread.
pub fn millis() -> [f64; 4] {
    NANOS
        .each_ref()
        .map(|n| n.load(Ordering::Relaxed) as f64 / 1e6)
}

/// Runs `f`, adding its duration to `NANOS[slot]`.
fn timed<T>(slot: usize, f: impl FnOnce() -> T) -> T {
    let t = std::time::Instant::now();
    let out = f();
    let ns = u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX);
    NANOS[slot].fetch_add(ns, Ordering::Relaxed);
    out
}

/// What the callbacks need: the device whose context must be current, and the allocations made
/// outside any stream. Boxed and kept alive by the handle's owner for as long as the handle
/// exists (the libraries keep the raw pointer).
pub struct AllocContext {
    device: Arc<Device>,
    synchronous: Mutex<HashSet<u64>>,
}

impl AllocContext {
    pub fn new(device: &Arc<Device>) -> Box<AllocContext> {
        Box::new(AllocContext {
            device: device.clone(),
            synchronous: Mutex::new(HashSet::new()),
        })
    }

    /// The pointer the libraries pass back to the callbacks.
    pub fn as_ctx(&self) -> *mut c_void {
        self as *const AllocContext as *mut c_void
    }
}

/// The context behind a callback's `ctx`, with its device's context made current; `None` for a
/// null pointer or a device that cannot be bound (the callback then reports failure).
///
/// # Safety
/// `ctx` is null or the [`AllocContext`] registered with the handle, alive while it is.
unsafe fn context<'a>(ctx: *mut c_void) -> Option<&'a AllocContext> {
    if ctx.is_null() {
        return None;
    }
    // SAFETY: the registered, boxed AllocContext (caller's contract).
    let ctx = unsafe { &*(ctx as *const AllocContext) };
    ctx.device.bind().ok()?;
    Some(ctx)
}

/// Device memory: from the stream-ordered pool on `stream`, or synchronously without one.
///
/// # Safety
/// Called by the codec libraries only: `ctx` is the [`AllocContext`] given at handle creation
/// (alive while the handle is), `ptr` a valid out pointer, `stream` null or a live stream of
/// the same context.
pub unsafe extern "C" fn device_malloc(
    ctx: *mut c_void,
    ptr: *mut *mut c_void,
    size: usize,
    stream: *mut c_void,
) -> c_int {
    // SAFETY: ctx is what the handle was created with (contract above).
    let Some(ctx) = (unsafe { context(ctx) }) else {
        return 1;
    };
    if ptr.is_null() {
        return 1;
    }
    let mut dptr: sys::CUdeviceptr = 0;
    let kind = usize::from(!stream.is_null());
    CALLS[kind].fetch_add(1, Ordering::Relaxed);
    let r = if stream.is_null() {
        // SAFETY: out pointer valid, context current.
        let r = timed(kind, || unsafe {
            sys::cuMemAlloc_v2(&mut dptr, size.max(1))
        });
        if r == sys::CUresult::CUDA_SUCCESS {
            match ctx.synchronous.lock() {
                Ok(mut set) => {
                    set.insert(dptr);
                }
                Err(_) => return 1,
            }
        }
        r
    } else {
        // SAFETY: out pointer valid; the stream belongs to the bound context.
        timed(kind, || unsafe {
            sys::cuMemAllocAsync(&mut dptr, size.max(1), stream as sys::CUstream)
        })
    };
    if r != sys::CUresult::CUDA_SUCCESS {
        return 1;
    }
    // SAFETY: ptr is a valid out pointer (checked non-null above).
    unsafe { *ptr = dptr as *mut c_void };
    0
}

/// Gives device memory back to the pool, ordered after the work queued on the stream.
///
/// # Safety
/// As [`device_malloc`]; `ptr` came from it.
pub unsafe extern "C" fn device_free(
    ctx: *mut c_void,
    ptr: *mut c_void,
    _size: usize,
    stream: *mut c_void,
) -> c_int {
    if ptr.is_null() {
        return 0;
    }
    // SAFETY: ctx is what the handle was created with (contract above).
    let Some(ctx) = (unsafe { context(ctx) }) else {
        return 1;
    };
    let dptr = ptr as sys::CUdeviceptr;
    let synchronous = match ctx.synchronous.lock() {
        Ok(mut set) => set.remove(&dptr),
        Err(_) => return 1,
    };
    let r = if synchronous {
        // SAFETY: allocated by cuMemAlloc in device_malloc, freed once (cuMemFree waits for the
        // work that may use it).
        unsafe { sys::cuMemFree_v2(dptr) }
    } else if stream.is_null() {
        // SAFETY: no stream to order the free with: wait for everything, then free.
        unsafe {
            sys::cuCtxSynchronize();
            sys::cuMemFreeAsync(dptr, std::ptr::null_mut())
        }
    } else {
        // SAFETY: ptr came from cuMemAllocAsync in device_malloc; freed once, stream-ordered.
        unsafe { sys::cuMemFreeAsync(dptr, stream as sys::CUstream) }
    };
    (r != sys::CUresult::CUDA_SUCCESS) as c_int
}

/// Page-locked staging memory (portable, not write-combined: the libraries write it on the CPU).
///
/// # Safety
/// As [`device_malloc`].
pub unsafe extern "C" fn pinned_malloc(
    ctx: *mut c_void,
    ptr: *mut *mut c_void,
    size: usize,
    _stream: *mut c_void,
) -> c_int {
    // SAFETY: ctx is what the handle was created with (contract above).
    if ptr.is_null() || unsafe { context(ctx) }.is_none() {
        return 1;
    }
    let mut p: *mut c_void = std::ptr::null_mut();
    CALLS[2].fetch_add(1, Ordering::Relaxed);
    // SAFETY: out pointer valid, context current.
    let r = timed(2, || unsafe {
        sys::cuMemHostAlloc(&mut p, size.max(1), sys::CU_MEMHOSTALLOC_PORTABLE)
    });
    if r != sys::CUresult::CUDA_SUCCESS {
        return 1;
    }
    // SAFETY: ptr is a valid out pointer (checked non-null above).
    unsafe { *ptr = p };
    0
}

/// Frees staging memory once the worker's stream has finished with it (a host buffer freed
/// while a copy from it is queued would be read after free).
///
/// # Safety
/// As [`device_malloc`]; `ptr` came from [`pinned_malloc`].
pub unsafe extern "C" fn pinned_free(
    ctx: *mut c_void,
    ptr: *mut c_void,
    _size: usize,
    stream: *mut c_void,
) -> c_int {
    if ptr.is_null() {
        return 0;
    }
    // SAFETY: ctx is what the handle was created with (contract above).
    if unsafe { context(ctx) }.is_none() {
        return 1;
    }
    let r = timed(3, || {
        // SAFETY: the caller's stream is live; without one, wait for the whole device.
        unsafe {
            if stream.is_null() {
                sys::cuCtxSynchronize();
            } else {
                sys::cuStreamSynchronize(stream as sys::CUstream);
            }
        }
        // SAFETY: ptr came from cuMemHostAlloc in pinned_malloc and is freed once.
        unsafe { sys::cuMemFreeHost(ptr) }
    });
    (r != sys::CUresult::CUDA_SUCCESS) as c_int
}

/// The two allocator tables the libraries take (same layout in nvjpeg.h and nvjpeg2k.h:
/// `{ malloc, free, ctx }`).
#[repr(C)]
pub struct AllocatorV2 {
    pub malloc: unsafe extern "C" fn(*mut c_void, *mut *mut c_void, usize, *mut c_void) -> c_int,
    pub free: unsafe extern "C" fn(*mut c_void, *mut c_void, usize, *mut c_void) -> c_int,
    pub ctx: *mut c_void,
}

impl AllocatorV2 {
    /// The device allocator for `ctx`.
    pub fn device(ctx: &AllocContext) -> AllocatorV2 {
        AllocatorV2 {
            malloc: device_malloc,
            free: device_free,
            ctx: ctx.as_ctx(),
        }
    }

    /// The pinned allocator for `ctx`.
    pub fn pinned(ctx: &AllocContext) -> AllocatorV2 {
        AllocatorV2 {
            malloc: pinned_malloc,
            free: pinned_free,
            ctx: ctx.as_ctx(),
        }
    }
}
