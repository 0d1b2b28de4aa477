//! One zlib stream (RFC 1950) from raw deflate pieces (RFC 1951) compressed separately, as a
//! batched GPU compressor (nvCOMP) produces them: each piece is a complete deflate stream whose
//! last block is marked final, and a decoder stops at the first final block. [`stitch`] joins
//! them: in every piece but the last it clears the final block's BFINAL bit, zeroes the padding
//! bits after its end-of-block code, and appends an empty stored block (`00 00 FF FF`, with one
//! more zero byte when fewer than 3 padding bits are left for its header), which realigns the
//! stream to a byte boundary, where the next piece's first block header begins. Finding the
//! final block and its end needs a walk through the piece's Huffman codes ([`scan`]); nothing
//! is decoded into memory. The Adler-32 of the whole is combined from the pieces' checksums
//! ([`adler32_combine`], zlib's formula), so no pass over the uncompressed data is needed here.
//!
//! The GPU encoder takes another route to one stream (nvCOMP's gzip compressor joins its parts
//! itself, the same way); [`zlib_from_gzip`] is the CPU twin of its gzip-to-zlib rewrite
//! (`kernels/zlib.cu`). [`stitch`] is how separately compressed chunks (nvCOMP's batched
//! Deflate, measured slower) are joined, and both assemble other encoders' streams in the tests.

/// Why a deflate piece cannot be stitched.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ZlibError {
    /// The stream ends before its final block does.
    #[error("deflate stream ends inside a block (bit {0})")]
    Truncated(u64),
    /// Block type 3 is reserved.
    #[error("deflate stream: reserved block type at bit {0}")]
    ReservedBlockType(u64),
    /// A stored block's length and its complement disagree.
    #[error("deflate stream: stored block length does not match its complement at bit {0}")]
    StoredLength(u64),
    /// A dynamic block's code lengths do not form a usable Huffman code.
    #[error("deflate stream: invalid Huffman code table at bit {0}")]
    BadTable(u64),
    /// Bits that are no code of the block's Huffman table, or a symbol deflate does not use.
    #[error("deflate stream: invalid code at bit {0}")]
    BadCode(u64),
    /// Bytes follow the final block.
    #[error("deflate stream: {0} bytes after the final block")]
    TrailingBytes(usize),
    /// Not a gzip member with a bare 10-byte header and an ISIZE of the expected length.
    #[error("gzip member: {0}")]
    Gzip(&'static str),
}

/// Where a complete deflate stream's final block starts and ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DeflateLayout {
    /// Blocks in the stream.
    pub blocks: u32,
    /// Blocks of each type: stored, fixed Huffman, dynamic Huffman.
    pub block_types: [u32; 3],
    /// Bit offset of the final block's header (its BFINAL bit).
    pub final_header_bit: u64,
    /// Bit offset just past the final block's end-of-block code (or stored data).
    pub end_bit: u64,
}

/// The modulus of Adler-32.
const ADLER_BASE: u32 = 65_521;

/// Adler-32 of `data` (the checksum a zlib stream ends with).
pub fn adler32(data: &[u8]) -> u32 {
    let mut h = simd_adler32::Adler32::new();
    h.write(data);
    h.finish()
}

/// The Adler-32 of `a ++ b` from `adler(a)`, `adler(b)` and `b`'s length: zlib's
/// `adler32_combine`.
pub fn adler32_combine(adler_a: u32, adler_b: u32, len_b: u64) -> u32 {
    let base = u64::from(ADLER_BASE);
    let rem = len_b % base;
    let a1 = u64::from(adler_a & 0xffff);
    let b1 = u64::from(adler_a >> 16);
    let a2 = u64::from(adler_b & 0xffff);
    let b2 = u64::from(adler_b >> 16);
    // a = a1 + a2 - 1; b = b1 + b2 + rem * a1 - rem (mod base), kept non-negative.
    let sum1 = (a1 + a2 + base - 1) % base;
    let sum2 = (rem * a1 % base + b1 + b2 + base - rem) % base;
    (sum1 | (sum2 << 16)) as u32
}

