//! Decoding of one JPEG-LS scan (ITU-T T.87, Annex A): context modelling, prediction, bias
//! correction, limited-length Golomb decoding, run mode, line / sample interleaving and
//! restart intervals. Behaviour follows the standard and, where the standard leaves room,
//! CharLS (which DCMTK and GDCM use).

use super::bits::BitReader;
use super::{find_marker_end, next_marker, JlsError};

/// T.87, A.2.1 / code segment A.14: run-length order for each RUNindex.
const J: [u32; 32] = [
    0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 9, 10, 11, 12, 13,
    14, 15,
];

/// Upper bound on |A| and |B| (as CharLS): larger values only come from corrupt data.
const CTX_LIMIT: i32 = 1 << 24;

/// Cheap error of the per-sample hot paths (converted to [`JlsError`] per line).
#[derive(Debug, Clone, Copy)]
struct Corrupt;

impl From<Corrupt> for JlsError {
    fn from(_: Corrupt) -> Self {
        JlsError("invalid JPEG-LS entropy-coded data".into())
    }
}

/// Coding parameters of one scan (T.87, A.2.1 and C.2.4.1.1).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Params {
    pub maxval: i32,
    pub near: i32,
    pub t1: i32,
    pub t2: i32,
    pub t3: i32,
    pub reset: i32,
    range: i32,
    qbpp: u32,
    limit: u32,
}

impl Params {
    /// `maxval` >= 1, 0 <= `near` <= maxval / 2, thresholds and reset already validated.
    pub(crate) fn new(maxval: i32, near: i32, t1: i32, t2: i32, t3: i32, reset: i32) -> Self {
        let range = (maxval + 2 * near) / (2 * near + 1) + 1;
        // ceil(log2(RANGE)) and bpp = max(2, ceil(log2(MAXVAL + 1))).
        let qbpp = 32 - ((range - 1).max(1) as u32).leading_zeros();
        let bpp = (32 - (maxval.max(1) as u32).leading_zeros()).max(2);
        let limit = 2 * (bpp + bpp.max(8));
        Params {
            maxval,
            near,
            t1,
            t2,
            t3,
            reset,
            range,
            qbpp,
            limit,
        }
    }
}

/// Default thresholds (T.87, C.2.4.1.1.1), as (T1, T2, T3). With `legacy`, the formula of
/// CharLS 1.x (so DCMTK up to at least 3.6.7): the MAXVAL >= 128 branch for every MAXVAL
/// (CharLS issue #51); it differs from the standard only when MAXVAL < 128.
pub(crate) fn default_thresholds(maxval: i32, near: i32, legacy: bool) -> (i32, i32, i32) {
    let clamp = |i: i32, j: i32| if i > maxval || i < j { j } else { i };
    if maxval >= 128 || legacy {
        // FACTOR * (BASIC_Tn - k) + k + c * NEAR with BASIC_T1..3 = 3, 7, 21.
        let factor = (maxval.min(4095) + 128) / 256;
        let t1 = clamp(factor + 2 + 3 * near, near + 1);
        let t2 = clamp(factor * 4 + 3 + 5 * near, t1);
        let t3 = clamp(factor * 17 + 4 + 7 * near, t2);
        (t1, t2, t3)
    } else {
        let factor = 256 / (maxval + 1);
        let t1 = clamp((3 / factor + 3 * near).max(2), near + 1);
        let t2 = clamp((7 / factor + 5 * near).max(3), t1);
        let t3 = clamp((21 / factor + 7 * near).max(4), t2);
        (t1, t2, t3)
    }
}

/// Smallest k >= 0 with (n << k) >= a, for 1 <= n and 0 <= a < 2^31.
#[inline]
fn golomb_k(n: i32, a: i32) -> u32 {
    let n = n.max(1) as u32;
    let a = a.max(0) as u32;
    if n >= a {
        return 0;
    }
    let d = n.leading_zeros() - a.leading_zeros();
    d + u32::from((n << d) < a)
}

/// Gradient quantisation Q(d) (T.87, A.3.3, code segment A.4) for d in -maxval..=maxval (at
/// index d + maxval), built region by region
/// (T1 <= T2 <= T3 and NEAR < T1 are validated).
fn quant_lut(p: &Params) -> Vec<i8> {
    let len = 2 * p.maxval as usize + 1;
    let mut q = Vec::with_capacity(len);
    let regions = [
        (-p.t3, -4),
        (-p.t2, -3),
        (-p.t1, -2),
        (-p.near - 1, -1),
        (p.near, 0),
        (p.t1 - 1, 1),
        (p.t2 - 1, 2),
        (p.t3 - 1, 3),
        (p.maxval, 4),
    ];
    for (last, v) in regions {
        let upto = (last + p.maxval + 1).clamp(0, len as i32) as usize;
        if upto > q.len() {
            q.resize(upto, v);
        }
    }
    q
}

