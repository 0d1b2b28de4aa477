//! The integration tests, one test executable (`it`): a module per area of the feature list,
//! each run through the real `dicomflow` binary (or the library where a test needs its
//! internals), and the helpers they share in `common` (the binary and runs of it, scratch
//! folders, the hostile corpus, DICOM peers, the report schema's validator).
//!
//! One area runs alone with a filter on its module: `cargo test --test it cli::`. All modules
//! share one process and run in parallel threads, so a test owns what it touches: its scratch
//! folders (`common::tempdir` fails a test that asks for a name already given), children it
//! waits for by PID, ports the kernel picks. No test sets an environment variable, changes the
//! current directory or installs a signal handler in this process; none needs to run alone.

mod common;

mod adversarial;
mod cli;
mod conformance;
mod dashboard_tmux;
mod dataset;
mod fdeflate_on_host;
mod gpu;
mod kernels_on_host;
mod listen;
mod reports;
mod resume;
mod robustness;
mod shard;
mod slurm;
mod usability;
mod watch;
mod wild;
