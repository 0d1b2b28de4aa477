//! nvJPEG (`libnvjpeg.so.13`/`.12`): the calls dicomflow uses to decode one JPEG frame into
//! device memory, looked up at run time (cudarc has no bindings; the declarations follow
//! `nvjpeg.h` of CUDA 13.0). Two uses:
//! - lossless JPEG (process 14, DICOM .57/.70) through `NVJPEG_BACKEND_LOSSLESS_JPEG` and the
//!   batched API, 16-bit interleaved output (the library supports predictor 1 and up to two
//!   components; [`LosslessDecoder::decode`] asks it per frame);
//! - baseline/extended 8-bit DCT (DICOM .50/.51) through the hardware JPEG engines
//!   (`NVJPEG_BACKEND_HARDWARE`, batched API) where the GPU has them, the default (hybrid)
//!   backend otherwise.

use std::ffi::{c_int, c_uint, c_void};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use super::alloc::{AllocContext, AllocatorV2};
use super::ffi::{self, check, symbol};
use super::{Failure, OutputLayout};
use crate::backend::cuda::driver::{self, Device, DeviceBuffer, Stream};
use crate::backend::cuda::libs;

type Status = c_int;
type RawHandle = *mut c_void;
type JpegState = *mut c_void;
type JpegStream = *mut c_void;

/// What a missing entry point says about the library's age.
const HINT: &str = "nvJPEG older than CUDA 12.2?";

/// `nvjpegBackend_t`.
const BACKEND_DEFAULT: c_int = 0;
const BACKEND_HARDWARE: c_int = 3;
const BACKEND_LOSSLESS_JPEG: c_int = 6;

/// `nvjpegOutputFormat_t`.
const OUTPUT_UNCHANGED: c_int = 0;
const OUTPUT_Y: c_int = 2;
const OUTPUT_RGBI: c_int = 5;
const OUTPUT_UNCHANGEDI_U16: c_int = 7;

/// `nvjpegJpegEncoding_t`.
const ENCODING_BASELINE_DCT: c_int = 0xc0;
const ENCODING_EXTENDED_DCT: c_int = 0xc1;
const ENCODING_LOSSLESS_HUFFMAN: c_int = 0xc3;

/// `NVJPEG_FLAGS_HW_DECODE_NO_PIPELINE`: one frame per call, nothing held back for the next.
const FLAGS_HW_DECODE_NO_PIPELINE: c_uint = 1;

/// `nvjpegImage_t`.
#[repr(C)]
struct Image {
    channel: [*mut u8; 4],
    pitch: [usize; 4],
}

impl Image {
    fn empty() -> Image {
        Image {
            channel: [std::ptr::null_mut(); 4],
            pitch: [0; 4],
        }
    }
}

struct Fns {
    get_property: unsafe extern "C" fn(c_int, *mut c_int) -> Status,
    create_ex_v2: unsafe extern "C" fn(
        c_int,
        *mut AllocatorV2,
        *mut AllocatorV2,
        c_uint,
        *mut RawHandle,
    ) -> Status,
    destroy: unsafe extern "C" fn(RawHandle) -> Status,
    state_create: unsafe extern "C" fn(RawHandle, *mut JpegState) -> Status,
    state_destroy: unsafe extern "C" fn(JpegState) -> Status,
    stream_create: unsafe extern "C" fn(RawHandle, *mut JpegStream) -> Status,
    stream_destroy: unsafe extern "C" fn(JpegStream) -> Status,
    parse_header: unsafe extern "C" fn(RawHandle, *const u8, usize, JpegStream) -> Status,
    encoding: unsafe extern "C" fn(JpegStream, *mut c_int) -> Status,
    frame_dimensions: unsafe extern "C" fn(JpegStream, *mut c_uint, *mut c_uint) -> Status,
    components: unsafe extern "C" fn(JpegStream, *mut c_uint) -> Status,
    component_dimensions:
        unsafe extern "C" fn(JpegStream, c_uint, *mut c_uint, *mut c_uint) -> Status,
    precision: unsafe extern "C" fn(JpegStream, *mut c_uint) -> Status,
    batched_supported: unsafe extern "C" fn(RawHandle, JpegStream, *mut c_int) -> Status,
    batched_initialize: unsafe extern "C" fn(RawHandle, JpegState, c_int, c_int, c_int) -> Status,
    decode_batched: unsafe extern "C" fn(
        RawHandle,
        JpegState,
        *const *const u8,
        *const usize,
        *mut Image,
        *mut c_void,
    ) -> Status,
    decode: unsafe extern "C" fn(
        RawHandle,
        JpegState,
        *const u8,
        usize,
        c_int,
        *mut Image,
        *mut c_void,
    ) -> Status,
}

