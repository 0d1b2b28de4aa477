//! Unit tests: DCMTK-decoded fixtures, hand-made streams, error paths and a no-panic
//! mutation sweep.
//!
//! The fixtures in `testdata/` were encoded with cjpeg (libjpeg-turbo 2.1) or DCMTK's
//! dcmcjpeg, wrapped into DICOM and decoded with DCMTK 3.6.7 `dcmdjpeg` (default `+cp`;
//! `.dcmtk_cn` files with `+cn`); the `.dcmtk` files hold DCMTK's samples (8-bit as bytes,
//! 12-bit as little-endian u16). See `tests/fixtures/jpeg_exactness.md`.

use super::*;

/// Decodes `jpeg` and compares with DCMTK's samples; 12-bit references are little-endian.
fn check_fixture(jpeg: &[u8], reference: &[u8], convert: bool, expect: (u32, u32, u8, u8)) {
    let mut out = Vec::new();
    let img = decode(jpeg, convert, &mut out).expect("fixture decodes");
    assert_eq!(
        (img.width, img.height, img.components, img.precision),
        expect
    );
    assert_eq!(img.converted_to_rgb, convert && img.components == 3);
    let expected: Vec<u8> = if img.precision == 8 {
        reference.to_vec()
    } else {
        reference
            .chunks_exact(2)
            .flat_map(|b| u16::from_le_bytes([b[0], b[1]]).to_ne_bytes())
            .collect()
    };
    assert_eq!(out.len(), expected.len());
    let differing = out.iter().zip(&expected).filter(|(a, b)| a != b).count();
    assert_eq!(differing, 0, "bytes differing from DCMTK");
}

#[test]
fn gray8_restart_interval_matches_dcmtk() {
    check_fixture(
        include_bytes!("testdata/gray8_21x13_rst.jpg"),
        include_bytes!("testdata/gray8_21x13_rst.dcmtk"),
        false,
        (21, 13, 1, 8),
    );
}

#[test]
fn gray12_extended_matches_dcmtk() {
    check_fixture(
        include_bytes!("testdata/gray12_19x11.jpg"),
        include_bytes!("testdata/gray12_19x11.dcmtk"),
        false,
        (19, 11, 1, 12),
    );
}

#[test]
fn ycbcr_420_converted_matches_dcmtk() {
    check_fixture(
        include_bytes!("testdata/ycc420_23x15.jpg"),
        include_bytes!("testdata/ycc420_23x15.dcmtk"),
        true,
        (23, 15, 3, 8),
    );
}

#[test]
fn ycbcr_420_unconverted_matches_dcmtk_cn() {
    check_fixture(
        include_bytes!("testdata/ycc420_23x15.jpg"),
        include_bytes!("testdata/ycc420_23x15.dcmtk_cn"),
        false,
        (23, 15, 3, 8),
    );
}

#[test]
fn ycbcr_422_12bit_matches_dcmtk() {
    check_fixture(
        include_bytes!("testdata/ycc422_12bit_17x9.jpg"),
        include_bytes!("testdata/ycc422_12bit_17x9.dcmtk"),
        true,
        (17, 9, 3, 12),
    );
}

/// Lossless fixtures from `tests/fixtures/lossless_jpeg_encoder.py` (restart intervals,
/// point transforms, a stream cut short), references decoded by DCMTK 3.6.7 `dcmdjpeg`.
#[test]
fn lossless_with_point_transform_and_restarts_matches_dcmtk() {
    check_fixture(
        include_bytes!("testdata/ll_8_3_sv7_pt2_ri5.jpg"),
        include_bytes!("testdata/ll_8_3_sv7_pt2_ri5.dcmtk"),
        false,
        (17, 23, 3, 8),
    );
    check_fixture(
        include_bytes!("testdata/ll_12_1_sv4_pt0_ri1.jpg"),
        include_bytes!("testdata/ll_12_1_sv4_pt0_ri1.dcmtk"),
        false,
        (17, 23, 1, 12),
    );
}

