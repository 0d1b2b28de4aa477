//! Checks run before third-party code (dicom-rs and its codecs) sees hostile bytes, for the
//! cases where that code would abort the process or allocate far more than the file holds:
//!
//! * [`check_structure`]: every defined length must fit in the bytes left in the file
//!   (dicom-rs allocates and zero-fills a value's declared length before reading it, so a
//!   9 KB file claiming a 4 GB element costs 4 GB), and sequences may nest at most
//!   [`MAX_SEQUENCE_DEPTH`] deep (dicom-rs builds items recursively: a few thousand levels
//!   overflow a loader thread's stack, which aborts the process).
//! * [`check_codestreams`]: a JPEG / JPEG-LS / JPEG 2000 frame may not declare larger
//!   dimensions, more components or deeper samples than the data set (decoders size their
//!   buffers from the codestream: 64x64 in the data set and 65535x65535 in the SOF is an
//!   8 GiB allocation, an abort).
//!
//! Both are lenient about everything else: when the bytes stop making sense the check stops
//! and lets dicom-rs report the error in its own words.

use std::fs::File;
use std::io::{BufReader, Read};
use std::os::unix::fs::FileExt;
use std::path::Path;

use dicom_dictionary_std::uids;
use dicom_encoding::transfer_syntax::DataRWAdapter;

use super::patch::Patch;
use super::probe::Probe;

/// Deepest sequence nesting accepted (real files nest a handful of levels; dicom-rs needs
/// about 1 KiB of stack per level in release builds, more in debug builds).
pub const MAX_SEQUENCE_DEPTH: usize = 64;

const UNDEFINED: u32 = 0xffff_ffff;

/// Where the checked bytes come from.
enum Bytes<'f> {
    /// A file, read with positioned reads (values are skipped without reading them).
    File(&'f File),
    /// A forward-only stream (an inflated data set), `at` bytes consumed.
    Stream { reader: Box<dyn Read + 'f>, at: u64 },
    /// Bytes held in memory (a value [`super::un`] parses again), read like a file.
    Mem(Vec<u8>),
}

impl Bytes<'_> {
    /// Appends up to `n` bytes found at offset `at` (never behind a stream's position) to
    /// `out`; returns how many. Fewer than `n` only at the end of a stream.
    fn read_at(&mut self, at: u64, n: usize, out: &mut Vec<u8>) -> std::io::Result<usize> {
        let old = out.len();
        match self {
            Bytes::File(f) => {
                out.resize(old + n, 0);
                f.read_exact_at(&mut out[old..], at)?;
                Ok(n)
            }
            Bytes::Mem(m) => {
                let from = usize::try_from(at).unwrap_or(usize::MAX);
                let src = m
                    .get(from..from.saturating_add(n))
                    .ok_or(std::io::ErrorKind::UnexpectedEof)?;
                out.extend_from_slice(src);
                Ok(n)
            }
            Bytes::Stream { reader, at: pos } => {
                let skip = at.saturating_sub(*pos);
                let skipped = discard(reader, skip);
                *pos += skipped;
                if skipped < skip {
                    return Ok(0);
                }
                // A corrupt deflate stream is an error of its own, not the end of the data
                // set: the bytes the inflater decoded in the call that fails are lost, and
                // dicom-rs, reading in other chunk sizes, gets further than this walk would,
                // to lengths it then allocates that the walk never saw (fuzz/README.md, the
                // finding of run 13: a 12 KB file that took 800 MB).
                if let Err(e) = reader.take(n as u64).read_to_end(out) {
                    return Err(std::io::Error::new(
                        e.kind(),
                        format!("the deflated data set is corrupt: {e}"),
                    ));
                }
                let got = out.len() - old;
                *pos += got as u64;
                Ok(got)
            }
        }
    }
}

