//! Pure-Rust JPEG-LS decoder (ITU-T T.87 | ISO/IEC 14495-1), for DICOM transfer syntaxes
//! 1.2.840.10008.1.2.4.80 (lossless) and .81 (near-lossless).
//!
//! Supports 2..=16-bit samples, any component count with one scan per component (ILV = 0),
//! line (ILV = 1) and sample (ILV = 2, up to 4 components) interleaving, NEAR > 0, default and
//! custom preset coding parameters (LSE type 1), oversize dimensions (LSE type 4) and restart
//! markers (DRI). Not supported (clear error): mapping tables (LSE types 2/3, Tm != 0), the
//! JPEG-LS part 2 extensions, point transforms and the HP colour transforms (APP8 "mrfx").
//!
//! The output equals DCMTK's `dcmdjpls` (CharLS 1.x) and CharLS 2.x sample for sample on every
//! stream tested (`tests/fixtures/jpegls_exactness.md`). Two deliberate choices: streams with
//! MAXVAL < 128 and defaulted thresholds that lose sync with the standard defaults are decoded
//! again with the CharLS 1.x defaults (what DCMTK writes for P <= 7); an LSE MAXVAL below
//! 2^P - 1 is honoured as T.87 says (RANGE, LIMIT, clamping), where CharLS largely ignores it.
//!
//! Hostile input yields an error, never a panic: all reads are bounds-checked, the output size
//! is capped (and checked against the data length) before allocating, and every loop is bounded
//! by the image size or the input length.

mod bits;
mod scan;

use scan::{decode_scan, default_thresholds, Params, ScanSpec};

/// Largest accepted width * height * components.
const MAX_SAMPLES: u64 = 1 << 30;

/// A scan that leaves this many bits unread lost sync (encoders pad less than a byte, plus
/// at most one byte after a final 0xFF).
const CLEAN_END_BITS: u64 = 16;

fn same_thresholds(a: &Params, b: &Params) -> bool {
    (a.t1, a.t2, a.t3) == (b.t1, b.t2, b.t3)
}

/// Frame description of a decoded JPEG-LS image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JlsImage {
    pub width: u32,
    pub height: u32,
    pub components: u8,
    /// Sample precision P (2..=16).
    pub bits: u8,
}

/// Why a JPEG-LS codestream could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JlsError(pub String);

impl std::fmt::Display for JlsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "JPEG-LS: {}", self.0)
    }
}

impl std::error::Error for JlsError {}

fn fail<T>(msg: impl Into<String>) -> Result<T, JlsError> {
    Err(JlsError(msg.into()))
}

/// Reads a marker at `*pos`: 0xFF, optional 0xFF fill bytes, then the code (returned).
pub(crate) fn next_marker(data: &[u8], pos: &mut usize) -> Result<u8, JlsError> {
    match data.get(*pos) {
        Some(0xFF) => {}
        Some(&b) => {
            return fail(format!(
                "expected a marker at offset {pos}, found 0x{b:02X}"
            ))
        }
        None => return fail("unexpected end of data, expected a marker"),
    }
    *pos += 1;
    loop {
        let Some(&b) = data.get(*pos) else {
            return fail("unexpected end of data inside a marker");
        };
        *pos += 1;
        if b != 0xFF {
            return Ok(b);
        }
    }
}

/// End of the entropy-coded data starting at `from`: the first 0xFF followed by a byte with
/// its high bit set (a marker, possibly after fill bytes), or by nothing.
pub(crate) fn find_marker_end(data: &[u8], from: usize) -> usize {
    let mut i = from;
    while let Some(off) = data
        .get(i..)
        .and_then(|s| s.iter().position(|&b| b == 0xFF))
    {
        i += off;
        match data.get(i + 1) {
            Some(&b) if b < 0x80 => i += 2,
            _ => return i,
        }
    }
    data.len()
}

/// Big-endian field reader over one marker segment.
struct Seg<'a> {
    d: &'a [u8],
    p: usize,
}

impl Seg<'_> {
    fn u8(&mut self) -> Result<u8, JlsError> {
        let v = self.d.get(self.p).copied();
        self.p += 1;
        v.ok_or_else(|| JlsError("marker segment too short".into()))
    }
    fn u16(&mut self) -> Result<u32, JlsError> {
        Ok(u32::from(self.u8()?) << 8 | u32::from(self.u8()?))
    }
    fn uint(&mut self, bytes: usize) -> Result<u32, JlsError> {
        let mut v = 0u32;
        for _ in 0..bytes {
            v = v << 8 | u32::from(self.u8()?);
        }
        Ok(v)
    }
}

