//! DICOM file → image description + stored values written straight into a slot.
//!
//! Uncompressed (native) pixel data is read with one positioned read from the file into the
//! slot, without materialising the data set's pixel element first (the double copy that
//! opening the whole object and then decoding would cost). Deflated and encapsulated data go
//! through dicom-rs's codecs (one decode into a reusable buffer, one copy into the slot).

pub mod fragments;
pub mod info;
mod native;
pub mod probe;

use std::fs::File;
use std::path::{Path, PathBuf};

/// Explicit VR Big Endian (retired, still found in archives).
const EXPLICIT_VR_BIG_ENDIAN: &str = "1.2.840.10008.1.2.2";

use dicom_dictionary_std::{tags, uids};
use dicom_encoding::transfer_syntax::{Codec, TransferSyntaxIndex};
use dicom_object::{DefaultDicomObject, DicomCollectorOptions, InMemDicomObject, OpenFileOptions};
use dicom_transfer_syntax_registry::TransferSyntaxRegistry;

pub use info::ImageInfo;
pub use probe::{probe, Probe};

/// Why a file yields no image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// Not an image at all (not counted as a failure): DICOMDIR, no Pixel Data, ...
    Skip(String),
    /// An image that cannot be decoded.
    Fail(String),
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::Skip(s) | DecodeError::Fail(s) => f.write_str(s),
        }
    }
}

fn fail(msg: impl Into<String>) -> DecodeError {
    DecodeError::Fail(msg.into())
}

/// Transfer syntaxes whose pixel data is stored natively.
fn native_byte_order(ts: &str) -> Option<bool /* big endian */> {
    match ts {
        uids::IMPLICIT_VR_LITTLE_ENDIAN | uids::EXPLICIT_VR_LITTLE_ENDIAN => Some(false),
        EXPLICIT_VR_BIG_ENDIAN => Some(true),
        _ => None,
    }
}

/// Where a file's pixel data will come from.
enum PixelSource {
    /// Native pixel data at a known file offset, read straight into slots.
    Native {
        file: File,
        offset: u64,
        big_endian: bool,
    },
    /// A fully parsed object: deflated data sets, encapsulated (compressed) pixel data, and
    /// native data whose position could not be established cheaply.
    Object(Box<DefaultDicomObject>),
}

/// An opened image file: its description and a handle to its pixels.
pub struct ImageFile {
    pub path: PathBuf,
    pub info: ImageInfo,
    source: PixelSource,
    /// True when the file has no file meta information (a bare data set).
    pub bare_dataset: bool,
}

/// Limits applied before any large allocation.
#[derive(Debug, Clone, Copy)]
pub struct DecodeLimits {
    /// Largest frame accepted (bytes of stored values).
    pub max_frame_bytes: u64,
}

