//! The CPU reference backend: the oracle every other backend is tested against. Grayscale
//! frames of up to 16 stored bits are rendered through a table compiled from the chain (a few
//! kept while consecutive frames share plans: one per window channel); deeper frames evaluate
//! the chain per pixel. Operators (resize, rotation, flips, inversion) then turn the rendering
//! into the output (`render::ops::apply`).

use std::sync::Arc;
use std::time::Instant;

use crate::backend::{
    Backend, BackendError, BackendInfo, RenderError, RenderOutcome, RenderTimings, RenderWorker,
};
use crate::memory::{HeapAllocator, HostAllocator, Slot};
use crate::render::chain::{self, FrameStats, Resolved, ResolvedVoi};
use crate::render::color;
use crate::render::error::PlanError;
use crate::render::ops::{self, OpTables, Operators};
use crate::render::plan::{Chain, FramePlan, GrayPlan, Window};
use crate::render::table::{self, IndexMap};

/// The CPU backend.
pub struct CpuBackend {
    allocator: Arc<HeapAllocator>,
    reason: String,
}

impl CpuBackend {
    /// A CPU backend; `reason` says why it was chosen.
    pub fn new(reason: impl Into<String>) -> Self {
        CpuBackend {
            allocator: Arc::new(HeapAllocator::default()),
            reason: reason.into(),
        }
    }
}

impl Backend for CpuBackend {
    fn info(&self) -> BackendInfo {
        BackendInfo {
            name: "cpu".into(),
            devices: vec![format!("{} CPU threads", crate::host::available_cores())],
            transfer: "none".into(),
            reason: self.reason.clone(),
            decode: Vec::new(),
            encoder: "cpu".into(),
            encoder_reason: "the CPU backend: the writer threads encode".into(),
        }
    }

    fn allocator(&self) -> Arc<dyn HostAllocator> {
        self.allocator.clone()
    }

    fn worker(&self, _index: usize) -> Result<Box<dyn RenderWorker>, BackendError> {
        Ok(Box::new(CpuRenderer::default()))
    }

    fn default_workers(&self) -> usize {
        // None: each writer renders its frame, then encodes and writes it, while the pixels are
        // still in that core's cache. Separate render workers were the bottleneck at 2000×2000
        // (a quarter of the cores rendering, 87–98 % busy, while the writers waited) and cost a
        // hand-off per frame: without them the H200 host did 805.8 vs 779.2 slices/s at 2000²,
        // p50 latency 23.4 vs 37.6 ms, and the 2-core box was 5–6 % faster.
        0
    }
}

/// Draws a frame's overlay planes on its rendering `out` (8-bit, the frame's own size: before
/// any operator, which then resizes or turns them with the image). Both backends call this, so
/// the bytes are the same. `input` holds the frame's stored values.
pub fn draw_overlay(
    plan: &FramePlan,
    overlay: &crate::render::overlay::FrameOverlay,
    input: &[u8],
    out: &mut [u8],
) {
    let bytes = match &plan.chain {
        Chain::Gray(g) => g.stored.bytes(),
        // DCMTK draws overlays on monochrome images only; window channels are left alone too.
        Chain::Channels(_) | Chain::Color(_) => return,
    };
    // Only planes embedded in the pixel data read the stored values (always uncompressed, so
    // the slot's input holds them).
    let embedded = overlay.planes.iter().any(|p| {
        matches!(
            p.plane.bits,
            crate::decode::overlay::OverlayBits::Embedded { .. }
        )
    });
    let input = if embedded && plan.encoded.is_none() {
        &input[..plan.input_bytes().min(input.len())]
    } else {
        &[]
    };
    let n = plan.rendered_bytes().min(out.len());
    let out = &mut out[..n];
    crate::render::overlay::apply(overlay, input, bytes, out, plan.cols, plan.rows);
}

/// Compiled tables kept per thread: one per window channel, and one more so that alternating
/// plans do not rebuild each other's.
const TABLES_KEPT: usize = 4;

