//! JPEG markers: the one walker over marker segments ([`Walker`], used by the decoder here,
//! the GPU eligibility check, the frame-size check and the file guard), and marker-segment
//! parsing with the acceptance rules of IJG 6b's `jdmarker.c`.
//!
//! Mirroring IJG matters because DCMTK fails (and so must we) exactly where IJG raises a fatal
//! error, while IJG's mere warnings (odd Ss/Se in a sequential scan, garbage between markers)
//! must not stop decoding.

use super::huffman::HuffSpec;
use super::{err, Result, Tables};

pub(super) const SOI: u8 = 0xD8;
pub(super) const EOI: u8 = 0xD9;
pub(super) const SOS: u8 = 0xDA;
const DHT: u8 = 0xC4;
const JPG: u8 = 0xC8;
const DAC: u8 = 0xCC;
const DQT: u8 = 0xDB;
const DNL: u8 = 0xDC;
const DRI: u8 = 0xDD;
const TEM: u8 = 0x01;
const COM: u8 = 0xFE;
pub(super) const RST0: u8 = 0xD0;
pub(super) const RST7: u8 = 0xD7;

/// Zigzag position → natural (row-major) position, with IJG's 16 extra entries of 63 so that
/// a corrupt run length past the end of a block lands on the last coefficient.
pub(super) const NATURAL_ORDER: [u8; 80] = [
    0, 1, 8, 16, 9, 2, 3, 10, 17, 24, 32, 25, 18, 11, 4, 5, 12, 19, 26, 33, 40, 48, 41, 34, 27, 20,
    13, 6, 7, 14, 21, 28, 35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51, 58, 59,
    52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63,
    63, 63, 63, 63, 63, 63,
];

/// IJG's JPEG_MAX_DIMENSION.
const MAX_DIMENSION: u16 = 65500;

/// Byte-level reader over the whole stream; running out of bytes is fatal because DCMTK's
/// source manager suspends (and then fails) instead of inventing an EOI.
pub(super) struct Cursor<'a> {
    data: &'a [u8],
    pub pos: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(data: &'a [u8], pos: usize) -> Self {
        Cursor { data, pos }
    }

    fn byte(&mut self) -> Result<u8> {
        next_byte(self.data, &mut self.pos)
    }

    fn u16(&mut self) -> Result<u16> {
        let hi = self.byte()?;
        let lo = self.byte()?;
        Ok(u16::from_be_bytes([hi, lo]))
    }

    fn skip(&mut self, n: usize) -> Result<()> {
        match self.pos.checked_add(n) {
            Some(end) if end <= self.data.len() => {
                self.pos = end;
                Ok(())
            }
            _ => truncated(),
        }
    }

    /// IJG `next_marker`: skips garbage and fill bytes up to the next marker code.
    pub fn next_marker(&mut self) -> Result<u8> {
        next_marker(self.data, &mut self.pos)
    }
}

fn truncated<T>() -> Result<T> {
    Err(super::JpegError::truncated(
        "truncated JPEG stream (data ends before the EOI marker)",
    ))
}

fn next_byte(data: &[u8], pos: &mut usize) -> Result<u8> {
    match data.get(*pos) {
        Some(&b) => {
            *pos += 1;
            Ok(b)
        }
        None => truncated(),
    }
}

/// IJG `next_marker`: find the next `FF xx` with `xx` not 0 and not FF, discarding anything
/// else (IJG only warns about the discarded bytes). [`Walker::next_marker`] on `data`.
pub(super) fn next_marker(data: &[u8], pos: &mut usize) -> Result<u8> {
    let mut w = Walker::new(data, *pos as u64);
    let m = w.next_marker();
    *pos = w.pos as usize;
    m.or_else(|_| truncated())
}

/// SOFn codes (C0..CF minus DHT, JPG and DAC).
pub(crate) fn is_sof(m: u8) -> bool {
    (0xC0..=0xCF).contains(&m) && m != DHT && m != JPG && m != DAC
}

/// JPEG-LS frame header (SOF55, ITU-T T.87).
pub(crate) const SOF55: u8 = 0xF7;

/// A frame header of JPEG (any SOFn) or JPEG-LS (SOF55): they share the layout (P, Y, X, Nf).
pub(crate) fn is_frame_header(m: u8) -> bool {
    is_sof(m) || m == SOF55
}

