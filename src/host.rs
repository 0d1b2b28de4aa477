//! What the host machine offers the pipeline: its cores and its physical memory (and its name,
//! for reports). A leaf module (it imports nothing of the crate), so every component can size
//! itself from it.

/// Cores available to this process (its CPU affinity and cgroup quota included).
pub fn available_cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// The machine's host name (`gethostname`), or `"unknown"`: which node ran a shard.
pub fn name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at most that many bytes
    // and the result is read only up to the first NUL (or the whole buffer).
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "unknown".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}
