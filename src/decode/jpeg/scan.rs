//! Decoding of one scan: MCU layout (IJG `per_scan_setup`), restart handling and Huffman
//! decoding of 8x8 coefficient blocks (IJG `jdshuff.c` `decode_mcu`).

use super::frame::Frame;
use super::huffman::{BitReader, Bits, HuffTable};
use super::markers::{ScanHeader, NATURAL_ORDER};
use super::{err, Result, Tables};

/// IJG's D_MAX_DATA_UNITS_IN_MCU.
const MAX_BLOCKS_IN_MCU: usize = 10;

/// One block position inside an MCU.
struct McuBlock {
    /// Index into the scan's component list.
    slot: usize,
    dx: usize,
    dy: usize,
}

/// Per scan component: frame component index and its decoding tables.
struct ScanTables {
    index: usize,
    dc: HuffTable,
    ac: HuffTable,
}

/// Decodes the entropy-coded data that follows an SOS header at `pos`. Returns the byte
/// position after it and the marker that ended it, if already read.
/// `partial`: when the data ends inside the scan, keep what was decoded (IJG suspends there and
/// DCMTK's `+wi` keeps the scanlines already output: whole iMCU rows) instead of failing; the
/// frame's `complete_rows` then says how many rows are good.
pub(super) fn decode_scan(
    frame: &mut Frame,
    header: &ScanHeader,
    tables: &Tables,
    data: &[u8],
    pos: usize,
    partial: bool,
) -> Result<(usize, Option<u8>)> {
    let scan = prepare_tables(frame, header, tables)?;
    let interleaved = scan.len() > 1;
    let (mcus_x, mcus_y) = if interleaved {
        (frame.mcus_x, frame.mcus_y)
    } else {
        let c = frame_comp(frame, header_index(header, 0)?)?;
        (c.width_in_blocks, c.height_in_blocks)
    };
    let layout = mcu_layout(frame, &scan, interleaved)?;
    let mut br = BitReader::new(data, pos);
    let mut last_dc = [0i32; 4];
    let interval = u32::from(tables.restart_interval);
    let mut restarts_to_go = interval;
    let mut next_restart = 0u8;
    for my in 0..mcus_y {
        for mx in 0..mcus_x {
            if interval != 0 && restarts_to_go == 0 {
                br.restart(next_restart)?;
                next_restart = (next_restart + 1) & 7;
                last_dc = [0; 4];
                restarts_to_go = interval;
            }
            // After the data ran out, IJG leaves the rest of the segment's blocks zero.
            if !br.bits.insufficient {
                let origin = McuOrigin {
                    mx,
                    my,
                    interleaved,
                };
                match decode_mcu(frame, &scan, &layout, origin, &mut br, &mut last_dc) {
                    Ok(()) => {}
                    Err(e) if e.truncated && partial => {
                        // Rows of the iMCU rows before this one (8 rows of blocks, times the
                        // vertical sampling of an interleaved scan).
                        let rows_per_mcu = if interleaved { 8 * frame.max_v } else { 8 };
                        frame.complete_rows = Some((my * rows_per_mcu).min(frame.height));
                        return Ok((data.len(), None));
                    }
                    Err(e) => return Err(e),
                }
            }
            restarts_to_go = restarts_to_go.wrapping_sub(1);
        }
    }
    Ok(br.into_parts())
}

fn header_index(header: &ScanHeader, slot: usize) -> Result<usize> {
    match header.comps.get(slot) {
        Some(c) => Ok(c.index),
        None => err("empty scan"),
    }
}

fn frame_comp(frame: &Frame, index: usize) -> Result<&super::frame::Component> {
    match frame.comps.get(index) {
        Some(c) => Ok(c),
        None => err("scan component out of range"),
    }
}

/// Latches quantization tables and builds the Huffman decoders, as IJG's start of input
/// pass does (tables are rebuilt for each scan, so DHT between scans takes effect).
fn prepare_tables(
    frame: &mut Frame,
    header: &ScanHeader,
    tables: &Tables,
) -> Result<Vec<ScanTables>> {
    let mut scan = Vec::with_capacity(header.comps.len());
    for sc in &header.comps {
        frame.latch_quant_table(sc.index, &tables.quant)?;
        let dc = lookup_table(&tables.dc, sc.dc, "DC")?;
        let ac = lookup_table(&tables.ac, sc.ac, "AC")?;
        scan.push(ScanTables {
            index: sc.index,
            dc: HuffTable::build(dc)?,
            ac: HuffTable::build(ac)?,
        });
    }
    Ok(scan)
}