#[derive(Debug, Clone, Copy)]
struct Ctx {
    a: i32,
    b: i32,
    c: i32,
    n: i32,
}

#[derive(Debug, Clone, Copy)]
struct RunCtx {
    a: i32,
    n: i32,
    nn: i32,
}

/// One scan's decoding state.
struct Coder<'a> {
    p: Params,
    /// Q(d) for d in -maxval..=maxval, at index d + maxval.
    quant: Vec<i8>,
    ctx: [Ctx; 365],
    run: [RunCtx; 2],
    run_index: usize,
    br: BitReader<'a>,
}

#[inline]
fn med(ra: i32, rb: i32, rc: i32) -> i32 {
    if rc >= ra.max(rb) {
        ra.min(rb)
    } else if rc <= ra.min(rb) {
        ra.max(rb)
    } else {
        ra + rb - rc
    }
}

impl<'a> Coder<'a> {
    fn new(p: Params) -> Self {
        let quant = quant_lut(&p);
        let mut c = Coder {
            p,
            quant,
            ctx: [Ctx {
                a: 0,
                b: 0,
                c: 0,
                n: 1,
            }; 365],
            run: [RunCtx { a: 0, n: 1, nn: 0 }; 2],
            run_index: 0,
            br: BitReader::new(&[]),
        };
        c.reset();
        c
    }

    /// Context initialisation (T.87, A.2.1 step 1), also done at each restart marker.
    fn reset(&mut self) {
        let a = ((self.p.range + 32) / 64).max(2);
        self.ctx = [Ctx {
            a,
            b: 0,
            c: 0,
            n: 1,
        }; 365];
        self.run = [RunCtx { a, n: 1, nn: 0 }; 2];
        self.run_index = 0;
    }

    #[inline]
    fn q(&self, d: i32) -> i32 {
        self.quant
            .get((d + self.p.maxval) as usize)
            .map_or(0, |&v| i32::from(v))
    }

    #[inline]
    fn context_id(&self, ra: i32, rb: i32, rc: i32, rd: i32) -> i32 {
        (self.q(rd - rb) * 9 + self.q(rb - rc)) * 9 + self.q(rc - ra)
    }

    /// Modulo reduction and clamping of a reconstructed value (T.87, A.4.5 / A.6).
    #[inline]
    fn fix(&self, v: i32) -> i32 {
        let p = &self.p;
        let v = if v < -p.near {
            v + p.range * (2 * p.near + 1)
        } else if v > p.maxval + p.near {
            v - p.range * (2 * p.near + 1)
        } else {
            v
        };
        v.clamp(0, p.maxval)
    }

    /// Regular-mode sample (T.87, A.4 to A.6).
    #[inline(always)]
    fn regular(&mut self, qs: i32, predicted: i32) -> Result<i32, Corrupt> {
        let sign = qs >> 31;
        let maxval = self.p.maxval;
        let near = self.p.near;
        let max_high = self.p.limit - self.p.qbpp - 1;
        let qbpp = self.p.qbpp;
        let reset = self.p.reset;
        let ctx = self
            .ctx
            .get_mut(((qs ^ sign) - sign) as usize)
            .ok_or(Corrupt)?;
        let k = golomb_k(ctx.n, ctx.a);
        let px = (predicted + ((ctx.c ^ sign) - sign)).clamp(0, maxval);
        let m = self.br.decode_value(k, max_high, qbpp).ok_or(Corrupt)?;
        if m > 1 << 20 {
            return Err(Corrupt);
        }
        let m = m as i32;
        let mut err = if m & 1 == 0 { m >> 1 } else { -((m + 1) >> 1) };
        if err.abs() > 65535 {
            return Err(Corrupt);
        }
        if near == 0 && k == 0 && 2 * ctx.b + ctx.n - 1 < 0 {
            err = -err - 1;
        }
        // Code segments A.12 and A.13.
        ctx.a += err.abs();
        ctx.b += err * (2 * near + 1);
        if ctx.a >= CTX_LIMIT || ctx.b.abs() >= CTX_LIMIT {
            return Err(Corrupt);
        }
        if ctx.n == reset {
            ctx.a >>= 1;
            ctx.b >>= 1;
            ctx.n >>= 1;
        }
        ctx.n += 1;
        if ctx.b + ctx.n <= 0 {
            ctx.b += ctx.n;
            if ctx.b <= -ctx.n {
                ctx.b = -ctx.n + 1;
            }
            if ctx.c > -128 {
                ctx.c -= 1;
            }
        } else if ctx.b > 0 {
            ctx.b -= ctx.n;
            if ctx.b > 0 {
                ctx.b = 0;
            }
            if ctx.c < 127 {
                ctx.c += 1;
            }
        }
        let err = (err ^ sign) - sign;
        Ok(self.fix(px + err * (2 * near + 1)))
    }

