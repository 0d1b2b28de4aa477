//! Huffman tables and the entropy-coded-segment bit reader, following IJG 6b `jdhuff.c`.
//!
//! The reader reproduces IJG's behaviour on damaged data, because DCMTK's output for such
//! files is defined by it: when a marker interrupts the segment, missing bits read as zeros
//! and the "insufficient data" flag makes the following MCUs stay zero until the next restart;
//! an invalid code consumes 17 bits and yields symbol 0.

use super::markers;
use super::{err, Result};

/// Huffman table as transmitted in a DHT segment.
#[derive(Debug, Clone)]
pub(super) struct HuffSpec {
    /// `bits[l]` = number of codes of length `l` (index 0 unused).
    pub bits: [u8; 17],
    pub vals: Vec<u8>,
}

/// Bits looked up at once; longer codes take the bit-serial path.
const LOOKAHEAD: u32 = 10;

/// Derived decoding table (IJG `d_derived_tbl`).
pub(super) struct HuffTable {
    /// `(code length << 8) | symbol` for the next LOOKAHEAD bits; 0 = longer code.
    lookup: [u16; 1 << LOOKAHEAD],
    /// Largest code of each length, -1 when there is none; `[17]` is IJG's sentinel.
    maxcode: [i32; 18],
    /// Index of a length's first symbol minus its first code.
    valoffset: [i32; 17],
    vals: [u8; 256],
    /// For AC use: `(value << 16) | (run << 8) | bits consumed` when a code and its
    /// magnitude bits both fit in the lookahead window; 0 otherwise.
    ac_fast: [i32; 1 << LOOKAHEAD],
}

impl HuffTable {
    /// IJG `jpeg_make_d_derived_tbl`, with the same fatal checks.
    pub fn build(spec: &HuffSpec) -> Result<Self> {
        let (huffsize, huffcode) = canonical_codes(&spec.bits)?;
        let mut table = HuffTable {
            lookup: [0; 1 << LOOKAHEAD],
            maxcode: [-1; 18],
            valoffset: [0; 17],
            vals: [0; 256],
            ac_fast: [0; 1 << LOOKAHEAD],
        };
        for (dst, &v) in table.vals.iter_mut().zip(&spec.vals) {
            *dst = v;
        }
        let mut p = 0usize;
        for l in 1..=16usize {
            let n = usize::from(spec.bits[l]);
            if n == 0 {
                continue;
            }
            table.valoffset[l] = p as i32 - code_at(&huffcode, p);
            p += n;
            table.maxcode[l] = code_at(&huffcode, p - 1);
        }
        table.maxcode[17] = 0xF_FFFF;
        table.fill_lookup(&huffsize, &huffcode);
        table.fill_ac_fast();
        Ok(table)
    }

    /// Precomputes AC coefficients whose code + magnitude bits fit in LOOKAHEAD bits.
    fn fill_ac_fast(&mut self) {
        for (look, fast) in self.ac_fast.iter_mut().enumerate() {
            let entry = self.lookup.get(look).copied().unwrap_or(0);
            let len = u32::from(entry >> 8);
            let sym = entry & 0xFF;
            let (run, size) = (u32::from(sym >> 4), u32::from(sym & 15));
            if len == 0 || size == 0 || len + size > LOOKAHEAD {
                continue;
            }
            let raw = ((look as u32) >> (LOOKAHEAD - len - size)) & ((1 << size) - 1);
            let value = extend(raw as i32, size);
            *fast = (value << 16) | (run << 8) as i32 | (len + size) as i32;
        }
    }

    fn fill_lookup(&mut self, huffsize: &[u8; 257], huffcode: &[u32; 257]) {
        for (p, (&len, &code)) in huffsize.iter().zip(huffcode).enumerate() {
            let len = u32::from(len);
            if len == 0 || len > LOOKAHEAD {
                break; // sizes are sorted, so every later code is longer too
            }
            let sym = u16::from(self.vals.get(p).copied().unwrap_or(0));
            let first = (code << (LOOKAHEAD - len)) as usize;
            let count = 1usize << (LOOKAHEAD - len);
            if let Some(slots) = self.lookup.get_mut(first..first + count) {
                slots.fill(((len as u16) << 8) | sym);
            }
        }
    }
}

