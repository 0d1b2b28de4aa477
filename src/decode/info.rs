//! What a DICOM header says about its image: dimensions, sample layout, photometric
//! interpretation, rescale and LUTs, windows (including enhanced multi-frame functional
//! groups), and the identifiers used to group and order series. Read once per file, small,
//! and independent of the pixel data.

use std::sync::Arc;

use dicom_core::value::Value;
use dicom_core::Tag;
use dicom_dictionary_std::{tags, uids};
use dicom_object::InMemDicomObject;

use crate::decode::lut::Lut;

/// Photometric interpretations dicomflow renders.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Photometric {
    Monochrome1,
    Monochrome2,
    Rgb,
    YbrFull,
    YbrFull422,
    YbrPartial422,
    PaletteColor,
    /// JPEG 2000 irreversible / reversible colour transform (decoded to RGB by the codec).
    YbrIct,
    YbrRct,
}

impl Photometric {
    /// Parses the (0028,0004) value.
    pub fn parse(s: &str) -> Option<Photometric> {
        Some(match s.trim() {
            "MONOCHROME1" => Photometric::Monochrome1,
            "MONOCHROME2" => Photometric::Monochrome2,
            "RGB" => Photometric::Rgb,
            "YBR_FULL" => Photometric::YbrFull,
            "YBR_FULL_422" => Photometric::YbrFull422,
            "YBR_PARTIAL_422" => Photometric::YbrPartial422,
            "PALETTE COLOR" => Photometric::PaletteColor,
            "YBR_ICT" => Photometric::YbrIct,
            "YBR_RCT" => Photometric::YbrRct,
            _ => return None,
        })
    }

    /// The DICOM spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Photometric::Monochrome1 => "MONOCHROME1",
            Photometric::Monochrome2 => "MONOCHROME2",
            Photometric::Rgb => "RGB",
            Photometric::YbrFull => "YBR_FULL",
            Photometric::YbrFull422 => "YBR_FULL_422",
            Photometric::YbrPartial422 => "YBR_PARTIAL_422",
            Photometric::PaletteColor => "PALETTE COLOR",
            Photometric::YbrIct => "YBR_ICT",
            Photometric::YbrRct => "YBR_RCT",
        }
    }

    /// True for MONOCHROME1/2.
    pub fn is_gray(self) -> bool {
        matches!(self, Photometric::Monochrome1 | Photometric::Monochrome2)
    }
}

/// One VOI window as stored in the file.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct FileWindow {
    pub center: f64,
    pub width: f64,
    pub explanation: Option<String>,
}

/// How 32-bit colour samples become the 16-bit samples the render chain takes. DCMTK narrows a
/// colour sample of `b` stored bits to 8 by `v >> (b - 8)` (and refuses 32-bit colour); keeping
/// the top 16 of the `b` bits (`v >> (b - 16)`, the sign removed first as DCMTK removes it)
/// gives the same 8 bits through the 16-bit chain, on every backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Colour32 {
    /// `HighBit + 1 - BitsStored`: where the stored value starts in the container.
    pub shift: u32,
    /// `BitsStored` ones.
    pub mask: u32,
    /// The sign bit to flip (signed data), else 0.
    pub sign: u32,
    /// Low bits dropped: `BitsStored - 16`, or 0.
    pub down: u32,
}

impl Colour32 {
    /// The 16-bit sample of a 32-bit container value.
    pub fn narrow(&self, raw: u32) -> u16 {
        ((((raw >> self.shift) & self.mask) ^ self.sign) >> self.down) as u16
    }
}

/// Rescale slope/intercept (Modality LUT as a linear function).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Rescale {
    pub slope: f64,
    pub intercept: f64,
}

/// The per-frame rendering attributes: plain attributes, overridden by the shared and then the
/// per-frame functional groups of enhanced multi-frame objects.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct FrameAttrs {
    pub rescale: Option<Rescale>,
    pub windows: Vec<FileWindow>,
    pub voi_function: Option<String>,
}

/// Header attributes a derived DICOM image (`--format dcm`) carries over from its source:
/// patient, study and series attributes, and the source's identity for its Source Image
/// Sequence. A few dozen top-level elements, copied once per file.
#[derive(Debug, Clone, Default)]
pub struct SourceHeader {
    pub sop_class_uid: Option<String>,
    pub sop_instance_uid: Option<String>,
    pub series_uid: Option<String>,
    /// The carried elements present in the source, as read (in [`CARRIED_TAGS`] order).
    pub elements: Vec<dicom_object::mem::InMemElement>,
}