#[test]
fn lossless_stream_cut_short_decodes_like_ijg() {
    // Predictor 6, Pt 2, a restart every 3 rows, EOI two thirds into the data: the rows
    // after the cut are the initial predictor 2^(16-2-1) << 2 = 32768.
    check_fixture(
        include_bytes!("testdata/ll_16_1_sv6_pt2_ri3_cut.jpg"),
        include_bytes!("testdata/ll_16_1_sv6_pt2_ri3_cut.dcmtk"),
        false,
        (17, 23, 1, 16),
    );
    let mut out = Vec::new();
    decode(
        include_bytes!("testdata/ll_16_1_sv6_pt2_ri3_cut.jpg"),
        false,
        &mut out,
    )
    .unwrap();
    let last_row = &out[out.len() - 2 * 17..];
    assert!(last_row
        .chunks_exact(2)
        .all(|b| u16::from_ne_bytes([b[0], b[1]]) == 32768));
}

/// A hand-made 4x2 lossless stream: every difference is coded by category 1 or 0 with a
/// one-entry table, so the samples follow from the predictors alone.
#[test]
fn lossless_point_transform_shifts_reconstructed_values() {
    // DHT: class 0 id 0, two codes of length 1: category 0 ("0") and category 1 ("1").
    let mut bits = [0u8; 16];
    bits[0] = 2;
    let mut dht = vec![0x00];
    dht.extend_from_slice(&bits);
    dht.extend_from_slice(&[0, 1]);
    let mut s = vec![0xFF, 0xD8];
    s.extend(segment(0xC4, &dht));
    // SOF3: precision 8, 2 rows, 4 columns, 1 component.
    s.extend(segment(0xC3, &[8, 0, 2, 0, 4, 1, 1, 0x11, 0]));
    // SOS: predictor 1, Pt 3.
    s.extend(segment(0xDA, &[1, 1, 0x00, 1, 0, 3]));
    // Row 0 differences +1, 0, +1, -1; row 1 +1, +1, 0, 0. Category 1 codes "1" then a
    // magnitude bit (1 = +1, 0 = -1); category 0 codes "0".
    // bits: 11 0 11 10 | 11 11 0 0, then 1-bits padding -> 1101 1101 1110 0111
    s.extend([0xDD, 0xE7, 0xFF, 0xD9]);
    let mut out = Vec::new();
    let img = decode(&s, false, &mut out).unwrap();
    assert_eq!((img.width, img.height, img.precision), (4, 2, 8));
    // Reduced values: first row from 2^(8-3-1) = 16: 17 17 18 17; second row starts from the
    // sample above: 18, then left neighbours: 19 19 19. Output = reduced << 3.
    let expect: Vec<u8> = [17u8, 17, 18, 17, 18, 19, 19, 19]
        .iter()
        .map(|v| v << 3)
        .collect();
    assert_eq!(out, expect);
}

#[test]
fn mixed_sampling_noninterleaved_scans_match_dcmtk() {
    // Y 2x1, Cb 1x2, Cr 1x1 (replicate, h2v1 fancy and h2v2 fancy), two scans, restarts.
    check_fixture(
        include_bytes!("testdata/ycc_mixed_multiscan_19x10.jpg"),
        include_bytes!("testdata/ycc_mixed_multiscan_19x10.dcmtk"),
        true,
        (19, 10, 3, 8),
    );
}

#[test]
fn early_eoi_is_zero_filled_like_ijg() {
    check_fixture(
        include_bytes!("testdata/gray8_24_eoi_early.jpg"),
        include_bytes!("testdata/gray8_24_eoi_early.dcmtk"),
        false,
        (24, 24, 1, 8),
    );
}

fn segment(marker: u8, payload: &[u8]) -> Vec<u8> {
    let len = (payload.len() + 2) as u16;
    let mut s = vec![0xFF, marker];
    s.extend_from_slice(&len.to_be_bytes());
    s.extend_from_slice(payload);
    s
}

