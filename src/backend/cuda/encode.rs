//! PNG compression on the GPU: the filtered rows a render worker leaves in device memory
//! become one zlib stream in device memory, ready to be copied into the output slot; the
//! writer only wraps it in the PNG container (`output::png::png_from_zlib`) and writes it.
//!
//! nvCOMP compresses; two of its formats can make the Deflate data (`Format`):
//! - **Deflate**, batched: the rows in 64 KiB chunks compressed independently, each a complete
//!   Deflate stream ending in a final block. `deflate_pieces` (kernels/deflate.cu) walks each
//!   chunk to find its final block, and `zlib_pack` joins them as `output::zlib::stitch` does.
//! - **Gzip**, one member for the whole slice (nvCOMP splits and joins internally);
//!   `gzip_piece` finds the Deflate body between the gzip header and trailer.
//!
//! Either way `adler32_chunks` sums the rows in 64 KiB chunks and `zlib_pack` combines the
//! checksums, writes the zlib header, the Deflate data and the Adler-32 into one buffer, its
//! length in front (or ~0 when a chunk failed or the stream would not fit the slot: the caller
//! then encodes on the CPU).

use std::sync::Arc;

use super::driver::{self, Args, CudaError, DeviceBuffer, Event, Function, Module, Stream};
use super::nvcomp::{Format, Nvcomp};

/// nvCOMP's recommended (and largest) Deflate chunk; also the Adler-32 chunk.
pub const CHUNK: usize = 64 << 10;
/// What `zlib_pack` writes before the stream: its length.
pub const PACKED_HEADER: usize = 8;

/// The encoder kernels.
#[derive(Clone, Copy)]
struct Kernels {
    setup: Function,
    adler: Function,
    pieces: Function,
    gzip_piece: Function,
    pack: Function,
    copy_packed: Function,
}

impl Kernels {
    fn load(m: &Module) -> Result<Kernels, CudaError> {
        Ok(Kernels {
            setup: m.function(c"deflate_setup")?,
            adler: m.function(c"adler32_chunks")?,
            pieces: m.function(c"deflate_pieces")?,
            gzip_piece: m.function(c"gzip_piece")?,
            pack: m.function(c"zlib_pack")?,
            copy_packed: m.function(c"copy_packed")?,
        })
    }
}

/// Byte offsets of the per-chunk tables inside one device buffer.
struct Tables {
    in_ptrs: usize,
    in_sizes: usize,
    out_ptrs: usize,
    out_sizes: usize,
    nv_status: usize,
    pieces: usize,
    status: usize,
    adler: usize,
    len: usize,
}

impl Tables {
    /// `n` compressed chunks, `adler_chunks` checksum chunks; every table 256-byte aligned.
    fn new(n: usize, adler_chunks: usize) -> Tables {
        let mut at = 0usize;
        let mut next = |bytes: usize| {
            let here = at;
            at += bytes.div_ceil(256) * 256;
            here
        };
        let t = Tables {
            in_ptrs: next(8 * n),
            in_sizes: next(8 * n),
            out_ptrs: next(8 * n),
            out_sizes: next(8 * n),
            nv_status: next(4 * n),
            pieces: next(32 * n),
            status: next(4 * n),
            adler: next(4 * adler_chunks),
            len: 0,
        };
        Tables { len: at, ..t }
    }
}

/// nvCOMP's algorithm for a PNG compression level, and the zlib header level that says so.
/// nvCOMP 6 documents: 0 entropy-only (fastest), 1 high throughput / low ratio (its default),
/// 2 medium ratio ("beats zlib level 1"), 4 higher ratio ("beats zlib level 6"), 5 highest.
pub fn algorithm_for(compression: crate::config::PngCompression) -> (i32, u8) {
    use crate::config::PngCompression as C;
    match compression {
        C::None | C::Fast => (1, 0),
        C::Balanced => (2, 1),
        C::Best => (4, 3),
    }
}

/// One worker's GPU PNG compressor (it owns scratch device memory on the worker's stream).
pub struct GpuPng {
    nvcomp: Arc<Nvcomp>,
    pub format: Format,
    pub algorithm: i32,
    zlib_level: u8,
    k: Kernels,
    stream: Arc<Stream>,
    tables: Option<DeviceBuffer>,
    compressed: Option<DeviceBuffer>,
    temp: Option<DeviceBuffer>,
    /// (chunks, largest chunk, total) the temp size was asked for, and the answer.
    temp_for: Option<((usize, usize, usize), usize)>,
    packed: Option<DeviceBuffer>,
    /// Output room per chunk for the largest chunk size seen: (chunk, room).
    max_out: Option<(usize, usize)>,
    /// Chunks, room per chunk and checksum chunks of the last `queue`.
    last: Option<(usize, usize, usize)>,
}

