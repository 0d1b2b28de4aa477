//! DICOM file → image description + stored values written straight into a slot.
//!
//! Uncompressed (native) pixel data is read with one positioned read from the file into the
//! slot, without materialising the data set's pixel element first (the double copy that
//! opening the whole object and then decoding would cost). Deflated and encapsulated data go
//! through dicom-rs's codecs (one decode into a reusable buffer, one copy into the slot).

pub mod compressed;
pub mod fragments;
mod guard;
pub mod identity;
pub mod info;
pub mod jpeg;
pub mod jpegls;
pub mod lut;
mod native;
pub mod options;
pub mod overlay;
mod patch;
pub mod probe;
mod rle;
mod un;

use std::path::{Path, PathBuf};

use dicom_dictionary_std::{tags, uids};

/// Explicit VR Big Endian: retired (hence deprecated in the dictionary crate), still found in
/// archives. The one allowance of the deprecation, shared by the decoders.
#[allow(deprecated)]
pub(crate) const EXPLICIT_VR_BIG_ENDIAN: &str = uids::EXPLICIT_VR_BIG_ENDIAN;
use dicom_encoding::transfer_syntax::{Codec, TransferSyntaxIndex};
use dicom_object::{DefaultDicomObject, DicomCollectorOptions, InMemDicomObject, OpenFileOptions};
use dicom_transfer_syntax_registry::TransferSyntaxRegistry;

pub use info::{ImageInfo, NamingValues};
pub use options::{Damaged, DecodeOptions};
pub use probe::{probe, Probe};

/// Why a file yields no image: the two outcomes the pipeline tells apart (a skip is listed, a
/// failure fails the file), each with the reason shown to the user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Not an image at all (not counted as a failure): DICOMDIR, no Pixel Data, ...
    #[error("{0}")]
    Skip(String),
    /// An image that cannot be decoded.
    #[error("{0}")]
    Fail(String),
}

fn fail(msg: impl Into<String>) -> DecodeError {
    DecodeError::Fail(msg.into())
}

/// Whether `ts` stores pixel data natively (uncompressed, not deflated).
pub(crate) fn is_native(ts: &str) -> bool {
    native_byte_order(ts).is_some()
}

/// Transfer syntaxes whose pixel data is stored natively.
fn native_byte_order(ts: &str) -> Option<bool /* big endian */> {
    match ts {
        uids::IMPLICIT_VR_LITTLE_ENDIAN | uids::EXPLICIT_VR_LITTLE_ENDIAN => Some(false),
        EXPLICIT_VR_BIG_ENDIAN => Some(true),
        _ => None,
    }
}

fn is_deflate(ts: &str) -> bool {
    ts == uids::DEFLATED_EXPLICIT_VR_LITTLE_ENDIAN
}

/// Checks a file that has just arrived (received over the network, or found complete in a
/// watched folder) without parsing it: its first bytes say DICOM and its structure is sound
/// (every length fits in the file, nesting is bounded), the checks [`ImageFile::open`] runs
/// first, with the same limits. A file cut short fails here.
pub fn check_received(path: &Path, limits: DecodeLimits) -> Result<(), String> {
    match probe(path) {
        Ok(Probe::NotDicom(reason)) => Err(reason),
        Ok(kind) => guard::check_structure(path, &kind, limits.max_frame_bytes).map(|_| ()),
        Err(e) => Err(format!("cannot read: {e}")),
    }
}

/// Checks that a file in a watched folder is complete, not still being written: the checks of
/// [`check_received`], then (for a file with file meta) a full parse to its end and a Pixel
/// Data element. A file cut anywhere fails: inside an element (a length past the end), at an
/// element boundary before its pixels (no Pixel Data), or inside encapsulated fragments (the
/// parse ends early).
pub fn check_complete(path: &Path, limits: DecodeLimits) -> Result<(), String> {
    check_received(path, limits)?;
    if matches!(probe(path), Ok(Probe::FileMeta)) {
        let obj = OpenFileOptions::new()
            .open_file(path)
            .map_err(|e| format!("cannot parse to the end: {}", error_chain(&e)))?;
        if obj.get(tags::PIXEL_DATA).is_none() {
            return Err("no Pixel Data (yet)".into());
        }
    }
    Ok(())
}

