//! IJG 6b `jidctint.c` (JDCT_ISLOW, the library default that DCMTK uses), ported literally.
//!
//! Exactness details that matter: products and sums are done in 64-bit (`IJG_INT32` is a C
//! `long`, 64-bit on the Linux builds of DCMTK), the inter-pass workspace is a C `int`
//! (truncated to 32 bits), `PASS1_BITS` is 2 for 8-bit and 1 for 12-bit data, and the
//! output goes through IJG's `range_limit` table, which *wraps* values outside
//! `RANGE_MASK` instead of clamping them (only reachable with garbage coefficients).

const CONST_BITS: u32 = 13;

const FIX_0_298631336: i64 = 2446;
const FIX_0_390180644: i64 = 3196;
const FIX_0_541196100: i64 = 4433;
const FIX_0_765366865: i64 = 6270;
const FIX_0_899976223: i64 = 7373;
const FIX_1_175875602: i64 = 9633;
const FIX_1_501321110: i64 = 12299;
const FIX_1_847759065: i64 = 15137;
const FIX_1_961570560: i64 = 16069;
const FIX_2_053119869: i64 = 16819;
const FIX_2_562915447: i64 = 20995;
const FIX_3_072711026: i64 = 25172;

#[inline(always)]
fn descale(x: i64, n: u32) -> i64 {
    (x + (1 << (n - 1))) >> n
}

/// IJG's post-IDCT `range_limit` table (jdmaster.c `prepare_range_limit_table`, seen from
/// `IDCT_range_limit = sample_range_limit + CENTERJSAMPLE`), indexed by `x & RANGE_MASK`:
/// the low BITS+2 bits of `x` read as a signed value, plus CENTERJSAMPLE, clamped.
const fn range_table<const N: usize>(bits: u32) -> [u16; N] {
    let mut table = [0u16; N];
    let center = 1i64 << (bits - 1);
    let max = (1i64 << bits) - 1;
    let mut i = 0;
    while i < N {
        let signed = if i >= N / 2 {
            i as i64 - N as i64
        } else {
            i as i64
        };
        let v = signed + center;
        table[i] = if v < 0 {
            0
        } else if v > max {
            max as u16
        } else {
            v as u16
        };
        i += 1;
    }
    table
}

static RANGE_LIMIT_8: [u16; 1024] = range_table::<1024>(8);
static RANGE_LIMIT_12: [u16; 16384] = range_table::<16384>(12);

#[inline(always)]
fn range_limit<const BITS: u32>(x: i64) -> u16 {
    // RANGE_MASK = MAXJSAMPLE * 4 + 3; the masks keep the lookups in bounds.
    if BITS == 8 {
        RANGE_LIMIT_8[(x & 1023) as usize]
    } else {
        RANGE_LIMIT_12[(x & 16383) as usize]
    }
}

#[inline(always)]
const fn pass1_bits(bits: u32) -> u32 {
    if bits == 8 {
        2
    } else {
        1
    }
}

/// The eight outputs of the 1-D ISLOW butterfly, before descaling. `x[k]` is the k-th
/// frequency input; `x[0]`/`x[4]` are scaled by `2^CONST_BITS` as in IJG.
#[inline(always)]
fn butterfly(x: [i64; 8]) -> [i64; 8] {
    // Even part: the rotator is sqrt(2)*c(-6).
    let z1 = (x[2] + x[6]) * FIX_0_541196100;
    let tmp2 = z1 + x[6] * -FIX_1_847759065;
    let tmp3 = z1 + x[2] * FIX_0_765366865;
    let tmp0 = (x[0] + x[4]) << CONST_BITS;
    let tmp1 = (x[0] - x[4]) << CONST_BITS;
    let tmp10 = tmp0 + tmp3;
    let tmp13 = tmp0 - tmp3;
    let tmp11 = tmp1 + tmp2;
    let tmp12 = tmp1 - tmp2;

    // Odd part per figure 8 of the IJG paper; inputs are y7, y5, y3, y1.
    let (t0, t1, t2, t3) = (x[7], x[5], x[3], x[1]);
    let z1 = t0 + t3;
    let z2 = t1 + t2;
    let z3 = t0 + t2;
    let z4 = t1 + t3;
    let z5 = (z3 + z4) * FIX_1_175875602;
    let z1 = z1 * -FIX_0_899976223;
    let z2 = z2 * -FIX_2_562915447;
    let z3 = z3 * -FIX_1_961570560 + z5;
    let z4 = z4 * -FIX_0_390180644 + z5;
    let t0 = t0 * FIX_0_298631336 + z1 + z3;
    let t1 = t1 * FIX_2_053119869 + z2 + z4;
    let t2 = t2 * FIX_3_072711026 + z2 + z3;
    let t3 = t3 * FIX_1_501321110 + z1 + z4;

    [
        tmp10 + t3,
        tmp11 + t2,
        tmp12 + t1,
        tmp13 + t0,
        tmp13 - t0,
        tmp12 - t1,
        tmp11 - t2,
        tmp10 - t3,
    ]
}

/// Dequantizes and inverse-transforms one block into `out` (top-left sample at `out[0]`,
/// rows `stride` apart). `BITS` is the sample precision, 8 or 12. A literal port of
/// `jpeg_idct_islow`, shortcuts for all-zero AC columns and rows included.
pub(super) fn idct_islow<const BITS: u32>(
    coef: &[i16; 64],
    quant: &[i32; 64],
    out: &mut [u16],
    stride: usize,
) {
    let pass1_bits = pass1_bits(BITS);
    let mut ws = [0i32; 64];

    // Pass 1: columns from the input into the workspace, scaled up by 2^PASS1_BITS.
    for c in 0..8 {
        // DEQUANTIZE is a C int product; |coef| <= 32768 and q <= 65535 keep it in range.
        let deq = |r: usize| i32::from(coef[r * 8 + c]) * quant[r * 8 + c];
        let ac = (1..8).fold(0, |acc, r| acc | coef[r * 8 + c]);
        if ac == 0 {
            // IJG's shortcut; an `int` shift, so it wraps exactly like the C code.
            let dc = deq(0) << pass1_bits;
            for r in 0..8 {
                ws[r * 8 + c] = dc;
            }
            continue;
        }
        let x: [i64; 8] = std::array::from_fn(|r| i64::from(deq(r)));
        let y = butterfly(x);
        for (r, &v) in y.iter().enumerate() {
            ws[r * 8 + c] = descale(v, CONST_BITS - pass1_bits) as i32;
        }
    }

    // Pass 2: rows from the workspace to the output, removing 2^(PASS1_BITS+3).
    for (r, row) in ws.chunks_exact(8).enumerate() {
        let mut samples = [0u16; 8];
        if row[1..].iter().fold(0, |acc, &v| acc | v) == 0 {
            samples = [range_limit::<BITS>(descale(i64::from(row[0]), pass1_bits + 3)); 8];
        } else {
            let x: [i64; 8] = std::array::from_fn(|k| i64::from(row[k]));
            let y = butterfly(x);
            for (s, &v) in samples.iter_mut().zip(&y) {
                *s = range_limit::<BITS>(descale(v, CONST_BITS + pass1_bits + 3));
            }
        }
        if let Some(dst) = out.get_mut(r * stride..r * stride + 8) {
            dst.copy_from_slice(&samples);
        }
    }
}