fn lookup_table<'t>(
    specs: &'t [Option<super::huffman::HuffSpec>; 4],
    index: u8,
    kind: &str,
) -> Result<&'t super::huffman::HuffSpec> {
    match specs.get(usize::from(index)) {
        Some(Some(spec)) => Ok(spec),
        _ => err(format!("scan uses undefined {kind} Huffman table {index}")),
    }
}

/// Block order inside one MCU: component by component, rows of `h` blocks, `v` rows.
fn mcu_layout(frame: &Frame, scan: &[ScanTables], interleaved: bool) -> Result<Vec<McuBlock>> {
    if !interleaved {
        return Ok(vec![McuBlock {
            slot: 0,
            dx: 0,
            dy: 0,
        }]);
    }
    let mut layout = Vec::new();
    for (slot, st) in scan.iter().enumerate() {
        let c = frame_comp(frame, st.index)?;
        for dy in 0..c.v {
            for dx in 0..c.h {
                layout.push(McuBlock { slot, dx, dy });
            }
        }
    }
    if layout.len() > MAX_BLOCKS_IN_MCU {
        return err("sampling factors give more than 10 blocks per MCU");
    }
    Ok(layout)
}

#[derive(Clone, Copy)]
struct McuOrigin {
    mx: usize,
    my: usize,
    interleaved: bool,
}

fn decode_mcu(
    frame: &mut Frame,
    scan: &[ScanTables],
    layout: &[McuBlock],
    origin: McuOrigin,
    br: &mut BitReader,
    last_dc: &mut [i32; 4],
) -> Result<()> {
    for b in layout {
        let (Some(st), Some(dc_pred)) = (scan.get(b.slot), last_dc.get_mut(b.slot)) else {
            return err("internal: MCU layout out of range");
        };
        let Some(comp) = frame.comps.get_mut(st.index) else {
            return err("internal: scan component out of range");
        };
        let (bx, by) = if origin.interleaved {
            (origin.mx * comp.h + b.dx, origin.my * comp.v + b.dy)
        } else {
            (origin.mx, origin.my)
        };
        let offset = (by * comp.blocks_per_line + bx) * 64;
        let Some(block) = comp.coeffs.get_mut(offset..offset + 64) else {
            return err("internal: block outside coefficient buffer");
        };
        let Ok(block) = <&mut [i16; 64]>::try_from(block) else {
            return err("internal: block size");
        };
        let mut bits = br.bits;
        let result = decode_block(br, &mut bits, &st.dc, &st.ac, dc_pred, block);
        br.bits = bits;
        result?;
    }
    Ok(())
}

/// One block: DC difference then run-length coded AC coefficients in zigzag order.
/// Coefficients are stored as IJG's 16-bit JCOEF (truncating casts included).
#[inline(always)]
fn decode_block(
    br: &mut BitReader,
    bits: &mut Bits,
    dc: &HuffTable,
    ac: &HuffTable,
    dc_pred: &mut i32,
    block: &mut [i16; 64],
) -> Result<()> {
    let s = u32::from(br.decode(bits, dc)?);
    let diff = match s {
        0 => 0,
        1..=16 => br.receive_extend(bits, s)?,
        _ => return err(format!("corrupt DC coefficient size {s}")),
    };
    *dc_pred = dc_pred.wrapping_add(diff);
    block[0] = *dc_pred as i16;
    let mut k = 1usize;
    while k < 64 {
        if let Some((run, value)) = br.decode_ac_fast(bits, ac)? {
            k += run;
            block[natural(k)] = value;
            k += 1;
            continue;
        }
        let rs = br.decode(bits, ac)?;
        let run = usize::from(rs >> 4);
        let size = u32::from(rs & 15);
        if size != 0 {
            k += run;
            block[natural(k)] = br.receive_extend(bits, size)? as i16;
        } else if run == 15 {
            k += 15;
        } else {
            break;
        }
        k += 1;
    }
    Ok(())
}

/// Natural-order position of zigzag index `k` (at most 78 after a corrupt run); IJG's
/// table maps everything past 63 to 63.
#[inline(always)]
fn natural(k: usize) -> usize {
    usize::from(NATURAL_ORDER[k.min(NATURAL_ORDER.len() - 1)]) & 63
}
