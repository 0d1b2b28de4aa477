//! What the output stage is asked to produce: the image format and its encoder settings, how
//! files are named, and whether existing outputs are kept (resume).

use std::path::PathBuf;

pub use crate::output::atomic::SyncMode;
use crate::output::encode::EncodeOptions;

/// Output image format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OutputFormat {
    Png,
    Jpeg,
    Tiff,
    Bmp,
}

impl OutputFormat {
    /// File extension written for this format.
    pub fn extension(self) -> &'static str {
        match self {
            OutputFormat::Png => "png",
            OutputFormat::Jpeg => "jpg",
            OutputFormat::Tiff => "tiff",
            OutputFormat::Bmp => "bmp",
        }
    }
}

/// PNG deflate effort.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PngCompression {
    /// Stored blocks only.
    None,
    /// fdeflate's ultra-fast mode (the default: see BENCHMARKS.md).
    Fast,
    /// zlib level 6 equivalent.
    Balanced,
    /// zlib level 9 equivalent.
    Best,
}

/// PNG row filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PngFilter {
    None,
    Sub,
    Up,
    Paeth,
    Adaptive,
}

/// How output files are named.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Naming {
    /// Mirror the input tree under the output directory (the default).
    Mirror,
    /// A pattern of `{Keyword}` / `{Keyword:0N}` placeholders, e.g.
    /// `{SeriesInstanceUID}/{InstanceNumber:04}`; values are sanitized.
    Pattern(String),
}

/// The output stage's options.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct OutputOptions {
    /// The output folder.
    #[serde(rename = "output_dir", serialize_with = "crate::paths::serialize")]
    pub dir: PathBuf,
    pub format: OutputFormat,
    pub png_compression: PngCompression,
    pub png_filter: PngFilter,
    /// 1..=100.
    pub jpeg_quality: u8,
    pub naming: Naming,
    /// Resume: frames whose output exists (a finished image of the expected size) are not
    /// rendered again.
    pub skip_existing: bool,
    /// When outputs reach the disk.
    pub sync: SyncMode,
}

impl Default for OutputOptions {
    fn default() -> Self {
        OutputOptions {
            dir: PathBuf::from("out"),
            format: OutputFormat::Png,
            png_compression: PngCompression::Fast,
            png_filter: PngFilter::Adaptive,
            jpeg_quality: 90,
            naming: Naming::Mirror,
            skip_existing: false,
            sync: SyncMode::Run,
        }
    }
}

impl OutputOptions {
    /// The encoder's share of these options.
    pub fn encode(&self) -> EncodeOptions {
        EncodeOptions {
            format: self.format,
            png_compression: self.png_compression,
            png_filter: self.png_filter,
            jpeg_quality: self.jpeg_quality,
        }
    }
}
