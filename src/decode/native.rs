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

/// Returns the open `file` (of `size` bytes) and where its Pixel Data value lies, or `None`
/// when the Pixel Data element is not where the fast path expects it.
pub fn locate_pixel_data(
    file: File,
    size: u64,
    info: &ImageInfo,
    ts: &str,
) -> std::io::Result<Option<Located>> {
    let expected = info.native_bytes(info.frames);
    let (big_endian, explicit) = match ts {
        uids::IMPLICIT_VR_LITTLE_ENDIAN => (false, false),
        uids::EXPLICIT_VR_LITTLE_ENDIAN => (false, true),
        super::EXPLICIT_VR_BIG_ENDIAN => (true, true),
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
    /// Where frame `frame` of `info` lies in the file when its bytes are its stored values as
    /// they are (not packed, not byte-swapped, on a little-endian host): the offset of its
    /// first byte. `None` when the bytes need work on the host on their way to the slot.
    pub fn plain_frame(&self, frame: u32, info: &ImageInfo) -> Option<u64> {
        let plain = info.file_bits_allocated == info.bits_allocated
            && !self.swap_words
            && cfg!(target_endian = "little");
        let bits = info.native_frame_bits();
        let first_bit = frame as u64 * bits;
        (plain && first_bit.is_multiple_of(8)).then(|| self.offset + first_bit / 8)
    }

    /// Reads frame `frame` of `info` into `dst` (`info.frame_bytes()` bytes) as native-endian
    /// samples. `scratch` holds the bytes around the frame when they cannot go straight into
    /// `dst`: a frame of odd size across a word boundary, packed samples.
    pub fn read_frame(
        &self,
        frame: u32,
        info: &ImageInfo,
        dst: &mut [u8],
        scratch: &mut Vec<u8>,
    ) -> std::io::Result<()> {
        let packed = info.file_bits_allocated != info.bits_allocated;
        let bits = info.native_frame_bits();
        let (first_bit, end_bit) = (frame as u64 * bits, (frame as u64 + 1) * bits);
        let (start, end) = (first_bit / 8, end_bit.div_ceil(8));
        if !packed && !self.swap_words {
            // Slots are out of the caches: large frames go through `scratch` and streaming
            // stores (see `memory::streaming`).
            crate::memory::streaming::read_exact_at(&self.file, dst, self.offset + start, scratch)?;
        } else if !packed && start % 2 == 0 && end % 2 == 0 {
            self.file.read_exact_at(dst, self.offset + start)?;
            swap_words(dst);
        } else {
            // Whole 16-bit words around the frame when they are swapped (the value's padding
            // byte may complete the last one).
            let (from, to) = if self.swap_words {
                (start & !1, (end + 1) & !1)
            } else {
                (start, end)
            };
            let avail = to.min(self.len).saturating_sub(from) as usize;
            scratch.clear();
            scratch.resize((to - from) as usize, 0);
            self.file
                .read_exact_at(&mut scratch[..avail], self.offset + from)?;
            if self.swap_words {
                swap_words(scratch);
            }
            let skip = first_bit - 8 * from;
            if packed {
                unpack(scratch, skip, info, dst);
            } else {
                let at = (skip / 8) as usize;
                dst.copy_from_slice(&scratch[at..at + dst.len()]);
            }
        }
        le_to_native(dst, info.bits_allocated);
        Ok(())
    }
}

/// Frame `frame` of native pixel data held in memory (`bytes`, words already in little-endian
/// order), into `dst` as native-endian samples.
pub fn frame_from_bytes(
    bytes: &[u8],
    frame: u32,
    info: &ImageInfo,
    dst: &mut [u8],
) -> Result<(), String> {
    let bits = info.native_frame_bits();
    let (first_bit, end_bit) = (frame as u64 * bits, (frame as u64 + 1) * bits);
    let (start, end) = (first_bit / 8, end_bit.div_ceil(8));
    let Some(src) = bytes.get(start as usize..end as usize) else {
        return Err(format!(
            "Pixel Data holds {} bytes, frame {} needs bytes {start}..{end}",
            bytes.len(),
            frame + 1
        ));
    };
    if info.file_bits_allocated != info.bits_allocated {
        unpack(src, first_bit - 8 * start, info, dst);
    } else {
        dst.copy_from_slice(src);
    }
    le_to_native(dst, info.bits_allocated);
    Ok(())
}

/// Unpacks the samples of `info.file_bits_allocated` bits from the little-endian bit stream
/// `src`, starting at bit `skip` (PS3.5 8.1.1: the first sample in the lowest bits), into the
/// slot's containers filling `dst`: 8-bit for 1-bit samples, little-endian 16-bit for packed
/// 12-bit samples and for 32-bit colour (narrowed by `info.colour32`).
pub fn unpack(src: &[u8], skip: u64, info: &ImageInfo, dst: &mut [u8]) {
    match (info.file_bits_allocated, info.colour32) {
        (32, Some(c)) => {
            let from = (skip / 8) as usize;
            for (d, s) in dst
                .chunks_exact_mut(2)
                .zip(src.get(from..).unwrap_or_default().chunks_exact(4))
            {
                let raw = u32::from_le_bytes([s[0], s[1], s[2], s[3]]);
                d.copy_from_slice(&c.narrow(raw).to_le_bytes());
            }
        }
        (bits, _) => unpack_bits(src, skip, bits, dst),
    }
}

/// [`unpack`] for 1- and 12-bit samples.
fn unpack_bits(src: &[u8], skip: u64, bits: u16, dst: &mut [u8]) {
    let bit = |i: u64| -> u16 {
        src.get((i / 8) as usize)
            .map_or(0, |&b| u16::from(b >> (i % 8)) & 1)
    };
    match bits {
        1 => {
            for (i, d) in dst.iter_mut().enumerate() {
                *d = bit(skip + i as u64) as u8;
            }
        }
        12 => {
            for (i, d) in dst.chunks_exact_mut(2).enumerate() {
                let at = skip + 12 * i as u64;
                let v = if at.is_multiple_of(8) {
                    // Byte-aligned (every other sample of an aligned frame): two bytes.
                    let b = (at / 8) as usize;
                    u16::from(src.get(b).copied().unwrap_or(0))
                        | (u16::from(src.get(b + 1).copied().unwrap_or(0)) & 0x0f) << 8
                } else {
                    (0..12).fold(0u16, |v, k| v | bit(at + k) << k)
                };
                d.copy_from_slice(&v.to_le_bytes());
            }
        }
        _ => {}
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

    /// A 1x3 8-bit grey image description (what `read_frame` needs of it).
    fn info_8bit_1x3() -> ImageInfo {
        let mut info = crate::decode::info::tests::sample_info();
        info.rows = 1;
        info.cols = 3;
        info
    }

    #[test]
    fn packed_samples_unpack_lsb_first() {
        // 1-bit: 0b1010_0110 then 0b0000_0001 -> 0,1,1,0,0,1,0,1, 1
        let mut d = [9u8; 9];
        unpack_bits(&[0b1010_0110, 1], 0, 1, &mut d);
        assert_eq!(d, [0, 1, 1, 0, 0, 1, 0, 1, 1]);
        // From bit 3 on.
        let mut d = [9u8; 3];
        unpack_bits(&[0b1010_0110], 3, 1, &mut d);
        assert_eq!(d, [0, 0, 1]);
        // 12-bit: 0xABC and 0x123 pack as BC 3A 12.
        let mut d = [0u8; 4];
        unpack_bits(&[0xbc, 0x3a, 0x12], 0, 12, &mut d);
        assert_eq!(d, [0xbc, 0x0a, 0x23, 0x01]);
        // The second sample alone, from bit 12.
        let mut d = [0u8; 2];
        unpack_bits(&[0xbc, 0x3a, 0x12], 12, 12, &mut d);
        assert_eq!(u16::from_le_bytes(d), 0x123);
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
        let info = info_8bit_1x3();
        for f in 0..3u32 {
            let mut dst = [0u8; 3];
            located
                .read_frame(f, &info, &mut dst, &mut scratch)
                .unwrap();
            let first = 3 * f as u8 + 1;
            assert_eq!(dst, [first, first + 1, first + 2], "frame {f}");
        }
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn only_frames_stored_as_they_are_read_plain_from_the_file() {
        let path = std::env::temp_dir().join(format!("dicomflow-plain-{}", std::process::id()));
        std::fs::write(&path, [0u8; 16]).unwrap();
        let located = |swap_words| Located {
            file: File::open(&path).unwrap(),
            offset: 132,
            len: 9,
            swap_words,
        };
        let info = info_8bit_1x3();
        // Frame f of 3 bytes starts 3 f bytes into the value.
        assert_eq!(located(false).plain_frame(0, &info), Some(132));
        assert_eq!(located(false).plain_frame(2, &info), Some(138));
        // Swapped words need the host.
        assert_eq!(located(true).plain_frame(0, &info), None);
        // Packed samples (12 bits in the file, 16 in the slot) need the host.
        let mut packed = info.clone();
        packed.file_bits_allocated = 12;
        packed.bits_allocated = 16;
        assert_eq!(located(false).plain_frame(0, &packed), None);
        std::fs::remove_file(&path).unwrap();
    }
}
