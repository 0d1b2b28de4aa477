//! Compressed frames that travel to the GPU as they are in the file: which transfer syntaxes a
//! GPU codec can take ([`GpuCodec`]), what a frame's codestream header says (dimensions,
//! precision, predictor, wavelet: [`inspect`]), whether the run's route sends it to the GPU
//! ([`GpuRoute`]), and the CPU decode of such a frame when the GPU cannot do it
//! ([`decode_on_cpu`], the same decoders the CPU path uses, so the stored values are the same).
//!
//! Exactness: lossless codestreams (JPEG process 14; JPEG 2000 with the reversible 5/3 wavelet
//! and no quantization) decode to the same integers on any conforming decoder, so the GPU
//! result equals the CPU decoders' bit for bit. Lossy ones (DCT, irreversible 9/7) leave room
//! for each decoder's arithmetic; they go to the GPU only with `gpu.decode = "all"`.

use std::borrow::Cow;
use std::sync::Arc;

use dicom_dictionary_std::uids;

use super::info::{ImageInfo, Photometric};

/// The GPU codec family a transfer syntax's frames are coded with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum GpuCodec {
    /// JPEG 2000 and HTJ2K (.90, .91, .201, .202, .203): nvJPEG2000.
    Jpeg2000,
    /// JPEG lossless, process 14 (.57, .70): nvJPEG's lossless backend.
    JpegLossless,
    /// JPEG baseline / extended DCT (.50, .51): nvJPEG (hardware engines where present).
    JpegDct,
}

impl GpuCodec {
    /// The codec family of transfer syntax `ts`, if a GPU codec exists for it.
    pub fn of(ts: &str) -> Option<GpuCodec> {
        Some(match ts {
            uids::JPEG2000_LOSSLESS
            | uids::JPEG2000
            | uids::HTJ2K_LOSSLESS
            | uids::HTJ2K_LOSSLESS_RPCL
            | uids::HTJ2K => GpuCodec::Jpeg2000,
            uids::JPEG_LOSSLESS | uids::JPEG_LOSSLESS_SV1 => GpuCodec::JpegLossless,
            uids::JPEG_BASELINE8_BIT | uids::JPEG_EXTENDED12_BIT => GpuCodec::JpegDct,
            _ => return None,
        })
    }

    /// Short name for messages.
    pub fn name(self) -> &'static str {
        match self {
            GpuCodec::Jpeg2000 => "JPEG 2000",
            GpuCodec::JpegLossless => "JPEG lossless",
            GpuCodec::JpegDct => "JPEG baseline/extended",
        }
    }

    /// The transfer syntaxes of this family (for the summary).
    pub fn syntaxes(self) -> &'static str {
        match self {
            GpuCodec::Jpeg2000 => ".90 .91 .201 .202 .203",
            GpuCodec::JpegLossless => ".57 .70",
            GpuCodec::JpegDct => ".50 .51",
        }
    }
}

/// How a file's frames are coded: what a decoder needs besides the bytes. One per file, shared
/// by its frames' plans.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameCoding {
    pub transfer_syntax: String,
    pub codec: GpuCodec,
    pub rows: u32,
    pub cols: u32,
    pub samples_per_pixel: u16,
    pub bits_allocated: u16,
    /// The header's photometric interpretation (JPEG DCT colour conversion depends on it).
    pub stored_photometric: Photometric,
}

impl FrameCoding {
    /// The coding of `info`'s frames, when its transfer syntax has a GPU codec.
    pub fn of(info: &ImageInfo) -> Option<FrameCoding> {
        Some(FrameCoding {
            transfer_syntax: info.transfer_syntax.clone(),
            codec: GpuCodec::of(&info.transfer_syntax)?,
            rows: info.rows,
            cols: info.cols,
            samples_per_pixel: info.samples_per_pixel,
            bits_allocated: info.bits_allocated,
            stored_photometric: info.stored_photometric,
        })
    }

