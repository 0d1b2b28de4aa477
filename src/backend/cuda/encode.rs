//! PNG compression on the GPU: the filtered rows a render worker leaves in device memory
//! become one zlib stream in device memory, ready to be copied into the output slot; the
//! writer only wraps it in the PNG container (`output::png::png_from_zlib`) and writes it.
//!
//! Two compressors ([`Deflater`]). The `fast` level runs fdeflate's compressor as our own
//! kernels (kernels/fdeflate.cu): the stream the CPU's `fast` PNG holds, byte for byte, at a
//! fraction of a millisecond per batch. It is hand-written because nvCOMP, the library, costs
//! 2.2–5 ms per call whatever the batch and tops out at ~22 000 slices/s of 512² on the H200
//! (BENCHMARKS.md, "GPU encoders"), under the 24 000–30 000 that 2× the CPU backend needs.
//! `balanced` and `best` use nvCOMP, whose stronger algorithms the kernels do not have.
//!
//! nvCOMP's batched Gzip compressor takes the whole slice as one chunk and writes one gzip
//! member: it splits the data internally, compresses the parts in parallel and joins them into
//! one Deflate stream with empty stored blocks (`bench gpu-encode` prints the layout). nvCOMP's
//! batched Deflate compressor was measured too: its 64 KiB chunks each end in a final block
//! and must be walked to be joined (`output::zlib::stitch`), which on the GPU cost 8–21 ms per
//! slice against 0.05–0.8 for the gzip route, whose compression was also faster (2.5 against
//! 4.5 ms per 2000² slice); see BENCHMARKS.md. The member is compressed straight into the
//! packed buffer, where `gzip_to_zlib` (kernels/zlib.cu) turns its 10-byte header into the
//! length word and the zlib header and its CRC-32 into the Adler-32, which `adler32_chunks`
//! computed in 64 KiB chunks and which is combined as zlib's `adler32_combine` does: the
//! Deflate body never moves.

use std::sync::Arc;

use super::driver::{
    self, Args, CudaError, DeviceBuffer, Event, Function, Module, Staging, Stream,
};
use super::nvcomp::{Format, Nvcomp};

/// The Adler-32 chunk (any size below 2^24 works; 64 KiB makes one block per chunk).
pub const CHUNK: usize = 64 << 10;
/// What `gzip_to_zlib` writes before the stream: its length.
pub const PACKED_HEADER: usize = 8;

/// The encoder kernels.
struct Kernels {
    setup: Function,
    adler: Function,
    to_zlib: Function,
    copy_packed: Function,
}

impl Kernels {
    fn load(m: &Module) -> Result<Kernels, CudaError> {
        Ok(Kernels {
            setup: m.function(c"gzip_setup")?,
            adler: m.function(c"adler32_chunks")?,
            to_zlib: m.function(c"gzip_to_zlib")?,
            copy_packed: m.function(c"copy_packed")?,
        })
    }
}

/// Byte offsets of the small tables inside one device buffer, each 256-byte aligned: nvCOMP's
/// arrays of `n` entries (input pointers and sizes, output pointers and sizes, statuses) and
/// the Adler-32 of each slice's chunks (`adler_chunks` per slice).
struct Tables {
    in_ptr: usize,
    in_size: usize,
    out_ptr: usize,
    out_size: usize,
    status: usize,
    adler: usize,
    /// Adler-32 entries per slice.
    adler_chunks: usize,
    len: usize,
}

impl Tables {
    fn new(n: usize, adler_chunks: usize) -> Tables {
        let aligned = |bytes: usize| bytes.div_ceil(256) * 256;
        let array = aligned(8 * n);
        let in_ptr = 0;
        let in_size = in_ptr + array;
        let out_ptr = in_size + array;
        let out_size = out_ptr + array;
        let status = out_size + array;
        let adler = status + aligned(4 * n);
        Tables {
            in_ptr,
            in_size,
            out_ptr,
            out_size,
            status,
            adler,
            adler_chunks,
            len: adler + aligned(4 * adler_chunks * n),
        }
    }