/// The loaded library.
pub struct Library {
    fns: Fns,
    /// Where it was found.
    pub path: PathBuf,
    /// `major.minor.patch` from `nvjpegGetProperty`.
    pub version: String,
    _lib: libloading::Library,
}

impl Library {
    /// Finds and loads nvJPEG (CUDA 13, else 12; search order of [`libs`]).
    pub fn load(configured: Option<&std::path::Path>) -> Result<Arc<Library>, String> {
        let found = libs::open(&["libnvjpeg.so.13", "libnvjpeg.so.12"], configured)
            .map_err(|e| e.to_string())?;
        let lib = found.library;
        // SAFETY: each type below is the declaration of that function in nvjpeg.h (CUDA 13.0).
        let fns = unsafe {
            Fns {
                get_property: symbol(&lib, "nvjpegGetProperty", HINT)?,
                create_ex_v2: symbol(&lib, "nvjpegCreateExV2", HINT)?,
                destroy: symbol(&lib, "nvjpegDestroy", HINT)?,
                state_create: symbol(&lib, "nvjpegJpegStateCreate", HINT)?,
                state_destroy: symbol(&lib, "nvjpegJpegStateDestroy", HINT)?,
                stream_create: symbol(&lib, "nvjpegJpegStreamCreate", HINT)?,
                stream_destroy: symbol(&lib, "nvjpegJpegStreamDestroy", HINT)?,
                parse_header: symbol(&lib, "nvjpegJpegStreamParseHeader", HINT)?,
                encoding: symbol(&lib, "nvjpegJpegStreamGetJpegEncoding", HINT)?,
                frame_dimensions: symbol(&lib, "nvjpegJpegStreamGetFrameDimensions", HINT)?,
                components: symbol(&lib, "nvjpegJpegStreamGetComponentsNum", HINT)?,
                component_dimensions: symbol(&lib, "nvjpegJpegStreamGetComponentDimensions", HINT)?,
                precision: symbol(&lib, "nvjpegJpegStreamGetSamplePrecision", HINT)?,
                batched_supported: symbol(&lib, "nvjpegDecodeBatchedSupported", HINT)?,
                batched_initialize: symbol(&lib, "nvjpegDecodeBatchedInitialize", HINT)?,
                decode_batched: symbol(&lib, "nvjpegDecodeBatched", HINT)?,
                decode: symbol(&lib, "nvjpegDecode", HINT)?,
            }
        };
        Ok(Arc::new(Library {
            version: ffi::version(fns.get_property),
            fns,
            path: found.path,
            _lib: lib,
        }))
    }
}

/// Where the host time of batched nvJPEG decodes (two frames or more per call) goes, summed
/// over the process and logged when the backend finishes: a call of eight frames seemed to take
/// about 7 ms of a worker's time in the pipeline against 1.5 ms in `bench decode --batches`;
/// these parts showed the calls were cheap and the time went elsewhere (BENCHMARKS.md,
/// "Session 20").
pub struct BatchTimes {
    /// Nanoseconds: header checks, `nvjpegDecodeBatchedInitialize`, `nvjpegDecodeBatched`,
    /// then (the worker's) rendering the decoded frames and the whole batch.
    ns: [AtomicU64; 5],
    /// Calls of `nvjpegDecodeBatchedInitialize`, and of `nvjpegDecodeBatched`.
    counts: [AtomicU64; 2],
}