/// Per-thread state: the last compiled tables, the last operators' tables, and scratch.
#[derive(Default)]
pub struct CpuRenderer {
    /// (plan, resolution, table), least recently used first.
    tables: Vec<(GrayPlan, Resolved, Vec<u8>)>,
    counts: Vec<u32>,
    /// The rendering before the operators.
    rendered: Vec<u8>,
    /// The operators' buffers.
    op_scratch: ops::Scratch,
    op_tables: Option<(Operators, OpTables)>,
    /// Decoded values and codec scratch for frames that arrive compressed.
    decoded: Vec<u8>,
    scratch: Vec<u8>,
}

impl RenderWorker for CpuRenderer {
    fn render(&mut self, plan: &FramePlan, slot: &mut Slot) -> Result<RenderOutcome, RenderError> {
        let start = Instant::now();
        if let Some(encoded) = &plan.encoded {
            // A frame left compressed for a GPU that is not rendering it (warm start, or a
            // frame the GPU codec refused): decode it here, in place.
            crate::decode::compressed::decode_slot_on_cpu(
                encoded,
                slot,
                &mut self.decoded,
                &mut self.scratch,
            )
            .map_err(RenderError::Decode)?;
        }
        let input = slot.input.bytes(plan.input_bytes());
        let out = slot.output.bytes_mut(plan.output_bytes());
        let window = self.render_bytes(plan, input, out)?;
        Ok(RenderOutcome {
            window,
            timings: RenderTimings {
                compute: start.elapsed(),
                ..Default::default()
            },
            device: None,
            png_rows: false,
            encoded: None,
        })
    }
}

impl CpuRenderer {
    /// Renders `input` (stored values) into `out` (8-bit, the output size: after the
    /// operators), overlays drawn, returning the window applied (the first channel's).
    pub fn render_bytes(
        &mut self,
        plan: &FramePlan,
        input: &[u8],
        out: &mut [u8],
    ) -> Result<Option<Window>, RenderError> {
        if input.len() < plan.input_bytes() || out.len() < plan.output_bytes() {
            return Err(RenderError::Internal("slot smaller than the frame".into()));
        }
        let Some(op) = plan.ops else {
            let window = self.render_chain(plan, input, out);
            if let (Ok(_), Some(overlay)) = (&window, &plan.overlay) {
                draw_overlay(plan, overlay, input, out);
            }
            return window.map_err(RenderError::Plan);
        };
        let mut rendered = std::mem::take(&mut self.rendered);
        rendered.resize(plan.rendered_bytes(), 0);
        let window = self.render_chain(plan, input, &mut rendered);
        if window.is_ok() {
            if let Some(overlay) = &plan.overlay {
                draw_overlay(plan, overlay, input, &mut rendered);
            }
            if self.op_tables.as_ref().is_none_or(|(o, _)| *o != op) {
                self.op_tables = Some((op, op.tables()));
            }
            if let Some((_, tables)) = &self.op_tables {
                ops::apply(
                    &op,
                    tables,
                    plan.channels(),
                    &rendered,
                    out,
                    &mut self.op_scratch,
                );
            }
        }
        self.rendered = rendered;
        window.map_err(RenderError::Plan)
    }

    /// The chain alone: stored values to the 8-bit rendering (`plan.rendered_bytes()`).
    fn render_chain(
        &mut self,
        plan: &FramePlan,
        input: &[u8],
        out: &mut [u8],
    ) -> Result<Option<Window>, PlanError> {
        match &plan.chain {
            Chain::Gray(g) => self.render_gray(g, plan.pixels(), input, out),
            Chain::Channels(gs) => self.render_channels(gs, plan.pixels(), input, out),
            Chain::Color(c) => color::render_color(c, plan.pixels(), input, out).map(|_| None),
        }
    }

    /// The table compiled from `g` resolved as `r`: kept, or built (and kept, evicting the
    /// least recently used). The table used last is the last in `self.tables`.
    fn table(&mut self, g: &GrayPlan, r: &Resolved, map: IndexMap) {
        if let Some(i) = self.tables.iter().position(|(p, q, _)| p == g && q == r) {
            let entry = self.tables.remove(i);
            self.tables.push(entry);
            return;
        }
        let mut t = if self.tables.len() >= TABLES_KEPT {
            self.tables.remove(0).2
        } else {
            Vec::new()
        };
        table::build_gray_table(g, r, map, &mut t);
        if g.stored.bytes() == 2 {
            // Padded to 2^16 entries for the unchecked-by-construction loop of `apply_table`;
            // entries past `map.len()` are never indexed.
            t.resize(1 << 16, 0);
        }
        self.tables.push((g.clone(), r.clone(), t));
    }