    /// Bytes of the decoded frame (stored values, interleaved).
    pub fn decoded_bytes(&self) -> usize {
        self.rows as usize
            * self.cols as usize
            * self.samples_per_pixel as usize
            * (self.bits_allocated as usize / 8)
    }

    /// True when the header asks for YCbCr → RGB conversion of DCT data (DCMTK's rule).
    pub fn converts_ycbcr(&self) -> bool {
        self.codec == GpuCodec::JpegDct
            && self.samples_per_pixel == 3
            && matches!(
                self.stored_photometric,
                Photometric::YbrFull | Photometric::YbrFull422 | Photometric::YbrPartial422
            )
    }
}

/// A frame whose slot input holds its compressed bytes (`len` of them), for the GPU to decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedFrame {
    pub coding: Arc<FrameCoding>,
    pub len: usize,
    /// Lossless codestream: the GPU's stored values equal the CPU decoders'.
    pub lossless: bool,
}

/// What the loaders do with a frame of a codec the route takes, while a GPU codec starts
/// (`Backend::gpu_start`; the CUDA backend's `decode/start.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuStart {
    /// Leave it compressed for the GPU.
    Now,
    /// Decode it on the CPU; `sample`: hand a copy of its file's first frame to
    /// `Backend::gpu_sample` first.
    Meanwhile { sample: bool },
}

/// A copy of a frame's codestream, which each CUDA render worker decodes once to start nvJPEG.
pub struct Sample {
    pub frame: EncodedFrame,
    pub bytes: Vec<u8>,
}

/// Smallest width and height of a lossless JPEG frame sent to nvJPEG. Measured on the H200
/// host with nvJPEG 13.0.1 (`bench decode`, synth CT, dcmcjpeg +e1): frames 64 to 160 pixels
/// wide decode wrongly from about the 68th sample on, 200 to 512 wide exactly.
pub const LOSSLESS_JPEG_MIN_SIDE: u32 = 256;

/// What a codestream header says, as far as routing is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamFacts {
    /// Decodes to exactly the encoded integers on any conforming decoder.
    pub lossless: bool,
    /// Why no GPU codec takes this frame (parameters outside what the libraries support).
    pub unsupported: Option<String>,
}

/// Reads the header of one frame's codestream, and checks that it ends with its end marker.
pub fn inspect(coding: &FrameCoding, bytes: &[u8]) -> StreamFacts {
    let result = match coding.codec {
        GpuCodec::Jpeg2000 => inspect_j2k(coding, bytes),
        GpuCodec::JpegLossless | GpuCodec::JpegDct => inspect_jpeg(coding, bytes),
    };
    match result {
        // A truncated codestream makes the CPU decoders fail (as DCMTK does), while the GPU
        // codecs may return whatever they decoded: it stays with the CPU, which reports it.
        Ok(facts) if facts.unsupported.is_none() && !ends_with_end_marker(bytes) => StreamFacts {
            lossless: facts.lossless,
            unsupported: Some("no end-of-image marker at the end of the frame (truncated?)".into()),
        },
        Ok(facts) => facts,
        Err(why) => StreamFacts {
            lossless: false,
            unsupported: Some(why),
        },
    }
}

/// True when the codestream ends with EOI / EOC (both 0xFFD9), ignoring the zero padding that
/// makes DICOM fragments even.
fn ends_with_end_marker(bytes: &[u8]) -> bool {
    let mut end = bytes.len();
    while end > 0 && bytes[end - 1] == 0 && bytes.len() - end < 2 {
        end -= 1;
    }
    end >= 2 && bytes[end - 2..end] == [0xff, 0xd9]
}

/// Which codecs the backend decodes on the GPU, and whether lossy frames go there too.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct GpuRoute {
    pub jpeg2000: bool,
    pub jpeg_lossless: bool,
    pub jpeg_dct: bool,
    /// `gpu.decode = "all"`: lossy codestreams too, and lossless JPEG (which nvJPEG decodes
    /// exactly from 256×256 up, but slower than the CPU decoders of a 16-core host).
    pub all: bool,
}

