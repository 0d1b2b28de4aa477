//! Slot memory for the GPU: page-locked host memory allocated with
//! `cuMemHostAlloc(DEVICEMAP | PORTABLE)` — mapped, so kernels read and write it through its
//! device pointer (zero-copy), and portable, so every device's context sees it. Never
//! write-combined: the CPU reads the 8-bit outputs and writes stored values into it, and
//! write-combined memory showed no GPU-side gain here (../shared/GPU.md) while making CPU access
//! slower. A budget caps the total so that a large ring fails with a clear message instead of
//! pinning most of the machine's memory.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::driver::{alloc_host_mapped, free_host, Device};
use crate::pipeline::slot::{HostAllocator, HostBuffer, HostRelease, SLOT_ALIGN};

/// Allocates mapped, portable, page-locked slots within a byte budget.
pub struct PinnedAllocator {
    device: Arc<Device>,
    budget: u64,
    in_use: Arc<AtomicU64>,
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

impl PinnedAllocator {
    /// `budget` bytes at most; `device` provides the context used for allocation (memory is
    /// portable, so it is visible to all devices).
    pub fn new(device: Arc<Device>, budget: u64) -> Self {
        PinnedAllocator {
            device,
            budget,
            in_use: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The budget in bytes.
    pub fn budget(&self) -> u64 {
        self.budget
    }
}

impl HostAllocator for PinnedAllocator {
    fn allocate(&self, len: usize) -> Result<HostBuffer, String> {
        let release: Arc<dyn HostRelease> = Arc::new(PinnedRelease {
            device: self.device.clone(),
            in_use: self.in_use.clone(),
        });
        if len == 0 {
            // SAFETY: a dangling pointer with length 0 is never dereferenced or freed.
            return Ok(unsafe { HostBuffer::from_raw(NonNull::dangling(), 0, 0, release) });
        }
        let after = self.in_use.fetch_add(len as u64, Ordering::Relaxed) + len as u64;
        if after > self.budget {
            self.in_use.fetch_sub(len as u64, Ordering::Relaxed);
            return Err(format!(
                "pinned memory budget exceeded: {} MiB in use + {} MiB requested > {} MiB \
                 (lower pipeline.slots or raise gpu.pinned_budget_mib)",
                (after - len as u64) >> 20,
                (len as u64).div_ceil(1 << 20),
                self.budget >> 20
            ));
        }
        let result = self.device.bind().and_then(|_| {
            // SAFETY: freed exactly once by PinnedRelease.
            unsafe { alloc_host_mapped(len) }
        });
        match result {
            Ok((ptr, dptr)) => {
                let Some(ptr) = NonNull::new(ptr) else {
                    self.in_use.fetch_sub(len as u64, Ordering::Relaxed);
                    return Err("cuMemHostAlloc returned null".into());
                };
                if ptr.as_ptr() as usize % SLOT_ALIGN != 0 {
                    // cuMemHostAlloc returns page-aligned memory; anything else breaks the
                    // kernels' 16-byte loads.
                    // SAFETY: from alloc_host_mapped, not used afterwards.
                    unsafe { free_host(ptr.as_ptr()) };
                    self.in_use.fetch_sub(len as u64, Ordering::Relaxed);
                    return Err("pinned memory is not aligned".into());
                }
                // SAFETY: fresh mapped allocation of len bytes, released by PinnedRelease.
                Ok(unsafe { HostBuffer::from_raw(ptr, len, dptr, release) })
            }
            Err(e) => {
                self.in_use.fetch_sub(len as u64, Ordering::Relaxed);
                Err(e.to_string())
            }
        }
    }

    fn kind(&self) -> &'static str {
        "pinned mapped"
    }

    fn bytes_in_use(&self) -> u64 {
        self.in_use.load(Ordering::Relaxed)
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