    /// Offsets of slice `i`'s entries: (in_ptr, in_size, out_ptr, out_size, status, adler).
    fn entry(&self, i: usize) -> [usize; 6] {
        [
            self.in_ptr + 8 * i,
            self.in_size + 8 * i,
            self.out_ptr + 8 * i,
            self.out_size + 8 * i,
            self.status + 4 * i,
            self.adler + 4 * self.adler_chunks * i,
        ]
    }
}

/// How hard nvCOMP works on PNG rows. nvCOMP 6 documents its algorithms as 0 entropy-only
/// (fastest), 1 high throughput / low ratio (its default), 2 medium ("beats zlib level 1"), 4
/// higher ("beats zlib level 6"), 5 highest. Measured on phantom CT rows (BENCHMARKS.md): 0
/// makes files 1.28–1.32× the CPU's `fast`, 1 0.91–0.96×, 2 0.88–0.90× (about the CPU's
/// `balanced`), 4 0.95× at 15–20× the time of 2. `fast` PNG output is [`PngEffort::Fast`],
/// which the fdeflate kernels compress (its algorithm, 1, only matters to `bench gpu-encode`);
/// `balanced` and `best` are [`PngEffort::Strong`], nvCOMP's algorithm 2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PngEffort {
    Fast,
    Strong,
}

impl PngEffort {
    /// nvCOMP's algorithm number.
    pub fn algorithm(self) -> i32 {
        match self {
            PngEffort::Fast => 1,
            PngEffort::Strong => 2,
        }
    }

    /// The zlib header saying so (FLEVEL 0 "fastest" or 1 "fast"; decoders ignore it).
    pub fn zlib_header(self) -> [u8; 2] {
        match self {
            PngEffort::Fast => [0x78, 0x01],
            PngEffort::Strong => [0x78, 0x5e],
        }
    }
}

/// What compresses the filtered rows.
#[derive(Clone)]
pub enum Deflater {
    /// fdeflate's compressor as kernels (kernels/fdeflate.cu): the CPU's `fast` stream, byte
    /// for byte; no library needed.
    Fdeflate,
    /// nvCOMP's gzip compressor at `algorithm`, the stream labelled with `zlib_header`.
    Nvcomp {
        lib: Arc<Nvcomp>,
        algorithm: i32,
        zlib_header: [u8; 2],
    },
}

impl Deflater {
    /// What it is, in words ("fdeflate kernels", "nvCOMP 6.0.0 gzip, algorithm 2").
    pub fn describe(&self) -> String {
        match self {
            Deflater::Fdeflate => "fdeflate kernels".into(),
            Deflater::Nvcomp { lib, algorithm, .. } => {
                format!("nvCOMP {} gzip, algorithm {algorithm}", lib.version)
            }
        }
    }
}

/// An encoder the GPU can run for a run's output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuEncodeWish {
    /// PNG: rows filtered with `filter` (a PNG filter type, or 5 for the adaptive choice; see
    /// kernels/png.cu), compressed by the fdeflate kernels (`Fast`) or nvCOMP (`Strong`).
    Png { filter: u32, effort: PngEffort },
    /// Baseline JPEG at `quality` by nvJPEG.
    Jpeg { quality: u8 },
}

impl GpuEncodeWish {
    /// The library the encoder needs (`None`: our kernels only).
    pub fn library(self) -> Option<&'static str> {
        match self {
            GpuEncodeWish::Png {
                effort: PngEffort::Fast,
                ..
            } => None,
            GpuEncodeWish::Png { .. } => Some("libnvcomp.so.6"),
            GpuEncodeWish::Jpeg { .. } => Some("libnvjpeg.so.13"),
        }
    }
}