/// Reads and drops up to `n` bytes of `reader`; returns how many there were (a read error
/// counts as the end).
fn discard(reader: &mut dyn Read, n: u64) -> u64 {
    let mut chunk = [0u8; 16 << 10];
    let mut done = 0u64;
    while done < n {
        let want = (n - done).min(chunk.len() as u64) as usize;
        match reader.read(&mut chunk[..want]) {
            Ok(0) => break,
            Ok(k) => done += k as u64,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    done
}

/// Buffered reads over the bytes of a data set: element headers come from one window,
/// values are skipped.
struct Src<'f> {
    bytes: Bytes<'f>,
    /// The size of the data set; for a stream, `u64::MAX` until its end is met.
    size: u64,
    pos: u64,
    buf: Vec<u8>,
    buf_at: u64,
    /// Bytes the next refill reads: [`WINDOW_FIRST`], doubling up to [`WINDOW_MAX`].
    window: usize,
}

/// The first read of a data set: a CT slice's header is 1–2 KB, and what the window holds
/// beyond the header is pixel data read twice (a 64 KiB first window cost a 512² slice 12 %
/// more bytes read, plus zeroing the buffer).
const WINDOW_FIRST: usize = 4 << 10;
/// The largest refill, for headers with large values (overlays, private sequences).
const WINDOW_MAX: usize = 64 << 10;

impl<'f> Src<'f> {
    fn new(bytes: Bytes<'f>, size: u64) -> Src<'f> {
        Src {
            bytes,
            size,
            pos: 0,
            buf: Vec::new(),
            buf_at: 0,
            window: WINDOW_FIRST,
        }
    }

    fn is_stream(&self) -> bool {
        matches!(self.bytes, Bytes::Stream { .. })
    }

    fn remaining(&self) -> u64 {
        self.size.saturating_sub(self.pos)
    }

    /// The `n` bytes at the current position, or `None` past the end.
    fn peek(&mut self, n: usize) -> Result<Option<&[u8]>, String> {
        if self.remaining() < n as u64 {
            return Ok(None);
        }
        let buf_end = self.buf_at + self.buf.len() as u64;
        if self.pos < self.buf_at || self.pos + n as u64 > buf_end {
            if self.pos >= self.buf_at && self.pos <= buf_end {
                // Keep what is buffered from `pos` on and read what follows.
                self.buf.drain(..(self.pos - self.buf_at) as usize);
            } else {
                self.buf.clear();
            }
            self.buf_at = self.pos;
            let want = (self.remaining().min(self.window as u64) as usize).max(n) - self.buf.len();
            let from = self.buf_at + self.buf.len() as u64;
            // The next refill reads twice as much: most headers fit the first window.
            self.window = (self.window * 2).min(WINDOW_MAX);
            let got = self
                .bytes
                .read_at(from, want, &mut self.buf)
                .map_err(|e| format!("cannot read: {e}"))?;
            if got < want {
                // The end of a stream: its size is known now.
                self.size = self.buf_at + self.buf.len() as u64;
                if self.remaining() < n as u64 {
                    return Ok(None);
                }
            }
        }
        let at = (self.pos - self.buf_at) as usize;
        Ok(Some(&self.buf[at..at + n]))
    }

    fn take<const N: usize>(&mut self) -> Result<Option<[u8; N]>, String> {
        let Some(b) = self.peek(N)? else {
            return Ok(None);
        };
        let mut out = [0u8; N];
        out.copy_from_slice(b);
        self.pos += N as u64;
        Ok(Some(out))
    }

    /// Makes sure the data set holds `len` bytes from the current position on: `Err` with
    /// the number of bytes it does hold. A stream is read up to there (discarding), so the
    /// value must be skipped next, not parsed.
    fn holds(&mut self, len: u32) -> Result<(), u64> {
        let target = self.pos + len as u64;
        let Bytes::Stream { reader, at } = &mut self.bytes else {
            return if target <= self.size {
                Ok(())
            } else {
                Err(self.remaining())
            };
        };
        let buf_end = self.buf_at + self.buf.len() as u64;
        if target <= buf_end {
            return Ok(());
        }
        let skip = target - buf_end;
        let skipped = discard(reader, skip);
        *at += skipped;
        self.buf.clear();
        self.buf_at = *at;
        if skipped < skip {
            self.size = *at;
            return Err(self.remaining());
        }
        Ok(())
    }
}

fn u16_of(b: [u8; 2], be: bool) -> u16 {
    if be {
        u16::from_be_bytes(b)
    } else {
        u16::from_le_bytes(b)
    }
}

fn u32_of(b: [u8; 4], be: bool) -> u32 {
    if be {
        u32::from_be_bytes(b)
    } else {
        u32::from_le_bytes(b)
    }
}

/// VRs with a 32-bit length in explicit VR encodings.
#[cfg(test)]
fn long_vr(vr: &[u8; 2]) -> bool {
    matches!(
        vr,
        b"OB"
            | b"OD"
            | b"OF"
            | b"OL"
            | b"OV"
            | b"OW"
            | b"SQ"
            | b"UC"
            | b"UN"
            | b"UR"
            | b"UT"
            | b"SV"
            | b"UV"
    )
}

fn short_vr(vr: &[u8; 2]) -> bool {
    matches!(
        vr,
        b"AE"
            | b"AS"
            | b"AT"
            | b"CS"
            | b"DA"
            | b"DS"
            | b"DT"
            | b"FL"
            | b"FD"
            | b"IS"
            | b"LO"
            | b"LT"
            | b"PN"
            | b"SH"
            | b"SL"
            | b"SS"
            | b"ST"
            | b"TM"
            | b"UI"
            | b"UL"
            | b"US"
    )
}

/// What the walk saw on its way (as far as it got).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Walk {
    /// A top-level Pixel Data, Float Pixel Data or Double Float Pixel Data element: the file
    /// is an image, whatever else is wrong with it.
    pub pixel_data: bool,
    /// Same-size patches that let dicom-rs read what DCMTK reads (see [`super::patch`]).
    pub patches: Vec<Patch>,
    /// What the patches tolerate, for the file's warnings.
    pub warnings: Vec<String>,
    /// An element with VR UN in explicit VR: [`super::un`] has work to do.
    pub saw_un: bool,
}

/// Checks the file meta group and the data set of a file [`probe`](super::probe) found to be
/// DICOM. Returns why the file must not be parsed, or what the walk saw (also when it gave
/// up early).
pub fn check_structure(path: &Path, kind: &Probe, max_pixel_bytes: u64) -> Result<Walk, String> {
    let (file, len) =
        super::probe::open_input_len(path).map_err(|e| format!("cannot open: {e}"))?;
    check_opened(&file, len, kind, max_pixel_bytes)
}

/// [`check_structure`] on a file of `len` bytes that the caller opened (with
/// [`super::probe::open_input_len`]) and goes on reading: for files with file meta, the
/// header parse and native pixels then come from the same open file (one open per input
/// instead of three, and the inode that was checked). Compressed, deflated and bare data sets
/// and the full-parse fallback still open the path again, as before. Positioned reads only:
/// the file's offset stays where it was.
pub fn check_opened(
    file: &File,
    len: u64,
    kind: &Probe,
    max_pixel_bytes: u64,
) -> Result<Walk, String> {
    let mut walk = Walk::default();
    check_file(file, len, kind, max_pixel_bytes, &mut walk)?;
    Ok(walk)
}

fn check_file(
    file: &File,
    size: u64,
    kind: &Probe,
    max_pixel_bytes: u64,
    walk: &mut Walk,
) -> Result<(), String> {
    let mut src = Src::new(Bytes::File(file), size);
    let ts = match kind {
        Probe::NotDicom(_) => return Ok(()),
        Probe::BareDataset { transfer_syntax } => transfer_syntax.to_string(),
        Probe::FileMeta => {
            let start = match src.peek(132)? {
                Some(h) if &h[128..132] == b"DICM" => 132,
                _ => 4, // `DICM` without a preamble (the probe saw it at offset 0)
            };
            src.pos = start;
            match read_meta(&mut src, walk)? {
                Some(ts) => ts,
                None => return Ok(()),
            }
        }
    };
    let ts = trim_uid(&ts);
    if let Some(adapter) = deflate_adapter(ts) {
        return check_deflated(file, size, src.pos, adapter, max_pixel_bytes, walk);
    }
    let (explicit, be) = match ts {
        uids::IMPLICIT_VR_LITTLE_ENDIAN => (false, false),
        super::EXPLICIT_VR_BIG_ENDIAN => (true, true),
        _ => (true, false),
    };
    check_dataset(&mut src, explicit, be, None, walk)
}

/// Checks a data set held in memory, implicit VR little endian (what [`super::un`] hands to
/// dicom-rs): every length must fit, nesting must stay shallow.
pub(crate) fn check_implicit_bytes(data: &[u8]) -> Result<(), String> {
    let mut src = Src::new(Bytes::Mem(data.to_vec()), data.len() as u64);
    check_dataset(&mut src, false, false, None, &mut Walk::default())
}

/// A transfer syntax UID as dicom-rs reads it: trailing whitespace of any kind and NULs go
/// (`FileMetaTable::transfer_syntax`). Trimming less, a UID padded with a newline would be
/// checked as explicit VR while dicom-rs parses it as the implicit VR syntax it names (a fuzz
/// finding: a 4 GiB value length the check then never saw).
pub(crate) fn trim_uid(ts: &str) -> &str {
    ts.trim_end_matches(|c: char| c.is_whitespace() || c == '\0')
}

/// The adapter dicom-rs inflates a deflated data set with (`None`: not deflated).
fn deflate_adapter(ts: &str) -> Option<&'static dyn DataRWAdapter> {
    use dicom_encoding::transfer_syntax::{Codec, TransferSyntaxIndex};
    let entry = dicom_transfer_syntax_registry::TransferSyntaxRegistry.get(ts)?;
    match entry.codec() {
        Codec::Dataset(Some(adapter)) => Some(adapter.as_ref()),
        _ => None,
    }
}