impl GpuPng {
    pub fn new(
        nvcomp: Arc<Nvcomp>,
        module: &Module,
        stream: Arc<Stream>,
        format: Format,
        algorithm: i32,
        zlib_level: u8,
    ) -> Result<GpuPng, String> {
        let k = Kernels::load(module).map_err(|e| e.to_string())?;
        // Device buffers are 256-byte aligned, chunks 64 KiB apart: check that nvCOMP asks no
        // more.
        let a = nvcomp
            .alignments(format, algorithm)
            .map_err(|e| e.to_string())?;
        if a.input > 256 || a.output > 256 || a.temp > 256 {
            return Err(format!("nvCOMP wants alignments {a:?}, more than 256 bytes"));
        }
        Ok(GpuPng {
            nvcomp,
            format,
            algorithm,
            zlib_level,
            k,
            stream,
            tables: None,
            compressed: None,
            temp: None,
            temp_for: None,
            packed: None,
            max_out: None,
            last: None,
        })
    }

    fn max_out(&mut self, chunk: usize) -> Result<usize, String> {
        if let Some((c, room)) = self.max_out {
            if c >= chunk {
                return Ok(room);
            }
        }
        let room = self
            .nvcomp
            .max_output_bytes(self.format, self.algorithm, chunk)
            .map_err(|e| e.to_string())?
            .div_ceil(256)
            * 256;
        self.max_out = Some((chunk, room));
        Ok(room)
    }

    /// Queues on the worker's stream the compression of `len` bytes of filtered rows at device
    /// address `rows` into this encoder's packed buffer (length word, then the zlib stream;
    /// ~0 when it would not fit `cap` bytes), and returns that buffer's device address.
    /// `marks`, when given, are recorded after compression and after the pack.
    pub fn queue(
        &mut self,
        rows: u64,
        len: usize,
        cap: usize,
        marks: Option<(&Event, &Event)>,
    ) -> Result<u64, String> {
        let cuda = |e: CudaError| e.to_string();
        let (n, chunk) = match self.format {
            Format::Deflate => (len.div_ceil(CHUNK).max(1), CHUNK.min(len.max(1))),
            Format::Gzip => (1, len.max(1)),
        };
        let adler_chunks = len.div_ceil(CHUNK).max(1);
        let room = self.max_out(chunk)?;
        let t = Tables::new(n, adler_chunks);
        let stream = self.stream.clone();
        let tables = driver::ensure_buffer(&mut self.tables, &stream, t.len).map_err(cuda)?;
        let compressed =
            driver::ensure_buffer(&mut self.compressed, &stream, n * room).map_err(cuda)?;
        let key = (n, chunk, len);
        let temp_bytes = match self.temp_for {
            Some((k, bytes)) if k == key => bytes,
            _ => {
                let bytes = self
                    .nvcomp
                    .temp_bytes(self.format, self.algorithm, n, chunk, len)
                    .map_err(|e| e.to_string())?;
                self.temp_for = Some((key, bytes));
                bytes
            }
        };
        let temp = driver::ensure_buffer(&mut self.temp, &stream, temp_bytes).map_err(cuda)?;
        let packed =
            driver::ensure_buffer(&mut self.packed, &stream, cap.div_ceil(16) * 16 + 16)
                .map_err(cuda)?;
        let at = |offset: usize| tables + offset as u64;
        self.last = Some((n, room, adler_chunks));

        let args = Args::default()
            .u64(rows)
            .u64(len as u64)
            .u64(chunk as u64)
            .u64(compressed)
            .u64(room as u64)
            .u32(n as u32)
            .u64(at(t.in_ptrs))
            .u64(at(t.in_sizes))
            .u64(at(t.out_ptrs));
        driver::launch(
            self.k.setup,
            (n as u32).div_ceil(256),
            256,
            0,
            &stream,
            args,
        )
        .map_err(cuda)?;
        // SAFETY: every table and buffer was just sized for n chunks of at most `chunk` bytes
        // (outputs `room` apart, temp as nvCOMP asked), all on this stream, and they outlive
        // the work: they are freed (stream-ordered) only when replaced or dropped.
        unsafe {
            self.nvcomp.compress_async(
                self.format,
                self.algorithm,
                at(t.in_ptrs),
                at(t.in_sizes),
                chunk,
                n,
                temp,
                temp_bytes,
                at(t.out_ptrs),
                at(t.out_sizes),
                at(t.nv_status),
                stream.raw(),
            )
        }
        .map_err(|e| e.to_string())?;
        if let Some((compressed_mark, _)) = marks {
            compressed_mark.record(&stream).map_err(cuda)?;
        }
        let args = Args::default()
            .u64(rows)
            .u64(len as u64)
            .u32(CHUNK as u32)
            .u64(at(t.adler));
        driver::launch(self.k.adler, adler_chunks as u32, 256, 0, &stream, args).map_err(cuda)?;
        match self.format {
            Format::Deflate => {
                let args = Args::default()
                    .u64(at(t.out_ptrs))
                    .u64(at(t.out_sizes))
                    .u64(at(t.nv_status))
                    .u32(n as u32)
                    .u64(at(t.pieces))
                    .u64(at(t.status));
                driver::launch(
                    self.k.pieces,
                    (n as u32).div_ceil(32),
                    32,
                    0,
                    &stream,
                    args,
                )
                .map_err(cuda)?;
            }
            Format::Gzip => {
                let args = Args::default()
                    .u64(compressed)
                    .u64(at(t.out_sizes))
                    .u64(at(t.nv_status))
                    .u64(len as u64)
                    .u64(at(t.pieces))
                    .u64(at(t.status));
                driver::launch(self.k.gzip_piece, 1, 32, 0, &stream, args).map_err(cuda)?;
            }
        }
        let header = crate::output::zlib::zlib_header(self.zlib_level);
        let args = Args::default()
            .u64(at(t.out_ptrs))
            .u64(at(t.pieces))
            .u64(at(t.status))
            .u32(n as u32)
            .u64(at(t.adler))
            .u32(adler_chunks as u32)
            .u64(CHUNK as u64)
            .u64(len as u64)
            .u32(u32::from(header[0]) << 8 | u32::from(header[1]))
            .u64(packed)
            .u64(cap as u64);
        driver::launch(self.k.pack, n as u32, 256, 0, &stream, args).map_err(cuda)?;
        if let Some((_, packed_mark)) = marks {
            packed_mark.record(&stream).map_err(cuda)?;
        }
        Ok(packed)
    }

