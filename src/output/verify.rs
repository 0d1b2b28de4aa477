//! Whether an output already on disk is a finished image of the expected size, for
//! `--skip-existing`: a regular, non-empty file whose header (read by the `image` crate's
//! decoder, without decoding pixels) gives the expected format, dimensions and channels, and
//! whose end is the format's end (PNG `IEND`, JPEG `EOI`, BMP's declared size). A zero-length
//! file, a folder, a truncated or foreign file at an output's path is rendered again.

use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use image::ImageDecoder;

use crate::output::options::OutputFormat;

/// The last 12 bytes of every PNG file: the `IEND` chunk (length 0, type, CRC).
const PNG_IEND: [u8; 12] = [0, 0, 0, 0, b'I', b'E', b'N', b'D', 0xae, 0x42, 0x60, 0x82];

/// Why an existing output does not count as done (it is rendered again).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// The file cannot be read.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// Something other than a file has the output's name (a folder, a socket, ...).
    #[error("{0} is in the way")]
    InTheWay(&'static str),
    #[error("empty file")]
    Empty,
    /// The image decoder does not accept the file.
    #[error("not a readable {format:?} file: {reason}")]
    Unreadable {
        format: image::ImageFormat,
        reason: String,
    },
    /// DICOM output that does not parse.
    #[error("not a readable DICOM file: {0}")]
    UnreadableDicom(String),
    #[error("{found_w}x{found_h} pixels, {width}x{height} expected")]
    Size {
        found_w: u32,
        found_h: u32,
        width: u32,
        height: u32,
    },
    #[error("{found} channel(s), {expected} expected")]
    Channels { found: usize, expected: usize },
    /// DICOM pixel data shorter than the image.
    #[error("{0} bytes of pixel data")]
    PixelData(usize),
    /// The file does not end the way a complete file of its format ends.
    #[error("truncated: does not end as a {0:?} file ends")]
    Truncated(OutputFormat),
}

/// `Ok` when `path` holds a complete `format` image of `width` x `height` with `channels`
/// (1 gray, 3 RGB) channels; otherwise why not.
pub fn check_existing(
    path: &Path,
    format: OutputFormat,
    width: u32,
    height: u32,
    channels: usize,
) -> Result<(), VerifyError> {
    let meta = std::fs::metadata(path)?;
    if !meta.is_file() {
        return Err(VerifyError::InTheWay(crate::decode::probe::special_kind(
            &meta.file_type(),
        )));
    }
    if meta.len() == 0 {
        return Err(VerifyError::Empty);
    }
    if format == OutputFormat::Dcm {
        return check_dicom(path, width, height, channels);
    }
    let mut file = crate::decode::probe::open_input(path)?;
    check_end(&mut file, format, meta.len())?;
    file.seek(SeekFrom::Start(0))?;
    let fmt = match format {
        OutputFormat::Png => image::ImageFormat::Png,
        OutputFormat::Jpeg => image::ImageFormat::Jpeg,
        OutputFormat::Tiff => image::ImageFormat::Tiff,
        OutputFormat::Bmp => image::ImageFormat::Bmp,
        OutputFormat::Dcm => unreachable!("checked above"),
    };
    let decoder = image::ImageReader::with_format(BufReader::new(file), fmt)
        .into_decoder()
        .map_err(|e| VerifyError::Unreadable {
            format: fmt,
            reason: e.to_string(),
        })?;
    let (w, h) = decoder.dimensions();
    if (w, h) != (width, height) {
        return Err(VerifyError::Size {
            found_w: w,
            found_h: h,
            width,
            height,
        });
    }
    let c = decoder.color_type().channel_count() as usize;
    // A gray BMP is written with a palette, which the decoder reports as RGB.
    let gray_bmp = format == OutputFormat::Bmp && channels == 1 && c == 3;
    if c != channels && !gray_bmp {
        return Err(VerifyError::Channels {
            found: c,
            expected: channels,
        });
    }
    Ok(())
}

/// A DICOM output (`output::dicom`): the whole file parses (a truncated one does not) and its
/// Rows, Columns and Samples per Pixel, and the length of its pixel data, are the expected ones.
fn check_dicom(path: &Path, width: u32, height: u32, channels: usize) -> Result<(), VerifyError> {
    use dicom_dictionary_std::tags;
    let obj = dicom_object::OpenFileOptions::new()
        .open_file(path)
        .map_err(|e| VerifyError::UnreadableDicom(e.to_string()))?;
    let int = |tag| -> Option<u32> { obj.element(tag).ok().and_then(|e| e.to_int::<u32>().ok()) };
    let (w, h) = (int(tags::COLUMNS), int(tags::ROWS));
    if (w, h) != (Some(width), Some(height)) {
        return Err(VerifyError::Size {
            found_w: w.unwrap_or(0),
            found_h: h.unwrap_or(0),
            width,
            height,
        });
    }
    let c = int(tags::SAMPLES_PER_PIXEL).unwrap_or(0) as usize;
    if c != channels {
        return Err(VerifyError::Channels {
            found: c,
            expected: channels,
        });
    }
    let data = obj
        .element(tags::PIXEL_DATA)
        .ok()
        .and_then(|e| e.to_bytes().ok().map(|b| b.len()))
        .unwrap_or(0);
    if data < width as usize * height as usize * channels {
        return Err(VerifyError::PixelData(data));
    }
    Ok(())
}