impl GpuRoute {
    /// No GPU decoding (the CPU backend, or `gpu.decode = "none"`).
    pub const NONE: GpuRoute = GpuRoute {
        jpeg2000: false,
        jpeg_lossless: false,
        jpeg_dct: false,
        all: false,
    };

    /// Whether any frame of this codec family can go to the GPU.
    pub fn codec(&self, codec: GpuCodec) -> bool {
        match codec {
            GpuCodec::Jpeg2000 => self.jpeg2000,
            GpuCodec::JpegLossless => self.jpeg_lossless && self.all,
            GpuCodec::JpegDct => self.jpeg_dct && self.all,
        }
    }

    /// Whether this frame goes to the GPU; `Err` says why not.
    pub fn accepts(&self, codec: GpuCodec, facts: &StreamFacts) -> Result<(), String> {
        if !self.codec(codec) {
            return Err(format!("no GPU decoder for {} in this run", codec.name()));
        }
        if let Some(why) = &facts.unsupported {
            return Err(why.clone());
        }
        if !facts.lossless && !self.all {
            return Err("lossy codestream (gpu.decode = \"lossless\")".into());
        }
        Ok(())
    }
}

/// JPEG marker segments up to the first scan: frame type, precision, size, components and
/// their sampling, and the first scan's predictor and point transform.
#[derive(Debug, Clone, PartialEq, Eq)]
struct JpegHeader {
    sof: u8,
    precision: u8,
    rows: u32,
    cols: u32,
    /// (horizontal, vertical) sampling factor of each component.
    sampling: Vec<(u8, u8)>,
    /// Ss of the first scan (the predictor for lossless).
    ss: u8,
    /// Al of the first scan (the point transform for lossless).
    al: u8,
}

fn jpeg_header(data: &[u8]) -> Result<JpegHeader, String> {
    use crate::decode::jpeg::markers::{self, WalkError, Walker};
    let truncated = || "JPEG header truncated".to_string();
    if !markers::starts_with_soi(data, 0) {
        return Err("no JPEG start-of-image marker".into());
    }
    let mut walker = Walker::new(data, 2);
    let mut frame: Option<JpegHeader> = None;
    loop {
        let segment = walker.next_segment().map_err(|e| match e {
            WalkError::Length { marker, len } => {
                format!("JPEG marker 0x{marker:02x} has length {len}")
            }
            WalkError::Truncated | WalkError::Budget => truncated(),
        })?;
        if segment.marker == 0xd9 {
            return Err("end of image before a scan".into());
        }
        let seg = segment.payload(data).ok_or_else(truncated)?;
        match segment.marker {
            m if markers::is_sof(m) => {
                if seg.len() < 6 {
                    return Err(truncated());
                }
                let n = seg[5] as usize;
                let comps = seg.get(6..6 + 3 * n).ok_or_else(truncated)?;
                frame = Some(JpegHeader {
                    sof: m,
                    precision: seg[0],
                    rows: u16::from_be_bytes([seg[1], seg[2]]) as u32,
                    cols: u16::from_be_bytes([seg[3], seg[4]]) as u32,
                    sampling: comps
                        .chunks_exact(3)
                        .map(|c| (c[1] >> 4, c[1] & 15))
                        .collect(),
                    ss: 0,
                    al: 0,
                });
            }
            0xda => {
                let mut f = frame.ok_or("scan before a frame header")?;
                let n = *seg.first().ok_or_else(truncated)? as usize;
                let tail = seg.get(1 + 2 * n..1 + 2 * n + 3).ok_or_else(truncated)?;
                f.ss = tail[0];
                f.al = tail[2] & 15;
                return Ok(f);
            }
            _ => {}
        }
    }
}

