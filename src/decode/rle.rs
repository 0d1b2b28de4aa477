//! RLE Lossless (PS3.5 Annex G) decoding of one frame: a 64-byte header (segment count and
//! up to 15 segment offsets), then PackBits segments, one per byte of each sample, most
//! significant byte first. Any Bits Allocated that is a whole number of bytes works (8, 16
//! and 32-bit samples: one, two or four segments per sample; DCMTK decodes them all).
//!
//! dicom-rs's RLE decoder handled one fragment per frame, 8 and 16 bits only, and panicked on
//! short segments; this one takes the frame's bytes whatever fragments they came from (see
//! [`super::fragments`]) and refuses a segment that decodes to fewer bytes than the frame
//! needs, as DCMTK does. Extra bytes at the end of a segment are ignored.

/// Size of the RLE header.
const HEADER: usize = 64;

/// True when `data` starts with a plausible RLE header: 1 to 15 segments, the first at byte
/// 64, the others increasing, unused offsets zero. Frames split over several fragments
/// without a Basic Offset Table are found by it.
pub fn looks_like_header(data: &[u8]) -> bool {
    let Some(h) = data.get(..HEADER) else {
        return false;
    };
    let word = |i: usize| u32::from_le_bytes([h[4 * i], h[4 * i + 1], h[4 * i + 2], h[4 * i + 3]]);
    let n = word(0) as usize;
    if !(1..=15).contains(&n) || word(1) != HEADER as u32 {
        return false;
    }
    (2..=n).all(|i| word(i) > word(i - 1)) && (n + 1..16).all(|i| word(i) == 0)
}

/// Decodes one frame of `samples` samples per pixel, `bytes` bytes per sample, `pixels`
/// pixels into `dst` as interleaved native-endian samples (`dst.len()` =
/// `pixels * samples * bytes`).
pub fn decode_frame(
    data: &[u8],
    samples: usize,
    bytes: usize,
    pixels: usize,
    dst: &mut [u8],
) -> Result<(), String> {
    if data.len() < HEADER {
        return Err(format!(
            "{} bytes, shorter than the RLE header (64)",
            data.len()
        ));
    }
    let word = |i: usize| {
        u32::from_le_bytes([
            data[4 * i],
            data[4 * i + 1],
            data[4 * i + 2],
            data[4 * i + 3],
        ]) as usize
    };
    let planes = samples * bytes;
    let segments = word(0);
    if segments != planes {
        return Err(format!(
            "{segments} segment(s) in the RLE header, {planes} expected ({samples} sample(s) \
             of {bytes} byte(s))"
        ));
    }
    if dst.len() != pixels * planes {
        return Err(format!(
            "internal: {} bytes for {pixels} pixels of {planes} bytes",
            dst.len()
        ));
    }
    let mut plane = vec![0u8; pixels];
    for k in 0..segments {
        let start = word(1 + k);
        let end = if k + 1 < segments {
            word(2 + k)
        } else {
            data.len()
        };
        if start < HEADER || start > end || end > data.len() {
            return Err(format!(
                "segment {} spans bytes {start}..{end} of {}",
                k + 1,
                data.len()
            ));
        }
        let got = unpack(&data[start..end], &mut plane);
        if got < pixels {
            return Err(format!(
                "segment {} decodes to {got} bytes, {pixels} needed",
                k + 1
            ));
        }
        // Segment k holds byte `significance` (0 = most significant) of sample `sample`.
        let (sample, significance) = (k / bytes, k % bytes);
        let byte = if cfg!(target_endian = "little") {
            bytes - 1 - significance
        } else {
            significance
        };
        let stride = planes;
        let offset = sample * bytes + byte;
        for (d, &v) in dst.iter_mut().skip(offset).step_by(stride).zip(&plane) {
            *d = v;
        }
    }
    Ok(())
}

/// PackBits: `n` in 0..=127 copies the next `n + 1` bytes, `n` in -127..=-1 repeats the next
/// byte `1 - n` times, -128 does nothing. Fills `out` from the start; returns how many bytes
/// were produced (at most `out.len()`).
fn unpack(seg: &[u8], out: &mut [u8]) -> usize {
    let (mut i, mut o) = (0usize, 0usize);
    while i < seg.len() && o < out.len() {
        let n = seg[i] as i8;
        i += 1;
        if n >= 0 {
            let count = (n as usize + 1).min(seg.len() - i).min(out.len() - o);
            out[o..o + count].copy_from_slice(&seg[i..i + count]);
            o += count;
            i += n as usize + 1;
        } else if n != -128 {
            let Some(&v) = seg.get(i) else {
                break;
            };
            i += 1;
            let count = (1 - n as isize) as usize;
            let count = count.min(out.len() - o);
            out[o..o + count].fill(v);
            o += count;
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(offsets: &[u32]) -> Vec<u8> {
        let mut h = vec![0u8; HEADER];
        h[0..4].copy_from_slice(&(offsets.len() as u32).to_le_bytes());
        for (i, o) in offsets.iter().enumerate() {
            h[4 + 4 * i..8 + 4 * i].copy_from_slice(&o.to_le_bytes());
        }
        h
    }

    #[test]
    fn decodes_32_bit_samples_from_four_segments() {
        // Two pixels: 0x01020304 and 0x0A0B0C0D; segment k = byte k (MSB first).
        let segs: [[u8; 3]; 4] = [[1, 1, 10], [1, 2, 11], [1, 3, 12], [1, 4, 13]];
        let mut data = header(&[64, 67, 70, 73]);
        segs.iter().for_each(|s| data.extend(s));
        let mut dst = [0u8; 8];
        decode_frame(&data, 1, 4, 2, &mut dst).unwrap();
        assert_eq!(
            u32::from_ne_bytes(dst[..4].try_into().unwrap()),
            0x0102_0304
        );
        assert_eq!(
            u32::from_ne_bytes(dst[4..].try_into().unwrap()),
            0x0A0B_0C0D
        );
        assert!(looks_like_header(&data));
    }

    #[test]
    fn runs_literals_and_short_segments() {
        // Segment: run of 5 x 7, literal 1 2, no-op.
        let mut data = header(&[64]);
        data.extend([0xfc, 7, 0x01, 1, 2, 0x80]);
        let mut dst = [0u8; 7];
        decode_frame(&data, 1, 1, 7, &mut dst).unwrap();
        assert_eq!(dst, [7, 7, 7, 7, 7, 1, 2]);
        let mut dst = [0u8; 8];
        let e = decode_frame(&data, 1, 1, 8, &mut dst).unwrap_err();
        assert!(e.contains("decodes to 7 bytes, 8 needed"), "{e}");
        assert!(decode_frame(&data, 3, 1, 1, &mut [0u8; 3]).is_err());
        assert!(decode_frame(&data[..10], 1, 1, 1, &mut [0u8; 1]).is_err());
    }

    #[test]
    fn headers_are_told_from_segment_data() {
        assert!(looks_like_header(&header(&[64, 100, 200])));
        assert!(!looks_like_header(&header(&[64, 50])));
        assert!(!looks_like_header(&header(&[65])));
        assert!(!looks_like_header(&[0u8; 64]));
        assert!(!looks_like_header(&[1u8; 10]));
    }
}