fn code_at(huffcode: &[u32; 257], p: usize) -> i32 {
    huffcode.get(p).map_or(0, |&c| c as i32)
}

/// Figures C.1 and C.2 of the standard: code length and code of every symbol, rejecting
/// tables whose counts overflow the code space (IJG's JERR_BAD_HUFF_TABLE).
fn canonical_codes(bits: &[u8; 17]) -> Result<([u8; 257], [u32; 257])> {
    let mut huffsize = [0u8; 257];
    let mut p = 0usize;
    for (l, &n) in bits.iter().enumerate().skip(1) {
        for _ in 0..n {
            let Some(slot) = huffsize.get_mut(p).filter(|_| p < 256) else {
                return err("bad Huffman table (more than 256 codes)");
            };
            *slot = l as u8;
            p += 1;
        }
    }
    let mut huffcode = [0u32; 257];
    let mut code = 0u32;
    let mut si = u32::from(huffsize[0]);
    let mut p = 0usize;
    while huffsize.get(p).copied().unwrap_or(0) != 0 {
        while u32::from(huffsize.get(p).copied().unwrap_or(0)) == si {
            if let Some(c) = huffcode.get_mut(p) {
                *c = code;
            }
            p += 1;
            code += 1;
        }
        if code > 1 << si {
            return err("bad Huffman table (code space overflow)");
        }
        code <<= 1;
        si += 1;
    }
    Ok((huffsize, huffcode))
}

/// Hot bit-buffer state, kept in registers by the block decoder (IJG's
/// BITREAD_LOAD_STATE / BITREAD_SAVE_STATE).
#[derive(Clone, Copy, Default)]
pub(super) struct Bits {
    /// Pending bits, left-aligned; the bits below `nbits` are zero.
    buf: u64,
    /// Real (not zero-filled) bits in `buf`.
    nbits: u32,
    /// IJG `insufficient_data`: bits past a marker were consumed in this segment.
    pub insufficient: bool,
}

impl Bits {
    #[inline(always)]
    fn peek(&self, n: u32) -> u32 {
        (self.buf >> (64 - n)) as u32
    }

    /// Consumes `n` bits; past a marker they are zeros and flag the segment as short.
    #[inline(always)]
    fn consume(&mut self, n: u32) {
        if n > self.nbits {
            self.insufficient = true;
            self.buf = 0;
            self.nbits = 0;
        } else {
            self.buf <<= n;
            self.nbits -= n;
        }
    }
}

/// True when one of the eight bytes of `word` is 0xFF (a marker or stuffed byte).
#[inline(always)]
fn has_ff_byte(word: u64) -> bool {
    let x = !word;
    (x.wrapping_sub(0x0101_0101_0101_0101) & !x & 0x8080_8080_8080_8080) != 0
}

/// Reads entropy-coded data: removes FF00 stuffing, stops at the first marker.
pub(super) struct BitReader<'a> {
    data: &'a [u8],
    pos: usize,
    /// Marker that ended the segment (IJG `unread_marker`).
    marker: Option<u8>,
    /// The data ended without a marker: a bit needed past it is IJG's suspension, which
    /// DCMTK reports as an incomplete stream (see [`truncated`]).
    eof: bool,
    pub bits: Bits,
}

/// The error of a bit needed past the end of the data (DCMTK: the frame's data is
/// incomplete; its `+wi` workaround keeps the rows decoded before).
pub(super) fn truncated<T>() -> Result<T> {
    Err(super::JpegError::truncated(
        "truncated JPEG stream (entropy-coded data ends without a marker)",
    ))
}

impl<'a> BitReader<'a> {
    pub fn new(data: &'a [u8], pos: usize) -> Self {
        BitReader {
            data,
            pos,
            marker: None,
            eof: false,
            bits: Bits::default(),
        }
    }

    /// Byte position after the consumed data, and the marker that stopped the reader.
    pub fn into_parts(self) -> (usize, Option<u8>) {
        (self.pos, self.marker)
    }

