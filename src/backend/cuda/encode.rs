//! PNG compression on the GPU: the filtered rows a render worker leaves in device memory
//! become one zlib stream in device memory, ready to be copied into the output slot; the
//! writer only wraps it in the PNG container (`output::png::png_from_zlib`) and writes it.
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

use super::driver::{self, Args, CudaError, DeviceBuffer, Event, Function, Module, Stream};
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
/// one-entry arrays (input pointer and size, output pointer and size, status) and the chunks'
/// Adler-32.
struct Tables {
    in_ptr: usize,
    in_size: usize,
    out_ptr: usize,
    out_size: usize,
    status: usize,
    adler: usize,
    len: usize,
}

impl Tables {
    fn new(adler_chunks: usize) -> Tables {
        Tables {
            in_ptr: 0,
            in_size: 256,
            out_ptr: 512,
            out_size: 768,
            status: 1024,
            adler: 1280,
            len: 1280 + (4 * adler_chunks).div_ceil(256) * 256,
        }
    }
}

/// How hard nvCOMP works on PNG rows. nvCOMP 6 documents its algorithms as 0 entropy-only
/// (fastest), 1 high throughput / low ratio (its default), 2 medium ("beats zlib level 1"), 4
/// higher ("beats zlib level 6"), 5 highest. Measured on phantom CT rows (BENCHMARKS.md): 0
/// makes files 1.28–1.32× the CPU's `fast`, 1 0.91–0.96×, 2 0.88–0.90× (about the CPU's
/// `balanced`), 4 0.95× at 15–20× the time of 2. So `fast` PNG output is [`PngEffort::Fast`]
/// (algorithm 1), `balanced` and `best` are [`PngEffort::Strong`] (algorithm 2).
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

/// An encoder the GPU can run for a run's output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuEncodeWish {
    /// PNG: rows filtered with `filter` (a PNG filter type, or 5 for the adaptive choice; see
    /// kernels/png.cu), compressed by nvCOMP.
    Png { filter: u32, effort: PngEffort },
    /// Baseline JPEG at `quality` by nvJPEG.
    Jpeg { quality: u8 },
}

impl GpuEncodeWish {
    /// The library the encoder needs.
    pub fn library(self) -> &'static str {
        match self {
            GpuEncodeWish::Png { .. } => "libnvcomp.so.6",
            GpuEncodeWish::Jpeg { .. } => "libnvjpeg.so.13",
        }
    }
}

/// One worker's GPU PNG compressor (it owns scratch device memory on the worker's stream).
pub struct GpuPng {
    nvcomp: Arc<Nvcomp>,
    pub algorithm: i32,
    zlib_header: [u8; 2],
    k: Kernels,
    stream: Arc<Stream>,
    tables: Option<DeviceBuffer>,
    temp: Option<DeviceBuffer>,
    /// The input size the temp size was asked for, and the answer.
    temp_for: Option<(usize, usize)>,
    packed: Option<DeviceBuffer>,
    /// nvCOMP's output room for an input size: (size, room).
    room_for: Option<(usize, usize)>,
}

impl GpuPng {
    pub fn new(
        nvcomp: Arc<Nvcomp>,
        module: &Module,
        stream: Arc<Stream>,
        algorithm: i32,
        zlib_header: [u8; 2],
    ) -> Result<GpuPng, String> {
        let k = Kernels::load(module).map_err(|e| e.to_string())?;
        // Device buffers are 256-byte aligned: check that nvCOMP asks no more.
        let a = nvcomp
            .alignments(Format::Gzip, algorithm)
            .map_err(|e| e.to_string())?;
        if a.input > 256 || a.output > 256 || a.temp > 256 {
            return Err(format!(
                "nvCOMP wants alignments {a:?}, more than 256 bytes"
            ));
        }
        Ok(GpuPng {
            nvcomp,
            algorithm,
            zlib_header,
            k,
            stream,
            tables: None,
            temp: None,
            temp_for: None,
            packed: None,
            room_for: None,
        })
    }