/// The attributes a derived image copies from its source when present: Patient, General
/// Study and General Series modules, the de-identification flags, the content date and time,
/// and the lossy compression history (a rendering of a lossy image stays marked lossy). Not
/// Patient Orientation: rotations and flips change it.
pub const CARRIED_TAGS: [Tag; 29] = [
    tags::SPECIFIC_CHARACTER_SET,
    tags::STUDY_DATE,
    tags::CONTENT_DATE,
    tags::STUDY_TIME,
    tags::CONTENT_TIME,
    tags::ACCESSION_NUMBER,
    tags::MODALITY,
    tags::REFERRING_PHYSICIAN_NAME,
    tags::STUDY_DESCRIPTION,
    tags::SERIES_DESCRIPTION,
    tags::PATIENT_NAME,
    tags::PATIENT_ID,
    tags::ISSUER_OF_PATIENT_ID,
    tags::PATIENT_BIRTH_DATE,
    tags::PATIENT_SEX,
    tags::PATIENT_AGE,
    tags::PATIENT_SIZE,
    tags::PATIENT_WEIGHT,
    tags::PATIENT_IDENTITY_REMOVED,
    tags::DEIDENTIFICATION_METHOD,
    tags::BODY_PART_EXAMINED,
    tags::STUDY_INSTANCE_UID,
    tags::STUDY_ID,
    tags::SERIES_NUMBER,
    tags::INSTANCE_NUMBER,
    tags::LATERALITY,
    tags::LOSSY_IMAGE_COMPRESSION,
    tags::LOSSY_IMAGE_COMPRESSION_RATIO,
    tags::LOSSY_IMAGE_COMPRESSION_METHOD,
];

impl SourceHeader {
    /// The carried attributes of a parsed header.
    pub fn of(obj: &InMemDicomObject) -> SourceHeader {
        SourceHeader {
            sop_class_uid: opt_str(obj, tags::SOP_CLASS_UID),
            sop_instance_uid: opt_str(obj, tags::SOP_INSTANCE_UID),
            series_uid: opt_str(obj, tags::SERIES_INSTANCE_UID),
            elements: CARRIED_TAGS
                .iter()
                .filter_map(|&t| obj.get(t))
                // Values of unknown VR would be written back as opaque bytes: left out.
                .filter(|e| e.vr() != dicom_core::VR::UN && e.items().is_none())
                .cloned()
                .collect(),
        }
    }
}

/// Everything needed to decode and render the frames of one file.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ImageInfo {
    pub transfer_syntax: String,
    pub rows: u32,
    pub cols: u32,
    pub frames: u32,
    pub samples_per_pixel: u16,
    /// Bits per sample in the slot: 8, 16 or 32 (packed 1- and 12-bit data is unpacked into 8-
    /// and 16-bit containers).
    pub bits_allocated: u16,
    /// Bits Allocated as the file says: equal to `bits_allocated` except for packed data (1:
    /// bitmaps such as segmentations; 12: ACR-NEMA's packed 12-bit samples) and 32-bit colour.
    pub file_bits_allocated: u16,
    /// 32-bit colour samples, narrowed to 16 bits when decoded (see [`Colour32`]).
    #[serde(skip)]
    pub colour32: Option<Colour32>,
    pub bits_stored: u16,
    pub high_bit: u16,
    pub signed: bool,
    /// What the slot holds after decoding (a codec may have converted colour).
    pub photometric: Photometric,
    /// What the header says.
    pub stored_photometric: Photometric,
    /// 0 = interleaved (RGBRGB...), 1 = planar (RR..GG..BB..).
    pub planar_configuration: u16,
    /// Native YBR_FULL_422 / YBR_PARTIAL_422: two samples per pixel (Y1 Y2 Cb Cr per pair).
    /// Cleared when a codec decodes the frame to full samples.
    pub subsampled_422: bool,
    /// Attributes of the image as a whole (plain attributes + shared functional groups).
    pub attrs: FrameAttrs,
    /// Per-frame functional group overrides, indexed by frame (empty when absent).
    #[serde(skip)]
    pub per_frame: Vec<FrameAttrs>,
    #[serde(skip)]
    pub modality_lut: Option<Arc<Lut>>,
    #[serde(skip)]
    pub voi_luts: Vec<Arc<Lut>>,
    #[serde(skip)]
    pub palette: Option<Arc<[Lut; 3]>>,
    pub voi_lut_explanations: Vec<String>,
    pub presentation_lut_shape: Option<String>,
    pub series_uid: Option<String>,
    pub instance_number: Option<i64>,
    pub image_position: Option<[f64; 3]>,
    pub modality: Option<String>,
    pub sop_class: Option<String>,
    /// What was wrong but tolerated, as DCMTK tolerates it (said once per file).
    pub warnings: Vec<String>,
    /// Overlay planes (60xx groups), in group order.
    #[serde(skip)]
    pub overlays: Vec<Arc<super::overlay::OverlayPlane>>,
    /// Values usable in output naming patterns (see `output::naming::PATTERN_KEYS`); empty
    /// when the header was read with [`NamingValues::Skip`].
    #[serde(skip)]
    pub naming: std::collections::BTreeMap<String, String>,
    /// What a derived DICOM image of this file carries over.
    #[serde(skip)]
    pub source: Arc<SourceHeader>,
}

