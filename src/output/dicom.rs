//! `--format dcm`: each rendered frame as an 8-bit Secondary Capture Image (PS3.3 A.8.1), so
//! that rendered images can go back to a PACS. The CT and MR image IODs require 16-bit pixels
//! (Bits Allocated 16), so an 8-bit rendering of them cannot keep its IOD; Secondary Capture is
//! the IOD every archive and viewer accepts for it.
//!
//! What the file says:
//! - patient, study and series attributes carried over from the source
//!   (`decode::info::CARRIED_TAGS`), in the source's Study;
//! - a new Series (all frames rendered from one source series, with the same settings, land in
//!   one new series) and a new SOP Instance UID per frame, both derived (SHA-256, as a 2.25 UUID
//!   UID) from the source's UIDs, the frame and the settings: running again gives the same UIDs,
//!   other settings give others;
//! - Image Type `DERIVED\SECONDARY`, a Derivation Description saying what was done, and a
//!   Source Image Sequence referencing the source instance (and frame);
//! - for grayscale, the window 127.5/256, which LINEAR maps onto itself: rendering the file
//!   again (dicomflow's default `file` window, DCMTK's `+Wi 1`, or no window) gives back the
//!   same 8-bit pixels.

use dicom_core::header::Header;
use dicom_core::value::{DataSetSequence, PrimitiveValue};
use dicom_core::{DataElement, Tag, VR};
use dicom_dictionary_std::{tags, uids};
use dicom_object::meta::FileMetaTableBuilder;
use dicom_object::InMemDicomObject;
use sha2::{Digest, Sha256};

use crate::decode::info::SourceHeader;
use crate::output::error::EncodeError;

/// The Implementation Class UID dicomflow writes in file meta information.
pub const IMPLEMENTATION_CLASS_UID: &str = "2.25.98765432109876543210";
/// The Implementation Version Name dicomflow writes in file meta information.
pub const IMPLEMENTATION_VERSION_NAME: &str = "DICOMFLOW_010";

/// Storage SOP classes of single-frame images (CR, CT, MR, Secondary Capture, DX, MG, IO,
/// PET, US), whose instances are not referenced by frame.
const SINGLE_FRAME_CLASSES: [&str; 12] = [
    uids::COMPUTED_RADIOGRAPHY_IMAGE_STORAGE,
    uids::DIGITAL_X_RAY_IMAGE_STORAGE_FOR_PRESENTATION,
    uids::DIGITAL_X_RAY_IMAGE_STORAGE_FOR_PROCESSING,
    uids::DIGITAL_MAMMOGRAPHY_X_RAY_IMAGE_STORAGE_FOR_PRESENTATION,
    uids::DIGITAL_MAMMOGRAPHY_X_RAY_IMAGE_STORAGE_FOR_PROCESSING,
    uids::DIGITAL_INTRA_ORAL_X_RAY_IMAGE_STORAGE_FOR_PRESENTATION,
    uids::DIGITAL_INTRA_ORAL_X_RAY_IMAGE_STORAGE_FOR_PROCESSING,
    uids::CT_IMAGE_STORAGE,
    uids::MR_IMAGE_STORAGE,
    uids::ULTRASOUND_IMAGE_STORAGE,
    uids::SECONDARY_CAPTURE_IMAGE_STORAGE,
    uids::POSITRON_EMISSION_TOMOGRAPHY_IMAGE_STORAGE,
];

/// One rendered frame and what it was made from.
#[derive(Debug, Clone, Copy)]
pub struct Derived<'a> {
    pub source: &'a SourceHeader,
    /// The source frame (0-based) and the source's frame count.
    pub frame: u32,
    pub frames: u32,
    /// The source's Instance Number.
    pub instance_number: Option<i64>,
    /// What was done, in words (Derivation Description, at most 1024 characters).
    pub description: &'a str,
    /// The settings that shaped the pixels: part of the derived UIDs.
    pub fingerprint: &'a str,
    /// Stands for the source when it has no SOP Instance UID (e.g. its path).
    pub fallback_id: &'a str,
}