/// True when `src` holds a start-of-image marker (`FF D8`) at `at`.
pub(crate) fn starts_with_soi<S: MarkerSource + ?Sized>(src: &S, at: u64) -> bool {
    src.byte_at(at) == Some(0xFF) && src.byte_at(at + 1) == Some(SOI)
}

/// Where a [`Walker`] reads: a contiguous codestream, or a frame's fragments read in place.
pub(crate) trait MarkerSource {
    /// The byte at offset `at`, `None` past the end.
    fn byte_at(&self, at: u64) -> Option<u8>;
}

impl MarkerSource for [u8] {
    fn byte_at(&self, at: u64) -> Option<u8> {
        self.get(usize::try_from(at).ok()?).copied()
    }
}

/// One marker segment found by [`Walker::next_segment`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Segment {
    pub marker: u8,
    /// Offset of the segment's length field (its payload starts 2 bytes later); for EOI,
    /// which has no length, the offset after the marker.
    pub at: u64,
    /// The length field (it counts itself); 0 for EOI.
    pub len: u16,
}

impl Segment {
    /// Offset of the payload's first byte (the byte after the length field).
    pub fn payload_at(&self) -> u64 {
        self.at + 2
    }

    /// The payload in a contiguous stream (`None` when the stream ends inside it).
    pub fn payload<'a>(&self, data: &'a [u8]) -> Option<&'a [u8]> {
        let start = usize::try_from(self.payload_at()).ok()?;
        let end = usize::try_from(self.at + self.len as u64).ok()?;
        data.get(start..end)
    }
}

/// Why a [`Walker`] stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WalkError {
    /// The data ends before the next marker or inside a length field.
    Truncated,
    /// A segment's length field is below 2 (it counts itself).
    Length { marker: u8, len: u16 },
    /// More bytes scanned than the walker's budget allows.
    Budget,
}

/// Walks marker segments the way IJG (and jpeg-decoder) do: garbage between segments is skipped
/// up to the next `FF`, fill bytes (`FF FF`) are skipped, `FF 00` is stuffed entropy data and
/// not a marker, and the markers without a length (SOI, TEM, RSTn) are stepped over. Segments
/// are skipped by their length; the caller reads the ones it wants and stops where it wants
/// (usually at SOS or EOI).
pub(crate) struct Walker<'a, S: ?Sized> {
    src: &'a S,
    /// Offset of the next byte read.
    pub pos: u64,
    /// Bytes left to scan; the guard bounds its work on hostile files with it.
    budget: u64,
}

impl<'a, S: MarkerSource + ?Sized> Walker<'a, S> {
    /// A walker from offset `pos` (just after SOI, usually), without a budget.
    pub fn new(src: &'a S, pos: u64) -> Self {
        Walker {
            src,
            pos,
            budget: u64::MAX,
        }
    }

    /// Stops with [`WalkError::Budget`] after scanning `budget` bytes (a segment's skipped
    /// payload costs nothing; its marker and length cost 4).
    pub fn with_budget(mut self, budget: u64) -> Self {
        self.budget = budget;
        self
    }

    /// Bytes of the budget left.
    pub fn budget_left(&self) -> u64 {
        self.budget
    }

    fn charge(&mut self, n: u64) -> std::result::Result<(), WalkError> {
        self.budget = self.budget.checked_sub(n).ok_or(WalkError::Budget)?;
        Ok(())
    }

    fn byte(&mut self) -> std::result::Result<u8, WalkError> {
        self.charge(1)?;
        let b = self.src.byte_at(self.pos).ok_or(WalkError::Truncated)?;
        self.pos += 1;
        Ok(b)
    }

    /// The next marker code (IJG `next_marker`); `pos` ends just after it.
    pub fn next_marker(&mut self) -> std::result::Result<u8, WalkError> {
        loop {
            while self.byte()? != 0xFF {}
            let mut c = self.byte()?;
            while c == 0xFF {
                c = self.byte()?;
            }
            if c != 0 {
                return Ok(c);
            }
            // FF 00 is stuffed entropy data, not a marker: keep scanning.
        }
    }