/// Where a file's pixel data will come from.
enum PixelSource {
    /// Native pixel data at a known file offset, read straight into slots.
    Native(native::Located),
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
    damaged: Damaged,
    /// What was wrong with the last frame read but rendered anyway (`Damaged::Render`).
    frame_warning: Option<String>,
}

/// Limits applied before any large allocation, and the policy for damaged frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeLimits {
    /// Largest frame accepted (bytes of stored values); also the most Pixel Data a deflated
    /// data set may inflate to (it is inflated whole).
    pub max_frame_bytes: u64,
    /// What to do with a frame whose compressed data ends early.
    pub damaged: Damaged,
}

/// The largest frame accepted unless configured otherwise (`pipeline.max_frame_mib`): 1 GiB.
pub const DEFAULT_MAX_FRAME_BYTES: u64 = 1024 << 20;

impl Default for DecodeLimits {
    fn default() -> Self {
        DecodeLimits {
            max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
            damaged: Damaged::default(),
        }
    }
}

/// The header of an image file (up to its Pixel Data), its transfer syntax, and whether it
/// is a bare data set.
struct Header {
    object: HeaderObject,
    ts: String,
    bare: bool,
    /// The guard's byte patches, for reading the whole file later.
    patches: Vec<patch::Patch>,
    /// What was tolerated in the header.
    warnings: Vec<String>,
    sop: Option<String>,
    /// The file, open, and its size: the native pixel read goes on with it.
    file: std::fs::File,
    len: u64,
}

