//! Overlay planes (groups 6000-601E, PS3.3 C.9.2) read as DCMTK 3.6.7 reads them
//! (`dcmimgle/diovpln.cc`): a plane counts only with Overlay Origin, Rows, Columns, Bits
//! Allocated and Bit Position present; its bits come from Overlay Data (one bit per pixel,
//! least significant first in each 16-bit word) or, without Overlay Data, from a bit of the
//! stored pixel values (the retired "overlay in unused high bits"); type `R` is a region of
//! interest, anything else graphics; multi-frame overlays cover Number of Frames in Overlay
//! frames from Image Frame Origin.

use std::sync::Arc;

use dicom_core::Tag;
use dicom_object::InMemDicomObject;

use super::info::{opt_int, opt_str};

/// How a plane changes the rendered pixels (DCMTK's default modes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum OverlayMode {
    /// Graphics ('G'): pixels under a set bit become white (DCMTK "Replace").
    Graphic,
    /// Region of interest ('R'): pixels of the plane's area whose bit is clear are darkened
    /// to a sixteenth (DCMTK "Region of Interest": `v >> 4` of the 8-bit output).
    RegionOfInterest,
}

/// Where a plane's bits are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OverlayBits {
    /// Overlay Data: a bit stream, `rows * columns` bits per overlay frame.
    Data(Arc<Vec<u8>>),
    /// A bit of each stored pixel value (the pixel data's container, before masking).
    Embedded { bit: u16 },
}

/// One overlay plane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverlayPlane {
    /// 0x6000, 0x6002, ... 0x601E.
    pub group: u16,
    pub rows: u16,
    pub columns: u16,
    /// Position of the plane's first pixel in the image, 0-based (Overlay Origin - 1): may be
    /// negative or past the image, the plane is clipped.
    pub top: i32,
    pub left: i32,
    /// Image frames covered: `frame_origin .. frame_origin + frames` (0-based).
    pub frame_origin: u32,
    pub frames: u32,
    pub mode: OverlayMode,
    pub bits: OverlayBits,
    pub label: Option<String>,
}

impl OverlayPlane {
    /// Whether the plane applies to image frame `frame` (0-based), and its first bit there.
    pub fn first_bit(&self, frame: u32) -> Option<u64> {
        if frame < self.frame_origin || frame - self.frame_origin >= self.frames {
            return None;
        }
        // DCMTK's reset(): a plane wholly left of or above the image shows nothing.
        if self.left + self.columns as i32 <= 0 || self.top + self.rows as i32 <= 0 {
            return None;
        }
        Some((frame - self.frame_origin) as u64 * self.rows as u64 * self.columns as u64)
    }

    /// What `inspect` says about the plane.
    pub fn describe(&self) -> String {
        format!(
            "{:04X}: {}x{} at row {}, column {}, {}, {}{}{}",
            self.group,
            self.columns,
            self.rows,
            self.top + 1,
            self.left + 1,
            match self.mode {
                OverlayMode::Graphic => "graphics",
                OverlayMode::RegionOfInterest => "region of interest",
            },
            match self.bits {
                OverlayBits::Data(_) => "Overlay Data".to_string(),
                OverlayBits::Embedded { bit } => format!("bit {bit} of the pixel data"),
            },
            if self.frames > 1 || self.frame_origin > 0 {
                format!(
                    ", frames {}..{}",
                    self.frame_origin + 1,
                    self.frame_origin + self.frames
                )
            } else {
                String::new()
            },
            self.label
                .as_deref()
                .map(|l| format!(" \"{l}\""))
                .unwrap_or_default()
        )
    }
}

/// What the image says about its pixel data, for embedded planes.
pub struct PixelLayout {
    pub bits_allocated: u16,
    pub bits_stored: u16,
    pub high_bit: u16,
    pub rows: u32,
    pub cols: u32,
    pub frames: u32,
    /// Embedded overlays need the stored values in the slot (uncompressed pixel data).
    pub native: bool,
}