    /// Run length (T.87, A.7.1.2), at most `remaining` samples.
    #[inline]
    fn run_length(&mut self, remaining: usize) -> Result<usize, Corrupt> {
        let mut len = 0usize;
        while self.br.read_bit() {
            let j = J.get(self.run_index).copied().unwrap_or(15);
            let full = 1usize << j;
            let count = full.min(remaining - len);
            len += count;
            if count == full {
                self.run_index = (self.run_index + 1).min(31);
            }
            if len == remaining {
                break;
            }
        }
        if len != remaining {
            let j = J.get(self.run_index).copied().unwrap_or(15);
            len += self.br.read(j) as usize;
        }
        if len > remaining || self.br.overrun() {
            return Err(Corrupt);
        }
        Ok(len)
    }

    /// Error value of a run interruption sample (T.87, A.7.2), context `ri` = RItype.
    fn interruption_error(&mut self, ri: usize) -> Result<i32, Corrupt> {
        let j = J.get(self.run_index).copied().unwrap_or(15);
        let qbpp = self.p.qbpp;
        let max_high = self.p.limit.checked_sub(j + 1 + qbpp + 1).ok_or(Corrupt)?;
        let reset = self.p.reset;
        let ctx = self.run.get_mut(ri).ok_or(Corrupt)?;
        let ritype = ri as i32;
        let k = golomb_k(ctx.n, ctx.a + (ctx.n >> 1) * ritype);
        let em = self.br.decode_value(k, max_high, qbpp).ok_or(Corrupt)?;
        if em > 1 << 20 {
            return Err(Corrupt);
        }
        let em = em as i32;
        let t = em + ritype;
        let map = t & 1 == 1;
        let abs = (t + i32::from(map)) / 2;
        let err = if (k != 0 || 2 * ctx.nn >= ctx.n) == map {
            -abs
        } else {
            abs
        };
        // Code segment A.23.
        if err < 0 {
            ctx.nn += 1;
        }
        ctx.a += (em + 1 - ritype) >> 1;
        if ctx.a >= CTX_LIMIT {
            return Err(Corrupt);
        }
        if ctx.n == reset {
            ctx.a >>= 1;
            ctx.n >>= 1;
            ctx.nn >>= 1;
        }
        ctx.n += 1;
        Ok(err)
    }

    /// One line of one component. `prev` and `cur` hold the line at indices 1..=w with the
    /// edge samples at 0 and w + 1 already set.
    fn line(&mut self, prev: &[i32], cur: &mut [i32], w: usize) -> Result<(), Corrupt> {
        if prev.len() < w + 2 || cur.len() < w + 2 {
            return Err(Corrupt);
        }
        let near = self.p.near;
        let mut x = 0usize;
        let mut rb = prev[0];
        let mut rd = prev[1];
        while x < w {
            let ra = cur[x];
            let rc = rb;
            rb = rd;
            rd = prev[x + 2];
            let qs = self.context_id(ra, rb, rc, rd);
            if qs != 0 {
                cur[x + 1] = self.regular(qs, med(ra, rb, rc))?;
                x += 1;
            } else {
                let len = self.run_length(w - x)?;
                for v in &mut cur[x + 1..x + 1 + len] {
                    *v = ra;
                }
                x += len;
                if x < w {
                    let rb = prev[x + 1];
                    let rx = if (ra - rb).abs() <= near {
                        let e = self.interruption_error(1)?;
                        self.fix(ra + e * (2 * near + 1))
                    } else {
                        let e = self.interruption_error(0)?;
                        let e = if rb < ra { -e } else { e };
                        self.fix(rb + e * (2 * near + 1))
                    };
                    cur[x + 1] = rx;
                    self.run_index = self.run_index.saturating_sub(1);
                    x += 1;
                }
                rb = prev[x];
                rd = prev[x + 1];
            }
        }
        Ok(())
    }