/// Reads the header of a file found by [`probe`] to be DICOM, after the structure checks;
/// `Skip` when it is no image (a DICOMDIR, no Rows/Columns and no sign of pixels), `Fail`
/// for a damaged image (Pixel Data or an image SOP class without Rows and Columns).
fn read_header(path: &Path, kind: Probe, limits: DecodeLimits) -> Result<Header, DecodeError> {
    // Lengths past EOF and absurd nesting make dicom-rs allocate gigabytes or overflow
    // the stack (an abort, not a catchable panic): refuse them before it parses.
    // One open for the checks, the header and the pixels (see `guard::check_opened`).
    let (file, len) = probe::open_input_len(path).map_err(|e| fail(format!("cannot open: {e}")))?;
    let walk = guard::check_opened(&file, len, &kind, limits.max_frame_bytes).map_err(fail)?;
    let (mut header, ts, bare) = match kind {
        Probe::FileMeta => {
            // The probe saw `DICM` at offset 128 or 0, so dicom-rs's preamble detection
            // decides as it does in `open_file`.
            let options = OpenFileOptions::new().read_until(tags::PIXEL_DATA);
            let from_start = probe::ReadAt::new(&file, len, 0);
            let obj = if walk.patches.is_empty() {
                options.from_reader(from_start)
            } else {
                options.from_reader(
                    patch::PatchedReader::new(from_start, walk.patches.clone())
                        .map_err(|e| fail(format!("cannot open: {e}")))?,
                )
            }
            .map_err(|e| fail(format!("cannot parse DICOM header: {}", error_chain(&e))))?;
            // The meta table's getters already trim UIDs (trailing NULs and whitespace).
            let sop = obj.meta().media_storage_sop_class_uid();
            if sop == uids::MEDIA_STORAGE_DIRECTORY_STORAGE {
                return Err(DecodeError::Skip(
                    "DICOMDIR (media storage directory), not an image".into(),
                ));
            }
            let ts = obj.meta().transfer_syntax().to_string();
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
                .map_err(|e| fail(format!("cannot parse DICOM data set: {}", error_chain(&e))))?;
            (HeaderObject::Bare(obj), transfer_syntax.to_string(), true)
        }
        Probe::NotDicom(reason) => return Err(DecodeError::Skip(reason)),
    };
    let mut warnings = walk.warnings.clone();
    if walk.saw_un {
        warnings.extend(un::normalize(header.dataset_mut()));
    }
    let dataset = header.dataset();
    if dataset.get(tags::DIRECTORY_RECORD_SEQUENCE).is_some() {
        return Err(DecodeError::Skip(
            "DICOMDIR (media storage directory), not an image".into(),
        ));
    }
    let sop = info::opt_str(dataset, tags::SOP_CLASS_UID);
    let has_pixel_tags = dataset.get(tags::ROWS).is_some() || dataset.get(tags::COLUMNS).is_some();
    if !has_pixel_tags {
        // Pixel Data (or an image SOP class) makes it an image that cannot be rendered, a
        // failure; anything else is not an image at all.
        return Err(
            match (walk.pixel_data, sop.as_deref().and_then(image_class_name)) {
                (true, _) => fail("Pixel Data without Rows and Columns"),
                (false, Some(name)) => fail(format!(
                    "{name} without Rows, Columns or Pixel Data (truncated or damaged?)"
                )),
                (false, None) => DecodeError::Skip(format!(
                    "no image (no Rows/Columns/Pixel Data; SOP class {})",
                    sop.as_deref().unwrap_or("unknown")
                )),
            },
        );
    }
    if dataset.get(tags::FLOAT_PIXEL_DATA).is_some()
        || dataset.get(tags::DOUBLE_FLOAT_PIXEL_DATA).is_some()
    {
        return Err(fail(
            "Float Pixel Data (a parametric map): no 8-bit rendering is defined for it",
        ));
    }
    Ok(Header {
        object: header,
        ts,
        bare,
        patches: walk.patches,
        warnings,
        sop,
        file,
        len,
    })
}

/// The values an output naming pattern may use (`output::naming::PATTERN_KEYS`, less those
/// that come from the path), read from the header alone; `Skip` when the file is no image.
pub fn naming_values(
    path: &Path,
    kind: Probe,
    limits: DecodeLimits,
) -> Result<std::collections::BTreeMap<String, String>, DecodeError> {
    let header = read_header(path, kind, limits)?;
    Ok(info::naming_values(header.object.dataset()))
}

impl ImageFile {
    /// Opens a file found by [`probe`] to be DICOM, reading its header (not its pixels).
    pub fn open(path: &Path, kind: Probe, limits: DecodeLimits) -> Result<ImageFile, DecodeError> {
        Self::open_with(path, kind, limits, NamingValues::Read)
    }

