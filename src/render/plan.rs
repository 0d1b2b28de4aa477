//! The render chain as data: for one frame, what to compute (stored-value layout, Modality
//! transform, VOI, polarity, or colour model). Built from the header and the user's settings;
//! executed by a backend (CPU reference or CUDA), which must produce identical bytes.

use std::collections::BTreeMap;
use std::sync::Arc;

use dicom_dictionary_std::uids;

use crate::decode::compressed::EncodedFrame;
use crate::decode::info::{ImageInfo, Photometric};
use crate::decode::lut::Lut;
use crate::render::error::PlanError;
use crate::render::frames::FrameSelection;
use crate::render::ops::{OperatorOptions, Operators};
use crate::render::spec::{VoiFunction, WindowSpec, Windows};

/// How stored values sit in their container (PS3.5 8.1.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub struct StoredFormat {
    pub bits_allocated: u16,
    pub bits_stored: u16,
    pub high_bit: u16,
    pub signed: bool,
}

impl StoredFormat {
    /// Extracts the stored value from a raw container value: shift so that `high_bit` becomes
    /// bit `bits_stored - 1`, mask to `bits_stored` bits, sign-extend when signed. `i64`
    /// because unsigned 32-bit values (up to 2^32 - 1) do not fit an `i32`.
    #[inline]
    pub fn value(&self, raw: u32) -> i64 {
        let shift = self.high_bit + 1 - self.bits_stored;
        let bits = self.bits_stored as u32;
        let v = if bits >= 32 {
            raw >> shift
        } else {
            (raw >> shift) & ((1u32 << bits) - 1)
        } as i64;
        if self.signed && (v >> (bits - 1)) & 1 == 1 {
            // Sign-extend: the top stored bit is the sign.
            v - (1i64 << bits)
        } else {
            v
        }
    }

    /// Smallest and largest stored value representable.
    pub fn range(&self) -> (i64, i64) {
        let bits = self.bits_stored as u32;
        if self.signed {
            (-(1i64 << (bits - 1)), (1i64 << (bits - 1)) - 1)
        } else {
            (0, (1i64 << bits) - 1)
        }
    }

    /// Bytes per sample in the container.
    pub fn bytes(&self) -> usize {
        self.bits_allocated as usize / 8
    }
}

/// Modality transform (PS3.3 C.11.1).
#[derive(Debug, Clone, PartialEq)]
pub enum Modality {
    Identity,
    Rescale { slope: f64, intercept: f64 },
    Lut(Arc<Lut>),
}

/// A VOI window with its function, resolved to numbers.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Window {
    pub center: f64,
    pub width: f64,
    pub function: VoiFunction,
}

/// Windows computed from the frame's own values (DCMTK `+Wm`, `+Wn`, `+Wh`).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub enum AutoWindow {
    MinMax,
    MinMaxNoExtremes,
    Histogram { percent: f64 },
}

/// VOI transform (PS3.3 C.11.2).
#[derive(Debug, Clone, PartialEq)]
pub enum Voi {
    Window(Window),
    Lut(Arc<Lut>),
    /// Computed from the frame's data by the backend, then applied with `function`.
    Auto(AutoWindow, VoiFunction),
    /// No VOI: the modality value range is scaled linearly to 8 bits.
    None,
}

/// The grayscale chain.
#[derive(Debug, Clone, PartialEq)]
pub struct GrayPlan {
    pub stored: StoredFormat,
    pub modality: Modality,
    pub voi: Voi,
    /// MONOCHROME1 (or an INVERSE presentation LUT shape): black and white swapped inside
    /// the VOI formulas (as DCMTK does), not `255 - x` afterwards.
    pub invert: bool,
    /// Pixels per frame (DCMTK's internal table rule depends on it, see chain.rs).
    pub pixels: u64,
}

/// Colour models converted to 8-bit RGB.
#[derive(Debug, Clone, PartialEq)]
pub enum ColorModel {
    Rgb,
    YbrFull,
    YbrFull422,
    YbrPartial422,
    Palette(Arc<[Lut; 3]>),
}

/// The colour chain.
#[derive(Debug, Clone, PartialEq)]
pub struct ColorPlan {
    pub stored: StoredFormat,
    pub model: ColorModel,
    /// Planar configuration 1 (RR..GG..BB..) in the slot.
    pub planar: bool,
    /// Native YBR_*_422 data: a Y1 Y2 Cb Cr stream per pixel pair (2 samples per pixel).
    pub subsampled: bool,
}