/// One worker's GPU PNG compressor (it owns scratch device memory on the worker's stream).
/// It compresses one slice per call ([`queue`](Self::queue)) or several
/// ([`queue_batch`](Self::queue_batch)): nvCOMP costs about 2–4 ms per call whatever the slice
/// size (BENCHMARKS.md, "GPU encoders"), so a call for several slices spreads that over all of
/// them; the fdeflate kernels make three launches per call.
pub struct GpuPng {
    deflater: Deflater,
    k: Kernels,
    fd: FdKernels,
    stream: Arc<Stream>,
    tables: Option<DeviceBuffer>,
    temp: Option<DeviceBuffer>,
    /// The (slices, largest slice, total) the temp size was asked for, and the answer.
    temp_for: Option<((usize, usize, usize), usize)>,
    packed: Option<DeviceBuffer>,
    /// nvCOMP's output room for an input size: (size, room).
    room_for: Option<(usize, usize)>,
    /// The fdeflate kernels' slice descriptors: written here, copied to `tables`.
    staging: Option<Staging>,
    /// The last fdeflate batch whose descriptors are in `tables`: its slices, the blocks per
    /// slice of `fdeflate_copy_out`, and whether any slice has an `out`.
    last_fdeflate: Option<(u32, u32, bool)>,
}

/// The fdeflate kernels.
struct FdKernels {
    count: Function,
    place: Function,
    write: Function,
    copy_out: Function,
}

/// Threads per block of `fdeflate_count` and `fdeflate_write`: a warp per row, so 8 rows a
/// block.
const FD_ROW_THREADS: u32 = 256;
/// Rows per block of `fdeflate_count` and `fdeflate_write`.
const FD_ROWS_PER_BLOCK: u32 = FD_ROW_THREADS / 32;
/// The longest row the fdeflate kernels take (its bit count must fit 32 bits); longer rows are
/// an error for the batch (none occurs: frames are limited to `pipeline.max_frame_mib`, 1 GiB
/// by default, and such a row would be 256 MiB).
const FD_MAX_ROW_BYTES: usize = 1 << 28;
/// Bytes of one `FdSlice` (kernels/fdeflate.cu): rows, packed, row_bytes and row_count, cap,
/// out.
const FD_SLICE_BYTES: usize = 40;

/// One slice for [`GpuPng::queue_batch`]: `len` bytes of filtered rows of `row_bytes` each
/// (filter byte included) at device address `rows`, whose packed stream may take at most
/// `cap` bytes.
#[derive(Debug, Clone, Copy)]
pub struct PngInput {
    pub rows: u64,
    pub len: usize,
    pub row_bytes: usize,
    pub cap: usize,
    /// Where [`GpuPng::queue_copy_out`] copies the packed stream (a device-visible address of
    /// `cap` bytes, 16-byte aligned: a mapped slot); 0 for none.
    pub out: u64,
}

impl GpuPng {
    pub fn new(deflater: Deflater, module: &Module, stream: Arc<Stream>) -> Result<GpuPng, String> {
        let k = Kernels::load(module).map_err(|e| e.to_string())?;
        let fd = FdKernels {
            count: module
                .function(c"fdeflate_count")
                .map_err(|e| e.to_string())?,
            place: module
                .function(c"fdeflate_place")
                .map_err(|e| e.to_string())?,
            write: module
                .function(c"fdeflate_write")
                .map_err(|e| e.to_string())?,
            copy_out: module
                .function(c"fdeflate_copy_out")
                .map_err(|e| e.to_string())?,
        };
        if let Deflater::Nvcomp { lib, algorithm, .. } = &deflater {
            // Device buffers are 256-byte aligned: check that nvCOMP asks no more.
            let a = lib
                .alignments(Format::Gzip, *algorithm)
                .map_err(|e| e.to_string())?;
            if a.input > 256 || a.output > 256 || a.temp > 256 {
                return Err(format!(
                    "nvCOMP wants alignments {a:?}, more than 256 bytes"
                ));
            }
        }
        Ok(GpuPng {
            deflater,
            k,
            fd,
            stream,
            tables: None,
            temp: None,
            temp_for: None,
            packed: None,
            room_for: None,
            staging: None,
            last_fdeflate: None,
        })
    }

