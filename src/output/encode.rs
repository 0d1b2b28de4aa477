//! 8-bit pixels → encoded image bytes (PNG through the `png` crate with the configured
//! compression and filter; JPEG, TIFF and BMP through `image`; DICOM Secondary Capture through
//! `output::dicom`). One [`ImageEncoder`] per writer thread reuses its output buffer.

use std::io::Cursor;

use image::ImageEncoder as _;

use crate::output::dicom::{self, Derived};
use crate::output::error::EncodeError;
use crate::output::options::{OutputFormat, PngCompression, PngFilter};
use crate::output::png::{filter_rows, unfilter_rows, PngWriter};

/// The filter the GPU should apply to rows for these settings (a PNG filter type, or 5 for
/// the adaptive choice), or `None` when the output is not a fast-compressed PNG: then the
/// writer needs plain pixels.
pub fn png_filter_mode(opts: &EncodeOptions) -> Option<u32> {
    if opts.format != OutputFormat::Png || opts.png_compression != PngCompression::Fast {
        return None;
    }
    Some(png_filter_type(opts.png_filter))
}

/// A PNG filter setting as the GPU's filter kernel takes it: the filter type, or 5 for the
/// adaptive choice.
pub fn png_filter_type(filter: PngFilter) -> u32 {
    match filter {
        PngFilter::None => 0,
        PngFilter::Sub => 1,
        PngFilter::Up => 2,
        PngFilter::Paeth => 4,
        PngFilter::Adaptive => 5,
    }
}

/// Encoding settings.
#[derive(Debug, Clone, Copy)]
pub struct EncodeOptions {
    pub format: OutputFormat,
    pub png_compression: PngCompression,
    pub png_filter: PngFilter,
    pub jpeg_quality: u8,
}

/// A reusable encoder.
pub struct ImageEncoder {
    opts: EncodeOptions,
    buf: Vec<u8>,
    /// Filtered PNG rows, reused between slices.
    filtered: Vec<u8>,
    png: PngWriter,
}

impl ImageEncoder {
    pub fn new(opts: EncodeOptions) -> Self {
        ImageEncoder {
            opts,
            buf: Vec::new(),
            filtered: Vec::new(),
            png: PngWriter::default(),
        }
    }

    /// Encodes `pixels` (`channels` = 1 gray or 3 RGB, row-major) and returns the bytes.
    pub fn encode(
        &mut self,
        width: u32,
        height: u32,
        channels: usize,
        pixels: &[u8],
    ) -> Result<&[u8], EncodeError> {
        self.buf.clear();
        let expected = width as usize * height as usize * channels;
        if pixels.len() != expected {
            return Err(EncodeError::Internal(format!(
                "{} bytes for a {width}x{height}x{channels} image",
                pixels.len()
            )));
        }
        match self.opts.format {
            OutputFormat::Png => self.encode_png(width, height, channels, pixels)?,
            OutputFormat::Dcm => {
                return Err(EncodeError::Internal(
                    "DICOM output needs its source (encode_dicom)".into(),
                ))
            }
            other => {
                let color = if channels == 1 {
                    image::ExtendedColorType::L8
                } else {
                    image::ExtendedColorType::Rgb8
                };
                let mut cursor = Cursor::new(std::mem::take(&mut self.buf));
                let result = match other {
                    OutputFormat::Jpeg => image::codecs::jpeg::JpegEncoder::new_with_quality(
                        &mut cursor,
                        self.opts.jpeg_quality,
                    )
                    .encode(pixels, width, height, color),
                    OutputFormat::Tiff => image::codecs::tiff::TiffEncoder::new(&mut cursor)
                        .write_image(pixels, width, height, color),
                    OutputFormat::Bmp => image::codecs::bmp::BmpEncoder::new(&mut cursor)
                        .encode(pixels, width, height, color),
                    OutputFormat::Png | OutputFormat::Dcm => unreachable!("handled above"),
                };
                self.buf = cursor.into_inner();
                result.map_err(|source| EncodeError::Image {
                    format: other,
                    source,
                })?;
            }
        }
        Ok(&self.buf)
    }

    /// Encodes `pixels` as a DICOM Secondary Capture image derived from `derived`'s source.
    pub fn encode_dicom(
        &mut self,
        width: u32,
        height: u32,
        channels: usize,
        pixels: &[u8],
        derived: &Derived,
    ) -> Result<&[u8], EncodeError> {
        dicom::encode(&mut self.buf, width, height, channels, pixels, derived)?;
        Ok(&self.buf)
    }