impl ImageInfo {
    /// Bytes of stored values in one frame as the slot holds them (native order, interleaved).
    pub fn frame_bytes(&self) -> u64 {
        let samples = if self.subsampled_422 {
            2
        } else {
            self.samples_per_pixel as u64
        };
        self.rows as u64 * self.cols as u64 * samples * (self.bits_allocated as u64 / 8)
    }

    /// Bits of one frame as encoded in native (uncompressed) pixel data (frames of packed
    /// data need not start on a byte).
    pub fn native_frame_bits(&self) -> u64 {
        let samples = if self.subsampled_422 {
            2
        } else {
            self.samples_per_pixel as u64
        };
        self.rows as u64 * self.cols as u64 * samples * self.file_bits_allocated as u64
    }

    /// Bytes of native pixel data holding `frames` frames.
    pub fn native_bytes(&self, frames: u32) -> u64 {
        (self.native_frame_bits() * frames as u64).div_ceil(8)
    }

    /// Bytes of the 8-bit output of one frame (1 or 3 channels).
    pub fn output_bytes(&self) -> u64 {
        self.rows as u64 * self.cols as u64 * if self.photometric.is_gray() { 1 } else { 3 }
    }

    /// Room an output slot needs for one frame (see `FramePlan::output_capacity`).
    pub fn output_capacity(&self) -> u64 {
        self.output_bytes() + self.rows as u64
    }

    /// Attributes that apply to `frame`: per-frame groups override the shared ones.
    pub fn frame_attrs(&self, frame: u32) -> FrameAttrs {
        let mut a = self.attrs.clone();
        if let Some(pf) = self.per_frame.get(frame as usize) {
            if pf.rescale.is_some() {
                a.rescale = pf.rescale;
            }
            if !pf.windows.is_empty() {
                a.windows = pf.windows.clone();
            }
            if pf.voi_function.is_some() {
                a.voi_function = pf.voi_function.clone();
            }
        }
        a
    }

    /// Reads the image description from a parsed header (pixel data not needed).
    pub fn from_object(obj: &InMemDicomObject, transfer_syntax: &str) -> Result<Self, String> {
        Self::from_object_with(obj, transfer_syntax, NamingValues::Read)
    }

