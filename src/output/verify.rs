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

/// `Ok` when `path` holds a complete `format` image of `width` x `height` with `channels`
/// (1 gray, 3 RGB) channels; otherwise why not.
pub fn check_existing(
    path: &Path,
    format: OutputFormat,
    width: u32,
    height: u32,
    channels: usize,
) -> Result<(), String> {
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err(format!(
            "{} is in the way",
            crate::decode::probe::special_kind(&meta.file_type())
        ));
    }
    if meta.len() == 0 {
        return Err("empty file".into());
    }
    let mut file = crate::decode::probe::open_input(path).map_err(|e| e.to_string())?;
    check_end(&mut file, format, meta.len())?;
    file.seek(SeekFrom::Start(0)).map_err(|e| e.to_string())?;
    let fmt = match format {
        OutputFormat::Png => image::ImageFormat::Png,
        OutputFormat::Jpeg => image::ImageFormat::Jpeg,
        OutputFormat::Tiff => image::ImageFormat::Tiff,
        OutputFormat::Bmp => image::ImageFormat::Bmp,
    };
    let decoder = image::ImageReader::with_format(BufReader::new(file), fmt)
        .into_decoder()
        .map_err(|e| format!("not a readable {fmt:?} file: {e}"))?;
    let (w, h) = decoder.dimensions();
    if (w, h) != (width, height) {
        return Err(format!("{w}x{h} pixels, {width}x{height} expected"));
    }
    let c = decoder.color_type().channel_count() as usize;
    // A gray BMP is written with a palette, which the decoder reports as RGB.
    let gray_bmp = format == OutputFormat::Bmp && channels == 1 && c == 3;
    if c != channels && !gray_bmp {
        return Err(format!("{c} channel(s), {channels} expected"));
    }
    Ok(())
}

/// Checks the last bytes of a file of `len` bytes against how `format` ends.
fn check_end(file: &mut std::fs::File, format: OutputFormat, len: u64) -> Result<(), String> {
    let mut tail = [0u8; 12];
    let n = (len as usize).min(tail.len());
    file.seek(SeekFrom::Start(len - n as u64))
        .and_then(|_| file.read_exact(&mut tail[..n]))
        .map_err(|e| e.to_string())?;
    let tail = &tail[..n];
    let ends_well = match format {
        OutputFormat::Png => tail == PNG_IEND,
        OutputFormat::Jpeg => tail.ends_with(&[0xff, 0xd9]),
        OutputFormat::Bmp => {
            // The header's file size (bytes 2..6) is the file's.
            let mut head = [0u8; 6];
            file.seek(SeekFrom::Start(0))
                .and_then(|_| file.read_exact(&mut head))
                .map_err(|e| e.to_string())?;
            u32::from_le_bytes([head[2], head[3], head[4], head[5]]) as u64 == len
        }
        // TIFF has no end marker; its header and first directory are checked by the decoder.
        OutputFormat::Tiff => true,
    };
    if ends_well {
        Ok(())
    } else {
        Err(format!("truncated: does not end as a {format:?} file ends"))
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
            assert_eq!(check_existing(&p, format, 16, 8, 1), Ok(()), "{format:?}");
            let e = check_existing(&p, format, 16, 9, 1).unwrap_err();
            assert!(e.contains("16x8"), "{format:?}: {e}");
            if format != OutputFormat::Bmp {
                assert!(check_existing(&p, format, 16, 8, 3).is_err(), "{format:?}");
            }
            if format != OutputFormat::Tiff {
                std::fs::write(&p, &bytes[..bytes.len() - 1]).unwrap();
                assert!(check_existing(&p, format, 16, 8, 1).is_err(), "{format:?}");
            }
            std::fs::write(&p, b"").unwrap();
            assert_eq!(
                check_existing(&p, format, 16, 8, 1),
                Err("empty file".into())
            );
        }
        std::fs::create_dir(dir.join("d.png")).unwrap();
        let e = check_existing(&dir.join("d.png"), OutputFormat::Png, 16, 8, 1).unwrap_err();
        assert!(e.contains("in the way"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
