//! Host memory the GPU reads and writes in place (zero-copy): page-locked allocations mapped
//! into the device address space (`cuMemHostAlloc`), and ordinary mappings registered later
//! (`cuMemHostRegister`). cudarc has no safe form of either with a device pointer: its pinned
//! allocations expose no `cuMemHostGetDevicePointer`.

use std::ffi::c_void;

use cudarc::driver::sys;

use super::{check, CudaError};

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

/// Page-locked host memory mapped for the GPU ([`alloc_host_mapped`]), zeroed, owned: freed on
/// drop (with the device's context bound first: the dropping thread may have none). Its owner
/// makes sure no copy or kernel still touches it then.
pub struct HostMapped {
    ptr: *mut u8,
    device_ptr: u64,
    len: usize,
    device: std::sync::Arc<super::Device>,
}

// SAFETY: HostMapped exclusively owns its allocation (like a Box<[u8]>); page-locked memory may be
// used and freed from any thread.
unsafe impl Send for HostMapped {}

impl HostMapped {
    pub fn new(
        device: &std::sync::Arc<super::Device>,
        len: usize,
    ) -> Result<HostMapped, CudaError> {
        device.bind()?;
        // SAFETY: freed exactly once, in Drop.
        let (ptr, device_ptr) = unsafe { alloc_host_mapped(len)? };
        // SAFETY: the allocation holds at least len bytes.
        unsafe { std::ptr::write_bytes(ptr, 0, len) };
        Ok(HostMapped {
            ptr,
            device_ptr,
            len,
            device: device.clone(),
        })
    }

    /// Host address.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// The address kernels use.
    pub fn device_ptr(&self) -> u64 {
        self.device_ptr
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for HostMapped {
    fn drop(&mut self) {
        let _ = self.device.bind();
        // SAFETY: from alloc_host_mapped in `new`, freed once; the owner guarantees that nothing
        // on the GPU uses it any more.
        unsafe { free_host(self.ptr) };
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

#[cfg(test)]
mod tests {
    use super::*;

    // Needs no GPU: mapping and faulting in are plain mmap; registration happens later.
    #[test]
    fn a_region_is_whole_pages_on_a_huge_page_boundary_and_writable() {
        assert_eq!(MappedRegion::mapped_size(0), 4096);
        assert_eq!(MappedRegion::mapped_size(5000), 8192);
        let r = MappedRegion::new(5000).unwrap();
        assert_eq!(r.len(), 8192);
        assert!(!r.is_empty());
        assert_eq!(r.as_ptr() as usize % HUGE_PAGE, 0);
        // SAFETY: the region is ours, 8192 bytes long, and not registered with any device.
        let bytes = unsafe { std::slice::from_raw_parts_mut(r.as_ptr(), r.len()) };
        assert!(bytes.iter().all(|&b| b == 0));
        bytes[8191] = 7;
        assert_eq!(bytes[8191], 7);
    }
}