    /// Statistics of the frame when `g` needs them (histogram of table indices).
    fn stats(
        &mut self,
        g: &GrayPlan,
        map: IndexMap,
        input: &[u8],
        pixels: usize,
    ) -> Option<FrameStats> {
        self.counts.clear();
        self.counts.resize(map.len(), 0);
        let counts = &mut self.counts;
        for_each_raw(input, g.stored.bytes(), pixels, |raw| {
            counts[map.index(raw)] += 1
        });
        Some(table::frame_stats(g, &self.counts))
    }

    fn render_gray(
        &mut self,
        g: &GrayPlan,
        pixels: usize,
        input: &[u8],
        out: &mut [u8],
    ) -> Result<Option<Window>, PlanError> {
        let bytes = g.stored.bytes();
        let Some(map) = IndexMap::of(&g.stored) else {
            return render_gray_direct(g, pixels, input, out);
        };
        let stats = if chain::needs_statistics(g) {
            self.stats(g, map, input, pixels)
        } else {
            None
        };
        let resolved = chain::resolve(g, stats.as_ref())?;
        self.table(g, &resolved, map);
        let t = self.tables.last().map(|e| e.2.as_slice()).unwrap_or(&[]);
        apply_table(t, map, input, bytes, pixels, out);
        Ok(applied_window(&resolved))
    }

    /// Window channels: the frame through each channel's table, interleaved as RGB (blue black
    /// with two channels). The statistics (one histogram) serve every channel.
    fn render_channels(
        &mut self,
        gs: &[GrayPlan],
        pixels: usize,
        input: &[u8],
        out: &mut [u8],
    ) -> Result<Option<Window>, PlanError> {
        let Some(first) = gs.first() else {
            return Err(PlanError::Internal(
                "window channels without a window".into(),
            ));
        };
        let out = &mut out[..3 * pixels];
        let Some(map) = IndexMap::of(&first.stored) else {
            // Deeper than 16 bits: each channel per pixel, then interleaved.
            let mut window = None;
            let mut gray = vec![0u8; pixels];
            out.fill(0);
            for (c, g) in gs.iter().enumerate() {
                let w = render_gray_direct(g, pixels, input, &mut gray)?;
                if c == 0 {
                    window = w;
                }
                for (px, &v) in out.chunks_exact_mut(3).zip(&gray) {
                    px[c] = v;
                }
            }
            return Ok(window);
        };
        let stats = if gs.iter().any(chain::needs_statistics) {
            self.stats(first, map, input, pixels)
        } else {
            None
        };
        let mut resolved = Vec::with_capacity(gs.len());
        for g in gs {
            let r = chain::resolve(g, stats.as_ref())?;
            self.table(g, &r, map);
            resolved.push(r);
        }
        // Every channel's table is kept now (at most 3 of TABLES_KEPT, the most recent).
        let mut tables: Vec<&[u8]> = Vec::with_capacity(gs.len());
        for (g, r) in gs.iter().zip(&resolved) {
            match self.tables.iter().find(|(p, q, _)| p == g && q == r) {
                Some(e) => tables.push(&e.2),
                None => {
                    return Err(PlanError::Internal(
                        "a window channel's table was not kept".into(),
                    ))
                }
            }
        }
        let bytes = first.stored.bytes();
        let mut i = 0;
        for_each_raw(input, bytes, pixels, |raw| {
            let idx = map.index(raw);
            let px = &mut out[3 * i..3 * i + 3];
            for (c, o) in px.iter_mut().enumerate() {
                *o = tables.get(c).map_or(0, |t| t[idx]);
            }
            i += 1;
        });
        Ok(resolved.first().and_then(applied_window))
    }
}

/// The window actually applied, for the report.
fn applied_window(r: &Resolved) -> Option<Window> {
    match r.voi {
        ResolvedVoi::Window(w) => Some(w),
        _ => None,
    }
}