/// LSE type 1 values as read (0 = default).
#[derive(Debug, Clone, Copy, Default)]
struct Preset {
    maxval: u32,
    t1: u32,
    t2: u32,
    t3: u32,
    reset: u32,
}

struct Frame {
    bits: u8,
    ids: Vec<u8>,
}

/// Sets a frame dimension once (SOF or LSE type 4); 0 means "not given here".
fn set_dim(slot: &mut u32, v: u32, what: &str) -> Result<(), JlsError> {
    if v == 0 {
        return Ok(());
    }
    if *slot != 0 && *slot != v {
        return fail(format!("conflicting image {what}"));
    }
    *slot = v;
    Ok(())
}

/// Scan parameters from the current preset (validated as T.87 C.2.4.1.1 / CharLS); `legacy`
/// selects the CharLS 1.x default thresholds (see [`scan::default_thresholds`]).
fn scan_params(bits: u8, preset: &Preset, near: u32, legacy: bool) -> Result<Params, JlsError> {
    let max_for_bits = (1u32 << bits) - 1;
    let maxval = match preset.maxval {
        0 => max_for_bits,
        m if m <= max_for_bits => m,
        m => return fail(format!("MAXVAL {m} exceeds {bits}-bit precision")),
    };
    if maxval < 1 || near > 255.min(maxval / 2) {
        return fail(format!("invalid NEAR {near} for MAXVAL {maxval}"));
    }
    let (mx, nr) = (maxval as i32, near as i32);
    let (d1, d2, d3) = default_thresholds(mx, nr, legacy);
    let pick = |v: u32, d: i32, lo: i32| -> Result<i32, JlsError> {
        match v {
            0 => Ok(d),
            v if (v as i32) >= lo && (v as i32) <= mx => Ok(v as i32),
            _ => fail("invalid JPEG-LS preset thresholds"),
        }
    };
    let t1 = pick(preset.t1, d1, nr + 1)?;
    let t2 = pick(preset.t2, d2, t1)?;
    let t3 = pick(preset.t3, d3, t2)?;
    let reset = match preset.reset {
        0 => 64,
        r if r >= 3 && r <= maxval.max(255) => r as i32,
        r => return fail(format!("invalid JPEG-LS RESET {r}")),
    };
    Ok(Params::new(mx, nr, t1, t2, t3, reset))
}

