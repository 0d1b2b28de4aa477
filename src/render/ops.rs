//! Operators applied to a frame's 8-bit rendering before it is encoded — inversion, rotation,
//! flips, and resizing with a fit and an interpolation — as data. For each frame the user's
//! [`OperatorOptions`] resolve to an [`Operators`] value, compiled to integer tables
//! ([`OpTables`]) that the CPU reference ([`apply`]) and the CUDA kernels (`kernels/ops.cu`)
//! evaluate with the same integer arithmetic, so both backends write the same bytes.
//!
//! The order is fixed: the rendering is inverted (`255 - v`), rotated clockwise, flipped, then
//! resized onto the output canvas (stretched, or scaled keeping its aspect ratio and padded with
//! black or centre-cropped). Padding stays black whatever `invert` says: it is not image.
//!
//! Resizing is Pillow's `Image.resize` (Resample.c and Geometry.c): `bilinear` is its
//! `BILINEAR` and `area` its `BOX` — a separable convolution whose support widens with the
//! downscaling factor (antialiased), with the weights of each output pixel normalized and
//! rounded to 22-bit fixed point, applied horizontally first into an 8-bit intermediate and
//! then vertically, each sum rounded half up and clamped to 0..=255; `nearest` is its `NEAREST`
//! (source positions accumulated in double precision as Pillow does). The weights are computed
//! here, once, in the same double-precision operations as Pillow's C, and travel to the GPU as
//! integers, so both backends agree bit for bit. The outputs are Pillow 4–12's exactly;
//! Pillow 13 runs the vertical pass first when the height shrinks more than the width
//! (python-pillow/Pillow#9549), which moves near-ties by 1 there. tests/it/dataset.rs compares
//! with the Pillow installed.

use std::fmt;
use std::str::FromStr;

/// Fraction bits of the fixed-point weights (Pillow's `PRECISION_BITS`, 32 - 8 - 2).
pub const WEIGHT_BITS: u32 = 22;
/// The weight 1.0.
pub const ONE: i32 = 1 << WEIGHT_BITS;
/// Half a unit: every sum starts here, so that the final shift rounds half up.
pub const HALF: i32 = 1 << (WEIGHT_BITS - 1);
/// Largest side an operator may produce (the arithmetic stays well inside `i32`).
pub const MAX_SIDE: u32 = 1 << 20;

/// How pixels are resampled when resizing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Interpolation {
    /// Pillow's NEAREST: each output pixel copies the input pixel under its centre.
    Nearest,
    /// Pillow's BILINEAR: a triangle filter, widened when downscaling (antialiased).
    #[default]
    Bilinear,
    /// Pillow's BOX: the mean of the input pixels each output pixel covers (for downscaling).
    Area,
}

impl FromStr for Interpolation {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "nearest" => Ok(Interpolation::Nearest),
            "bilinear" => Ok(Interpolation::Bilinear),
            "area" => Ok(Interpolation::Area),
            other => Err(format!(
                "`{other}` is not an interpolation: use nearest, bilinear or area"
            )),
        }
    }
}

impl fmt::Display for Interpolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Interpolation::Nearest => "nearest",
            Interpolation::Bilinear => "bilinear",
            Interpolation::Area => "area",
        })
    }
}

/// How an image meets a `WxH` size of another aspect ratio.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Fit {
    /// Scaled to exactly W×H; the aspect ratio changes.
    #[default]
    Stretch,
    /// Scaled to fit inside W×H keeping the aspect ratio, centred on black.
    Pad,
    /// Scaled to cover W×H keeping the aspect ratio, the overflow cut off evenly.
    Crop,
}

impl FromStr for Fit {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "stretch" => Ok(Fit::Stretch),
            "pad" => Ok(Fit::Pad),
            "crop" => Ok(Fit::Crop),
            other => Err(format!("`{other}` is not a fit: use stretch, pad or crop")),
        }
    }
}

impl fmt::Display for Fit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Fit::Stretch => "stretch",
            Fit::Pad => "pad",
            Fit::Crop => "crop",
        })
    }
}

/// The size asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub enum Resize {
    /// The rendering's own size.
    #[default]
    None,
    /// Exactly `width`×`height` (with a [`Fit`]).
    Exact { width: u32, height: u32 },
    /// The longest side becomes this many pixels, the aspect ratio kept.
    Longest(u32),
    /// Both sides multiplied by this factor (rounded to whole pixels, at least 1).
    Scale(f64),
}

impl Resize {
    /// Largest factor `scale` accepts.
    pub const MAX_SCALE: f64 = 64.0;

    /// `--scale F`: a positive factor up to [`Resize::MAX_SCALE`]; 1 means no resize.
    pub fn scale(f: f64) -> Result<Resize, String> {
        if !f.is_finite() || f <= 0.0 || f > Self::MAX_SCALE {
            return Err(format!(
                "scale `{f}` must be a number above 0 and at most {}",
                Self::MAX_SCALE
            ));
        }
        Ok(if f == 1.0 {
            Resize::None
        } else {
            Resize::Scale(f)
        })
    }
}

fn side(s: &str, what: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(n) if (1..=65535).contains(&n) => Ok(n),
        _ => Err(format!(
            "{what} `{}` must be a whole number in 1..=65535",
            s.trim()
        )),
    }
}

impl FromStr for Resize {
    type Err = String;

