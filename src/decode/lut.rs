//! Lookup tables as DICOM describes them (LUT Descriptor + LUT Data): Modality LUTs, VOI LUTs
//! and palette colour tables, decoded with DCMTK's rules (docs/dcmtk-render-notes.md §3.3):
//! 0 entries means 65536, 8-bit entries packed two per word are unpacked, the bit depth is the
//! descriptor's when it is 8..=16 and otherwise found from the data, entries are masked.

/// Expands Segmented Palette Color Lookup Table Data (PS3.3 C.7.9.2) into `entries` table
/// entries. `bytes`: the table has 8-bit entries, whose segments are a stream of bytes (low
/// byte of each word first); otherwise segments are 16-bit words.
///
/// * discrete (0): `length` values follow;
/// * linear (1): `length` values on the straight line from the last value so far to `y1`, the
///   last one `y1` itself (the standard's end point (X0 + length, Y1)), each rounded to the
///   nearest integer, ties to even;
/// * indirect (2): `count` segments copied again, from the segment at a byte offset (32 bits,
///   least significant half first) from the start of the data.
///
/// GDCM 3.0 expands linear segments one step early (its first value repeats Y0, its last falls
/// short of Y1) and cannot expand tables of 8-bit pixels; this follows the standard.
pub fn expand_segmented(words: &[u16], bytes: bool, entries: usize) -> Result<Vec<u16>, String> {
    let data: Vec<u32> = if bytes {
        words
            .iter()
            .flat_map(|w| [u32::from(w & 0xff), u32::from(w >> 8)])
            .collect()
    } else {
        words.iter().map(|&w| u32::from(w)).collect()
    };
    let mut out = Vec::with_capacity(entries);
    expand_from(&data, bytes, 0, usize::MAX, &mut out, entries, 0)?;
    if out.len() < entries {
        return Err(format!(
            "the segments expand to {} entries, the descriptor says {entries}",
            out.len()
        ));
    }
    out.truncate(entries);
    Ok(out)
}

/// Expands at most `segments` segments of `data` from index `at` into `out` (which stops
/// growing at `limit` entries). `depth` bounds indirect segments pointing at each other.
fn expand_from(
    data: &[u32],
    bytes: bool,
    mut at: usize,
    segments: usize,
    out: &mut Vec<u16>,
    limit: usize,
    depth: usize,
) -> Result<(), String> {
    if depth > 8 {
        return Err("indirect segments nested too deep".into());
    }
    let word = |i: usize| -> Result<u32, String> {
        data.get(i)
            .copied()
            .ok_or_else(|| "a segment runs past the end of the data".to_string())
    };
    let mut done = 0;
    // `at + 1 < len`: a trailing pad entry is no segment.
    while done < segments && at + 1 < data.len() && out.len() < limit {
        let (opcode, length) = (word(at)?, word(at + 1)? as usize);
        at += 2;
        match opcode {
            0 => {
                let values = data
                    .get(at..at + length)
                    .ok_or("a discrete segment runs past the end of the data")?;
                out.extend(values.iter().map(|&v| v as u16));
                at += length;
            }
            1 => {
                let y0 = *out.last().ok_or("the first segment is linear")? as f64;
                let y1 = word(at)? as f64;
                at += 1;
                let n = length.min(limit.saturating_sub(out.len()));
                for i in 1..=n {
                    let v = y0 + (y1 - y0) * i as f64 / length as f64;
                    out.push(v.round_ties_even() as u16);
                }
            }
            2 => {
                if out.is_empty() {
                    return Err("the first segment is indirect".into());
                }
                let offset = if bytes {
                    // Four bytes: the two 16-bit halves, least significant first.
                    let b = |k: usize| word(at + k);
                    (b(0)? | b(1)? << 8 | b(2)? << 16 | b(3)? << 24) as usize
                } else {
                    (word(at)? | word(at + 1)? << 16) as usize
                };
                at += if bytes { 4 } else { 2 };
                let index = if bytes { offset } else { offset / 2 };
                expand_from(data, bytes, index, length, out, limit, depth + 1)?;
            }
            op => return Err(format!("unknown segment type {op}")),
        }
        done += 1;
    }
    Ok(())
}

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

#[cfg(test)]
mod segmented_tests {
    use super::*;

    #[test]
    fn segments_expand_as_the_standard_says() {
        // discrete 0, 10; linear 4 steps to 50; indirect: both segments again from byte 0.
        let words = [0, 2, 0, 10, 1, 4, 50, 2, 2, 0, 0];
        let lut = expand_segmented(&words, false, 12).unwrap();
        assert_eq!(lut, [0, 10, 20, 30, 40, 50, 0, 10, 20, 30, 40, 50]);
        // Ties go to even: 0 -> 5 in 2 steps is 2.5 (2), 5.
        assert_eq!(
            expand_segmented(&[0, 1, 0, 1, 2, 5], false, 3).unwrap(),
            [0, 2, 5]
        );
        // 8-bit entries: bytes, low byte first (0, 2, 3, 9 | 1, 2, 13).
        let bytes = [0x0200, 0x0903, 0x0201, 0x000d];
        assert_eq!(expand_segmented(&bytes, true, 4).unwrap(), [3, 9, 11, 13]);
        assert!(expand_segmented(&[1, 2, 5], false, 2).is_err());
        assert!(expand_segmented(&[0, 9, 1], false, 9).is_err());
        assert!(expand_segmented(&[0, 1, 7, 2, 1, 0, 0], false, 100).is_err());
    }
}