/// Checks the last bytes of a file of `len` bytes against how `format` ends.
fn check_end(file: &mut std::fs::File, format: OutputFormat, len: u64) -> Result<(), VerifyError> {
    let mut tail = [0u8; 12];
    let n = (len as usize).min(tail.len());
    file.seek(SeekFrom::Start(len - n as u64))
        .and_then(|_| file.read_exact(&mut tail[..n]))?;
    let tail = &tail[..n];
    let ends_well = match format {
        OutputFormat::Png => tail == PNG_IEND,
        OutputFormat::Jpeg => tail.ends_with(&[0xff, 0xd9]),
        OutputFormat::Bmp => {
            // The header's file size (bytes 2..6) is the file's.
            let mut head = [0u8; 6];
            file.seek(SeekFrom::Start(0))
                .and_then(|_| file.read_exact(&mut head))?;
            u32::from_le_bytes([head[2], head[3], head[4], head[5]]) as u64 == len
        }
        // TIFF has no end marker; its header and first directory are checked by the decoder.
        // DICOM is parsed whole by `check_dicom`.
        OutputFormat::Tiff | OutputFormat::Dcm => true,
    };
    if ends_well {
        Ok(())
    } else {
        Err(VerifyError::Truncated(format))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::encode::{EncodeOptions, ImageEncoder};

    #[test]
    fn complete_outputs_pass_and_broken_ones_say_why() {
        let dir = crate::scratch_dir("verify");
        for format in [
            OutputFormat::Png,
            OutputFormat::Jpeg,
            OutputFormat::Tiff,
            OutputFormat::Bmp,
        ] {
            let mut enc = ImageEncoder::new(EncodeOptions {
                format,
                png_compression: crate::output::options::PngCompression::Fast,
                png_filter: crate::output::options::PngFilter::Adaptive,
                jpeg_quality: 90,
            });
            let bytes = enc.encode(16, 8, 1, &[7u8; 128]).unwrap().to_vec();
            let p = dir.join(format!("x.{}", format.extension()));
            std::fs::write(&p, &bytes).unwrap();
            let ok = check_existing(&p, format, 16, 8, 1);
            assert!(ok.is_ok(), "{format:?}: {ok:?}");
            let e = check_existing(&p, format, 16, 9, 1).unwrap_err();
            assert!(
                matches!(
                    e,
                    VerifyError::Size {
                        found_w: 16,
                        found_h: 8,
                        ..
                    }
                ),
                "{format:?}: {e}"
            );
            assert!(e.to_string().contains("16x8"), "{format:?}: {e}");
            if format != OutputFormat::Bmp {
                assert!(check_existing(&p, format, 16, 8, 3).is_err(), "{format:?}");
            }
            if format != OutputFormat::Tiff {
                std::fs::write(&p, &bytes[..bytes.len() - 1]).unwrap();
                assert!(check_existing(&p, format, 16, 8, 1).is_err(), "{format:?}");
            }
            std::fs::write(&p, b"").unwrap();
            let e = check_existing(&p, format, 16, 8, 1);
            assert!(matches!(e, Err(VerifyError::Empty)), "{e:?}");
        }
        // DICOM: a complete Secondary Capture passes, a truncated one does not.
        let src = crate::decode::info::SourceHeader::default();
        let derived = crate::output::dicom::Derived {
            source: &src,
            frame: 0,
            frames: 1,
            instance_number: None,
            description: "test",
            fingerprint: "",
            fallback_id: "x",
        };
        let mut bytes = Vec::new();
        crate::output::dicom::encode(&mut bytes, 16, 8, 3, &[9u8; 384], &derived).unwrap();
        let p = dir.join("x.dcm");
        std::fs::write(&p, &bytes).unwrap();
        let ok = check_existing(&p, OutputFormat::Dcm, 16, 8, 3);
        assert!(ok.is_ok(), "{ok:?}");
        assert!(check_existing(&p, OutputFormat::Dcm, 16, 8, 1).is_err());
        assert!(check_existing(&p, OutputFormat::Dcm, 8, 16, 3).is_err());
        std::fs::write(&p, &bytes[..bytes.len() - 10]).unwrap();
        assert!(check_existing(&p, OutputFormat::Dcm, 16, 8, 3).is_err());
        std::fs::create_dir(dir.join("d.png")).unwrap();
        let e = check_existing(&dir.join("d.png"), OutputFormat::Png, 16, 8, 1).unwrap_err();
        assert!(e.to_string().contains("in the way"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