    /// [`open`](Self::open), with the naming values read or not.
    pub fn open_with(
        path: &Path,
        kind: Probe,
        limits: DecodeLimits,
        naming: NamingValues,
    ) -> Result<ImageFile, DecodeError> {
        let Header {
            object: header,
            ts,
            bare,
            patches,
            mut warnings,
            sop,
            file,
            len,
        } = read_header(path, kind, limits)?;
        let dataset = header.dataset();
        let mut info = ImageInfo::from_object_with(dataset, &ts, naming).map_err(fail)?;
        warnings.append(&mut info.warnings);
        info.warnings = warnings;
        if native_byte_order(&info.transfer_syntax).is_none() && !is_deflate(&info.transfer_syntax)
        {
            codec_output_layout(&mut info);
        }
        if info.file_bits_allocated != info.bits_allocated
            && info.colour32.is_none()
            && native_byte_order(&info.transfer_syntax).is_none()
            && !is_deflate(&info.transfer_syntax)
        {
            return Err(fail(format!(
                "BitsAllocated = {} (packed samples) in the compressed transfer syntax {}",
                info.file_bits_allocated, info.transfer_syntax
            )));
        }
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
            Some(_) if !bare => {
                match native::locate_pixel_data(file, len, &info, &info.transfer_syntax) {
                    Ok(Some(located)) => PixelSource::Native(located),
                    Ok(None) => PixelSource::Object(Box::new(open_full(path, &patches)?)),
                    Err(e) => return Err(fail(format!("cannot read pixel data: {e}"))),
                }
            }
            _ => {
                if !bare {
                    if OwnCodec::of(&info.transfer_syntax).is_none() {
                        check_decodable(&info.transfer_syntax)?;
                    }
                    PixelSource::Object(Box::new(open_full(path, &patches)?))
                } else {
                    // A bare data set: parse it whole through the collector path.
                    PixelSource::Object(Box::new(open_bare_full(path, &info.transfer_syntax)?))
                }
            }
        };
        if let PixelSource::Object(obj) = &source {
            guard::check_pixel_data(obj, &info).map_err(|e| match e {
                // Rows and Columns say image; only a known non-image object is let off.
                DecodeError::Skip(_) if sop.as_deref().is_none_or(|s| !is_non_image(s)) => {
                    fail("Rows and Columns but no Pixel Data (truncated or damaged?)")
                }
                other => other,
            })?;
        }
        Ok(ImageFile {
            path: path.to_path_buf(),
            info,
            source,
            bare_dataset: bare,
            damaged: limits.damaged,
            frame_warning: None,
        })
    }

    /// The open file and the offset of frame `frame`'s stored values, when they can be read
    /// from the file as they are ([`native::Located::plain_frame`]): the loaders' upload to the
    /// GPU reads them from there itself.
    pub fn plain_frame(&self, frame: u32) -> Option<(&std::fs::File, u64)> {
        match &self.source {
            PixelSource::Native(located) => located
                .plain_frame(frame, &self.info)
                .map(|offset| (&located.file, offset)),
            PixelSource::Object(_) => None,
        }
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
        match &mut self.source {
            PixelSource::Native(located) => {
                located
                    .read_frame(frame, &self.info, dst, scratch)
                    .map_err(|e| format!("reading {frame_bytes} bytes of pixel data: {e}"))?;
            }
            PixelSource::Object(obj) => {
                let ts_uid = obj.meta().transfer_syntax().to_string();
                if let Some(codec) = OwnCodec::of(&ts_uid) {
                    let partial = self.damaged == Damaged::Render;
                    self.frame_warning =
                        decode_own(codec, obj, &self.info, frame, dst, scratch, partial)?;
                    return Ok(());
                }
                let ts = TransferSyntaxRegistry
                    .get(&ts_uid)
                    .ok_or_else(|| format!("unknown transfer syntax {ts_uid}"))?;
                match ts.codec() {
                    Codec::EncapsulatedPixelData(..) => {
                        let obj_ref: &DefaultDicomObject = obj;
                        return decode_with_registry(&ts_uid, obj_ref, frame, dst, scratch);
                    }
                    _ => {
                        // Native data inside a parsed object (deflate, or unusual layout).
                        let elem = obj.get(tags::PIXEL_DATA).ok_or("Pixel Data is missing")?;
                        let bytes = elem
                            .to_bytes()
                            .map_err(|e| format!("Pixel Data is unreadable: {e}"))?;
                        // dicom-rs keeps primitive values in native order after parsing: a
                        // big-endian OW value has had its 16-bit words swapped, an OB value
                        // is untouched, which is how DCMTK reads them too (see `native`).
                        native::frame_from_bytes(&bytes, frame, &self.info, dst)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Copies the compressed codestream of frame `frame` (its fragments, concatenated, as they
    /// are in the file) into `out`, for a GPU codec to decode. Fails for native pixel data.
    pub fn read_encoded_frame(&self, frame: u32, out: &mut Vec<u8>) -> Result<(), String> {
        let PixelSource::Object(obj) = &self.source else {
            return Err("internal: native pixel data has no codestream".into());
        };
        let elem = obj.get(tags::PIXEL_DATA).ok_or("Pixel Data is missing")?;
        let dicom_core::value::Value::PixelSequence(seq) = elem.value() else {
            return Err("compressed transfer syntax but Pixel Data is not encapsulated".into());
        };
        fragments::frame_bytes(
            seq.offset_table(),
            seq.fragments(),
            self.info.frames,
            frame,
            out,
            fragments::frame_start_test(&self.info.transfer_syntax),
        )
    }

    /// What was wrong with the frame [`read_frame`](Self::read_frame) last read but rendered
    /// anyway (`Damaged::Render`), once.
    pub fn take_frame_warning(&mut self) -> Option<String> {
        self.frame_warning.take()
    }

    /// True when pixels are read with one positioned read per frame (no intermediate copy).
    pub fn is_direct(&self) -> bool {
        matches!(self.source, PixelSource::Native { .. })
    }
}

/// The name of an image storage SOP class (`None` for other and unknown classes).
fn image_class_name(uid: &str) -> Option<&'static str> {
    use dicom_core::dictionary::UidDictionary;
    let entry = dicom_dictionary_std::StandardSopClassDictionary.by_uid(uid)?;
    (entry.name.contains("Image Storage") || entry.name == "Segmentation Storage")
        .then_some(entry.name)
}

/// True for a standard storage class that is not an image (structured reports, presentation
/// states, RT plans, waveforms, encapsulated documents, ...).
fn is_non_image(uid: &str) -> bool {
    use dicom_core::dictionary::UidDictionary;
    dicom_dictionary_std::StandardSopClassDictionary
        .by_uid(uid)
        .is_some_and(|e| image_class_name(uid).is_none() && e.name != "RT Dose Storage")
}

/// Codecs dicomflow implements itself (bit-exact with DCMTK, pure Rust).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OwnCodec {
    /// JPEG baseline / extended (8 and 12 bit) and lossless (process 14), IJG-exact.
    Jpeg,
    JpegLs,
    /// RLE Lossless, any whole-byte sample size, frames over several fragments.
    Rle,
}

impl OwnCodec {
    fn of(ts: &str) -> Option<OwnCodec> {
        match ts {
            uids::JPEG_BASELINE8_BIT
            | uids::JPEG_EXTENDED12_BIT
            | uids::JPEG_LOSSLESS
            | uids::JPEG_LOSSLESS_SV1 => Some(OwnCodec::Jpeg),
            uids::JPEGLS_LOSSLESS | uids::JPEGLS_NEAR_LOSSLESS => Some(OwnCodec::JpegLs),
            uids::RLE_LOSSLESS => Some(OwnCodec::Rle),
            _ => None,
        }
    }
}

/// Decodes frame `frame` of encapsulated pixel data with one of dicomflow's own codecs.
/// `partial`: a JPEG frame whose data ends early is decoded as far as it goes (the returned
/// warning says how far) instead of failing.
fn decode_own(
    codec: OwnCodec,
    obj: &DefaultDicomObject,
    info: &ImageInfo,
    frame: u32,
    dst: &mut [u8],
    scratch: &mut Vec<u8>,
    partial: bool,
) -> Result<Option<String>, String> {
    let elem = obj.get(tags::PIXEL_DATA).ok_or("Pixel Data is missing")?;
    let dicom_core::value::Value::PixelSequence(seq) = elem.value() else {
        return Err("compressed transfer syntax but Pixel Data is not encapsulated".into());
    };
    let mut stream = Vec::new();
    fragments::frame_bytes(
        seq.offset_table(),
        seq.fragments(),
        info.frames,
        frame,
        &mut stream,
        fragments::frame_start_test(&info.transfer_syntax),
    )?;
    let layout = StreamLayout::of(info);
    decode_own_stream(codec, &layout, &stream, dst, scratch, partial)
}

/// What a codec needs from the header besides the codestream.
struct StreamLayout {
    cols: u32,
    rows: u32,
    samples_per_pixel: u16,
    bits_allocated: u16,
    stored_photometric: info::Photometric,
    /// RLE: bits per sample in the codestream (32 for colour narrowed to 16 in the slot).
    file_bits_allocated: u16,
    colour32: Option<info::Colour32>,
}

impl StreamLayout {
    fn of(info: &ImageInfo) -> StreamLayout {
        StreamLayout {
            cols: info.cols,
            rows: info.rows,
            samples_per_pixel: info.samples_per_pixel,
            bits_allocated: info.bits_allocated,
            stored_photometric: info.stored_photometric,
            file_bits_allocated: info.file_bits_allocated,
            colour32: info.colour32,
        }
    }
}

/// Decodes one RLE frame into the slot (32-bit colour narrowed to 16 bits on the way).
fn decode_rle(
    info: &StreamLayout,
    stream: &[u8],
    dst: &mut [u8],
    scratch: &mut Vec<u8>,
) -> Result<(), String> {
    let bytes = info.file_bits_allocated as usize / 8;
    let pixels = info.rows as usize * info.cols as usize;
    let spp = info.samples_per_pixel as usize;
    let Some(colour32) = info.colour32 else {
        return rle::decode_frame(stream, spp, bytes, pixels, dst).map_err(|e| format!("RLE: {e}"));
    };
    // 32-bit colour: decoded whole, then narrowed into the slot's 16-bit samples.
    scratch.clear();
    scratch.resize(pixels * spp * bytes, 0);
    rle::decode_frame(stream, spp, bytes, pixels, scratch).map_err(|e| format!("RLE: {e}"))?;
    for (d, s) in dst.chunks_exact_mut(2).zip(scratch.chunks_exact(4)) {
        let v = colour32.narrow(u32::from_ne_bytes([s[0], s[1], s[2], s[3]]));
        d.copy_from_slice(&v.to_ne_bytes());
    }
    Ok(())
}

/// Decodes one frame's codestream with one of dicomflow's own codecs. `partial`: see
/// [`decode_own`].
fn decode_own_stream(
    codec: OwnCodec,
    info: &StreamLayout,
    stream: &[u8],
    dst: &mut [u8],
    scratch: &mut Vec<u8>,
    partial: bool,
) -> Result<Option<String>, String> {
    if codec == OwnCodec::Rle {
        return decode_rle(info, stream, dst, scratch).map(|()| None);
    }
    // The frame header's dimensions must agree with the DICOM header (already checked against
    // the frame-size limit) before a decoder allocates anything.
    match sof_dimensions(stream) {
        Some((w, h, c)) if (w, h, c) == (info.cols, info.rows, info.samples_per_pixel as u32) => {}
        Some((w, h, c)) => {
            return Err(format!(
                "codestream is {w}x{h}x{c}, the header says {}x{}x{}",
                info.cols, info.rows, info.samples_per_pixel
            ))
        }
        None => return Err("no frame header (SOF) in the compressed frame".into()),
    }
    let mut warning = None;
    let (width, height, components, bytes_per_sample) = match codec {
        OwnCodec::Rle => return Err("internal: RLE handled above".into()),
        OwnCodec::Jpeg => {
            // DCMTK converts YCbCr to RGB exactly when the header says YBR (its +cp default).
            use info::Photometric as P;
            let convert = matches!(
                info.stored_photometric,
                P::YbrFull | P::YbrFull422 | P::YbrPartial422
            );
            let img = jpeg::decode_with(stream, convert, scratch, partial)
                .map_err(|e| format!("JPEG: {}", e.message))?;
            warning = img.complete_rows.map(|rows| {
                if rows == img.height {
                    "JPEG data ends without its end-of-image marker; every row decoded".into()
                } else {
                    format!(
                        "JPEG data ends early: {rows} of {} rows decoded, the rest rendered \
                         black (--damaged render)",
                        img.height
                    )
                }
            });
            (
                img.width,
                img.height,
                img.components as u32,
                if img.precision <= 8 { 1 } else { 2 },
            )
        }
        OwnCodec::JpegLs => {
            let img = jpegls::decode(stream, scratch).map_err(|e| format!("JPEG-LS: {e}"))?;
            (
                img.width,
                img.height,
                img.components as u32,
                if img.bits <= 8 { 1 } else { 2 },
            )
        }
    };
    if width != info.cols || height != info.rows || components != info.samples_per_pixel as u32 {
        return Err(format!(
            "codestream is {width}x{height}x{components}, the header says {}x{}x{}",
            info.cols, info.rows, info.samples_per_pixel
        ));
    }
    place_samples(
        scratch,
        bytes_per_sample,
        dst,
        info.bits_allocated as usize / 8,
    )?;
    Ok(warning)
}

/// Decodes frame `frame` of `obj` with the dicom-rs registry's decoder for `ts_uid` into `dst`
/// (exactly one decoded frame), through `scratch`. Decoder panics become errors.
fn decode_with_registry(
    ts_uid: &str,
    obj: &dyn dicom_encoding::adapters::PixelDataObject,
    frame: u32,
    dst: &mut [u8],
    scratch: &mut Vec<u8>,
) -> Result<(), String> {
    let ts = TransferSyntaxRegistry
        .get(ts_uid)
        .ok_or_else(|| format!("unknown transfer syntax {ts_uid}"))?;
    let Codec::EncapsulatedPixelData(Some(decoder), _) = ts.codec() else {
        return Err(format!(
            "transfer syntax {} ({ts_uid}) cannot be decoded",
            ts.name()
        ));
    };
    scratch.clear();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        decoder.decode_frame(obj, frame, scratch)
    }));
    match result {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(format!("{} decoder: {}", ts.name(), error_chain(&e))),
        Err(_) => return Err(format!("{} decoder crashed on this data", ts.name())),
    }
    if scratch.len() < dst.len() {
        return Err(format!(
            "{} decoder produced {} bytes, expected {}",
            ts.name(),
            scratch.len(),
            dst.len()
        ));
    }
    let n = dst.len();
    dst.copy_from_slice(&scratch[..n]);
    Ok(())
}

