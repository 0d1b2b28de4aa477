//! The memory the codec libraries ask for, handed out by the stream-ordered allocator of the
//! worker that owns the library handle: device scratch from `cuMemAllocAsync` on the worker's
//! stream (the pool whose release threshold the backend sets, so scratch is reused across
//! frames instead of going back to the driver), staging buffers from `cuMemHostAlloc`.
//!
//! nvJPEG and nvJPEG2000 take the same "V2" allocator shape: `malloc(ctx, &ptr, size, stream)`
//! and `free(ctx, ptr, size, stream)`, returning 0 on success. A null `stream` (allocations made
//! while a handle or state is created) means the worker's own stream here, so that every
//! allocation and free is ordered with the work that uses it.

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use cudarc::driver::sys;

use crate::backend::cuda::driver::{Device, Stream};

/// What the callbacks need: the device whose context must be current, and the stream that
/// orders the allocations. Boxed and kept alive by the library handle's owner for as long as
/// the handle exists (the libraries keep the raw pointer).
pub struct AllocContext {
    device: Arc<Device>,
    stream: Arc<Stream>,
}

impl AllocContext {
    pub fn new(stream: &Arc<Stream>) -> Box<AllocContext> {
        Box::new(AllocContext {
            device: stream.device.clone(),
            stream: stream.clone(),
        })
    }

    /// The pointer the libraries pass back to the callbacks.
    pub fn as_ctx(&self) -> *mut c_void {
        self as *const AllocContext as *mut c_void
    }
}

/// The stream to order an allocation on: the caller's, or the worker's when none is given.
fn stream_of(ctx: &AllocContext, stream: *mut c_void) -> sys::CUstream {
    if stream.is_null() {
        ctx.stream.raw()
    } else {
        stream as sys::CUstream
    }
}

/// Device memory from the worker's stream-ordered pool.
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
    if ctx.is_null() || ptr.is_null() {
        return 1;
    }
    // SAFETY: ctx is the boxed AllocContext registered with the handle (contract above).
    let ctx = unsafe { &*(ctx as *const AllocContext) };
    if ctx.device.bind().is_err() {
        return 1;
    }
    let mut dptr: sys::CUdeviceptr = 0;
    // SAFETY: out pointer valid; the stream belongs to the bound context.
    let r = unsafe { sys::cuMemAllocAsync(&mut dptr, size.max(1), stream_of(ctx, stream)) };
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
    if ctx.is_null() {
        return 1;
    }
    if ptr.is_null() {
        return 0;
    }
    // SAFETY: ctx is the boxed AllocContext registered with the handle.
    let ctx = unsafe { &*(ctx as *const AllocContext) };
    if ctx.device.bind().is_err() {
        return 1;
    }
    // SAFETY: ptr came from cuMemAllocAsync in device_malloc; freed once, stream-ordered.
    let r = unsafe { sys::cuMemFreeAsync(ptr as sys::CUdeviceptr, stream_of(ctx, stream)) };
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
    if ctx.is_null() || ptr.is_null() {
        return 1;
    }
    // SAFETY: ctx is the boxed AllocContext registered with the handle.
    let ctx = unsafe { &*(ctx as *const AllocContext) };
    if ctx.device.bind().is_err() {
        return 1;
    }
    let mut p: *mut c_void = std::ptr::null_mut();
    // SAFETY: out pointer valid, context current.
    let r = unsafe { sys::cuMemHostAlloc(&mut p, size.max(1), sys::CU_MEMHOSTALLOC_PORTABLE) };
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
    if ctx.is_null() {
        return 1;
    }
    if ptr.is_null() {
        return 0;
    }
    // SAFETY: ctx is the boxed AllocContext registered with the handle.
    let ctx = unsafe { &*(ctx as *const AllocContext) };
    if ctx.device.bind().is_err() {
        return 1;
    }
    // SAFETY: the stream is live (the worker's, or the caller's); waiting is always sound.
    unsafe { sys::cuStreamSynchronize(stream_of(ctx, stream)) };
    // SAFETY: ptr came from cuMemHostAlloc in pinned_malloc and is freed once.
    let r = unsafe { sys::cuMemFreeHost(ptr) };
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