/// The parts [`BatchTimes`] adds up.
#[derive(Debug, Clone, Copy)]
pub enum BatchPart {
    Headers = 0,
    Initialize = 1,
    Decode = 2,
    Render = 3,
    Whole = 4,
}

/// The process's [`BatchTimes`].
pub static BATCH_TIMES: BatchTimes = BatchTimes {
    ns: [
        AtomicU64::new(0),
        AtomicU64::new(0),
        AtomicU64::new(0),
        AtomicU64::new(0),
        AtomicU64::new(0),
    ],
    counts: [AtomicU64::new(0), AtomicU64::new(0)],
};

impl BatchTimes {
    /// Adds the time since `since` to `part`.
    pub fn add(&self, part: BatchPart, since: Instant) {
        let ns = u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.ns[part as usize].fetch_add(ns, Ordering::Relaxed);
    }

    /// One line for the log, when there was a batched call.
    pub fn said(&self) -> Option<String> {
        let ms = |p: BatchPart| self.ns[p as usize].load(Ordering::Relaxed) as f64 / 1e6;
        let (inits, calls) = (
            self.counts[0].load(Ordering::Relaxed),
            self.counts[1].load(Ordering::Relaxed),
        );
        (calls > 0).then(|| {
            format!(
                "batched nvJPEG host time: {calls} calls, {:.1} ms whole batches, of which header \
                 checks {:.1} ms, {inits} initializations {:.1} ms, decode calls {:.1} ms, \
                 rendering the decoded frames {:.1} ms",
                ms(BatchPart::Whole),
                ms(BatchPart::Headers),
                ms(BatchPart::Initialize),
                ms(BatchPart::Decode),
                ms(BatchPart::Render),
            )
        })
    }
}

/// What the parsed header says.
struct Header {
    encoding: c_int,
    width: u32,
    height: u32,
    components: u32,
    precision: u32,
    /// Every component at full resolution (no chroma subsampling).
    full_resolution: bool,
}

/// A library handle of one backend for one device, shared by its workers (nvJPEG handles are
/// thread safe); its allocators hand out the device's memory (alloc.rs).
pub struct Handle {
    lib: Arc<Library>,
    raw: RawHandle,
    device: Arc<Device>,
    _device_alloc: Box<AllocatorV2>,
    _pinned_alloc: Box<AllocatorV2>,
    _alloc: Box<AllocContext>,
}

// SAFETY: nvJPEG documents the library handle as thread safe; the allocator context it points
// to is Sync.
unsafe impl Send for Handle {}
// SAFETY: as above.
unsafe impl Sync for Handle {}

impl Handle {
    fn new(
        lib: &Arc<Library>,
        device: &Arc<Device>,
        backend: c_int,
        flags: c_uint,
    ) -> Result<Arc<Handle>, String> {
        device.bind().map_err(|e| e.to_string())?;
        let alloc = AllocContext::new(device);
        let mut device_alloc = Box::new(AllocatorV2::device(&alloc));
        let mut pinned_alloc = Box::new(AllocatorV2::pinned(&alloc));
        let mut raw: RawHandle = std::ptr::null_mut();
        // SAFETY: the allocator tables and their context outlive the handle (fields dropped after
        // it is destroyed); out pointer valid.
        check("nvjpegCreateExV2", unsafe {
            (lib.fns.create_ex_v2)(
                backend,
                &mut *device_alloc,
                &mut *pinned_alloc,
                flags,
                &mut raw,
            )
        })?;
        Ok(Arc::new(Handle {
            lib: lib.clone(),
            raw,
            device: device.clone(),
            _device_alloc: device_alloc,
            _pinned_alloc: pinned_alloc,
            _alloc: alloc,
        }))
    }

