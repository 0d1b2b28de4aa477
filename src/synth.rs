//! `dicomflow synth`: a deterministic phantom series written as real DICOM files (Explicit VR
//! Little Endian, through dicom-object). CT-like by default: air, body, lungs, spine, a vessel
//! and reproducible noise, in Hounsfield units with RescaleIntercept -1024 (or signed stored
//! values). Same options, same bytes, on every machine.

use std::path::{Path, PathBuf};

use dicom_core::value::PrimitiveValue;
use dicom_core::{DataElement, VR};
use dicom_dictionary_std::{tags, uids};
use dicom_object::meta::FileMetaTableBuilder;
use dicom_object::InMemDicomObject;

use crate::render::plan::{Chain, FramePlan, GrayPlan, Modality, StoredFormat, Voi, Window};
use crate::render::spec::VoiFunction;

/// What to generate.
#[derive(Debug, Clone)]
pub struct SynthOptions {
    /// Rows = Columns.
    pub size: u32,
    /// Number of slices (files, or frames with `multiframe`).
    pub slices: u32,
    /// Signed stored values (PixelRepresentation 1, intercept 0) instead of unsigned + -1024.
    pub signed: bool,
    /// MONOCHROME1 (inverted display) instead of MONOCHROME2.
    pub monochrome1: bool,
    /// BitsStored for 16-bit data (12 or 16 typical).
    pub bits_stored: u16,
    /// 8-bit grayscale (BitsAllocated 8, values scaled to 0..255, no rescale).
    pub eight_bit: bool,
    /// RGB colour phantom (8-bit, interleaved).
    pub rgb: bool,
    /// Write one multi-frame file instead of one file per slice.
    pub multiframe: bool,
    /// Windows (center, width) written as multi-valued WindowCenter/WindowWidth.
    pub windows: Vec<(f64, f64)>,
    /// VOILUTFunction to write, if any.
    pub voi_function: Option<String>,
    /// Seed for UIDs and noise.
    pub seed: u64,
    /// Worker threads (0 = all cores).
    pub threads: usize,
}