/// Elements other than Pixel Data that a deflated data set may inflate to, in all: real
/// headers are kilobytes; dicom-rs holds every inflated value in memory.
pub const DEFLATED_HEADER_BUDGET: u64 = 64 << 20;

/// Checks a deflated data set (explicit VR little endian once inflated, starting at byte
/// `start` of the file) in one pass over the inflating stream, which never holds more than a
/// window of it. dicom-rs inflates the whole data set into memory and allocates lengths read
/// from inflated bytes as it does from plain ones, and a few megabytes of deflated zeros
/// inflate to gigabytes, so the pass also stops where the data set stops being justified by
/// its header: Pixel Data larger than Rows x Columns x Samples x Bits x Frames (plus the
/// padding byte) or than `max_pixel_bytes`, or more than [`DEFLATED_HEADER_BUDGET`] of
/// other elements. It stops before inflating what it refuses.
fn check_deflated(
    file: &File,
    size: u64,
    start: u64,
    adapter: &dyn DataRWAdapter,
    max_pixel_bytes: u64,
    walk: &mut Walk,
) -> Result<(), String> {
    let f = super::probe::ReadAt::new(file, size, start);
    let reader = adapter.adapt_reader(Box::new(BufReader::new(f)));
    let mut src = Src::new(Bytes::Stream { reader, at: 0 }, u64::MAX);
    let budget = Budget {
        max_pixel_bytes,
        header_left: DEFLATED_HEADER_BUDGET,
    };
    check_dataset(&mut src, true, false, Some(budget), walk)
}

/// What a deflated data set may still inflate to.
#[derive(Debug, Clone, Copy)]
struct Budget {
    max_pixel_bytes: u64,
    /// Bytes of elements other than Pixel Data still allowed.
    header_left: u64,
}

/// The top-level attributes that justify the size of Pixel Data.
#[derive(Debug, Default, Clone, Copy)]
struct ImageAttrs {
    rows: Option<u64>,
    cols: Option<u64>,
    samples: Option<u64>,
    bits: Option<u64>,
    frames: Option<u64>,
}

impl ImageAttrs {
    /// Records `(group,element)` when it is one of the attributes (a short value at the top
    /// level).
    fn note(&mut self, group: u16, element: u16, value: &[u8]) {
        let us = || (value.len() >= 2).then(|| u16::from_le_bytes([value[0], value[1]]) as u64);
        match (group, element) {
            (0x0028, 0x0002) => self.samples = us(),
            (0x0028, 0x0010) => self.rows = us(),
            (0x0028, 0x0011) => self.cols = us(),
            (0x0028, 0x0100) => self.bits = us(),
            (0x0028, 0x0008) => {
                self.frames = std::str::from_utf8(value)
                    .ok()
                    .and_then(|t| t.trim_matches(|c: char| c == ' ' || c == '\0').parse().ok())
            }
            _ => {}
        }
    }

    /// Bytes of native Pixel Data the attributes justify (rounded up to even), or `None`
    /// when Rows, Columns or Bits Allocated is missing.
    fn pixel_bytes(&self) -> Option<u64> {
        let samples = self.samples.unwrap_or(1).max(1);
        let frames = self.frames.unwrap_or(1).max(1);
        let bits = self
            .rows?
            .checked_mul(self.cols?)?
            .checked_mul(samples)?
            .checked_mul(frames)?
            .checked_mul(self.bits?)?;
        let bytes = bits.div_ceil(8);
        Some(bytes + bytes % 2)
    }
}

/// Walks the meta group as dicom-rs reads it (explicit VR little endian, unknown VRs with the
/// long length form, elements read until `FileMetaInformationGroupLength` bytes are
/// consumed; the data set starts where the last one ends). Returns the Transfer Syntax UID,
/// or `None` when dicom-rs will reject the group anyway. Values longer than dicom-rs accepts
/// (DCMTK reads them) are patched away with a warning.
fn read_meta(src: &mut Src, walk: &mut Walk) -> Result<Option<String>, String> {
    let Some((group, element, len)) = meta_header(src)? else {
        return Ok(None);
    };
    if (group, element, len) != (0x0002, 0x0000, 4) {
        return Ok(None);
    }
    let Some(v) = src.take::<4>()? else {
        return Ok(None);
    };
    let group_length = u32::from_le_bytes(v) as u64;
    let mut ts = None;
    let mut read = 0u64;
    while read < group_length {
        let at = src.pos;
        let Some((group, element, len)) = meta_header(src)? else {
            return Ok(None);
        };
        if len == UNDEFINED {
            return Ok(None);
        }
        fits(src, group, element, len)?;
        if let Some((name, vr, max)) = meta_limit(group, element).filter(|l| len > l.2) {
            // dicom-rs refuses the file; renamed to an unknown group-2 element, it is skipped.
            walk.patches.push(Patch {
                at: at + 2,
                bytes: vec![0xff, 0xff],
            });
            walk.warnings.push(format!(
                "file meta ({group:04X},{element:04X}) {name} is {len} bytes, longer than {vr} \
                 allows ({max}): ignored"
            ));
        }
        if (group, element) == (0x0002, 0x0010) {
            ts = Some(match src.peek(len.min(4096) as usize)? {
                Some(v) if len <= 4096 => String::from_utf8_lossy(v).into_owned(),
                _ => String::new(), // absurdly long: checked as explicit VR little endian
            });
        }
        src.pos += len as u64;
        read += src.pos - at;
    }
    Ok(ts)
}

/// The meta elements whose length dicom-rs limits: (name, VR, longest accepted).
fn meta_limit(group: u16, element: u16) -> Option<(&'static str, &'static str, u32)> {
    Some(match (group, element) {
        (0x0002, 0x0013) => ("Implementation Version Name", "SH", 16),
        (0x0002, 0x0016) => ("Source Application Entity Title", "AE", 16),
        (0x0002, 0x0017) => ("Sending Application Entity Title", "AE", 16),
        (0x0002, 0x0018) => ("Receiving Application Entity Title", "AE", 16),
        (0x0002, 0x0100) => ("Private Information Creator UID", "UI", 64),
        _ => return None,
    })
}

