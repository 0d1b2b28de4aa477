//! Overlay planes drawn on a rendered grayscale frame, as DCMTK 3.6.7 draws them by default
//! (`DiMonoOutputPixelTemplate::overlay`, `dcm2pnm` without `-O`): each plane that covers the
//! frame, in group order, on the final 8-bit output (after VOI and MONOCHROME1 inversion),
//! clipped to the image; graphics planes set their pixels to white (255), region-of-interest
//! planes darken the pixels of their area outside the region to `v >> 4`.
//!
//! The same function runs on both backends, on the 8-bit output in the slot after the
//! render (the CUDA backend leaves PNG filtering of such frames to the writer), so the bytes
//! are the same.

use std::sync::Arc;

use crate::decode::overlay::{OverlayBits, OverlayMode, OverlayPlane};

/// The overlay planes that cover one frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameOverlay {
    pub planes: Vec<PlaneOnFrame>,
}

/// One plane on one frame: where its first bit is for this frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlaneOnFrame {
    pub plane: Arc<OverlayPlane>,
    /// Index of the frame's first overlay bit in the plane's Overlay Data.
    pub first_bit: u64,
}

impl FrameOverlay {
    /// The planes of `planes` that cover frame `frame`, or `None` when none does.
    pub fn for_frame(planes: &[Arc<OverlayPlane>], frame: u32) -> Option<FrameOverlay> {
        let planes: Vec<PlaneOnFrame> = planes
            .iter()
            .filter_map(|p| {
                p.first_bit(frame).map(|first_bit| PlaneOnFrame {
                    plane: Arc::clone(p),
                    first_bit,
                })
            })
            .collect();
        (!planes.is_empty()).then_some(FrameOverlay { planes })
    }
}

/// Draws `overlay` on `out` (8-bit grey, `cols` x `rows`). `input` holds the frame's stored
/// values (`bytes` per sample, native order) for planes embedded in the pixel data.
pub fn apply(
    overlay: &FrameOverlay,
    input: &[u8],
    bytes: usize,
    out: &mut [u8],
    cols: u32,
    rows: u32,
) {
    let (cols, rows) = (cols as i64, rows as i64);
    for on in &overlay.planes {
        let p = &on.plane;
        let (top, left) = (p.top as i64, p.left as i64);
        let (xmin, ymin) = (left.max(0), top.max(0));
        let xmax = (left + p.columns as i64).min(cols);
        let ymax = (top + p.rows as i64).min(rows);
        for y in ymin..ymax {
            for x in xmin..xmax {
                // Bit index within the plane's frame: DCMTK's setStart/getNextBit.
                let within = ((y - top) * p.columns as i64 + (x - left)) as u64;
                let set = match &p.bits {
                    OverlayBits::Data(data) => {
                        let i = on.first_bit + within;
                        data.get((i / 8) as usize)
                            .is_some_and(|&b| (b >> (i % 8)) & 1 == 1)
                    }
                    OverlayBits::Embedded { bit } => {
                        sample(input, bytes, within as usize) >> bit & 1 == 1
                    }
                };
                let Some(q) = out.get_mut((y * cols + x) as usize) else {
                    continue;
                };
                match p.mode {
                    OverlayMode::Graphic if set => *q = 255,
                    OverlayMode::RegionOfInterest if !set => *q >>= 4,
                    _ => {}
                }
            }
        }
    }
}

/// The raw container value of sample `i` (0 past the end).
fn sample(input: &[u8], bytes: usize, i: usize) -> u32 {
    let at = i * bytes;
    match input.get(at..at + bytes) {
        Some([b]) => u32::from(*b),
        Some([a, b]) => u32::from(u16::from_ne_bytes([*a, *b])),
        Some([a, b, c, d]) => u32::from_ne_bytes([*a, *b, *c, *d]),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plane(
        top: i32,
        left: i32,
        rows: u16,
        columns: u16,
        mode: OverlayMode,
        bits: OverlayBits,
    ) -> Arc<OverlayPlane> {
        Arc::new(OverlayPlane {
            group: 0x6000,
            rows,
            columns,
            top,
            left,
            frame_origin: 0,
            frames: 1,
            mode,
            bits,
            label: None,
        })
    }

    #[test]
    fn graphics_set_white_and_regions_darken_outside_clipped_to_the_image() {
        // 2x3 plane at row 0, column 1 of a 4x2 image, bits 1 0 1 / 0 1 1 (LSB first).
        let data = OverlayBits::Data(Arc::new(vec![0b0011_0101]));
        let g = plane(0, 1, 2, 3, OverlayMode::Graphic, data.clone());
        let ov = FrameOverlay::for_frame(&[g], 0).unwrap();
        let mut out = vec![100u8; 8];
        apply(&ov, &[], 1, &mut out, 4, 2);
        assert_eq!(out, [100, 255, 100, 255, 100, 100, 255, 255]);
        let r = plane(0, 1, 2, 3, OverlayMode::RegionOfInterest, data);
        let ov = FrameOverlay::for_frame(&[r], 0).unwrap();
        let mut out = vec![100u8; 8];
        apply(&ov, &[], 1, &mut out, 4, 2);
        assert_eq!(out, [100, 100, 6, 100, 100, 6, 100, 100]);
        // A plane wholly outside the image shows nothing.
        let off = plane(
            -5,
            0,
            2,
            3,
            OverlayMode::Graphic,
            OverlayBits::Data(Arc::new(vec![0xff])),
        );
        assert!(FrameOverlay::for_frame(&[off], 0).is_none());
    }

    #[test]
    fn embedded_planes_read_a_bit_of_the_stored_values() {
        let e = plane(
            0,
            0,
            1,
            3,
            OverlayMode::Graphic,
            OverlayBits::Embedded { bit: 15 },
        );
        let ov = FrameOverlay::for_frame(&[e], 0).unwrap();
        let input: Vec<u8> = [0x8001u16, 0x0fff, 0xf000]
            .iter()
            .flat_map(|v| v.to_ne_bytes())
            .collect();
        let mut out = vec![7u8; 3];
        apply(&ov, &input, 2, &mut out, 3, 1);
        assert_eq!(out, [255, 7, 255]);
    }
}