    /// `none`, `WxH` (e.g. `512x512`) or `N` (the longest side).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if s == "none" {
            return Ok(Resize::None);
        }
        if let Some((w, h)) = s.split_once(['x', 'X']) {
            return Ok(Resize::Exact {
                width: side(w, "width")?,
                height: side(h, "height")?,
            });
        }
        if s.chars().all(|c| c.is_ascii_digit()) && !s.is_empty() {
            return Ok(Resize::Longest(side(s, "size")?));
        }
        Err(format!(
            "`{s}` is not a size: use WxH (e.g. 512x512), N (the longest side, e.g. 512) or none"
        ))
    }
}

impl fmt::Display for Resize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Resize::None => f.write_str("none"),
            Resize::Exact { width, height } => write!(f, "{width}x{height}"),
            Resize::Longest(n) => write!(f, "{n}"),
            Resize::Scale(s) => write!(f, "scale:{s}"),
        }
    }
}

impl serde::Serialize for Resize {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Mirroring, after the rotation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Flip {
    #[default]
    None,
    /// Left and right swapped.
    Horizontal,
    /// Top and bottom swapped.
    Vertical,
    /// Both (the same as a 180° rotation).
    Both,
}

impl FromStr for Flip {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "none" => Ok(Flip::None),
            "h" => Ok(Flip::Horizontal),
            "v" => Ok(Flip::Vertical),
            "hv" | "vh" => Ok(Flip::Both),
            other => Err(format!(
                "`{other}` is not a flip: use h (left-right), v (top-bottom), hv or none"
            )),
        }
    }
}

impl fmt::Display for Flip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Flip::None => "none",
            Flip::Horizontal => "h",
            Flip::Vertical => "v",
            Flip::Both => "hv",
        })
    }
}

impl serde::Serialize for Flip {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Parses a clockwise rotation in degrees: 0, 90, 180 or 270.
pub fn parse_rotate(degrees: i64) -> Result<u16, String> {
    match degrees {
        0 | 90 | 180 | 270 => Ok(degrees as u16),
        other => Err(format!(
            "`{other}` is not a rotation: use 0, 90, 180 or 270 (degrees clockwise)"
        )),
    }
}

/// The operators a run applies to every frame.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct OperatorOptions {
    pub resize: Resize,
    /// How `resize = "WxH"` meets another aspect ratio.
    pub fit: Fit,
    pub interpolation: Interpolation,
    /// Degrees clockwise: 0, 90, 180 or 270.
    pub rotate: u16,
    pub flip: Flip,
    /// `255 - v` on the rendering (before any resampling).
    pub invert: bool,
}

impl OperatorOptions {
    /// True when the operators change nothing.
    pub fn is_identity(&self) -> bool {
        self.resize == Resize::None && self.rotate == 0 && self.flip == Flip::None && !self.invert
    }

    /// What the operators do, for logs and the DICOM derivation description ("" when nothing).
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.invert {
            parts.push("inverted".to_string());
        }
        if self.rotate != 0 {
            parts.push(format!("rotated {}° clockwise", self.rotate));
        }
        match self.flip {
            Flip::None => {}
            Flip::Horizontal => parts.push("flipped left-right".into()),
            Flip::Vertical => parts.push("flipped top-bottom".into()),
            Flip::Both => parts.push("flipped both ways".into()),
        }
        match self.resize {
            Resize::None => {}
            Resize::Exact { width, height } => parts.push(format!(
                "resized to {width}x{height} ({}, {})",
                self.fit, self.interpolation
            )),
            Resize::Longest(n) => parts.push(format!(
                "resized to a longest side of {n} ({})",
                self.interpolation
            )),
            Resize::Scale(s) => parts.push(format!("scaled by {s} ({})", self.interpolation)),
        }
        parts.join(", ")
    }

    /// The operators for a rendering of `cols`×`rows` pixels, `None` when they change nothing.
    pub fn resolve(&self, cols: u32, rows: u32) -> Result<Option<Operators>, String> {
        if self.is_identity() || cols == 0 || rows == 0 {
            return Ok(None);
        }
        let quarter = self.rotate == 90 || self.rotate == 270;
        let (ow, oh) = if quarter { (rows, cols) } else { (cols, rows) };
        // Rounded quotient a·b/c, at least 1.
        let scaled = |a: u32, b: u32, c: u32| -> u32 {
            let (a, b, c) = (a as u64, b as u64, c as u64);
            ((2 * a * b + c) / (2 * c)).max(1).min(u32::MAX as u64) as u32
        };
        let (sw, sh, cw, ch) = match self.resize {
            Resize::None => (ow, oh, ow, oh),
            Resize::Scale(f) => {
                let w = ((ow as f64 * f).round()).clamp(1.0, u32::MAX as f64) as u32;
                let h = ((oh as f64 * f).round()).clamp(1.0, u32::MAX as f64) as u32;
                (w, h, w, h)
            }
            Resize::Longest(n) => {
                let (w, h) = if ow >= oh {
                    (n, scaled(oh, n, ow))
                } else {
                    (scaled(ow, n, oh), n)
                };
                (w, h, w, h)
            }
            Resize::Exact { width, height } => {
                // Which side limits: compare ow/oh with width/height without rounding.
                let wider = width as u64 * oh as u64 <= height as u64 * ow as u64;
                let (sw, sh) = match self.fit {
                    Fit::Stretch => (width, height),
                    Fit::Pad if wider => (width, scaled(oh, width, ow).min(height)),
                    Fit::Pad => (scaled(ow, height, oh).min(width), height),
                    Fit::Crop if wider => (scaled(ow, height, oh).max(width), height),
                    Fit::Crop => (width, scaled(oh, width, ow).max(height)),
                };
                (sw, sh, width, height)
            }
        };
        if sw > MAX_SIDE || sh > MAX_SIDE {
            return Err(format!(
                "{} makes a {sw}x{sh} image; sides above {MAX_SIDE} pixels are not supported",
                self.resize
            ));
        }
        // Canvas pixel x shows scaled pixel x + off_x: negative offsets pad, positive ones crop.
        let off = |scaled: u32, canvas: u32| -> i32 {
            if scaled >= canvas {
                ((scaled - canvas) / 2) as i32
            } else {
                -(((canvas - scaled) / 2) as i32)
            }
        };
        let ops = Operators {
            src_w: cols,
            src_h: rows,
            orient: orientation(cols, rows, self.rotate, self.flip),
            oriented_w: ow,
            oriented_h: oh,
            scaled_w: sw,
            scaled_h: sh,
            out_w: cw,
            out_h: ch,
            off_x: off(sw, cw),
            off_y: off(sh, ch),
            interpolation: self.interpolation,
            invert: self.invert,
        };
        Ok((!ops.is_identity()).then_some(ops))
    }
}