impl Default for SynthOptions {
    fn default() -> Self {
        SynthOptions {
            size: 512,
            slices: 200,
            signed: false,
            monochrome1: false,
            bits_stored: 12,
            eight_bit: false,
            rgb: false,
            multiframe: false,
            windows: vec![(40.0, 400.0), (-600.0, 1500.0)],
            voi_function: None,
            seed: 1,
            threads: 0,
        }
    }
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A deterministic UID under the 2.25 (UUID-derived) root.
fn uid(seed: u64, what: u64) -> String {
    let hi = splitmix(seed ^ splitmix(what));
    let lo = splitmix(hi ^ what);
    let n = ((hi as u128) << 64 | lo as u128) >> 2; // < 2^126, fits 2.25.<39 digits>
    format!("2.25.{n}")
}

/// Hounsfield value of the phantom at (u, v) in [-1, 1]², slice position t in [0, 1].
fn phantom_hu(u: f64, v: f64, t: f64, noise: f64) -> f64 {
    let body = (u / 0.85).powi(2) + (v / 0.7).powi(2);
    if body > 1.0 {
        return -1000.0 + noise * 0.3;
    }
    let lung_r = 0.18 + 0.08 * (std::f64::consts::PI * t).sin();
    let lung = |cx: f64| ((u - cx) / lung_r).powi(2) + ((v + 0.05) / (lung_r * 1.6)).powi(2);
    let mut hu = 40.0 + 25.0 * (3.0 * u).sin() * (2.0 * v).cos();
    if lung(-0.38) < 1.0 || lung(0.38) < 1.0 {
        hu = -850.0 + 60.0 * u.abs();
    }
    let spine = u.powi(2) + (v - 0.42).powi(2);
    if spine < 0.09f64.powi(2) {
        hu = 700.0 + 500.0 * (1.0 - spine.sqrt() / 0.09);
    }
    let vessel = (u - 0.12).powi(2) + (v - 0.1 - 0.05 * t).powi(2);
    if vessel < 0.045f64.powi(2) {
        hu = 320.0;
    }
    (hu + noise).clamp(-1024.0, 3071.0)
}

/// Noise in about ±15 HU from a hash of the position.
fn noise(seed: u64, x: u32, y: u32, z: u32) -> f64 {
    let h = splitmix(seed ^ ((x as u64) << 40 | (y as u64) << 20 | z as u64));
    ((h >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 30.0
}

/// Stored values of slice `z` as raw little-endian bytes.
pub fn slice_pixels(o: &SynthOptions, z: u32) -> Vec<u8> {
    let n = o.size as usize;
    let t = if o.slices > 1 {
        z as f64 / (o.slices - 1) as f64
    } else {
        0.5
    };
    let coord = |i: usize| (i as f64 + 0.5) / n as f64 * 2.0 - 1.0;
    if o.rgb {
        let mut out = Vec::with_capacity(n * n * 3);
        for y in 0..n {
            for x in 0..n {
                let hu = phantom_hu(coord(x), coord(y), t, noise(o.seed, x as u32, y as u32, z));
                let g = ((hu + 1024.0) / 4095.0 * 255.0) as u8;
                out.extend_from_slice(&[g, (x * 255 / n.max(1)) as u8, (y * 255 / n.max(1)) as u8]);
            }
        }
        return out;
    }
    let mut out = Vec::with_capacity(n * n * 2);
    let max_stored = (1i64 << o.bits_stored) - 1;
    for y in 0..n {
        for x in 0..n {
            let hu = phantom_hu(coord(x), coord(y), t, noise(o.seed, x as u32, y as u32, z));
            if o.eight_bit {
                out.push(((hu + 1024.0) / 4095.0 * 255.0).round() as u8);
            } else if o.signed {
                let half = 1i64 << (o.bits_stored - 1);
                let v = (hu.round() as i64).clamp(-half, half - 1);
                out.extend_from_slice(&(v as i16).to_le_bytes());
            } else {
                let v = (hu.round() as i64 + 1024).clamp(0, max_stored);
                out.extend_from_slice(&(v as u16).to_le_bytes());
            }
        }
    }
    out
}

fn put(obj: &mut InMemDicomObject, tag: dicom_core::Tag, vr: VR, v: PrimitiveValue) {
    obj.put(DataElement::new(tag, vr, v));
}

fn strs(values: &[&str]) -> PrimitiveValue {
    PrimitiveValue::Strs(values.iter().map(|s| s.to_string()).collect())
}

fn fmt_ds(v: f64) -> String {
    let s = format!("{v}");
    if s.len() > 16 {
        format!("{v:.6}")
    } else {
        s
    }
}

/// Builds the data set of file `index` holding `frames` (slice numbers).
fn build_object(o: &SynthOptions, index: u32, frames: &[u32]) -> Result<Vec<u8>, String> {
    let mut obj = InMemDicomObject::new_empty();
    let sop_class = if o.rgb || o.multiframe {
        uids::SECONDARY_CAPTURE_IMAGE_STORAGE
    } else {
        uids::CT_IMAGE_STORAGE
    };
    let sop_uid = uid(o.seed, 1000 + index as u64);
    put(
        &mut obj,
        tags::SPECIFIC_CHARACTER_SET,
        VR::CS,
        PrimitiveValue::from("ISO_IR 100"),
    );
    put(
        &mut obj,
        tags::IMAGE_TYPE,
        VR::CS,
        strs(&["ORIGINAL", "PRIMARY", "AXIAL"]),
    );
    put(
        &mut obj,
        tags::SOP_CLASS_UID,
        VR::UI,
        PrimitiveValue::from(sop_class),
    );
    put(
        &mut obj,
        tags::SOP_INSTANCE_UID,
        VR::UI,
        PrimitiveValue::from(sop_uid.as_str()),
    );
    put(
        &mut obj,
        tags::STUDY_DATE,
        VR::DA,
        PrimitiveValue::from("20260101"),
    );
    put(
        &mut obj,
        tags::MODALITY,
        VR::CS,
        PrimitiveValue::from(if o.rgb { "OT" } else { "CT" }),
    );
    put(
        &mut obj,
        tags::MANUFACTURER,
        VR::LO,
        PrimitiveValue::from("dicomflow synth"),
    );
    put(
        &mut obj,
        tags::PATIENT_NAME,
        VR::PN,
        PrimitiveValue::from("Phantom^Synthetic"),
    );
    put(
        &mut obj,
        tags::PATIENT_ID,
        VR::LO,
        PrimitiveValue::from(format!("PHANTOM{}", o.seed)),
    );
    put(
        &mut obj,
        tags::STUDY_INSTANCE_UID,
        VR::UI,
        PrimitiveValue::from(uid(o.seed, 1)),
    );
    put(
        &mut obj,
        tags::SERIES_INSTANCE_UID,
        VR::UI,
        PrimitiveValue::from(uid(o.seed, 2)),
    );
    put(
        &mut obj,
        tags::SERIES_NUMBER,
        VR::IS,
        PrimitiveValue::from("1"),
    );
    put(
        &mut obj,
        tags::INSTANCE_NUMBER,
        VR::IS,
        PrimitiveValue::from((index + 1).to_string()),
    );
    if !o.multiframe {
        let z = -(frames[0] as f64) * 1.25;
        put(
            &mut obj,
            tags::IMAGE_POSITION_PATIENT,
            VR::DS,
            strs(&["-250", "-250", &fmt_ds(z)]),
        );
        put(
            &mut obj,
            tags::IMAGE_ORIENTATION_PATIENT,
            VR::DS,
            strs(&["1", "0", "0", "0", "1", "0"]),
        );
        put(
            &mut obj,
            tags::SLICE_THICKNESS,
            VR::DS,
            PrimitiveValue::from("1.25"),
        );
    }
    let spp: u16 = if o.rgb { 3 } else { 1 };
    put(
        &mut obj,
        tags::SAMPLES_PER_PIXEL,
        VR::US,
        PrimitiveValue::from(spp),
    );
    let pi = if o.rgb {
        "RGB"
    } else if o.monochrome1 {
        "MONOCHROME1"
    } else {
        "MONOCHROME2"
    };
    put(
        &mut obj,
        tags::PHOTOMETRIC_INTERPRETATION,
        VR::CS,
        PrimitiveValue::from(pi),
    );
    if o.rgb {
        put(
            &mut obj,
            tags::PLANAR_CONFIGURATION,
            VR::US,
            PrimitiveValue::from(0u16),
        );
    }
    if o.multiframe {
        put(
            &mut obj,
            tags::NUMBER_OF_FRAMES,
            VR::IS,
            PrimitiveValue::from(frames.len().to_string()),
        );
    }
    put(
        &mut obj,
        tags::ROWS,
        VR::US,
        PrimitiveValue::from(o.size as u16),
    );
    put(
        &mut obj,
        tags::COLUMNS,
        VR::US,
        PrimitiveValue::from(o.size as u16),
    );
    put(
        &mut obj,
        tags::PIXEL_SPACING,
        VR::DS,
        strs(&[
            &fmt_ds(500.0 / o.size as f64),
            &fmt_ds(500.0 / o.size as f64),
        ]),
    );
    let eight = o.rgb || o.eight_bit;
    let (alloc, stored) = if eight {
        (8u16, 8u16)
    } else {
        (16, o.bits_stored)
    };
    put(
        &mut obj,
        tags::BITS_ALLOCATED,
        VR::US,
        PrimitiveValue::from(alloc),
    );
    put(
        &mut obj,
        tags::BITS_STORED,
        VR::US,
        PrimitiveValue::from(stored),
    );
    put(
        &mut obj,
        tags::HIGH_BIT,
        VR::US,
        PrimitiveValue::from(stored - 1),
    );
    put(
        &mut obj,
        tags::PIXEL_REPRESENTATION,
        VR::US,
        PrimitiveValue::from(u16::from(o.signed && !eight)),
    );
    if !o.rgb {
        if !o.windows.is_empty() {
            let (c, w): (Vec<String>, Vec<String>) = o
                .windows
                .iter()
                .map(|&(c, w)| (fmt_ds(c), fmt_ds(w)))
                .unzip();
            put(
                &mut obj,
                tags::WINDOW_CENTER,
                VR::DS,
                PrimitiveValue::Strs(c.into_iter().collect()),
            );
            put(
                &mut obj,
                tags::WINDOW_WIDTH,
                VR::DS,
                PrimitiveValue::Strs(w.into_iter().collect()),
            );
            let expl: Vec<String> = (1..=o.windows.len())
                .map(|i| format!("WINDOW{i}"))
                .collect();
            put(
                &mut obj,
                tags::WINDOW_CENTER_WIDTH_EXPLANATION,
                VR::LO,
                PrimitiveValue::Strs(expl.into_iter().collect()),
            );
        }
        if let Some(f) = &o.voi_function {
            put(
                &mut obj,
                tags::VOILUT_FUNCTION,
                VR::CS,
                PrimitiveValue::from(f.as_str()),
            );
        }
        if !eight {
            let intercept = if o.signed { "0" } else { "-1024" };
            put(
                &mut obj,
                tags::RESCALE_INTERCEPT,
                VR::DS,
                PrimitiveValue::from(intercept),
            );
            put(
                &mut obj,
                tags::RESCALE_SLOPE,
                VR::DS,
                PrimitiveValue::from("1"),
            );
            put(
                &mut obj,
                tags::RESCALE_TYPE,
                VR::LO,
                PrimitiveValue::from("HU"),
            );
        }
    }
    let mut bytes = Vec::new();
    for &z in frames {
        bytes.extend(slice_pixels(o, z));
    }
    let pixel_value = if eight {
        if bytes.len() % 2 == 1 {
            bytes.push(0);
        }
        DataElement::new(tags::PIXEL_DATA, VR::OB, PrimitiveValue::from(bytes))
    } else {
        let words: Vec<u16> = bytes
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect();
        DataElement::new(tags::PIXEL_DATA, VR::OW, PrimitiveValue::U16(words.into()))
    };
    obj.put(pixel_value);
    let meta = FileMetaTableBuilder::new()
        .transfer_syntax(uids::EXPLICIT_VR_LITTLE_ENDIAN)
        .media_storage_sop_class_uid(sop_class)
        .media_storage_sop_instance_uid(sop_uid.as_str())
        .implementation_class_uid(crate::output::dicom::IMPLEMENTATION_CLASS_UID)
        .implementation_version_name(crate::output::dicom::IMPLEMENTATION_VERSION_NAME)
        .build()
        .map_err(|e| format!("file meta: {e}"))?;
    let file = obj.with_exact_meta(meta);
    let mut out = Vec::new();
    file.write_all(&mut out)
        .map_err(|e| format!("writing DICOM: {e}"))?;
    Ok(out)
}

/// Writes the series into `dir`; returns the paths written.
pub fn write_series(dir: &Path, o: &SynthOptions) -> Result<Vec<PathBuf>, String> {
    if o.size == 0 || o.size > 65535 || o.slices == 0 {
        return Err("size must be 1..=65535 and slices at least 1".into());
    }
    if !(1..=16).contains(&o.bits_stored) || (o.signed && o.bits_stored < 2) {
        return Err("bits-stored must be in 1..=16 (2..=16 when signed)".into());
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if o.multiframe {
        let frames: Vec<u32> = (0..o.slices).collect();
        let bytes = build_object(o, 0, &frames)?;
        let path = dir.join("MF00001.dcm");
        crate::output::atomic::write_atomic(&path, &bytes)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        return Ok(vec![path]);
    }
    let threads = if o.threads > 0 {
        o.threads
    } else {
        crate::host::available_cores()
    };
    let next = std::sync::atomic::AtomicU32::new(0);
    let written = std::sync::Mutex::new(Vec::new());
    let error = std::sync::Mutex::new(None::<String>);
    std::thread::scope(|s| {
        for _ in 0..threads.min(o.slices as usize) {
            s.spawn(|| loop {
                let z = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if z >= o.slices {
                    break;
                }
                let path = dir.join(format!("IM{:05}.dcm", z + 1));
                let result = build_object(o, z, &[z]).and_then(|bytes| {
                    crate::output::atomic::write_atomic(&path, &bytes)
                        .map_err(|e| format!("{}: {e}", path.display()))
                });
                match result {
                    Ok(()) => {
                        if let Ok(mut w) = written.lock() {
                            w.push(path);
                        }
                    }
                    Err(e) => {
                        if let Ok(mut err) = error.lock() {
                            err.get_or_insert(e);
                        }
                        break;
                    }
                }
            });
        }
    });
    if let Some(e) = error.into_inner().ok().flatten() {
        return Err(e);
    }
    let mut paths = written.into_inner().unwrap_or_default();
    paths.sort();
    Ok(paths)
}

/// The plan `run` uses for a `synth` CT slice of `size`²: 12 bits stored, rescale -1024, the
/// soft-tissue window.
pub fn phantom_plan(size: u32) -> FramePlan {
    FramePlan {
        rows: size,
        cols: size,
        chain: Chain::Gray(GrayPlan {
            stored: StoredFormat {
                bits_allocated: 16,
                bits_stored: 12,
                high_bit: 11,
                signed: false,
            },
            modality: Modality::Rescale {
                slope: 1.0,
                intercept: -1024.0,
            },
            voi: Voi::Window(Window {
                center: 40.0,
                width: 400.0,
                function: VoiFunction::Linear,
            }),
            invert: false,
            pixels: size as u64 * size as u64,
        }),
        ops: None,
        encoded: None,
        overlay: None,
    }
}

/// Stored values of one phantom slice of `size`².
pub fn phantom_stored(size: u32) -> Vec<u8> {
    slice_pixels(
        &SynthOptions {
            size,
            slices: 3,
            ..Default::default()
        },
        1,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uids_are_deterministic_and_valid() {
        let a = uid(1, 2);
        assert_eq!(a, uid(1, 2));
        assert_ne!(a, uid(1, 3));
        assert!(a.len() <= 64, "{a}");
        assert!(a.chars().all(|c| c.is_ascii_digit() || c == '.'));
    }

    #[test]
    fn pixels_are_deterministic_and_cover_the_phantom() {
        let o = SynthOptions {
            size: 64,
            slices: 3,
            ..Default::default()
        };
        let a = slice_pixels(&o, 1);
        assert_eq!(a, slice_pixels(&o, 1));
        let values: Vec<u16> = a
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect();
        let min = *values.iter().min().unwrap();
        let max = *values.iter().max().unwrap();
        assert!(min < 100, "air near 0 stored: {min}");
        assert!(max > 1600, "bone above 600 HU: {max}");
        assert!(max <= 4095);
    }
}
