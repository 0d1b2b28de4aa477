//! The arithmetic of the grayscale chain for one value, exactly as DCMTK 3.6.7 computes it
//! (docs/dcmtk-render-notes.md, cited below by section): truncation toward zero at every
//! double-to-integer step, the operand order of DCMTK's expressions, MONOCHROME1 as swapped
//! black/white inside the formulas. Backends never re-derive these formulas: they call these
//! functions (CPU) or apply tables built from them (CPU and CUDA), so every backend produces
//! the same bytes.

use std::sync::Arc;

use crate::decode::lut::Lut;
use crate::render::error::PlanError;
use crate::render::plan::{AutoWindow, GrayPlan, Modality, Voi, Window};
use crate::render::spec::VoiFunction;

/// Post-modality value of a stored value (§3.2, §3.3): rescale truncated toward zero, or a
/// Modality LUT entry (first entry signed when the stored values are).
#[inline]
pub fn modality_value(plan: &GrayPlan, stored: i64) -> i64 {
    match &plan.modality {
        Modality::Identity => stored,
        Modality::Rescale { slope, intercept } => (stored as f64 * slope + intercept) as i64,
        Modality::Lut(lut) => lut.lookup(stored, plan.stored.signed) as i64,
    }
}

/// Post-modality range of stored values in [lo, hi], unrounded (§3.2 bookkeeping); a
/// Modality LUT maps to `lut_range`.
fn modality_range(
    plan: &GrayPlan,
    lo: i64,
    hi: i64,
    lut_range: impl FnOnce(&Lut) -> (f64, f64),
) -> (f64, f64) {
    let (lo, hi) = (lo as f64, hi as f64);
    match &plan.modality {
        Modality::Identity => (lo, hi),
        Modality::Rescale { slope, intercept } if *slope > 0.0 => {
            (lo * slope + intercept, hi * slope + intercept)
        }
        Modality::Rescale { slope, intercept } => (hi * slope + intercept, lo * slope + intercept),
        Modality::Lut(lut) => lut_range(lut),
    }
}

/// The possible (absolute) range of post-modality values (§2.3, §3.2, §3.3): a Modality LUT's
/// is 0..2^bits-1.
pub fn absolute_range(plan: &GrayPlan) -> (f64, f64) {
    let (lo, hi) = plan.stored.range();
    modality_range(plan, lo, hi, |lut| (0.0, ((1u32 << lut.bits) - 1) as f64))
}

/// The actual post-modality range from the frame's stored min/max; for a Modality LUT, the
/// table's own range. Decides DCMTK's intermediate integer type.
fn actual_range(plan: &GrayPlan, stored_min: i64, stored_max: i64) -> (f64, f64) {
    modality_range(plan, stored_min, stored_max, |lut| {
        let (a, b) = lut.data_range();
        (a as f64, b as f64)
    })
}

/// DCMTK's intermediate integer type for a value range (§3.5): (bits, signed).
pub fn representation(min: f64, max: f64) -> (u32, bool) {
    if min < 0.0 {
        if -min <= 128.0 && max <= 127.0 {
            (8, true)
        } else if -min <= 32768.0 && max <= 32767.0 {
            (16, true)
        } else {
            (32, true)
        }
    } else if max <= 255.0 {
        (8, false)
    } else if max <= 65535.0 {
        (16, false)
    } else {
        (32, false)
    }
}

/// Wraps an integer to a C integer type of `bits`/`signed` (the `(T)` casts of §5.3).
fn wrap(v: i64, (bits, signed): (u32, bool)) -> i64 {
    let m = v & ((1i64 << bits) - 1);
    if signed && m >= 1i64 << (bits - 1) {
        m - (1i64 << bits)
    } else {
        m
    }
}

/// Statistics of one frame: stored min/max and the histogram of post-modality values.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FrameStats {
    pub stored_min: i64,
    pub stored_max: i64,
    /// (post-modality value, pixels), sorted by value, counts > 0.
    pub inter: Vec<(i64, u64)>,
}