    /// What compresses.
    pub fn deflater(&self) -> &Deflater {
        &self.deflater
    }

    /// Queues on the worker's stream the compression of one slice's filtered rows into this
    /// encoder's packed buffer (length word, then the zlib stream; ~0 when it would not fit
    /// `cap` bytes, or for the fdeflate kernels when stored blocks would be smaller, as the
    /// CPU writer decides), and returns that buffer's device address. `compressed`, when
    /// given, is recorded after the compression proper (nvCOMP's work, or the kernels').
    pub fn queue(&mut self, input: PngInput, compressed: Option<&Event>) -> Result<u64, String> {
        let packed = self.queue_batch(&[input], compressed)?;
        packed
            .first()
            .copied()
            .ok_or_else(|| "GPU PNG encoder: no packed stream".to_string())
    }

    /// Queues the compression of every slice of `inputs` in one call, each into its own packed
    /// stream (as [`queue`](Self::queue) makes it), and returns their device addresses in the
    /// order of `inputs`. Every slice's rows must stay unchanged until the stream has run the
    /// work.
    pub fn queue_batch(
        &mut self,
        inputs: &[PngInput],
        compressed: Option<&Event>,
    ) -> Result<Vec<u64>, String> {
        self.last_fdeflate = None;
        if inputs.is_empty() {
            return Ok(Vec::new());
        }
        match self.deflater.clone() {
            Deflater::Fdeflate => self.queue_fdeflate(inputs, compressed),
            Deflater::Nvcomp {
                lib,
                algorithm,
                zlib_header,
            } => self.queue_nvcomp(&lib, algorithm, zlib_header, inputs, compressed),
        }
    }

