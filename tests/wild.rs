//! Conformance in the wild (issue 16): what a golden comparison alone cannot show.
//!
//! * Decoded stored values against the true pixels, for the causes that used to render
//!   wrong without a word (a JPEG Lossless point transform, explicit big endian pixel data that
//!   is not 16-bit): the fixtures come from `tests/fixtures/make_conformance.sh`, which also
//!   compares their renderings with DCMTK's (`tests/conformance.rs`).
//! * Damaged images are failures with a reason, never "skipped (not an image)"
//!   (`tests/fixtures/damaged`, made by the same script).

mod common;

use std::path::{Path, PathBuf};

use dicomflow::decode::{probe, DecodeLimits, ImageFile, ImageInfo};

fn conformance(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/conformance")
        .join(name)
}

/// The header and every frame's stored values, as the pipeline decodes them into slots.
fn decode(path: &Path) -> (ImageInfo, Vec<Vec<u8>>) {
    let kind = probe(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let limits = DecodeLimits {
        max_frame_bytes: 1 << 30,
    };
    let mut file =
        ImageFile::open(path, kind, limits).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let info = file.info.clone();
    let mut scratch = Vec::new();
    let frames = (0..info.frames)
        .map(|f| {
            let mut dst = vec![0u8; info.frame_bytes() as usize];
            file.read_frame(f, &mut dst, &mut scratch)
                .unwrap_or_else(|e| panic!("{} frame {}: {e}", path.display(), f + 1));
            dst
        })
        .collect();
    (info, frames)
}

fn u16s(bytes: &[u8]) -> Vec<u16> {
    bytes
        .chunks_exact(2)
        .map(|b| u16::from_ne_bytes([b[0], b[1]]))
        .collect()
}

/// Cause 1: a JPEG Lossless point transform Pt drops the Pt low bits; what remains must be
/// the source's value exactly (the decoder used to ignore Pt: noise, reported as success).
#[test]
fn jpeg_lossless_point_transform_gives_the_true_pixels() {
    for (compressed, source, pt) in [
        ("jpeg_lossless_pt2.dcm", "mammo16.dcm", 2),
        ("jpeg_lossless_sv6_pt3.dcm", "ts_explicit_le.dcm", 3),
    ] {
        let (info, got) = decode(&conformance(compressed));
        let (_, want) = decode(&conformance(source));
        assert_eq!(info.bits_allocated, 16);
        let mask = !((1u16 << pt) - 1);
        let want: Vec<u16> = u16s(&want[0]).iter().map(|v| v & mask).collect();
        let got = u16s(&got[0]);
        let differing = got.iter().zip(&want).filter(|(a, b)| a != b).count();
        assert_eq!(
            differing,
            0,
            "{compressed}: {differing} of {} samples differ from {source} with the low {pt} \
             bits cleared",
            want.len()
        );
    }
}
