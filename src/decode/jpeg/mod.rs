//! Pure-Rust sequential-DCT JPEG decoder that reproduces DCMTK 3.6.7 sample values exactly.
//!
//! DICOM JPEG Baseline (1.2.840.10008.1.2.4.50) and JPEG Extended (1.2.840.10008.1.2.4.51,
//! 8- and 12-bit) pixel data must decode to the same stored values as `dcmdjpeg`/`dcmj2pnm`.
//! DCMTK decodes with its bundled IJG libjpeg 6b (8- and 12-bit builds) using the library
//! defaults, so this module ports exactly those algorithms:
//!
//! * entropy decoding and error recovery of `jdhuff.c`/`jdshuff.c`/`jdmarker.c` (a corrupt
//!   segment is zero-filled the way IJG does it, restart resynchronisation included);
//! * the ISLOW integer IDCT of `jidctint.c` (`CONST_BITS` 13, `PASS1_BITS` 2 for 8-bit and 1
//!   for 12-bit, with IJG's wrap-around `range_limit` table);
//! * the "fancy" triangle-filter upsampling of `jdsample.c` for 2h1v and 2h2v chroma (box
//!   replication for every other integral ratio, and for components at most 2 samples wide);
//!   DCMTK never disables `do_fancy_upsampling`, so the merged upsampler of `jdmerge.c` is
//!   never used;
//! * the fixed-point YCbCr→RGB conversion of `jdcolor.c`.
//!
//! Colour rule (DCMTK `djdijg8.cc`/`djdijg12.cc`, default `+cp`): when the DICOM
//! Photometric Interpretation is YBR_FULL, YBR_FULL_422 or YBR_PARTIAL_422, DCMTK forces
//! `jpeg_color_space = JCS_YCbCr` and `out_color_space = JCS_RGB` for 3-component images,
//! whatever JFIF/Adobe markers or component IDs say; otherwise it sets both to `JCS_UNKNOWN`,
//! which returns the decoded components untouched. The caller passes that decision as
//! `convert_ycbcr`.
//!
//! Lossless JPEG (process 14, SOF3) follows DCMTK's lossless IJG extension (see
//! [`lossless`]), point transform included.
//!
//! Progressive, arithmetic-coded and hierarchical JPEG are rejected with an "unsupported"
//! error; files DCMTK cannot decode either (missing EOI, truncated headers) are rejected too,
//! so both decoders fail on the same inputs.

mod color;
mod frame;
mod huffman;
mod idct;
mod lossless;
pub(crate) mod markers;
mod scan;
mod upsample;

#[cfg(test)]
mod tests;

use frame::Frame;
use huffman::HuffSpec;
use lossless::LosslessFrame;
use markers::Cursor;

/// Geometry of a decoded image; the samples themselves go to the caller's buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JpegImage {
    pub width: u32,
    pub height: u32,
    pub components: u8,
    /// 8 or 12 for DCT frames; 2 to 16 for lossless frames.
    pub precision: u8,
    /// True when YCbCr was converted to RGB (3 components, `convert_ycbcr`, DCT frames).
    pub converted_to_rgb: bool,
    /// Partial decoding only: the data ended early and only these first rows were decoded
    /// (the rest are 0). `Some(height)` when every row decoded but the end-of-image is missing.
    pub complete_rows: Option<u32>,
}

/// Why a JPEG stream could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JpegError {
    pub message: String,
    /// The data ended before the stream did (no EOI; IJG would wait for more bytes).
    pub truncated: bool,
}

impl JpegError {
    fn truncated(message: &str) -> Self {
        JpegError {
            message: message.into(),
            truncated: true,
        }
    }
}

impl std::fmt::Display for JpegError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "JPEG: {}", self.message)
    }
}

impl std::error::Error for JpegError {}

type Result<T, E = JpegError> = std::result::Result<T, E>;

fn err<T>(msg: impl Into<String>) -> Result<T> {
    Err(JpegError {
        message: msg.into(),
        truncated: false,
    })
}

/// Every table and setting that marker segments define and scans use.
#[derive(Default)]
struct Tables {
    dc: [Option<HuffSpec>; 4],
    ac: [Option<HuffSpec>; 4],
    quant: [Option<[u16; 64]>; 4],
    restart_interval: u16,
}

/// Decodes one JPEG stream (one DICOM frame).
///
/// `convert_ycbcr`: when the image has 3 components, convert YCbCr to RGB as IJG does
/// (DCMTK's default when the DICOM PhotometricInterpretation is YBR_*); when false, return
/// the component samples unconverted (but still upsampled).
///
/// Lossless frames are never colour-converted (DCMTK decodes them with `JCS_UNKNOWN`
/// unless told otherwise, and the DICOM header then says RGB).
///
/// `out` is cleared and receives interleaved samples, native-endian: one byte per sample for
/// precision up to 8, two bytes (u16) per sample above.
pub fn decode(data: &[u8], convert_ycbcr: bool, out: &mut Vec<u8>) -> Result<JpegImage, JpegError> {
    decode_with(data, convert_ycbcr, out, false)
}

