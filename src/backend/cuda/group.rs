//! Grouped launches for the frames of a GPU PNG batch. Rendered one by one, each 512² frame of
//! a batch costs its worker two launches (the window, reading the frame through its mapped
//! slot, and the PNG filter), and each window kernel is too small (128 blocks) to keep many
//! reads over PCIe in flight. Frames that share everything but their addresses (one shape, one
//! table, one filter; read in place from their slots) are instead collected here and rendered
//! and filtered by two launches for the whole group (`gray_apply_*_group` and
//! `png_filter_rows_group`, a frame per `blockIdx.y`), queued when the batch is compressed or
//! when anything else is about to use the stream's shared state (the worker's table).
//!
//! Launching later is always correct as long as the group is flushed before its table changes:
//! its inputs are slots the batch holds until it is compressed, its pixels are its own buffer,
//! and its rows are the batch positions' buffers.

use std::sync::Arc;

use super::driver::{self, Args, CudaError, DeviceBuffer, Function, Module, Staging, Stream};

/// Threads per block, as the per-frame kernels use.
const BLOCK: u32 = 256;
/// Frames larger than this (output bytes) are not grouped: the group's pixel buffer holds a
/// whole batch of them, and large frames gain nothing (their own launch already fills the GPU).
pub const GROUP_MAX_FRAME_BYTES: usize = 1 << 20;

/// The group kernels (kernels/gray.cu, kernels/png.cu).
pub struct GroupKernels {
    apply_u16: Function,
    apply_u8: Function,
    filter: Function,
}

impl GroupKernels {
    pub fn load(m: &Module) -> Result<GroupKernels, CudaError> {
        Ok(GroupKernels {
            apply_u16: m.function(c"gray_apply_u16_group")?,
            apply_u8: m.function(c"gray_apply_u8_group")?,
            filter: m.function(c"png_filter_rows_group")?,
        })
    }
}

/// Everything the group's frames share: every kernel argument but the addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Bytes per stored value: 1 or 2.
    pub stored_bytes: u8,
    /// Pixels per frame (8-bit grayscale out: also the output bytes).
    pub pixels: u64,
    pub shift: u32,
    pub mask: u32,
    /// The device table every frame applies.
    pub table: u64,
    /// Bytes per output row (without the filter byte), and rows.
    pub row_len: u32,
    pub rows: u32,
    /// The PNG filter (a filter type, or 5 for adaptive).
    pub filter: u32,
}

impl Shape {
    /// Whether frames of this shape can be grouped at all.
    pub fn groupable(&self) -> bool {
        matches!(self.stored_bytes, 1 | 2)
            && self.pixels > 0
            && self.pixels as usize <= GROUP_MAX_FRAME_BYTES
            && u64::from(self.row_len) * u64::from(self.rows) == self.pixels
    }
}

/// The frames collected and the buffers their launches use.
#[derive(Default)]
pub struct FrameGroup {
    shape: Option<Shape>,
    /// Per frame: where its stored values are read (a mapped slot), where its filtered rows go.
    members: Vec<(u64, u64)>,
    /// The frames' pixels, `stride` bytes apart.
    pixels: Option<DeviceBuffer>,
    /// The address lists the kernels read: inputs, then rows.
    lists: Option<DeviceBuffer>,
    staging: Option<Staging>,
    /// A launch that failed: the frames collected since the batch began may lack their rows.
    failed: Option<CudaError>,
}