impl FrameStats {
    /// Builds statistics from (stored value, count) pairs in any order.
    pub fn from_stored_counts(
        plan: &GrayPlan,
        counts: impl Iterator<Item = (i64, u64)>,
    ) -> FrameStats {
        let mut stored_min = i64::MAX;
        let mut stored_max = i64::MIN;
        let mut inter: Vec<(i64, u64)> = Vec::new();
        for (s, n) in counts {
            if n == 0 {
                continue;
            }
            stored_min = stored_min.min(s);
            stored_max = stored_max.max(s);
            inter.push((modality_value(plan, s), n));
        }
        inter.sort_unstable_by_key(|x| x.0);
        let mut merged: Vec<(i64, u64)> = Vec::with_capacity(inter.len());
        for (v, n) in inter {
            match merged.last_mut() {
                Some(last) if last.0 == v => last.1 += n,
                _ => merged.push((v, n)),
            }
        }
        if merged.is_empty() {
            stored_min = 0;
            stored_max = 0;
        }
        FrameStats {
            stored_min,
            stored_max,
            inter: merged,
        }
    }

    /// Pixels counted.
    pub fn count(&self) -> u64 {
        self.inter.iter().map(|x| x.1).sum()
    }
}

/// The window DCMTK derives from a frame's values (§5.3), or `None` when it derives none
/// (then the frame is rendered without VOI, as DCMTK does).
pub fn auto_window(
    plan: &GrayPlan,
    auto: AutoWindow,
    function: VoiFunction,
    st: &FrameStats,
) -> Option<Window> {
    let (&(min, _), &(max, _)) = (st.inter.first()?, st.inter.last()?);
    let window = |lo: f64, hi: f64| Window {
        center: (lo + hi + 1.0) / 2.0,
        width: hi - lo + 1.0,
        function,
    };
    match auto {
        AutoWindow::MinMax => Some(window(min as f64, max as f64)),
        AutoWindow::MinMaxNoExtremes => {
            // Smallest value above the minimum and largest below the maximum; 0 when none.
            let min1 = st.inter.iter().map(|x| x.0).find(|&v| v > min).unwrap_or(0);
            let max1 = st
                .inter
                .iter()
                .rev()
                .map(|x| x.0)
                .find(|&v| v < max)
                .unwrap_or(0);
            let w = max1 as f64 - min1 as f64 + 1.0;
            (w > 0.0).then(|| window(min1 as f64, max1 as f64))
        }
        AutoWindow::Histogram { percent } => {
            if min >= max {
                return None;
            }
            let (amin, amax) = actual_range(plan, st.stored_min, st.stored_max);
            let ty = representation(amin, amax);
            let count_px = st.count();
            let thresh = (percent / 100.0 * count_px as f64) as u32 as u64;
            let bins = (max - min + 1) as usize;
            // DCMTK walks every bin of the range; empty bins add nothing, so walking the
            // (sorted, sparse) counts gives the same bins. Walking the range itself takes
            // minutes for 32-bit data spanning billions of values.
            // Lower end: the bin after the one that crosses the threshold.
            let i = if thresh == 0 {
                0
            } else {
                let mut t = 0u64;
                st.inter
                    .iter()
                    .find(|x| {
                        t += x.1;
                        t >= thresh
                    })
                    .map_or(bins, |x| (x.0 - min) as usize + 1)
            };
            let minvalue = if i < bins {
                wrap(min + i as i64, ty)
            } else {
                0
            };
            // Upper end: the bin that crosses it.
            let i = if thresh == 0 {
                bins
            } else {
                let mut t = 0u64;
                st.inter
                    .iter()
                    .rev()
                    .find(|x| {
                        t += x.1;
                        t >= thresh
                    })
                    .map_or(0, |x| (x.0 - min) as usize)
            };
            let maxvalue = if i > 0 { wrap(min + i as i64, ty) } else { 0 };
            (minvalue < maxvalue).then(|| window(minvalue as f64, maxvalue as f64))
        }
    }
}