/// Decodes one frame's codestream (`stream`, also reachable as frame 0 of `object`) with the
/// decoder the CPU path uses for `coding`'s transfer syntax.
pub(crate) fn decode_codestream(
    object: &dyn dicom_encoding::adapters::PixelDataObject,
    coding: &compressed::FrameCoding,
    stream: &[u8],
    dst: &mut [u8],
    scratch: &mut Vec<u8>,
) -> Result<(), String> {
    if let Some(codec) = OwnCodec::of(&coding.transfer_syntax) {
        let layout = StreamLayout {
            cols: coding.cols,
            rows: coding.rows,
            samples_per_pixel: coding.samples_per_pixel,
            bits_allocated: coding.bits_allocated,
            stored_photometric: coding.stored_photometric,
            file_bits_allocated: coding.bits_allocated,
            colour32: None,
        };
        return decode_own_stream(codec, &layout, stream, dst, scratch, false).map(|_| ());
    }
    decode_with_registry(&coding.transfer_syntax, object, 0, dst, scratch)
}

/// Width, height and component count from a JPEG or JPEG-LS frame header, walking marker
/// segments from SOI.
fn sof_dimensions(data: &[u8]) -> Option<(u32, u32, u32)> {
    use jpeg::markers::{self, Walker};
    if !markers::starts_with_soi(data, 0) {
        return None;
    }
    let mut walker = Walker::new(data, 2);
    loop {
        let segment = walker.next_segment().ok()?;
        if markers::is_frame_header(segment.marker) {
            // P, Y, X, Nf.
            let p = segment.payload(data)?;
            let h = u16::from_be_bytes([*p.get(1)?, *p.get(2)?]) as u32;
            let w = u16::from_be_bytes([*p.get(3)?, *p.get(4)?]) as u32;
            let c = *p.get(5)? as u32;
            return Some((w, h, c));
        }
        if matches!(segment.marker, 0xda | 0xd9) {
            return None; // scan data (or the end) before a frame header
        }
    }
}