    /// [`queue_batch`](Self::queue_batch) with the fdeflate kernels: the slice descriptors
    /// copied up, then `fdeflate_count` (a warp per row), `fdeflate_place` (a block per
    /// slice) and `fdeflate_write` (a warp per row), each one launch for the whole batch.
    fn queue_fdeflate(
        &mut self,
        inputs: &[PngInput],
        compressed: Option<&Event>,
    ) -> Result<Vec<u64>, String> {
        let cuda = |e: CudaError| e.to_string();
        let n = inputs.len();
        let rows_of = |i: &PngInput| i.len.checked_div(i.row_bytes).unwrap_or(0);
        for i in inputs {
            // A row's bit count is a u32 in the kernels: at most 12 bits per byte.
            if i.row_bytes == 0 || i.len % i.row_bytes != 0 || i.row_bytes > FD_MAX_ROW_BYTES {
                return Err(format!(
                    "{} bytes of rows of {} bytes for the fdeflate kernels",
                    i.len, i.row_bytes
                ));
            }
        }
        let most_rows = inputs.iter().map(rows_of).max().unwrap_or(0).max(1);
        let stride = u32::try_from(most_rows).map_err(|_| "too many rows".to_string())?;
        // Scratch: the descriptors, then each slice's row bit counts (turned into offsets by
        // `fdeflate_place`) and row Adler-32s, 256-byte aligned.
        let aligned = |bytes: usize| bytes.div_ceil(256) * 256;
        let desc_len = aligned(FD_SLICE_BYTES * n);
        let per_row = aligned(4 * most_rows * n);
        let stream = self.stream.clone();
        let tables = driver::ensure_buffer(&mut self.tables, &stream, desc_len + 2 * per_row)
            .map_err(cuda)?;
        let (bits, adler) = (
            tables + desc_len as u64,
            tables + (desc_len + per_row) as u64,
        );
        // Each packed stream: the length word, the zlib stream and the 3 bytes the last 32-bit
        // word may reach past it, within `cap` rounded up, 256-byte aligned.
        let cap = inputs.iter().map(|i| i.cap).max().unwrap_or(0);
        let slot = aligned(cap + 16);
        let packed = driver::ensure_buffer(&mut self.packed, &stream, slot * n).map_err(cuda)?;
        if self.staging.as_ref().is_none_or(|s| s.len() < desc_len) {
            self.staging = None;
            self.staging = Some(Staging::new(&stream, desc_len).map_err(cuda)?);
        }
        let staging = self
            .staging
            .as_ref()
            .ok_or_else(|| "no descriptor staging".to_string())?;
        let mut out = Vec::with_capacity(n);
        let mut desc = Vec::with_capacity(FD_SLICE_BYTES * n);
        for (i, input) in inputs.iter().enumerate() {
            let dst = packed + (i * slot) as u64;
            desc.extend_from_slice(&input.rows.to_le_bytes());
            desc.extend_from_slice(&dst.to_le_bytes());
            desc.extend_from_slice(&(input.row_bytes as u32).to_le_bytes());
            desc.extend_from_slice(&(rows_of(input) as u32).to_le_bytes());
            desc.extend_from_slice(&(input.cap as u64).to_le_bytes());
            desc.extend_from_slice(&input.out.to_le_bytes());
            out.push(dst);
        }
        // `tables` holds desc_len >= desc.len() bytes.
        staging.upload(&desc, tables, &stream).map_err(cuda)?;
        let blocks_per_slice = stride.div_ceil(FD_ROWS_PER_BLOCK);
        let grid = blocks_per_slice
            .checked_mul(n as u32)
            .ok_or_else(|| "fdeflate grid too large".to_string())?;
        let args = Args::default()
            .u64(tables)
            .u32(n as u32)
            .u32(blocks_per_slice)
            .u32(stride)
            .u64(bits)
            .u64(adler);
        driver::launch(&self.fd.count, grid, FD_ROW_THREADS, 0, &stream, args).map_err(cuda)?;
        // `fdeflate_place` wants a power of two, at most 1024 threads.
        let place_threads = (most_rows.next_power_of_two()).clamp(32, 1024) as u32;
        let args = Args::default()
            .u64(tables)
            .u32(n as u32)
            .u32(stride)
            .u64(bits)
            .u64(adler);
        driver::launch(&self.fd.place, n as u32, place_threads, 0, &stream, args).map_err(cuda)?;
        let args = Args::default()
            .u64(tables)
            .u32(n as u32)
            .u32(blocks_per_slice)
            .u32(stride)
            .u64(bits);
        driver::launch(&self.fd.write, grid, FD_ROW_THREADS, 0, &stream, args).map_err(cuda)?;
        if let Some(mark) = compressed {
            mark.record(&stream).map_err(cuda)?;
        }
        // `fdeflate_copy_out`: per slice as many blocks of 256 threads as `copy_packed_from`
        // launches for one (a 16-byte group per thread, at most 4096 blocks).
        let copy_blocks = (cap as u64).div_ceil(16 * 256).clamp(1, 4096) as u32;
        let any_out = inputs.iter().any(|i| i.out != 0);
        self.last_fdeflate = Some((n as u32, copy_blocks, any_out));
        Ok(out)
    }

    /// Queues, after [`queue_batch`](Self::queue_batch), the copy of every packed stream of the
    /// batch to its input's `out` in one launch (`fdeflate_copy_out`); `false` when this
    /// encoder cannot (nvCOMP, or no batch): the caller then copies each with
    /// [`copy_packed_from`](Self::copy_packed_from).
    pub fn queue_copy_out(&mut self) -> Result<bool, CudaError> {
        let (Some((n, blocks, any_out)), Some(tables)) = (
            self.last_fdeflate.take(),
            self.tables.as_ref().map(DeviceBuffer::ptr),
        ) else {
            return Ok(false);
        };
        if !matches!(self.deflater, Deflater::Fdeflate) {
            return Ok(false);
        }
        if any_out {
            let args = Args::default().u64(tables).u32(n).u32(blocks);
            driver::launch(&self.fd.copy_out, n * blocks, 256, 0, &self.stream, args)?;
        }
        Ok(true)
    }

