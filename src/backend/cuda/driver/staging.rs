//! Small tables (descriptors, pointer lists) copied to the device on a stream from page-locked
//! memory, so that the copy is asynchronous: from pageable memory the driver may wait for the
//! stream first. The memory is reused call after call; an event says when the last copy from
//! it is done, and the next upload waits for it before rewriting.

use std::sync::Arc;

use super::{copy_htod_async, CudaError, Device, Event, HostMapped, Stream};

/// Page-locked staging memory with the event that marks the last copy from it.
pub struct Staging {
    host: HostMapped,
    copied: Event,
    /// Bound before the event is waited for (a thread may have no current context then).
    device: Arc<Device>,
}

impl Staging {
    pub fn new(stream: &Stream, len: usize) -> Result<Staging, CudaError> {
        Ok(Staging {
            host: HostMapped::new(&stream.device, len)?,
            copied: Event::new(&stream.device)?,
            device: stream.device.clone(),
        })
    }

    /// Bytes it holds.
    pub fn len(&self) -> usize {
        self.host.len()
    }

    pub fn is_empty(&self) -> bool {
        self.host.is_empty()
    }

    /// Queues the copy of `bytes` to the device address `dst` on `stream`, after the previous
    /// copy from this memory has read it. `bytes` must fit ([`len`](Self::len)), and `dst`
    /// must hold them.
    pub fn upload(&self, bytes: &[u8], dst: u64, stream: &Stream) -> Result<(), CudaError> {
        if bytes.len() > self.host.len() {
            return Err(CudaError {
                call: "staging upload (larger than its memory)",
                code: cudarc::driver::sys::CUresult::CUDA_ERROR_INVALID_VALUE,
            });
        }
        // The previous copy must have read the memory before it is rewritten.
        self.copied.synchronize()?;
        // SAFETY: the memory holds len >= bytes.len() bytes and no copy reads it now
        // (synchronized above); the copy below reads it until `copied` completes, which the next
        // upload and Drop wait for; `dst` holds the bytes (the caller's contract).
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.host.as_ptr(), bytes.len());
            copy_htod_async(dst, self.host.as_ptr(), bytes.len(), stream)?;
        }
        if let Err(e) = self.copied.record(stream) {
            // The event would still mark the previous copy: wait for this one here instead.
            let _ = stream.synchronize();
            return Err(e);
        }
        Ok(())
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        // A copy may still read it: wait first (errors leave nothing better to do); `host` is
        // freed after this.
        let _ = self.device.bind();
        let _ = self.copied.synchronize();
    }
}