/// One element header of the meta group: (group, element, length).
fn meta_header(src: &mut Src) -> Result<Option<(u16, u16, u32)>, String> {
    let Some(t) = src.take::<4>()? else {
        return Ok(None);
    };
    let (group, element) = (
        u16::from_le_bytes([t[0], t[1]]),
        u16::from_le_bytes([t[2], t[3]]),
    );
    if group == 0xfffe {
        let Some(l) = src.take::<4>()? else {
            return Ok(None);
        };
        return Ok(Some((group, element, u32::from_le_bytes(l))));
    }
    let Some(vr) = src.take::<2>()? else {
        return Ok(None);
    };
    let len = if short_vr(&vr) {
        let Some(l) = src.take::<2>()? else {
            return Ok(None);
        };
        u16::from_le_bytes(l) as u32
    } else {
        let Some(l) = src.take::<6>()? else {
            return Ok(None);
        };
        u32::from_le_bytes([l[2], l[3], l[4], l[5]])
    };
    Ok(Some((group, element, len)))
}

/// Checks that the data set holds the `len` bytes an element claims (reading a stream up to
/// there: the value is skipped next, not parsed).
fn fits(src: &mut Src, group: u16, element: u16, len: u32) -> Result<(), String> {
    let at = src.pos;
    if let Err(left) = src.holds(len) {
        return Err(format!(
            "element ({group:04X},{element:04X}) at byte {at} claims {len} bytes, but only \
             {left} remain in the {}",
            if src.is_stream() {
                "inflated data set"
            } else {
                "file"
            }
        ));
    }
    Ok(())
}

/// An open sequence or item, as dicom-rs's `DataSetReader` tracks it.
#[derive(Clone, Copy)]
struct Open {
    sequence: bool,
    pixel_data: bool,
    /// The defined length (`UNDEFINED` when undefined).
    len: u32,
    /// Where a defined-length sequence or item ends, in dicom-rs's byte count.
    end: Option<u64>,
}

/// The VR the implicit VR reader of dicom-rs gives `(group,element)`: the standard
/// dictionary's, OW for Pixel Data and overlays, UN when unknown.
fn implicit_vr(group: u16, element: u16) -> dicom_core::VR {
    use dicom_core::dictionary::{DataDictionary, DataDictionaryEntry};
    if (group, element) == (0x7fe0, 0x0010) || (group >> 8 == 0x60 && element == 0x3000) {
        return dicom_core::VR::OW;
    }
    dicom_dictionary_std::StandardDataDictionary
        .by_tag(dicom_core::Tag(group, element))
        .map_or(dicom_core::VR::UN, |e| e.vr().relaxed())
}

/// dicom-rs reads binary values in whole units: of a 3-byte US it reads 2 bytes, yet counts
/// 3 as read. The stream and its byte count then disagree, and the walk must follow both.
fn value_unit(vr: dicom_core::VR) -> u32 {
    use dicom_core::VR::*;
    match vr {
        US | OW | SS => 2,
        AT | UL | OL | SL | FL | OF => 4,
        FD | OD | SV | OV | UV => 8,
        _ => 1,
    }
}

