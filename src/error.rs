//! Typed errors of the library: one per concern, each carrying the context a user needs
//! (the file, the frame, the stage) to act on it.

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

/// Why one input file (or one frame of it) could not be turned into an output.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{path}{frame}: {stage}: {reason}", frame = frame_suffix(*.frame))]
pub struct FileError {
    /// The input file.
    pub path: PathBuf,
    /// The frame (0-based) when the failure concerns one frame of a multi-frame file.
    pub frame: Option<u32>,
    /// Where it failed.
    pub stage: Stage,
    /// What went wrong, in words.
    pub reason: String,
}

fn frame_suffix(frame: Option<u32>) -> String {
    match frame {
        Some(f) => format!(" (frame {})", f + 1),
        None => String::new(),
    }
}

impl FileError {
    /// A failure of the whole file at `stage`.
    pub fn new(path: impl Into<PathBuf>, stage: Stage, reason: impl Into<String>) -> Self {
        FileError {
            path: path.into(),
            frame: None,
            stage,
            reason: reason.into(),
        }
    }

    /// The same failure, attributed to one frame.
    pub fn with_frame(mut self, frame: u32) -> Self {
        self.frame = Some(frame);
        self
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
    #[error("output directory {path}: {source}")]
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
