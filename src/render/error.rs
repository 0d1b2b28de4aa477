//! Why a frame cannot be planned or its plan evaluated: [`PlanError`], the error of `render`.

/// Why the render chain cannot be built for a frame, or not evaluated on its values. The
/// pipeline reports it as that frame's failure (stage `render`) and goes on; the messages are
/// the report's reasons.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// Several windows (one per channel) asked of a colour image.
    #[error(
        "window channels ({windows} windows) need a grayscale image; this one is {photometric}"
    )]
    ChannelsNeedGray {
        windows: usize,
        photometric: &'static str,
    },
    /// A window of the file asked for by number that the file does not have.
    #[error("window {index} requested, the file has {count} window(s)")]
    NoSuchWindow { index: usize, count: usize },
    /// A VOI LUT of the file asked for by number that the file does not have.
    #[error("VOI LUT {index} requested, the file has {count}")]
    NoSuchVoiLut { index: usize, count: usize },
    /// An image this renderer does not handle (32-bit colour, YBR_ICT outside JPEG 2000, ...).
    #[error("{0}")]
    Unsupported(String),
    /// The operators (resize, rotation, ...) do not apply to this frame.
    #[error("{0}")]
    Operators(String),
    /// An invariant between planning and rendering did not hold (a bug: please report).
    #[error("internal: {0}")]
    Internal(String),
}