/// Decodes one JPEG-LS image (SOI..EOI) into `out` (cleared first): interleaved samples, one
/// byte per sample when bits <= 8, else u16 native-endian per sample.
pub fn decode(data: &[u8], out: &mut Vec<u8>) -> Result<JlsImage, JlsError> {
    out.clear();
    let mut pos = 0usize;
    if next_marker(data, &mut pos)? != 0xD8 {
        return fail("not a JPEG-LS stream (no SOI marker)");
    }
    let mut frame: Option<Frame> = None;
    let (mut width, mut height) = (0u32, 0u32);
    let mut preset = Preset::default();
    let mut restart_interval = 0u32;
    let mut done: Vec<bool> = Vec::new();
    let mut allocated = false;
    loop {
        if pos >= data.len() && allocated && done.iter().all(|&d| d) {
            break; // tolerate a missing EOI after complete image data
        }
        let code = next_marker(data, &mut pos)?;
        match code {
            0xD9 => break,
            0xD8 => return fail("unexpected second SOI marker"),
            0xD0..=0xD7 => return fail("unexpected restart marker"),
            0x01 | 0x00 => return fail(format!("invalid marker 0xFF{code:02X}")),
            _ => {}
        }
        let len = match (data.get(pos), data.get(pos + 1)) {
            (Some(&a), Some(&b)) => usize::from(a) << 8 | usize::from(b),
            _ => return fail("unexpected end of data in a marker segment"),
        };
        let body = match len
            .checked_sub(2)
            .and_then(|n| data.get(pos + 2..pos + 2 + n))
        {
            Some(b) => b,
            None => return fail(format!("bad length of marker segment 0xFF{code:02X}")),
        };
        pos += len;
        let mut s = Seg { d: body, p: 0 };
        match code {
            0xF7 => {
                if frame.is_some() {
                    return fail("more than one SOF marker");
                }
                let bits = s.u8()?;
                if !(2..=16).contains(&bits) {
                    return fail(format!("unsupported sample precision {bits}"));
                }
                let h = s.u16()?;
                let w = s.u16()?;
                let nf = s.u8()?;
                if nf == 0 || body.len() != 6 + 3 * usize::from(nf) {
                    return fail("invalid SOF segment");
                }
                let mut ids = Vec::with_capacity(usize::from(nf));
                for _ in 0..nf {
                    let id = s.u8()?;
                    if ids.contains(&id) {
                        return fail("duplicate component id in SOF");
                    }
                    ids.push(id);
                    if s.u8()? != 0x11 {
                        return fail("subsampled components are not supported");
                    }
                    s.u8()?;
                }
                set_dim(&mut height, h, "height")?;
                set_dim(&mut width, w, "width")?;
                done = vec![false; ids.len()];
                frame = Some(Frame { bits, ids });
            }
            0xF8 => match s.u8()? {
                1 => {
                    if body.len() != 11 {
                        return fail("invalid LSE preset parameters segment");
                    }
                    preset = Preset {
                        maxval: s.u16()?,
                        t1: s.u16()?,
                        t2: s.u16()?,
                        t3: s.u16()?,
                        reset: s.u16()?,
                    };
                }
                2 | 3 => return fail("JPEG-LS mapping tables (LSE type 2/3) are not supported"),
                4 => {
                    let wxy = usize::from(s.u8()?);
                    if !(2..=4).contains(&wxy) || body.len() != 2 + 2 * wxy {
                        return fail("invalid LSE oversize dimension segment");
                    }
                    let h = s.uint(wxy)?;
                    let w = s.uint(wxy)?;
                    set_dim(&mut height, h, "height")?;
                    set_dim(&mut width, w, "width")?;
                }
                t => return fail(format!("unsupported JPEG-LS preset parameters type {t}")),
            },
            0xDD => {
                if !(2..=4).contains(&body.len()) {
                    return fail("invalid DRI segment");
                }
                restart_interval = s.uint(body.len())?;
            }
            0xE8 if body.len() == 5 && body.starts_with(b"mrfx") => {
                if body.get(4).copied().unwrap_or(0) != 0 {
                    return fail("HP colour transforms (APP8 mrfx) are not supported");
                }
            }
            0xE0..=0xEF | 0xFE => {}
            0xDA => {
                let Some(fr) = frame.as_ref() else {
                    return fail("SOS before SOF");
                };
                let ns = usize::from(s.u8()?);
                if ns == 0 || ns > fr.ids.len() || body.len() != 4 + 2 * ns {
                    return fail("invalid SOS segment");
                }
                let mut comps = Vec::with_capacity(ns);
                for _ in 0..ns {
                    let id = s.u8()?;
                    let Some(ci) = fr.ids.iter().position(|&x| x == id) else {
                        return fail(format!("SOS refers to unknown component {id}"));
                    };
                    if comps.contains(&ci) {
                        return fail("duplicate component in SOS");
                    }
                    comps.push(ci);
                    if s.u8()? != 0 {
                        return fail("JPEG-LS mapping tables are not supported");
                    }
                }
                let near = u32::from(s.u8()?);
                let ilv = s.u8()?;
                let pt = s.u8()?;
                if ilv > 2 || (ilv == 0 && ns != 1) {
                    return fail(format!("invalid interleave mode {ilv} for {ns} components"));
                }
                if pt & 0x0F != 0 {
                    return fail("point transform is not supported");
                }
                if width == 0 || height == 0 {
                    return fail("image width or height is 0");
                }
                let nf = fr.ids.len();
                let total = u64::from(width)
                    .checked_mul(u64::from(height))
                    .and_then(|t| t.checked_mul(nf as u64))
                    .unwrap_or(u64::MAX);
                if total > MAX_SAMPLES {
                    return fail(format!("image too large ({width}x{height}x{nf})"));
                }
                // Every coded line takes at least one bit, and one bit codes at most 2^15
                // samples of a run: reject headers that the remaining data cannot fill
                // before allocating for them.
                let min_bits = u64::from(height) * u64::from(width.div_ceil(1 << 15));
                if min_bits > (data.len().saturating_sub(pos) as u64) * 8 {
                    return fail(format!("too little data for a {width}x{height} image"));
                }
                let wide = fr.bits > 8;
                if !allocated {
                    let bytes = usize::try_from(total * if wide { 2 } else { 1 })
                        .map_err(|_| JlsError("image too large for this platform".into()))?;
                    out.try_reserve_exact(bytes)
                        .map_err(|_| JlsError(format!("cannot allocate {bytes} bytes")))?;
                    out.resize(bytes, 0);
                    allocated = true;
                }
                let mut spec = ScanSpec {
                    width: width as usize,
                    height: height as usize,
                    frame_comps: nf,
                    comps: &comps,
                    ilv,
                    params: scan_params(fr.bits, &preset, near, false)?,
                    restart_interval,
                    wide,
                };
                let first = decode_scan(data, pos, &spec, out);
                let clean = matches!(&first, Ok(e) if e.unread_bits < CLEAN_END_BITS);
                let legacy = scan_params(fr.bits, &preset, near, true).ok();
                let end = match legacy {
                    // MAXVAL < 128 with default thresholds: CharLS 1.x encoders (DCMTK) used
                    // other defaults. If the standard ones lose sync, try those.
                    Some(lp) if !clean && !same_thresholds(&lp, &spec.params) => {
                        let standard = spec.params;
                        spec.params = lp;
                        match decode_scan(data, pos, &spec, out) {
                            Ok(e) if e.unread_bits < CLEAN_END_BITS => e,
                            _ => {
                                spec.params = standard;
                                decode_scan(data, pos, &spec, out)?
                            }
                        }
                    }
                    _ => first?,
                };
                pos = end.pos;
                for &c in &comps {
                    if let Some(d) = done.get_mut(c) {
                        *d = true;
                    }
                }
            }
            0xC0..=0xCF | 0xF9 => {
                return fail(format!(
                    "not a JPEG-LS (ITU-T T.87) stream: marker 0xFF{code:02X}"
                ))
            }
            _ => return fail(format!("unexpected marker 0xFF{code:02X}")),
        }
    }
    let Some(fr) = frame else {
        return fail("no SOF marker before EOI");
    };
    if !allocated || !done.iter().all(|&d| d) {
        return fail("image data incomplete (missing scans)");
    }
    Ok(JlsImage {
        width,
        height,
        components: fr.ids.len() as u8,
        bits: fr.bits,
    })
}