    /// The lossless JPEG backend.
    pub fn lossless(lib: &Arc<Library>, device: &Arc<Device>) -> Result<Arc<Handle>, String> {
        Handle::new(lib, device, BACKEND_LOSSLESS_JPEG, 0)
    }

    /// The hardware JPEG engines (fails on GPUs without them).
    pub fn hardware(lib: &Arc<Library>, device: &Arc<Device>) -> Result<Arc<Handle>, String> {
        Handle::new(lib, device, BACKEND_HARDWARE, FLAGS_HW_DECODE_NO_PIPELINE)
    }

    /// The default (hybrid CPU/GPU) DCT backend.
    pub fn default_backend(
        lib: &Arc<Library>,
        device: &Arc<Device>,
    ) -> Result<Arc<Handle>, String> {
        Handle::new(lib, device, BACKEND_DEFAULT, 0)
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        let _ = self.device.bind();
        // SAFETY: created in Handle::new, destroyed once, after every session holding it.
        unsafe { (self.lib.fns.destroy)(self.raw) };
    }
}

/// A decode state and parsed-stream handle on a shared handle, for one worker's stream.
struct Session {
    handle: Arc<Handle>,
    state: JpegState,
    jstream: JpegStream,
    stream: Arc<Stream>,
    /// The output format and batch size `nvjpegDecodeBatchedInitialize` was last called with;
    /// `None` before the first batched decode and after a failed one.
    batched: Option<(c_int, usize)>,
}

// SAFETY: a session is owned and used by one worker thread at a time; its state is used on one
// stream only.
unsafe impl Send for Session {}

impl Session {
    fn new(handle: &Arc<Handle>, stream: &Arc<Stream>) -> Result<Session, String> {
        stream.device.bind().map_err(|e| e.to_string())?;
        let f = &handle.lib.fns;
        let mut s = Session {
            handle: handle.clone(),
            state: std::ptr::null_mut(),
            jstream: std::ptr::null_mut(),
            stream: stream.clone(),
            batched: None,
        };
        // SAFETY: live handle; valid out pointers.
        unsafe {
            check(
                "nvjpegJpegStateCreate",
                (f.state_create)(handle.raw, &mut s.state),
            )?;
            check(
                "nvjpegJpegStreamCreate",
                (f.stream_create)(handle.raw, &mut s.jstream),
            )?;
        }
        Ok(s)
    }

    /// Parses the frame header of `data` and reads what the decode needs.
    fn header(&mut self, data: &[u8]) -> Result<Header, Failure> {
        let f = &self.handle.lib.fns;
        let rejected = Failure::Rejected;
        // SAFETY: data valid for its length during the call; the stream handle copies what it
        // keeps.
        check("nvjpegJpegStreamParseHeader", unsafe {
            (f.parse_header)(self.handle.raw, data.as_ptr(), data.len(), self.jstream)
        })
        .map_err(rejected)?;
        let (mut encoding, mut w, mut h, mut n, mut p) = (0, 0, 0, 0, 0);
        // SAFETY: parsed stream handle; valid out pointers.
        unsafe {
            check(
                "nvjpegJpegStreamGetJpegEncoding",
                (f.encoding)(self.jstream, &mut encoding),
            )
            .map_err(rejected)?;
            check(
                "nvjpegJpegStreamGetFrameDimensions",
                (f.frame_dimensions)(self.jstream, &mut w, &mut h),
            )
            .map_err(rejected)?;
            check(
                "nvjpegJpegStreamGetComponentsNum",
                (f.components)(self.jstream, &mut n),
            )
            .map_err(rejected)?;
            check(
                "nvjpegJpegStreamGetSamplePrecision",
                (f.precision)(self.jstream, &mut p),
            )
            .map_err(rejected)?;
        }
        let mut full_resolution = true;
        for c in 0..n.min(4) {
            let (mut cw, mut ch) = (0, 0);
            // SAFETY: c < components; valid out pointers.
            check("nvjpegJpegStreamGetComponentDimensions", unsafe {
                (f.component_dimensions)(self.jstream, c, &mut cw, &mut ch)
            })
            .map_err(rejected)?;
            full_resolution &= (cw, ch) == (w, h);
        }
        Ok(Header {
            encoding,
            width: w,
            height: h,
            components: n,
            precision: p,
            full_resolution,
        })
    }