impl ImageFile {
    /// Opens a file found by [`probe`] to be DICOM, reading its header (not its pixels).
    pub fn open(path: &Path, kind: Probe, limits: DecodeLimits) -> Result<ImageFile, DecodeError> {
        let (header, ts, bare) = match kind {
            Probe::FileMeta => {
                let obj = OpenFileOptions::new()
                    .read_until(tags::PIXEL_DATA)
                    .open_file(path)
                    .map_err(|e| fail(format!("cannot parse DICOM header: {}", error_chain(&e))))?;
                let sop = obj
                    .meta()
                    .media_storage_sop_class_uid()
                    .trim_end_matches('\0');
                if sop == uids::MEDIA_STORAGE_DIRECTORY_STORAGE {
                    return Err(DecodeError::Skip(
                        "DICOMDIR (media storage directory), not an image".into(),
                    ));
                }
                let ts = obj
                    .meta()
                    .transfer_syntax()
                    .trim_end_matches('\0')
                    .to_string();
                (HeaderObject::File(Box::new(obj)), ts, false)
            }
            Probe::BareDataset { transfer_syntax } => {
                let mut collector = DicomCollectorOptions::new()
                    .read_preamble(dicom_object::file::ReadPreamble::Never)
                    .expected_ts(transfer_syntax)
                    .open_file(path)
                    .map_err(|e| fail(format!("cannot open: {}", error_chain(&e))))?;
                let mut obj = InMemDicomObject::new_empty();
                collector
                    .read_dataset_up_to_pixeldata(&mut obj)
                    .map_err(|e| {
                        fail(format!("cannot parse DICOM data set: {}", error_chain(&e)))
                    })?;
                (HeaderObject::Bare(obj), transfer_syntax.to_string(), true)
            }
            Probe::NotDicom(reason) => return Err(DecodeError::Skip(reason)),
        };
        let dataset = header.dataset();
        if dataset.get(tags::DIRECTORY_RECORD_SEQUENCE).is_some() {
            return Err(DecodeError::Skip(
                "DICOMDIR (media storage directory), not an image".into(),
            ));
        }
        let has_pixel_tags =
            dataset.get(tags::ROWS).is_some() || dataset.get(tags::COLUMNS).is_some();
        if !has_pixel_tags {
            let sop = info::opt_str(dataset, tags::SOP_CLASS_UID).unwrap_or_default();
            return Err(DecodeError::Skip(format!(
                "no image (no Rows/Columns/Pixel Data; SOP class {})",
                if sop.is_empty() { "unknown" } else { &sop }
            )));
        }
        let info = ImageInfo::from_object(dataset, &ts).map_err(fail)?;
        let frame_bytes = info.frame_bytes();
        if frame_bytes > limits.max_frame_bytes {
            return Err(fail(format!(
                "frame of {}x{}x{} samples at {} bits ({} MiB) exceeds the limit of {} MiB \
                 (pipeline.max_frame_mib)",
                info.rows,
                info.cols,
                info.samples_per_pixel,
                info.bits_allocated,
                frame_bytes >> 20,
                limits.max_frame_bytes >> 20
            )));
        }

        let source = match native_byte_order(&info.transfer_syntax) {
            Some(big_endian) if !bare => {
                match native::locate_pixel_data(path, &info, &info.transfer_syntax) {
                    Ok(Some((file, offset))) => PixelSource::Native {
                        file,
                        offset,
                        big_endian,
                    },
                    Ok(None) => PixelSource::Object(Box::new(open_full(path)?)),
                    Err(e) => return Err(fail(format!("cannot read pixel data: {e}"))),
                }
            }
            _ => {
                if !bare {
                    check_decodable(&info.transfer_syntax)?;
                    PixelSource::Object(Box::new(open_full(path)?))
                } else {
                    // A bare data set: parse it whole through the collector path.
                    PixelSource::Object(Box::new(open_bare_full(path, &info.transfer_syntax)?))
                }
            }
        };
        Ok(ImageFile {
            path: path.to_path_buf(),
            info,
            source,
            bare_dataset: bare,
        })
    }

    /// Decodes frame `frame` (0-based) into `dst` (exactly `info.frame_bytes()` bytes) as
    /// native-endian stored values, interleaved samples, unmasked. `scratch` is a reusable
    /// buffer for codecs.
    pub fn read_frame(
        &mut self,
        frame: u32,
        dst: &mut [u8],
        scratch: &mut Vec<u8>,
    ) -> Result<(), String> {
        let frame_bytes = self.info.frame_bytes() as usize;
        if dst.len() != frame_bytes {
            return Err(format!(
                "internal: slot of {} bytes for a frame of {frame_bytes}",
                dst.len()
            ));
        }
        let bits = self.info.bits_allocated;
        match &mut self.source {
            PixelSource::Native {
                file,
                offset,
                big_endian,
            } => {
                let at = *offset + frame as u64 * frame_bytes as u64;
                native::read_exact_at(file, dst, at)
                    .map_err(|e| format!("reading {frame_bytes} bytes of pixel data: {e}"))?;
                native::to_native_order(dst, bits, *big_endian);
            }
            PixelSource::Object(obj) => {
                let ts_uid = obj
                    .meta()
                    .transfer_syntax()
                    .trim_end_matches('\0')
                    .to_string();
                let ts = TransferSyntaxRegistry
                    .get(&ts_uid)
                    .ok_or_else(|| format!("unknown transfer syntax {ts_uid}"))?;
                match ts.codec() {
                    Codec::EncapsulatedPixelData(Some(decoder), _) => {
                        scratch.clear();
                        let obj_ref: &DefaultDicomObject = obj;
                        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            decoder.decode_frame(obj_ref, frame, scratch)
                        }));
                        match result {
                            Ok(Ok(())) => {}
                            Ok(Err(e)) => {
                                return Err(format!("{} decoder: {}", ts.name(), error_chain(&e)))
                            }
                            Err(_) => {
                                return Err(format!("{} decoder crashed on this data", ts.name()))
                            }
                        }
                        if scratch.len() < frame_bytes {
                            return Err(format!(
                                "{} decoder produced {} bytes, expected {frame_bytes}",
                                ts.name(),
                                scratch.len()
                            ));
                        }
                        dst.copy_from_slice(&scratch[..frame_bytes]);
                    }
                    Codec::EncapsulatedPixelData(None, _) => {
                        return Err(format!(
                            "transfer syntax {} ({ts_uid}) cannot be decoded",
                            ts.name()
                        ))
                    }
                    _ => {
                        // Native data inside a parsed object (deflate, or unusual layout).
                        let elem = obj.get(tags::PIXEL_DATA).ok_or("Pixel Data is missing")?;
                        let bytes = elem
                            .to_bytes()
                            .map_err(|e| format!("Pixel Data is unreadable: {e}"))?;
                        let start = frame as usize * frame_bytes;
                        let src = bytes.get(start..start + frame_bytes).ok_or_else(|| {
                            format!(
                                "Pixel Data holds {} bytes, frame {} needs bytes {start}..{}",
                                bytes.len(),
                                frame + 1,
                                start + frame_bytes
                            )
                        })?;
                        dst.copy_from_slice(src);
                        // dicom-rs keeps primitive values in native order after parsing.
                    }
                }
            }
        }
        Ok(())
    }

    /// True when pixels are read with one positioned read per frame (no intermediate copy).
    pub fn is_direct(&self) -> bool {
        matches!(self.source, PixelSource::Native { .. })
    }
}

