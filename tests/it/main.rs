//! The integration tests, one test executable (`it`): each module is one area of the feature
//! list, run through the real `dicomflow` binary (or the library where a test needs its
//! internals), with the helpers of `common` shared by all of them.
//!
//! Run one area with a filter on its module: `cargo test --test it cli::`, or a single test by
//! its name. All modules share one process and run in parallel threads: a test owns its
//! scratch folders (`common::tempdir` refuses a name taken twice), sets no environment
//! variable and never changes the current directory; the tests that cannot share the machine
//! with others say so and take `common::exclusive()`.

mod common;

mod adversarial;
mod cli;
mod conformance;
mod dashboard_tmux;
mod dataset;
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