fn inspect_jpeg(coding: &FrameCoding, data: &[u8]) -> Result<StreamFacts, String> {
    let h = jpeg_header(data)?;
    let unsupported = |why: String| {
        Ok(StreamFacts {
            lossless: h.sof == 0xc3,
            unsupported: Some(why),
        })
    };
    if (h.cols, h.rows, h.sampling.len())
        != (coding.cols, coding.rows, coding.samples_per_pixel as usize)
    {
        return unsupported(format!(
            "frame header says {}x{}x{}, the DICOM header {}x{}x{}",
            h.cols,
            h.rows,
            h.sampling.len(),
            coding.cols,
            coding.rows,
            coding.samples_per_pixel
        ));
    }
    match coding.codec {
        GpuCodec::JpegLossless => {
            if h.sof != 0xc3 {
                return unsupported(format!("SOF 0x{:02x} (only lossless Huffman, SOF3)", h.sof));
            }
            if h.ss != 1 {
                return unsupported(format!("predictor {} (nvJPEG decodes predictor 1)", h.ss));
            }
            if h.al != 0 {
                return unsupported(format!("point transform {}", h.al));
            }
            if coding.cols < LOSSLESS_JPEG_MIN_SIDE || coding.rows < LOSSLESS_JPEG_MIN_SIDE {
                return unsupported(format!(
                    "{}x{} is below {LOSSLESS_JPEG_MIN_SIDE}x{LOSSLESS_JPEG_MIN_SIDE} (nvJPEG 13.0's \
                     lossless backend decodes frames narrower than 200 px wrongly)",
                    coding.cols, coding.rows
                ));
            }
            if h.sampling.len() != 1 {
                return unsupported(format!("{} components", h.sampling.len()));
            }
            if coding.bits_allocated != 16 || h.precision > 16 || h.precision < 2 {
                return unsupported(format!(
                    "{}-bit samples in {}-bit storage",
                    h.precision, coding.bits_allocated
                ));
            }
            Ok(StreamFacts {
                lossless: true,
                unsupported: None,
            })
        }
        GpuCodec::JpegDct => {
            if h.sof != 0xc0 && h.sof != 0xc1 {
                return unsupported(format!("SOF 0x{:02x} (only sequential DCT)", h.sof));
            }
            if h.precision != 8 || coding.bits_allocated != 8 {
                return unsupported(format!("{}-bit DCT samples", h.precision));
            }
            let subsampled = h.sampling.iter().any(|&s| s != h.sampling[0]);
            if h.sampling.len() == 3 && subsampled && !coding.converts_ycbcr() {
                return unsupported("subsampled components without colour conversion".into());
            }
            Ok(StreamFacts {
                lossless: false,
                unsupported: None,
            })
        }
        GpuCodec::Jpeg2000 => Err("internal: JPEG header read for a JPEG 2000 frame".into()),
    }
}

