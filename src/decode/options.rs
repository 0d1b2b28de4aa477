//! How decoding treats damaged input: the [`DecodeOptions`] of a run.

/// What to do with a frame whose compressed data ends before the image does (a JPEG
/// codestream cut short in a multi-frame file).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Damaged {
    /// The frame fails with the reason (and the run's exit code says so).
    #[default]
    Fail,
    /// The rows that decode are rendered, the rest black (stored value 0), with a warning:
    /// DCMTK's "incomplete JPEG data" workaround (`+wi`).
    Render,
}

/// The decoder's options.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct DecodeOptions {
    /// What to do with a frame whose compressed data ends early.
    pub damaged: Damaged,
}
