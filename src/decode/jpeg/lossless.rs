//! Lossless JPEG (process 14, SOF3, Huffman coded) as DCMTK 3.6.7 decodes it: the lossless
//! extension of IJG 6b that DCMTK bundles (`jdlhuff.c` entropy decoding, `jddiffct.c` row and
//! restart control, `jdpred.c` undifferencing, `jdscale.c` point-transform scaling).
//!
//! * Differences are decoded row by row (one MCU is one sample of each scan component; only
//!   sampling factors of 1 are supported, which is what DICOM encoders write).
//! * The first row of a scan and of every restart interval is predicted from its left
//!   neighbour, starting at `2^(P-Pt-1)`; every later row predicts its first sample from the
//!   one above and the rest with the scan's selection value (T.81 Table H.1). Reconstruction
//!   is modulo 2^16 and works on the *reduced* values (before the point transform).
//! * Output samples are the reconstructed values shifted left by the point transform Pt
//!   (T.81 H.1.2.1), cast to IJG's sample type: 8 bits for P <= 8, 16 bits otherwise.
//! * Damaged data behaves as in IJG: once a marker interrupts the entropy-coded data, the
//!   rest of that row decodes from zero bits and every following row of the restart interval
//!   comes out as the initial predictor `2^(P-Pt-1) << Pt`.

use super::huffman::{BitReader, HuffTable};
use super::markers::{FrameHeader, ScanHeader};
use super::{err, Result, Tables};

/// Largest accepted `width * height * components` (as for DCT frames).
const MAX_SAMPLES: usize = 1 << 30;

/// A lossless frame being decoded: one plane of output samples per component.
pub(super) struct LosslessFrame {
    pub precision: u8,
    pub width: usize,
    pub height: usize,
    pub ids: Vec<u8>,
    /// Output samples (after the point transform), row-major, one plane per component.
    planes: Vec<Vec<u16>>,
    /// Rows fully decoded before the data ended (partial decoding only).
    pub complete_rows: Option<usize>,
}

impl LosslessFrame {
    pub fn new(header: FrameHeader) -> Result<Self> {
        let width = usize::from(header.width);
        let height = usize::from(header.height);
        let n = header.comps.len();
        if width.saturating_mul(height).saturating_mul(n) > MAX_SAMPLES {
            return err(format!("image too large ({width}x{height}x{n})"));
        }
        if header.comps.iter().any(|c| c.h != 1 || c.v != 1) {
            return err("unsupported: lossless JPEG with sampling factors other than 1");
        }
        Ok(LosslessFrame {
            precision: header.precision,
            width,
            height,
            ids: header.comps.iter().map(|c| c.id).collect(),
            planes: vec![vec![0; width * height]; n],
            complete_rows: None,
        })
    }

    /// Writes the interleaved samples: one byte each for precision <= 8, else a
    /// native-endian u16.
    pub fn write_output(&self, out: &mut Vec<u8>) {
        let wide = self.precision > 8;
        let pixels = self.width * self.height;
        out.clear();
        out.reserve(pixels * self.planes.len() * if wide { 2 } else { 1 });
        for i in 0..pixels {
            for plane in &self.planes {
                let v = plane.get(i).copied().unwrap_or(0);
                if wide {
                    out.extend_from_slice(&v.to_ne_bytes());
                } else {
                    out.push(v as u8);
                }
            }
        }
    }
}

/// Per scan component: plane index, Huffman table, and the undifferencing state.
struct ScanComp {
    index: usize,
    table: HuffTable,
    /// Differences of the current row.
    diff: Vec<i32>,
    /// Reconstructed (reduced) values of the previous and current row.
    prev: Vec<i32>,
    cur: Vec<i32>,
    /// IJG switches to the first-row undifferencer at the start of a scan and of every
    /// restart interval, and after the data ran out.
    first_row: bool,
}

