//! Native (uncompressed) pixel data read straight from the file into a slot.
//!
//! The header is parsed up to Pixel Data only; the pixel element is then found at the end of
//! the file, where it almost always is: its header must sit exactly `value length` bytes
//! before the end (or one more for an odd length padded to even), and it must carry the Pixel
//! Data tag and that length. When it does not (trailing elements, truncated files), the caller
//! falls back to a full parse, which reports what is wrong.
//!
//! Byte order follows the Value Representation, as DCMTK reads it (checked against
//! `dcm2pnm` for 8/16/32 bits x OB/OW x odd/even sizes): in Explicit VR Big Endian an OW
//! value is a run of big-endian 16-bit words, whatever Bits Allocated says (8-bit samples
//! sit two to a word, the first in the low byte; a 32-bit sample is two words, the low one
//! first), and an OB value is bytes in file order. Once the words are swapped, every sample
//! reads as little endian.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Explicit VR Big Endian (retired, still found in archives).
const EXPLICIT_VR_BIG_ENDIAN: &str = "1.2.840.10008.1.2.2";

use dicom_dictionary_std::uids;

use super::info::ImageInfo;

/// Native Pixel Data found in a file.
pub struct Located {
    pub file: File,
    /// Offset of the first frame's stored values.
    pub offset: u64,
    /// Value length in bytes.
    pub len: u64,
    /// An OW value in big endian: its 16-bit words must be swapped.
    pub swap_words: bool,
}

/// Returns the open file and where its Pixel Data value lies, or `None` when the Pixel Data
/// element is not where the fast path expects it.
pub fn locate_pixel_data(
    path: &Path,
    info: &ImageInfo,
    ts: &str,
) -> std::io::Result<Option<Located>> {
    let file = File::open(path)?;
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
        let swap_words = big_endian && h[4..6] == *b"OW";
        let len = if big_endian {
            u32::from_be_bytes(len_bytes)
        } else {
            u32::from_le_bytes(len_bytes)
        };
        if len as u64 == value_len {
            return Ok(Some(Located {
                file,
                offset: at + header_len,
                len: value_len,
                swap_words,
            }));
        }
    }
    Ok(None)
}

impl Located {
    /// Reads frame `frame` (of `dst.len()` bytes) as native-endian samples. `scratch` holds
    /// the word-aligned window when an odd frame size puts a frame across a word boundary.
    pub fn read_frame(
        &self,
        frame: u32,
        bits_allocated: u16,
        dst: &mut [u8],
        scratch: &mut Vec<u8>,
    ) -> std::io::Result<()> {
        let n = dst.len() as u64;
        let rel = frame as u64 * n;
        if !self.swap_words {
            self.file.read_exact_at(dst, self.offset + rel)?;
        } else if rel % 2 == 0 && n % 2 == 0 {
            self.file.read_exact_at(dst, self.offset + rel)?;
            swap_words(dst);
        } else {
            // The 16-bit words around the frame: from the word holding its first byte to the
            // word holding its last (the value's padding byte may complete the last word).
            let start = rel & !1;
            let end = (rel + n + 1) & !1;
            let avail = end.min(self.len).saturating_sub(start) as usize;
            scratch.clear();
            scratch.resize((end - start) as usize, 0);
            self.file
                .read_exact_at(&mut scratch[..avail], self.offset + start)?;
            swap_words(scratch);
            let from = (rel - start) as usize;
            dst.copy_from_slice(&scratch[from..from + dst.len()]);
        }
        le_to_native(dst, bits_allocated);
        Ok(())
    }
}

/// Swaps the bytes of every 16-bit word (a big-endian OW value to little endian).
pub fn swap_words(data: &mut [u8]) {
    data.chunks_exact_mut(2).for_each(|c| c.swap(0, 1));
}

/// Converts little-endian samples to native byte order in place.
pub fn le_to_native(data: &mut [u8], bits_allocated: u16) {
    if cfg!(target_endian = "little") {
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
    fn big_endian_ow_is_swapped_as_words_whatever_the_sample_size() {
        // 8-bit samples 1, 2, 3, 4 in OW words (2 << 8 | 1), (4 << 8 | 3), big endian.
        let mut d = [0x02, 0x01, 0x04, 0x03];
        swap_words(&mut d);
        assert_eq!(d, [1, 2, 3, 4]);
        // A 32-bit sample 0x0A0B0C0D: low word first, each word big endian.
        let mut d = [0x0C, 0x0D, 0x0A, 0x0B];
        swap_words(&mut d);
        le_to_native(&mut d, 32);
        assert_eq!(u32::from_ne_bytes(d), 0x0A0B_0C0D);
    }

    #[test]
    fn frames_of_odd_size_are_cut_from_whole_words() {
        let path = std::env::temp_dir().join(format!("dicomflow-native-{}", std::process::id()));
        // Three 8-bit frames of 3 samples (1..=9) and a pad byte, as big-endian OW words.
        let samples: Vec<u8> = (1..=10).map(|v| if v == 10 { 0 } else { v }).collect();
        let mut file_bytes = samples.clone();
        swap_words(&mut file_bytes);
        std::fs::write(&path, &file_bytes).unwrap();
        let located = Located {
            file: File::open(&path).unwrap(),
            offset: 0,
            len: 10,
            swap_words: true,
        };
        let mut scratch = Vec::new();
        for f in 0..3u32 {
            let mut dst = [0u8; 3];
            located.read_frame(f, 8, &mut dst, &mut scratch).unwrap();
            let first = 3 * f as u8 + 1;
            assert_eq!(dst, [first, first + 1, first + 2], "frame {f}");
        }
        std::fs::remove_file(&path).unwrap();
    }
}