    /// [`queue_batch`](Self::queue_batch) with nvCOMP.
    fn queue_nvcomp(
        &mut self,
        nvcomp: &Nvcomp,
        algorithm: i32,
        header: [u8; 2],
        inputs: &[PngInput],
        compressed: Option<&Event>,
    ) -> Result<Vec<u64>, String> {
        let cuda = |e: CudaError| e.to_string();
        let nv = |e: super::nvcomp::NvcompError| e.to_string();
        let n = inputs.len();
        let largest = inputs.iter().map(|i| i.len.max(1)).max().unwrap_or(1);
        let total: usize = inputs.iter().map(|i| i.len.max(1)).sum();
        let cap = inputs.iter().map(|i| i.cap).max().unwrap_or(0);
        let room = match self.room_for {
            Some((l, room)) if l == largest => room,
            _ => {
                let room = nvcomp
                    .max_output_bytes(Format::Gzip, algorithm, largest)
                    .map_err(nv)?;
                self.room_for = Some((largest, room));
                room
            }
        };
        let key = (n, largest, total);
        let temp_bytes = match self.temp_for {
            Some((k, bytes)) if k == key => bytes,
            _ => {
                let bytes = nvcomp
                    .temp_bytes(Format::Gzip, algorithm, n, largest, total)
                    .map_err(nv)?;
                self.temp_for = Some((key, bytes));
                bytes
            }
        };
        let t = Tables::new(n, largest.div_ceil(CHUNK));
        let stream = self.stream.clone();
        let tables = driver::ensure_buffer(&mut self.tables, &stream, t.len).map_err(cuda)?;
        let temp = driver::ensure_buffer(&mut self.temp, &stream, temp_bytes).map_err(cuda)?;
        // Room for nvCOMP's worst case and for the 16-byte copy of up to `cap` bytes, each
        // slice's stream 256-byte aligned (nvCOMP's output alignment, checked in `new`).
        let stride = (room.max(cap).div_ceil(16) * 16 + 16).div_ceil(256) * 256;
        let packed = driver::ensure_buffer(&mut self.packed, &stream, stride * n).map_err(cuda)?;
        let at = |offset: usize| tables + offset as u64;
        let mut out = Vec::with_capacity(n);
        for (i, input) in inputs.iter().enumerate() {
            let [in_ptr, in_size, out_ptr, ..] = t.entry(i);
            let dst = packed + (i * stride) as u64;
            let args = Args::default()
                .u64(input.rows)
                .u64(input.len.max(1) as u64)
                .u64(dst)
                .u64(at(in_ptr))
                .u64(at(in_size))
                .u64(at(out_ptr));
            driver::launch(&self.k.setup, 1, 32, 0, &stream, args).map_err(cuda)?;
            out.push(dst);
        }
        // SAFETY: the tables (n entries), the temp buffer (nvCOMP's size for these inputs) and
        // the packed buffer (nvCOMP's worst-case output for the largest, per slice) were sized
        // above on this stream and live until replaced or dropped, both stream-ordered after
        // this work.
        unsafe {
            nvcomp.compress_async(
                Format::Gzip,
                algorithm,
                at(t.in_ptr),
                at(t.in_size),
                largest,
                n,
                temp,
                temp_bytes,
                at(t.out_ptr),
                at(t.out_size),
                at(t.status),
                stream.raw(),
            )
        }
        .map_err(nv)?;
        if let Some(mark) = compressed {
            mark.record(&stream).map_err(cuda)?;
        }
        for (i, input) in inputs.iter().enumerate() {
            let [_, _, _, out_size, status, adler] = t.entry(i);
            let len = input.len.max(1);
            let adler_chunks = len.div_ceil(CHUNK);
            let args = Args::default()
                .u64(input.rows)
                .u64(len as u64)
                .u32(CHUNK as u32)
                .u64(at(adler));
            driver::launch(&self.k.adler, adler_chunks as u32, 256, 0, &stream, args)
                .map_err(cuda)?;
            let args = Args::default()
                .u64(out[i])
                .u64(at(out_size))
                .u64(at(status))
                .u64(len as u64)
                .u64(at(adler))
                .u32(adler_chunks as u32)
                .u64(CHUNK as u64)
                .u32(u32::from(header[0]) << 8 | u32::from(header[1]))
                .u64(input.cap as u64);
            driver::launch(&self.k.to_zlib, 1, 32, 0, &stream, args).map_err(cuda)?;
        }
        Ok(out)
    }