/// The matrix taking an oriented pixel (u, v) to its rendered pixel
/// (`m[0]·u + m[1]·v + m[2]`, `m[3]·u + m[4]·v + m[5]`): rotation clockwise, then the flip.
fn orientation(w: u32, h: u32, rotate: u16, flip: Flip) -> [i32; 6] {
    let (w, h) = (w as i32, h as i32);
    let mut m = match rotate {
        // Clockwise: the top-left corner goes to the top-right.
        90 => [0, 1, 0, -1, 0, h - 1],
        180 => [-1, 0, w - 1, 0, -1, h - 1],
        270 => [0, -1, w - 1, 1, 0, 0],
        _ => [1, 0, 0, 0, 1, 0],
    };
    let (rw, rh) = if rotate == 90 || rotate == 270 {
        (h, w)
    } else {
        (w, h)
    };
    // A flip substitutes u by rw-1-u (v by rh-1-v) in the rotation's formulas.
    if matches!(flip, Flip::Horizontal | Flip::Both) {
        m = [
            -m[0],
            m[1],
            m[0] * (rw - 1) + m[2],
            -m[3],
            m[4],
            m[3] * (rw - 1) + m[5],
        ];
    }
    if matches!(flip, Flip::Vertical | Flip::Both) {
        m = [
            m[0],
            -m[1],
            m[1] * (rh - 1) + m[2],
            m[3],
            -m[4],
            m[4] * (rh - 1) + m[5],
        ];
    }
    m
}

/// The operators of one frame, resolved to whole numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Operators {
    /// Size of the rendering they read.
    pub src_w: u32,
    pub src_h: u32,
    /// Oriented pixel (u, v) is rendered pixel (`orient[0]·u + orient[1]·v + orient[2]`,
    /// `orient[3]·u + orient[4]·v + orient[5]`).
    pub orient: [i32; 6],
    /// Size after rotation.
    pub oriented_w: u32,
    pub oriented_h: u32,
    /// Size of the oriented image resampled (before padding or cropping).
    pub scaled_w: u32,
    pub scaled_h: u32,
    /// The output canvas.
    pub out_w: u32,
    pub out_h: u32,
    /// Canvas pixel (x, y) shows scaled pixel (x + off_x, y + off_y), black outside it.
    pub off_x: i32,
    pub off_y: i32,
    pub interpolation: Interpolation,
    pub invert: bool,
}

impl Operators {
    fn is_identity(&self) -> bool {
        !self.invert
            && self.orient == [1, 0, 0, 0, 1, 0]
            && (self.scaled_w, self.scaled_h) == (self.src_w, self.src_h)
            && (self.out_w, self.out_h) == (self.src_w, self.src_h)
    }

    /// The integer tables both backends evaluate.
    pub fn tables(&self) -> OpTables {
        let cols = Taps::axis(
            self.oriented_w,
            self.scaled_w,
            self.out_w,
            self.off_x,
            self.interpolation,
        );
        let rows = Taps::axis(
            self.oriented_h,
            self.scaled_h,
            self.out_h,
            self.off_y,
            self.interpolation,
        );
        let gather = cols.is_unit() && rows.is_unit();
        OpTables { cols, rows, gather }
    }

    /// Bytes of the horizontal pass's intermediate (`out_w` × `oriented_h` × `channels`).
    pub fn intermediate_bytes(&self, channels: usize) -> usize {
        self.out_w as usize * self.oriented_h as usize * channels
    }
}

/// One axis of a resampling: for each output index, the input indices it reads and their
/// fixed-point weights.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taps {
    /// Per output index: the first input index and the tap count (0 for padding: black).
    pub bounds: Vec<i32>,
    /// Taps per output index: the stride of `weights`.
    pub ksize: usize,
    /// `ksize` weights per output index, [`WEIGHT_BITS`] fraction bits, unused ones 0.
    pub weights: Vec<i32>,
}

impl Taps {
    /// The taps mapping `input` pixels to a `canvas`-long axis on which the input, resampled to
    /// `scaled` pixels, starts at `-offset`.
    pub fn axis(input: u32, scaled: u32, canvas: u32, offset: i32, how: Interpolation) -> Taps {
        let resampled = if scaled == input {
            // Pillow skips an axis whose size does not change: the identity.
            unit_taps((0..input as i32).collect())
        } else {
            match how {
                Interpolation::Nearest => unit_taps(pillow_nearest(input, scaled)),
                Interpolation::Bilinear => pillow_coeffs(input, scaled, 1.0, bilinear),
                Interpolation::Area => pillow_coeffs(input, scaled, 0.5, boxed),
            }
        };
        if canvas == scaled && offset == 0 {
            return resampled;
        }
        let ksize = resampled.ksize;
        let mut taps = Taps {
            bounds: vec![0; 2 * canvas as usize],
            ksize,
            weights: vec![0; ksize * canvas as usize],
        };
        for c in 0..canvas as usize {
            let s = c as i64 + offset as i64;
            if (0..scaled as i64).contains(&s) {
                let s = s as usize;
                taps.bounds[2 * c..2 * c + 2].copy_from_slice(&resampled.bounds[2 * s..2 * s + 2]);
                taps.weights[ksize * c..ksize * (c + 1)]
                    .copy_from_slice(&resampled.weights[ksize * s..ksize * (s + 1)]);
            }
        }
        taps
    }

