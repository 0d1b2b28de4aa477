//! How the pipeline runs: its thread layout and counts, the slot ring's depth, the largest
//! frame it accepts, and whether the first failure stops it; and the [`Job`] a run executes.

use crate::decode::DecodeOptions;
use crate::output::options::OutputOptions;
use crate::render::RenderOptions;

/// How the pipeline's threads share its stages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Layout {
    /// `shared` unless a loader count is given.
    Auto,
    /// A pool per stage: loaders, render workers (when the backend has them), writers.
    Stages,
    /// One pool of threads that each load frames and finish them (render when there are no
    /// render workers, encode, write), finishing queued frames before loading more.
    Shared,
}

/// The pipeline's options. Zeros are sized from the host at run time ([`super::Sizing`]).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PipelineOptions {
    pub layout: Layout,
    /// Loader threads (the stages layout); 0 = chosen from the core count.
    pub loaders: usize,
    /// Render workers; 0 = what the backend wants.
    pub workers: usize,
    /// Threads that encode and write (and load, in the shared layout); 0 = from the cores.
    pub writers: usize,
    /// Slots in the ring; 0 = from the thread counts.
    pub slots: usize,
    /// The largest frame accepted (decoded bytes); larger ones fail before allocation.
    pub max_frame_bytes: u64,
    /// Stop at the first failure.
    pub fail_fast: bool,
    /// Inputs that logs name otherwise: stdin's scratch copy is `-` to the user.
    #[serde(skip)]
    pub shown_as: Vec<(std::path::PathBuf, std::path::PathBuf)>,
}

impl Default for PipelineOptions {
    fn default() -> Self {
        PipelineOptions {
            layout: Layout::Auto,
            loaders: 0,
            workers: 0,
            writers: 0,
            slots: 0,
            max_frame_bytes: crate::decode::DEFAULT_MAX_FRAME_BYTES,
            fail_fast: false,
            shown_as: Vec::new(),
        }
    }
}

/// Everything a run needs besides its inputs and its backend: how to render, what to write,
/// and how to run the stages.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Job {
    #[serde(flatten)]
    pub decode: DecodeOptions,
    #[serde(flatten)]
    pub render: RenderOptions,
    #[serde(flatten)]
    pub output: OutputOptions,
    #[serde(flatten)]
    pub pipeline: PipelineOptions,
}