    /// The next segment with a length, or EOI; `pos` ends after the segment (for SOS, at the
    /// start of the entropy-coded data).
    pub fn next_segment(&mut self) -> std::result::Result<Segment, WalkError> {
        loop {
            let marker = self.next_marker()?;
            match marker {
                SOI | TEM | RST0..=RST7 => continue,
                EOI => {
                    return Ok(Segment {
                        marker,
                        at: self.pos,
                        len: 0,
                    })
                }
                _ => {}
            }
            self.charge(4)?;
            let (Some(hi), Some(lo)) = (self.src.byte_at(self.pos), self.src.byte_at(self.pos + 1))
            else {
                return Err(WalkError::Truncated);
            };
            let len = u16::from_be_bytes([hi, lo]);
            if len < 2 {
                return Err(WalkError::Length { marker, len });
            }
            let seg = Segment {
                marker,
                at: self.pos,
                len,
            };
            self.pos += len as u64;
            return Ok(seg);
        }
    }
}

/// One component line of the SOF segment.
pub(super) struct ComponentSpec {
    pub id: u8,
    pub h: u8,
    pub v: u8,
    pub tq: u8,
}

pub(super) struct FrameHeader {
    /// SOF3: lossless (process 14), Huffman coded.
    pub lossless: bool,
    pub precision: u8,
    pub width: u16,
    pub height: u16,
    pub comps: Vec<ComponentSpec>,
}

/// One component of a scan: its index in the frame and its Huffman table selectors.
pub(super) struct ScanComponent {
    pub index: usize,
    pub dc: u8,
    pub ac: u8,
}

pub(super) struct ScanHeader {
    pub comps: Vec<ScanComponent>,
    /// Spectral selection start; the predictor selection value in a lossless scan.
    pub ss: u8,
    pub se: u8,
    pub ah: u8,
    /// Successive approximation low bit; the point transform in a lossless scan.
    pub al: u8,
}

fn check_sof_type(m: u8) -> Result<()> {
    match m {
        0xC0 | 0xC1 | 0xC3 => Ok(()),
        0xC2 | 0xCA => err("unsupported: progressive JPEG"),
        0xCB => err("unsupported: arithmetic-coded lossless JPEG"),
        0xC9 => err("unsupported: arithmetic-coded JPEG"),
        _ => err(format!(
            "unsupported: hierarchical/differential JPEG (SOF marker 0x{m:02X})"
        )),
    }
}

/// IJG `get_sof` plus the checks of `initial_setup` (jdinput.c).
pub(super) fn read_sof(cur: &mut Cursor, marker: u8) -> Result<FrameHeader> {
    check_sof_type(marker)?;
    let length = cur.u16()?;
    let precision = cur.byte()?;
    let height = cur.u16()?;
    let width = cur.u16()?;
    let n = cur.byte()?;
    if height == 0 {
        return err("image height 0 (height defined by a DNL marker) is not supported");
    }
    if width == 0 || n == 0 {
        return err("empty image (zero width or no components)");
    }
    if usize::from(length) != 8 + 3 * usize::from(n) {
        return err("bad SOF segment length");
    }
    let lossless = marker == 0xC3;
    if lossless {
        // DCMTK picks its 8-, 12- or 16-bit IJG build by this precision: 2 to 16 bits.
        if !(2..=16).contains(&precision) {
            return err(format!(
                "unsupported: {precision}-bit lossless JPEG (2 to 16)"
            ));
        }
    } else if precision != 8 && precision != 12 {
        return err(format!(
            "unsupported: {precision}-bit lossy JPEG (only 8 and 12)"
        ));
    }
    if n > 4 {
        return err(format!("unsupported: {n} components (at most 4)"));
    }
    if width > MAX_DIMENSION || height > MAX_DIMENSION {
        return err("image too large (more than 65500 pixels on a side)");
    }
    let mut comps = Vec::with_capacity(usize::from(n));
    for _ in 0..n {
        let id = cur.byte()?;
        let hv = cur.byte()?;
        let tq = cur.byte()?;
        let (h, v) = (hv >> 4, hv & 15);
        if !(1..=4).contains(&h) || !(1..=4).contains(&v) {
            return err("bad sampling factors (must be 1 to 4)");
        }
        comps.push(ComponentSpec { id, h, v, tq });
    }
    Ok(FrameHeader {
        lossless,
        precision,
        width,
        height,
        comps,
    })
}