/// Grayscale, grayscale through several windows, or colour.
#[derive(Debug, Clone, PartialEq)]
pub enum Chain {
    Gray(GrayPlan),
    /// Window channels: one grayscale chain per colour channel (red, green, then blue), equal
    /// but for their VOI; written as RGB, blue black when there are two.
    Channels(Vec<GrayPlan>),
    Color(ColorPlan),
}

/// Everything a backend needs to turn one frame's stored values into 8-bit output.
#[derive(Debug, Clone, PartialEq)]
pub struct FramePlan {
    /// The frame's stored size (what the chain reads and renders).
    pub rows: u32,
    pub cols: u32,
    pub chain: Chain,
    /// Operators applied to the rendering (resize, rotation, flips, inversion); `None` when
    /// the rendering is the output. The output's size is theirs ([`FramePlan::out_rows`]).
    pub ops: Option<Operators>,
    /// `Some` when the slot's input holds the frame's compressed codestream instead of its
    /// stored values: the backend decodes it first (a GPU codec, or the CPU decoder of its
    /// transfer syntax), then applies `chain` to the decoded values.
    pub encoded: Option<EncodedFrame>,
    /// Overlay planes drawn on the rendered frame (grayscale only, as DCMTK), `None` when
    /// none covers it or overlays are off.
    pub overlay: Option<Arc<crate::render::overlay::FrameOverlay>>,
}

impl FramePlan {
    /// Number of stored pixels (the rendering's too).
    pub fn pixels(&self) -> usize {
        self.rows as usize * self.cols as usize
    }

    /// Output channels (1 gray, 3 RGB or window channels).
    pub fn channels(&self) -> usize {
        match self.chain {
            Chain::Gray(_) => 1,
            Chain::Channels(_) | Chain::Color(_) => 3,
        }
    }

    /// Input bytes the plan reads from the slot.
    pub fn input_bytes(&self) -> usize {
        match &self.chain {
            Chain::Gray(g) => self.pixels() * g.stored.bytes(),
            Chain::Channels(gs) => self.pixels() * gs.first().map_or(0, |g| g.stored.bytes()),
            Chain::Color(c) => {
                crate::render::color::input_samples(c, self.pixels()) * c.stored.bytes()
            }
        }
    }

    /// Bytes of the rendering before the operators (the output's when there are none).
    pub fn rendered_bytes(&self) -> usize {
        self.pixels() * self.channels()
    }

    /// Output rows (after the operators).
    pub fn out_rows(&self) -> u32 {
        self.ops.map_or(self.rows, |o| o.out_h)
    }

    /// Output columns (after the operators).
    pub fn out_cols(&self) -> u32 {
        self.ops.map_or(self.cols, |o| o.out_w)
    }

    /// Output bytes the plan writes: 8-bit pixels of the output size.
    pub fn output_bytes(&self) -> usize {
        self.out_rows() as usize * self.out_cols() as usize * self.channels()
    }

    /// Room an output slot needs: the 8-bit pixels, or the same rows PNG-filtered, each with
    /// its filter type byte (the GPU leaves them so; see kernels/png.cu).
    pub fn output_capacity(&self) -> usize {
        self.output_bytes() + self.out_rows() as usize
    }

    /// What the plan does, in words (the DICOM output's derivation description).
    pub fn describe(&self) -> String {
        let voi = |g: &GrayPlan| match &g.voi {
            Voi::Window(w) => format!("window {}/{} {}", w.center, w.width, w.function),
            Voi::Lut(_) => "VOI LUT".to_string(),
            Voi::Auto(AutoWindow::MinMax, f) => format!("min-max window {f}"),
            Voi::Auto(AutoWindow::MinMaxNoExtremes, f) => {
                format!("min-max window without extremes {f}")
            }
            Voi::Auto(AutoWindow::Histogram { percent }, f) => {
                format!("histogram window {percent}% {f}")
            }
            Voi::None => "no VOI".to_string(),
        };
        let mut s = match &self.chain {
            Chain::Gray(g) => voi(g),
            Chain::Channels(gs) => {
                let names = ["R", "G", "B"];
                let parts: Vec<String> = gs
                    .iter()
                    .zip(names)
                    .map(|(g, n)| format!("{n}: {}", voi(g)))
                    .collect();
                format!("window channels ({})", parts.join(", "))
            }
            Chain::Color(_) => "colour to RGB".to_string(),
        };
        if let Some(ops) = &self.ops {
            s.push_str(&format!(
                "; {}x{} -> {}x{}",
                self.cols, self.rows, ops.out_w, ops.out_h
            ));
        }
        s
    }
}