/// A VOI step ready to evaluate: automatic windows computed, output levels and DCMTK's
/// table-index shift decided.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    pub voi: ResolvedVoi,
    /// Output for black and for white: (0, 255), or (255, 0) when inverted.
    pub low: f64,
    pub high: f64,
    /// Absolute post-modality minimum and range (`AbsMax - AbsMin + 1`).
    pub abs_min: f64,
    pub abs_range: f64,
    /// DCMTK evaluates through an internal table indexed by `p - trunc(AbsMin)`; with a
    /// fractional `AbsMin` that shifts every value by its fraction (§6.5).
    pub table_shift: bool,
}

/// The VOI transformation with numbers.
#[derive(Debug, Clone, PartialEq)]
pub enum ResolvedVoi {
    Window(Window),
    /// A VOI LUT and whether its first entry is read as signed.
    Lut(Arc<Lut>, bool),
    /// No VOI: the absolute range scaled linearly (§6.1).
    None,
}

/// Whether resolving the plan needs the frame's statistics.
pub fn needs_statistics(plan: &GrayPlan) -> bool {
    if matches!(plan.voi, Voi::Auto(..)) {
        return true;
    }
    // The table shift depends on DCMTK's intermediate type, i.e. on the data's range, but it
    // changes nothing unless AbsMin is fractional.
    let (abs_min, _) = absolute_range(plan);
    abs_min.fract() != 0.0 && shift_possible(plan)
}

fn shift_possible(plan: &GrayPlan) -> bool {
    let (abs_min, abs_max) = absolute_range(plan);
    let abs_range = abs_max - abs_min + 1.0;
    abs_range <= 10_000_000.0 && plan.pixels > 3 * (abs_range as u64)
}

/// Resolves the plan for one frame. `stats` is required when [`needs_statistics`] says so.
pub fn resolve(plan: &GrayPlan, stats: Option<&FrameStats>) -> Result<Resolved, PlanError> {
    let (abs_min, abs_max) = absolute_range(plan);
    let (low, high) = if plan.invert {
        (255.0, 0.0)
    } else {
        (0.0, 255.0)
    };
    let voi = match &plan.voi {
        Voi::Window(w) => ResolvedVoi::Window(*w),
        Voi::Lut(l) => ResolvedVoi::Lut(l.clone(), abs_min < 0.0),
        Voi::None => ResolvedVoi::None,
        Voi::Auto(auto, function) => {
            let st = stats.ok_or_else(|| {
                PlanError::Internal("automatic window without frame statistics".into())
            })?;
            match auto_window(plan, *auto, *function, st) {
                Some(w) => ResolvedVoi::Window(w),
                None => ResolvedVoi::None,
            }
        }
    };
    let table_shift = abs_min.fract() != 0.0
        && shift_possible(plan)
        && match stats {
            Some(st) => {
                let (a, b) = actual_range(plan, st.stored_min, st.stored_max);
                representation(a, b).0 <= 16
            }
            None => false,
        };
    Ok(Resolved {
        voi,
        low,
        high,
        abs_min,
        abs_range: abs_max - abs_min + 1.0,
        table_shift,
    })
}

/// DCMTK's LINEAR window (§6.2).
#[inline]
fn linear(w: &Window, low: f64, high: f64, x: f64) -> f64 {
    let width_1 = w.width - 1.0;
    let left = w.center - 0.5 - width_1 / 2.0;
    let right = w.center - 0.5 + width_1 / 2.0;
    let outrange = high - low;
    if x <= left {
        low
    } else if x > right {
        high
    } else if width_1 == 0.0 {
        // Unreachable: with width 1 the borders meet. Kept for clarity.
        low
    } else {
        let offset = high - ((w.center - 0.5) / width_1 + 0.5) * outrange;
        let gradient = outrange / width_1;
        (offset + x * gradient).trunc()
    }
}

/// LINEAR_EXACT (PS3.3 C.11.2.1.3.2). DCMTK 3.6.7 does not know it (it renders LINEAR).
#[inline]
fn linear_exact(w: &Window, low: f64, high: f64, x: f64) -> f64 {
    if x <= w.center - w.width / 2.0 {
        low
    } else if x > w.center + w.width / 2.0 {
        high
    } else {
        (low + ((x - w.center) / w.width + 0.5) * (high - low)).trunc()
    }
}