/// IJG `get_sos`. A sequential DCT scan ignores Ss, Se, Ah and Al (IJG only warns about odd
/// values, since some baseline files carry zeroes there); a lossless scan uses Ss as its
/// predictor and Al as its point transform. `frame_ids` are the frame's component IDs.
pub(super) fn read_sos(cur: &mut Cursor, frame_ids: &[u8]) -> Result<ScanHeader> {
    let length = cur.u16()?;
    let n = cur.byte()?;
    if usize::from(length) != 6 + 2 * usize::from(n) || !(1..=4).contains(&n) {
        return err("bad SOS segment length");
    }
    let mut comps: Vec<ScanComponent> = Vec::with_capacity(usize::from(n));
    for _ in 0..n {
        let cid = cur.byte()?;
        let tables = cur.byte()?;
        // IJG takes the first frame component with this ID.
        let Some(index) = frame_ids.iter().position(|&id| id == cid) else {
            return err(format!("scan refers to unknown component {cid}"));
        };
        if comps.iter().any(|c| c.index == index) {
            return err(format!("component {cid} appears twice in one scan"));
        }
        comps.push(ScanComponent {
            index,
            dc: tables >> 4,
            ac: tables & 15,
        });
    }
    let ss = cur.byte()?;
    let se = cur.byte()?;
    let a = cur.byte()?;
    Ok(ScanHeader {
        comps,
        ss,
        se,
        ah: a >> 4,
        al: a & 15,
    })
}

/// Handles every marker other than SOI/SOFn/SOS/EOI: tables are stored, the rest skipped
/// or rejected as IJG's `read_markers` does.
pub(super) fn read_table_or_skip(cur: &mut Cursor, m: u8, tables: &mut Tables) -> Result<()> {
    match m {
        SOI => err("duplicate SOI marker"),
        DHT => read_dht(cur, tables),
        DQT => read_dqt(cur, &mut tables.quant),
        DRI => {
            if cur.u16()? != 4 {
                return err("bad DRI segment length");
            }
            tables.restart_interval = cur.u16()?;
            Ok(())
        }
        0xE0..=0xEF | COM | DAC | DNL => skip_variable(cur),
        RST0..=RST7 | TEM => Ok(()),
        JPG => err("unsupported: JPEG extension (JPG marker)"),
        _ => err(format!("unknown JPEG marker 0x{m:02X}")),
    }
}

/// IJG `skip_variable`: a length below 2 skips nothing.
fn skip_variable(cur: &mut Cursor) -> Result<()> {
    let length = usize::from(cur.u16()?);
    cur.skip(length.saturating_sub(2))
}

/// IJG `get_dht`: several tables per segment, minimal validation here (the rest happens
/// when a scan builds its decoding tables).
fn read_dht(cur: &mut Cursor, tables: &mut Tables) -> Result<()> {
    let mut length = i64::from(cur.u16()?) - 2;
    while length > 16 {
        let index = cur.byte()?;
        let mut bits = [0u8; 17];
        for b in bits.iter_mut().skip(1) {
            *b = cur.byte()?;
        }
        length -= 17;
        let count: usize = bits.iter().map(|&b| usize::from(b)).sum();
        if count > 256 || count as i64 > length {
            return err("bad Huffman table (DHT)");
        }
        let mut vals = Vec::with_capacity(count);
        for _ in 0..count {
            vals.push(cur.byte()?);
        }
        length -= count as i64;
        let (slot, is_ac) = if index & 0x10 != 0 {
            (index - 0x10, true)
        } else {
            (index, false)
        };
        let spec = HuffSpec { bits, vals };
        let target = if is_ac {
            &mut tables.ac
        } else {
            &mut tables.dc
        };
        match target.get_mut(usize::from(slot)) {
            Some(t) => *t = Some(spec),
            None => return err(format!("bad DHT table index {index}")),
        }
    }
    if length != 0 {
        return err("bad DHT segment length");
    }
    Ok(())
}