/// A UID under the 2.25 root from the SHA-256 of `kind` and `parts`: a name-based UUID
/// (version 8, RFC 9562) written as a decimal integer, as PS3.5 B.2 describes.
pub fn derived_uid(kind: &str, parts: &[&str]) -> String {
    let mut h = Sha256::new();
    h.update(b"dicomflow/");
    h.update(kind.as_bytes());
    for p in parts {
        h.update([0u8]);
        h.update(p.as_bytes());
    }
    let digest = h.finalize();
    let mut b = [0u8; 16];
    b.copy_from_slice(&digest[..16]);
    b[6] = (b[6] & 0x0f) | 0x80; // version 8
    b[8] = (b[8] & 0x3f) | 0x80; // RFC variant
    format!("2.25.{}", u128::from_be_bytes(b))
}

fn put(obj: &mut InMemDicomObject, tag: Tag, vr: VR, v: impl Into<PrimitiveValue>) {
    obj.put(DataElement::new(tag, vr, v.into()));
}

/// Keeps at most `max` characters (LO 64, ST 1024).
fn truncated(s: &str, max: usize) -> String {
    s.chars().take(max).collect()
}

/// The Secondary Capture data set of one frame (without file meta information).
pub fn dataset(
    width: u32,
    height: u32,
    channels: usize,
    pixels: &[u8],
    d: &Derived,
) -> Result<InMemDicomObject, EncodeError> {
    if width == 0 || height == 0 || width > 65535 || height > 65535 {
        return Err(EncodeError::DicomSize { width, height });
    }
    if channels != 1 && channels != 3 {
        return Err(EncodeError::Internal(format!(
            "{channels} channels for a DICOM image"
        )));
    }
    let expected = width as usize * height as usize * channels;
    if pixels.len() != expected {
        return Err(EncodeError::Internal(format!(
            "{} bytes for a {width}x{height}x{channels} image",
            pixels.len()
        )));
    }
    let src = d.source;
    let source_id = src.sop_instance_uid.as_deref().unwrap_or(d.fallback_id);
    let frame = (d.frame + 1).to_string();
    let sop_uid = derived_uid("sop", &[source_id, &frame, d.fingerprint]);
    let series_uid = derived_uid(
        "series",
        &[
            src.series_uid.as_deref().unwrap_or(source_id),
            d.fingerprint,
        ],
    );
    let mut obj = InMemDicomObject::new_empty();
    // Carried first; what follows replaces or completes them.
    for e in &src.elements {
        obj.put(e.clone());
    }
    let has = |obj: &InMemDicomObject, t: Tag| obj.get(t).is_some();
    // Type 2 attributes (and 2C ones a validator cannot decide): present, empty when the
    // source lacks them.
    for (t, vr) in [
        (tags::PATIENT_NAME, VR::PN),
        (tags::PATIENT_ID, VR::LO),
        (tags::PATIENT_BIRTH_DATE, VR::DA),
        (tags::PATIENT_SEX, VR::CS),
        (tags::STUDY_DATE, VR::DA),
        (tags::STUDY_TIME, VR::TM),
        (tags::REFERRING_PHYSICIAN_NAME, VR::PN),
        (tags::STUDY_ID, VR::SH),
        (tags::ACCESSION_NUMBER, VR::SH),
        (tags::SERIES_NUMBER, VR::IS),
        (tags::PATIENT_ORIENTATION, VR::CS),
        (tags::LATERALITY, VR::CS),
    ] {
        if !has(&obj, t) {
            obj.put(DataElement::new(t, vr, PrimitiveValue::Empty));
        }
    }
    if !has(&obj, tags::STUDY_INSTANCE_UID) {
        put(
            &mut obj,
            tags::STUDY_INSTANCE_UID,
            VR::UI,
            derived_uid("study", &[source_id]),
        );
    }
    if !has(&obj, tags::MODALITY) {
        put(&mut obj, tags::MODALITY, VR::CS, "OT");
    }
    let description = src
        .elements
        .iter()
        .find(|e| e.tag() == tags::SERIES_DESCRIPTION)
        .and_then(|e| e.to_str().ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty());
    put(
        &mut obj,
        tags::SERIES_DESCRIPTION,
        VR::LO,
        truncated(
            &match description {
                Some(s) => format!("{s} (rendered)"),
                None => "rendered by dicomflow".to_string(),
            },
            64,
        ),
    );
    // Instance Number: the source's for a single frame, the frame number for multi-frame
    // sources (each frame becomes an instance of the new series).
    let instance = if d.frames > 1 {
        Some((d.frame + 1) as i64)
    } else {
        d.instance_number
    };
    match instance {
        Some(n) => put(&mut obj, tags::INSTANCE_NUMBER, VR::IS, n.to_string()),
        None => {
            obj.put(DataElement::new(
                tags::INSTANCE_NUMBER,
                VR::IS,
                PrimitiveValue::Empty,
            ));
        }
    }
    put(
        &mut obj,
        tags::IMAGE_TYPE,
        VR::CS,
        PrimitiveValue::Strs(["DERIVED", "SECONDARY"].map(String::from).into()),
    );
    put(
        &mut obj,
        tags::SOP_CLASS_UID,
        VR::UI,
        uids::SECONDARY_CAPTURE_IMAGE_STORAGE,
    );
    put(&mut obj, tags::SOP_INSTANCE_UID, VR::UI, sop_uid.as_str());
    put(&mut obj, tags::SERIES_INSTANCE_UID, VR::UI, series_uid);
    // SC Equipment: a workstation rendering.
    put(&mut obj, tags::CONVERSION_TYPE, VR::CS, "WSD");
    put(
        &mut obj,
        tags::SECONDARY_CAPTURE_DEVICE_MANUFACTURER,
        VR::LO,
        "dicomflow",
    );
    put(
        &mut obj,
        tags::SECONDARY_CAPTURE_DEVICE_SOFTWARE_VERSIONS,
        VR::LO,
        env!("CARGO_PKG_VERSION"),
    );
    put(
        &mut obj,
        tags::DERIVATION_DESCRIPTION,
        VR::ST,
        truncated(d.description, 1024),
    );
    if let (Some(class), Some(instance)) = (&src.sop_class_uid, &src.sop_instance_uid) {
        let mut item = InMemDicomObject::new_empty();
        put(
            &mut item,
            tags::REFERENCED_SOP_CLASS_UID,
            VR::UI,
            class.as_str(),
        );
        put(
            &mut item,
            tags::REFERENCED_SOP_INSTANCE_UID,
            VR::UI,
            instance.as_str(),
        );
        // A frame number only for SOP classes that have frames (dciodvfy rejects one on a
        // single-frame class, even when the file carries Number of Frames).
        if d.frames > 1 && !SINGLE_FRAME_CLASSES.contains(&class.as_str()) {
            put(&mut item, tags::REFERENCED_FRAME_NUMBER, VR::IS, frame);
        }
        let mut purpose = InMemDicomObject::new_empty();
        put(&mut purpose, tags::CODE_VALUE, VR::SH, "121322");
        put(&mut purpose, tags::CODING_SCHEME_DESIGNATOR, VR::SH, "DCM");
        put(
            &mut purpose,
            tags::CODE_MEANING,
            VR::LO,
            "Source image for image processing operation",
        );
        item.put(DataElement::new(
            tags::PURPOSE_OF_REFERENCE_CODE_SEQUENCE,
            VR::SQ,
            DataSetSequence::from(vec![purpose]),
        ));
        obj.put(DataElement::new(
            tags::SOURCE_IMAGE_SEQUENCE,
            VR::SQ,
            DataSetSequence::from(vec![item]),
        ));
    }
    // Image Pixel: 8-bit unsigned, interleaved RGB or MONOCHROME2.
    put(&mut obj, tags::SAMPLES_PER_PIXEL, VR::US, channels as u16);
    put(
        &mut obj,
        tags::PHOTOMETRIC_INTERPRETATION,
        VR::CS,
        if channels == 3 { "RGB" } else { "MONOCHROME2" },
    );
    if channels == 3 {
        put(&mut obj, tags::PLANAR_CONFIGURATION, VR::US, 0u16);
    }
    put(&mut obj, tags::ROWS, VR::US, height as u16);
    put(&mut obj, tags::COLUMNS, VR::US, width as u16);
    put(&mut obj, tags::BITS_ALLOCATED, VR::US, 8u16);
    put(&mut obj, tags::BITS_STORED, VR::US, 8u16);
    put(&mut obj, tags::HIGH_BIT, VR::US, 7u16);
    put(&mut obj, tags::PIXEL_REPRESENTATION, VR::US, 0u16);
    if channels == 1 {
        // LINEAR with centre 127.5 and width 256 maps 0..255 onto itself (DCMTK's arithmetic:
        // trunc(x + 0.5 - 0.5)); a viewer shows the rendering as rendered.
        put(&mut obj, tags::WINDOW_CENTER, VR::DS, "127.5");
        put(&mut obj, tags::WINDOW_WIDTH, VR::DS, "256");
        put(
            &mut obj,
            tags::WINDOW_CENTER_WIDTH_EXPLANATION,
            VR::LO,
            "RENDERED 8-BIT",
        );
    }
    let mut data = pixels.to_vec();
    if data.len() % 2 == 1 {
        data.push(0);
    }
    put(&mut obj, tags::PIXEL_DATA, VR::OB, data);
    Ok(obj)
}