/// Walks the data set with the state machine of dicom-rs's `DataSetReader` (which decides
/// where every value lies and how much is allocated for it), without reading values. Stops
/// with `Ok` where dicom-rs would stop with an error of its own.
///
/// With a `budget` (a deflated data set, whose values dicom-rs inflates into memory), values
/// are also held to it: see [`check_deflated`].
fn check_dataset(
    src: &mut Src,
    explicit: bool,
    be: bool,
    mut budget: Option<Budget>,
    walk: &mut Walk,
) -> Result<(), String> {
    let mut attrs = ImageAttrs::default();
    let mut stack: Vec<Open> = Vec::new();
    let mut in_sequence = false;
    let mut pending = false; // dicom-rs's `delimiter_check_pending`
    let mut pixel_header = false; // an encapsulated Pixel Data header was just read
    let mut offset_table_next = false;
    // dicom-rs's byte count minus the bytes really consumed (see `value_unit`).
    let mut skew = 0u64;
    let tag_of = |t: [u8; 4]| (u16_of([t[0], t[1]], be), u16_of([t[2], t[3]], be));
    let depth = |stack: &Vec<Open>| stack.iter().filter(|o| o.sequence).count();
    loop {
        let counted = src.pos + skew;
        if pending {
            match stack.last() {
                Some(top) if top.end == Some(counted) => {
                    in_sequence = !top.sequence;
                    stack.pop();
                    continue;
                }
                Some(top) if top.end.is_some_and(|e| e < counted) => return Ok(()),
                _ => pending = false,
            }
        }
        if in_sequence || pixel_header {
            // An item header is expected.
            let first_fragment = pixel_header;
            if pixel_header {
                stack.push(Open {
                    sequence: true,
                    pixel_data: true,
                    len: UNDEFINED,
                    end: None,
                });
                pixel_header = false;
            }
            let (Some(t), Some(l)) = (src.take::<4>()?, src.take::<4>()?) else {
                return Ok(());
            };
            let len = u32_of(l, be);
            match tag_of(t) {
                (0xfffe, 0xe000) => {
                    let Some(parent) = stack.last().copied() else {
                        return Ok(());
                    };
                    let end = if len == UNDEFINED {
                        if parent.pixel_data {
                            return Ok(()); // dicom-rs: undefined item length
                        }
                        None
                    } else {
                        if parent.pixel_data {
                            // A fragment (or the offset table, read as whole 32-bit words) is
                            // read whole: it must be there.
                            spend(&mut budget, src.pos, len, "an encapsulated fragment")?;
                            let whole = if src.is_stream() && first_fragment {
                                len & !3
                            } else {
                                len
                            };
                            fits(src, 0xfffe, 0xe000, whole)?;
                        } else if !src.is_stream() {
                            // An item of a sequence is parsed, not read whole: in a stream its
                            // elements are checked one by one instead.
                            fits(src, 0xfffe, 0xe000, len)?;
                        }
                        Some(src.pos + skew + len as u64)
                    };
                    in_sequence = false;
                    stack.push(Open {
                        sequence: false,
                        pixel_data: parent.pixel_data,
                        len,
                        end,
                    });
                    pending = len == 0;
                    if first_fragment && len != 0 {
                        offset_table_next = true;
                    }
                }
                (0xfffe, 0xe00d) => {
                    stack.pop();
                    in_sequence = true;
                    pending = true;
                }
                (0xfffe, 0xe0dd) => {
                    stack.pop();
                    in_sequence = false;
                    pending = true;
                }
                _ => return Ok(()),
            }
            continue;
        }
        if let Some(Open {
            sequence: false,
            pixel_data: true,
            len,
            ..
        }) = stack.last().copied()
        {
            // The offset table (read as whole 32-bit words) or a fragment (read whole).
            if offset_table_next {
                offset_table_next = false;
                src.pos += (len & !3) as u64;
            } else {
                src.pos += len as u64;
            }
            pending = true;
            continue;
        }
        // A data element header.
        let Some(t) = src.take::<4>()? else {
            return Ok(()); // end of the data set
        };
        let (group, element) = tag_of(t);
        if stack.is_empty() && group == 0x7fe0 && matches!(element, 0x0008 | 0x0009 | 0x0010) {
            walk.pixel_data = true;
        }
        let (vr, len) = if group == 0xfffe || !explicit {
            let Some(l) = src.take::<4>()? else {
                return Ok(());
            };
            let vr = if group == 0xfffe {
                dicom_core::VR::UN
            } else {
                implicit_vr(group, element)
            };
            (vr, u32_of(l, be))
        } else {
            let Some(vr) = src.take::<2>()? else {
                return Ok(());
            };
            let len = if short_vr(&vr) {
                let Some(l) = src.take::<2>()? else {
                    return Ok(());
                };
                u16_of(l, be) as u32
            } else {
                // Long form; an unknown VR is read as UN.
                let Some(l) = src.take::<6>()? else {
                    return Ok(());
                };
                u32_of([l[2], l[3], l[4], l[5]], be)
            };
            (
                dicom_core::VR::from_binary(vr).unwrap_or(dicom_core::VR::UN),
                len,
            )
        };
        let sq = vr == dicom_core::VR::SQ;
        if (group, element) == (0xfffe, 0xe00d) && !sq {
            // An item delimiter outside of a sequence is ignored; inside, it closes the
            // innermost open sequence or item.
            if stack.pop().is_some() {
                in_sequence = true;
                pending = true;
            }
            continue;
        }
        if !sq && (group, element) == (0x7fe0, 0x0010) && len == UNDEFINED {
            pixel_header = true;
            continue;
        }
        walk.saw_un |= explicit && vr == dicom_core::VR::UN;
        if explicit && vr == dicom_core::VR::UN && len == UNDEFINED && !src.is_stream() {
            // CP-246: the items are implicit VR little endian. Patched into an OB of the
            // content's length, dicom-rs keeps the bytes and `un` parses them afterwards. (A
            // deflated data set cannot be patched: dicom-rs reports the error.)
            let header_at = src.pos - 12;
            let content_at = src.pos;
            if let Some(content) = implicit_sequence_len(src)? {
                let mut bytes = b"OB\0\0".to_vec();
                let len = u32::try_from(content).map_err(|_| "sequence too long".to_string())?;
                bytes.extend(if be {
                    len.to_be_bytes()
                } else {
                    len.to_le_bytes()
                });
                walk.patches.push(Patch {
                    at: header_at + 4,
                    bytes,
                });
                src.pos = content_at + content;
                pending = true;
                continue;
            }
            src.pos = content_at;
        }
        if sq || len == UNDEFINED {
            // Every undefined-length element is read as a sequence, whatever its VR.
            let end = if len == UNDEFINED {
                None
            } else {
                if !src.is_stream() {
                    fits(src, group, element, len)?;
                }
                Some(src.pos + skew + len as u64)
            };
            stack.push(Open {
                sequence: true,
                pixel_data: false,
                len,
                end,
            });
            if depth(&stack) > MAX_SEQUENCE_DEPTH {
                return Err(format!(
                    "sequences nested more than {MAX_SEQUENCE_DEPTH} deep (at byte {})",
                    src.pos
                ));
            }
            in_sequence = true;
            pending = len == 0;
            continue;
        }
        if stack.is_empty() && group == 0x0028 && len <= 64 {
            if let Some(v) = src.peek(len as usize)? {
                attrs.note(group, element, v);
            }
        }
        if budget.is_some() {
            if stack.is_empty() && (group, element) == (0x7fe0, 0x0010) {
                check_pixel_length(&mut budget, &attrs, src.pos, len)?;
            } else {
                spend(&mut budget, src.pos, len, "a value")?;
            }
        }
        let short = len % value_unit(vr);
        // A stream is read as far as dicom-rs reads it (whole units): the walk goes on there.
        fits(
            src,
            group,
            element,
            if src.is_stream() { len - short } else { len },
        )?;
        src.pos += (len - short) as u64;
        skew += short as u64;
        pending = true;
    }
}

/// Takes `len` bytes of elements other than Pixel Data (at byte `at`) from a deflated data
/// set's budget.
fn spend(budget: &mut Option<Budget>, at: u64, len: u32, what: &str) -> Result<(), String> {
    let Some(b) = budget else {
        return Ok(());
    };
    if len as u64 > b.header_left {
        return Err(format!(
            "{what} of {len} bytes at byte {at} of the inflated data set: a deflated data set \
             may inflate to at most {} MiB besides its Pixel Data (decompression bomb?)",
            DEFLATED_HEADER_BUDGET >> 20
        ));
    }
    b.header_left -= len as u64;
    Ok(())
}

/// Holds the Pixel Data of a deflated data set (at byte `at`, `len` bytes) to what its
/// header justifies.
fn check_pixel_length(
    budget: &mut Option<Budget>,
    attrs: &ImageAttrs,
    at: u64,
    len: u32,
) -> Result<(), String> {
    let Some(b) = *budget else {
        return Ok(());
    };
    let Some(justified) = attrs.pixel_bytes() else {
        // No dimensions to justify it: it counts as any other value.
        return spend(
            budget,
            at,
            len,
            "Pixel Data without Rows, Columns or Bits Allocated",
        );
    };
    let len = len as u64;
    if len > justified {
        let n = |v: Option<u64>| v.map_or("?".to_string(), |v| v.to_string());
        return Err(format!(
            "Pixel Data declares {len} bytes, but Rows x Columns x Samples x Bits x Frames = \
             {} x {} x {} x {} x {} justify {justified} (decompression bomb?)",
            n(attrs.rows),
            n(attrs.cols),
            attrs.samples.unwrap_or(1),
            n(attrs.bits),
            attrs.frames.unwrap_or(1)
        ));
    }
    if len > b.max_pixel_bytes {
        return Err(format!(
            "deflated Pixel Data of {} MiB: a deflated data set is inflated whole, and may hold \
             at most {} MiB (pipeline.max_frame_mib)",
            len >> 20,
            b.max_pixel_bytes >> 20
        ));
    }
    Ok(())
}

