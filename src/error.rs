//! Errors that concern the whole run: the [`Stage`] a file failed at (reports and summaries
//! name it) and the [`FatalError`] that stops a run (exit code 2). Each component has its own
//! error type beside its code (`decode::DecodeError`, `backend::RenderError`,
//! `memory::AllocError`, …).

use std::path::PathBuf;

/// The stage of the pipeline where a file failed. Printed in the summary and the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stage {
    /// Finding files and telling DICOM from other files.
    Scan,
    /// Parsing the header and decoding stored values into a slot.
    Decode,
    /// Executing the render chain (CPU or GPU backend).
    Render,
    /// Encoding the 8-bit image (PNG, JPEG, ...).
    Encode,
    /// Writing the encoded bytes atomically to the output tree.
    Write,
}

impl Stage {
    /// Lower-case name used in messages and reports.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Scan => "scan",
            Stage::Decode => "decode",
            Stage::Render => "render",
            Stage::Encode => "encode",
            Stage::Write => "write",
        }
    }
}

impl std::fmt::Display for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// An error that stops the whole run (bad configuration, unusable output directory, ...).
/// Maps to exit code 2.
#[derive(Debug, thiserror::Error)]
pub enum FatalError {
    /// The configuration (file or flags) is invalid.
    #[error("{0}")]
    Config(String),
    /// The output directory cannot be created or written.
    #[error("output directory {}: {source}", crate::paths::Escaped(.path))]
    OutputDir {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A requested backend is not usable on this machine.
    #[error("backend: {0}")]
    Backend(String),
    /// Anything else that prevents the run from starting or finishing.
    #[error("{0}")]
    Other(String),
}