/// The zlib header for a stream with a 32 KiB window: `78 01` (fastest compressor), `78 5E`,
/// `78 9C` (default) or `78 DA` (best), as `level` 0–3 says; decoders ignore the level, it is
/// information only.
pub fn zlib_header(level: u8) -> [u8; 2] {
    let flevel = level.min(3);
    let cmf = 0x78u8;
    let flg = flevel << 6;
    // FCHECK makes CMF * 256 + FLG a multiple of 31.
    let check = 31 - ((u16::from(cmf) << 8 | u16::from(flg)) % 31);
    [cmf, flg | (check % 31) as u8]
}

/// An empty stored block whose 3 header bits follow the previous block's end at a bit offset
/// `used` (0–7) into its last byte: in the zero padding when 3 bits are left, else in one more
/// zero byte; then LEN = 0 and NLEN = 0xFFFF at the next byte boundary.
pub fn empty_stored_block(used: u32) -> &'static [u8] {
    const SHORT: [u8; 4] = [0x00, 0x00, 0xff, 0xff];
    const LONG: [u8; 5] = [0x00, 0x00, 0x00, 0xff, 0xff];
    let free = if used == 0 { 0 } else { 8 - used };
    if free >= 3 {
        &SHORT
    } else {
        &LONG
    }
}

/// The zlib stream of a gzip member (RFC 1952) of `total` input bytes whose Adler-32 is
/// `adler`: the zlib header of `level` ([`zlib_header`]), the member's Deflate body, the
/// checksum. Only a bare 10-byte header (FLG 0, as nvCOMP writes) is taken, and ISIZE must be
/// `total` (mod 2^32), so a stream of several members is refused rather than cut short.
pub fn zlib_from_gzip(
    member: &[u8],
    total: u64,
    adler: u32,
    level: u8,
    out: &mut Vec<u8>,
) -> Result<(), ZlibError> {
    if member.len() < 18 || member[..3] != [0x1f, 0x8b, 8] {
        return Err(ZlibError::Gzip("not a gzip member of Deflate data"));
    }
    if member[3] != 0 {
        return Err(ZlibError::Gzip("header has optional fields"));
    }
    let trailer = &member[member.len() - 8..];
    let isize = u32::from_le_bytes([trailer[4], trailer[5], trailer[6], trailer[7]]);
    if u64::from(isize) != total & 0xffff_ffff {
        return Err(ZlibError::Gzip("ISIZE is not the input size"));
    }
    out.extend_from_slice(&zlib_header(level));
    out.extend_from_slice(&member[10..member.len() - 8]);
    out.extend_from_slice(&adler.to_be_bytes());
    Ok(())
}

/// Appends to `out` one raw deflate stream made of `pieces`, each a complete deflate stream
/// (see the module documentation). The result decodes to the pieces' data concatenated.
pub fn stitch<'a>(
    pieces: impl IntoIterator<Item = &'a [u8]>,
    out: &mut Vec<u8>,
) -> Result<(), ZlibError> {
    let mut pieces = pieces.into_iter().peekable();
    while let Some(piece) = pieces.next() {
        let layout = scan(piece)?;
        let start = out.len();
        out.extend_from_slice(piece);
        if pieces.peek().is_none() {
            break;
        }
        join_at(out, start, &layout);
    }
    Ok(())
}

/// Turns the stream just copied to `out[start..]` (laid out as `layout` says) into one that
/// continues: BFINAL cleared, padding zeroed, an empty stored block appended.
pub fn join_at(out: &mut Vec<u8>, start: usize, layout: &DeflateLayout) {
    let fh = layout.final_header_bit;
    out[start + (fh / 8) as usize] &= !(1u8 << (fh % 8));
    let used = (layout.end_bit % 8) as u32;
    if used != 0 {
        let last = start + (layout.end_bit / 8) as usize;
        out[last] &= (1u8 << used) - 1;
    }
    out.extend_from_slice(empty_stored_block(used));
}

