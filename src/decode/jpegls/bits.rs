//! Bit reader for one JPEG-LS entropy-coded segment (ITU-T T.87, A.1).
//!
//! The segment handed to [`BitReader::new`] must already end before the next marker (a 0xFF
//! byte followed by a byte with its high bit set). Inside it, every 0xFF byte is followed by a
//! byte whose most significant bit is a stuffed 0 bit, which is dropped here. Reading past the
//! end yields zero bits; [`BitReader::overrun`] tells whether any of those were consumed, so the
//! caller can reject truncated data without per-bit checks in the hot path.

/// MSB-first reader with a 64-bit cache.
pub(crate) struct BitReader<'a> {
    data: &'a [u8],
    pos: usize,
    /// Valid bits are the top `bits` bits; bits below them are either zero or equal to the
    /// bits that follow (left over from a fast refill), never anything else.
    cache: u64,
    bits: u32,
    /// The last byte moved into the cache was 0xFF: the next byte carries 7 bits only.
    prev_ff: bool,
    /// Zero bits appended after the end of the data.
    fill: u64,
}

/// True when one of the 8 bytes of `w` is 0xFF.
#[inline]
fn has_ff_byte(w: u64) -> bool {
    let x = !w;
    (x.wrapping_sub(0x0101_0101_0101_0101) & !x & 0x8080_8080_8080_8080) != 0
}

impl<'a> BitReader<'a> {
    pub(crate) fn new(data: &'a [u8]) -> Self {
        BitReader {
            data,
            pos: 0,
            cache: 0,
            bits: 0,
            prev_ff: false,
            fill: 0,
        }
    }

    /// Brings the cache to at least 57 valid bits (zero bits past the end of the data).
    #[inline]
    fn refill(&mut self) {
        if !self.prev_ff {
            if let Some(chunk) = self.data.get(self.pos..self.pos.wrapping_add(8)) {
                let mut b = [0u8; 8];
                b.copy_from_slice(chunk);
                let w = u64::from_be_bytes(b);
                if !has_ff_byte(w) {
                    // bits <= 56 here, so the shift is in range and at least one byte fits.
                    let nbytes = (64 - self.bits) / 8;
                    self.cache |= w >> self.bits;
                    self.pos += nbytes as usize;
                    self.bits += 8 * nbytes;
                    return;
                }
            }
        }
        self.refill_slow();
    }

    #[cold]
    fn refill_slow(&mut self) {
        while self.bits <= 56 {
            match self.data.get(self.pos) {
                Some(&b) => {
                    self.pos += 1;
                    if self.prev_ff {
                        self.cache |= u64::from(b & 0x7F) << (57 - self.bits);
                        self.bits += 7;
                    } else {
                        self.cache |= u64::from(b) << (56 - self.bits);
                        self.bits += 8;
                    }
                    self.prev_ff = b == 0xFF;
                }
                None => {
                    self.fill += u64::from(64 - self.bits);
                    self.bits = 64;
                }
            }
        }
    }

    /// Drops `n` (< 64, <= bits) bits.
    #[inline]
    fn consume(&mut self, n: u32) {
        self.cache = self.cache.checked_shl(n).unwrap_or(0);
        self.bits = self.bits.saturating_sub(n);
    }

    #[inline]
    pub(crate) fn read_bit(&mut self) -> bool {
        if self.bits == 0 {
            self.refill();
        }
        let bit = self.cache >> 63 != 0;
        self.consume(1);
        bit
    }

    /// Reads `n` bits (0..=32) as an unsigned value.
    #[inline]
    pub(crate) fn read(&mut self, n: u32) -> u32 {
        if n == 0 {
            return 0;
        }
        let n = n.min(32);
        if self.bits < n {
            self.refill();
        }
        let v = (self.cache >> (64 - n)) as u32;
        self.consume(n);
        v
    }

    /// Decodes one limited-length Golomb code (T.87, A.5.3): `k` low bits, `max_high` is
    /// LIMIT - qbpp - 1 (the unary length that announces an escape with `qbpp` raw bits).
    /// Returns `None` when the unary part is longer than allowed.
    #[inline(always)]
    pub(crate) fn decode_value(&mut self, k: u32, max_high: u32, qbpp: u32) -> Option<u32> {
        if self.bits < 57 {
            self.refill();
        }
        let high = self.cache.leading_zeros();
        if high > max_high || high >= 57 {
            return None;
        }
        self.consume(high + 1);
        if high == max_high {
            return Some(self.read(qbpp) + 1);
        }
        if k == 0 {
            return Some(high);
        }
        let k = k.min(24);
        Some((high << k) | self.read(k))
    }

    /// Real (not fill) bits of the segment not consumed yet, counting stuffed bits as data.
    pub(crate) fn unread_bits(&self) -> u64 {
        let rest = self.data.len().saturating_sub(self.pos) as u64 * 8;
        rest + u64::from(self.bits).saturating_sub(self.fill)
    }

    /// True when bits past the end of the segment were consumed (truncated or corrupt data).
    #[inline]
    pub(crate) fn overrun(&self) -> bool {
        self.fill > u64::from(self.bits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stuffing_drops_msb_after_ff() {
        // 0xFF then 0x7F: 8 ones, then 7 ones (the stuffed 0 bit is dropped).
        let mut r = BitReader::new(&[0xFF, 0x7F, 0x80]);
        assert_eq!(r.read(15), 0x7FFF);
        assert!(r.read_bit());
        assert!(!r.overrun());
        assert_eq!(r.read(7), 0);
        assert!(!r.overrun());
        r.read(1);
        assert!(r.overrun());
    }

    #[test]
    fn fast_and_slow_paths_agree() {
        let data: Vec<u8> = (0..64u32).map(|i| (i * 37 + 11) as u8).collect();
        let mut r = BitReader::new(&data);
        let mut expect = Vec::new();
        for b in &data {
            for i in (0..8).rev() {
                expect.push((b >> i) & 1 == 1);
            }
        }
        let mut got = Vec::new();
        let mut n = 1;
        while got.len() + n <= expect.len() {
            let v = r.read(n as u32);
            for i in (0..n).rev() {
                got.push((v >> i) & 1 == 1);
            }
            n = n % 13 + 1;
        }
        assert_eq!(got[..], expect[..got.len()]);
    }
}