    /// One line of `nc` sample-interleaved components (ILV = 2). Pixel x is at
    /// `(x + 1) * nc ..`, edges as in [`Coder::line`].
    fn line_interleaved(
        &mut self,
        prev: &[i32],
        cur: &mut [i32],
        w: usize,
        nc: usize,
    ) -> Result<(), Corrupt> {
        if nc == 0 || nc > 4 || prev.len() < (w + 2) * nc || cur.len() < (w + 2) * nc {
            return Err(Corrupt);
        }
        let near = self.p.near;
        let mut qs = [0i32; 4];
        let mut pred = [0i32; 4];
        let mut x = 0usize;
        while x < w {
            let base = (x + 1) * nc;
            let mut all_zero = true;
            for c in 0..nc {
                let ra = cur[base - nc + c];
                let rc = prev[base - nc + c];
                let rb = prev[base + c];
                let rd = prev[base + nc + c];
                qs[c] = self.context_id(ra, rb, rc, rd);
                pred[c] = med(ra, rb, rc);
                all_zero &= qs[c] == 0;
            }
            if !all_zero {
                for c in 0..nc {
                    cur[base + c] = self.regular(qs[c], pred[c])?;
                }
                x += 1;
                continue;
            }
            let mut ra = [0i32; 4];
            ra[..nc].copy_from_slice(&cur[base - nc..base]);
            let len = self.run_length(w - x)?;
            for px in cur[base..base + len * nc].chunks_exact_mut(nc) {
                px.copy_from_slice(&ra[..nc]);
            }
            x += len;
            if x < w {
                let base = (x + 1) * nc;
                for c in 0..nc {
                    let rb = prev[base + c];
                    let e = self.interruption_error(0)?;
                    let e = if rb < ra[c] { -e } else { e };
                    cur[base + c] = self.fix(rb + e * (2 * near + 1));
                }
                self.run_index = self.run_index.saturating_sub(1);
                x += 1;
            }
        }
        Ok(())
    }
}

/// What one scan covers and how to write it out.
pub(crate) struct ScanSpec<'s> {
    pub width: usize,
    pub height: usize,
    /// Components in the frame (the output pixel stride in samples).
    pub frame_comps: usize,
    /// Frame component index of each scan component, in scan order.
    pub comps: &'s [usize],
    /// 0 = none (one component), 1 = line, 2 = sample.
    pub ilv: u8,
    pub params: Params,
    /// Lines per restart interval, 0 = none.
    pub restart_interval: u32,
    /// Output samples are u16 (native endian) instead of u8.
    pub wide: bool,
}

/// Writes the samples `values` (one per pixel) of component `comp` into output row `y`.
fn put_row(
    out: &mut [u8],
    spec: &ScanSpec<'_>,
    y: usize,
    comp: usize,
    values: impl Iterator<Item = i32>,
) -> Result<(), JlsError> {
    let bps = if spec.wide { 2 } else { 1 };
    let pixel = spec.frame_comps * bps;
    let row = spec.width * pixel;
    let dst = out
        .get_mut(y * row..(y + 1) * row)
        .ok_or_else(|| JlsError("output buffer too small".into()))?;
    let off = comp * bps;
    if spec.wide {
        for (px, v) in dst.chunks_exact_mut(pixel).zip(values) {
            if let Some(s) = px.get_mut(off..off + 2) {
                s.copy_from_slice(&(v as u16).to_ne_bytes());
            }
        }
    } else {
        for (px, v) in dst.chunks_exact_mut(pixel).zip(values) {
            if let Some(s) = px.get_mut(off) {
                *s = v as u8;
            }
        }
    }
    Ok(())
}

/// Where a scan ended.
pub(crate) struct ScanEnd {
    /// Offset of the marker that follows the entropy-coded data.
    pub pos: usize,
    /// Bits of the last entropy-coded segment left unread (an encoder pads less than a byte,
    /// plus at most one byte after a final 0xFF; more means the decoder lost sync).
    pub unread_bits: u64,
}