/// Walks a complete raw deflate stream block by block, decoding its Huffman codes without
/// producing output, and says where its final block begins and ends. Bytes after the final
/// block are an error (a piece must be exactly one stream).
pub fn scan(stream: &[u8]) -> Result<DeflateLayout, ZlibError> {
    let mut r = BitReader::new(stream);
    let mut layout = DeflateLayout::default();
    let fixed = fixed_tables();
    let mut dynamic: Option<(Huffman, Huffman)> = None;
    loop {
        let header = r.pos;
        let last = r.bits(1)? == 1;
        let kind = r.bits(2)?;
        layout.blocks += 1;
        match kind {
            0 => {
                layout.block_types[0] += 1;
                r.align();
                let at = r.pos;
                let len = r.bits(16)?;
                let nlen = r.bits(16)?;
                if len != !nlen & 0xffff {
                    return Err(ZlibError::StoredLength(at));
                }
                r.skip_bytes(len as usize)?;
            }
            1 => {
                layout.block_types[1] += 1;
                walk_codes(&mut r, &fixed.0, &fixed.1)?;
            }
            2 => {
                layout.block_types[2] += 1;
                let tables = read_dynamic(&mut r, dynamic.take())?;
                walk_codes(&mut r, &tables.0, &tables.1)?;
                dynamic = Some(tables);
            }
            _ => return Err(ZlibError::ReservedBlockType(header)),
        }
        if last {
            layout.final_header_bit = header;
            layout.end_bit = r.pos;
            let used = r.pos.div_ceil(8) as usize;
            if used < stream.len() {
                return Err(ZlibError::TrailingBytes(stream.len() - used));
            }
            return Ok(layout);
        }
    }
}

/// Reads bits least significant first, as deflate packs them.
struct BitReader<'a> {
    data: &'a [u8],
    /// Position in bits.
    pos: u64,
}

impl<'a> BitReader<'a> {
    fn new(data: &'a [u8]) -> Self {
        BitReader { data, pos: 0 }
    }

    fn total_bits(&self) -> u64 {
        self.data.len() as u64 * 8
    }

    /// Up to 32 bits from the current position, zero beyond the end (not consumed).
    fn peek(&self) -> u32 {
        let byte = (self.pos / 8) as usize;
        let mut v = 0u64;
        for (i, &b) in self.data.iter().skip(byte).take(5).enumerate() {
            v |= u64::from(b) << (8 * i);
        }
        (v >> (self.pos % 8)) as u32
    }

    fn consume(&mut self, n: u32) -> Result<(), ZlibError> {
        if self.pos + u64::from(n) > self.total_bits() {
            return Err(ZlibError::Truncated(self.pos));
        }
        self.pos += u64::from(n);
        Ok(())
    }

    /// `n` ≤ 16 bits as a number.
    fn bits(&mut self, n: u32) -> Result<u32, ZlibError> {
        let v = self.peek() & ((1u32 << n) - 1);
        self.consume(n)?;
        Ok(v)
    }

    fn align(&mut self) {
        self.pos = self.pos.div_ceil(8) * 8;
    }

    fn skip_bytes(&mut self, n: usize) -> Result<(), ZlibError> {
        let end = self.pos + 8 * n as u64;
        if end > self.total_bits() {
            return Err(ZlibError::Truncated(self.pos));
        }
        self.pos = end;
        Ok(())
    }
}

/// Bits of the direct lookup table; longer codes take the canonical slow path.
const FAST_BITS: u32 = 9;