#[cfg(test)]
mod tests {
    //! Fixtures in `testdata/`: JPEG-LS codestreams written by DCMTK's `dcmcjpls` 3.6.7 or
    //! GDCM's `gdcmconv -L` 3.0.21 (CharLS), expected values decoded by `dcmdjpls` 3.6.7. The
    //! two restart-marker streams were assembled from strips encoded by `dcmcjpls` (dcmdjpls
    //! cannot read DRI); their expected values are the strips' dcmdjpls decodes, which GDCM
    //! (CharLS 2.4) reproduces on the assembled streams. See
    //! `tests/fixtures/jpegls_exactness.md`.
    use super::*;

    struct Fixture {
        name: &'static str,
        data: &'static [u8],
        /// width, height, components, bits
        dims: (u32, u32, u8, u8),
        /// FNV-1a 64 of the expected samples, little-endian u16 when bits > 8.
        fnv: u64,
        /// (sample index, expected value)
        samples: [(usize, u16); 4],
    }

    macro_rules! fx {
        ($name:literal, $dims:expr, $fnv:expr, $samples:expr) => {
            Fixture {
                name: $name,
                data: include_bytes!(concat!("testdata/", $name, ".jls")),
                dims: $dims,
                fnv: $fnv,
                samples: $samples,
            }
        };
    }

