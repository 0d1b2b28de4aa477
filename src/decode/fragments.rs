//! Which encapsulated fragments hold frame `f`: by the Basic Offset Table when present, one
//! fragment per frame when the counts agree, every fragment for a single frame, and otherwise
//! by the fragments that start a frame (a JPEG start-of-image marker, an RLE header: files
//! written without an offset table by encoders that split frames into several fragments).

/// How a fragment that starts a frame is told, for transfer syntax `ts`: an RLE header for
/// RLE Lossless, a JPEG start-of-image marker otherwise.
pub fn frame_start_test(ts: &str) -> fn(&[u8]) -> bool {
    if ts == dicom_dictionary_std::uids::RLE_LOSSLESS {
        super::rle::looks_like_header
    } else {
        starts_jpeg
    }
}

/// True when a fragment starts a JPEG or JPEG-LS codestream (a start-of-image marker).
pub fn starts_jpeg(fragment: &[u8]) -> bool {
    super::jpeg::markers::starts_with_soi(fragment, 0)
}

/// Concatenates the fragments of frame `frame` (0-based) into `out`. `starts_frame` tells a
/// fragment that begins a frame, for files with several fragments per frame and no table.
pub fn frame_bytes(
    offset_table: &[u32],
    fragments: &[Vec<u8>],
    frames: u32,
    frame: u32,
    out: &mut Vec<u8>,
    starts_frame: fn(&[u8]) -> bool,
) -> Result<(), String> {
    out.clear();
    if fragments.is_empty() {
        return Err("encapsulated Pixel Data has no fragments".into());
    }
    let f = frame as usize;
    if frames <= 1 {
        for frag in fragments {
            out.extend_from_slice(frag);
        }
        return Ok(());
    }
    if offset_table.len() == frames as usize {
        // Offsets count from the first fragment item, 8 bytes of item header each.
        let start = offset_table[f] as u64;
        let end = offset_table
            .get(f + 1)
            .map(|&e| e as u64)
            .unwrap_or(u64::MAX);
        if end <= start {
            return Err(format!(
                "Basic Offset Table is not increasing at frame {}",
                f + 1
            ));
        }
        let mut pos = 0u64;
        for frag in fragments {
            if pos >= start && pos < end {
                out.extend_from_slice(frag);
            }
            pos += 8 + frag.len() as u64;
        }
        if out.is_empty() {
            return Err(format!(
                "Basic Offset Table points past the fragments for frame {}",
                f + 1
            ));
        }
        return Ok(());
    }
    if fragments.len() == frames as usize {
        out.extend_from_slice(&fragments[f]);
        return Ok(());
    }
    // No usable table: a frame starts at each fragment that `starts_frame` recognises.
    let mut current: Option<usize> = None;
    for frag in fragments {
        if starts_frame(frag) {
            current = Some(current.map_or(0, |c| c + 1));
        }
        if current == Some(f) {
            out.extend_from_slice(frag);
        }
    }
    if out.is_empty() {
        return Err(format!(
            "cannot locate frame {} among {} fragments without a Basic Offset Table",
            f + 1,
            fragments.len()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uses_the_offset_table() {
        let frags = vec![vec![1u8; 4], vec![2u8; 2], vec![3u8; 6]];
        // frame 0 = fragments 0 and 1 (12 + 10 bytes), frame 1 = fragment 2.
        let bot = [0, 22];
        let mut out = Vec::new();
        frame_bytes(&bot, &frags, 2, 0, &mut out, starts_jpeg).unwrap();
        assert_eq!(out, [1, 1, 1, 1, 2, 2]);
        frame_bytes(&bot, &frags, 2, 1, &mut out, starts_jpeg).unwrap();
        assert_eq!(out, [3; 6]);
    }

    #[test]
    fn one_fragment_per_frame_and_single_frame() {
        let frags = vec![vec![1u8], vec![2u8]];
        let mut out = Vec::new();
        frame_bytes(&[], &frags, 2, 1, &mut out, starts_jpeg).unwrap();
        assert_eq!(out, [2]);
        frame_bytes(&[], &frags, 1, 0, &mut out, starts_jpeg).unwrap();
        assert_eq!(out, [1, 2]);
    }

    #[test]
    fn splits_by_start_of_image_without_a_table() {
        let frags = vec![
            vec![0xff, 0xd8, 1],
            vec![9],
            vec![0xff, 0xd8, 2],
            vec![8],
            vec![7],
        ];
        let mut out = Vec::new();
        frame_bytes(&[], &frags, 2, 1, &mut out, starts_jpeg).unwrap();
        assert_eq!(out, [0xff, 0xd8, 2, 8, 7]);
        assert!(frame_bytes(&[], &frags, 3, 2, &mut out, starts_jpeg).is_err());
    }
}