/// A canonical Huffman code: counts per length and symbols in code order (as zlib's `puff`),
/// plus a direct table for codes up to [`FAST_BITS`].
struct Huffman {
    count: [u16; 16],
    symbol: Vec<u16>,
    /// Indexed by the next FAST_BITS stream bits: `symbol << 4 | length`, or 0 when the code
    /// is longer (or absent).
    fast: Vec<u16>,
}

impl Huffman {
    /// Builds the code of `lengths` (0 = unused symbol). Incomplete codes are accepted (deflate
    /// allows a single distance code); over-subscribed ones are not.
    fn new(lengths: &[u8], reuse: Option<Huffman>) -> Option<Huffman> {
        let mut h = reuse.unwrap_or_else(|| Huffman {
            count: [0; 16],
            symbol: Vec::new(),
            fast: vec![0; 1 << FAST_BITS],
        });
        h.count = [0; 16];
        for &l in lengths {
            h.count[l as usize] += 1;
        }
        let mut left: i32 = 1;
        for len in 1..16 {
            left <<= 1;
            left -= i32::from(h.count[len]);
            if left < 0 {
                return None;
            }
        }
        let mut offs = [0u16; 16];
        for len in 1..15 {
            offs[len + 1] = offs[len] + h.count[len];
        }
        h.symbol.clear();
        h.symbol.resize(lengths.len(), 0);
        for (sym, &l) in lengths.iter().enumerate() {
            if l != 0 {
                h.symbol[offs[l as usize] as usize] = sym as u16;
                offs[l as usize] += 1;
            }
        }
        // Canonical codes, bit-reversed into stream order, for the direct table.
        h.fast.iter_mut().for_each(|e| *e = 0);
        let mut code = 0u32;
        let mut index = 0usize;
        for len in 1..=FAST_BITS {
            for _ in 0..h.count[len as usize] {
                let sym = h.symbol[index];
                let reversed = code.reverse_bits() >> (32 - len);
                let mut i = reversed as usize;
                while i < h.fast.len() {
                    h.fast[i] = sym << 4 | len as u16;
                    i += 1 << len;
                }
                code += 1;
                index += 1;
            }
            code <<= 1;
        }
        Some(h)
    }

    /// The next symbol.
    fn decode(&self, r: &mut BitReader) -> Result<u16, ZlibError> {
        let bits = r.peek();
        let e = self.fast[(bits & ((1 << FAST_BITS) - 1)) as usize];
        if e != 0 {
            r.consume(u32::from(e & 15))?;
            return Ok(e >> 4);
        }
        // zlib's `puff` decode: one bit at a time, comparing with the first code of each length.
        let (mut code, mut first, mut index) = (0i32, 0i32, 0i32);
        for len in 1..16u32 {
            code |= ((bits >> (len - 1)) & 1) as i32;
            let count = i32::from(self.count[len as usize]);
            if code - count < first {
                r.consume(len)?;
                return Ok(self.symbol[(index + code - first) as usize]);
            }
            index += count;
            first += count;
            first <<= 1;
            code <<= 1;
        }
        Err(ZlibError::BadCode(r.pos))
    }
}

/// Extra bits of length symbols 257..=285 and distance symbols 0..=29.
const LENGTH_EXTRA: [u8; 29] = [
    0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0,
];
const DIST_EXTRA: [u8; 30] = [
    0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13,
    13,
];

fn fixed_tables() -> (Huffman, Huffman) {
    let mut lengths = [0u8; 288];
    lengths[..144].fill(8);
    lengths[144..256].fill(9);
    lengths[256..280].fill(7);
    lengths[280..].fill(8);
    // Both are complete codes: construction cannot fail.
    let lit = Huffman::new(&lengths, None).unwrap_or_else(|| unreachable!());
    let dist = Huffman::new(&[5u8; 30], None).unwrap_or_else(|| unreachable!());
    (lit, dist)
}