    /// The PNG container around `zlib`, a zlib stream of the filtered rows compressed on the
    /// GPU, without copying it: the file is the returned head, `zlib`, then the returned tail
    /// (written with one `writev` straight from the output slot).
    pub fn png_around_zlib(
        &mut self,
        width: u32,
        height: u32,
        channels: usize,
        zlib: &[u8],
    ) -> Result<(&[u8], [u8; crate::output::png::PNG_TAIL]), EncodeError> {
        let tail =
            crate::output::png::png_around_zlib(&mut self.buf, width, height, channels, zlib)?;
        Ok((&self.buf, tail))
    }

    /// The bytes of the last successful [`encode`](Self::encode).
    pub fn last(&self) -> &[u8] {
        &self.buf
    }

    /// Encodes rows already PNG-filtered (filter byte + residuals per row), as the GPU's
    /// `png_filter_rows` kernel leaves them when [`png_filter_mode`] asks it to: the same bytes
    /// [`encode`](Self::encode) gives for the pixels. Other settings get the pixels back first.
    pub fn encode_filtered(
        &mut self,
        width: u32,
        height: u32,
        channels: usize,
        filtered: &[u8],
    ) -> Result<&[u8], EncodeError> {
        let row_len = width as usize * channels;
        if png_filter_mode(&self.opts).is_some() {
            self.png
                .encode_filtered(&mut self.buf, width, height, channels, filtered)?;
            return Ok(&self.buf);
        }
        let mut pixels = std::mem::take(&mut self.filtered);
        let result = unfilter_rows(filtered, row_len, channels, &mut pixels)
            .and_then(|()| self.encode(width, height, channels, &pixels).map(|_| ()));
        self.filtered = pixels;
        result.map(|()| self.buf.as_slice())
    }

    fn encode_png(
        &mut self,
        width: u32,
        height: u32,
        channels: usize,
        pixels: &[u8],
    ) -> Result<(), EncodeError> {
        if self.opts.png_compression == PngCompression::Fast {
            // Our filter pass and container: the `png` crate's bytes, in less time.
            let row_len = width as usize * channels;
            filter_rows(
                self.opts.png_filter,
                pixels,
                row_len,
                channels,
                &mut self.filtered,
            );
            return self.png.encode_filtered(
                &mut self.buf,
                width,
                height,
                channels,
                &self.filtered,
            );
        }
        let mut enc = png::Encoder::new(&mut self.buf, width, height);
        enc.set_color(if channels == 1 {
            png::ColorType::Grayscale
        } else {
            png::ColorType::Rgb
        });
        enc.set_depth(png::BitDepth::Eight);
        match self.opts.png_compression {
            PngCompression::None => {
                enc.set_deflate_compression(png::DeflateCompression::NoCompression)
            }
            PngCompression::Fast => enc.set_compression(png::Compression::Fast),
            PngCompression::Balanced => enc.set_compression(png::Compression::Balanced),
            PngCompression::Best => enc.set_compression(png::Compression::High),
        }
        enc.set_filter(match self.opts.png_filter {
            PngFilter::None => png::Filter::NoFilter,
            PngFilter::Sub => png::Filter::Sub,
            PngFilter::Up => png::Filter::Up,
            PngFilter::Paeth => png::Filter::Paeth,
            PngFilter::Adaptive => png::Filter::Adaptive,
        });
        let mut writer = enc.write_header()?;
        writer.write_image_data(pixels)?;
        writer.finish()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(format: OutputFormat) -> EncodeOptions {
        EncodeOptions {
            format,
            png_compression: PngCompression::Fast,
            png_filter: PngFilter::Adaptive,
            jpeg_quality: 90,
        }
    }

    #[test]
    fn png_round_trips_exactly() {
        let pixels: Vec<u8> = (0..64 * 48).map(|i| (i * 7 % 256) as u8).collect();
        let mut e = ImageEncoder::new(opts(OutputFormat::Png));
        let bytes = e.encode(64, 48, 1, &pixels).unwrap().to_vec();
        let img = image::load_from_memory(&bytes).unwrap().to_luma8();
        assert_eq!(img.as_raw(), &pixels);
    }

    #[test]
    fn every_format_encodes_gray_and_rgb() {
        for f in [
            OutputFormat::Png,
            OutputFormat::Jpeg,
            OutputFormat::Tiff,
            OutputFormat::Bmp,
        ] {
            let mut e = ImageEncoder::new(opts(f));
            assert!(!e.encode(8, 8, 1, &[128; 64]).unwrap().is_empty());
            assert!(!e.encode(8, 8, 3, &[128; 192]).unwrap().is_empty());
        }
    }

    #[test]
    fn wrong_buffer_size_is_an_error() {
        let mut e = ImageEncoder::new(opts(OutputFormat::Png));
        assert!(e.encode(8, 8, 1, &[0; 10]).is_err());
    }
}