/// The length of the content of an undefined-length sequence in implicit VR little endian
/// (CP-246), from `src.pos` to the end of its Sequence Delimitation Item; `None` when the
/// bytes do not make sense (dicom-rs then reports the error). Defined-length items and values
/// are skipped whole: what dicom-rs later parses of them is checked then (`un::normalize`).
fn implicit_sequence_len(src: &mut Src) -> Result<Option<u64>, String> {
    let start = src.pos;
    // Open undefined-length things: true = sequence, false = item.
    let mut open = vec![true];
    while let Some(&top) = open.last() {
        let (Some(t), Some(l)) = (src.take::<4>()?, src.take::<4>()?) else {
            return Ok(None);
        };
        let tag = (
            u16::from_le_bytes([t[0], t[1]]),
            u16::from_le_bytes([t[2], t[3]]),
        );
        let len = u32::from_le_bytes(l);
        match tag {
            (0xfffe, 0xe000) if top => {
                if len == UNDEFINED {
                    open.push(false);
                } else {
                    fits(src, 0xfffe, 0xe000, len)?;
                    src.pos += len as u64;
                }
            }
            (0xfffe, 0xe00d) if !top => {
                open.pop();
            }
            (0xfffe, 0xe0dd) if top => {
                open.pop();
            }
            (0xfffe, _) => return Ok(None),
            _ if top => return Ok(None), // an element directly in a sequence
            (group, element) => {
                if len == UNDEFINED {
                    open.push(true);
                } else {
                    fits(src, group, element, len)?;
                    src.pos += len as u64;
                }
            }
        }
        if open.len() > 2 * MAX_SEQUENCE_DEPTH {
            return Err(format!(
                "sequences nested more than {MAX_SEQUENCE_DEPTH} deep (at byte {})",
                src.pos
            ));
        }
    }
    Ok(Some(src.pos - start))
}

/// Checks the Pixel Data of a fully parsed object against the image description before any
/// frame is read: present (else the object is no image), holding every frame the header
/// announces (`NumberOfFrames` = 1000000 with one frame of data fails here, once, instead
/// of once per missing frame), and carrying codestreams no larger than the image.
pub(super) fn check_pixel_data(
    obj: &dicom_object::InMemDicomObject,
    info: &super::ImageInfo,
) -> Result<(), super::DecodeError> {
    use super::DecodeError::{Fail, Skip};
    use dicom_core::value::Value;
    let Some(elem) = obj.get(dicom_dictionary_std::tags::PIXEL_DATA) else {
        return Err(Skip(
            "no image (Rows/Columns present, Pixel Data missing)".into(),
        ));
    };
    let frames = info.frames as u64;
    let native = super::native_byte_order(&info.transfer_syntax).is_some();
    match elem.value() {
        Value::PixelSequence(seq) => {
            if native {
                return Err(Fail(format!(
                    "encapsulated Pixel Data in the uncompressed transfer syntax {}",
                    info.transfer_syntax
                )));
            }
            let frags = seq.fragments();
            if (frags.len() as u64) < frames {
                return Err(Fail(format!(
                    "encapsulated Pixel Data has {} fragment(s) for NumberOfFrames = {frames}",
                    frags.len()
                )));
            }
            check_codestreams(
                frags,
                info.rows,
                info.cols,
                info.samples_per_pixel as u32,
                info.bits_allocated as u32,
            )
            .map_err(Fail)
        }
        Value::Primitive(p) => {
            let needed = info.native_bytes(info.frames);
            let have = p.calculate_byte_len() as u64;
            if native && have < needed {
                return Err(Fail(format!(
                    "Pixel Data holds {have} bytes; {frames} frame(s) of {} bits need {needed}",
                    info.native_frame_bits()
                )));
            }
            Ok(())
        }
        Value::Sequence(_) => Err(Fail("Pixel Data is a sequence".into())),
    }
}

/// What a codestream header declares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Declared {
    pub rows: u32,
    pub cols: u32,
    pub components: u32,
    pub precision: u32,
}

/// The bytes of consecutive fragments seen as one stream (what a decoder reads when a frame
/// spans several fragments).
struct Chain<'a> {
    frags: &'a [Vec<u8>],
    /// Start of each fragment in the concatenation.
    starts: Vec<u64>,
    len: u64,
}

impl<'a> Chain<'a> {
    fn new(frags: &'a [Vec<u8>]) -> Self {
        let mut starts = Vec::with_capacity(frags.len());
        let mut at = 0u64;
        for f in frags {
            starts.push(at);
            at += f.len() as u64;
        }
        Chain {
            frags,
            starts,
            len: at,
        }
    }

    fn byte(&self, at: u64) -> Option<u8> {
        if at >= self.len {
            return None;
        }
        let i = self.starts.partition_point(|&s| s <= at) - 1;
        self.frags[i].get((at - self.starts[i]) as usize).copied()
    }

    fn be16(&self, at: u64) -> Option<u32> {
        Some(u32::from(self.byte(at)?) << 8 | u32::from(self.byte(at + 1)?))
    }

    fn be32(&self, at: u64) -> Option<u32> {
        Some(self.be16(at)? << 16 | self.be16(at + 2)?)
    }
}

/// Bytes scanned (outside skipped segment payloads) before a check gives up on a file.
const SCAN_BUDGET: u64 = 4 << 20;

/// Reads the frame header of the JPEG (or JPEG-LS) stream starting at `at` with the decoders'
/// marker walker (garbage between segments is skipped up to the next 0xFF).
/// `Ok(None)`: no frame header before the first scan (the decoder will fail on its own).
fn jpeg_header(c: &Chain, at: u64, budget: &mut u64) -> Result<Option<Declared>, String> {
    use super::jpeg::markers::{self, WalkError, Walker};
    let mut walker = Walker::new(c, at + 2).with_budget(*budget); // after SOI
    let found = loop {
        let segment = match walker.next_segment() {
            Ok(s) => s,
            Err(WalkError::Budget) => return Err("JPEG headers too long to check".into()),
            Err(WalkError::Truncated | WalkError::Length { .. }) => break None,
        };
        if matches!(segment.marker, 0xd9 | 0xda) {
            break None; // EOI or scan before any frame header
        }
        if markers::is_frame_header(segment.marker) {
            let p = segment.payload_at();
            let (Some(p), Some(y), Some(x), Some(nf)) =
                (c.byte(p), c.be16(p + 1), c.be16(p + 3), c.byte(p + 5))
            else {
                break None;
            };
            break Some(Declared {
                rows: y,
                cols: x,
                components: nf as u32,
                precision: p as u32,
            });
        }
    };
    *budget = walker.budget_left();
    Ok(found)
}