/// IJG `get_dqt`: 8- or 16-bit entries in zigzag order, stored in natural order.
fn read_dqt(cur: &mut Cursor, quant: &mut [Option<[u16; 64]>; 4]) -> Result<()> {
    let mut length = i64::from(cur.u16()?) - 2;
    while length > 0 {
        let n = cur.byte()?;
        let wide = n >> 4 != 0;
        let Some(slot) = quant.get_mut(usize::from(n & 15)) else {
            return err(format!("bad DQT table index {}", n & 15));
        };
        let mut table = [0u16; 64];
        for &pos in NATURAL_ORDER.iter().take(64) {
            let value = if wide {
                cur.u16()?
            } else {
                u16::from(cur.byte()?)
            };
            if let Some(t) = table.get_mut(usize::from(pos)) {
                *t = value;
            }
        }
        *slot = Some(table);
        length -= if wide { 129 } else { 65 };
    }
    if length != 0 {
        return err("bad DQT segment length");
    }
    Ok(())
}

#[cfg(test)]
mod walker_tests {
    use super::*;

    /// SOI, APP0 (4 payload bytes), garbage, fill bytes, RST0, SOF0, SOS, entropy data, EOI.
    fn stream() -> Vec<u8> {
        let mut d = vec![0xFF, SOI];
        d.extend_from_slice(&[0xFF, 0xE0, 0, 6, 1, 2, 3, 4]);
        d.extend_from_slice(&[0x12, 0x34, 0xFF, 0x00]); // garbage and a stuffed FF 00
        d.extend_from_slice(&[0xFF, 0xFF, 0xFF, RST0]);
        d.extend_from_slice(&[0xFF, 0xC0, 0, 11, 8, 0, 16, 0, 32, 1, 1, 0x11, 0]);
        d.extend_from_slice(&[0xFF, SOS, 0, 8, 1, 1, 0, 0, 63, 0]);
        d.extend_from_slice(&[0xAB, 0xFF, 0x00, 0xCD, 0xFF, EOI]);
        d
    }

    #[test]
    fn walks_segments_over_garbage_fill_bytes_and_standalone_markers() {
        let d = stream();
        assert!(starts_with_soi(d.as_slice(), 0));
        let mut w = Walker::new(d.as_slice(), 2);
        let app = w.next_segment().unwrap();
        assert_eq!((app.marker, app.len), (0xE0, 6));
        assert_eq!(app.payload(&d), Some(&[1u8, 2, 3, 4][..]));
        let sof = w.next_segment().unwrap();
        assert_eq!(sof.marker, 0xC0);
        assert!(is_frame_header(sof.marker) && is_sof(sof.marker));
        let p = sof.payload(&d).unwrap();
        assert_eq!((p[0], u16::from_be_bytes([p[1], p[2]])), (8, 16));
        assert_eq!(w.next_segment().unwrap().marker, SOS);
        // Entropy data: FF 00 is not a marker, the walk ends on EOI.
        let eoi = w.next_segment().unwrap();
        assert_eq!((eoi.marker, eoi.len), (EOI, 0));
        assert_eq!(w.next_segment(), Err(WalkError::Truncated));
    }

    #[test]
    fn reports_truncation_short_lengths_and_an_exhausted_budget() {
        let d = stream();
        // Cut inside the SOF's length field.
        let cut = &d[..d.iter().position(|&b| b == 0xC0).unwrap() + 2];
        let mut w = Walker::new(cut, 2);
        assert_eq!(w.next_segment().map(|s| s.marker), Ok(0xE0));
        assert_eq!(w.next_segment(), Err(WalkError::Truncated));
        let bad = [0xFF, SOI, 0xFF, 0xDB, 0, 1];
        let mut w = Walker::new(&bad[..], 2);
        assert_eq!(
            w.next_segment(),
            Err(WalkError::Length {
                marker: 0xDB,
                len: 1
            })
        );
        // Garbage longer than the budget.
        let mut long = vec![0xFF, SOI];
        long.extend(std::iter::repeat_n(0x55, 100));
        long.extend_from_slice(&[0xFF, EOI]);
        let mut w = Walker::new(long.as_slice(), 2).with_budget(50);
        assert_eq!(w.next_segment(), Err(WalkError::Budget));
        let mut w = Walker::new(long.as_slice(), 2).with_budget(200);
        assert_eq!(w.next_segment().map(|s| s.marker), Ok(EOI));
        assert!(w.budget_left() < 200 - 100);
    }

    #[test]
    fn jpeg_ls_frame_headers_count_as_frame_headers() {
        assert!(is_frame_header(SOF55));
        assert!(!is_sof(SOF55));
        for m in [0xC4, 0xC8, 0xCC, SOS, 0xE0] {
            assert!(!is_frame_header(m), "{m:#x}");
        }
    }
}
