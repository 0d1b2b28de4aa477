//! Output stage: IJG 6b `jdcolor.c` YCbCr→RGB (`ycc_rgb_convert`) or plain interleaving
//! (`null_convert`), written as u8 (8-bit) or native-endian u16 (12-bit) samples.

/// IJG `FIX(x)` with SCALEBITS = 16: `(x * 65536 + 0.5) as i32`.
const FIX_1_40200: i32 = 91881;
const FIX_1_77200: i32 = 116130;
const FIX_0_71414: i32 = 46802;
const FIX_0_34414: i32 = 22554;
const ONE_HALF: i32 = 1 << 15;

/// IJG's table-driven conversion, computed inline: the tables hold exactly these
/// expressions (`Cb_g_tab` includes ONE_HALF), and `range_limit` clamps.
#[inline(always)]
fn ycc_to_rgb<const BITS: u32>(y: u16, cb: u16, cr: u16) -> [u16; 3] {
    let center = 1i32 << (BITS - 1);
    let max = (1i32 << BITS) - 1;
    let y = i32::from(y);
    let cb = i32::from(cb) - center;
    let cr = i32::from(cr) - center;
    let r = y + ((FIX_1_40200 * cr + ONE_HALF) >> 16);
    let g = y + ((-FIX_0_34414 * cb + ONE_HALF - FIX_0_71414 * cr) >> 16);
    let b = y + ((FIX_1_77200 * cb + ONE_HALF) >> 16);
    [r, g, b].map(|v| v.clamp(0, max) as u16)
}

/// Writes one output row. `rows` holds each component's upsampled row (image width long).
pub(super) fn write_row(rows: &[&[u16]], convert: bool, precision: u8, out: &mut [u8]) {
    match (rows, convert, precision) {
        ([y, cb, cr], true, 8) => ycc_row_u8(y, cb, cr, out),
        ([y, cb, cr], true, _) => ycc_row_u16(y, cb, cr, out),
        (_, _, 8) => interleave_u8(rows, out),
        _ => interleave_u16(rows, out),
    }
}

fn ycc_row_u8(y: &[u16], cb: &[u16], cr: &[u16], out: &mut [u8]) {
    for (px, ((&y, &cb), &cr)) in out.chunks_exact_mut(3).zip(y.iter().zip(cb).zip(cr)) {
        let rgb = ycc_to_rgb::<8>(y, cb, cr);
        for (o, v) in px.iter_mut().zip(rgb) {
            *o = v as u8;
        }
    }
}

fn ycc_row_u16(y: &[u16], cb: &[u16], cr: &[u16], out: &mut [u8]) {
    for (px, ((&y, &cb), &cr)) in out.chunks_exact_mut(6).zip(y.iter().zip(cb).zip(cr)) {
        let rgb = ycc_to_rgb::<12>(y, cb, cr);
        for (o, v) in px.chunks_exact_mut(2).zip(rgb) {
            o.copy_from_slice(&v.to_ne_bytes());
        }
    }
}

fn interleave_u8(rows: &[&[u16]], out: &mut [u8]) {
    if let [row] = rows {
        for (o, &v) in out.iter_mut().zip(row.iter()) {
            *o = v as u8;
        }
        return;
    }
    let n = rows.len().max(1);
    for (c, row) in rows.iter().enumerate() {
        for (o, &v) in out.iter_mut().skip(c).step_by(n).zip(row.iter()) {
            *o = v as u8;
        }
    }
}

fn interleave_u16(rows: &[&[u16]], out: &mut [u8]) {
    if let [row] = rows {
        for (o, &v) in out.chunks_exact_mut(2).zip(row.iter()) {
            o.copy_from_slice(&v.to_ne_bytes());
        }
        return;
    }
    let n = rows.len().max(1);
    for (c, row) in rows.iter().enumerate() {
        for (o, &v) in out.chunks_exact_mut(2).skip(c).step_by(n).zip(row.iter()) {
            o.copy_from_slice(&v.to_ne_bytes());
        }
    }
}