/// Decodes the entropy-coded data of one lossless scan that starts at `pos`. Returns the byte
/// position after it and the marker that ended it, if already read. `partial`: when the data
/// ends inside the scan, keep the rows decoded before (IJG suspends there; DCMTK's `+wi`
/// keeps the scanlines output so far, the rest of its frame buffer stays 0) instead of failing.
pub(super) fn decode_scan(
    frame: &mut LosslessFrame,
    header: &ScanHeader,
    tables: &Tables,
    data: &[u8],
    pos: usize,
    partial: bool,
) -> Result<(usize, Option<u8>)> {
    let (psv, pt) = (header.ss, header.al);
    // IJG `predict_start_pass` (JERR_BAD_LOSSLESS).
    if !(1..=7).contains(&psv) || header.se != 0 || header.ah != 0 || pt > 15 {
        return err(format!(
            "bad lossless scan parameters Ss={psv} Se={} Ah={} Al={pt}",
            header.se, header.ah
        ));
    }
    if pt >= frame.precision {
        return err(format!(
            "point transform {pt} leaves nothing of {}-bit samples",
            frame.precision
        ));
    }
    let width = frame.width;
    let mut comps = Vec::with_capacity(header.comps.len());
    for sc in &header.comps {
        let spec = match tables.dc.get(usize::from(sc.dc)) {
            Some(Some(spec)) => spec,
            _ => return err(format!("scan uses undefined DC Huffman table {}", sc.dc)),
        };
        comps.push(ScanComp {
            index: sc.index,
            table: HuffTable::build(spec)?,
            diff: vec![0; width],
            prev: vec![0; width],
            cur: vec![0; width],
            first_row: true,
        });
    }
    // IJG `start_input_pass`: restarts must fall on row boundaries (one MCU per column).
    let interval = usize::from(tables.restart_interval);
    if interval % width != 0 {
        return err(format!(
            "restart interval {interval} is not a multiple of the {width} samples of a row"
        ));
    }
    let restart_rows = interval / width;
    let mut rows_to_go = restart_rows;
    let mut next_restart = 0u8;
    let initial = 1i32 << (frame.precision - pt - 1);
    let narrow = frame.precision <= 8;
    let mut br = BitReader::new(data, pos);
    for y in 0..frame.height {
        if interval != 0 && rows_to_go == 0 {
            br.restart(next_restart)?;
            next_restart = (next_restart + 1) & 7;
            comps.iter_mut().for_each(|c| c.first_row = true);
            rows_to_go = restart_rows;
        }
        if br.bits.insufficient {
            // IJG `decode_mcus` after the data ran out: zero differences, predictor reset.
            for c in comps.iter_mut() {
                c.diff.fill(0);
                c.first_row = true;
            }
        } else {
            match decode_row(&mut br, &mut comps, width) {
                Ok(()) => {}
                Err(e) if e.truncated && partial => {
                    for plane in frame.planes.iter_mut() {
                        plane.get_mut(y * width..).unwrap_or_default().fill(0);
                    }
                    frame.complete_rows = Some(y);
                    return Ok((data.len(), None));
                }
                Err(e) => return Err(e),
            }
        }
        rows_to_go = rows_to_go.wrapping_sub(1);
        for c in comps.iter_mut() {
            undifference(c, psv, initial);
            let Some(out) = frame
                .planes
                .get_mut(c.index)
                .and_then(|p| p.get_mut(y * width..(y + 1) * width))
            else {
                return err("internal: lossless plane size");
            };
            // IJG `jdscale.c`: shift up by Pt, cast to JSAMPLE.
            for (o, &v) in out.iter_mut().zip(&c.cur) {
                let s = (v as u32) << pt;
                *o = if narrow { s as u8 as u16 } else { s as u16 };
            }
            std::mem::swap(&mut c.prev, &mut c.cur);
        }
    }
    Ok(br.into_parts())
}

/// IJG `jdlhuff.c` `decode_mcus` for one row: each MCU holds one difference per component.
fn decode_row(br: &mut BitReader, comps: &mut [ScanComp], width: usize) -> Result<()> {
    let mut bits = br.bits;
    for x in 0..width {
        for c in comps.iter_mut() {
            let s = u32::from(br.decode(&mut bits, &c.table)?);
            let diff = match s {
                0 => 0,
                1..=15 => br.receive_extend(&mut bits, s)?,
                16 => 32768, // no magnitude bits follow
                _ => {
                    br.bits = bits;
                    return err(format!("corrupt lossless difference category {s}"));
                }
            };
            if let Some(d) = c.diff.get_mut(x) {
                *d = diff;
            }
        }
    }
    br.bits = bits;
    Ok(())
}

/// IJG `jdpred.c`: reconstructs `c.cur` from `c.diff` and the previous row `c.prev`.
fn undifference(c: &mut ScanComp, psv: u8, initial: i32) {
    let (diff, prev, cur) = (&c.diff, &c.prev, &mut c.cur);
    let n = cur.len().min(diff.len()).min(prev.len());
    if n == 0 {
        return;
    }
    if c.first_row || psv == 1 {
        // 1-D horizontal prediction; the first column from 2^(P-Pt-1) on a first row,
        // from the sample above otherwise.
        let mut ra = (diff[0] + if c.first_row { initial } else { prev[0] }) & 0xFFFF;
        cur[0] = ra;
        for x in 1..n {
            ra = (diff[x] + ra) & 0xFFFF;
            cur[x] = ra;
        }
        c.first_row = false;
        return;
    }
    let mut rb = prev[0];
    let mut ra = (diff[0] + rb) & 0xFFFF;
    cur[0] = ra;
    for x in 1..n {
        let rc = rb;
        rb = prev[x];
        let p = match psv {
            2 => rb,
            3 => rc,
            4 => ra + rb - rc,
            5 => ra + ((rb - rc) >> 1),
            6 => rb + ((ra - rc) >> 1),
            _ => (ra + rb) >> 1,
        };
        ra = (diff[x] + p) & 0xFFFF;
        cur[x] = ra;
    }
}
