//! Chroma upsampling as IJG 6b `jdsample.c` does it with `do_fancy_upsampling = TRUE`, and
//! the row loop that produces the interleaved output.
//!
//! IJG picks, per component: nothing for full-size components; the triangle filter
//! `h2v1_fancy_upsample` / `h2v2_fancy_upsample` for exact 2:1 / 2:1+2:1 ratios when the
//! component is more than 2 samples wide; plain replication otherwise (including 1:2
//! vertical-only and 4:1 ratios). Edges use the component's real size (IJG's
//! `downsampled_width`/`height`): the first/last column and the row above the top or below the
//! bottom repeat the edge samples; block padding is never read.

use super::color;
use super::frame::{Component, Frame, Plane};
use super::{err, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Method {
    Full,
    H2V1Fancy,
    H2V2Fancy,
    Replicate { hx: usize, vx: usize },
}

/// IJG `jinit_upsampler` method choice (ratios are integral, checked at SOF time).
fn select(frame: &Frame, comp: &Component) -> Method {
    let hx = frame.max_h / comp.h.max(1);
    let vx = frame.max_v / comp.v.max(1);
    match (hx, vx) {
        (1, 1) => Method::Full,
        (2, 1) if comp.ds_width > 2 => Method::H2V1Fancy,
        (2, 2) if comp.ds_width > 2 => Method::H2V2Fancy,
        _ => Method::Replicate { hx, vx },
    }
}

/// Upsamples (and colour-converts when asked) every row into `out`.
pub(super) fn write_output(
    frame: &Frame,
    planes: &[Plane],
    convert: bool,
    out: &mut Vec<u8>,
) -> Result<()> {
    let ncomp = frame.comps.len();
    let bytes = if frame.precision == 8 { 1 } else { 2 };
    let row_bytes = frame.width * ncomp * bytes;
    let Some(total) = row_bytes.checked_mul(frame.height) else {
        return err("image too large");
    };
    out.clear();
    out.resize(total, 0);
    let methods: Vec<Method> = frame.comps.iter().map(|c| select(frame, c)).collect();
    // Room for a fancy-upsampled row (2 * ds_width may exceed the image width by one).
    let mut bufs: Vec<Vec<u16>> = frame
        .comps
        .iter()
        .map(|c| vec![0u16; frame.width.max(2 * c.ds_width)])
        .collect();
    for (y, out_row) in out.chunks_exact_mut(row_bytes.max(1)).enumerate() {
        let mut rows: [&[u16]; 4] = [&[]; 4];
        let sources = frame
            .comps
            .iter()
            .zip(planes)
            .zip(&methods)
            .zip(bufs.iter_mut());
        for (slot, (((comp, plane), &method), buf)) in rows.iter_mut().zip(sources) {
            let line = Line {
                comp,
                plane,
                y,
                width: frame.width,
            };
            *slot = upsample_row(method, line, buf)?;
        }
        color::write_row(
            rows.get(..ncomp).unwrap_or(&[]),
            convert,
            frame.precision,
            out_row,
        );
    }
    Ok(())
}

/// Which output row of which component is wanted.
#[derive(Clone, Copy)]
struct Line<'a> {
    comp: &'a Component,
    plane: &'a Plane,
    y: usize,
    width: usize,
}

impl<'a> Line<'a> {
    /// Row `r` of the component's real (non-padding) samples.
    fn source(&self, r: usize) -> Result<&'a [u16]> {
        let start = r * self.plane.stride;
        match self.plane.samples.get(start..start + self.comp.ds_width) {
            Some(s) => Ok(s),
            None => err("internal: component row out of range"),
        }
    }
}

fn upsample_row<'a>(method: Method, line: Line<'a>, buf: &'a mut [u16]) -> Result<&'a [u16]> {
    let produced: &'a mut [u16] = match method {
        Method::Full => {
            return line
                .source(line.y)
                .map(|s| s.get(..line.width).unwrap_or(s))
        }
        Method::H2V1Fancy => {
            h2v1_fancy(line.source(line.y)?, buf);
            buf
        }
        Method::H2V2Fancy => {
            let r = line.y / 2;
            // Even output rows lean on the row above, odd ones on the row below (clamped).
            let far = if line.y.is_multiple_of(2) {
                r.saturating_sub(1)
            } else {
                (r + 1).min(line.comp.ds_height.saturating_sub(1))
            };
            h2v2_fancy(line.source(r)?, line.source(far)?, buf);
            buf
        }
        Method::Replicate { hx, vx } => {
            let src = line.source(line.y / vx.max(1))?;
            for (chunk, &v) in buf.chunks_mut(hx.max(1)).zip(src) {
                chunk.fill(v);
            }
            buf
        }
    };
    match produced.get(..line.width) {
        Some(s) => Ok(s),
        None => err("internal: upsampling buffer too small"),
    }
}

/// Stores one pair of horizontally adjacent output samples.
fn put(pair: &mut [u16], a: u32, b: u32) {
    if let [x, y] = pair {
        *x = a as u16;
        *y = b as u16;
    }
}

/// IJG `h2v1_fancy_upsample`: each output is 3/4 nearer + 1/4 further input sample, with
/// alternating rounding (+1 / +2) so that errors do not accumulate in one direction.
fn h2v1_fancy(src: &[u16], out: &mut [u16]) {
    let f = |i: usize| u32::from(src.get(i).copied().unwrap_or(0));
    let n = src.len();
    if n < 2 {
        return;
    }
    let mut pairs = out.chunks_exact_mut(2);
    if let Some(p) = pairs.next() {
        put(p, f(0), (f(0) * 3 + f(1) + 2) >> 2);
    }
    // Windows first: zip must not pull (and drop) a pair once the windows run out.
    for (w, p) in src.windows(3).zip(pairs.by_ref()) {
        if let [before, here, after] = *w {
            let here = u32::from(here) * 3;
            put(
                p,
                (here + u32::from(before) + 1) >> 2,
                (here + u32::from(after) + 2) >> 2,
            );
        }
    }
    if let Some(p) = pairs.next() {
        put(p, (f(n - 1) * 3 + f(n - 2) + 1) >> 2, f(n - 1));
    }
}

/// IJG `h2v2_fancy_upsample`: column sums `3 * nearer row + further row`, then the same
/// 3:1 horizontal filter, with rounding +8 / +7.
fn h2v2_fancy(near: &[u16], far: &[u16], out: &mut [u16]) {
    let sum = |i: usize| -> u32 {
        let a = near.get(i).copied().unwrap_or(0);
        let b = far.get(i).copied().unwrap_or(0);
        u32::from(a) * 3 + u32::from(b)
    };
    let n = near.len().min(far.len());
    if n < 2 {
        return;
    }
    let mut pairs = out.chunks_exact_mut(2);
    let mut last = sum(0);
    let mut this = sum(1);
    if let Some(p) = pairs.next() {
        put(p, (last * 4 + 8) >> 4, (last * 3 + this + 7) >> 4);
    }
    for (i, p) in pairs.by_ref().take(n - 2).enumerate() {
        let next = sum(i + 2);
        put(p, (this * 3 + last + 8) >> 4, (this * 3 + next + 7) >> 4);
        last = this;
        this = next;
    }
    if let Some(p) = pairs.next() {
        put(p, (this * 3 + last + 8) >> 4, (this * 4 + 7) >> 4);
    }
}