    /// Fails when `n` bits are needed and the data ended before them (no marker).
    #[inline(always)]
    fn need(&self, bits: &Bits, n: u32) -> Result<()> {
        if n > bits.nbits && self.eof {
            return truncated();
        }
        Ok(())
    }

    /// Common case of a refill: the next eight bytes hold no 0xFF (no marker, no stuffing),
    /// so whole bytes can be appended at once. False when the general path is needed.
    #[inline(always)]
    fn refill_fast(&mut self, bits: &mut Bits) -> bool {
        let Some(chunk) = self.data.get(self.pos..self.pos + 8) else {
            return false;
        };
        let Ok(bytes) = <[u8; 8]>::try_from(chunk) else {
            return false;
        };
        let word = u64::from_be_bytes(bytes);
        if has_ff_byte(word) {
            return false;
        }
        let take = (64 - bits.nbits) / 8; // 1..=8 whole bytes fit
        let kept = if take == 8 {
            word
        } else {
            word >> (64 - 8 * take) << (64 - 8 * take)
        };
        bits.buf |= kept >> bits.nbits;
        bits.nbits += 8 * take;
        self.pos += take as usize;
        true
    }

    /// Loads bytes one at a time until at least 57 bits are buffered or a marker is
    /// reached, handling FF00 stuffing and fill bytes. Takes and returns the state by value
    /// so that callers can keep it in registers.
    #[inline(never)]
    fn refill(&mut self, mut bits: Bits) -> Result<Bits> {
        while bits.nbits <= 56 && self.marker.is_none() && !self.eof {
            let Some(&first) = self.data.get(self.pos) else {
                self.eof = true;
                break;
            };
            let mut byte = first;
            let mut at = self.pos + 1;
            if byte == 0xFF {
                // Fill bytes, then a marker code or the 00 of a stuffed FF.
                while self.data.get(at) == Some(&0xFF) {
                    at += 1;
                }
                let Some(&next) = self.data.get(at) else {
                    self.eof = true; // the data ends inside a marker: nothing more to read
                    break;
                };
                at += 1;
                if next != 0 {
                    self.pos = at;
                    self.marker = Some(next);
                    break;
                }
                byte = 0xFF; // FF00 = one FF data byte
            }
            self.pos = at;
            bits.buf |= u64::from(byte) << (56 - bits.nbits);
            bits.nbits += 8;
        }
        Ok(bits)
    }

    #[inline(always)]
    fn ensure(&mut self, bits: &mut Bits, n: u32) -> Result<()> {
        if bits.nbits < n && self.marker.is_none() && !self.eof && !self.refill_fast(bits) {
            *bits = self.refill(*bits)?;
        }
        Ok(())
    }

    /// Decodes one Huffman symbol (IJG `HUFF_DECODE` + `jpeg_huff_decode`).
    #[inline(always)]
    pub fn decode(&mut self, bits: &mut Bits, table: &HuffTable) -> Result<u8> {
        self.ensure(bits, 17)?;
        let entry = table
            .lookup
            .get(bits.peek(LOOKAHEAD) as usize)
            .copied()
            .unwrap_or(0);
        if entry != 0 {
            self.need(bits, u32::from(entry >> 8))?;
            bits.consume(u32::from(entry >> 8));
            return Ok(entry as u8);
        }
        decode_slow(bits, table, self.eof)
    }

    /// Decodes one AC coefficient when code and magnitude fit in the lookahead window.
    /// Returns `(run, value)`, or None to take the general path.
    #[inline(always)]
    pub fn decode_ac_fast(
        &mut self,
        bits: &mut Bits,
        table: &HuffTable,
    ) -> Result<Option<(usize, i16)>> {
        self.ensure(bits, 17)?;
        let entry = table
            .ac_fast
            .get(bits.peek(LOOKAHEAD) as usize)
            .copied()
            .unwrap_or(0);
        if entry == 0 {
            return Ok(None);
        }
        self.need(bits, (entry & 0xFF) as u32)?;
        bits.consume((entry & 0xFF) as u32);
        Ok(Some((((entry >> 8) & 0xFF) as usize, (entry >> 16) as i16)))
    }