/// Reads a dynamic block's code tables (RFC 1951 3.2.7).
fn read_dynamic(
    r: &mut BitReader,
    reuse: Option<(Huffman, Huffman)>,
) -> Result<(Huffman, Huffman), ZlibError> {
    const ORDER: [usize; 19] = [
        16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15,
    ];
    let at = r.pos;
    let nlen = r.bits(5)? as usize + 257;
    let ndist = r.bits(5)? as usize + 1;
    let ncode = r.bits(4)? as usize + 4;
    if nlen > 286 || ndist > 30 {
        return Err(ZlibError::BadTable(at));
    }
    let mut code_lengths = [0u8; 19];
    for &i in ORDER.iter().take(ncode) {
        code_lengths[i] = r.bits(3)? as u8;
    }
    let (reuse_lit, reuse_dist) = match reuse {
        Some((l, d)) => (Some(l), Some(d)),
        None => (None, None),
    };
    let lencode = Huffman::new(&code_lengths, None).ok_or(ZlibError::BadTable(at))?;
    let mut lengths = [0u8; 316];
    let mut i = 0;
    while i < nlen + ndist {
        let sym = lencode.decode(r)?;
        if sym < 16 {
            lengths[i] = sym as u8;
            i += 1;
            continue;
        }
        let (value, repeat) = match sym {
            16 => {
                if i == 0 {
                    return Err(ZlibError::BadTable(at));
                }
                (lengths[i - 1], 3 + r.bits(2)? as usize)
            }
            17 => (0, 3 + r.bits(3)? as usize),
            _ => (0, 11 + r.bits(7)? as usize),
        };
        if i + repeat > nlen + ndist {
            return Err(ZlibError::BadTable(at));
        }
        lengths[i..i + repeat].fill(value);
        i += repeat;
    }
    if lengths[256] == 0 {
        return Err(ZlibError::BadTable(at));
    }
    let lit = Huffman::new(&lengths[..nlen], reuse_lit).ok_or(ZlibError::BadTable(at))?;
    let dist =
        Huffman::new(&lengths[nlen..nlen + ndist], reuse_dist).ok_or(ZlibError::BadTable(at))?;
    Ok((lit, dist))
}