    /// Output length.
    pub fn len(&self) -> usize {
        self.bounds.len() / 2
    }

    /// True for an empty axis.
    pub fn is_empty(&self) -> bool {
        self.bounds.is_empty()
    }

    /// True when output `i` is input `i` for each of `input` outputs: resampling copies.
    pub fn is_identity(&self, input: usize) -> bool {
        self.len() == input
            && (0..self.len()).all(|i| {
                self.bounds[2 * i] == i as i32
                    && self.bounds[2 * i + 1] == 1
                    && self.weights[self.ksize * i] == ONE
            })
    }

    /// True when every output reads at most one input at weight 1: a pure gather.
    pub fn is_unit(&self) -> bool {
        (0..self.len()).all(|i| match self.bounds[2 * i + 1] {
            0 => true,
            1 => self.weights[self.ksize * i] == ONE,
            _ => false,
        })
    }
}

/// One tap of weight 1 per output, reading `index[i]`.
fn unit_taps(index: Vec<i32>) -> Taps {
    let mut bounds = Vec::with_capacity(2 * index.len());
    for &i in &index {
        bounds.extend_from_slice(&[i, 1]);
    }
    Taps {
        bounds,
        ksize: 1,
        weights: vec![ONE; index.len()],
    }
}

/// Pillow's NEAREST resize positions (Geometry.c, `ImagingScaleAffine`): the source position
/// accumulated in double precision from half a step, truncated.
fn pillow_nearest(input: u32, scaled: u32) -> Vec<i32> {
    // a[0] = (double)(box[2] - box[0]) / xsize, box in floats.
    let a0 = (input as f32 - 0.0f32) as f64 / scaled as f64;
    let mut xo = 0.0f64 + a0 * 0.5;
    let mut out = Vec::with_capacity(scaled as usize);
    for _ in 0..scaled {
        // COORD(v): -1 below 0, else truncation; Pillow leaves such pixels black, which its
        // positions (all inside the input) never produce; clamped here all the same.
        let x = if xo < 0.0 { 0 } else { xo as i64 };
        out.push(x.clamp(0, input as i64 - 1) as i32);
        xo += a0;
    }
    out
}

fn bilinear(x: f64) -> f64 {
    let x = x.abs();
    if x < 1.0 {
        1.0 - x
    } else {
        0.0
    }
}

fn boxed(x: f64) -> f64 {
    if x > -0.5 && x <= 0.5 {
        1.0
    } else {
        0.0
    }
}

/// Pillow's `precompute_coeffs` and `normalize_coeffs_8bpc` (Resample.c), operation for
/// operation, for a resize of `input` pixels to `output` over the whole input.
fn pillow_coeffs(input: u32, output: u32, support: f64, filter: fn(f64) -> f64) -> Taps {
    // in0 = 0.0f, in1 = (float)input: their difference is exact in float.
    let scale = (input as f32 - 0.0f32) as f64 / output as f64;
    let filterscale = if scale < 1.0 { 1.0 } else { scale };
    let support = support * filterscale;
    let ksize = support.ceil() as usize * 2 + 1;
    let mut bounds = Vec::with_capacity(2 * output as usize);
    let mut weights = vec![0i32; ksize * output as usize];
    let mut k = vec![0f64; ksize];
    for xx in 0..output as usize {
        let center = 0.0 + (xx as f64 + 0.5) * scale;
        let ss = 1.0 / filterscale;
        let xmin = ((center - support + 0.5) as i32).max(0);
        let xmax = ((center + support + 0.5) as i32).min(input as i32) - xmin;
        let mut ww = 0.0;
        for (x, kx) in k.iter_mut().enumerate().take(xmax.max(0) as usize) {
            let w = filter(((x as i32 + xmin) as f64 - center + 0.5) * ss);
            *kx = w;
            ww += w;
        }
        for (x, kx) in k.iter().enumerate().take(xmax.max(0) as usize) {
            let w = if ww != 0.0 { kx / ww } else { *kx };
            weights[xx * ksize + x] = if w < 0.0 {
                (-0.5 + w * ONE as f64) as i32
            } else {
                (0.5 + w * ONE as f64) as i32
            };
        }
        bounds.extend_from_slice(&[xmin, xmax.max(0)]);
    }
    Taps {
        bounds,
        ksize,
        weights,
    }
}

/// The tables of one frame's operators.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpTables {
    /// Output columns over the oriented image's columns.
    pub cols: Taps,
    /// Output rows over the oriented image's rows.
    pub rows: Taps,
    /// Both axes are pure gathers: one pass, no intermediate.
    pub gather: bool,
}

/// A weighted sum back to 8 bits: Pillow's `clip8` (shift, clamp to 0..=255).
#[inline]
pub fn clip8(sum: i32) -> u8 {
    (sum >> WEIGHT_BITS).clamp(0, 255) as u8
}