    /// [`from_object`](Self::from_object), with the naming values read or not.
    pub fn from_object_with(
        obj: &InMemDicomObject,
        transfer_syntax: &str,
        naming: NamingValues,
    ) -> Result<Self, String> {
        let rows = req_u32(obj, tags::ROWS, "Rows")?;
        let cols = req_u32(obj, tags::COLUMNS, "Columns")?;
        if rows == 0 || cols == 0 {
            return Err(format!("empty image: Rows = {rows}, Columns = {cols}"));
        }
        let samples_per_pixel = opt_int(obj, tags::SAMPLES_PER_PIXEL).unwrap_or(1);
        if samples_per_pixel != 1 && samples_per_pixel != 3 {
            return Err(format!(
                "SamplesPerPixel = {samples_per_pixel} is not supported (1 or 3)"
            ));
        }
        let file_bits_allocated = req_u32(obj, tags::BITS_ALLOCATED, "BitsAllocated")?;
        // Packed 1- and 12-bit samples are unpacked into 8- and 16-bit containers.
        let bits_allocated = match file_bits_allocated {
            1 => 8,
            12 => 16,
            8 | 16 | 32 => file_bits_allocated,
            _ => {
                return Err(format!(
                    "BitsAllocated = {file_bits_allocated} is not supported (1, 8, 12, 16 or 32)"
                ))
            }
        };
        let bits_stored = opt_int(obj, tags::BITS_STORED).unwrap_or(file_bits_allocated as i64);
        if bits_stored < 1 || bits_stored > file_bits_allocated as i64 {
            return Err(format!(
                "BitsStored = {bits_stored} does not fit BitsAllocated = {file_bits_allocated}"
            ));
        }
        let high_bit = opt_int(obj, tags::HIGH_BIT).unwrap_or(bits_stored - 1);
        if high_bit < bits_stored - 1 || high_bit >= file_bits_allocated as i64 {
            return Err(format!(
                "HighBit = {high_bit} is inconsistent with BitsStored = {bits_stored} and \
                 BitsAllocated = {file_bits_allocated}"
            ));
        }
        let signed = opt_int(obj, tags::PIXEL_REPRESENTATION).unwrap_or(0) == 1;
        let pi_text = opt_str(obj, tags::PHOTOMETRIC_INTERPRETATION).unwrap_or_else(|| {
            if samples_per_pixel == 3 {
                "RGB".into()
            } else {
                "MONOCHROME2".into()
            }
        });
        let photometric = Photometric::parse(&pi_text)
            .ok_or_else(|| format!("PhotometricInterpretation `{pi_text}` is not supported"))?;
        let expected_spp = if photometric.is_gray() || photometric == Photometric::PaletteColor {
            1
        } else {
            3
        };
        if samples_per_pixel != expected_spp {
            return Err(format!(
                "SamplesPerPixel = {samples_per_pixel} does not match {}",
                photometric.as_str()
            ));
        }
        // 32-bit colour: the slot takes 16-bit samples (see `Colour32`).
        let (bits_allocated, bits_stored, high_bit, signed, colour32) = if bits_allocated == 32
            && !photometric.is_gray()
            && photometric != Photometric::PaletteColor
        {
            let c = Colour32 {
                shift: (high_bit + 1 - bits_stored) as u32,
                mask: if bits_stored >= 32 {
                    u32::MAX
                } else {
                    (1u32 << bits_stored) - 1
                },
                sign: if signed { 1u32 << (bits_stored - 1) } else { 0 },
                down: (bits_stored as u32).saturating_sub(16),
            };
            let kept = bits_stored.min(16);
            (16, kept, kept - 1, false, Some(c))
        } else {
            (bits_allocated, bits_stored, high_bit, signed, None)
        };
        let frames = match opt_int(obj, tags::NUMBER_OF_FRAMES) {
            None => 1,
            Some(n) if n >= 1 && n <= u32::MAX as i64 => n as u32,
            Some(n) => return Err(format!("NumberOfFrames = {n} is invalid")),
        };

        let mut attrs = plain_attrs(obj);
        let mut per_frame = Vec::new();
        // Shared functional groups fill in what the top level lacks (as DCMTK does for
        // rescale); per-frame groups then override per frame (PS3.3 C.7.6.16), which DCMTK
        // 3.6.7 ignores.
        if let Some(shared) = first_item(obj, tags::SHARED_FUNCTIONAL_GROUPS_SEQUENCE) {
            let fg = group_attrs(shared);
            if attrs.rescale.is_none() {
                attrs.rescale = fg.rescale;
            }
            if attrs.windows.is_empty() && !fg.windows.is_empty() {
                attrs.windows = fg.windows;
                if fg.voi_function.is_some() {
                    attrs.voi_function = fg.voi_function;
                }
            }
        }
        if let Some(items) = obj
            .get(tags::PER_FRAME_FUNCTIONAL_GROUPS_SEQUENCE)
            .and_then(|e| e.items())
        {
            per_frame = items.iter().map(group_attrs).collect();
        }

        let mut warnings = Vec::new();
        // An unusable Modality LUT is ignored with a warning, as DCMTK does ("ignoring LUT"):
        // the rescale (or the identity) applies instead.
        let modality_lut = match first_item(obj, tags::MODALITY_LUT_SEQUENCE) {
            Some(item) => match read_lut(item, tags::LUT_DESCRIPTOR, tags::LUT_DATA) {
                Ok(lut) => Some(Arc::new(lut)),
                Err(e) => {
                    warnings.push(format!(
                        "Modality LUT Sequence: {e}; LUT ignored, {} applies",
                        if attrs.rescale.is_some() {
                            "the rescale"
                        } else {
                            "no modality transformation"
                        }
                    ));
                    None
                }
            },
            None => None,
        };
        let mut voi_luts = Vec::new();
        let mut voi_lut_explanations = Vec::new();
        if let Some(items) = obj.get(tags::VOILUT_SEQUENCE).and_then(|e| e.items()) {
            for (i, item) in items.iter().enumerate() {
                let lut = read_lut(item, tags::LUT_DESCRIPTOR, tags::LUT_DATA)
                    .map_err(|e| format!("VOI LUT Sequence item {}: {e}", i + 1))?;
                voi_luts.push(Arc::new(lut));
                voi_lut_explanations.push(opt_str(item, tags::LUT_EXPLANATION).unwrap_or_default());
            }
        }
        let palette = if photometric == Photometric::PaletteColor {
            let red = read_palette(
                obj,
                tags::RED_PALETTE_COLOR_LOOKUP_TABLE_DESCRIPTOR,
                tags::RED_PALETTE_COLOR_LOOKUP_TABLE_DATA,
                tags::SEGMENTED_RED_PALETTE_COLOR_LOOKUP_TABLE_DATA,
            );
            let green = read_palette(
                obj,
                tags::GREEN_PALETTE_COLOR_LOOKUP_TABLE_DESCRIPTOR,
                tags::GREEN_PALETTE_COLOR_LOOKUP_TABLE_DATA,
                tags::SEGMENTED_GREEN_PALETTE_COLOR_LOOKUP_TABLE_DATA,
            );
            let blue = read_palette(
                obj,
                tags::BLUE_PALETTE_COLOR_LOOKUP_TABLE_DESCRIPTOR,
                tags::BLUE_PALETTE_COLOR_LOOKUP_TABLE_DATA,
                tags::SEGMENTED_BLUE_PALETTE_COLOR_LOOKUP_TABLE_DATA,
            );
            match (red, green, blue) {
                (Ok(r), Ok(g), Ok(b)) => Some(Arc::new([r, g, b])),
                (r, g, b) => {
                    let e = [r.err(), g.err(), b.err()]
                        .into_iter()
                        .flatten()
                        .next()
                        .unwrap_or_default();
                    return Err(format!("palette colour lookup table: {e}"));
                }
            }
        } else {
            None
        };

        let native = matches!(
            super::guard::trim_uid(transfer_syntax),
            uids::IMPLICIT_VR_LITTLE_ENDIAN
                | uids::EXPLICIT_VR_LITTLE_ENDIAN
                | super::EXPLICIT_VR_BIG_ENDIAN
                | uids::DEFLATED_EXPLICIT_VR_LITTLE_ENDIAN
        );
        let overlays = super::overlay::read_overlays(
            obj,
            &super::overlay::PixelLayout {
                bits_allocated: bits_allocated as u16,
                bits_stored: bits_stored as u16,
                high_bit: high_bit as u16,
                rows,
                cols,
                frames,
                // Embedded planes are read from the stored values in the slot: uncompressed
                // data whose container is the file's (not unpacked or narrowed).
                native: native && bits_allocated == file_bits_allocated,
            },
            &mut warnings,
        )
        .into_iter()
        .map(Arc::new)
        .collect();
        let image_position = obj
            .get(tags::IMAGE_POSITION_PATIENT)
            .and_then(|e| e.to_multi_float64().ok())
            .filter(|v| v.len() == 3)
            .map(|v| [v[0], v[1], v[2]]);

        Ok(ImageInfo {
            transfer_syntax: super::guard::trim_uid(transfer_syntax).to_string(),
            rows,
            cols,
            frames,
            samples_per_pixel: samples_per_pixel as u16,
            bits_allocated: bits_allocated as u16,
            file_bits_allocated: file_bits_allocated as u16,
            colour32,
            bits_stored: bits_stored as u16,
            high_bit: high_bit as u16,
            signed,
            photometric,
            stored_photometric: photometric,
            planar_configuration: opt_int(obj, tags::PLANAR_CONFIGURATION).unwrap_or(0) as u16,
            subsampled_422: matches!(
                photometric,
                Photometric::YbrFull422 | Photometric::YbrPartial422
            ),
            attrs,
            per_frame,
            modality_lut,
            voi_luts,
            palette,
            voi_lut_explanations,
            presentation_lut_shape: opt_str(obj, tags::PRESENTATION_LUT_SHAPE),
            series_uid: opt_str(obj, tags::SERIES_INSTANCE_UID),
            instance_number: opt_int(obj, tags::INSTANCE_NUMBER),
            image_position,
            modality: opt_str(obj, tags::MODALITY),
            sop_class: opt_str(obj, tags::SOP_CLASS_UID),
            warnings,
            overlays,
            naming: match naming {
                NamingValues::Read => naming_values(obj),
                NamingValues::Skip => Default::default(),
            },
            source: Arc::new(SourceHeader::of(obj)),
        })
    }
}