/// Copies decoded samples into the slot, widening 8-bit samples into a 16-bit container.
fn place_samples(
    src: &[u8],
    src_bytes: usize,
    dst: &mut [u8],
    dst_bytes: usize,
) -> Result<(), String> {
    let samples = dst.len() / dst_bytes.max(1);
    if src.len() < samples * src_bytes {
        return Err(format!(
            "decoder produced {} bytes, expected {}",
            src.len(),
            samples * src_bytes
        ));
    }
    match (src_bytes, dst_bytes) {
        (a, b) if a == b => dst.copy_from_slice(&src[..dst.len()]),
        (1, 2) => {
            for (d, &s) in dst.chunks_exact_mut(2).zip(src) {
                d.copy_from_slice(&(s as u16).to_ne_bytes());
            }
        }
        (a, b) => {
            return Err(format!(
                "decoded {}-bit samples do not fit {}-bit storage",
                8 * a,
                8 * b
            ))
        }
    }
    Ok(())
}

/// Encapsulated pixel data leaves the codec interleaved; JPEG 2000's colour transforms and
/// DCMTK's YCbCr→RGB conversion of JPEG data (when the header says YBR) leave RGB.
fn codec_output_layout(info: &mut ImageInfo) {
    use info::Photometric as P;
    info.planar_configuration = 0;
    info.subsampled_422 = false;
    let ts = info.transfer_syntax.as_str();
    let jpeg_dct = matches!(ts, uids::JPEG_BASELINE8_BIT | uids::JPEG_EXTENDED12_BIT);
    let j2k = matches!(
        ts,
        uids::JPEG2000_LOSSLESS
            | uids::JPEG2000
            | uids::JPEG2000MC_LOSSLESS
            | uids::JPEG2000MC
            | uids::HTJ2K_LOSSLESS
            | uids::HTJ2K_LOSSLESS_RPCL
            | uids::HTJ2K
    );
    info.photometric = match info.photometric {
        P::YbrIct | P::YbrRct => P::Rgb,
        P::YbrFull | P::YbrFull422 | P::YbrPartial422 if jpeg_dct => P::Rgb,
        P::YbrFull422 | P::YbrPartial422 if j2k => P::Rgb,
        other => other,
    };
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

    fn dataset_mut(&mut self) -> &mut InMemDicomObject {
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

fn open_full(path: &Path, patches: &[patch::Patch]) -> Result<DefaultDicomObject, DecodeError> {
    if patches.is_empty() {
        OpenFileOptions::new().open_file(path)
    } else {
        OpenFileOptions::new().from_reader(patched(path, patches)?)
    }
    .map_err(|e| fail(format!("cannot read pixel data: {}", error_chain(&e))))
}

/// The file's bytes with the guard's patches applied (see [`patch`]).
fn patched(
    path: &Path,
    patches: &[patch::Patch],
) -> Result<patch::PatchedReader<std::fs::File>, DecodeError> {
    probe::open_input(path)
        .and_then(|f| patch::PatchedReader::new(f, patches.to_vec()))
        .map_err(|e| fail(format!("cannot open: {e}")))
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
                .unwrap_or_else(|| uids::SECONDARY_CAPTURE_IMAGE_STORAGE.into()),
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
