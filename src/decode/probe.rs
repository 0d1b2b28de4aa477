//! Tells DICOM files from everything else by their first bytes, before any parsing: the
//! `DICM` magic after the 128-byte preamble, or a bare data set (no preamble, no file meta)
//! that starts with a plausible group-0008 element.

use std::io::Read;
use std::path::Path;

use dicom_dictionary_std::uids;

/// What the first bytes of a file say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// Preamble + `DICM` + file meta group (or `DICM` without preamble).
    FileMeta,
    /// A data set without preamble and file meta, in the given transfer syntax.
    BareDataset { transfer_syntax: &'static str },
    /// Not DICOM; the reason says why.
    NotDicom(String),
}

/// Value representations, to tell explicit from implicit VR in a bare data set.
const VRS: [&[u8; 2]; 34] = [
    b"AE", b"AS", b"AT", b"CS", b"DA", b"DS", b"DT", b"FL", b"FD", b"IS", b"LO", b"LT", b"OB",
    b"OD", b"OF", b"OL", b"OV", b"OW", b"PN", b"SH", b"SL", b"SQ", b"SS", b"ST", b"SV", b"TM",
    b"UC", b"UI", b"UL", b"UN", b"UR", b"US", b"UT", b"UV",
];

/// Classifies bytes read from the start of a file.
pub fn probe_bytes(head: &[u8]) -> Probe {
    if head.is_empty() {
        return Probe::NotDicom("empty file".into());
    }
    if head.len() >= 132 && &head[128..132] == b"DICM" {
        return Probe::FileMeta;
    }
    if head.len() >= 4 && &head[0..4] == b"DICM" {
        return Probe::FileMeta;
    }
    if head.len() >= 8 {
        let group = u16::from_le_bytes([head[0], head[1]]);
        let element = u16::from_le_bytes([head[2], head[3]]);
        // Bare data sets start with the lowest tag present: almost always group 0008
        // (SpecificCharacterSet, ImageType, SOPClassUID, ...), sometimes 0002 or 0010..0028.
        let plausible_group = matches!(group, 0x0002 | 0x0008 | 0x0010 | 0x0018 | 0x0020 | 0x0028);
        if plausible_group && element < 0x1000 {
            let vr = [head[4], head[5]];
            let explicit = VRS.iter().any(|v| **v == vr);
            let transfer_syntax = if explicit {
                uids::EXPLICIT_VR_LITTLE_ENDIAN
            } else {
                uids::IMPLICIT_VR_LITTLE_ENDIAN
            };
            return Probe::BareDataset { transfer_syntax };
        }
    }
    if head.len() < 132 {
        Probe::NotDicom(format!(
            "not DICOM: {} bytes, too short for a preamble and no data set header",
            head.len()
        ))
    } else {
        Probe::NotDicom("not DICOM: no DICM magic at offset 128 and no bare data set header".into())
    }
}

/// Words for a file type that is neither a regular file nor a folder.
pub fn special_kind(ft: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_dir() {
        "a folder"
    } else if ft.is_fifo() {
        "a FIFO (named pipe)"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_symlink() {
        "a symbolic link"
    } else {
        "not a regular file"
    }
}

/// Opens an input file for reading without ever blocking: `O_NONBLOCK` (opening a FIFO with
/// no writer would otherwise wait forever, and a device may too), then a check of what was
/// opened, so that a path swapped for a special file after the scan looked at it is refused
/// too. Regular files ignore `O_NONBLOCK`.
pub fn open_input(path: &Path) -> std::io::Result<std::fs::File> {
    open_input_len(path).map(|(file, _)| file)
}

/// [`open_input`], also returning the file's size (from the same `fstat`).
pub fn open_input_len(path: &Path) -> std::io::Result<(std::fs::File, u64)> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    let meta = file.metadata()?;
    let ft = meta.file_type();
    if !ft.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{}, not a regular file", special_kind(&ft)),
        ));
    }
    Ok((file, meta.len()))
}

/// A `Read + Seek` view of an open file made of positioned reads, so that several readers of
/// one file (the guard's walk, dicom-rs's parse, the native pixel read) never move each
/// other's offset.
pub struct ReadAt<'f> {
    file: &'f std::fs::File,
    len: u64,
    pos: u64,
}

impl<'f> ReadAt<'f> {
    /// Reads `file` (of `len` bytes) from offset `pos` on.
    pub fn new(file: &'f std::fs::File, len: u64, pos: u64) -> Self {
        ReadAt { file, len, pos }
    }
}

impl Read for ReadAt<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use std::os::unix::fs::FileExt;
        let n = self.file.read_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl std::io::Seek for ReadAt<'_> {
    fn seek(&mut self, to: std::io::SeekFrom) -> std::io::Result<u64> {
        let (base, delta) = match to {
            std::io::SeekFrom::Start(n) => (n, 0),
            std::io::SeekFrom::Current(d) => (self.pos, d),
            std::io::SeekFrom::End(d) => (self.len, d),
        };
        self.pos = base.checked_add_signed(delta).ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "seek before the start")
        })?;
        Ok(self.pos)
    }
}

