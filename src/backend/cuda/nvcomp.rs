//! The part of NVIDIA nvCOMP's C API the GPU PNG encoder uses: batched Deflate and Gzip
//! compression (`nvcomp/deflate.h`, `nvcomp/gzip.h` of nvCOMP 6), loaded at run time from
//! `libnvcomp.so.6` (pip `nvidia-libnvcomp-cu13`) through [`super::libs`]. cudarc has no
//! bindings for it; the few functions are looked up by name and called through the
//! signatures below, transcribed from those headers.
//!
//! nvCOMP runs on the CUDA runtime it links statically; the runtime uses the primary context
//! current on the calling thread, which is the context the driver-API code of this backend
//! retains and binds ([`super::driver::Device::bind`]), so a `CUstream` of ours is a valid
//! `cudaStream_t` for it.

use std::ffi::{c_char, c_void, CStr};
use std::path::Path;

use cudarc::driver::sys::CUstream;

use super::libs::{self, FoundLibrary};

/// `nvcompStatus_t`.
type Status = i32;
const SUCCESS: Status = 0;

/// `nvcompBatchedDeflateCompressOpts_t` and `nvcompBatchedGzipCompressOpts_t` (same layout:
/// an `int` algorithm and 60 reserved bytes that must be zero), passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
struct CompressOpts {
    algorithm: i32,
    reserved: [u8; 60],
}

impl CompressOpts {
    fn new(algorithm: i32) -> Self {
        CompressOpts {
            algorithm,
            reserved: [0; 60],
        }
    }
}

/// `nvcompAlignmentRequirements_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Alignments {
    pub input: usize,
    pub output: usize,
    pub temp: usize,
}

/// `nvcompProperties_t`.
#[repr(C)]
#[derive(Default)]
struct Properties {
    version: u32,
    cudart_version: u32,
}

type GetProperties = unsafe extern "C" fn(*mut Properties) -> Status;
type StatusString = unsafe extern "C" fn(Status) -> *const c_char;
type GetAlignments = unsafe extern "C" fn(CompressOpts, *mut Alignments) -> Status;
type GetTempSize =
    unsafe extern "C" fn(usize, usize, CompressOpts, *mut usize, usize, CUstream) -> Status;
type GetMaxOutput = unsafe extern "C" fn(usize, CompressOpts, *mut usize) -> Status;
type CompressAsync = unsafe extern "C" fn(
    *const *const c_void,
    *const usize,
    usize,
    usize,
    *mut c_void,
    usize,
    *const *mut c_void,
    *mut usize,
    CompressOpts,
    *mut Status,
    CUstream,
) -> Status;

/// Which nvCOMP format compresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Raw Deflate (RFC 1951) per chunk of at most 64 KiB: the chunks are stitched into one
    /// stream afterwards.
    Deflate,
    /// A gzip member (RFC 1952) per chunk of any size: nvCOMP splits and joins internally, so a
    /// whole slice is one chunk whose body is one Deflate stream.
    Gzip,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Deflate => "deflate",
            Format::Gzip => "gzip",
        }
    }
}

/// The entry points of one format.
struct Entry {
    alignments: GetAlignments,
    temp_size: GetTempSize,
    max_output: GetMaxOutput,
    compress: CompressAsync,
}

/// A failed nvCOMP call: which, and nvCOMP's own words for the status.
#[derive(Debug, Clone, thiserror::Error)]
#[error("nvCOMP {call}: {message} (status {status})")]
pub struct NvcompError {
    pub call: &'static str,
    pub status: i32,
    pub message: String,
}

/// libnvcomp, loaded, with the functions this backend calls.
pub struct Nvcomp {
    deflate: Entry,
    gzip: Entry,
    status_string: StatusString,
    /// nvCOMP's version, e.g. "6.0.0".
    pub version: String,
    /// Where it was loaded from.
    pub path: std::path::PathBuf,
    // Last: the function pointers above stay valid while this is alive.
    _library: FoundLibrary,
}

impl std::fmt::Debug for Nvcomp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nvcomp")
            .field("version", &self.version)
            .field("path", &self.path)
            .finish()
    }
}

/// # Safety
/// As [`libs::symbol`]: `T` is the symbol's exact signature, and the pointer is dropped with the
/// library (the struct keeps both).
unsafe fn symbol<T: Copy>(lib: &libloading::Library, name: &str) -> Result<T, String> {
    // SAFETY: forwarded contract.
    unsafe { libs::symbol(lib, "libnvcomp", name) }
}

impl Nvcomp {
    /// Loads `libnvcomp.so.6` (search order of [`libs`]; `configured` is `gpu.library_path`).
    pub fn load(configured: Option<&Path>) -> Result<Nvcomp, String> {
        let found = libs::open(&["libnvcomp.so.6"], configured).map_err(|e| e.to_string())?;
        let lib = &found.library;
        // SAFETY: each type below is the signature declared in nvCOMP 6's headers
        // (nvcomp.h, nvcomp/deflate.h, nvcomp/gzip.h) for the symbol of that name.
        let (deflate, gzip, get_properties, status_string) = unsafe {
            (
                Entry {
                    alignments: symbol(lib, "nvcompBatchedDeflateCompressGetRequiredAlignments")?,
                    temp_size: symbol(lib, "nvcompBatchedDeflateCompressGetTempSize")?,
                    max_output: symbol(lib, "nvcompBatchedDeflateCompressGetMaxOutputChunkSize")?,
                    compress: symbol(lib, "nvcompBatchedDeflateCompressAsync")?,
                },
                Entry {
                    alignments: symbol(lib, "nvcompBatchedGzipCompressGetRequiredAlignments")?,
                    temp_size: symbol(lib, "nvcompBatchedGzipCompressGetTempSize")?,
                    max_output: symbol(lib, "nvcompBatchedGzipCompressGetMaxOutputChunkSize")?,
                    compress: symbol(lib, "nvcompBatchedGzipCompressAsync")?,
                },
                symbol::<GetProperties>(lib, "nvcompGetProperties")?,
                symbol::<StatusString>(lib, "nvcompGetStatusString")?,
            )
        };
        let mut props = Properties::default();
        // SAFETY: props is a valid out pointer of the declared struct.
        let version = if unsafe { get_properties(&mut props) } == SUCCESS {
            let v = props.version;
            format!("{}.{}.{}", v / 1000, v % 1000 / 100, v % 100)
        } else {
            "unknown".into()
        };
        Ok(Nvcomp {
            deflate,
            gzip,
            status_string,
            version,
            path: found.path.clone(),
            _library: found,
        })
    }

