//! Colour models to 8-bit RGB with DCMTK's arithmetic (docs/dcmtk-render-notes.md §8):
//! signed samples offset to unsigned, YBR_FULL at 8 bits through truncated integer tables and
//! otherwise through the double formula, 4:2:2 streams as Y1 Y2 Cb Cr pairs, palettes through
//! their LUTs, and the result narrowed to 8 bits by shifting (or scaled up from fewer bits).

use crate::render::plan::{ColorModel, ColorPlan};

/// Reads sample `i` (native order) of a frame with `bytes` per sample.
#[inline]
fn sample(input: &[u8], bytes: usize, i: usize) -> u32 {
    match bytes {
        1 => input[i] as u32,
        2 => u16::from_ne_bytes([input[2 * i], input[2 * i + 1]]) as u32,
        _ => u32::from_ne_bytes([
            input[4 * i],
            input[4 * i + 1],
            input[4 * i + 2],
            input[4 * i + 3],
        ]),
    }
}

/// Narrows a `bits`-bit unsigned value to 8 bits (§8.5).
#[inline]
fn narrow(v: u32, bits: u32) -> u8 {
    if bits == 8 {
        v as u8
    } else if bits > 8 {
        (v >> (bits - 8)) as u8
    } else {
        let g = 255.0 / ((1u32 << bits) - 1) as f64;
        if g.fract() == 0.0 {
            (v * g as u32) as u8
        } else {
            (v as f64 * g) as u8
        }
    }
}

/// The integer tables DCMTK uses for 8-bit unsigned YBR_FULL (§8.2).
struct YbrTables {
    rcr: [i32; 256],
    gcb: [i32; 256],
    gcr: [i32; 256],
    bcb: [i32; 256],
}

impl YbrTables {
    fn new() -> Self {
        let mut t = YbrTables {
            rcr: [0; 256],
            gcb: [0; 256],
            gcr: [0; 256],
            bcb: [0; 256],
        };
        let (r0, g0, b0) = (0.7010 * 255.0, 0.5291 * 255.0, 0.8859 * 255.0);
        for l in 0..256 {
            let x = l as f64;
            // (Sint16) casts: truncation toward zero.
            t.rcr[l] = (1.4020 * x - r0) as i16 as i32;
            t.gcb[l] = (0.3441 * x) as i16 as i32;
            t.gcr[l] = (0.7141 * x - g0) as i16 as i32;
            t.bcb[l] = (1.7720 * x - b0) as i16 as i32;
        }
        t
    }

    #[inline]
    fn convert(&self, y: u32, cb: u32, cr: u32) -> [u32; 3] {
        let (y, cb, cr) = (y as i32, cb as usize & 255, cr as usize & 255);
        let c = |v: i32| v.clamp(0, 255) as u32;
        [
            c(y + self.rcr[cr]),
            c(y - self.gcb[cb] - self.gcr[cr]),
            c(y + self.bcb[cb]),
        ]
    }
}

/// DCMTK's clamp of a converted colour value to [0, m], truncating.
#[inline]
fn clip(d: f64, m: f64) -> u32 {
    if d < 0.0 {
        0
    } else if d > m {
        m as u32
    } else {
        d as u32
    }
}

/// DCMTK's double YBR_FULL formula with maximum `m` (§8.2).
#[inline]
fn ybr_full_double(y: u32, cb: u32, cr: u32, m: f64) -> [u32; 3] {
    let (y, cb, cr) = (y as f64, cb as f64, cr as f64);
    [
        clip(y + 1.4020 * cr - 0.7010 * m, m),
        clip(y - 0.3441 * cb - 0.7141 * cr + 0.5291 * m, m),
        clip(y + 1.7720 * cb - 0.8859 * m, m),
    ]
}

/// DCMTK's YBR_PARTIAL_422 formula (§8.3).
#[inline]
fn ybr_partial_double(y: u32, cb: u32, cr: u32, m: f64) -> [u32; 3] {
    let (y, cb, cr) = (y as f64, cb as f64, cr as f64);
    [
        clip(1.1631 * y + 1.5969 * cr - 0.8713 * m, m),
        clip(1.1631 * y - 0.3913 * cb - 0.8121 * cr + 0.5290 * m, m),
        clip(1.1631 * y + 2.0177 * cb - 1.0820 * m, m),
    ]
}

/// The RGB output of PALETTE COLOR for a stored bit pattern (already shifted and masked):
/// the index is signed when the pixels are, each LUT clamps, and entries are narrowed by the
/// largest LUT depth (§8.4, §8.5).
pub fn palette_rgb(plan: &ColorPlan, pattern: u32) -> [u8; 3] {
    let ColorModel::Palette(luts) = &plan.model else {
        return [0; 3];
    };
    let bits = plan.stored.bits_stored as u32;
    let signed = plan.stored.signed;
    let index = if signed && bits < 32 && (pattern >> (bits - 1)) & 1 == 1 {
        pattern as i64 - (1i64 << bits)
    } else {
        pattern as i64
    };
    let bits_out = luts.iter().map(|l| l.bits as u32).max().unwrap_or(8);
    let mut rgb = [0u8; 3];
    for (c, lut) in luts.iter().enumerate() {
        rgb[c] = narrow(lut.lookup(index, signed) as u32, bits_out);
    }
    rgb
}

