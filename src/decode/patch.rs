//! Same-size byte patches applied while dicom-rs reads a file, for the lenient parsing DCMTK
//! does and dicom-rs does not (issue 16):
//!
//! * a file meta value longer than its VR allows (an AE title of 18 bytes): dicom-rs refuses
//!   the whole file; the element is renamed to an unknown group-2 element, which it skips;
//! * an element with VR UN and undefined length in explicit VR (CP-246): dicom-rs would parse
//!   its items as explicit VR, while they are implicit VR little endian; the header becomes an
//!   OB with the content's real length, and [`super::un`] parses the bytes afterwards.
//!
//! Patches never change the size of anything, so every offset (the guard's, the native pixel
//! read's) stays valid. [`super::guard`] finds them while it walks the file.

use std::io::{Read, Seek, SeekFrom};

/// Bytes to write over the file's bytes at `at` while reading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Patch {
    pub at: u64,
    pub bytes: Vec<u8>,
}

/// A reader that returns `inner`'s bytes with `patches` applied.
pub struct PatchedReader<R> {
    inner: R,
    pos: u64,
    patches: Vec<Patch>,
}

impl<R: Read + Seek> PatchedReader<R> {
    /// `inner` positioned at its start.
    pub fn new(mut inner: R, mut patches: Vec<Patch>) -> std::io::Result<Self> {
        inner.seek(SeekFrom::Start(0))?;
        patches.sort_by_key(|p| p.at);
        Ok(PatchedReader {
            inner,
            pos: 0,
            patches,
        })
    }
}

impl<R: Read> Read for PatchedReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        let (start, end) = (self.pos, self.pos + n as u64);
        for p in &self.patches {
            let (ps, pe) = (p.at, p.at + p.bytes.len() as u64);
            if pe <= start || ps >= end {
                continue;
            }
            let from = ps.max(start);
            let to = pe.min(end);
            let dst = &mut buf[(from - start) as usize..(to - start) as usize];
            dst.copy_from_slice(&p.bytes[(from - ps) as usize..(to - ps) as usize]);
        }
        self.pos = end;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patches_apply_across_read_boundaries() {
        let data: Vec<u8> = (0..20).collect();
        let patches = vec![
            Patch {
                at: 3,
                bytes: vec![100, 101, 102],
            },
            Patch {
                at: 18,
                bytes: vec![200, 201],
            },
        ];
        let mut r = PatchedReader::new(std::io::Cursor::new(data), patches).unwrap();
        let mut out = Vec::new();
        let mut chunk = [0u8; 4];
        loop {
            let n = r.read(&mut chunk).unwrap();
            if n == 0 {
                break;
            }
            out.extend_from_slice(&chunk[..n]);
        }
        let mut want: Vec<u8> = (0..20).collect();
        want[3..6].copy_from_slice(&[100, 101, 102]);
        want[18..20].copy_from_slice(&[200, 201]);
        assert_eq!(out, want);
    }
}