    /// Whether the batched decoder of this backend takes the parsed stream.
    fn batched_supported(&self) -> Result<bool, Failure> {
        let mut unsupported: c_int = 1;
        // SAFETY: live handle and parsed stream; valid out pointer.
        check("nvjpegDecodeBatchedSupported", unsafe {
            (self.handle.lib.fns.batched_supported)(self.handle.raw, self.jstream, &mut unsupported)
        })
        .map_err(Failure::Rejected)?;
        // 0 means "supported".
        Ok(unsupported == 0)
    }

    /// Queues the decode of `data` as a batch of one into `out`.
    fn decode_batched(
        &mut self,
        data: &[u8],
        format: c_int,
        out: &mut Image,
    ) -> Result<(), Failure> {
        self.decode_batch(&[data], format, std::slice::from_mut(out))
    }

    /// Queues the decode of every codestream of `data` in one call, each into its `outs`
    /// descriptor (as many as `data`).
    fn decode_batch(
        &mut self,
        data: &[&[u8]],
        format: c_int,
        outs: &mut [Image],
    ) -> Result<(), Failure> {
        let f = &self.handle.lib.fns;
        let n = data.len();
        if n == 0 || outs.len() != n {
            return Err(Failure::Device(format!(
                "batch of {n} codestreams and {} outputs",
                outs.len()
            )));
        }
        if self.batched != Some((format, n)) {
            let size =
                c_int::try_from(n).map_err(|_| Failure::Device(format!("batch of {n} frames")))?;
            let t = Instant::now();
            // SAFETY: live handle and state.
            check("nvjpegDecodeBatchedInitialize", unsafe {
                (f.batched_initialize)(self.handle.raw, self.state, size, 1, format)
            })
            .map_err(Failure::Rejected)?;
            if n > 1 {
                BATCH_TIMES.add(BatchPart::Initialize, t);
                BATCH_TIMES.counts[0].fetch_add(1, Ordering::Relaxed);
            }
            self.batched = Some((format, n));
        }
        let ptrs: Vec<*const u8> = data.iter().map(|d| d.as_ptr()).collect();
        let lens: Vec<usize> = data.iter().map(|d| d.len()).collect();
        let t = Instant::now();
        // SAFETY: n inputs (valid for the call, and held unchanged until the stream is
        // synchronized) and n output descriptors pointing to device memory of the size the
        // caller checked against the headers.
        let r = check("nvjpegDecodeBatched", unsafe {
            (f.decode_batched)(
                self.handle.raw,
                self.state,
                ptrs.as_ptr(),
                lens.as_ptr(),
                outs.as_mut_ptr(),
                self.stream.raw() as *mut c_void,
            )
        });
        if n > 1 {
            BATCH_TIMES.add(BatchPart::Decode, t);
            BATCH_TIMES.counts[1].fetch_add(1, Ordering::Relaxed);
        }
        if r.is_err() {
            // The documentation asks for a new initialization after a failed batch.
            self.batched = None;
        }
        r.map_err(Failure::Rejected)
    }

    /// Queues a single-image decode of `data` into `out` (default/hybrid backend).
    fn decode_single(
        &mut self,
        data: &[u8],
        format: c_int,
        out: &mut Image,
    ) -> Result<(), Failure> {
        // SAFETY: as decode_batched.
        check("nvjpegDecode", unsafe {
            (self.handle.lib.fns.decode)(
                self.handle.raw,
                self.state,
                data.as_ptr(),
                data.len(),
                format,
                out,
                self.stream.raw() as *mut c_void,
            )
        })
        .map_err(Failure::Rejected)
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let f = &self.handle.lib.fns;
        let _ = self.stream.device.bind();
        let _ = self.stream.synchronize();
        // SAFETY: created by this session, destroyed once after the stream finished with them
        // (the shared handle outlives them: we hold an Arc).
        unsafe {
            if !self.jstream.is_null() {
                (f.stream_destroy)(self.jstream);
            }
            if !self.state.is_null() {
                (f.state_destroy)(self.state);
            }
        }
    }
}