/// The render choices of a run: the window(s) asked for (by default, per modality, per
/// series), an override of the file's VOI LUT function, whether overlay planes are drawn, the
/// frames of multi-frame files, and the operators applied to each rendering.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RenderOptions {
    /// The window(s) of files no table below names.
    pub window: Windows,
    /// Windows by Modality (keys upper case, e.g. `CT`).
    pub window_by_modality: BTreeMap<String, Windows>,
    /// Windows by Series Instance UID; these win over the modality's.
    pub window_by_series: BTreeMap<String, Windows>,
    pub voi_function: Option<VoiFunction>,
    /// Draw the file's overlay planes (60xx) on grayscale frames, as `dcm2pnm` does by
    /// default; `false` is DCMTK's `-O`. Not on window channels or colour images.
    pub overlays: bool,
    /// Frames rendered from multi-frame files.
    pub frames: FrameSelection,
    #[serde(flatten)]
    pub ops: OperatorOptions,
}

impl Default for RenderOptions {
    fn default() -> Self {
        RenderOptions {
            window: Windows::default(),
            window_by_modality: BTreeMap::new(),
            window_by_series: BTreeMap::new(),
            voi_function: None,
            overlays: true,
            frames: FrameSelection::default(),
            ops: OperatorOptions::default(),
        }
    }
}

impl RenderOptions {
    /// The windows for a file: its series' entry, else its modality's, else the default.
    pub fn windows_for(&self, info: &ImageInfo) -> &Windows {
        info.series_uid
            .as_deref()
            .and_then(|s| self.window_by_series.get(s.trim()))
            .or_else(|| {
                info.modality
                    .as_deref()
                    .and_then(|m| self.window_by_modality.get(&m.trim().to_ascii_uppercase()))
            })
            .unwrap_or(&self.window)
    }

    /// The settings that shape a file's pixels, as text (keys derived UIDs: the same settings
    /// on the same source give the same UIDs, other settings other UIDs).
    pub fn fingerprint(&self, windows: &Windows) -> String {
        let o = &self.ops;
        format!(
            "window={windows};voi_function={};overlays={};resize={};fit={};interpolation={};\
             rotate={};flip={};invert={}",
            self.voi_function
                .map_or_else(|| "file".to_string(), |f| f.to_string()),
            self.overlays,
            o.resize,
            o.fit,
            o.interpolation,
            o.rotate,
            o.flip,
            o.invert
        )
    }
}

/// Parses the VOILUTFunction attribute; unknown values fall back to LINEAR as DCMTK does.
fn file_function(attr: Option<&str>) -> VoiFunction {
    match attr.map(str::trim) {
        Some("LINEAR_EXACT") => VoiFunction::LinearExact,
        Some("SIGMOID") => VoiFunction::Sigmoid,
        _ => VoiFunction::Linear,
    }
}

/// Builds the plan for frame `frame` of an image.
pub fn plan_frame(
    info: &ImageInfo,
    frame: u32,
    opts: &RenderOptions,
) -> Result<FramePlan, PlanError> {
    let stored = StoredFormat {
        bits_allocated: info.bits_allocated,
        bits_stored: info.bits_stored,
        high_bit: info.high_bit,
        signed: info.signed,
    };
    let windows = opts.windows_for(info);
    let chain = if info.photometric.is_gray() {
        match windows.specs() {
            [one] => Chain::Gray(gray_plan(info, frame, stored, opts, *one)?),
            several => Chain::Channels(
                several
                    .iter()
                    .map(|&spec| gray_plan(info, frame, stored, opts, spec))
                    .collect::<Result<_, _>>()?,
            ),
        }
    } else {
        if windows.is_channels() {
            return Err(PlanError::ChannelsNeedGray {
                windows: windows.specs().len(),
                photometric: info.photometric.as_str(),
            });
        }
        if info.bits_allocated == 32 {
            return Err(PlanError::Unsupported(
                "32-bit colour images are not supported".into(),
            ));
        }
        let model = match info.photometric {
            Photometric::Rgb => ColorModel::Rgb,
            Photometric::YbrFull => ColorModel::YbrFull,
            Photometric::YbrFull422 => ColorModel::YbrFull422,
            Photometric::YbrPartial422 => ColorModel::YbrPartial422,
            Photometric::PaletteColor => {
                ColorModel::Palette(info.palette.clone().ok_or_else(|| {
                    PlanError::Unsupported("PALETTE COLOR without lookup tables".into())
                })?)
            }
            Photometric::YbrIct | Photometric::YbrRct => {
                return Err(PlanError::Unsupported(format!(
                    "{} outside JPEG 2000 pixel data is not supported",
                    info.photometric.as_str()
                )))
            }
            Photometric::Monochrome1 | Photometric::Monochrome2 => {
                return Err(PlanError::Internal(
                    "grayscale image planned as colour".into(),
                ))
            }
        };
        Chain::Color(ColorPlan {
            stored,
            model,
            planar: info.planar_configuration == 1 && info.samples_per_pixel == 3,
            subsampled: info.subsampled_422,
        })
    };
    // DCMTK draws overlays on monochrome images only.
    let overlay = match chain {
        Chain::Gray(_) if opts.overlays => {
            crate::render::overlay::FrameOverlay::for_frame(&info.overlays, frame).map(Arc::new)
        }
        _ => None,
    };
    Ok(FramePlan {
        rows: info.rows,
        cols: info.cols,
        chain,
        ops: opts
            .ops
            .resolve(info.cols, info.rows)
            .map_err(PlanError::Operators)?,
        encoded: None,
        overlay,
    })
}