/// Whether [`ImageInfo::naming`] is filled. Rendering a file whose output name is already
/// known does not need it, and collecting it (every short attribute formatted into a map) was
/// 5.9 % of the load of a 512² slice (perf on the 2-core box, 4000 × 512² to BMP: 55 of the
/// 926 samples in `load_file`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NamingValues {
    Read,
    Skip,
}

/// Values usable in naming patterns: every short text attribute at the top level of the data
/// set, under its keyword in the standard dictionary (`SeriesDescription`, `Modality`,
/// `AccessionNumber` …). Binary values, sequences and long texts are left out: a file name
/// holds a few words, and the pattern is checked against the dictionary beforehand.
pub(crate) fn naming_values(obj: &InMemDicomObject) -> std::collections::BTreeMap<String, String> {
    use dicom_core::dictionary::{DataDictionary, DataDictionaryEntry};
    use dicom_core::header::Header;
    use dicom_core::VR;
    /// Longer values (reports, comments) make no sense in a name.
    const LONGEST: usize = 128;
    let mut m = std::collections::BTreeMap::new();
    for e in obj.iter() {
        let textual = matches!(
            e.vr(),
            VR::AE
                | VR::AS
                | VR::CS
                | VR::DA
                | VR::DS
                | VR::DT
                | VR::IS
                | VR::LO
                | VR::PN
                | VR::SH
                | VR::TM
                | VR::UI
                | VR::US
                | VR::SS
                | VR::UL
                | VR::SL
        );
        if !textual {
            continue;
        }
        let Some(entry) = dicom_dictionary_std::StandardDataDictionary.by_tag(e.tag()) else {
            continue;
        };
        let Value::Primitive(p) = e.value() else {
            continue;
        };
        let v = p.to_str();
        let v = v.trim_matches(|c: char| c == ' ' || c == '\0');
        if v.is_empty() || v.len() > LONGEST {
            continue;
        }
        m.insert(entry.alias().to_string(), v.to_string());
    }
    m
}