/// A one-code Huffman table: code "0" for symbol 0 (DC difference 0, or AC end-of-block).
fn one_code_table(class_and_id: u8) -> Vec<u8> {
    let mut t = vec![class_and_id, 1];
    t.extend_from_slice(&[0; 15]);
    t.push(0);
    t
}

/// A complete stream whose every block is "DC diff 0, EOB" (2 bits): a flat mid-grey image.
/// `comps` lists (id, sampling byte).
fn synthetic(
    sof: u8,
    precision: u8,
    (w, h): (u16, u16),
    comps: &[(u8, u8)],
    entropy: &[u8],
) -> Vec<u8> {
    let mut s = vec![0xFF, markers::SOI];
    let mut dqt = vec![0];
    dqt.extend_from_slice(&[1; 64]);
    s.extend(segment(0xDB, &dqt));
    let mut sof_payload = vec![precision];
    sof_payload.extend_from_slice(&h.to_be_bytes());
    sof_payload.extend_from_slice(&w.to_be_bytes());
    sof_payload.push(comps.len() as u8);
    for &(id, hv) in comps {
        sof_payload.extend_from_slice(&[id, hv, 0]);
    }
    s.extend(segment(sof, &sof_payload));
    let mut dht = one_code_table(0x00);
    dht.extend(one_code_table(0x10));
    s.extend(segment(0xC4, &dht));
    let mut sos = vec![comps.len() as u8];
    for &(id, _) in comps {
        sos.extend_from_slice(&[id, 0x00]);
    }
    sos.extend_from_slice(&[0, 63, 0]);
    s.extend(segment(markers::SOS, &sos));
    s.extend_from_slice(entropy);
    s
}

fn with_eoi(mut s: Vec<u8>) -> Vec<u8> {
    s.extend_from_slice(&[0xFF, markers::EOI]);
    s
}

fn decode_err(data: &[u8]) -> String {
    let mut out = Vec::new();
    match decode(data, true, &mut out) {
        Ok(img) => panic!("expected an error, got {img:?}"),
        Err(e) => e.message,
    }
}

#[test]
fn synthetic_flat_images() {
    let mut out = Vec::new();
    let gray = with_eoi(synthetic(0xC0, 8, (16, 8), &[(1, 0x11)], &[0x00]));
    let img = decode(&gray, true, &mut out).expect("decodes");
    assert_eq!(
        (img.width, img.height, img.components, img.converted_to_rgb),
        (16, 8, 1, false)
    );
    assert!(out.len() == 128 && out.iter().all(|&v| v == 128));

    let gray12 = with_eoi(synthetic(0xC1, 12, (5, 3), &[(1, 0x11)], &[0x00]));
    let img = decode(&gray12, false, &mut out).expect("decodes");
    assert_eq!(img.precision, 12);
    assert_eq!(out.len(), 5 * 3 * 2);
    assert!(out
        .chunks_exact(2)
        .all(|b| u16::from_ne_bytes([b[0], b[1]]) == 2048));

    // 4:2:0 colour, 6 blocks per MCU = 12 bits of zeros; mid-grey YCbCr is mid-grey RGB.
    let color = with_eoi(synthetic(
        0xC0,
        8,
        (16, 16),
        &[(1, 0x22), (2, 0x11), (3, 0x11)],
        &[0, 0],
    ));
    let img = decode(&color, true, &mut out).expect("decodes");
    assert!(img.converted_to_rgb);
    assert!(out.len() == 16 * 16 * 3 && out.iter().all(|&v| v == 128));
}