    /// Queues the copy of the packed stream at `src` (an address [`queue_batch`](Self::queue_batch)
    /// returned) to `dst`, a device-visible address of `cap` bytes (a mapped slot), with
    /// 16-byte stores; only the length word when packing failed.
    pub fn copy_packed_from(&self, src: u64, dst: u64, cap: usize) -> Result<(), CudaError> {
        let groups = (cap as u64).div_ceil(16);
        let args = Args::default().u64(src).u64(dst).u64(cap as u64);
        driver::launch(
            &self.k.copy_packed,
            groups.div_ceil(256).clamp(1, 4096) as u32,
            256,
            0,
            &self.stream,
            args,
        )
    }

    /// Frees the scratch memory (after an out-of-memory error).
    pub fn release(&mut self) {
        self.staging = None;
        self.tables = None;
        self.temp = None;
        self.temp_for = None;
        self.packed = None;
        self.last_fdeflate = None;
    }
}

/// Reads the length word of a packed stream in host memory: `Some(zlib length)`, or `None`
/// when the GPU could not encode (a chunk failed, or the stream did not fit).
pub fn packed_len(head: &[u8]) -> Option<usize> {
    let word: [u8; 8] = head.get(..PACKED_HEADER)?.try_into().ok()?;
    let len = u64::from_le_bytes(word);
    (len != u64::MAX).then_some(len as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_are_aligned_and_disjoint() {
        for n in [1, 3, 32, 33] {
            let t = Tables::new(n, 62);
            let offsets = [
                t.in_ptr, t.in_size, t.out_ptr, t.out_size, t.status, t.adler,
            ];
            assert!(offsets.iter().all(|o| o % 256 == 0));
            // Each array holds its n entries before the next begins.
            let widths = [8, 8, 8, 8, 4];
            for (w, pair) in widths.iter().zip(offsets.windows(2)) {
                assert!(pair[0] + w * n <= pair[1], "{n}: {pair:?}");
            }
            assert!(t.adler + 4 * 62 * n <= t.len);
            let last = t.entry(n - 1);
            assert_eq!(last[0], t.in_ptr + 8 * (n - 1));
            assert_eq!(last[5], t.adler + 4 * 62 * (n - 1));
            assert!(last[5] + 4 * 62 <= t.len);
        }
    }

    #[test]
    fn the_length_word_says_whether_the_gpu_encoded() {
        let mut head = 1234u64.to_le_bytes().to_vec();
        head.extend_from_slice(&[0; 8]);
        assert_eq!(packed_len(&head), Some(1234));
        assert_eq!(packed_len(&u64::MAX.to_le_bytes()), None);
        assert_eq!(packed_len(&[1, 2]), None);
    }

    #[test]
    fn efforts_map_to_nvcomp_algorithms_with_valid_zlib_headers() {
        for (effort, algorithm) in [(PngEffort::Fast, 1), (PngEffort::Strong, 2)] {
            assert_eq!(effort.algorithm(), algorithm);
            let h = effort.zlib_header();
            assert_eq!((u16::from(h[0]) << 8 | u16::from(h[1])) % 31, 0);
            assert_eq!(h[0], 0x78);
        }
    }
}