/// The marker walker reads a frame's fragments in place, as if they were one stream.
impl super::jpeg::markers::MarkerSource for Chain<'_> {
    fn byte_at(&self, at: u64) -> Option<u8> {
        self.byte(at)
    }
}

/// Reads the SIZ segment of a JPEG 2000 codestream (SOC at `at`), or of the `jp2c` box of a
/// JP2 file.
fn j2k_header(c: &Chain, at: u64, budget: &mut u64) -> Result<Option<Declared>, String> {
    let mut soc = at;
    if c.be32(at) == Some(0x0000_000c) && c.be32(at + 4) == Some(0x6a50_2020) {
        // JP2 boxes: find the contiguous codestream box.
        let mut b = at;
        loop {
            *budget = budget
                .checked_sub(8)
                .ok_or("JPEG 2000 boxes too many to check")?;
            let (Some(len), Some(kind)) = (c.be32(b), c.be32(b + 4)) else {
                return Ok(None);
            };
            if kind == 0x6a70_3263 {
                // jp2c
                soc = b + 8;
                break;
            }
            let len = match len {
                0 => return Ok(None),
                1 => match (c.be32(b + 8), c.be32(b + 12)) {
                    (Some(0), Some(l)) if l >= 16 => l as u64,
                    _ => return Ok(None),
                },
                l if l >= 8 => l as u64,
                _ => return Ok(None),
            };
            b += len;
        }
    }
    if c.be16(soc) != Some(0xff4f) || c.be16(soc + 2) != Some(0xff51) {
        return Ok(None);
    }
    let s = soc + 4; // Lsiz
    let (Some(xsiz), Some(ysiz), Some(xo), Some(yo), Some(csiz)) = (
        c.be32(s + 4),
        c.be32(s + 8),
        c.be32(s + 12),
        c.be32(s + 16),
        c.be16(s + 36),
    ) else {
        return Ok(None);
    };
    let mut precision = 0;
    for i in 0..csiz.min(16384) as u64 {
        let Some(ssiz) = c.byte(s + 38 + 3 * i) else {
            break;
        };
        precision = precision.max((ssiz & 0x7f) as u32 + 1);
    }
    Ok(Some(Declared {
        rows: ysiz.saturating_sub(yo),
        cols: xsiz.saturating_sub(xo),
        components: csiz,
        precision,
    }))
}