#[test]
fn unsupported_processes_are_reported() {
    let e = decode_err(&with_eoi(synthetic(0xC2, 8, (8, 8), &[(1, 0x11)], &[0])));
    assert!(
        e.contains("unsupported") && e.contains("progressive"),
        "{e}"
    );
    let e = decode_err(&with_eoi(synthetic(0xCB, 8, (8, 8), &[(1, 0x11)], &[0])));
    assert!(e.contains("unsupported") && e.contains("lossless"), "{e}");
    let e = decode_err(&with_eoi(synthetic(0xC9, 8, (8, 8), &[(1, 0x11)], &[0])));
    assert!(e.contains("unsupported") && e.contains("arithmetic"), "{e}");
    let e = decode_err(&with_eoi(synthetic(0xC5, 8, (8, 8), &[(1, 0x11)], &[0])));
    assert!(e.contains("unsupported"), "{e}");
    let e = decode_err(&with_eoi(synthetic(0xC0, 16, (8, 8), &[(1, 0x11)], &[0])));
    assert!(e.contains("16-bit"), "{e}");
}

#[test]
fn malformed_streams_are_errors() {
    decode_err(b"");
    decode_err(b"\xFF");
    decode_err(b"not a jpeg at all");
    // Height 0 (DNL) and absurd sizes are refused before any allocation.
    decode_err(&with_eoi(synthetic(0xC0, 8, (8, 0), &[(1, 0x11)], &[0])));
    decode_err(&with_eoi(synthetic(
        0xC0,
        8,
        (65500, 65500),
        &[(1, 0x11)],
        &[0],
    )));
    decode_err(&with_eoi(synthetic(
        0xC0,
        8,
        (65501, 8),
        &[(1, 0x11)],
        &[0],
    )));
    // Bad sampling factors: zero, and a ratio that is not integral (IJG refuses both).
    decode_err(&with_eoi(synthetic(0xC0, 8, (8, 8), &[(1, 0x01)], &[0])));
    decode_err(&with_eoi(synthetic(
        0xC0,
        8,
        (8, 8),
        &[(1, 0x31), (2, 0x21)],
        &[0],
    )));
    // More than 10 blocks per MCU.
    decode_err(&with_eoi(synthetic(
        0xC0,
        8,
        (64, 64),
        &[(1, 0x44), (2, 0x11)],
        &[0],
    )));
    // No EOI: DCMTK's source manager fails instead of inventing one.
    let e = decode_err(&synthetic(0xC0, 8, (16, 8), &[(1, 0x11)], &[0x00]));
    assert!(e.contains("truncated"), "{e}");
    // SOS without SOF.
    let mut s = vec![0xFF, 0xD8];
    s.extend(segment(markers::SOS, &[1, 1, 0, 0, 63, 0]));
    decode_err(&with_eoi(s));
    // Second scan in a single-scan image (IJG: "EOI expected").
    let mut twice = synthetic(0xC0, 8, (8, 8), &[(1, 0x11)], &[0]);
    twice.extend(segment(markers::SOS, &[1, 1, 0, 0, 63, 0]));
    twice.push(0);
    decode_err(&with_eoi(twice));
}

#[test]
fn missing_tables_are_errors() {
    let full = with_eoi(synthetic(0xC0, 8, (8, 8), &[(1, 0x11)], &[0]));
    // Drop the DQT segment (bytes 2..71) and, separately, the DHT segment.
    let dqt_len = 4 + 65;
    let mut no_dqt = full[..2].to_vec();
    no_dqt.extend_from_slice(&full[2 + dqt_len..]);
    assert!(decode_err(&no_dqt).contains("quantization table"));
    let sof_len = 4 + 6 + 3;
    let dht_start = 2 + dqt_len + sof_len;
    let dht_len = 4 + 2 * 18;
    let mut no_dht = full[..dht_start].to_vec();
    no_dht.extend_from_slice(&full[dht_start + dht_len..]);
    assert!(decode_err(&no_dht).contains("Huffman table"));
}

#[test]
fn every_strict_prefix_fails_without_panicking() {
    let data: &[u8] = include_bytes!("testdata/ycc420_23x15.jpg");
    let mut out = Vec::new();
    for n in 0..data.len() {
        assert!(
            decode(&data[..n], true, &mut out).is_err(),
            "prefix of {n} bytes"
        );
    }
}