    /// Queues on the worker's stream the compression of `len` bytes of filtered rows at device
    /// address `rows` into this encoder's packed buffer (length word, then the zlib stream;
    /// ~0 when it would not fit `cap` bytes), and returns that buffer's device address.
    /// `compressed`, when given, is recorded after nvCOMP's work (the rest is the checksum and
    /// the rewrite).
    pub fn queue(
        &mut self,
        rows: u64,
        len: usize,
        cap: usize,
        compressed: Option<&Event>,
    ) -> Result<u64, String> {
        let cuda = |e: CudaError| e.to_string();
        let nv = |e: super::nvcomp::NvcompError| e.to_string();
        let len = len.max(1);
        let room = match self.room_for {
            Some((l, room)) if l == len => room,
            _ => {
                let room = self
                    .nvcomp
                    .max_output_bytes(Format::Gzip, self.algorithm, len)
                    .map_err(nv)?;
                self.room_for = Some((len, room));
                room
            }
        };
        let temp_bytes = match self.temp_for {
            Some((l, bytes)) if l == len => bytes,
            _ => {
                let bytes = self
                    .nvcomp
                    .temp_bytes(Format::Gzip, self.algorithm, 1, len, len)
                    .map_err(nv)?;
                self.temp_for = Some((len, bytes));
                bytes
            }
        };
        let adler_chunks = len.div_ceil(CHUNK);
        let t = Tables::new(adler_chunks);
        let stream = self.stream.clone();
        let tables = driver::ensure_buffer(&mut self.tables, &stream, t.len).map_err(cuda)?;
        let temp = driver::ensure_buffer(&mut self.temp, &stream, temp_bytes).map_err(cuda)?;
        // Room for nvCOMP's worst case and for the 16-byte copy of up to `cap` bytes.
        let packed_len = room.max(cap).div_ceil(16) * 16 + 16;
        let packed = driver::ensure_buffer(&mut self.packed, &stream, packed_len).map_err(cuda)?;
        let at = |offset: usize| tables + offset as u64;

        let args = Args::default()
            .u64(rows)
            .u64(len as u64)
            .u64(packed)
            .u64(at(t.in_ptr))
            .u64(at(t.in_size))
            .u64(at(t.out_ptr));
        driver::launch(&self.k.setup, 1, 32, 0, &stream, args).map_err(cuda)?;
        // SAFETY: the one-entry tables, the temp buffer (nvCOMP's size for this input) and the
        // packed buffer (nvCOMP's worst-case output for it) were sized above on this stream and
        // live until replaced or dropped, both stream-ordered after this work.
        unsafe {
            self.nvcomp.compress_async(
                Format::Gzip,
                self.algorithm,
                at(t.in_ptr),
                at(t.in_size),
                len,
                1,
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
        let args = Args::default()
            .u64(rows)
            .u64(len as u64)
            .u32(CHUNK as u32)
            .u64(at(t.adler));
        driver::launch(&self.k.adler, adler_chunks as u32, 256, 0, &stream, args).map_err(cuda)?;
        let header = self.zlib_header;
        let args = Args::default()
            .u64(packed)
            .u64(at(t.out_size))
            .u64(at(t.status))
            .u64(len as u64)
            .u64(at(t.adler))
            .u32(adler_chunks as u32)
            .u64(CHUNK as u64)
            .u32(u32::from(header[0]) << 8 | u32::from(header[1]))
            .u64(cap as u64);
        driver::launch(&self.k.to_zlib, 1, 32, 0, &stream, args).map_err(cuda)?;
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
        self.tables = None;
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
        let t = Tables::new(62);
        let offsets = [
            t.in_ptr, t.in_size, t.out_ptr, t.out_size, t.status, t.adler,
        ];
        assert!(offsets.iter().all(|o| o % 256 == 0));
        assert!(offsets.windows(2).all(|w| w[0] < w[1]));
        assert!(t.adler + 4 * 62 <= t.len);
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