    #[rustfmt::skip]
    fn fixtures() -> Vec<Fixture> {
        vec![
            fx!("flat8_custom_t_reset", (40, 32, 1, 8), 0x2dab_a257_c18a_fdb2, [(1, 102), (427, 204), (854, 102), (1278, 105)]),
            fx!("gray12_near3", (24, 20, 1, 12), 0xd713_b63f_a5d1_ab00, [(1, 819), (161, 2125), (321, 4095), (478, 2132)]),
            fx!("gray16_lossless_gdcm", (24, 20, 1, 16), 0x1cbb_5e6a_7e80_32ed, [(1, 13107), (161, 28691), (321, 65535), (478, 34688)]),
            fx!("gray6_legacy_thresholds", (32, 24, 1, 6), 0x7936_9e06_5eb6_fe88, [(1, 13), (257, 13), (513, 26), (766, 34)]),
            fx!("gray8_lossless", (32, 24, 1, 8), 0x5252_aac5_c6cc_5a81, [(1, 51), (257, 51), (513, 111), (766, 131)]),
            fx!("gray8_restart5", (32, 24, 1, 8), 0x5252_aac5_c6cc_5a81, [(1, 51), (257, 51), (513, 111), (766, 131)]),
            fx!("rgb8_ilv_line", (20, 16, 3, 8), 0xbd55_291a_fcf7_8ef7, [(1, 51), (321, 255), (641, 105), (958, 168)]),
            fx!("rgb8_ilv_none", (20, 16, 3, 8), 0xbd55_291a_fcf7_8ef7, [(1, 51), (321, 255), (641, 105), (958, 168)]),
            fx!("rgb8_ilv_sample", (20, 16, 3, 8), 0xbd55_291a_fcf7_8ef7, [(1, 51), (321, 255), (641, 105), (958, 168)]),
            fx!("rgb8_ilv_sample_near2", (20, 16, 3, 8), 0xacb7_163b_e7bf_4870, [(1, 50), (321, 255), (641, 106), (958, 170)]),
            fx!("rgb8_ilv_sample_restart3", (20, 16, 3, 8), 0xbd55_291a_fcf7_8ef7, [(1, 51), (321, 255), (641, 105), (958, 168)]),
        ]
    }

    /// Output samples as values (u16 native-endian pairs when bits > 8).
    fn values(out: &[u8], bits: u8) -> Vec<u16> {
        if bits > 8 {
            out.chunks_exact(2)
                .map(|c| u16::from_ne_bytes([c[0], c[1]]))
                .collect()
        } else {
            out.iter().map(|&b| u16::from(b)).collect()
        }
    }

    fn fnv1a(vals: &[u16], bits: u8) -> u64 {
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        let mut eat = |b: u8| h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        for &v in vals {
            if bits > 8 {
                v.to_le_bytes().into_iter().for_each(&mut eat);
            } else {
                eat(v as u8);
            }
        }
        h
    }

    #[test]
    fn fixtures_match_dcmdjpls() {
        let mut out = vec![0xAA; 7]; // must be cleared
        for f in fixtures() {
            let img = decode(f.data, &mut out).unwrap_or_else(|e| panic!("{}: {e}", f.name));
            let (w, h, c, b) = f.dims;
            assert_eq!(
                img,
                JlsImage {
                    width: w,
                    height: h,
                    components: c,
                    bits: b
                },
                "{}",
                f.name
            );
            let bps = if b > 8 { 2 } else { 1 };
            assert_eq!(
                out.len(),
                (w * h) as usize * usize::from(c) * bps,
                "{}",
                f.name
            );
            let vals = values(&out, b);
            for (i, v) in f.samples {
                assert_eq!(vals[i], v, "{} sample {i}", f.name);
            }
            assert_eq!(fnv1a(&vals, b), f.fnv, "{} checksum", f.name);
        }
    }

    /// Inserts an LSE preset-parameters segment right after the SOF segment.
    fn with_lse(data: &[u8], t: (u16, u16, u16), reset: u16) -> Vec<u8> {
        let sof_end = 4 + (usize::from(data[4]) << 8 | usize::from(data[5]));
        let mut v = data[..sof_end].to_vec();
        v.extend_from_slice(&[0xFF, 0xF8, 0, 13, 1, 0, 0]);
        for x in [t.0, t.1, t.2, reset] {
            v.extend_from_slice(&x.to_be_bytes());
        }
        v.extend_from_slice(&data[sof_end..]);
        v
    }

    #[test]
    fn legacy_default_thresholds_are_needed_and_found() {
        let f = fixtures()
            .into_iter()
            .find(|f| f.name == "gray6_legacy_thresholds")
            .unwrap();
        let mut expect = Vec::new();
        decode(f.data, &mut expect).unwrap();
        // The standard defaults for MAXVAL 63 (2, 3, 5) do not decode this DCMTK stream ...
        let (t1, t2, t3) = default_thresholds(63, 0, false);
        assert_eq!((t1, t2, t3), (2, 3, 5));
        let std = with_lse(f.data, (2, 3, 5), 0);
        let mut out = Vec::new();
        assert!(decode(&std, &mut out).map_or(true, |_| out != expect));
        // ... the CharLS 1.x ones (2, 3, 4) do, and are what the fallback picked.
        assert_eq!(default_thresholds(63, 0, true), (2, 3, 4));
        decode(&with_lse(f.data, (2, 3, 4), 0), &mut out).unwrap();
        assert_eq!(out, expect);
    }