/// Checks every JPEG, JPEG-LS and JPEG 2000 codestream that starts a fragment against the
/// data set's description: `rows` x `cols`, `samples` per pixel, `bits_allocated`.
pub fn check_codestreams(
    frags: &[Vec<u8>],
    rows: u32,
    cols: u32,
    samples: u32,
    bits_allocated: u32,
) -> Result<(), String> {
    let chain = Chain::new(frags);
    let mut budget = SCAN_BUDGET;
    for (i, f) in frags.iter().enumerate() {
        let at = chain.starts[i];
        let (what, declared) = if f.starts_with(&[0xff, 0xd8]) {
            ("JPEG", jpeg_header(&chain, at, &mut budget)?)
        } else if f.starts_with(&[0xff, 0x4f]) || f.starts_with(&[0, 0, 0, 0x0c, 0x6a, 0x50]) {
            ("JPEG 2000", j2k_header(&chain, at, &mut budget)?)
        } else {
            continue;
        };
        let Some(d) = declared else {
            continue;
        };
        if d.rows as u64 * d.cols as u64 > rows as u64 * cols as u64 {
            return Err(format!(
                "{what} codestream in fragment {} declares {}x{} pixels, more than the data \
                 set's {}x{} (decompression bomb?)",
                i + 1,
                d.cols,
                d.rows,
                cols,
                rows
            ));
        }
        if d.components > samples {
            return Err(format!(
                "{what} codestream in fragment {} declares {} components, the data set {} \
                 samples per pixel",
                i + 1,
                d.components,
                samples
            ));
        }
        if d.precision > bits_allocated {
            return Err(format!(
                "{what} codestream in fragment {} declares {}-bit samples, the data set \
                 allocates {bits_allocated} bits",
                i + 1,
                d.precision
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn elem(group: u16, element: u16, vr: &[u8; 2], len: u32, value: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend(group.to_le_bytes());
        v.extend(element.to_le_bytes());
        v.extend(vr);
        if long_vr(vr) {
            v.extend([0, 0]);
            v.extend(len.to_le_bytes());
        } else {
            v.extend((len as u16).to_le_bytes());
        }
        v.extend(value);
        v
    }

    fn item(element: u16, len: u32) -> Vec<u8> {
        let mut v = vec![0xfe, 0xff];
        v.extend(element.to_le_bytes());
        v.extend(len.to_le_bytes());
        v
    }

    /// Walks `bytes` as a bare explicit VR little endian data set.
    fn walk_bytes(bytes: &[u8]) -> Result<Walk, String> {
        let path = std::env::temp_dir().join(format!(
            "dicomflow-guard-{}-{:?}.dcm",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::write(&path, bytes).unwrap();
        let r = check_structure(
            &path,
            &Probe::BareDataset {
                transfer_syntax: "1.2.840.10008.1.2.1",
            },
            u64::MAX,
        );
        let _ = std::fs::remove_file(&path);
        r
    }

    #[test]
    fn un_with_undefined_length_is_walked_as_implicit_vr_and_patched_to_ob() {
        let mut v = elem(0x0008, 0x0005, b"CS", 10, b"ISO_IR 100");
        let un_at = v.len();
        v.extend(elem(0x0009, 0x1010, b"UN", UNDEFINED, &[]));
        // One undefined-length item holding an implicit VR element whose 4-byte length, read
        // as explicit VR, would claim gigabytes ("ABCD" as VR + length).
        let mut content = item(0xe000, UNDEFINED);
        content.extend([0x09, 0x00, 0x11, 0x10, 4, 0, 0, 0]);
        content.extend(b"ABCD");
        content.extend(item(0xe00d, 0));
        content.extend(item(0xe0dd, 0));
        v.extend(&content);
        v.extend(elem(0x0028, 0x0010, b"US", 2, &[8, 0]));
        v.extend(elem(0x7fe0, 0x0010, b"OB", 2, &[0, 0]));
        let walk = walk_bytes(&v).unwrap();
        assert!(walk.saw_un && walk.pixel_data);
        let mut patch = b"OB\0\0".to_vec();
        patch.extend((content.len() as u32).to_le_bytes());
        assert_eq!(
            walk.patches,
            vec![Patch {
                at: un_at as u64 + 4,
                bytes: patch
            }]
        );
    }

    fn check_bytes(bytes: &[u8]) -> Result<(), String> {
        walk_bytes(bytes).map(|_| ())
    }

    fn nested(depth: usize) -> Vec<u8> {
        let mut v = elem(0x0008, 0x0005, b"CS", 10, b"ISO_IR 100");
        for _ in 0..depth {
            v.extend(elem(0x0008, 0x1115, b"SQ", UNDEFINED, &[]));
            v.extend(item(0xe000, UNDEFINED));
        }
        for _ in 0..depth {
            v.extend(item(0xe00d, 0));
            v.extend(item(0xe0dd, 0));
        }
        v.extend(elem(0x0028, 0x0010, b"US", 2, &[8, 0]));
        v
    }

    #[test]
    fn accepts_reasonable_nesting_and_rejects_deep_nesting() {
        assert_eq!(check_bytes(&nested(MAX_SEQUENCE_DEPTH)), Ok(()));
        let e = check_bytes(&nested(MAX_SEQUENCE_DEPTH + 1)).unwrap_err();
        assert!(e.contains("nested"), "{e}");
    }

    #[test]
    fn transfer_syntax_uids_are_trimmed_as_dicom_rs_trims_them() {
        assert_eq!(
            trim_uid("1.2.840.10008.1.2\0\0\0\n\0"),
            uids::IMPLICIT_VR_LITTLE_ENDIAN
        );
        assert_eq!(
            trim_uid("1.2.840.10008.1.2 \t\r"),
            uids::IMPLICIT_VR_LITTLE_ENDIAN
        );
        assert_eq!(trim_uid("1.2.840.10008.1.2.1\0"), "1.2.840.10008.1.2.1");
    }

    #[test]
    fn rejects_lengths_past_the_end_of_the_file() {
        let mut v = elem(0x0008, 0x0005, b"CS", 10, b"ISO_IR 100");
        v.extend(elem(0x0008, 0x2111, b"UT", 0x7fff_fff0, b"abc "));
        assert!(check_bytes(&v).unwrap_err().contains("(0008,2111)"));
        let mut v = elem(0x0008, 0x0005, b"CS", 10, b"ISO_IR 100");
        v.extend(elem(0x7fe0, 0x0010, b"OW", 0xffff_fff0, &[0; 16]));
        assert!(check_bytes(&v).unwrap_err().contains("(7FE0,0010)"));
        // Defined-length sequence and item lengths are checked too.
        let mut v = elem(0x0008, 0x0005, b"CS", 10, b"ISO_IR 100");
        let mut seq = item(0xe000, 0x00ff_ffff);
        seq.extend(elem(0x0008, 0x1150, b"UI", 4, b"1.2\0"));
        v.extend(elem(0x0008, 0x1115, b"SQ", seq.len() as u32, &seq));
        assert!(check_bytes(&v).unwrap_err().contains("(FFFE,E000)"));
    }

    #[test]
    fn follows_dicom_rs_through_binary_values_of_odd_length() {
        // dicom-rs reads 2 of the 3 bytes of this US value: the next header starts one byte
        // earlier than the length says, and that header claims 2 GB.
        let mut v = elem(0x0008, 0x0005, b"CS", 10, b"ISO_IR 100");
        v.extend(elem(0x0028, 0x0010, b"US", 3, &[8, 0]));
        v.extend(elem(0x0028, 0x0011, b"UT", 0x7fff_fff0, b"abc "));
        assert!(check_bytes(&v).unwrap_err().contains("(0028,0011)"));
    }

    #[test]
    fn accepts_encapsulated_pixel_data_and_defined_sequences() {
        let mut v = elem(0x0008, 0x0005, b"CS", 10, b"ISO_IR 100");
        let mut seq = item(0xe000, 12);
        seq.extend(elem(0x0008, 0x1150, b"UI", 4, b"1.2\0"));
        v.extend(elem(0x0008, 0x1115, b"SQ", seq.len() as u32, &seq));
        v.extend(elem(0x7fe0, 0x0010, b"OB", UNDEFINED, &[]));
        v.extend(item(0xe000, 0));
        v.extend(item(0xe000, 4));
        v.extend([1, 2, 3, 4]);
        v.extend(item(0xe0dd, 0));
        v.extend(elem(0xfffc, 0xfffc, b"OB", 2, &[0, 0]));
        assert_eq!(check_bytes(&v), Ok(()));
    }

    fn sof3(rows: u16, cols: u16, precision: u8) -> Vec<u8> {
        let mut j = vec![
            0xff, 0xd8, 0xff, 0xe0, 0x00, 0x04, 0x4a, 0x46, 0x13, 0xff, 0xc3, 0x00, 0x0b, precision,
        ];
        j.extend(rows.to_be_bytes());
        j.extend(cols.to_be_bytes());
        j.extend([0x01, 0x01, 0x11, 0x00, 0xff, 0xda]);
        j
    }

    #[test]
    fn compares_jpeg_frame_headers_with_the_data_set() {
        let ok = vec![sof3(64, 64, 16)];
        assert_eq!(check_codestreams(&ok, 64, 64, 1, 16), Ok(()));
        let bomb = vec![sof3(65535, 65535, 16)];
        assert!(check_codestreams(&bomb, 64, 64, 1, 16)
            .unwrap_err()
            .contains("65535x65535"));
        assert!(check_codestreams(&ok, 64, 64, 1, 8).is_err());
        // The frame header may sit in a later fragment than the SOI.
        let j = sof3(65535, 65535, 8);
        let split = vec![j[..3].to_vec(), j[3..].to_vec()];
        assert!(check_codestreams(&split, 64, 64, 1, 8).is_err());
        // Garbage between segments is skipped as jpeg-decoder skips it.
        let mut g = vec![0xff, 0xd8, 0x12, 0x34];
        g.extend(&j[2..]);
        assert!(check_codestreams(&[g], 64, 64, 1, 8).is_err());
    }

    #[test]
    fn compares_jpeg2000_sizes_with_the_data_set() {
        let mut j = vec![0xff, 0x4f, 0xff, 0x51, 0x00, 0x29, 0x00, 0x00];
        for v in [60000u32, 60000, 0, 0, 60000, 60000, 0, 0] {
            j.extend(v.to_be_bytes());
        }
        j.extend([0x00, 0x01, 0x07, 0x01, 0x01]);
        assert!(check_codestreams(&[j.clone()], 64, 64, 1, 8).is_err());
        assert_eq!(check_codestreams(&[j], 60000, 60000, 1, 8), Ok(()));
    }
}