fn req_u32(obj: &InMemDicomObject, tag: Tag, name: &str) -> Result<u32, String> {
    match opt_int(obj, tag) {
        Some(v) if (0..=u32::MAX as i64).contains(&v) => Ok(v as u32),
        Some(v) => Err(format!("{name} = {v} is out of range")),
        None if obj.get(tag).is_some() => Err(format!("{name} is unreadable")),
        None => Err(format!("{name} is missing")),
    }
}

/// An integer attribute, or `None` when absent, empty or unreadable.
pub(crate) fn opt_int(obj: &InMemDicomObject, tag: Tag) -> Option<i64> {
    let e = obj.get(tag)?;
    if let Value::Primitive(dicom_core::PrimitiveValue::U8(bytes)) = e.value() {
        // Raw bytes (a binary VR such as OB or UN where US/UL belongs): dicom-rs would take
        // the first byte alone (Rows = 512 as UN reads as 0). Only a 2- or 4-byte value is
        // an integer; anything else is unreadable.
        return match bytes.len() {
            2 => Some(u16::from_le_bytes([bytes[0], bytes[1]]) as i64),
            4 => Some(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as i64),
            _ => None,
        };
    }
    e.to_int::<i64>().ok()
}

/// A text attribute with padding removed, or `None` when absent or empty.
pub(crate) fn opt_str(obj: &InMemDicomObject, tag: Tag) -> Option<String> {
    obj.get(tag)
        .and_then(|e| e.to_str().ok())
        .map(|s| {
            s.trim_matches(|c: char| c == '\0' || c.is_whitespace())
                .to_string()
        })
        .filter(|s| !s.is_empty())
}