/// The rendered pixel's index (in pixels) of oriented pixel (u, v).
#[inline]
fn source_index(ops: &Operators, u: i64, v: i64) -> usize {
    let m = ops.orient.map(|x| x as i64);
    let x = m[0] * u + m[1] * v + m[2];
    let y = m[3] * u + m[4] * v + m[5];
    (y * ops.src_w as i64 + x) as usize
}

/// Reusable buffers of [`apply`].
#[derive(Debug, Default)]
pub struct Scratch {
    /// The rendering oriented (and inverted), when it needs to be.
    oriented: Vec<u8>,
    /// The horizontal pass's result.
    between: Vec<u8>,
    /// Per-column and per-row offsets of a gather.
    cols: Vec<i64>,
    rows: Vec<i64>,
    /// One output row's sums in the vertical pass.
    sums: Vec<i32>,
}

/// The CPU reference: applies `ops` (compiled to `tables`) to `src`, the rendering
/// (`src_w`×`src_h`, `channels` interleaved), writing `out` (`out_w`×`out_h`×`channels`).
///
/// The arithmetic is the fused one of kernels/ops.cu — each horizontal sum reads the oriented,
/// inverted rendering; each vertical sum reads the 8-bit horizontal results — laid out for a
/// CPU's caches: the rendering is first oriented (and inverted) by tiles into `scratch` when
/// it must be, so that both passes read contiguous rows, and an axis whose taps are the
/// identity is not resampled (its pass would copy). Integer sums do not depend on their order,
/// so the bytes are the kernels'.
pub fn apply(
    ops: &Operators,
    tables: &OpTables,
    channels: usize,
    src: &[u8],
    out: &mut [u8],
    scratch: &mut Scratch,
) {
    let ch = channels;
    let inv = if ops.invert { 0xff } else { 0 };
    let (out_w, out_h) = (ops.out_w as usize, ops.out_h as usize);
    let (ow, oh) = (ops.oriented_w as usize, ops.oriented_h as usize);
    let out = &mut out[..out_w * out_h * ch];
    // Oriented pixel (u, v) is rendered pixel base(v) + u·step.
    let step = ops.orient[3] as i64 * ops.src_w as i64 + ops.orient[0] as i64;
    let base = |v: i64| source_index(ops, 0, v) as i64;
    if tables.gather {
        let offsets = |taps: &Taps, f: &dyn Fn(i64) -> i64, into: &mut Vec<i64>| {
            into.clear();
            into.extend((0..taps.len()).map(|i| match taps.bounds[2 * i + 1] {
                0 => PAD,
                _ => f(taps.bounds[2 * i] as i64),
            }));
        };
        offsets(&tables.cols, &|u| u * step, &mut scratch.cols);
        offsets(&tables.rows, &base, &mut scratch.rows);
        gather(&scratch.cols, &scratch.rows, ch, inv, src, out);
        return;
    }
    let oriented: &[u8] = if ops.orient == [1, 0, 0, 0, 1, 0] && !ops.invert {
        src
    } else {
        scratch.cols.clear();
        scratch.cols.extend((0..ow as i64).map(|u| u * step));
        scratch.rows.clear();
        scratch.rows.extend((0..oh as i64).map(base));
        scratch.oriented.resize(ow * oh * ch, 0);
        gather(
            &scratch.cols,
            &scratch.rows,
            ch,
            inv,
            src,
            &mut scratch.oriented,
        );
        &scratch.oriented
    };
    let h_identity = tables.cols.is_identity(ow);
    let v_identity = tables.rows.is_identity(oh);
    match (h_identity, v_identity) {
        (true, true) => out.copy_from_slice(&oriented[..out.len()]),
        (true, false) => vertical(oriented, ow * ch, &tables.rows, out, &mut scratch.sums),
        (false, true) => horizontal(oriented, ow, ch, &tables.cols, out),
        (false, false) => {
            scratch.between.resize(out_w * oh * ch, 0);
            horizontal(oriented, ow, ch, &tables.cols, &mut scratch.between);
            vertical(
                &scratch.between,
                out_w * ch,
                &tables.rows,
                out,
                &mut scratch.sums,
            );
        }
    }
}

/// A gather offset standing for padding (offsets themselves may be negative: flips).
const PAD: i64 = i64::MIN;

/// `out` (one row per entry of `rows`, one pixel per entry of `cols`) from `src` pixels at
/// `rows[y] + cols[x]`, XORed with `inv`; a [`PAD`] entry is padding (black). By 32×32 tiles,
/// so that a rotation's column walks stay in cache.
fn gather(cols: &[i64], rows: &[i64], ch: usize, inv: u8, src: &[u8], out: &mut [u8]) {
    match ch {
        1 => gather_n::<1>(cols, rows, inv, src, out),
        _ => gather_n::<3>(cols, rows, inv, src, out),
    }
}

/// [`gather`] for `CH` channels (a pixel copied as one `[u8; CH]`).
fn gather_n<const CH: usize>(cols: &[i64], rows: &[i64], inv: u8, src: &[u8], out: &mut [u8]) {
    const TILE: usize = 32;
    let w = cols.len();
    for ty in (0..rows.len()).step_by(TILE) {
        for tx in (0..w).step_by(TILE) {
            let tw = TILE.min(w - tx);
            let cs = &cols[tx..tx + tw];
            for (y, &r) in rows.iter().enumerate().skip(ty).take(TILE) {
                let dst = &mut out[(y * w + tx) * CH..(y * w + tx + tw) * CH];
                if r == PAD {
                    dst.fill(0);
                    continue;
                }
                for (px, &c) in dst.chunks_exact_mut(CH).zip(cs) {
                    if c == PAD {
                        px.fill(0);
                        continue;
                    }
                    let i = (r + c) as usize * CH;
                    let v: [u8; CH] = src[i..i + CH].try_into().unwrap_or([0; CH]);
                    for (o, v) in px.iter_mut().zip(v) {
                        *o = v ^ inv;
                    }
                }
            }
        }
    }
}

