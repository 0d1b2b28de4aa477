//! Lookup tables as DICOM describes them (LUT Descriptor + LUT Data): Modality LUTs, VOI LUTs
//! and palette colour tables, decoded with DCMTK's rules (docs/dcmtk-render-notes.md §3.3):
//! 0 entries means 65536, 8-bit entries packed two per word are unpacked, the bit depth is the
//! descriptor's when it is 8..=16 and otherwise found from the data, entries are masked.

/// A decoded lookup table: `data[i]` is the output for input `first + i`; inputs at or below
/// the first entry map to `data[0]`, at or above the last to the last entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lut {
    /// The descriptor's second value as stored (US); read as signed or not by the user of the
    /// table, because DCMTK decides that from context (see [`Lut::first`]).
    pub first_raw: u16,
    /// Effective bits per entry, 8..=16.
    pub bits: u8,
    /// Entries, masked to `bits`.
    pub data: Vec<u16>,
}

impl Lut {
    /// Decodes a table from its descriptor values and its data words.
    pub fn decode(
        entries: u32,
        first_raw: u16,
        desc_bits: u32,
        words: &[u16],
    ) -> Result<Lut, String> {
        let mut n = if entries == 0 {
            65536
        } else {
            entries as usize
        };
        let count = words.len();
        if count == 0 {
            return Err("LUT Data is empty".into());
        }
        let mut data: Vec<u16> = if count == n.div_ceil(2) && n > 1 {
            // 8-bit entries packed two per 16-bit word, low byte first.
            words
                .iter()
                .flat_map(|w| [w & 0xff, w >> 8])
                .take(n)
                .collect()
        } else {
            if count != n {
                tracing::debug!(
                    entries = n,
                    words = count,
                    "LUT descriptor and data disagree; using the data length"
                );
                n = count.min(65536);
            }
            words[..n].to_vec()
        };
        let bits = if (8..=16).contains(&desc_bits) {
            desc_bits as u8
        } else {
            let max = data.iter().copied().max().unwrap_or(0);
            let found = if max == 0 {
                desc_bits
            } else {
                16 - max.leading_zeros()
            };
            found.clamp(8, 16) as u8
        };
        let mask = if bits >= 16 {
            u16::MAX
        } else {
            (1u16 << bits) - 1
        };
        for v in &mut data {
            *v &= mask;
        }
        Ok(Lut {
            first_raw,
            bits,
            data,
        })
    }

    /// Builds a table directly (tests, generated LUTs).
    pub fn new(first: i32, bits: u8, data: Vec<u16>) -> Lut {
        Lut::decode(data.len() as u32, first as u16, bits as u32, &data).unwrap_or(Lut {
            first_raw: first as u16,
            bits,
            data,
        })
    }

    /// The first mapped input value, read as signed or unsigned.
    #[inline]
    pub fn first(&self, signed: bool) -> i64 {
        if signed {
            self.first_raw as i16 as i64
        } else {
            self.first_raw as i64
        }
    }

    /// The entry for input `x`, clamped to the table's ends.
    #[inline]
    pub fn lookup(&self, x: i64, signed: bool) -> u16 {
        let first = self.first(signed);
        let last = first + self.data.len() as i64 - 1;
        if x <= first {
            self.data[0]
        } else if x >= last {
            self.data[self.data.len() - 1]
        } else {
            self.data[(x - first) as usize]
        }
    }

    /// Smallest and largest entry.
    pub fn data_range(&self) -> (u16, u16) {
        let min = self.data.iter().copied().min().unwrap_or(0);
        let max = self.data.iter().copied().max().unwrap_or(0);
        (min, max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_clamps_both_ends() {
        let lut = Lut::new(-2, 8, vec![10, 20, 30]);
        assert_eq!(lut.lookup(-100, true), 10);
        assert_eq!(lut.lookup(-2, true), 10);
        assert_eq!(lut.lookup(-1, true), 20);
        assert_eq!(lut.lookup(0, true), 30);
        assert_eq!(lut.lookup(1000, true), 30);
    }

    #[test]
    fn first_value_signedness_comes_from_context() {
        let lut = Lut::decode(3, 65036, 16, &[1, 2, 3]).unwrap();
        assert_eq!(lut.first(true), -500);
        assert_eq!(lut.first(false), 65036);
    }

    #[test]
    fn zero_entries_means_65536_and_packed_bytes_unpack() {
        let words = vec![7u16; 65536];
        assert_eq!(Lut::decode(0, 0, 16, &words).unwrap().data.len(), 65536);
        let packed = Lut::decode(4, 0, 8, &[0x0201, 0x0403]).unwrap();
        assert_eq!(packed.data, vec![1, 2, 3, 4]);
        let odd = Lut::decode(3, 0, 8, &[0x0201, 0x0003]).unwrap();
        assert_eq!(odd.data, vec![1, 2, 3]);
    }

    #[test]
    fn bits_outside_8_to_16_are_found_from_the_data_and_entries_masked() {
        let l = Lut::decode(2, 0, 4, &[0, 4095]).unwrap();
        assert_eq!(l.bits, 12);
        let m = Lut::decode(2, 0, 8, &[0x1234, 0x00ff]).unwrap();
        assert_eq!(m.data, vec![0x34, 0xff]);
    }

    #[test]
    fn data_length_wins_over_the_descriptor() {
        let l = Lut::decode(10, 0, 16, &[1, 2, 3]).unwrap();
        assert_eq!(l.data.len(), 3);
    }
}