/// Bytes of stored samples a colour frame occupies in its slot.
pub fn input_samples(plan: &ColorPlan, pixels: usize) -> usize {
    match plan.model {
        ColorModel::YbrFull422 | ColorModel::YbrPartial422 if plan.subsampled => pixels * 2,
        ColorModel::Palette(_) => pixels,
        _ => pixels * 3,
    }
}

/// Renders a colour frame into interleaved 8-bit RGB.
pub fn render_color(
    plan: &ColorPlan,
    pixels: usize,
    input: &[u8],
    out: &mut [u8],
) -> Result<(), crate::render::error::PlanError> {
    let bytes = plan.stored.bytes();
    if input.len() < input_samples(plan, pixels) * bytes || out.len() < pixels * 3 {
        return Err(crate::render::error::PlanError::Internal(
            "colour slot smaller than the frame".into(),
        ));
    }
    let bits = plan.stored.bits_stored as u32;
    let mask = if bits >= 32 {
        u32::MAX
    } else {
        (1u32 << bits) - 1
    };
    let shift = (plan.stored.high_bit + 1 - plan.stored.bits_stored) as u32;
    let signed = plan.stored.signed;
    // Stored value, made unsigned for colour models (DCMTK's removeSign: v + 2^(bits-1)).
    let value = |i: usize| -> u32 {
        let v = (sample(input, bytes, i) >> shift) & mask;
        if signed && bits < 32 {
            v ^ (1u32 << (bits - 1))
        } else {
            v
        }
    };
    let m = mask as f64;
    match &plan.model {
        ColorModel::Palette(_) => {
            for p in 0..pixels {
                let pattern = (sample(input, bytes, p) >> shift) & mask;
                out[3 * p..3 * p + 3].copy_from_slice(&palette_rgb(plan, pattern));
            }
        }
        ColorModel::YbrFull422 | ColorModel::YbrPartial422 if plan.subsampled => {
            let partial = matches!(plan.model, ColorModel::YbrPartial422);
            // Y1 Y2 Cb Cr per pixel pair; an odd last pixel is left black, as DCMTK leaves it.
            for pair in 0..pixels / 2 {
                let (y1, y2, cb, cr) = (
                    value(4 * pair),
                    value(4 * pair + 1),
                    value(4 * pair + 2),
                    value(4 * pair + 3),
                );
                for (k, y) in [y1, y2].into_iter().enumerate() {
                    let rgb = if partial {
                        ybr_partial_double(y, cb, cr, m)
                    } else {
                        ybr_full_double(y, cb, cr, m)
                    };
                    let p = 2 * pair + k;
                    for c in 0..3 {
                        out[3 * p + c] = narrow(rgb[c], bits);
                    }
                }
            }
            if pixels % 2 == 1 {
                out[3 * (pixels - 1)..3 * pixels].fill(0);
            }
        }
        model => {
            let at = |p: usize, c: usize| -> u32 {
                if plan.planar {
                    value(c * pixels + p)
                } else {
                    value(3 * p + c)
                }
            };
            let tables =
                (matches!(model, ColorModel::YbrFull) && bits == 8 && !signed).then(YbrTables::new);
            for p in 0..pixels {
                let (a, b, c) = (at(p, 0), at(p, 1), at(p, 2));
                let rgb = match model {
                    ColorModel::Rgb => [a, b, c],
                    ColorModel::YbrFull | ColorModel::YbrFull422 => match &tables {
                        Some(t) => t.convert(a, b, c),
                        None => ybr_full_double(a, b, c, m),
                    },
                    ColorModel::YbrPartial422 => ybr_partial_double(a, b, c, m),
                    ColorModel::Palette(_) => unreachable!("handled above"),
                };
                for k in 0..3 {
                    out[3 * p + k] = narrow(rgb[k], bits);
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn narrowing_follows_dcmtk() {
        assert_eq!(narrow(0xfff, 12), 0xff);
        assert_eq!(narrow(200, 8), 200);
        assert_eq!(narrow(15, 4), 255);
        assert_eq!(narrow(1, 3), 36); // trunc(255/7)
        assert_eq!(narrow(63, 6), 255);
        assert_eq!(narrow(1, 6), 4); // trunc(4.047...)
    }

    #[test]
    fn ybr_tables_match_the_documented_formula_at_gray() {
        let t = YbrTables::new();
        // Neutral chroma keeps luminance within one table truncation step.
        for y in [0u32, 16, 100, 128, 235, 255] {
            let rgb = t.convert(y, 128, 128);
            for c in rgb {
                assert!((c as i32 - y as i32).abs() <= 2, "{y} -> {rgb:?}");
            }
        }
    }
}