    /// Queues the copy of the packed stream (as [`queue`](Self::queue) left it) to `dst`, a
    /// device-visible address of `cap` bytes (a mapped slot), with 16-byte stores; only the
    /// length word when packing failed.
    pub fn copy_packed(&self, dst: u64, cap: usize) -> Result<(), CudaError> {
        let Some(packed) = self.packed.as_ref() else {
            return Ok(());
        };
        let groups = (cap as u64).div_ceil(16);
        let args = Args::default().u64(packed.ptr()).u64(dst).u64(cap as u64);
        driver::launch(
            self.k.copy_packed,
            groups.div_ceil(256).clamp(1, 65_535 * 8) as u32,
            256,
            0,
            &self.stream,
            args,
        )
    }

    /// The compressed chunks of the last [`queue`](Self::queue) as nvCOMP wrote them (Deflate
    /// streams, or the gzip member). Synchronizes the stream; for `bench gpu-encode`.
    pub fn debug_chunks(&self) -> Result<Vec<Vec<u8>>, String> {
        let cuda = |e: CudaError| e.to_string();
        let (Some((n, room, adler_chunks)), Some(tables), Some(compressed)) =
            (self.last, self.tables.as_ref(), self.compressed.as_ref())
        else {
            return Err("nothing compressed yet".into());
        };
        let t = Tables::new(n, adler_chunks);
        let mut sizes = vec![0u64; n];
        // SAFETY: sizes holds n u64; the stream is synchronized before they are read.
        unsafe {
            driver::copy_dtoh_async(
                sizes.as_mut_ptr() as *mut u8,
                tables.ptr() + t.out_sizes as u64,
                8 * n,
                &self.stream,
            )
            .map_err(cuda)?
        };
        self.stream.synchronize().map_err(cuda)?;
        let mut out = Vec::with_capacity(n);
        for (i, &len) in sizes.iter().enumerate() {
            let len = (len as usize).min(room);
            let mut v = vec![0u8; len];
            // SAFETY: v holds len bytes, within chunk i's room; synchronized below.
            unsafe {
                driver::copy_dtoh_async(
                    v.as_mut_ptr(),
                    compressed.ptr() + (i * room) as u64,
                    len,
                    &self.stream,
                )
                .map_err(cuda)?
            };
            out.push(v);
        }
        self.stream.synchronize().map_err(cuda)?;
        Ok(out)
    }

    /// Frees the scratch memory (after an out-of-memory error).
    pub fn release(&mut self) {
        self.tables = None;
        self.compressed = None;
        self.temp = None;
        self.temp_for = None;
        self.packed = None;
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
        let t = Tables::new(62, 62);
        let offsets = [
            t.in_ptrs,
            t.in_sizes,
            t.out_ptrs,
            t.out_sizes,
            t.nv_status,
            t.pieces,
            t.status,
            t.adler,
        ];
        assert!(offsets.iter().all(|o| o % 256 == 0));
        assert!(offsets.windows(2).all(|w| w[0] < w[1]));
        assert!(t.adler + 4 * 62 <= t.len);
        assert!(t.pieces + 32 * 62 <= t.status);
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
    fn compression_levels_map_to_nvcomp_algorithms() {
        use crate::config::PngCompression as C;
        assert_eq!(algorithm_for(C::Fast), (1, 0));
        assert_eq!(algorithm_for(C::Balanced), (2, 1));
        assert_eq!(algorithm_for(C::Best), (4, 3));
    }
}