    fn entry(&self, format: Format) -> &Entry {
        match format {
            Format::Deflate => &self.deflate,
            Format::Gzip => &self.gzip,
        }
    }

    fn check(&self, call: &'static str, status: Status) -> Result<(), NvcompError> {
        if status == SUCCESS {
            return Ok(());
        }
        // SAFETY: nvcompGetStatusString returns a static NUL-terminated string or null.
        let text = unsafe { (self.status_string)(status) };
        let message = if text.is_null() {
            "unknown status".to_string()
        } else {
            // SAFETY: non-null, NUL-terminated, static.
            unsafe { CStr::from_ptr(text) }
                .to_string_lossy()
                .into_owned()
        };
        Err(NvcompError {
            call,
            status,
            message,
        })
    }

    /// Buffer alignments the compressor needs for `algorithm`.
    pub fn alignments(&self, format: Format, algorithm: i32) -> Result<Alignments, NvcompError> {
        let mut a = Alignments::default();
        // SAFETY: valid out pointer; options passed by value as declared.
        let s = unsafe { (self.entry(format).alignments)(CompressOpts::new(algorithm), &mut a) };
        self.check("CompressGetRequiredAlignments", s)?;
        Ok(a)
    }

    /// Device scratch bytes for compressing `chunks` chunks of at most `max_chunk` bytes,
    /// `total` bytes in all.
    pub fn temp_bytes(
        &self,
        format: Format,
        algorithm: i32,
        chunks: usize,
        max_chunk: usize,
        total: usize,
    ) -> Result<usize, NvcompError> {
        let mut bytes = 0usize;
        // SAFETY: valid out pointer; the call enqueues nothing (null stream is allowed).
        let s = unsafe {
            (self.entry(format).temp_size)(
                chunks,
                max_chunk,
                CompressOpts::new(algorithm),
                &mut bytes,
                total,
                std::ptr::null_mut(),
            )
        };
        self.check("CompressGetTempSize", s)?;
        Ok(bytes)
    }

    /// Room each compressed chunk of at most `max_chunk` input bytes needs.
    pub fn max_output_bytes(
        &self,
        format: Format,
        algorithm: i32,
        max_chunk: usize,
    ) -> Result<usize, NvcompError> {
        let mut bytes = 0usize;
        // SAFETY: valid out pointer.
        let s = unsafe {
            (self.entry(format).max_output)(max_chunk, CompressOpts::new(algorithm), &mut bytes)
        };
        self.check("CompressGetMaxOutputChunkSize", s)?;
        Ok(bytes)
    }

    /// Queues the compression of `chunks` chunks on `stream`. Every pointer argument is device
    /// memory: arrays of `chunks` input pointers, input sizes, output pointers, output sizes
    /// (written) and statuses (written).
    ///
    /// # Safety
    /// The arrays and the buffers they point to must be valid device memory of the sizes the
    /// nvCOMP documentation requires (outputs of [`max_output_bytes`](Self::max_output_bytes),
    /// `temp` of [`temp_bytes`](Self::temp_bytes), all aligned as
    /// [`alignments`](Self::alignments) says) until the stream has run the work.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn compress_async(
        &self,
        format: Format,
        algorithm: i32,
        in_ptrs: u64,
        in_sizes: u64,
        max_chunk: usize,
        chunks: usize,
        temp: u64,
        temp_bytes: usize,
        out_ptrs: u64,
        out_sizes: u64,
        statuses: u64,
        stream: CUstream,
    ) -> Result<(), NvcompError> {
        // SAFETY: forwarded contract; device addresses are passed as the pointers nvCOMP
        // declares (it only dereferences them on the device).
        let s = unsafe {
            (self.entry(format).compress)(
                in_ptrs as *const *const c_void,
                in_sizes as *const usize,
                max_chunk,
                chunks,
                temp as *mut c_void,
                temp_bytes,
                out_ptrs as *const *mut c_void,
                out_sizes as *mut usize,
                CompressOpts::new(algorithm),
                statuses as *mut Status,
                stream,
            )
        };
        self.check("CompressAsync", s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_have_the_header_layout() {
        // nvcompBatchedDeflateCompressOpts_t: int + char[60].
        assert_eq!(std::mem::size_of::<CompressOpts>(), 64);
        assert_eq!(std::mem::size_of::<Alignments>(), 24);
        assert_eq!(std::mem::size_of::<Properties>(), 8);
    }

    #[test]
    fn a_missing_library_is_a_clear_error() {
        let dir = crate::scratch_dir("nvcomp-missing");
        // Only meaningful where libnvcomp is absent (CI, this dev box); elsewhere it loads.
        if let Err(e) = Nvcomp::load(Some(&dir)) {
            assert!(e.contains("libnvcomp.so.6 not found"), "{e}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
