//! Latency histograms as report text, so reports of separate runs (the shards of one job) can
//! be merged exactly: percentiles cannot be averaged, histograms can be added.
//!
//! The encoding is HdrHistogram's own interchange format, the one its log files and every
//! implementation (Java, C, Go, Python `hdrh`, Rust) read: the V2 layout compressed with
//! DEFLATE (zlib wrapper), then base64 (standard alphabet, padded). Values are microseconds.

use base64::Engine;
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};
use hdrhistogram::Histogram;
use std::io::Read;

/// The name of the encoding, written beside the data.
pub const ENCODING: &str = "hdrhistogram-v2-deflate-base64";

/// The unit of the recorded values.
pub const UNIT: &str = "us";

/// The cookies of HdrHistogram's V2 layout, compressed and not.
const V2_COMPRESSED_COOKIE: u32 = 0x1c84_9314;
const V2_COOKIE: u32 = 0x1c84_9313;
/// Bytes of a V2 header before the counts.
const V2_HEADER: usize = 40;
/// Largest encoded histogram accepted (ours are a few hundred bytes; the bound keeps a
/// corrupted report from costing memory).
const MAX_ENCODED: usize = 4 << 20;
const MAX_INFLATED: u64 = 64 << 20;

/// A histogram in a report.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EncodedHistogram {
    /// Always [`ENCODING`].
    pub encoding: String,
    /// Always [`UNIT`].
    pub unit: String,
    pub data: String,
}

/// Why a report's histogram cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HdrError {
    /// Another encoding or unit than this build writes.
    #[error("histogram encoding `{encoding}` in `{unit}`: this build reads {ENCODING} in {UNIT}")]
    Unsupported { encoding: String, unit: String },
    /// The text is not a valid encoded histogram.
    #[error("histogram data is corrupt: {0}")]
    Corrupt(String),
}

/// Encodes `h`.
pub fn encode(h: &Histogram<u64>) -> EncodedHistogram {
    let mut bytes = Vec::new();
    // Writing into a Vec fails only on a histogram too large for the format (over 2 GiB).
    let data = match V2DeflateSerializer::new().serialize(h, &mut bytes) {
        Ok(_) => base64::engine::general_purpose::STANDARD.encode(&bytes),
        Err(_) => String::new(),
    };
    EncodedHistogram {
        encoding: ENCODING.into(),
        unit: UNIT.into(),
        data,
    }
}

/// Decodes a histogram written by [`encode`] (or any HdrHistogram V2 + DEFLATE encoder).
pub fn decode(e: &EncodedHistogram) -> Result<Histogram<u64>, HdrError> {
    if e.encoding != ENCODING || e.unit != UNIT {
        return Err(HdrError::Unsupported {
            encoding: e.encoding.clone(),
            unit: e.unit.clone(),
        });
    }
    let corrupt = |why: &str| HdrError::Corrupt(why.to_string());
    if e.data.len() > MAX_ENCODED {
        return Err(corrupt("longer than any histogram dicomflow writes"));
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(e.data.trim())
        .map_err(|x| HdrError::Corrupt(format!("base64: {x}")))?;
    let be32 = |b: &[u8], at: usize| {
        b.get(at..at + 4)
            .map(|s| u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
    };
    if be32(&bytes, 0) != Some(V2_COMPRESSED_COOKIE) {
        return Err(corrupt("not an HdrHistogram V2 + DEFLATE encoding"));
    }
    let len = be32(&bytes, 4).ok_or_else(|| corrupt("truncated"))? as usize;
    let deflated = bytes
        .get(8..8 + len)
        .ok_or_else(|| corrupt("shorter than its header says"))?;
    // Inflate here, bounded, and check the length the V2 header claims against what is there:
    // the deserializer would allocate that length before reading.
    let mut v2 = Vec::new();
    flate2::read::ZlibDecoder::new(deflated)
        .take(MAX_INFLATED)
        .read_to_end(&mut v2)
        .map_err(|x| HdrError::Corrupt(format!("deflate: {x}")))?;
    if be32(&v2, 0) != Some(V2_COOKIE) {
        return Err(corrupt("the inflated data is not a V2 histogram"));
    }
    let payload = be32(&v2, 4).ok_or_else(|| corrupt("truncated"))? as usize;
    if payload > v2.len().saturating_sub(V2_HEADER) {
        return Err(corrupt("the counts are shorter than the header says"));
    }
    Deserializer::new()
        .deserialize(&mut v2.as_slice())
        .map_err(|x| HdrError::Corrupt(format!("{x:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_merges_like_one_histogram() {
        let mut a = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 2).unwrap();
        let mut b = a.clone();
        let mut both = a.clone();
        for v in 1..=1000u64 {
            a.record(v * 7).unwrap();
            both.record(v * 7).unwrap();
        }
        for v in 1..=300u64 {
            b.record(v * 1000).unwrap();
            both.record(v * 1000).unwrap();
        }
        let (ea, eb) = (encode(&a), encode(&b));
        assert!(ea.data.starts_with("HISTFAAA"), "{}", ea.data);
        let mut merged = decode(&ea).unwrap();
        merged.add(decode(&eb).unwrap()).unwrap();
        assert_eq!(merged.len(), both.len());
        for q in [0.5, 0.95, 0.99, 1.0] {
            assert_eq!(
                merged.value_at_quantile(q),
                both.value_at_quantile(q),
                "{q}"
            );
        }
        assert_eq!(merged, both);
    }

    #[test]
    fn refuses_other_encodings_and_corrupt_data() {
        let h = Histogram::<u64>::new(2).unwrap();
        let good = encode(&h);
        let with = |data: &str| EncodedHistogram {
            data: data.into(),
            ..good.clone()
        };
        assert!(matches!(
            decode(&EncodedHistogram {
                unit: "ms".into(),
                ..good.clone()
            }),
            Err(HdrError::Unsupported { .. })
        ));
        for bad in ["", "not base64!", "AAAA", &good.data[..good.data.len() - 8]] {
            assert!(
                matches!(decode(&with(bad)), Err(HdrError::Corrupt(_))),
                "{bad}"
            );
        }
        // A V2 header claiming 4 GiB of counts is refused before anything is allocated.
        let mut v2 = vec![0u8; 40];
        v2[0..4].copy_from_slice(&V2_COOKIE.to_be_bytes());
        v2[4..8].copy_from_slice(&u32::MAX.to_be_bytes());
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        std::io::Write::write_all(&mut z, &v2).unwrap();
        let z = z.finish().unwrap();
        let mut bytes = V2_COMPRESSED_COOKIE.to_be_bytes().to_vec();
        bytes.extend_from_slice(&(z.len() as u32).to_be_bytes());
        bytes.extend_from_slice(&z);
        let e = decode(&with(
            &base64::engine::general_purpose::STANDARD.encode(&bytes),
        ));
        assert!(
            matches!(&e, Err(HdrError::Corrupt(w)) if w.contains("shorter than the header")),
            "{e:?}"
        );
    }
}