/// Reads every overlay plane of `obj`; planes DCMTK would refuse are left out, with a
/// warning when they are half there.
pub fn read_overlays(
    obj: &InMemDicomObject,
    pixels: &PixelLayout,
    warnings: &mut Vec<String>,
) -> Vec<OverlayPlane> {
    (0..16u16)
        .map(|k| 0x6000 + 2 * k)
        .filter_map(|group| read_plane(obj, group, pixels, warnings))
        .collect()
}

fn read_plane(
    obj: &InMemDicomObject,
    group: u16,
    pixels: &PixelLayout,
    warnings: &mut Vec<String>,
) -> Option<OverlayPlane> {
    let tag = |element: u16| Tag(group, element);
    let origin = obj.get(tag(0x0050))?;
    let origin: Vec<i64> = origin.to_multi_int::<i64>().ok()?;
    let (&top, left) = origin.split_first()?;
    let left = left.first().copied().unwrap_or(0);
    let mut warn = |what: &str| warnings.push(format!("overlay {group:04X}: {what}; not shown"));
    let (Some(rows), Some(columns), Some(_bits_allocated), Some(bit_position)) = (
        opt_int(obj, tag(0x0010)),
        opt_int(obj, tag(0x0011)),
        opt_int(obj, tag(0x0100)),
        opt_int(obj, tag(0x0102)),
    ) else {
        warn("Overlay Rows, Columns, Bits Allocated or Bit Position is missing");
        return None;
    };
    let (Ok(rows), Ok(columns)) = (u16::try_from(rows), u16::try_from(columns)) else {
        warn("Overlay Rows or Columns out of range");
        return None;
    };
    let frames = opt_int(obj, tag(0x0015))
        .filter(|&n| n >= 1)
        .map_or(1, |n| n.min(u32::MAX as i64) as u32);
    let mut frame_origin = opt_int(obj, tag(0x0051))
        .filter(|&n| n > 0)
        .map_or(0, |n| (n - 1).min(u32::MAX as i64) as u32);
    let mode = match opt_str(obj, tag(0x0040)).as_deref() {
        Some("R") => OverlayMode::RegionOfInterest,
        _ => OverlayMode::Graphic,
    };
    let data = obj
        .get(tag(0x3000))
        .and_then(|e| e.to_bytes().ok())
        .map(|b| b.into_owned())
        .filter(|b| !b.is_empty());
    let bits = match data {
        Some(data) => {
            // Separate data: one bit per pixel whatever Bits Allocated says (DCMTK corrects
            // it, CP 87); the bit position becomes 0.
            let needed = (frames as u64 * rows as u64 * columns as u64).div_ceil(8);
            if (data.len() as u64) < needed {
                warn(&format!(
                    "Overlay Data holds {} bytes, {needed} expected",
                    data.len()
                ));
                return None;
            }
            OverlayBits::Data(Arc::new(data))
        }
        None => {
            if !pixels.native {
                warn("embedded in compressed pixel data");
                return None;
            }
            // Embedded in the pixel data: Bits Allocated is the image's, the plane starts at
            // the first frame (Supplement 4), and its bit must lie outside the stored value.
            frame_origin = 0;
            let alloc = pixels.bits_allocated as i64;
            let bit = if bit_position >= alloc {
                alloc - 1
            } else {
                bit_position
            };
            let (high, stored) = (pixels.high_bit as i64, pixels.bits_stored as i64);
            if bit <= high && bit + stored > high {
                warn(&format!(
                    "Overlay Bit Position {bit} lies inside the stored pixel value"
                ));
                return None;
            }
            if rows as u32 != pixels.rows || columns as u32 != pixels.cols {
                warn("embedded overlay of another size than the image");
                return None;
            }
            if frames > pixels.frames {
                // DCMTK: the pixel data is too short for the overlay's frames.
                warn("embedded overlay with more frames than the image");
                return None;
            }
            OverlayBits::Embedded { bit: bit as u16 }
        }
    };
    Some(OverlayPlane {
        group,
        rows,
        columns,
        top: (top - 1).clamp(i32::MIN as i64, i32::MAX as i64) as i32,
        left: (left - 1).clamp(i32::MIN as i64, i32::MAX as i64) as i32,
        frame_origin,
        frames,
        mode,
        bits,
        label: opt_str(obj, tag(0x1500)),
    })
}