/// Encodes one frame as a DICOM file (Explicit VR Little Endian) into `out`.
pub fn encode(
    out: &mut Vec<u8>,
    width: u32,
    height: u32,
    channels: usize,
    pixels: &[u8],
    d: &Derived,
) -> Result<(), EncodeError> {
    let obj = dataset(width, height, channels, pixels, d)?;
    let sop_uid = obj
        .get(tags::SOP_INSTANCE_UID)
        .and_then(|e| e.to_str().ok())
        .map(|s| s.to_string())
        .unwrap_or_default();
    let meta = FileMetaTableBuilder::new()
        .transfer_syntax(uids::EXPLICIT_VR_LITTLE_ENDIAN)
        .media_storage_sop_class_uid(uids::SECONDARY_CAPTURE_IMAGE_STORAGE)
        .media_storage_sop_instance_uid(sop_uid)
        .implementation_class_uid(IMPLEMENTATION_CLASS_UID)
        .implementation_version_name(IMPLEMENTATION_VERSION_NAME)
        .build()
        .map_err(|e| EncodeError::DicomMeta(e.to_string()))?;
    out.clear();
    obj.with_exact_meta(meta)
        .write_all(&mut *out)
        .map_err(|e| EncodeError::Dicom(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source() -> SourceHeader {
        let mut obj = InMemDicomObject::new_empty();
        put(&mut obj, tags::PATIENT_NAME, VR::PN, "Doe^Jane");
        put(&mut obj, tags::PATIENT_ID, VR::LO, "P1");
        put(&mut obj, tags::STUDY_INSTANCE_UID, VR::UI, "1.2.3");
        put(&mut obj, tags::SERIES_INSTANCE_UID, VR::UI, "1.2.3.4");
        put(&mut obj, tags::SOP_INSTANCE_UID, VR::UI, "1.2.3.4.5");
        put(
            &mut obj,
            tags::SOP_CLASS_UID,
            VR::UI,
            uids::ENHANCED_CT_IMAGE_STORAGE,
        );
        put(&mut obj, tags::MODALITY, VR::CS, "CT");
        put(&mut obj, tags::SERIES_DESCRIPTION, VR::LO, "Head");
        SourceHeader::of(&obj)
    }

    fn derived<'a>(src: &'a SourceHeader, frame: u32, fingerprint: &'a str) -> Derived<'a> {
        Derived {
            source: src,
            frame,
            frames: 3,
            instance_number: Some(9),
            description: "window 40/400",
            fingerprint,
            fallback_id: "x.dcm",
        }
    }

    #[test]
    fn uids_are_valid_deterministic_and_keyed_by_settings() {
        let a = derived_uid("sop", &["1.2", "1", "w=40,400"]);
        assert_eq!(a, derived_uid("sop", &["1.2", "1", "w=40,400"]));
        assert_ne!(a, derived_uid("sop", &["1.2", "1", "w=40,401"]));
        assert_ne!(a, derived_uid("sop", &["1.2", "2", "w=40,400"]));
        // Parts are separated: ("1.21", "") differs from ("1.2", "1").
        assert_ne!(
            derived_uid("sop", &["1.21", ""]),
            derived_uid("sop", &["1.2", "1"])
        );
        assert!(a.starts_with("2.25.") && a.len() <= 64, "{a}");
        assert!(a[5..].chars().all(|c| c.is_ascii_digit()) && !a[5..].starts_with('0'));
    }

    #[test]
    fn carries_the_source_and_describes_the_derivation() {
        let src = source();
        let px = vec![7u8; 3 * 2];
        let obj = dataset(3, 2, 1, &px, &derived(&src, 1, "f")).unwrap();
        let s = |t: Tag| obj.get(t).unwrap().to_str().unwrap().trim().to_string();
        assert_eq!(s(tags::PATIENT_NAME), "Doe^Jane");
        assert_eq!(s(tags::STUDY_INSTANCE_UID), "1.2.3");
        assert_eq!(s(tags::MODALITY), "CT");
        assert_eq!(s(tags::SERIES_DESCRIPTION), "Head (rendered)");
        assert_eq!(
            s(tags::SOP_CLASS_UID),
            uids::SECONDARY_CAPTURE_IMAGE_STORAGE
        );
        assert_ne!(s(tags::SOP_INSTANCE_UID), "1.2.3.4.5");
        assert_ne!(s(tags::SERIES_INSTANCE_UID), "1.2.3.4");
        assert_eq!(s(tags::INSTANCE_NUMBER), "2"); // frame 2 of a 3-frame source
        assert_eq!(s(tags::DERIVATION_DESCRIPTION), "window 40/400");
        assert_eq!(s(tags::PATIENT_BIRTH_DATE), ""); // type 2, absent in the source
        let item = &obj
            .get(tags::SOURCE_IMAGE_SEQUENCE)
            .unwrap()
            .items()
            .unwrap()[0];
        let r = |t: Tag| item.get(t).unwrap().to_str().unwrap().trim().to_string();
        assert_eq!(r(tags::REFERENCED_SOP_INSTANCE_UID), "1.2.3.4.5");
        assert_eq!(r(tags::REFERENCED_FRAME_NUMBER), "2");
        // Frames of one series share the new series; other settings make another.
        let other = dataset(3, 2, 1, &px, &derived(&src, 0, "f")).unwrap();
        let g = |o: &InMemDicomObject, t| o.get(t).unwrap().to_str().unwrap().to_string();
        assert_eq!(
            g(&obj, tags::SERIES_INSTANCE_UID),
            g(&other, tags::SERIES_INSTANCE_UID)
        );
        assert_ne!(
            g(&obj, tags::SOP_INSTANCE_UID),
            g(&other, tags::SOP_INSTANCE_UID)
        );
        let other = dataset(3, 2, 1, &px, &derived(&src, 1, "g")).unwrap();
        assert_ne!(
            g(&obj, tags::SERIES_INSTANCE_UID),
            g(&other, tags::SERIES_INSTANCE_UID)
        );
    }

    #[test]
    fn frames_of_single_frame_classes_are_not_referenced_by_number() {
        let mut obj = InMemDicomObject::new_empty();
        put(&mut obj, tags::SOP_INSTANCE_UID, VR::UI, "1.2.3.4.5");
        put(
            &mut obj,
            tags::SOP_CLASS_UID,
            VR::UI,
            uids::CT_IMAGE_STORAGE,
        );
        let src = SourceHeader::of(&obj);
        let ds = dataset(1, 1, 1, &[0], &derived(&src, 1, "f")).unwrap();
        let item = &ds
            .get(tags::SOURCE_IMAGE_SEQUENCE)
            .unwrap()
            .items()
            .unwrap()[0];
        assert!(item.get(tags::REFERENCED_SOP_INSTANCE_UID).is_some());
        assert!(item.get(tags::REFERENCED_FRAME_NUMBER).is_none());
    }

    #[test]
    fn encodes_a_readable_file_with_the_pixels() {
        let src = source();
        let px: Vec<u8> = (0..5 * 3 * 3).map(|i| i as u8).collect();
        let mut bytes = Vec::new();
        encode(&mut bytes, 5, 3, 3, &px, &derived(&src, 0, "f")).unwrap();
        assert_eq!(&bytes[128..132], b"DICM");
        let obj = dicom_object::from_reader(&bytes[128..]).unwrap();
        let data = obj.element(tags::PIXEL_DATA).unwrap().to_bytes().unwrap();
        assert_eq!(&data[..px.len()], &px[..]);
        assert_eq!(
            obj.element(tags::PHOTOMETRIC_INTERPRETATION)
                .unwrap()
                .to_str()
                .unwrap()
                .trim(),
            "RGB"
        );
        // Too large for US Rows/Columns: a clear error.
        let e = dataset(70000, 1, 1, &vec![0; 70000], &derived(&src, 0, "f")).unwrap_err();
        assert!(
            matches!(
                e,
                EncodeError::DicomSize {
                    width: 70000,
                    height: 1
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("65535"), "{e}");
    }
}