/// JPEG 2000 codestream main header: SIZ (size, components), COD (wavelet), QCD (quantization).
fn inspect_j2k(coding: &FrameCoding, data: &[u8]) -> Result<StreamFacts, String> {
    let be16 = |p: usize| -> Option<u32> {
        Some(u16::from_be_bytes([*data.get(p)?, *data.get(p + 1)?]) as u32)
    };
    let be32 = |p: usize| -> Option<u32> {
        Some(u32::from_be_bytes(data.get(p..p + 4)?.try_into().ok()?))
    };
    let truncated = || "JPEG 2000 main header truncated".to_string();
    if data.get(0..2) != Some(&[0xff, 0x4f]) {
        return Err("no JPEG 2000 codestream (SOC) at the start of the frame".into());
    }
    let mut pos = 2;
    let (mut size, mut reversible, mut quantized) = (None, None, None);
    while size.is_none() || reversible.is_none() || quantized.is_none() {
        let marker = be16(pos).ok_or_else(truncated)?;
        if marker == 0xff90 || marker == 0xff93 || marker == 0xffd9 {
            break; // tile part, start of data or end: the main header is over
        }
        let len = be16(pos + 2).ok_or_else(truncated)? as usize;
        let seg = pos + 4;
        match marker {
            0xff51 => {
                // SIZ: Rsiz, Xsiz, Ysiz, XOsiz, YOsiz, XTsiz, YTsiz, XTOsiz, YTOsiz, Csiz, comps.
                let x = be32(seg + 2).ok_or_else(truncated)?;
                let y = be32(seg + 6).ok_or_else(truncated)?;
                let x0 = be32(seg + 10).ok_or_else(truncated)?;
                let y0 = be32(seg + 14).ok_or_else(truncated)?;
                let n = be16(seg + 34).ok_or_else(truncated)? as usize;
                let comps = data.get(seg + 36..seg + 36 + 3 * n).ok_or_else(truncated)?;
                let comps: Vec<(u8, bool, u8, u8)> = comps
                    .chunks_exact(3)
                    .map(|c| ((c[0] & 0x7f) + 1, c[0] & 0x80 != 0, c[1], c[2]))
                    .collect();
                size = Some((x.saturating_sub(x0), y.saturating_sub(y0), comps));
            }
            0xff52 => {
                // COD: Scod, SGcod (4 bytes), SPcod: levels, cb w, cb h, cb style, transform.
                let t = *data.get(seg + 9).ok_or_else(truncated)?;
                reversible = Some(t == 1);
            }
            0xff5c => {
                let sqcd = *data.get(seg).ok_or_else(truncated)?;
                quantized = Some(sqcd & 0x1f != 0);
            }
            _ => {}
        }
        pos += 2 + len;
    }
    let (cols, rows, comps) = size.ok_or("JPEG 2000 main header without SIZ")?;
    let lossless = reversible == Some(true) && quantized == Some(false);
    let unsupported = |why: String| {
        Ok(StreamFacts {
            lossless,
            unsupported: Some(why),
        })
    };
    if (cols, rows, comps.len()) != (coding.cols, coding.rows, coding.samples_per_pixel as usize) {
        return unsupported(format!(
            "codestream is {cols}x{rows}x{}, the DICOM header {}x{}x{}",
            comps.len(),
            coding.cols,
            coding.rows,
            coding.samples_per_pixel
        ));
    }
    let container = coding.bits_allocated as u8;
    for (i, &(precision, signed, dx, dy)) in comps.iter().enumerate() {
        if (dx, dy) != (1, 1) {
            return unsupported(format!("component {i} is subsampled ({dx}x{dy})"));
        }
        if container != 8 && container != 16 || precision > container {
            return unsupported(format!(
                "component {i}: {precision}-bit samples in {container}-bit storage"
            ));
        }
        if signed && container == 8 {
            return unsupported("signed 8-bit samples".into());
        }
        if signed != comps[0].1 {
            return unsupported("components differ in signedness".into());
        }
    }
    Ok(StreamFacts {
        lossless,
        unsupported: None,
    })
}

/// One frame's codestream seen as a single-frame, single-fragment DICOM object, so that the
/// registry's decoders (the CPU path's) can decode it.
struct OneFrame<'a> {
    coding: &'a FrameCoding,
    bytes: &'a [u8],
}

impl dicom_encoding::adapters::PixelDataObject for OneFrame<'_> {
    fn transfer_syntax_uid(&self) -> &str {
        &self.coding.transfer_syntax
    }
    fn rows(&self) -> Option<u16> {
        u16::try_from(self.coding.rows).ok()
    }
    fn cols(&self) -> Option<u16> {
        u16::try_from(self.coding.cols).ok()
    }
    fn samples_per_pixel(&self) -> Option<u16> {
        Some(self.coding.samples_per_pixel)
    }
    fn bits_allocated(&self) -> Option<u16> {
        Some(self.coding.bits_allocated)
    }
    fn bits_stored(&self) -> Option<u16> {
        Some(self.coding.bits_allocated)
    }
    fn photometric_interpretation(&self) -> Option<&str> {
        Some(self.coding.stored_photometric.as_str())
    }
    fn number_of_frames(&self) -> Option<u32> {
        Some(1)
    }
    fn number_of_fragments(&self) -> Option<u32> {
        Some(1)
    }
    fn fragment(&self, fragment: usize) -> Option<Cow<'_, [u8]>> {
        (fragment == 0).then_some(Cow::Borrowed(self.bytes))
    }
    fn offset_table(&self) -> Option<Cow<'_, [u32]>> {
        Some(Cow::Borrowed(&[]))
    }
    fn raw_pixel_data(&self) -> Option<dicom_encoding::adapters::RawPixelData> {
        Some(dicom_encoding::adapters::RawPixelData {
            fragments: std::iter::once(self.bytes.to_vec()).collect(),
            offset_table: Default::default(),
        })
    }
}