/// DCMTK's SIGMOID (§6.3), operand order kept.
#[inline]
fn sigmoid(w: &Window, low: f64, high: f64, x: f64) -> f64 {
    let outrange = high - low;
    let t = -4.0 * (x - w.center);
    let t = t / w.width;
    (outrange / (1.0 + t.exp()) + low).trunc()
}

/// DCMTK's VOI LUT output (§6.4).
#[inline]
fn voi_lut(lut: &Lut, signed: bool, low: f64, high: f64, p: i64) -> f64 {
    let outrange = high - low + 1.0;
    let max_range = (1u32 << lut.bits) as f64;
    let (tmin, tmax) = lut.data_range();
    if tmin == tmax {
        return (low + (tmin as f64 / max_range) * outrange).trunc();
    }
    let gradient = outrange / max_range;
    (low + lut.lookup(p, signed) as f64 * gradient).trunc()
}

/// The 8-bit output for stored value `stored`.
#[inline]
pub fn gray_output(plan: &GrayPlan, r: &Resolved, stored: i64) -> u8 {
    let p = modality_value(plan, stored);
    let x = if r.table_shift {
        (p - r.abs_min.trunc() as i64) as f64 + r.abs_min
    } else {
        p as f64
    };
    let out = match &r.voi {
        ResolvedVoi::None => {
            let gradient = (r.high - r.low + 1.0) / r.abs_range;
            let d = if r.table_shift {
                (p - r.abs_min.trunc() as i64) as f64
            } else {
                p as f64 - r.abs_min
            };
            (r.low + d * gradient).trunc()
        }
        ResolvedVoi::Window(w) => match w.function {
            VoiFunction::Linear => linear(w, r.low, r.high, x),
            VoiFunction::LinearExact => linear_exact(w, r.low, r.high, x),
            VoiFunction::Sigmoid => sigmoid(w, r.low, r.high, x),
        },
        ResolvedVoi::Lut(lut, signed) => voi_lut(lut, *signed, r.low, r.high, p),
    };
    // Saturating, truncating conversion (values are already integral and within 0..=255
    // up to rounding noise).
    out as u8
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::plan::StoredFormat;

    fn plan(bits: u16, signed: bool, modality: Modality, voi: Voi, invert: bool) -> GrayPlan {
        GrayPlan {
            stored: StoredFormat {
                bits_allocated: 16,
                bits_stored: bits,
                high_bit: bits - 1,
                signed,
            },
            modality,
            voi,
            invert,
            pixels: 100,
        }
    }

    fn win(c: f64, w: f64) -> Voi {
        Voi::Window(Window {
            center: c,
            width: w,
            function: VoiFunction::Linear,
        })
    }

    #[test]
    fn rescale_truncates_toward_zero() {
        let p = plan(
            16,
            true,
            Modality::Rescale {
                slope: 1.7,
                intercept: 0.0,
            },
            Voi::None,
            false,
        );
        assert_eq!(modality_value(&p, -1), -1); // -1.7 -> -1
        assert_eq!(modality_value(&p, 1), 1); // 1.7 -> 1
    }

    #[test]
    fn linear_window_40_400_is_floor_255_f() {
        let p = plan(16, true, Modality::Identity, win(40.0, 400.0), false);
        let r = resolve(&p, None).unwrap();
        for v in -300..400 {
            let f = ((v as f64 - 39.5) / 399.0 + 0.5).clamp(0.0, 1.0);
            assert_eq!(gray_output(&p, &r, v), (255.0 * f).floor() as u8, "v={v}");
        }
    }

    #[test]
    fn width_one_is_a_threshold() {
        let p = plan(16, false, Modality::Identity, win(1000.0, 1.0), false);
        let r = resolve(&p, None).unwrap();
        assert_eq!(gray_output(&p, &r, 999), 0);
        assert_eq!(gray_output(&p, &r, 1000), 255);
    }

    #[test]
    fn monochrome1_swaps_black_and_white_inside_the_formula() {
        let p = plan(16, true, Modality::Identity, win(40.0, 400.0), true);
        let r = resolve(&p, None).unwrap();
        for v in -300..400 {
            let f = ((v as f64 - 39.5) / 399.0 + 0.5).clamp(0.0, 1.0);
            let naive = 255 - (255.0 * f).floor() as i32;
            let exact = gray_output(&p, &r, v) as i32;
            assert!((exact - naive).abs() <= 1, "v={v}");
        }
        // No VOI on MONOCHROME1 never reaches 0 (slope -254, §6.1).
        let n = plan(8, false, Modality::Identity, Voi::None, true);
        let r = resolve(&n, None).unwrap();
        assert_eq!(gray_output(&n, &r, 255), 1);
        assert_eq!(gray_output(&n, &r, 0), 255);
    }

    #[test]
    fn no_voi_scales_the_absolute_range() {
        let p = plan(12, false, Modality::Identity, Voi::None, false);
        let r = resolve(&p, None).unwrap();
        assert_eq!(gray_output(&p, &r, 0), 0);
        assert_eq!(gray_output(&p, &r, 4095), 255);
        assert_eq!(gray_output(&p, &r, 16), 1);
    }

    #[test]
    fn auto_windows_follow_dcmtk() {
        let p = plan(
            16,
            true,
            Modality::Identity,
            Voi::Auto(AutoWindow::MinMax, VoiFunction::Linear),
            false,
        );
        let st = FrameStats::from_stored_counts(&p, [(-10, 1u64), (0, 5), (20, 2)].into_iter());
        let w = auto_window(&p, AutoWindow::MinMax, VoiFunction::Linear, &st).unwrap();
        assert_eq!((w.center, w.width), (5.5, 31.0));
        let w = auto_window(&p, AutoWindow::MinMaxNoExtremes, VoiFunction::Linear, &st).unwrap();
        assert_eq!((w.center, w.width), (0.5, 1.0));
        // Two distinct values: no window.
        let two = FrameStats::from_stored_counts(&p, [(0, 1u64), (9, 1)].into_iter());
        assert!(auto_window(&p, AutoWindow::MinMaxNoExtremes, VoiFunction::Linear, &two).is_none());
    }

    #[test]
    fn histogram_window_is_asymmetric_and_wraps() {
        let p = plan(16, false, Modality::Identity, Voi::None, false);
        // 100 pixels at each of 0..=9.
        let st = FrameStats::from_stored_counts(&p, (0..10).map(|v| (v, 100u64)));
        let w = auto_window(
            &p,
            AutoWindow::Histogram { percent: 10.0 },
            VoiFunction::Linear,
            &st,
        )
        .unwrap();
        // threshold 100: low end steps past bin 0 -> 1; high end stops on bin 9 -> 9.
        assert_eq!((w.center, w.width), (5.5, 9.0));
        // 8-bit data spanning 0..255 with 0 %: max+1 wraps to 0, so no window.
        let p8 = GrayPlan {
            stored: StoredFormat {
                bits_allocated: 8,
                bits_stored: 8,
                high_bit: 7,
                signed: false,
            },
            ..p
        };
        let full = FrameStats::from_stored_counts(&p8, (0..256).map(|v| (v, 1u64)));
        assert!(auto_window(
            &p8,
            AutoWindow::Histogram { percent: 0.0 },
            VoiFunction::Linear,
            &full
        )
        .is_none());
    }

    #[test]
    fn voi_lut_output_shifts_to_8_bits() {
        let lut = Arc::new(Lut::decode(4096, 0, 12, &(0..4096).collect::<Vec<u16>>()).unwrap());
        let p = plan(12, false, Modality::Identity, Voi::Lut(lut), false);
        let r = resolve(&p, None).unwrap();
        assert_eq!(gray_output(&p, &r, 4095), 255);
        assert_eq!(gray_output(&p, &r, 16), 1);
    }
}