/// The horizontal pass over contiguous rows of `w` pixels: row by row, each output pixel the
/// rounded, clipped sum of its taps.
fn horizontal(src: &[u8], w: usize, ch: usize, taps: &Taps, out: &mut [u8]) {
    let ow = taps.len();
    for (row, dst) in src.chunks_exact(w * ch).zip(out.chunks_exact_mut(ow * ch)) {
        for (x, px) in dst.chunks_exact_mut(ch).enumerate() {
            let (first, n) = (taps.bounds[2 * x] as usize, taps.bounds[2 * x + 1] as usize);
            let k = &taps.weights[x * taps.ksize..x * taps.ksize + n];
            let s = &row[first * ch..(first + n) * ch];
            if ch == 1 {
                let ss = s.iter().zip(k).fold(HALF, |ss, (&p, &w)| ss + p as i32 * w);
                px[0] = clip8(ss);
            } else {
                let mut ss = [HALF; 3];
                for (p, &w) in s.chunks_exact(3).zip(k) {
                    ss[0] += p[0] as i32 * w;
                    ss[1] += p[1] as i32 * w;
                    ss[2] += p[2] as i32 * w;
                }
                for (o, s) in px.iter_mut().zip(ss) {
                    *o = clip8(s);
                }
            }
        }
    }
}