/// Decodes one frame's codestream on the CPU into `dst` (exactly the decoded frame's bytes),
/// with the decoders the CPU path uses for this transfer syntax.
pub fn decode_on_cpu(
    coding: &FrameCoding,
    bytes: &[u8],
    dst: &mut [u8],
    scratch: &mut Vec<u8>,
) -> Result<(), String> {
    if dst.len() != coding.decoded_bytes() {
        return Err(format!(
            "internal: {} bytes of room for a decoded frame of {}",
            dst.len(),
            coding.decoded_bytes()
        ));
    }
    let object = OneFrame { coding, bytes };
    super::decode_codestream(&object, coding, bytes, dst, scratch)
}

/// Replaces the codestream in `slot.input` by the decoded stored values (CPU decoders), so that
/// the frame can be rendered as if the loader had decoded it. `decoded` and `scratch` are
/// reusable buffers.
pub fn decode_slot_on_cpu(
    encoded: &EncodedFrame,
    slot: &mut crate::memory::Slot,
    decoded: &mut Vec<u8>,
    scratch: &mut Vec<u8>,
) -> Result<(), String> {
    let n = encoded.coding.decoded_bytes();
    if slot.input.capacity() < n.max(encoded.len) {
        return Err(format!(
            "internal: slot of {} bytes for a frame of {n}",
            slot.input.capacity()
        ));
    }
    decoded.clear();
    decoded.resize(n, 0);
    decode_on_cpu(
        &encoded.coding,
        slot.input.bytes(encoded.len),
        decoded,
        scratch,
    )?;
    slot.input.bytes_mut(n).copy_from_slice(decoded);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn coding(ts: &str, cols: u32, rows: u32, spp: u16, bits: u16) -> FrameCoding {
        FrameCoding {
            transfer_syntax: ts.into(),
            codec: GpuCodec::of(ts).unwrap(),
            rows,
            cols,
            samples_per_pixel: spp,
            bits_allocated: bits,
            stored_photometric: Photometric::Monochrome2,
        }
    }

    /// A minimal JPEG header: SOI, SOFn, SOS (no entropy data).
    fn jpeg(sof: u8, precision: u8, cols: u16, rows: u16, comps: &[u8], ss: u8, al: u8) -> Vec<u8> {
        let mut v = vec![0xff, 0xd8, 0xff, sof];
        let len = 8 + 3 * comps.len() as u16;
        v.extend(len.to_be_bytes());
        v.push(precision);
        v.extend(rows.to_be_bytes());
        v.extend(cols.to_be_bytes());
        v.push(comps.len() as u8);
        for (i, &s) in comps.iter().enumerate() {
            v.extend([i as u8 + 1, s, 0]);
        }
        v.extend([0xff, 0xda]);
        let len = 6 + 2 * comps.len() as u16;
        v.extend(len.to_be_bytes());
        v.push(comps.len() as u8);
        for i in 0..comps.len() {
            v.extend([i as u8 + 1, 0]);
        }
        v.extend([ss, 0, al]);
        v.extend([0x12, 0x34, 0xff, 0xd9]);
        v
    }

    /// A minimal JPEG 2000 main header: SOC, SIZ, COD, QCD, SOT.
    fn j2k(cols: u32, rows: u32, comps: &[(u8, bool)], transform: u8, qstyle: u8) -> Vec<u8> {
        let mut v = vec![0xff, 0x4f, 0xff, 0x51];
        v.extend((38 + 3 * comps.len() as u16).to_be_bytes());
        v.extend(0u16.to_be_bytes());
        for x in [cols, rows, 0, 0, cols, rows, 0, 0] {
            v.extend(x.to_be_bytes());
        }
        v.extend((comps.len() as u16).to_be_bytes());
        for &(p, s) in comps {
            v.extend([(p - 1) | if s { 0x80 } else { 0 }, 1, 1]);
        }
        v.extend([0xff, 0x52, 0, 12, 0, 0, 0, 1, 0, 5, 4, 4, 0, transform]);
        v.extend([0xff, 0x5c, 0, 4, qstyle, 0x40]);
        v.extend([0xff, 0x90, 0, 10, 0, 0, 0, 0, 0, 0, 0, 1]);
        v.extend([0xff, 0x93, 0x12, 0xff, 0xd9]);
        v
    }

    #[test]
    fn transfer_syntaxes_map_to_gpu_codecs() {
        assert_eq!(
            GpuCodec::of("1.2.840.10008.1.2.4.90"),
            Some(GpuCodec::Jpeg2000)
        );
        assert_eq!(
            GpuCodec::of("1.2.840.10008.1.2.4.203"),
            Some(GpuCodec::Jpeg2000)
        );
        assert_eq!(
            GpuCodec::of("1.2.840.10008.1.2.4.70"),
            Some(GpuCodec::JpegLossless)
        );
        assert_eq!(
            GpuCodec::of("1.2.840.10008.1.2.4.57"),
            Some(GpuCodec::JpegLossless)
        );
        assert_eq!(
            GpuCodec::of("1.2.840.10008.1.2.4.50"),
            Some(GpuCodec::JpegDct)
        );
        assert_eq!(GpuCodec::of("1.2.840.10008.1.2.4.80"), None);
        assert_eq!(GpuCodec::of("1.2.840.10008.1.2.1"), None);
    }

    #[test]
    fn jpeg_lossless_predictor_1_goes_to_the_gpu_others_stay() {
        let c = coding("1.2.840.10008.1.2.4.70", 512, 256, 1, 16);
        let sv1 = inspect(&c, &jpeg(0xc3, 12, 512, 256, &[0x11], 1, 0));
        assert_eq!(
            sv1,
            StreamFacts {
                lossless: true,
                unsupported: None
            }
        );
        let sv6 = inspect(&c, &jpeg(0xc3, 12, 512, 256, &[0x11], 6, 0));
        assert!(sv6.lossless);
        assert!(sv6.unsupported.unwrap().contains("predictor 6"));
        let pt = inspect(&c, &jpeg(0xc3, 12, 512, 256, &[0x11], 1, 2));
        assert!(pt.unsupported.unwrap().contains("point transform"));
        let size = inspect(&c, &jpeg(0xc3, 12, 513, 256, &[0x11], 1, 0));
        assert!(size.unsupported.unwrap().contains("513x256x1"));
        let rgb = coding("1.2.840.10008.1.2.4.70", 512, 256, 3, 16);
        let three = inspect(&rgb, &jpeg(0xc3, 8, 512, 256, &[0x11; 3], 1, 0));
        assert!(three.unsupported.unwrap().contains("3 components"));
        let small = coding("1.2.840.10008.1.2.4.70", 128, 512, 1, 16);
        let narrow = inspect(&small, &jpeg(0xc3, 12, 128, 512, &[0x11], 1, 0));
        assert!(narrow.unsupported.unwrap().contains("128x512 is below"));
    }

    #[test]
    fn jpeg_dct_is_lossy_and_8_bit_only() {
        let c = coding("1.2.840.10008.1.2.4.50", 16, 16, 1, 8);
        let base = inspect(&c, &jpeg(0xc0, 8, 16, 16, &[0x11], 0, 0));
        assert_eq!(
            base,
            StreamFacts {
                lossless: false,
                unsupported: None
            }
        );
        let c12 = coding("1.2.840.10008.1.2.4.51", 16, 16, 1, 16);
        let ext = inspect(&c12, &jpeg(0xc1, 12, 16, 16, &[0x11], 0, 0));
        assert!(ext.unsupported.unwrap().contains("12-bit"));
        let mut rgb = coding("1.2.840.10008.1.2.4.50", 16, 16, 3, 8);
        rgb.stored_photometric = Photometric::Rgb;
        let sub = inspect(&rgb, &jpeg(0xc0, 8, 16, 16, &[0x22, 0x11, 0x11], 0, 0));
        assert!(sub.unsupported.is_some());
        rgb.stored_photometric = Photometric::YbrFull422;
        let conv = inspect(&rgb, &jpeg(0xc0, 8, 16, 16, &[0x22, 0x11, 0x11], 0, 0));
        assert_eq!(conv.unsupported, None);
    }

    #[test]
    fn jpeg2000_reversible_unquantized_is_lossless() {
        let c = coding("1.2.840.10008.1.2.4.91", 64, 32, 1, 16);
        let rev = inspect(&c, &j2k(64, 32, &[(12, true)], 1, 0));
        assert_eq!(
            rev,
            StreamFacts {
                lossless: true,
                unsupported: None
            }
        );
        let irr = inspect(&c, &j2k(64, 32, &[(12, true)], 0, 2));
        assert_eq!(
            irr,
            StreamFacts {
                lossless: false,
                unsupported: None
            }
        );
        let deep = inspect(&c, &j2k(64, 32, &[(17, false)], 1, 0));
        assert!(deep.unsupported.unwrap().contains("17-bit"));
        let wrong = inspect(&c, &j2k(32, 32, &[(12, false)], 1, 0));
        assert!(wrong.unsupported.unwrap().contains("32x32x1"));
        let garbage = inspect(&c, b"\0\0\0\0");
        assert!(garbage.unsupported.unwrap().contains("SOC"));
        let truncated = inspect(&c, &j2k(64, 32, &[(12, false)], 1, 0)[..20]);
        assert!(truncated.unsupported.unwrap().contains("truncated"));
    }

    #[test]
    fn codestreams_without_their_end_marker_stay_on_the_cpu() {
        let c = coding("1.2.840.10008.1.2.4.90", 64, 32, 1, 16);
        let full = j2k(64, 32, &[(12, false)], 1, 0);
        assert_eq!(inspect(&c, &full).unsupported, None);
        let mut padded = full.clone();
        padded.push(0);
        assert_eq!(inspect(&c, &padded).unsupported, None);
        let cut = inspect(&c, &full[..full.len() - 1]);
        assert!(cut.unsupported.unwrap().contains("end-of-image"));
        let l = coding("1.2.840.10008.1.2.4.70", 256, 256, 1, 16);
        let jpeg = jpeg(0xc3, 12, 256, 256, &[0x11], 1, 0);
        assert_eq!(inspect(&l, &jpeg).unsupported, None);
        assert!(inspect(&l, &jpeg[..jpeg.len() - 3]).unsupported.is_some());
    }

    #[test]
    fn the_route_follows_the_policy() {
        let lossless = StreamFacts {
            lossless: true,
            unsupported: None,
        };
        let lossy = StreamFacts {
            lossless: false,
            unsupported: None,
        };
        let mut r = GpuRoute {
            jpeg2000: true,
            jpeg_lossless: true,
            jpeg_dct: true,
            all: false,
        };
        assert!(r.accepts(GpuCodec::Jpeg2000, &lossless).is_ok());
        assert!(r
            .accepts(GpuCodec::Jpeg2000, &lossy)
            .unwrap_err()
            .contains("lossy"));
        assert!(r.accepts(GpuCodec::JpegDct, &lossy).is_err());
        // Lossless JPEG is exact (from 256x256) but slower on the GPU: only with "all".
        assert!(r.accepts(GpuCodec::JpegLossless, &lossless).is_err());
        r.all = true;
        assert!(r.accepts(GpuCodec::JpegDct, &lossy).is_ok());
        assert!(r.accepts(GpuCodec::JpegLossless, &lossless).is_ok());
        assert!(GpuRoute::NONE
            .accepts(GpuCodec::Jpeg2000, &lossless)
            .is_err());
    }
}