fn check_dimensions(h: &Header, want: &OutputLayout) -> Result<(), Failure> {
    if (h.width, h.height, h.components) != (want.cols, want.rows, want.components) {
        return Err(Failure::Unsupported(format!(
            "frame header says {}x{}x{}, the DICOM header {}x{}x{}",
            h.width, h.height, h.components, want.cols, want.rows, want.components
        )));
    }
    Ok(())
}

/// Lossless JPEG (process 14) for one worker.
pub struct LosslessDecoder {
    session: Session,
    /// Rows are decoded with a pitch that is a multiple of this many bytes, into `pitched`,
    /// then packed into the destination (1: straight into the destination).
    pitch_align: usize,
    pitched: Option<DeviceBuffer>,
}

impl LosslessDecoder {
    pub fn new(
        handle: &Arc<Handle>,
        stream: &Arc<Stream>,
        pitch_align: usize,
    ) -> Result<LosslessDecoder, String> {
        Ok(LosslessDecoder {
            session: Session::new(handle, stream)?,
            pitch_align: pitch_align.max(1),
            pitched: None,
        })
    }

    /// Queues the decode of one lossless JPEG frame into `dst` (device memory,
    /// `want.bytes()`), 16-bit samples interleaved: the library's only output for this
    /// backend, so `want.bytes_per_sample` must be 2.
    pub fn decode(&mut self, data: &[u8], want: &OutputLayout, dst: u64) -> Result<(), Failure> {
        let stream = self.session.stream.clone();
        stream
            .device
            .bind()
            .map_err(|e| Failure::Device(e.to_string()))?;
        self.check(data, want)?;
        let row = want.row_bytes();
        let pitch = row.div_ceil(self.pitch_align) * self.pitch_align;
        let mut out = Image::empty();
        out.channel[0] = if pitch == row {
            dst as *mut u8
        } else {
            driver::ensure_buffer(&mut self.pitched, &stream, pitch * want.rows as usize)
                .map_err(|e| Failure::Device(e.to_string()))? as *mut u8
        };
        out.pitch[0] = pitch;
        self.session
            .decode_batched(data, OUTPUT_UNCHANGEDI_U16, &mut out)?;
        if pitch != row {
            driver::copy_2d_dtod_async(
                dst,
                row,
                out.channel[0] as u64,
                pitch,
                row,
                want.rows as usize,
                &stream,
            )
            .map_err(|e| Failure::Device(e.to_string()))?;
        }
        Ok(())
    }

    /// [`decode`](Self::decode) for several frames of the same layout in one library call,
    /// `data[i]` into `dsts[i]`; rows must need no wider pitch than their own.
    pub fn decode_batch(
        &mut self,
        data: &[&[u8]],
        want: &OutputLayout,
        dsts: &[u64],
    ) -> Result<(), Failure> {
        self.session
            .stream
            .device
            .bind()
            .map_err(|e| Failure::Device(e.to_string()))?;
        let row = want.row_bytes();
        if !row.is_multiple_of(self.pitch_align) {
            return Err(Failure::Unsupported(format!(
                "rows of {row} bytes need a pitch of a multiple of {}",
                self.pitch_align
            )));
        }
        let t = Instant::now();
        for d in data {
            self.check(d, want)?;
        }
        BATCH_TIMES.add(BatchPart::Headers, t);
        let mut outs: Vec<Image> = dsts
            .iter()
            .map(|&dst| {
                let mut out = Image::empty();
                out.channel[0] = dst as *mut u8;
                out.pitch[0] = row;
                out
            })
            .collect();
        self.session
            .decode_batch(data, OUTPUT_UNCHANGEDI_U16, &mut outs)
    }

