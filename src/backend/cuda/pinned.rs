//! Slot memory for the GPU: page-locked host memory, mapped (DEVICEMAP), so kernels read and
//! write it through its device pointer (zero-copy), and portable, so every device's context
//! sees it. Two ways to get it (`gpu.page_locking`):
//! - `register` (default): anonymous memory on transparent huge pages, faulted in by the
//!   allocating thread, then `cuMemHostRegister(DEVICEMAP | PORTABLE)`. The expensive part
//!   (zeroing 12 MB per 2000² slot) runs in parallel in the loaders, outside the driver's lock.
//! - `host-alloc`: `cuMemHostAlloc(DEVICEMAP | PORTABLE)`. The driver zeroes and pins under a
//!   lock that every other driver call (launches, syncs) also waits for: on the H200 host,
//!   filling a 30-slot 2000² ring this way stalled the whole pipeline for ~0.25 s.
//!
//! Never write-combined: the CPU reads the 8-bit outputs and writes stored values into it, and
//! write-combined memory showed no GPU-side gain here (../shared/GPU.md) while making CPU access
//! slower. A budget caps the total so that a large ring fails with a clear message instead of
//! pinning most of the machine's memory.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::driver::{alloc_host_mapped, free_host, Device, MappedRegion};
use crate::backend::options::PageLocking;
use crate::memory::{AllocError, HostAllocator, HostBuffer, HostRelease, SLOT_ALIGN};

/// Allocates mapped, portable, page-locked slots within a byte budget.
pub struct PinnedAllocator {
    device: Arc<Device>,
    how: PageLocking,
    budget: u64,
    in_use: Arc<AtomicU64>,
    /// Nanoseconds spent page-locking.
    locking_ns: AtomicU64,
    /// Regions faulted in ahead of time (while CUDA initialized) and registered before the
    /// pipeline started, waiting for a slot of their size.
    stock: std::sync::Mutex<Vec<MappedRegion>>,
}

struct PinnedRelease {
    device: Arc<Device>,
    in_use: Arc<AtomicU64>,
}

impl HostRelease for PinnedRelease {
    unsafe fn release(&self, ptr: NonNull<u8>, len: usize) {
        if len == 0 {
            return;
        }
        let _ = self.device.bind();
        // SAFETY: ptr came from alloc_host_mapped in PinnedAllocator::allocate (len > 0).
        unsafe { free_host(ptr.as_ptr()) };
        self.in_use.fetch_sub(len as u64, Ordering::Relaxed);
    }
}

/// Gives back a registered region: unregister (with a context current), then unmap.
struct RegisteredRelease {
    device: Arc<Device>,
    in_use: Arc<AtomicU64>,
    region: std::sync::Mutex<Option<MappedRegion>>,
}

impl HostRelease for RegisteredRelease {
    unsafe fn release(&self, _ptr: NonNull<u8>, len: usize) {
        let _ = self.device.bind();
        let region = self.region.lock().ok().and_then(|mut r| r.take());
        if region.is_some() {
            self.in_use.fetch_sub(len as u64, Ordering::Relaxed);
        }
        drop(region);
    }
}