/// [`decode`], and with `partial` a stream whose data ends early (a frame cut short) decodes
/// to the rows before the cut, the rest 0, as DCMTK's "incomplete JPEG data" workaround
/// (`+wi`) renders it: whole rows for lossless, whole iMCU rows for DCT, single-scan images
/// only. `JpegImage::complete_rows` says how many rows are real.
pub fn decode_with(
    data: &[u8],
    convert_ycbcr: bool,
    out: &mut Vec<u8>,
    partial: bool,
) -> Result<JpegImage, JpegError> {
    out.clear();
    let (decoded, missing_eoi) = read_stream(data, partial)?;
    match decoded {
        Decoded::Dct(frame) => {
            let converted_to_rgb = convert_ycbcr && frame.comps.len() == 3;
            let planes = frame.reconstruct_planes()?;
            upsample::write_output(&frame, &planes, converted_to_rgb, out)?;
            let complete_rows = frame.complete_rows.or(missing_eoi.then_some(frame.height));
            if let Some(rows) = complete_rows {
                let row_bytes = out.len() / frame.height.max(1);
                out.get_mut(rows * row_bytes..).unwrap_or_default().fill(0);
            }
            Ok(JpegImage {
                width: frame.width as u32,
                height: frame.height as u32,
                components: frame.comps.len() as u8,
                precision: frame.precision,
                converted_to_rgb,
                complete_rows: complete_rows.map(|r| r as u32),
            })
        }
        Decoded::Lossless(frame) => {
            frame.write_output(out);
            Ok(JpegImage {
                width: frame.width as u32,
                height: frame.height as u32,
                components: frame.ids.len() as u8,
                precision: frame.precision,
                converted_to_rgb: false,
                complete_rows: frame
                    .complete_rows
                    .or(missing_eoi.then_some(frame.height))
                    .map(|r| r as u32),
            })
        }
    }
}

/// A frame whose scans have all been entropy-decoded.
enum Decoded {
    /// Sequential DCT: coefficients, still to be transformed and upsampled.
    Dct(Frame),
    /// Lossless: output samples.
    Lossless(LosslessFrame),
}

/// Walks the marker stream (IJG `read_markers`) and entropy-decodes every scan, into the
/// frame's coefficient arrays (DCT) or sample planes (lossless). With `partial`, a single-scan
/// image whose data ends early is returned as far as it decoded; the flag returned is true
/// when it ended after its scan, only the end-of-image marker missing.
fn read_stream(data: &[u8], partial: bool) -> Result<(Decoded, bool)> {
    // IJG's first_marker(): the stream must start with SOI, no garbage allowed before it.
    if data.get(..2) != Some(&[0xFF, markers::SOI][..]) {
        return err("not a JPEG stream (no SOI marker)");
    }
    let mut cur = Cursor::new(data, 2);
    let mut tables = Tables::default();
    let mut frame: Option<Decoded> = None;
    let mut scans = 0usize;
    let mut single_scan = false;
    let mut pending: Option<u8> = None;
    loop {
        let marker = match pending.take() {
            Some(m) => m,
            None => match cur.next_marker() {
                Ok(m) => m,
                Err(e) if e.truncated && partial && single_scan && scans > 0 => {
                    if let Some(frame) = frame {
                        return Ok((frame, true));
                    }
                    return Err(e);
                }
                Err(e) => return Err(e),
            },
        };
        match marker {
            markers::SOS => {
                let Some(frame) = frame.as_mut() else {
                    return err("SOS marker before any SOF marker");
                };
                let ids: Vec<u8> = match frame {
                    Decoded::Dct(f) => f.comps.iter().map(|c| c.id).collect(),
                    Decoded::Lossless(f) => f.ids.clone(),
                };
                let header = markers::read_sos(&mut cur, &ids)?;
                if scans == 0 {
                    // IJG: a first scan holding every component means a single-scan image.
                    single_scan = header.comps.len() == ids.len();
                } else if single_scan {
                    return err("unexpected second scan in a single-scan image (EOI expected)");
                }
                // Partial decoding only makes sense for an image whose one scan holds it all.
                let partial = partial && single_scan;
                let (pos, next) = match frame {
                    Decoded::Dct(f) => {
                        scan::decode_scan(f, &header, &tables, data, cur.pos, partial)?
                    }
                    Decoded::Lossless(f) => {
                        lossless::decode_scan(f, &header, &tables, data, cur.pos, partial)?
                    }
                };
                let cut = match frame {
                    Decoded::Dct(f) => f.complete_rows.is_some(),
                    Decoded::Lossless(f) => f.complete_rows.is_some(),
                };
                cur.pos = pos;
                pending = next;
                scans += 1;
                if cut {
                    break;
                }
            }
            markers::EOI => break,
            m if markers::is_sof(m) => {
                if frame.is_some() {
                    return err("duplicate SOF marker");
                }
                let header = markers::read_sof(&mut cur, m)?;
                frame = Some(if header.lossless {
                    Decoded::Lossless(LosslessFrame::new(header)?)
                } else {
                    Decoded::Dct(Frame::new(header)?)
                });
            }
            m => markers::read_table_or_skip(&mut cur, m, &mut tables)?,
        }
    }
    match frame {
        Some(frame) if scans > 0 => Ok((frame, false)),
        _ => err("no image data before EOI"),
    }
}