    /// Reads `s` (1..=16) magnitude bits and sign-extends them (IJG `HUFF_EXTEND`).
    #[inline(always)]
    pub fn receive_extend(&mut self, bits: &mut Bits, s: u32) -> Result<i32> {
        self.ensure(bits, s)?;
        self.need(bits, s)?;
        let v = bits.peek(s) as i32;
        bits.consume(s);
        Ok(extend(v, s))
    }

    /// IJG `process_restart` + `read_restart_marker` + `jpeg_resync_to_restart`.
    /// Returns after positioning the reader at the start of the next segment.
    pub fn restart(&mut self, expected: u8) -> Result<()> {
        let insufficient = self.bits.insufficient;
        self.bits = Bits {
            insufficient,
            ..Bits::default()
        };
        let found = match self.marker {
            Some(m) => m,
            None => markers::next_marker(self.data, &mut self.pos)?,
        };
        self.marker = Some(found);
        if found == markers::RST0 + expected {
            self.marker = None;
        } else {
            self.resync(expected)?;
        }
        if self.marker.is_none() {
            self.bits.insufficient = false;
        }
        Ok(())
    }

    /// IJG `jpeg_resync_to_restart`: acts on the unexpected marker until the reader can
    /// resume (the marker dropped) or must stop (the marker kept, so that the next segment
    /// reads as empty).
    fn resync(&mut self, desired: u8) -> Result<()> {
        while let Some(marker) = self.marker {
            match resync_action(marker, desired) {
                Resync::Drop => self.marker = None,
                Resync::ScanAhead => {
                    self.marker = Some(markers::next_marker(self.data, &mut self.pos)?)
                }
                Resync::Keep => break,
            }
        }
        Ok(())
    }
}

/// What `jpeg_resync_to_restart` does with a marker found where RSTn was expected.
enum Resync {
    /// Discard it and let the entropy decoder resume.
    Drop,
    /// Skip to the next marker and decide again.
    ScanAhead,
    /// Leave it unread; the decoder sees an empty segment.
    Keep,
}

fn resync_action(marker: u8, desired: u8) -> Resync {
    let rst = |delta: u8| markers::RST0 + (desired.wrapping_add(delta) & 7);
    if marker < 0xC0 {
        return Resync::ScanAhead; // not a valid marker code
    }
    if !(markers::RST0..=markers::RST7).contains(&marker) {
        return Resync::Keep; // a real marker: the scan's data ends here
    }
    if marker == rst(1) || marker == rst(2) {
        Resync::Keep // one of the next two restarts: some data was lost
    } else if marker == rst(7) || marker == rst(6) {
        Resync::ScanAhead // one of the previous two restarts: skip ahead
    } else {
        Resync::Drop // the desired restart, or too far away to judge
    }
}

/// IJG `HUFF_EXTEND`: `s` magnitude bits to a signed value.
#[inline(always)]
fn extend(v: i32, s: u32) -> i32 {
    if v < 1 << (s - 1) {
        v - (1 << s) + 1
    } else {
        v
    }
}

/// Codes longer than the lookahead window, bit by bit (IJG `jpeg_huff_decode`). `eof`: the
/// data ended without a marker, so a bit past `bits.nbits` does not exist.
#[inline(never)]
fn decode_slow(bits: &mut Bits, table: &HuffTable, eof: bool) -> Result<u8> {
    let mut l = LOOKAHEAD + 1;
    let mut code = bits.peek(l) as i32;
    while l <= 16 && code > table.maxcode[l as usize] {
        l += 1;
        code = bits.peek(l) as i32;
    }
    if eof && l.min(17) > bits.nbits {
        return truncated();
    }
    if l > 16 {
        // IJG: "Corrupt JPEG data: bad Huffman code"; 17 bits are gone, symbol 0.
        bits.consume(17);
        return Ok(0);
    }
    bits.consume(l);
    let index = code + table.valoffset[l as usize];
    match usize::try_from(index).ok().and_then(|i| table.vals.get(i)) {
        Some(&v) => Ok(v),
        None => err("corrupt Huffman code"),
    }
}