    /// Parses the frame header of `data` and checks that this backend decodes it into `want`.
    fn check(&mut self, data: &[u8], want: &OutputLayout) -> Result<(), Failure> {
        let h = self.session.header(data)?;
        if h.encoding != ENCODING_LOSSLESS_HUFFMAN {
            return Err(Failure::Unsupported(format!(
                "SOF 0x{:02x} is not lossless Huffman",
                h.encoding
            )));
        }
        check_dimensions(&h, want)?;
        if want.bytes_per_sample != 2 || h.precision > 16 || !h.full_resolution {
            return Err(Failure::Unsupported(format!(
                "{}-bit samples in a {}-bit container",
                h.precision,
                8 * want.bytes_per_sample
            )));
        }
        if !self.session.batched_supported()? {
            return Err(Failure::Unsupported(
                "the lossless backend does not take this stream (predictor other than 1, or \
                 more than two components)"
                    .into(),
            ));
        }
        Ok(())
    }
}

/// How the decoded DCT frame is laid out in device memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DctOutput {
    /// One 8-bit plane (grayscale).
    Gray,
    /// Interleaved RGB, converted from YCbCr by the library (DICOM YBR_* photometric).
    RgbInterleaved,
    /// Three full-resolution planes as coded (DICOM RGB photometric: no conversion).
    Planar,
}

/// Baseline/extended 8-bit DCT JPEG for one worker: the hardware engines when the GPU has them
/// and the frame suits them, the default backend otherwise.
pub struct DctDecoder {
    stream: Arc<Stream>,
    /// The hardware backend's handle (`None` on GPUs without engines) and this worker's session.
    hardware: Option<Arc<Handle>>,
    hardware_session: Option<Session>,
    default: Result<Arc<Handle>, String>,
    default_session: Option<Session>,
}

impl DctDecoder {
    pub fn new(
        hardware: Option<Arc<Handle>>,
        default: Result<Arc<Handle>, String>,
        stream: &Arc<Stream>,
    ) -> DctDecoder {
        DctDecoder {
            stream: stream.clone(),
            hardware,
            hardware_session: None,
            default,
            default_session: None,
        }
    }

    /// Whether the hardware engines decoded frames.
    pub fn uses_hardware(&self) -> bool {
        self.hardware_session.is_some()
    }

    /// Queues the decode of one 8-bit DCT frame into `dst` (device memory of `want.bytes()`),
    /// `convert` = the DICOM header says YBR (DCMTK converts to RGB exactly then). Returns the
    /// layout written.
    pub fn decode(
        &mut self,
        data: &[u8],
        want: &OutputLayout,
        convert: bool,
        dst: u64,
    ) -> Result<DctOutput, Failure> {
        self.bind()?;
        let (format, layout) = Self::layout(want, convert)?;
        let mut out = Self::image(layout, want, dst);
        if let Some(hw) = self.hardware_session.as_mut() {
            let h = hw.header(data)?;
            Self::check(&h, want, layout)?;
            if hw.batched_supported()? {
                return hw.decode_batched(data, format, &mut out).map(|_| layout);
            }
        }
        if self.default_session.is_none() {
            let handle = self
                .default
                .as_ref()
                .map_err(|e| Failure::Device(e.clone()))?;
            self.default_session =
                Some(Session::new(handle, &self.stream).map_err(Failure::Device)?);
        }
        let Some(sw) = self.default_session.as_mut() else {
            return Err(Failure::Device("nvJPEG default backend unavailable".into()));
        };
        let h = sw.header(data)?;
        Self::check(&h, want, layout)?;
        sw.decode_single(data, format, &mut out).map(|_| layout)
    }

