//! Driver calls cudarc offers no safe form of, on raw device pointers (`u64`) as the kernels and
//! codec libraries see them: host<->device copies between raw pointers, pitched 2-D copies,
//! 32-bit memsets, and the default memory pool's attributes.

use std::ffi::c_void;

use cudarc::driver::{result, sys};

use super::{check, named, CudaError, Device, Stream};

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

/// Statistics of a device's default memory pool (bytes).
#[derive(Debug, Clone, Copy, Default)]
pub struct PoolStats {
    pub reserved_current: u64,
    pub used_current: u64,
    pub reserved_high: u64,
    pub used_high: u64,
}

// cudarc has pool calls only in its unsafe `result` layer (no safe wrapper).
fn default_pool(device: &Device) -> Result<sys::CUmemoryPool, CudaError> {
    // SAFETY: the handle comes from a retained context of this device.
    unsafe { result::device::get_default_mem_pool(device.raw()) }
        .map_err(named("cuDeviceGetDefaultMemPool"))
}

/// Sets the release threshold of the device's default pool: memory up to this many bytes stays
/// reserved across synchronizations instead of going back to the driver each time.
pub fn set_release_threshold(device: &Device, bytes: u64) -> Result<(), CudaError> {
    device.bind()?;
    let pool = default_pool(device)?;
    let mut v = bytes;
    // SAFETY: pool is the device's default pool; the attribute takes a cuuint64_t.
    unsafe {
        result::mem_pool::set_attribute(
            pool,
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            &mut v as *mut u64 as *mut c_void,
        )
    }
    .map_err(named("cuMemPoolSetAttribute(RELEASE_THRESHOLD)"))
}

/// Reads the default pool's reserved/used, current/high statistics.
pub fn pool_stats(device: &Device) -> Result<PoolStats, CudaError> {
    device.bind()?;
    let pool = default_pool(device)?;
    let get = |a: sys::CUmemPool_attribute| -> Result<u64, CudaError> {
        let mut v = 0u64;
        // SAFETY: pool is the device's default pool; these attributes are cuuint64_t.
        unsafe { result::mem_pool::get_attribute(pool, a, &mut v as *mut u64 as *mut c_void) }
            .map_err(named("cuMemPoolGetAttribute"))?;
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