/// The vertical pass: each output row the rounded, clipped sum of its taps' rows (`stride`
/// bytes each), accumulated a row at a time.
fn vertical(src: &[u8], stride: usize, taps: &Taps, out: &mut [u8], sums: &mut Vec<i32>) {
    sums.clear();
    sums.resize(stride, 0);
    for (y, dst) in out.chunks_exact_mut(stride).enumerate() {
        let (first, n) = (taps.bounds[2 * y] as usize, taps.bounds[2 * y + 1] as usize);
        sums.fill(HALF);
        for (t, &w) in taps.weights[y * taps.ksize..y * taps.ksize + n]
            .iter()
            .enumerate()
        {
            let row = &src[(first + t) * stride..(first + t + 1) * stride];
            for (s, &p) in sums.iter_mut().zip(row) {
                *s += p as i32 * w;
            }
        }
        for (o, &s) in dst.iter_mut().zip(sums.iter()) {
            *o = clip8(s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(resize: Resize) -> OperatorOptions {
        OperatorOptions {
            resize,
            ..OperatorOptions::default()
        }
    }

    /// Runs `o` on a `w`×`h` image with `ch` channels whose pixel value encodes its position.
    fn run(o: &OperatorOptions, w: u32, h: u32, ch: usize, src: &[u8]) -> (Operators, Vec<u8>) {
        let ops = o.resolve(w, h).unwrap().expect("not the identity");
        let t = ops.tables();
        let mut out = vec![0xAA; ops.out_w as usize * ops.out_h as usize * ch];
        apply(&ops, &t, ch, src, &mut out, &mut Scratch::default());
        (ops, out)
    }

    /// The straightforward definition of rotation and flips, pixel by pixel.
    fn naive_orient(src: &[u8], w: usize, h: usize, rotate: u16, flip: Flip) -> Vec<u8> {
        let (rw, rh) = if rotate % 180 == 90 { (h, w) } else { (w, h) };
        let mut out = vec![0u8; w * h];
        for v in 0..rh {
            for u in 0..rw {
                let (mut uu, mut vv) = (u, v);
                if matches!(flip, Flip::Horizontal | Flip::Both) {
                    uu = rw - 1 - uu;
                }
                if matches!(flip, Flip::Vertical | Flip::Both) {
                    vv = rh - 1 - vv;
                }
                // Clockwise rotation: rotated (uu, vv) shows source (x, y).
                let (x, y) = match rotate {
                    90 => (vv, h - 1 - uu),
                    180 => (w - 1 - uu, h - 1 - vv),
                    270 => (w - 1 - vv, uu),
                    _ => (uu, vv),
                };
                out[v * rw + u] = src[y * w + x];
            }
        }
        out
    }

    #[test]
    fn parses_every_option_and_rejects_nonsense() {
        assert_eq!(
            "512x384".parse::<Resize>(),
            Ok(Resize::Exact {
                width: 512,
                height: 384
            })
        );
        assert_eq!("224".parse::<Resize>(), Ok(Resize::Longest(224)));
        assert_eq!("none".parse::<Resize>(), Ok(Resize::None));
        for bad in ["0x5", "5x", "x5", "-3", "abc", "70000", "5x5x5"] {
            assert!(bad.parse::<Resize>().is_err(), "{bad}");
        }
        assert_eq!(Resize::scale(0.5), Ok(Resize::Scale(0.5)));
        assert_eq!(Resize::scale(1.0), Ok(Resize::None));
        for bad in [0.0, -1.0, f64::NAN, 65.0] {
            assert!(Resize::scale(bad).is_err(), "{bad}");
        }
        assert_eq!("hv".parse::<Flip>(), Ok(Flip::Both));
        assert!("x".parse::<Flip>().is_err());
        assert_eq!("area".parse::<Interpolation>(), Ok(Interpolation::Area));
        assert!("cubic".parse::<Interpolation>().is_err());
        assert_eq!("crop".parse::<Fit>(), Ok(Fit::Crop));
        assert!(parse_rotate(45).is_err());
        for r in [
            Resize::None,
            Resize::Longest(7),
            Resize::Exact {
                width: 3,
                height: 4,
            },
        ] {
            assert_eq!(r.to_string().parse::<Resize>(), Ok(r));
        }
    }

    #[test]
    fn identity_options_resolve_to_nothing() {
        assert_eq!(OperatorOptions::default().resolve(7, 5), Ok(None));
        // A resize to the same size changes nothing either.
        let same = opts(Resize::Exact {
            width: 7,
            height: 5,
        });
        assert_eq!(same.resolve(7, 5), Ok(None));
    }

    #[test]
    fn rotations_and_flips_match_their_definition() {
        let (w, h) = (5usize, 3usize);
        let src: Vec<u8> = (0..(w * h) as u8).collect();
        for rotate in [0u16, 90, 180, 270] {
            for flip in [Flip::None, Flip::Horizontal, Flip::Vertical, Flip::Both] {
                for invert in [false, true] {
                    let o = OperatorOptions {
                        rotate,
                        flip,
                        invert,
                        ..OperatorOptions::default()
                    };
                    let Some(ops) = o.resolve(w as u32, h as u32).unwrap() else {
                        // Nothing to do: no operator, or a 180° turn undone by both flips.
                        assert!(!invert);
                        assert_eq!(naive_orient(&src, w, h, rotate, flip), src);
                        continue;
                    };
                    let t = ops.tables();
                    assert!(t.gather);
                    let mut out = vec![0u8; w * h];
                    apply(&ops, &t, 1, &src, &mut out, &mut Scratch::default());
                    let mut want = naive_orient(&src, w, h, rotate, flip);
                    if invert {
                        want.iter_mut().for_each(|v| *v = 255 - *v);
                    }
                    assert_eq!(out, want, "rotate {rotate} flip {flip} invert {invert}");
                    let quarter = rotate % 180 == 90;
                    assert_eq!(
                        (ops.out_w as usize, ops.out_h as usize),
                        if quarter { (h, w) } else { (w, h) }
                    );
                }
            }
        }
        // 90° clockwise: the top-left pixel lands top-right.
        let o = OperatorOptions {
            rotate: 90,
            ..OperatorOptions::default()
        };
        let (_, out) = run(&o, 2, 1, 1, &[10, 20]);
        assert_eq!(out, vec![10, 20]); // 1 wide, 2 high: column [10; 20]
        let (_, out) = run(&o, 1, 2, 1, &[10, 20]);
        assert_eq!(out, vec![20, 10]); // the bottom pixel comes left
    }

    #[test]
    fn output_sizes_follow_resize_and_fit() {
        let size = |o: OperatorOptions, w, h| {
            let ops = o.resolve(w, h).unwrap().unwrap();
            (
                ops.scaled_w,
                ops.scaled_h,
                ops.out_w,
                ops.out_h,
                ops.off_x,
                ops.off_y,
            )
        };
        let exact = |fit| OperatorOptions {
            resize: Resize::Exact {
                width: 100,
                height: 100,
            },
            fit,
            ..OperatorOptions::default()
        };
        assert_eq!(
            size(exact(Fit::Stretch), 400, 200),
            (100, 100, 100, 100, 0, 0)
        );
        assert_eq!(size(exact(Fit::Pad), 400, 200), (100, 50, 100, 100, 0, -25));
        assert_eq!(
            size(exact(Fit::Crop), 400, 200),
            (200, 100, 100, 100, 50, 0)
        );
        assert_eq!(size(exact(Fit::Pad), 200, 400), (50, 100, 100, 100, -25, 0));
        assert_eq!(
            size(exact(Fit::Crop), 200, 400),
            (100, 200, 100, 100, 0, 50)
        );
        assert_eq!(
            size(opts(Resize::Longest(64)), 512, 300),
            (64, 38, 64, 38, 0, 0)
        );
        assert_eq!(
            size(opts(Resize::Longest(64)), 300, 512),
            (38, 64, 38, 64, 0, 0)
        );
        assert_eq!(
            size(opts(Resize::Scale(0.25)), 510, 3),
            (128, 1, 128, 1, 0, 0)
        );
        // The rotation comes first: the longest side is measured on the rotated image.
        let rotated = OperatorOptions {
            rotate: 90,
            resize: Resize::Exact {
                width: 30,
                height: 10,
            },
            ..OperatorOptions::default()
        };
        assert_eq!(size(rotated, 10, 30), (30, 10, 30, 10, 0, 0));
        // Absurd factors are refused, not allocated.
        let huge = opts(Resize::Scale(64.0)).resolve(1 << 15, 1 << 15);
        assert!(huge.is_err(), "{huge:?}");
    }

    #[test]
    fn weights_of_every_output_sum_to_about_one() {
        for how in [Interpolation::Bilinear, Interpolation::Area] {
            for (input, output) in [(2000, 512), (512, 224), (7, 3), (3, 7), (100, 99), (5, 1)] {
                let t = Taps::axis(input, output, output, 0, how);
                for i in 0..t.len() {
                    let n = t.bounds[2 * i + 1] as usize;
                    assert!(n >= 1 && n <= t.ksize, "{how} {input}->{output} #{i}");
                    let first = t.bounds[2 * i];
                    assert!(first >= 0 && first as usize + n <= input as usize);
                    let sum: i64 = t.weights[i * t.ksize..i * t.ksize + n]
                        .iter()
                        .map(|&w| w as i64)
                        .sum();
                    // Each weight is rounded once: the sum is within half a unit per tap.
                    assert!(
                        (sum - ONE as i64).abs() <= n as i64,
                        "{how} {input}->{output} #{i}: {sum}"
                    );
                }
            }
        }
    }

    #[test]
    fn area_of_an_integer_factor_is_the_block_mean_rounded_half_up() {
        // 4 → 2 by area: each output is the mean of two inputs, rounded half up.
        let o = OperatorOptions {
            resize: Resize::Exact {
                width: 2,
                height: 1,
            },
            interpolation: Interpolation::Area,
            ..OperatorOptions::default()
        };
        let (_, out) = run(&o, 4, 1, 1, &[0, 1, 10, 20]);
        assert_eq!(out, vec![1, 15]);
        // 3 channels resample independently.
        let (_, out) = run(&o, 4, 1, 3, &[0, 0, 255, 1, 100, 255, 10, 7, 0, 20, 9, 0]);
        assert_eq!(out, vec![1, 50, 255, 15, 8, 0]);
    }

    #[test]
    fn pad_is_black_even_when_inverted_and_crop_keeps_the_centre() {
        let pad = OperatorOptions {
            resize: Resize::Exact {
                width: 4,
                height: 4,
            },
            fit: Fit::Pad,
            interpolation: Interpolation::Nearest,
            invert: true,
            ..OperatorOptions::default()
        };
        // 4x2 of value 10 inverted to 245, centred in rows 1..3 of a 4x4 black canvas.
        let (ops, out) = run(&pad, 4, 2, 1, &[10; 8]);
        assert_eq!((ops.off_x, ops.off_y), (0, -1));
        let mut want = vec![0u8; 16];
        want[4..12].fill(245);
        assert_eq!(out, want);
        let crop = OperatorOptions {
            fit: Fit::Crop,
            invert: false,
            resize: Resize::Exact {
                width: 2,
                height: 2,
            },
            ..pad
        };
        // 4x2 → scaled to 4x2 (covers 2x2), columns 1..3 kept.
        let (_, out) = run(&crop, 4, 2, 1, &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(out, vec![2, 3, 6, 7]);
    }

    #[test]
    fn two_passes_equal_a_direct_evaluation_of_the_same_integer_formula() {
        // The same formula written out per output pixel (with an exact 8-bit intermediate),
        // over rotations, fits and interpolations: guards the index arithmetic of `apply`.
        let (w, h) = (37u32, 23u32);
        let mut x = 0x1234_5678u32;
        let src: Vec<u8> = (0..w * h * 3)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect();
        for how in [
            Interpolation::Nearest,
            Interpolation::Bilinear,
            Interpolation::Area,
        ] {
            for fit in [Fit::Stretch, Fit::Pad, Fit::Crop] {
                for rotate in [0u16, 90, 270] {
                    // (37, 9) and (16, 23) keep one axis of the unrotated image: its pass is skipped.
                    for (rw, rh) in [(16, 16), (50, 9), (5, 40), (37, 9), (16, 23)] {
                        let o = OperatorOptions {
                            resize: Resize::Exact {
                                width: rw,
                                height: rh,
                            },
                            fit,
                            interpolation: how,
                            rotate,
                            flip: Flip::Horizontal,
                            invert: rw == 50,
                        };
                        let ops = o.resolve(w, h).unwrap().unwrap();
                        let t = ops.tables();
                        let mut out = vec![0u8; (rw * rh * 3) as usize];
                        apply(&ops, &t, 3, &src, &mut out, &mut Scratch::default());
                        let inv = if ops.invert { 0xff } else { 0 };
                        let horizontal = |u0: usize, v: usize, c: usize| -> u8 {
                            let (xmin, n) = (t.cols.bounds[2 * u0], t.cols.bounds[2 * u0 + 1]);
                            let mut ss = HALF;
                            for k in 0..n as usize {
                                let i = source_index(&ops, xmin as i64 + k as i64, v as i64);
                                ss += (src[i * 3 + c] ^ inv) as i32
                                    * t.cols.weights[u0 * t.cols.ksize + k];
                            }
                            clip8(ss)
                        };
                        for y in 0..rh as usize {
                            for xx in 0..rw as usize {
                                for c in 0..3 {
                                    let (ymin, n) =
                                        (t.rows.bounds[2 * y], t.rows.bounds[2 * y + 1]);
                                    let mut ss = HALF;
                                    for k in 0..n as usize {
                                        ss += horizontal(xx, ymin as usize + k, c) as i32
                                            * t.rows.weights[y * t.rows.ksize + k];
                                    }
                                    let got = out[(y * rw as usize + xx) * 3 + c];
                                    assert_eq!(
                                        got,
                                        clip8(ss),
                                        "{how} {fit} rot {rotate} {rw}x{rh} ({xx},{y},{c})"
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn pillow_bilinear_coefficients_for_a_known_case() {
        // Pillow 13, Image.resize((2, 1), BILINEAR) of a 5-pixel row: scale 2.5, support 2.5,
        // 7 taps; output 0 centred at 1.25 reads pixels 0..3 with triangle weights
        // (0.8, 0.8, 0.4, 0.0 after shifting by half a pixel) normalized.
        let t = Taps::axis(5, 2, 2, 0, Interpolation::Bilinear);
        assert_eq!(t.ksize, 7);
        assert_eq!(&t.bounds, &[0, 4, 1, 4]);
        let w0: Vec<i32> = t.weights[..4].to_vec();
        // filter((x - 1.25 + 0.5) / 2.5) for x = 0..4: 0.7, 0.9, 0.5, 0.1; sum 2.2.
        let expect: Vec<i32> = [0.7, 0.9, 0.5, 0.1]
            .iter()
            .map(|w: &f64| (0.5 + w / 2.2 * ONE as f64) as i32)
            .collect();
        assert_eq!(w0, expect);
    }
}