    /// [`decode`](Self::decode) for several frames of the same layout in one call of the
    /// hardware engines' batched decoder, `data[i]` into `dsts[i]`; frames the engines do not
    /// take (or a GPU without them) are refused, for the caller to decode one by one.
    pub fn decode_batch(
        &mut self,
        data: &[&[u8]],
        want: &OutputLayout,
        convert: bool,
        dsts: &[u64],
    ) -> Result<DctOutput, Failure> {
        self.bind()?;
        let (format, layout) = Self::layout(want, convert)?;
        let Some(hw) = self.hardware_session.as_mut() else {
            return Err(Failure::Unsupported("no hardware JPEG engines".into()));
        };
        let t = Instant::now();
        for d in data {
            let h = hw.header(d)?;
            Self::check(&h, want, layout)?;
            if !hw.batched_supported()? {
                return Err(Failure::Unsupported(
                    "the hardware engines do not take this stream".into(),
                ));
            }
        }
        BATCH_TIMES.add(BatchPart::Headers, t);
        let mut outs: Vec<Image> = dsts
            .iter()
            .map(|&dst| Self::image(layout, want, dst))
            .collect();
        hw.decode_batch(data, format, &mut outs).map(|_| layout)
    }

    /// Makes the worker's device current, and its hardware engines' session on first use (a GPU
    /// without them, or a session that cannot be made, leaves the default backend).
    fn bind(&mut self) -> Result<(), Failure> {
        self.stream
            .device
            .bind()
            .map_err(|e| Failure::Device(e.to_string()))?;
        if self.hardware_session.is_none() {
            if let Some(h) = &self.hardware {
                match Session::new(h, &self.stream) {
                    Ok(s) => self.hardware_session = Some(s),
                    Err(_) => self.hardware = None,
                }
            }
        }
        Ok(())
    }

    /// The library's output format and the layout it writes for `want` (`convert`: YBR → RGB).
    fn layout(want: &OutputLayout, convert: bool) -> Result<(c_int, DctOutput), Failure> {
        if want.bytes_per_sample != 1 {
            return Err(Failure::Unsupported(
                "DCT output into a 16-bit container".into(),
            ));
        }
        match (want.components, convert) {
            (1, _) => Ok((OUTPUT_Y, DctOutput::Gray)),
            (3, true) => Ok((OUTPUT_RGBI, DctOutput::RgbInterleaved)),
            (3, false) => Ok((OUTPUT_UNCHANGED, DctOutput::Planar)),
            (n, _) => Err(Failure::Unsupported(format!("{n} components"))),
        }
    }

    /// The output descriptor of `layout` at `dst`.
    fn image(layout: DctOutput, want: &OutputLayout, dst: u64) -> Image {
        let mut out = Image::empty();
        let plane = want.cols as usize * want.rows as usize;
        match layout {
            DctOutput::Gray => {
                out.channel[0] = dst as *mut u8;
                out.pitch[0] = want.cols as usize;
            }
            DctOutput::RgbInterleaved => {
                out.channel[0] = dst as *mut u8;
                out.pitch[0] = 3 * want.cols as usize;
            }
            DctOutput::Planar => {
                for c in 0..3 {
                    out.channel[c] = (dst + (c * plane) as u64) as *mut u8;
                    out.pitch[c] = want.cols as usize;
                }
            }
        }
        out
    }

    fn check(h: &Header, want: &OutputLayout, layout: DctOutput) -> Result<(), Failure> {
        if h.encoding != ENCODING_BASELINE_DCT && h.encoding != ENCODING_EXTENDED_DCT {
            return Err(Failure::Unsupported(format!(
                "SOF 0x{:02x} is not sequential DCT",
                h.encoding
            )));
        }
        if h.precision != 8 {
            return Err(Failure::Unsupported(format!(
                "{}-bit DCT samples",
                h.precision
            )));
        }
        check_dimensions(h, want)?;
        if layout == DctOutput::Planar && !h.full_resolution {
            return Err(Failure::Unsupported(
                "subsampled components without colour conversion".into(),
            ));
        }
        Ok(())
    }
}