/// Calls `f` with every raw container value of the frame.
#[inline]
fn for_each_raw(input: &[u8], bytes: usize, pixels: usize, mut f: impl FnMut(u32)) {
    match bytes {
        1 => input[..pixels].iter().for_each(|&b| f(b as u32)),
        2 => input[..2 * pixels]
            .chunks_exact(2)
            .for_each(|c| f(u16::from_ne_bytes([c[0], c[1]]) as u32)),
        _ => input[..4 * pixels]
            .chunks_exact(4)
            .for_each(|c| f(u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))),
    }
}

/// The hot loop: one table lookup per pixel.
fn apply_table(
    table: &[u8],
    map: IndexMap,
    input: &[u8],
    bytes: usize,
    pixels: usize,
    out: &mut [u8],
) {
    let out = &mut out[..pixels];
    match bytes {
        1 => {
            for (o, &b) in out.iter_mut().zip(&input[..pixels]) {
                *o = table[map.index(b as u32)];
            }
        }
        2 => {
            // With a table of all 2^16 entries, an index truncated to u16 is always in bounds:
            // the loop carries no bounds check and unrolls, 1.24× faster at 512² and 1.31× at
            // 2000² than indexing a table of 2^bits_stored entries.
            let full: Option<&[u8; 1 << 16]> = table.get(..1 << 16).and_then(|t| t.try_into().ok());
            match full {
                Some(t) => {
                    let (shift, mask) = (map.shift, map.mask);
                    for (o, c) in out.iter_mut().zip(input[..2 * pixels].chunks_exact(2)) {
                        let raw = u16::from_ne_bytes([c[0], c[1]]) as u32;
                        *o = t[((raw >> shift) & mask) as u16 as usize];
                    }
                }
                None => {
                    for (o, c) in out.iter_mut().zip(input[..2 * pixels].chunks_exact(2)) {
                        *o = table[map.index(u16::from_ne_bytes([c[0], c[1]]) as u32)];
                    }
                }
            }
        }
        _ => {
            for (o, c) in out.iter_mut().zip(input[..4 * pixels].chunks_exact(4)) {
                *o = table[map.index(u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))];
            }
        }
    }
}