impl PinnedAllocator {
    /// `budget` bytes at most; `device` provides the context used for allocation (memory is
    /// portable, so it is visible to all devices).
    pub fn new(device: Arc<Device>, how: PageLocking, budget: u64) -> Self {
        PinnedAllocator {
            device,
            how,
            budget,
            in_use: Arc::new(AtomicU64::new(0)),
            locking_ns: AtomicU64::new(0),
            stock: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// The budget in bytes.
    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// Registers `regions` now and keeps them for later allocations of their size (`register`
    /// page-locking only). Registering takes the driver's lock; done here, before the
    /// pipeline starts, it no longer stalls the render workers' first launches as it did when
    /// the loaders registered each slot on its first frame (a stream's first compute took
    /// 14.5 ms then; registering here took the median overlap figure of 1000 × 512² zero-copy
    /// runs on the H200 from 1.16 to 1.09, with the same throughput). A region that fails to
    /// register is dropped; its slot will be allocated the usual way.
    pub fn stock(&self, regions: Vec<MappedRegion>) {
        if self.how != PageLocking::Register || regions.is_empty() {
            return;
        }
        let started = std::time::Instant::now();
        let registered: Vec<MappedRegion> = match self.device.bind() {
            Ok(()) => regions
                .into_iter()
                .filter_map(|mut r| r.register().ok().map(|_| r))
                .collect(),
            Err(_) => Vec::new(),
        };
        self.locking_ns
            .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        if let Ok(mut s) = self.stock.lock() {
            s.extend(registered);
        }
    }

    /// Unregisters and unmaps stocked regions no slot took (the frames turned out to have
    /// other sizes).
    pub fn clear_stock(&self) {
        let _ = self.device.bind();
        if let Ok(mut s) = self.stock.lock() {
            s.clear();
        }
    }

    /// A stocked region of exactly the size `MappedRegion::new(len)` would map.
    fn take_stocked(&self, len: usize) -> Option<MappedRegion> {
        let want = MappedRegion::mapped_size(len);
        let mut s = self.stock.lock().ok()?;
        let i = s.iter().position(|r| r.len() == want)?;
        Some(s.swap_remove(i))
    }

    /// The `register` way: take a region registered during start-up, or fault in huge-page
    /// memory on this thread and register it.
    fn register(&self, len: usize) -> Result<HostBuffer, AllocError> {
        let mut region = match self.take_stocked(len) {
            Some(r) => r,
            None => MappedRegion::new(len).map_err(|e| AllocError::Driver(e.to_string()))?,
        };
        let device_ptr = self
            .device
            .bind()
            .and_then(|_| region.register())
            .map_err(|e| AllocError::Driver(e.to_string()))?;
        let ptr = NonNull::new(region.as_ptr())
            .ok_or_else(|| AllocError::Driver("mmap returned null".into()))?;
        let release: Arc<dyn HostRelease> = Arc::new(RegisteredRelease {
            device: self.device.clone(),
            in_use: self.in_use.clone(),
            region: std::sync::Mutex::new(Some(region)),
        });
        // SAFETY: the region holds at least len bytes (rounded up to a page), 2 MiB-aligned,
        // owned by the releaser until the buffer is released.
        Ok(unsafe { HostBuffer::from_raw(ptr, len, device_ptr, release) })
    }

    /// The `host-alloc` way: `cuMemHostAlloc`.
    fn host_alloc(&self, len: usize) -> Result<HostBuffer, AllocError> {
        let (ptr, dptr) = self
            .device
            .bind()
            .and_then(|_| {
                // SAFETY: freed exactly once by PinnedRelease.
                unsafe { alloc_host_mapped(len) }
            })
            .map_err(|e| AllocError::Driver(e.to_string()))?;
        let ptr = NonNull::new(ptr)
            .ok_or_else(|| AllocError::Driver("cuMemHostAlloc returned null".into()))?;
        if !(ptr.as_ptr() as usize).is_multiple_of(SLOT_ALIGN) {
            // cuMemHostAlloc returns page-aligned memory; anything else breaks the kernels'
            // 16-byte loads.
            // SAFETY: from alloc_host_mapped, not used afterwards.
            unsafe { free_host(ptr.as_ptr()) };
            return Err(AllocError::Driver("pinned memory is not aligned".into()));
        }
        let release: Arc<dyn HostRelease> = Arc::new(PinnedRelease {
            device: self.device.clone(),
            in_use: self.in_use.clone(),
        });
        // SAFETY: fresh mapped allocation of len bytes, released by PinnedRelease.
        Ok(unsafe { HostBuffer::from_raw(ptr, len, dptr, release) })
    }
}

impl HostAllocator for PinnedAllocator {
    fn allocate(&self, len: usize) -> Result<HostBuffer, AllocError> {
        if len == 0 {
            let release: Arc<dyn HostRelease> = Arc::new(PinnedRelease {
                device: self.device.clone(),
                in_use: self.in_use.clone(),
            });
            // SAFETY: a dangling pointer with length 0 is never dereferenced or freed.
            return Ok(unsafe { HostBuffer::from_raw(NonNull::dangling(), 0, 0, release) });
        }
        let after = self.in_use.fetch_add(len as u64, Ordering::Relaxed) + len as u64;
        if after > self.budget {
            self.in_use.fetch_sub(len as u64, Ordering::Relaxed);
            return Err(AllocError::Budget(format!(
                "pinned memory budget exceeded: {} MiB in use + {} MiB requested > {} MiB \
                 (lower pipeline.slots or raise gpu.pinned_budget_mib)",
                (after - len as u64) >> 20,
                (len as u64).div_ceil(1 << 20),
                self.budget >> 20
            )));
        }
        let started = std::time::Instant::now();
        let result = match self.how {
            PageLocking::Register => self.register(len),
            PageLocking::HostAlloc => self.host_alloc(len),
        };
        self.locking_ns
            .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        if result.is_err() {
            self.in_use.fetch_sub(len as u64, Ordering::Relaxed);
        }
        result
    }

    fn kind(&self) -> &'static str {
        match self.how {
            PageLocking::Register => "pinned mapped (registered huge pages)",
            PageLocking::HostAlloc => "pinned mapped (cuMemHostAlloc)",
        }
    }

    fn bytes_in_use(&self) -> u64 {
        self.in_use.load(Ordering::Relaxed)
    }

    fn allocation_time(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.locking_ns.load(Ordering::Relaxed))
    }
}

/// A quarter of physical memory: the default pinned budget.
pub fn default_budget() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let (pages, size) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    if pages > 0 && size > 0 {
        (pages as u64 * size as u64) / 4
    } else {
        2 << 30
    }
}