/// Decodes the scan whose entropy-coded data starts at `data[start]`.
pub(crate) fn decode_scan(
    data: &[u8],
    start: usize,
    spec: &ScanSpec<'_>,
    out: &mut [u8],
) -> Result<ScanEnd, JlsError> {
    let w = spec.width;
    let h = spec.height;
    let ns = spec.comps.len();
    if w == 0 || h == 0 || ns == 0 {
        return Err(JlsError("empty scan".into()));
    }
    let (planes, nc) = match spec.ilv {
        2 if ns > 1 => (1, ns),
        _ => (ns, 1),
    };
    if nc > 4 {
        return Err(JlsError(
            "sample interleaving with more than 4 components is not supported".into(),
        ));
    }
    let stride = (w + 2) * nc;
    let mut prev = vec![vec![0i32; stride]; planes];
    let mut cur = vec![vec![0i32; stride]; planes];
    let mut run_index = vec![0usize; planes];
    let interval = match spec.restart_interval {
        0 => h,
        r => r as usize,
    };
    let mut coder = Coder::new(spec.params);
    let mut pos = start;
    let mut y = 0usize;
    let mut rst = 0u8;
    loop {
        let end = find_marker_end(data, pos);
        coder.br = BitReader::new(data.get(pos..end).unwrap_or(&[]));
        let lines = interval.min(h - y);
        for _ in 0..lines {
            for ((pv, cv), ri) in prev.iter_mut().zip(cur.iter_mut()).zip(&mut run_index) {
                std::mem::swap(pv, cv);
                // Edges: Rd past the end repeats the last sample above; Ra before the start
                // is the sample above (T.87, A.2.1 / CharLS).
                for c in 0..nc {
                    pv[(w + 1) * nc + c] = pv[w * nc + c];
                    cv[c] = pv[nc + c];
                }
                coder.run_index = *ri;
                if nc == 1 {
                    coder.line(pv, cv, w)?;
                } else {
                    coder.line_interleaved(pv, cv, w, nc)?;
                }
                *ri = coder.run_index;
            }
            if coder.br.overrun() {
                return Err(JlsError(
                    "JPEG-LS entropy-coded data is truncated or corrupt".into(),
                ));
            }
            if nc == 1 {
                for (p, &comp) in spec.comps.iter().enumerate() {
                    let line = cur.get(p).map_or(&[][..], |l| &l[1..=w]);
                    put_row(out, spec, y, comp, line.iter().copied())?;
                }
            } else if let Some(line) = cur.first() {
                for (c, &comp) in spec.comps.iter().enumerate() {
                    let vals = line.iter().skip(nc + c).step_by(nc).take(w).copied();
                    put_row(out, spec, y, comp, vals)?;
                }
            }
            y += 1;
        }
        pos = end;
        if y >= h {
            return Ok(ScanEnd {
                pos,
                unread_bits: coder.br.unread_bits(),
            });
        }
        let code = next_marker(data, &mut pos)?;
        if code != 0xD0 + rst {
            return Err(JlsError(format!(
                "expected restart marker RST{rst}, found marker 0xFF{code:02X}"
            )));
        }
        rst = (rst + 1) % 8;
        for v in prev.iter_mut().chain(cur.iter_mut()) {
            v.fill(0);
        }
        run_index.fill(0);
        coder.reset();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Gradient quantisation Q(d), literally as T.87 code segment A.4.
    fn quantize(p: &Params, d: i32) -> i8 {
        if d <= -p.t3 {
            -4
        } else if d <= -p.t2 {
            -3
        } else if d <= -p.t1 {
            -2
        } else if d < -p.near {
            -1
        } else if d <= p.near {
            0
        } else if d < p.t1 {
            1
        } else if d < p.t2 {
            2
        } else if d < p.t3 {
            3
        } else {
            4
        }
    }

    #[test]
    fn quant_lut_matches_definition() {
        for (maxval, near, t) in [
            (255, 0, (3, 7, 21)),
            (65535, 0, (18, 67, 276)),
            (63, 3, (4, 4, 4)),
            (15, 0, (2, 3, 4)),
            (4095, 5, (6, 6, 300)),
            (3, 0, (1, 2, 3)),
        ] {
            let p = Params::new(maxval, near, t.0, t.1, t.2, 64);
            let lut = quant_lut(&p);
            assert_eq!(lut.len(), 2 * maxval as usize + 1);
            for d in -maxval..=maxval {
                assert_eq!(
                    lut[(d + maxval) as usize],
                    quantize(&p, d),
                    "{maxval} {near} {t:?} {d}"
                );
            }
        }
    }

    #[test]
    fn golomb_k_is_smallest_k() {
        for n in 1..300 {
            for a in (0..70_000).step_by(7) {
                let mut k = 0;
                while (n << k) < a {
                    k += 1;
                }
                assert_eq!(golomb_k(n, a), k, "n={n} a={a}");
            }
        }
    }
}