/// SOP classes without a Modality transform (X-Ray Angiography and Radiofluoroscopy; the
/// bi-plane class is retired, hence deprecated in the dictionary crate).
#[allow(deprecated)]
const NO_MODALITY_SOP_CLASSES: [&str; 3] = [
    uids::X_RAY_ANGIOGRAPHIC_IMAGE_STORAGE,
    uids::X_RAY_RADIOFLUOROSCOPIC_IMAGE_STORAGE,
    uids::X_RAY_ANGIOGRAPHIC_BI_PLANE_IMAGE_STORAGE,
];

fn gray_plan(
    info: &ImageInfo,
    frame: u32,
    stored: StoredFormat,
    opts: &RenderOptions,
    window: WindowSpec,
) -> Result<GrayPlan, PlanError> {
    let attrs = info.frame_attrs(frame);
    let no_modality = info
        .sop_class
        .as_deref()
        .is_some_and(|s| NO_MODALITY_SOP_CLASSES.contains(&s));
    // A Modality LUT wins over rescale; a zero slope is ignored (DCMTK's rules).
    let modality = if no_modality {
        Modality::Identity
    } else if let Some(lut) = &info.modality_lut {
        Modality::Lut(lut.clone())
    } else {
        match attrs.rescale {
            Some(r) if r.slope != 0.0 && !(r.slope == 1.0 && r.intercept == 0.0) => {
                Modality::Rescale {
                    slope: r.slope,
                    intercept: r.intercept,
                }
            }
            _ => Modality::Identity,
        }
    };
    let function = opts
        .voi_function
        .unwrap_or_else(|| file_function(attrs.voi_function.as_deref()));
    let window_at = |index: usize| -> Option<Voi> {
        attrs.windows.get(index - 1).map(|w| {
            if w.width >= 1.0 {
                Voi::Window(Window {
                    center: w.center,
                    width: w.width,
                    function,
                })
            } else {
                // A width below 1 is invalid (PS3.3 C.11.2.1.2): no VOI, as DCMTK renders it.
                tracing::warn!(index, width = w.width, "window width below 1 ignored");
                Voi::None
            }
        })
    };
    let voi = match window {
        WindowSpec::Default => match window_at(1) {
            Some(v @ Voi::Window(_)) => v,
            _ => Voi::Auto(AutoWindow::MinMax, function),
        },
        WindowSpec::File { index } => window_at(index).ok_or(PlanError::NoSuchWindow {
            index,
            count: attrs.windows.len(),
        })?,
        WindowSpec::Explicit { center, width } => Voi::Window(Window {
            center,
            width,
            function,
        }),
        WindowSpec::MinMax => Voi::Auto(AutoWindow::MinMax, function),
        WindowSpec::MinMaxNoExtremes => Voi::Auto(AutoWindow::MinMaxNoExtremes, function),
        WindowSpec::Histogram { percent } => Voi::Auto(AutoWindow::Histogram { percent }, function),
        WindowSpec::VoiLut { index } => match info.voi_luts.get(index - 1) {
            Some(lut) => Voi::Lut(lut.clone()),
            None => {
                return Err(PlanError::NoSuchVoiLut {
                    index,
                    count: info.voi_luts.len(),
                })
            }
        },
        WindowSpec::None => Voi::None,
    };
    let invert = match info.presentation_lut_shape.as_deref() {
        Some("INVERSE") => true,
        Some("IDENTITY") => false,
        _ => info.photometric == Photometric::Monochrome1,
    };
    Ok(GrayPlan {
        stored,
        modality,
        voi,
        invert,
        pixels: info.rows as u64 * info.cols as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fmt(bits_allocated: u16, bits_stored: u16, high_bit: u16, signed: bool) -> StoredFormat {
        StoredFormat {
            bits_allocated,
            bits_stored,
            high_bit,
            signed,
        }
    }

    #[test]
    fn stored_value_masks_and_sign_extends() {
        let f = fmt(16, 12, 11, true);
        assert_eq!(f.value(0x0fff), -1);
        assert_eq!(f.value(0xf7ff), 2047);
        assert_eq!(f.value(0x0800), -2048);
        let u = fmt(16, 12, 11, false);
        assert_eq!(u.value(0xffff), 4095);
    }

    #[test]
    fn stored_value_honours_high_bit_above_bits_stored() {
        // 12 bits stored in bits 15..4.
        let f = fmt(16, 12, 15, false);
        assert_eq!(f.value(0xfff0), 4095);
        assert_eq!(f.value(0x000f), 0);
        let s = fmt(16, 12, 15, true);
        assert_eq!(s.value(0x8000), -2048);
    }

    #[test]
    fn stored_value_keeps_32_bit_values_exact() {
        // Regression: unsigned values >= 2^31 came back negative from an `i32`.
        let u = fmt(32, 32, 31, false);
        assert_eq!(u.value(u32::MAX), 4_294_967_295);
        assert_eq!(u.value(0x8000_0000), 2_147_483_648);
        let s = fmt(32, 32, 31, true);
        assert_eq!(s.value(u32::MAX), -1);
        assert_eq!(s.value(0x8000_0000), -2_147_483_648);
        assert_eq!(s.value(0x7fff_ffff), 2_147_483_647);
        // 24 of 32 bits, shifted.
        assert_eq!(fmt(32, 24, 31, false).value(0xffff_ff00), 0xff_ffff);
        assert_eq!(fmt(32, 24, 31, true).value(0xffff_ff00), -1);
    }

    #[test]
    fn range_matches_bits() {
        assert_eq!(fmt(16, 12, 11, true).range(), (-2048, 2047));
        assert_eq!(fmt(8, 8, 7, false).range(), (0, 255));
    }

    /// A 4x2 MONOCHROME2 header of `modality` in series `series`.
    fn info(modality: &str, series: &str) -> ImageInfo {
        use dicom_core::value::PrimitiveValue;
        use dicom_core::{DataElement, VR};
        use dicom_dictionary_std::tags;
        let mut obj = dicom_object::InMemDicomObject::new_empty();
        for (tag, vr, v) in [
            (tags::ROWS, VR::US, PrimitiveValue::from(2u16)),
            (tags::COLUMNS, VR::US, PrimitiveValue::from(4u16)),
            (tags::BITS_ALLOCATED, VR::US, PrimitiveValue::from(16u16)),
            (tags::MODALITY, VR::CS, PrimitiveValue::from(modality)),
            (
                tags::SERIES_INSTANCE_UID,
                VR::UI,
                PrimitiveValue::from(series),
            ),
        ] {
            obj.put(DataElement::new(tag, vr, v));
        }
        ImageInfo::from_object(&obj, "1.2.840.10008.1.2.1").unwrap()
    }

    #[test]
    fn windows_come_from_the_series_then_the_modality_then_the_default() {
        let w = |s: &str| Windows::parse_all(&[s]).unwrap();
        let mut opts = RenderOptions {
            window: w("minmax"),
            ..RenderOptions::default()
        };
        opts.window_by_modality.insert("CT".into(), w("40,400"));
        opts.window_by_series.insert("1.2.3".into(), w("-600,1500"));
        assert_eq!(opts.windows_for(&info("ct", "9.9")), &w("40,400"));
        assert_eq!(opts.windows_for(&info("CT", "1.2.3")), &w("-600,1500"));
        assert_eq!(opts.windows_for(&info("MR", "9.9")), &w("minmax"));
        // Window channels make an RGB plan of one chain per window; operators set the size.
        opts.window = Windows::parse_all(&["40,80", "80,200"]).unwrap();
        opts.ops.rotate = 90;
        let plan = plan_frame(&info("MR", "9.9"), 0, &opts).unwrap();
        assert!(matches!(&plan.chain, Chain::Channels(gs) if gs.len() == 2));
        assert_eq!(
            (plan.channels(), plan.out_cols(), plan.out_rows()),
            (3, 2, 4)
        );
        assert_eq!(plan.output_bytes(), 24);
        assert_eq!(plan.output_capacity(), 24 + 4);
        // The fingerprint follows the settings that shape pixels.
        let a = opts.fingerprint(&opts.window);
        opts.ops.invert = true;
        assert_ne!(a, opts.fingerprint(&opts.window));
    }
}
