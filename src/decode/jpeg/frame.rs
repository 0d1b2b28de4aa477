//! Frame geometry (IJG `initial_setup`), per-component coefficient storage, and the
//! inverse DCT of all blocks into per-component sample planes.

use super::idct;
use super::markers::FrameHeader;
use super::{err, Result};

/// Largest accepted `width * height * components`; rejects absurd headers before any
/// allocation.
const MAX_SAMPLES: usize = 1 << 30;

/// One image component and its whole-image coefficient array.
pub(super) struct Component {
    pub id: u8,
    pub h: usize,
    pub v: usize,
    tq: u8,
    /// Quantization table copied when the component's first scan starts (IJG latches it then,
    /// so a later DQT redefining the slot does not affect it).
    qtable: Option<[u16; 64]>,
    /// Blocks that hold image data (IJG `width_in_data_units`/`height_in_data_units`).
    pub width_in_blocks: usize,
    pub height_in_blocks: usize,
    /// Storage size in blocks, padded to whole interleaved MCUs.
    pub blocks_per_line: usize,
    /// Component size in samples before upsampling (IJG `downsampled_width/height`).
    pub ds_width: usize,
    pub ds_height: usize,
    /// 64 coefficients per block, natural order, row-major blocks.
    pub coeffs: Vec<i16>,
}

pub(super) struct Frame {
    pub precision: u8,
    pub width: usize,
    pub height: usize,
    pub max_h: usize,
    pub max_v: usize,
    /// MCUs of an interleaved scan.
    pub mcus_x: usize,
    pub mcus_y: usize,
    pub comps: Vec<Component>,
    /// Rows fully decoded before the data ended (partial decoding only, see `decode_with`).
    pub complete_rows: Option<usize>,
}

/// A component's decoded samples; `stride` is `width_in_blocks * 8`.
pub(super) struct Plane {
    pub samples: Vec<u16>,
    pub stride: usize,
}

fn div_ceil(a: usize, b: usize) -> usize {
    a.div_ceil(b.max(1))
}

impl Frame {
    pub fn new(header: FrameHeader) -> Result<Self> {
        let width = usize::from(header.width);
        let height = usize::from(header.height);
        let samples = width
            .saturating_mul(height)
            .saturating_mul(header.comps.len());
        if samples > MAX_SAMPLES {
            return err(format!(
                "image too large ({width}x{height}x{})",
                header.comps.len()
            ));
        }
        let max_h = header
            .comps
            .iter()
            .map(|c| usize::from(c.h))
            .max()
            .unwrap_or(1);
        let max_v = header
            .comps
            .iter()
            .map(|c| usize::from(c.v))
            .max()
            .unwrap_or(1);
        let mcus_x = div_ceil(width, 8 * max_h);
        let mcus_y = div_ceil(height, 8 * max_v);
        let mut comps = Vec::with_capacity(header.comps.len());
        for spec in &header.comps {
            let (h, v) = (usize::from(spec.h), usize::from(spec.v));
            // IJG (jdsample.c) only upsamples by integral factors.
            if max_h % h != 0 || max_v % v != 0 {
                return err("unsupported: fractional sampling ratios");
            }
            let blocks_per_line = mcus_x * h;
            let block_rows = mcus_y * v;
            let Some(len) = blocks_per_line
                .checked_mul(block_rows)
                .and_then(|n| n.checked_mul(64))
            else {
                return err("image too large");
            };
            comps.push(Component {
                id: spec.id,
                h,
                v,
                tq: spec.tq,
                qtable: None,
                width_in_blocks: div_ceil(width * h, 8 * max_h),
                height_in_blocks: div_ceil(height * v, 8 * max_v),
                blocks_per_line,
                ds_width: div_ceil(width * h, max_h),
                ds_height: div_ceil(height * v, max_v),
                coeffs: vec![0; len],
            });
        }
        Ok(Frame {
            precision: header.precision,
            width,
            height,
            max_h,
            max_v,
            mcus_x,
            mcus_y,
            comps,
            complete_rows: None,
        })
    }

    /// IJG `latch_quant_tables`: the first scan of a component fixes its table.
    pub fn latch_quant_table(
        &mut self,
        index: usize,
        quant: &[Option<[u16; 64]>; 4],
    ) -> Result<()> {
        let Some(comp) = self.comps.get_mut(index) else {
            return err("internal: component index out of range");
        };
        if comp.qtable.is_some() {
            return Ok(());
        }
        match quant.get(usize::from(comp.tq)) {
            Some(Some(table)) => {
                comp.qtable = Some(*table);
                Ok(())
            }
            _ => err(format!("quantization table {} is not defined", comp.tq)),
        }
    }

    /// Runs the ISLOW IDCT over every non-dummy block of every component.
    pub fn reconstruct_planes(&self) -> Result<Vec<Plane>> {
        self.comps
            .iter()
            .map(|c| c.reconstruct(self.precision))
            .collect()
    }
}

impl Component {
    fn reconstruct(&self, precision: u8) -> Result<Plane> {
        let stride = self.width_in_blocks * 8;
        let rows = self.height_in_blocks * 8;
        let mut samples = vec![0u16; stride * rows];
        // A component that never appeared in a scan keeps IJG's zeroed multiplier table.
        let q = self.qtable.unwrap_or([0; 64]).map(i32::from);
        let block_row_len = 64 * self.blocks_per_line;
        let coef_rows = self
            .coeffs
            .chunks_exact(block_row_len)
            .take(self.height_in_blocks);
        for (coef_row, out_rows) in coef_rows.zip(samples.chunks_exact_mut(stride * 8)) {
            for (bx, block) in coef_row
                .chunks_exact(64)
                .take(self.width_in_blocks)
                .enumerate()
            {
                let Ok(block) = <&[i16; 64]>::try_from(block) else {
                    return err("internal: block size");
                };
                let Some(out) = out_rows.get_mut(bx * 8..) else {
                    return err("internal: plane size");
                };
                if precision == 12 {
                    idct::idct_islow::<12>(block, &q, out, stride);
                } else {
                    idct::idct_islow::<8>(block, &q, out, stride);
                }
            }
        }
        Ok(Plane { samples, stride })
    }
}
