//! Why an image could not be encoded: [`EncodeError`], the error of every encoder in `output`.

use crate::output::options::OutputFormat;

/// Why one frame's pixels could not be encoded. The pipeline reports it as that frame's
/// failure (stage `encode`) and goes on; the messages are the report's reasons.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// The pixels handed over do not fit the image asked for (a bug: please report).
    #[error("internal: {0}")]
    Internal(String),
    /// The `image` crate's encoder (JPEG, TIFF, BMP) failed.
    #[error("{format:?} encoder: {source}")]
    Image {
        format: OutputFormat,
        source: image::ImageError,
    },
    /// The `png` crate's encoder failed.
    #[error("PNG encoder: {0}")]
    Png(#[from] png::EncodingError),
    /// Deflating the PNG rows failed.
    #[error("PNG deflate: {0}")]
    Deflate(#[from] std::io::Error),
    /// A filtered row starts with a byte that is no PNG filter type.
    #[error("PNG row {row}: filter type {kind}")]
    FilterType { row: usize, kind: u8 },
    /// More image data than one PNG chunk holds.
    #[error("PNG: {0} bytes of image data in one chunk")]
    ChunkTooLarge(usize),
    /// A size DICOM cannot hold (Rows and Columns are 16-bit).
    #[error(
        "a {width}x{height} image cannot be written as DICOM (Rows and Columns are 1..=65535)"
    )]
    DicomSize { width: u32, height: u32 },
    /// The file meta information could not be built.
    #[error("DICOM file meta: {0}")]
    DicomMeta(String),
    /// The DICOM Secondary Capture object could not be written.
    #[error("DICOM encoder: {0}")]
    Dicom(String),
}