/// Stored values deeper than 16 bits: evaluate the chain per pixel.
fn render_gray_direct(
    g: &GrayPlan,
    pixels: usize,
    input: &[u8],
    out: &mut [u8],
) -> Result<Option<Window>, PlanError> {
    let stats = if chain::needs_statistics(g) {
        let mut values: Vec<i64> = Vec::with_capacity(pixels);
        for_each_raw(input, g.stored.bytes(), pixels, |raw| {
            values.push(g.stored.value(raw))
        });
        values.sort_unstable();
        let mut counts: Vec<(i64, u64)> = Vec::new();
        for v in values {
            match counts.last_mut() {
                Some(last) if last.0 == v => last.1 += 1,
                _ => counts.push((v, 1)),
            }
        }
        Some(FrameStats::from_stored_counts(g, counts.into_iter()))
    } else {
        None
    };
    let resolved = chain::resolve(g, stats.as_ref())?;
    let mut i = 0;
    for_each_raw(input, g.stored.bytes(), pixels, |raw| {
        out[i] = chain::gray_output(g, &resolved, g.stored.value(raw));
        i += 1;
    });
    Ok(applied_window(&resolved))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::plan::StoredFormat;

    /// The table path (padded to 2^16 entries for 16-bit containers) against the chain
    /// evaluated per pixel, for stored formats with and without a shift, signed or not, and
    /// raw values carrying garbage above the high bit.
    #[test]
    fn table_lookup_equals_the_chain_per_pixel() {
        let formats = [
            (12, 11, false),
            (12, 13, true),
            (16, 15, true),
            (10, 15, false),
        ];
        for (bits_stored, high_bit, signed) in formats {
            for cols in [1u32, 7, 64] {
                let mut plan = crate::synth::phantom_plan(cols);
                let Chain::Gray(g) = &mut plan.chain else {
                    unreachable!("the phantom is grayscale")
                };
                g.stored = StoredFormat {
                    bits_allocated: 16,
                    bits_stored,
                    high_bit,
                    signed,
                };
                let g = g.clone();
                let mut x = 0x9e37_79b9u32;
                let raw: Vec<u16> = (0..plan.pixels())
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 17;
                        x ^= x << 5;
                        x as u16
                    })
                    .collect();
                let input: Vec<u8> = raw.iter().flat_map(|v| v.to_ne_bytes()).collect();
                let mut out = vec![0u8; plan.output_bytes()];
                let mut cpu = CpuRenderer::default();
                // Twice: the second frame reuses the cached (padded) table.
                for _ in 0..2 {
                    cpu.render_bytes(&plan, &input, &mut out).unwrap();
                    let resolved = chain::resolve(&g, None).unwrap();
                    for (i, &r) in raw.iter().enumerate() {
                        let want = chain::gray_output(&g, &resolved, g.stored.value(r as u32));
                        assert_eq!(out[i], want, "{bits_stored}/{high_bit}/{signed} px {i}");
                    }
                }
            }
        }
    }

    /// Regression: unsigned 32-bit stored values at or above 2^31 were carried as `i32` and
    /// turned negative, so the brightest pixels rendered black. Values near both ends of the
    /// range, through a fixed window and min-max, against DCMTK's LINEAR formula written out.
    #[test]
    fn unsigned_32_bit_values_above_2_pow_31_stay_bright() {
        use crate::render::plan::{AutoWindow, Modality, Voi};
        use crate::render::spec::VoiFunction;
        let raw: Vec<u32> = vec![
            0,
            1,
            7,
            0x7fff_ffff,
            0x8000_0000,
            0x8000_0001,
            u32::MAX - 7,
            u32::MAX - 1,
            u32::MAX,
        ];
        let input: Vec<u8> = raw.iter().flat_map(|v| v.to_ne_bytes()).collect();
        let gray = |voi: Voi| FramePlan {
            rows: 1,
            cols: raw.len() as u32,
            chain: Chain::Gray(GrayPlan {
                stored: StoredFormat {
                    bits_allocated: 32,
                    bits_stored: 32,
                    high_bit: 31,
                    signed: false,
                },
                modality: Modality::Identity,
                voi,
                invert: false,
                pixels: raw.len() as u64,
            }),
            ops: None,
            encoded: None,
            overlay: None,
        };
        // DCMTK's LINEAR window (docs/dcmtk-render-notes.md §6.2), from the raw value itself.
        let linear = |c: f64, w: f64, x: u32| -> u8 {
            let x = x as f64;
            if x <= c - 0.5 - (w - 1.0) / 2.0 {
                0
            } else if x > c - 0.5 + (w - 1.0) / 2.0 {
                255
            } else {
                (((x - (c - 0.5)) / (w - 1.0) + 0.5) * 255.0).trunc() as u8
            }
        };
        let mut cpu = CpuRenderer::default();
        let mut out = vec![0u8; raw.len()];

        // A window over the upper half: everything below 2^31 black, the top white.
        let (c, w) = (3_221_225_472.0, 2_147_483_648.0);
        let plan = gray(Voi::Window(Window {
            center: c,
            width: w,
            function: VoiFunction::Linear,
        }));
        cpu.render_bytes(&plan, &input, &mut out).unwrap();
        let want: Vec<u8> = raw.iter().map(|&x| linear(c, w, x)).collect();
        assert_eq!(out, want);
        assert_eq!(out[raw.len() - 1], 255, "2^32 - 1 must be white");
        assert_eq!(out[3], 0, "2^31 - 1 is below the window");

        // Min-max: the window spans 0 ..= 2^32 - 1, so 0 is black and 2^32 - 1 white.
        let plan = gray(Voi::Auto(AutoWindow::MinMax, VoiFunction::Linear));
        let applied = cpu.render_bytes(&plan, &input, &mut out).unwrap();
        let mm = applied.expect("min-max derives a window");
        assert_eq!((mm.center, mm.width), (2_147_483_648.0, 4_294_967_296.0));
        let want: Vec<u8> = raw
            .iter()
            .map(|&x| linear(mm.center, mm.width, x))
            .collect();
        assert_eq!(out, want);
        assert_eq!((out[0], out[raw.len() - 1]), (0, 255));
        assert!(
            out[4] >= 127 && out[4] <= 128,
            "2^31 is mid-gray: {}",
            out[4]
        );
    }
}