enum HeaderObject {
    File(Box<DefaultDicomObject>),
    Bare(InMemDicomObject),
}

impl HeaderObject {
    fn dataset(&self) -> &InMemDicomObject {
        match self {
            HeaderObject::File(f) => f,
            HeaderObject::Bare(o) => o,
        }
    }
}

fn check_decodable(ts_uid: &str) -> Result<(), DecodeError> {
    let Some(ts) = TransferSyntaxRegistry.get(ts_uid) else {
        return Err(fail(format!("unsupported transfer syntax {ts_uid}")));
    };
    match ts.codec() {
        Codec::EncapsulatedPixelData(None, _) => Err(fail(format!(
            "unsupported transfer syntax {} ({ts_uid}): no decoder in this build",
            ts.name()
        ))),
        _ if ts.is_unsupported() => Err(fail(format!(
            "unsupported transfer syntax {} ({ts_uid})",
            ts.name()
        ))),
        _ => Ok(()),
    }
}

fn open_full(path: &Path) -> Result<DefaultDicomObject, DecodeError> {
    OpenFileOptions::new()
        .open_file(path)
        .map_err(|e| fail(format!("cannot read pixel data: {}", error_chain(&e))))
}

fn open_bare_full(path: &Path, ts: &str) -> Result<DefaultDicomObject, DecodeError> {
    let mut collector = DicomCollectorOptions::new()
        .read_preamble(dicom_object::file::ReadPreamble::Never)
        .expected_ts(ts.to_string())
        .open_file(path)
        .map_err(|e| fail(format!("cannot open: {}", error_chain(&e))))?;
    let mut obj = InMemDicomObject::new_empty();
    collector
        .read_dataset_to_end(&mut obj)
        .map_err(|e| fail(format!("cannot read data set: {}", error_chain(&e))))?;
    let meta = dicom_object::meta::FileMetaTableBuilder::new()
        .transfer_syntax(ts)
        .media_storage_sop_class_uid(
            info::opt_str(&obj, tags::SOP_CLASS_UID)
                .unwrap_or_else(|| "1.2.840.10008.5.1.4.1.1.7".into()),
        )
        .media_storage_sop_instance_uid(
            info::opt_str(&obj, tags::SOP_INSTANCE_UID).unwrap_or_else(|| "1.2.3".into()),
        )
        .build()
        .map_err(|e| fail(format!("cannot describe bare data set: {e}")))?;
    Ok(obj.with_exact_meta(meta))
}

/// An error with its sources joined, so messages say what really failed.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(inner) = cur {
        let msg = inner.to_string();
        if !s.contains(&msg) {
            s.push_str(": ");
            s.push_str(&msg);
        }
        cur = inner.source();
    }
    s
}