fn opt_floats(obj: &InMemDicomObject, tag: Tag) -> Vec<f64> {
    obj.get(tag)
        .and_then(|e| e.to_multi_float64().ok())
        .unwrap_or_default()
}

fn first_item(obj: &InMemDicomObject, tag: Tag) -> Option<&InMemDicomObject> {
    obj.get(tag).and_then(|e| e.items()).and_then(|i| i.first())
}

/// Rescale and windows as plain attributes of the data set (or of a functional group item).
fn plain_attrs(obj: &InMemDicomObject) -> FrameAttrs {
    let slope = obj
        .get(tags::RESCALE_SLOPE)
        .and_then(|e| e.to_float64().ok());
    let intercept = obj
        .get(tags::RESCALE_INTERCEPT)
        .and_then(|e| e.to_float64().ok());
    // Both values are needed (DCMTK ignores a lone slope or intercept).
    let rescale = match (slope, intercept) {
        (Some(slope), Some(intercept)) if slope.is_finite() && intercept.is_finite() => {
            Some(Rescale { slope, intercept })
        }
        _ => None,
    };
    let centers = opt_floats(obj, tags::WINDOW_CENTER);
    let widths = opt_floats(obj, tags::WINDOW_WIDTH);
    let explanations: Vec<String> = obj
        .get(tags::WINDOW_CENTER_WIDTH_EXPLANATION)
        .and_then(|e| e.to_multi_str().ok().map(|v| v.to_vec()))
        .unwrap_or_default();
    let windows = centers
        .iter()
        .zip(widths.iter())
        .enumerate()
        .map(|(i, (&center, &width))| FileWindow {
            center,
            width,
            explanation: explanations
                .get(i)
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty()),
        })
        .collect();
    FrameAttrs {
        rescale,
        windows,
        voi_function: opt_str(obj, tags::VOILUT_FUNCTION),
    }
}

/// Rescale and windows from one functional group item (shared or per frame).
fn group_attrs(item: &InMemDicomObject) -> FrameAttrs {
    let mut a = FrameAttrs::default();
    if let Some(pvt) = first_item(item, tags::PIXEL_VALUE_TRANSFORMATION_SEQUENCE) {
        a.rescale = plain_attrs(pvt).rescale;
    }
    if let Some(voi) = first_item(item, tags::FRAME_VOILUT_SEQUENCE) {
        let p = plain_attrs(voi);
        a.windows = p.windows;
        a.voi_function = p.voi_function;
    }
    a
}

/// The 16-bit words of a LUT data element, whatever VR it was stored with.
fn lut_words(obj: &InMemDicomObject, tag: Tag) -> Result<Vec<u16>, String> {
    let elem = obj.get(tag).ok_or("LUT Data is missing")?;
    let Value::Primitive(p) = elem.value() else {
        return Err("LUT Data is not a primitive value".into());
    };
    use dicom_core::PrimitiveValue as P;
    Ok(match p {
        P::U16(v) => v.to_vec(),
        P::I16(v) => v.iter().map(|&x| x as u16).collect(),
        P::U8(bytes) => bytes
            .chunks(2)
            .map(|c| u16::from_le_bytes([c[0], *c.get(1).unwrap_or(&0)]))
            .collect(),
        _ => {
            let bytes = p.to_bytes();
            bytes
                .chunks(2)
                .map(|c| u16::from_le_bytes([c[0], *c.get(1).unwrap_or(&0)]))
                .collect()
        }
    })
}