    #[test]
    fn standard_default_thresholds() {
        // T.87, C.2.4.1.1.1 / Table C.3.
        assert_eq!(default_thresholds(255, 0, false), (3, 7, 21));
        assert_eq!(default_thresholds(4095, 0, false), (18, 67, 276));
        assert_eq!(default_thresholds(65535, 0, false), (18, 67, 276));
        assert_eq!(default_thresholds(65535, 2, false), (24, 77, 290));
        assert_eq!(default_thresholds(255, 2, false), (9, 17, 35));
        assert_eq!(default_thresholds(15, 0, false), (2, 3, 4));
        assert_eq!(default_thresholds(127, 0, false), (2, 3, 10));
    }

    #[test]
    fn errors_are_reported() {
        let mut out = Vec::new();
        let gray8 = include_bytes!("testdata/gray8_lossless.jls");
        let err = |d: &[u8], out: &mut Vec<u8>| decode(d, out).unwrap_err().0;
        assert!(err(&[], &mut out).contains("end of data"));
        assert!(err(b"\xFF\xD8\xFF\xC0\x00\x02", &mut out).contains("not a JPEG-LS"));
        // HP colour transform (APP8 "mrfx", transform 1).
        let mut hp = gray8[..2].to_vec();
        hp.extend_from_slice(b"\xFF\xE8\x00\x07mrfx\x01");
        hp.extend_from_slice(&gray8[2..]);
        assert!(err(&hp, &mut out).contains("HP colour"));
        // Mapping table (LSE type 2).
        let mut mt = gray8[..2].to_vec();
        mt.extend_from_slice(b"\xFF\xF8\x00\x05\x02\x01\x01");
        mt.extend_from_slice(&gray8[2..]);
        assert!(err(&mt, &mut out).contains("mapping table"));
        // 65535 x 65535 x 3 exceeds the 2^30 samples limit, without allocating.
        let big =
            b"\xFF\xD8\xFF\xF7\x00\x11\x08\xFF\xFF\xFF\xFF\x03\x01\x11\x00\x02\x11\x00\x03\x11\x00\
                    \xFF\xDA\x00\x0C\x03\x01\x00\x02\x00\x03\x00\x00\x01\x00\x00\xFF\xD9";
        assert!(err(big, &mut out).contains("too large"));
        // Oversize dimensions (LSE type 4) of 2^32 - 1 each: no overflow, same error.
        let mut huge =
            b"\xFF\xD8\xFF\xF7\x00\x11\x08\x00\x00\x00\x00\x03\x01\x11\x00\x02\x11\x00\x03\x11\x00\
                         \xFF\xF8\x00\x0C\x04\x04\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF"
                .to_vec();
        huge.extend_from_slice(&big[21..]);
        assert!(err(&huge, &mut out).contains("too large"));
        // A header that the data cannot fill is rejected before allocating.
        let mut short = big.to_vec();
        short[7..11].copy_from_slice(&[0x40, 0x00, 0x40, 0x00]);
        assert!(err(&short, &mut out).contains("too little data"));
        // Truncated entropy-coded data.
        let cut = &gray8[..gray8.len() - 40];
        assert!(decode(cut, &mut out).is_err());
        // Wrong restart marker number (RST0 replaced by RST3).
        let mut rst = include_bytes!("testdata/gray8_restart5.jls").to_vec();
        let at = rst.windows(2).position(|w| w == [0xFF, 0xD0]).unwrap();
        rst[at + 1] = 0xD3;
        assert!(err(&rst, &mut out).contains("restart marker"));
    }

    #[test]
    fn hostile_variants_never_panic() {
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut out = Vec::new();
        for f in fixtures() {
            for i in 0..300 {
                let mut d = f.data.to_vec();
                let n = d.len();
                match i % 4 {
                    0 => d.truncate(rnd() as usize % n),
                    1 => {
                        for _ in 0..1 + rnd() % 3 {
                            d[rnd() as usize % n] ^= 1 << (rnd() % 8);
                        }
                    }
                    2 => d[rnd() as usize % n.min(48)] = rnd() as u8,
                    _ => {
                        let p = rnd() as usize % n;
                        d.splice(p..p, [0xFF, rnd() as u8]);
                    }
                }
                let _ = decode(&d, &mut out);
            }
        }
    }
}