/// Walks literal/length and distance codes up to the end-of-block code.
fn walk_codes(r: &mut BitReader, lit: &Huffman, dist: &Huffman) -> Result<(), ZlibError> {
    loop {
        let at = r.pos;
        let sym = lit.decode(r)?;
        match sym {
            0..=255 => {}
            256 => return Ok(()),
            257..=285 => {
                let extra = LENGTH_EXTRA[usize::from(sym - 257)];
                r.consume(u32::from(extra))?;
                let d = dist.decode(r)?;
                let extra = *DIST_EXTRA
                    .get(usize::from(d))
                    .ok_or(ZlibError::BadCode(at))?;
                r.consume(u32::from(extra))?;
            }
            _ => return Err(ZlibError::BadCode(at)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// Deterministic test data: smooth ramps, runs, noise and text-like bytes.
    fn data(kind: usize, len: usize) -> Vec<u8> {
        let mut state = 0x2545_f491_u32 ^ kind as u32;
        (0..len)
            .map(|i| {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                match kind % 4 {
                    0 => (i / 7 % 256) as u8,
                    1 => (state % 7) as u8 + if i % 500 < 250 { 0 } else { 100 },
                    2 => state as u8,
                    _ => b"the quick brown fox jumps over the lazy dog "[i % 44],
                }
            })
            .collect()
    }

    fn flate2_raw(input: &[u8], level: u32) -> Vec<u8> {
        let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::new(level));
        e.write_all(input).unwrap();
        e.finish().unwrap()
    }

    /// fdeflate writes zlib streams: strip the 2-byte header and the Adler-32.
    fn fdeflate_raw(input: &[u8]) -> Vec<u8> {
        let z = fdeflate::compress_to_vec(input);
        z[2..z.len() - 4].to_vec()
    }

    fn inflate_zlib(z: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        flate2::read::ZlibDecoder::new(z)
            .read_to_end(&mut out)
            .unwrap();
        out
    }

    #[test]
    fn adler32_combine_matches_the_checksum_of_the_whole() {
        let whole = data(0, 100_000);
        for split in [0, 1, 5552, 65_521, 65_536, 99_999, 100_000] {
            let (a, b) = whole.split_at(split);
            assert_eq!(
                adler32_combine(adler32(a), adler32(b), b.len() as u64),
                adler32(&whole),
                "split at {split}"
            );
        }
        // Against adler2's independent implementation.
        assert_eq!(adler32(&whole), adler2::adler32_slice(&whole));
        assert_eq!(adler32(&[]), 1);
    }

    #[test]
    fn zlib_headers_pass_the_fcheck() {
        for level in 0..4 {
            let h = zlib_header(level);
            assert_eq!((u16::from(h[0]) << 8 | u16::from(h[1])) % 31, 0);
            assert_eq!(h[1] >> 6, level);
        }
        assert_eq!(zlib_header(2), [0x78, 0x9c]);
        assert_eq!(zlib_header(3), [0x78, 0xda]);
    }

    #[test]
    fn scan_finds_the_end_of_streams_from_other_encoders() {
        for kind in 0..4 {
            for len in [0usize, 1, 100, 70_000] {
                let input = data(kind, len);
                for stream in [
                    flate2_raw(&input, 0),
                    flate2_raw(&input, 1),
                    flate2_raw(&input, 6),
                    flate2_raw(&input, 9),
                    fdeflate_raw(&input),
                ] {
                    let layout = scan(&stream).unwrap();
                    assert_eq!(layout.end_bit.div_ceil(8), stream.len() as u64);
                    assert!(layout.final_header_bit < layout.end_bit);
                    assert_eq!(layout.block_types.iter().sum::<u32>(), layout.blocks);
                }
            }
        }
    }

    #[test]
    fn stitched_pieces_decode_to_the_whole_with_zlib_and_png_tools() {
        let whole: Vec<u8> = (0..6).flat_map(|k| data(k, 40_000 + 777 * k)).collect();
        // Pieces of varied sizes (64 KiB as nvCOMP uses, and odd ones), each compressed alone
        // by a different encoder and level, so every padding width occurs.
        for chunk in [65_536usize, 1000, 12_345] {
            let mut pieces = Vec::new();
            for (i, part) in whole.chunks(chunk).enumerate() {
                pieces.push(match i % 5 {
                    0 => flate2_raw(part, 1),
                    1 => fdeflate_raw(part),
                    2 => flate2_raw(part, 9),
                    3 => flate2_raw(part, 0),
                    _ => flate2_raw(part, 4),
                });
            }
            let mut z = zlib_header(0).to_vec();
            stitch(pieces.iter().map(Vec::as_slice), &mut z).unwrap();
            let adler = whole
                .chunks(chunk)
                .fold(1, |acc, p| adler32_combine(acc, adler32(p), p.len() as u64));
            z.extend_from_slice(&adler.to_be_bytes());
            assert_eq!(inflate_zlib(&z), whole, "chunks of {chunk}");
            // The stitched stream is itself one complete deflate stream.
            scan(&z[2..z.len() - 4]).unwrap();
        }
    }

    #[test]
    fn every_padding_width_gets_a_valid_empty_block() {
        // Short pieces end at every bit offset within their last byte; a stitched stream must
        // decode whatever the offset.
        let mut seen = [false; 8];
        for kind in 0..4 {
            for n in 1..60usize {
                let input = data(kind, n);
                for piece in [
                    flate2_raw(&input, 1),
                    flate2_raw(&input, 9),
                    fdeflate_raw(&input),
                ] {
                    let layout = scan(&piece).unwrap();
                    seen[(layout.end_bit % 8) as usize] = true;
                    let mut z = zlib_header(0).to_vec();
                    stitch([piece.as_slice(), piece.as_slice()], &mut z).unwrap();
                    let both = [input.clone(), input.clone()].concat();
                    z.extend_from_slice(&adler32(&both).to_be_bytes());
                    assert_eq!(inflate_zlib(&z), both, "{n} bytes of kind {kind}");
                }
            }
        }
        assert_eq!(seen, [true; 8]);
    }

    #[test]
    fn gzip_members_become_zlib_streams() {
        let input = data(1, 150_000);
        for level in [0, 1, 6, 9] {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(level));
            e.write_all(&input).unwrap();
            let member = e.finish().unwrap();
            // The checksum combined from 64 KiB chunks, as the GPU computes it.
            let adler = input
                .chunks(65_536)
                .fold(1, |a, c| adler32_combine(a, adler32(c), c.len() as u64));
            let mut z = Vec::new();
            zlib_from_gzip(&member, input.len() as u64, adler, 0, &mut z).unwrap();
            assert_eq!(inflate_zlib(&z), input, "level {level}");
            assert_eq!(z.len(), member.len() - 12);
        }
        let mut e = flate2::GzBuilder::new()
            .filename("x")
            .write(Vec::new(), flate2::Compression::fast());
        e.write_all(b"abc").unwrap();
        let named = e.finish().unwrap();
        let mut z = Vec::new();
        assert!(zlib_from_gzip(&named, 3, adler32(b"abc"), 0, &mut z).is_err());
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(b"abc").unwrap();
        let bare = e.finish().unwrap();
        // Two members: the second's ISIZE is not the whole input's.
        let two = [bare.clone(), bare.clone()].concat();
        assert_eq!(
            zlib_from_gzip(&two, 6, adler32(b"abcabc"), 0, &mut z),
            Err(ZlibError::Gzip("ISIZE is not the input size"))
        );
        assert!(zlib_from_gzip(&bare[..10], 3, 1, 0, &mut z).is_err());
    }

    #[test]
    fn nonzero_padding_is_cleared_before_the_join() {
        let input = data(0, 300);
        let mut piece = flate2_raw(&input, 6);
        let layout = scan(&piece).unwrap();
        let used = (layout.end_bit % 8) as u32;
        if used != 0 {
            let last = piece.len() - 1;
            piece[last] |= !((1u8 << used) - 1);
        }
        let mut z = zlib_header(0).to_vec();
        stitch([piece.as_slice(), piece.as_slice()], &mut z).unwrap();
        let both = [input.clone(), input].concat();
        z.extend_from_slice(&adler32(&both).to_be_bytes());
        assert_eq!(inflate_zlib(&z), both);
    }

    #[test]
    fn broken_pieces_are_errors_not_panics() {
        let good = flate2_raw(&data(1, 5000), 6);
        assert!(matches!(
            scan(&good[..good.len() / 2]),
            Err(ZlibError::Truncated(_) | ZlibError::BadCode(_))
        ));
        let mut trailing = good.clone();
        trailing.push(0);
        assert_eq!(scan(&trailing), Err(ZlibError::TrailingBytes(1)));
        // Block type 3.
        assert_eq!(scan(&[0b111]), Err(ZlibError::ReservedBlockType(0)));
        // Stored block with a bad complement.
        assert!(matches!(
            scan(&[0x01, 0x05, 0x00, 0x00, 0x00]),
            Err(ZlibError::StoredLength(_))
        ));
        assert!(matches!(scan(&[]), Err(ZlibError::Truncated(0))));
        // Arbitrary bytes never panic.
        let mut state = 7u32;
        for len in 0..300 {
            let junk: Vec<u8> = (0..len)
                .map(|_| {
                    state = state.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                    (state >> 16) as u8
                })
                .collect();
            let _ = scan(&junk);
        }
    }
}