impl FrameGroup {
    /// Whether a frame of `shape` may join without flushing first.
    pub fn accepts(&self, shape: &Shape) -> bool {
        self.shape.is_none_or(|s| s == *shape)
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Adds a frame; the caller flushed first unless [`accepts`](Self::accepts) said yes.
    pub fn push(&mut self, shape: Shape, input: u64, rows: u64) {
        debug_assert!(self.accepts(&shape));
        self.shape = Some(shape);
        self.members.push((input, rows));
    }

    /// Forgets the frames collected and any failure (a new batch).
    pub fn clear(&mut self) {
        self.shape = None;
        self.members.clear();
        self.failed = None;
    }

    /// The failure of a flush since the last [`clear`](Self::clear), if any.
    pub fn failure(&self) -> Option<CudaError> {
        self.failed.clone()
    }

    /// Drops the buffers (the worker gives its caches back to the pool); frames collected are
    /// queued first.
    pub fn release(&mut self, k: &GroupKernels, stream: &Arc<Stream>) {
        let _ = self.flush(k, stream);
        self.pixels = None;
        self.lists = None;
        self.staging = None;
    }

    /// Queues the group's two launches on `stream` and empties it. A failure is also kept for
    /// [`failure`](Self::failure): the frames' rows were not written.
    pub fn flush(&mut self, k: &GroupKernels, stream: &Arc<Stream>) -> Result<(), CudaError> {
        let result = self.launch(k, stream);
        self.shape = None;
        self.members.clear();
        if let Err(e) = &result {
            self.failed = Some(e.clone());
        }
        result
    }

    fn launch(&mut self, k: &GroupKernels, stream: &Arc<Stream>) -> Result<(), CudaError> {
        let (Some(shape), n) = (self.shape, self.members.len()) else {
            return Ok(());
        };
        if n == 0 {
            return Ok(());
        }
        let frames = u32::try_from(n).map_err(|_| too_many())?;
        if frames > 65_535 {
            return Err(too_many());
        }
        let stride = (shape.pixels as usize).div_ceil(256) * 256;
        let pixels = driver::ensure_buffer(&mut self.pixels, stream, stride * n)?;
        let list_bytes = 16 * n;
        let lists = driver::ensure_buffer(&mut self.lists, stream, list_bytes)?;
        if self.staging.as_ref().is_none_or(|s| s.len() < list_bytes) {
            self.staging = None;
            // Room for a larger group next time without reallocating.
            self.staging = Some(Staging::new(stream, list_bytes.max(16 * 64))?);
        }
        let bytes = address_lists(&self.members);
        if let Some(staging) = &self.staging {
            staging.upload(&bytes, lists, stream)?;
        }
        let (apply, per_thread) = match shape.stored_bytes {
            1 => (&k.apply_u8, 16),
            _ => (&k.apply_u16, 8),
        };
        let blocks = shape
            .pixels
            .div_ceil(per_thread)
            .div_ceil(u64::from(BLOCK))
            .clamp(1, 65_535) as u32;
        let args = Args::default()
            .u64(lists)
            .u64(pixels)
            .u64(stride as u64)
            .u64(shape.pixels)
            .u32(shape.shift)
            .u32(shape.mask)
            .u64(shape.table);
        driver::launch_grid(apply, (blocks, frames), BLOCK, 0, stream, args)?;
        let args = Args::default()
            .u64(pixels)
            .u64(stride as u64)
            .u64(lists + 8 * n as u64)
            .u32(shape.row_len)
            .u32(shape.rows)
            .u32(1)
            .u32(shape.filter);
        driver::launch_grid(&k.filter, (shape.rows, frames), BLOCK, 0, stream, args)
    }
}

/// The two address lists the kernels read, as little-endian `u64`s: every frame's input
/// (`gray_apply_*_group`'s `inputs`), then every frame's rows (`png_filter_rows_group`'s
/// `outs`, at byte 8 × frames).
fn address_lists(members: &[(u64, u64)]) -> Vec<u8> {
    let inputs = members.iter().map(|m| m.0);
    let rows = members.iter().map(|m| m.1);
    inputs.chain(rows).flat_map(u64::to_le_bytes).collect()
}

fn too_many() -> CudaError {
    CudaError {
        call: "grouped launch (more than 65 535 frames)",
        code: cudarc::driver::sys::CUresult::CUDA_ERROR_INVALID_VALUE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape() -> Shape {
        Shape {
            stored_bytes: 2,
            pixels: 512 * 512,
            shift: 0,
            mask: 0xfff,
            table: 0x1000,
            row_len: 512,
            rows: 512,
            filter: 5,
        }
    }

    #[test]
    fn frames_of_one_shape_join_and_another_shape_needs_a_flush() {
        let mut g = FrameGroup::default();
        assert!(g.accepts(&shape()));
        g.push(shape(), 1, 2);
        g.push(shape(), 3, 4);
        assert!(g.accepts(&shape()));
        let other_table = Shape {
            table: 0x2000,
            ..shape()
        };
        assert!(!g.accepts(&other_table));
        let other_filter = Shape {
            filter: 1,
            ..shape()
        };
        assert!(!g.accepts(&other_filter));
        g.clear();
        assert!(g.is_empty());
        assert!(g.accepts(&other_table));
        assert!(g.failure().is_none());
    }

    #[test]
    fn the_address_lists_hold_the_inputs_then_the_rows() {
        let bytes = address_lists(&[(0x10, 0x20), (0x30, 0x40)]);
        let words: Vec<u64> = bytes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(words, [0x10, 0x30, 0x20, 0x40]);
    }

    #[test]
    fn only_small_8_and_16_bit_frames_whose_rows_fill_them_are_grouped() {
        assert!(shape().groupable());
        assert!(Shape {
            stored_bytes: 1,
            ..shape()
        }
        .groupable());
        assert!(!Shape {
            stored_bytes: 4,
            ..shape()
        }
        .groupable());
        let big = Shape {
            pixels: 2048 * 2048,
            row_len: 2048,
            rows: 2048,
            ..shape()
        };
        assert!(!big.groupable());
        // Rows that do not cover the pixels (a plan with operators) are never grouped.
        assert!(!Shape {
            rows: 256,
            ..shape()
        }
        .groupable());
    }
}