/// Reads the first bytes of `path` and classifies them.
pub fn probe(path: &Path) -> std::io::Result<Probe> {
    let mut file = open_input(path)?;
    let mut head = [0u8; 132];
    let mut n = 0;
    while n < head.len() {
        match file.read(&mut head[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(probe_bytes(&head[..n]))
}

/// Bytes searched for a Pixel Data element by [`damaged_evidence`].
const EVIDENCE_WINDOW: usize = 1 << 20;

/// For a file the probe did not recognise: why it is nevertheless a damaged DICOM image (a
/// failure, not "not an image"), or `None`. The evidence is a Pixel Data element header
/// within the first MiB whose value fits the file: explicit VR (OB/OW, little or big endian)
/// with an undefined length or one that fits, or implicit VR with a value that ends exactly
/// at the end of the file.
pub fn damaged_evidence(path: &Path) -> Option<String> {
    let mut file = std::fs::File::open(path).ok()?;
    let size = file.metadata().ok()?.len();
    let mut head = Vec::new();
    (&mut file)
        .take(EVIDENCE_WINDOW as u64)
        .read_to_end(&mut head)
        .ok()?;
    find_pixel_data(&head, size).map(|at| {
        format!(
            "damaged DICOM file: no DICM magic and no readable data set at the start, yet a \
             Pixel Data element at byte {at}"
        )
    })
}

/// Offset of the first plausible Pixel Data element header in `head` (the start of a file of
/// `size` bytes).
fn find_pixel_data(head: &[u8], size: u64) -> Option<usize> {
    const LE: [u8; 4] = [0xe0, 0x7f, 0x10, 0x00];
    const BE: [u8; 4] = [0x7f, 0xe0, 0x00, 0x10];
    let fits = |value_at: usize, len: u64, slack: u64| {
        len == 0xffff_ffff || value_at as u64 + len <= size + slack
    };
    (0..head.len().saturating_sub(12)).find(|&at| {
        let tag = &head[at..at + 4];
        if tag != LE && tag != BE {
            return false;
        }
        let be = tag == BE;
        let word = |i: usize| {
            let b = [head[i], head[i + 1], head[i + 2], head[i + 3]];
            if be {
                u32::from_be_bytes(b)
            } else {
                u32::from_le_bytes(b)
            }
        };
        let vr = &head[at + 4..at + 6];
        if (vr == b"OB" || vr == b"OW") && head[at + 6..at + 8] == [0, 0] {
            return fits(at + 12, word(at + 8) as u64, 0);
        }
        // Implicit VR (little endian only): the value must end the file (or its pad byte).
        let len = word(at + 4) as u64;
        !be && len > 0 && (at as u64 + 8 + len == size || len == 0xffff_ffff)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_preamble_and_magic() {
        let mut b = vec![0u8; 132];
        b[128..132].copy_from_slice(b"DICM");
        assert_eq!(probe_bytes(&b), Probe::FileMeta);
    }

    #[test]
    fn recognises_bare_explicit_and_implicit_data_sets() {
        let explicit = [0x08, 0x00, 0x05, 0x00, b'C', b'S', 0x0a, 0x00];
        assert_eq!(
            probe_bytes(&explicit),
            Probe::BareDataset {
                transfer_syntax: uids::EXPLICIT_VR_LITTLE_ENDIAN
            }
        );
        let implicit = [0x08, 0x00, 0x16, 0x00, 0x1a, 0x00, 0x00, 0x00];
        assert_eq!(
            probe_bytes(&implicit),
            Probe::BareDataset {
                transfer_syntax: uids::IMPLICIT_VR_LITTLE_ENDIAN
            }
        );
    }

    #[test]
    fn finds_pixel_data_in_damaged_files_only() {
        // Explicit VR LE: header, 4 bytes of value, end of file.
        let mut f = vec![0u8; 40];
        f.extend([
            0xe0, 0x7f, 0x10, 0x00, b'O', b'W', 0, 0, 4, 0, 0, 0, 1, 2, 3, 4,
        ]);
        assert_eq!(find_pixel_data(&f, f.len() as u64), Some(40));
        // A length past the end is no evidence.
        assert_eq!(find_pixel_data(&f, f.len() as u64 - 1), None);
        // Implicit VR LE: the value must end the file.
        let mut g = vec![7u8; 21];
        g.extend([0xe0, 0x7f, 0x10, 0x00, 2, 0, 0, 0, 9, 9]);
        g.extend([0u8; 8]); // find_pixel_data needs 12 bytes after a header start
        assert_eq!(find_pixel_data(&g, 31), Some(21));
        assert_eq!(find_pixel_data(&g, 40), None);
        // Big endian encapsulated.
        let mut h = vec![1u8; 9];
        h.extend([
            0x7f, 0xe0, 0x00, 0x10, b'O', b'B', 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0,
        ]);
        assert_eq!(find_pixel_data(&h, 1000), Some(9));
        assert_eq!(
            find_pixel_data(b"PNG and other things, no pixel data", 40),
            None
        );
    }

    #[test]
    fn rejects_other_files_with_a_reason() {
        assert!(matches!(probe_bytes(b""), Probe::NotDicom(r) if r.contains("empty")));
        assert!(matches!(
            probe_bytes(b"hello world, not dicom"),
            Probe::NotDicom(_)
        ));
        let png = b"\x89PNG\r\n\x1a\n".repeat(20);
        assert!(matches!(probe_bytes(&png), Probe::NotDicom(r) if r.contains("DICM")));
    }
}
