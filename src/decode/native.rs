//! Native (uncompressed) pixel data read straight from the file into a slot.
//!
//! The header is parsed up to Pixel Data only; the pixel element is then found at the end of
//! the file, where it almost always is: its header must sit exactly `value length` bytes
//! before the end (or one more for an odd length padded to even), and it must carry the Pixel
//! Data tag and that length. When it does not (trailing elements, truncated files), the caller
//! falls back to a full parse, which reports what is wrong.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Explicit VR Big Endian (retired, still found in archives).
const EXPLICIT_VR_BIG_ENDIAN: &str = "1.2.840.10008.1.2.2";

use dicom_dictionary_std::uids;

use super::info::ImageInfo;

/// Returns the open file and the byte offset of the first frame's stored values, or `None`
/// when the Pixel Data element is not where the fast path expects it.
pub fn locate_pixel_data(
    path: &Path,
    info: &ImageInfo,
    ts: &str,
) -> std::io::Result<Option<(File, u64)>> {
    let file = super::probe::open_input(path)?;
    let size = file.metadata()?.len();
    let expected = info.frame_bytes() * info.frames as u64;
    let (big_endian, explicit) = match ts {
        uids::IMPLICIT_VR_LITTLE_ENDIAN => (false, false),
        uids::EXPLICIT_VR_LITTLE_ENDIAN => (false, true),
        EXPLICIT_VR_BIG_ENDIAN => (true, true),
        _ => return Ok(None),
    };
    let header_len: u64 = if explicit { 12 } else { 8 };
    for value_len in [expected, expected + 1] {
        let Some(at) = size.checked_sub(value_len + header_len) else {
            continue;
        };
        let mut h = [0u8; 12];
        let h = &mut h[..header_len as usize];
        file.read_exact_at(h, at)?;
        let tag_ok = if big_endian {
            h[0..4] == [0x7f, 0xe0, 0x00, 0x10]
        } else {
            h[0..4] == [0xe0, 0x7f, 0x10, 0x00]
        };
        if !tag_ok {
            continue;
        }
        let len_bytes: [u8; 4] = if explicit {
            if !(h[4..6] == *b"OW" || h[4..6] == *b"OB") || h[6..8] != [0, 0] {
                continue;
            }
            [h[8], h[9], h[10], h[11]]
        } else {
            [h[4], h[5], h[6], h[7]]
        };
        let len = if big_endian {
            u32::from_be_bytes(len_bytes)
        } else {
            u32::from_le_bytes(len_bytes)
        };
        if len as u64 == value_len {
            return Ok(Some((file, at + header_len)));
        }
    }
    Ok(None)
}

/// Fills `dst` from `file` at `offset`, failing on a short file.
pub fn read_exact_at(file: &File, dst: &mut [u8], offset: u64) -> std::io::Result<()> {
    file.read_exact_at(dst, offset)
}

/// Converts stored samples to native byte order in place.
pub fn to_native_order(data: &mut [u8], bits_allocated: u16, big_endian: bool) {
    if big_endian == cfg!(target_endian = "big") {
        return;
    }
    match bits_allocated {
        16 => data.chunks_exact_mut(2).for_each(|c| c.swap(0, 1)),
        32 => data.chunks_exact_mut(4).for_each(|c| c.reverse()),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swaps_16_and_32_bit_big_endian_samples() {
        let mut d = [0x01, 0x02, 0x03, 0x04];
        to_native_order(&mut d, 16, true);
        assert_eq!(d, [0x02, 0x01, 0x04, 0x03]);
        let mut d = [0x01, 0x02, 0x03, 0x04];
        to_native_order(&mut d, 32, true);
        assert_eq!(d, [0x04, 0x03, 0x02, 0x01]);
        let mut d = [0x01, 0x02];
        to_native_order(&mut d, 16, false);
        assert_eq!(d, [0x01, 0x02]);
    }
}
