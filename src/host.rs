//! What the host machine offers the pipeline: its cores and its physical memory. A leaf module
//! (it imports nothing of the crate), so every component can size itself from it.

/// Cores available to this process (its CPU affinity and cgroup quota included).
pub fn available_cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}