#[test]
fn random_damage_never_panics() {
    let fixtures: [&[u8]; 4] = [
        include_bytes!("testdata/gray8_21x13_rst.jpg"),
        include_bytes!("testdata/gray12_19x11.jpg"),
        include_bytes!("testdata/ycc422_12bit_17x9.jpg"),
        include_bytes!("testdata/ycc_mixed_multiscan_19x10.jpg"),
    ];
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut out = Vec::new();
    for data in fixtures {
        for _ in 0..400 {
            let mut d = data.to_vec();
            for _ in 0..1 + next() % 4 {
                let pos = (next() as usize) % d.len();
                d[pos] = next() as u8;
            }
            let _ = decode(&d, next() % 2 == 0, &mut out);
        }
    }
}

#[test]
fn huffman_table_overflow_is_rejected() {
    // Three 1-bit codes cannot exist.
    let mut bits = [0u8; 17];
    bits[1] = 3;
    let spec = HuffSpec {
        bits,
        vals: vec![0, 1, 2],
    };
    assert!(huffman::HuffTable::build(&spec).is_err());
    // Two 1-bit codes (all-ones code included) are accepted, as IJG does.
    bits[1] = 2;
    let spec = HuffSpec {
        bits,
        vals: vec![0, 1],
    };
    assert!(huffman::HuffTable::build(&spec).is_ok());
}

#[test]
fn range_limit_wraps_like_ijg() {
    // Coefficient 0 dequantized by 0 → CENTERJSAMPLE; a huge DC wraps around RANGE_MASK.
    let mut out = [0u16; 64];
    let coef = [0i16; 64];
    idct::idct_islow::<8>(&coef, &[1; 64], &mut out, 8);
    assert!(out.iter().all(|&v| v == 128));
    let mut coef = [0i16; 64];
    coef[0] = 1024; // +1024*8/8 → 128 + 1024: index 1024 & 1023 = 0 → CENTER after wrap.
    idct::idct_islow::<8>(&coef, &[8; 64], &mut out, 8);
    assert!(out.iter().all(|&v| v == 128), "{out:?}");
    coef[0] = 100;
    idct::idct_islow::<8>(&coef, &[8; 64], &mut out, 8);
    assert!(out.iter().all(|&v| v == 228));
    idct::idct_islow::<12>(&coef, &[8; 64], &mut out, 8);
    assert!(out.iter().all(|&v| v == 2148));
}

#[test]
fn data_cut_short_fails_or_decodes_partially() {
    for (data, rows_per_unit) in [
        (&include_bytes!("testdata/ll_12_1_sv4_pt0_ri1.jpg")[..], 1),
        (&include_bytes!("testdata/gray12_19x11.jpg")[..], 8),
    ] {
        let cut = &data[..data.len() * 2 / 3];
        let mut out = Vec::new();
        let e = decode(cut, false, &mut out).unwrap_err();
        assert!(e.truncated, "{e}");
        let img = decode_with(cut, false, &mut out, true).unwrap();
        let rows = img.complete_rows.unwrap();
        assert!(
            rows < img.height && rows.is_multiple_of(rows_per_unit),
            "{rows}"
        );
        // Rows before the cut are what a full decode gives, the rest are zero.
        let mut full = Vec::new();
        decode(data, false, &mut full).unwrap();
        let row_bytes = full.len() / img.height as usize;
        let good = rows as usize * row_bytes;
        assert_eq!(out[..good], full[..good]);
        assert!(out[good..].iter().all(|&b| b == 0));
        // Only the end-of-image marker missing: every row decodes.
        let img = decode_with(&data[..data.len() - 2], false, &mut out, true).unwrap();
        assert_eq!(img.complete_rows, Some(img.height));
        assert_eq!(out, full);
    }
}