/// Reads one palette colour table: its LUT Data, or, when only the Segmented LUT Data is
/// there, that expanded (PS3.3 C.7.9.2; DCMTK does not read segmented palettes).
fn read_palette(
    obj: &InMemDicomObject,
    descriptor: Tag,
    data: Tag,
    segmented: Tag,
) -> Result<Lut, String> {
    if obj.get(data).is_some() || obj.get(segmented).is_none() {
        return read_lut(obj, descriptor, data);
    }
    let (entries, first_raw, bits) = read_descriptor(obj, descriptor)?;
    let n = if entries == 0 {
        65536
    } else {
        entries as usize
    };
    let words = lut_words(obj, segmented)?;
    let expanded = crate::decode::lut::expand_segmented(&words, bits == 8, n)
        .map_err(|e| format!("segmented LUT data: {e}"))?;
    Lut::decode(entries, first_raw, bits, &expanded)
}

/// A LUT Descriptor's values: (entries, first mapped value as stored, bits).
fn read_descriptor(obj: &InMemDicomObject, descriptor: Tag) -> Result<(u32, u16, u32), String> {
    let desc = obj.get(descriptor).ok_or("LUT Descriptor is missing")?;
    let Value::Primitive(p) = desc.value() else {
        return Err("LUT Descriptor is not a primitive value".into());
    };
    use dicom_core::PrimitiveValue as P;
    Ok(match p {
        P::U16(v) if v.len() == 3 => (v[0] as u32, v[1], v[2] as u32),
        P::I16(v) if v.len() == 3 => (v[0] as u16 as u32, v[1] as u16, v[2] as u16 as u32),
        _ => {
            let v = desc
                .to_multi_int::<i64>()
                .map_err(|_| "LUT Descriptor is unreadable".to_string())?;
            if v.len() != 3 {
                return Err(format!("LUT Descriptor has {} values, expected 3", v.len()));
            }
            (v[0] as u16 as u32, v[1] as u16, v[2] as u16 as u32)
        }
    })
}

/// Reads a LUT (descriptor + data) with DCMTK's decoding rules.
fn read_lut(obj: &InMemDicomObject, descriptor: Tag, data: Tag) -> Result<Lut, String> {
    let (entries, first_raw, bits) = read_descriptor(obj, descriptor)?;
    let words = lut_words(obj, data)?;
    Lut::decode(entries, first_raw, bits, &words)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn colour32_keeps_the_top_16_stored_bits_sign_removed() {
        let unsigned = Colour32 {
            shift: 0,
            mask: u32::MAX,
            sign: 0,
            down: 16,
        };
        assert_eq!(unsigned.narrow(0xABCD_1234), 0xABCD);
        // Bits Stored 24, signed: -1 (0xFFFFFF) becomes 0x7FFFFF once the sign is removed.
        let signed = Colour32 {
            shift: 0,
            mask: 0xFF_FFFF,
            sign: 0x80_0000,
            down: 8,
        };
        assert_eq!(signed.narrow(0x00FF_FFFF), 0x7FFF);
        assert_eq!(signed.narrow(0x0080_0000), 0x0000); // the most negative value
        assert_eq!(signed.narrow(0x007F_FFFF), 0xFFFF); // the most positive value
    }

    /// A 1x1 8-bit MONOCHROME2 image description, for tests to adjust.
    pub fn sample_info() -> ImageInfo {
        ImageInfo {
            transfer_syntax: "1.2.840.10008.1.2.1".into(),
            rows: 1,
            cols: 1,
            frames: 1,
            samples_per_pixel: 1,
            bits_allocated: 8,
            file_bits_allocated: 8,
            colour32: None,
            bits_stored: 8,
            high_bit: 7,
            signed: false,
            photometric: Photometric::Monochrome2,
            stored_photometric: Photometric::Monochrome2,
            planar_configuration: 0,
            subsampled_422: false,
            attrs: FrameAttrs::default(),
            per_frame: Vec::new(),
            modality_lut: None,
            voi_luts: Vec::new(),
            palette: None,
            voi_lut_explanations: Vec::new(),
            presentation_lut_shape: None,
            series_uid: None,
            instance_number: None,
            image_position: None,
            modality: None,
            sop_class: None,
            warnings: Vec::new(),
            overlays: Vec::new(),
            naming: Default::default(),
            source: Default::default(),
        }
    }
}
